'use strict'
// The addon's deadline-header functions (lib/native.js) at the boundary: answers match a
// reference written from the header definitions (gRPC's PROTOCOL-HTTP2 grammar for
// grpc-timeout, whole milliseconds for the others); a bad header value is a reason, never
// an error; out-of-range numbers are errors that change nothing. The package's facade
// re-exports these with its own type checks.

const test = require('node:test')
const assert = require('node:assert/strict')
const fc = require('fast-check')
const N = require('../lib/native')

const UNITS = { H: 3600e9, M: 60e9, S: 1e9, m: 1e6, u: 1e3, n: 1 }
const CAP = 3600e9

/** A value is a comma-separated list (a header sent twice, its lines joined): the
 * smallest valid item, else the first item's reason. */
function reference (name, bytes) {
  const items = Buffer.from(bytes).toString('latin1').split(',').map((t) => referenceItem(name, t))
  const valid = items.filter((x) => x.ignored === null)
  return valid.length ? valid.reduce((a, b) => (b.budgetMs < a.budgetMs ? b : a)) : items[0]
}

function referenceItem (name, text) {
  text = text.replace(/^[ \t]+|[ \t]+$/g, '')
  const negative = text.startsWith('-')
  let body = negative ? text.slice(1) : text
  let per = 1e6
  if (name.toLowerCase() === 'grpc-timeout') {
    const unit = body.slice(-1)
    if (!(unit in UNITS)) return { budgetMs: null, ignored: 'malformed' }
    per = UNITS[unit]
    body = body.slice(0, -1)
    if (body.length > 8) return { budgetMs: null, ignored: 'malformed' }
  }
  if (!/^[0-9]+$/.test(body)) return { budgetMs: null, ignored: 'malformed' }
  if (negative) return { budgetMs: null, ignored: 'negative' }
  const ns = BigInt(body) * BigInt(per)
  return ns <= BigInt(CAP) ? { budgetMs: Number(ns) / 1e6, ignored: null } : { budgetMs: null, ignored: 'too_large' }
}

const names = fc.constantFrom('grpc-timeout', 'Grpc-Timeout', 'surgeguard-timeout-ms', 'x-envoy-expected-rq-timeout-ms', 'x-mine')
const near = fc.oneof(
  fc.stringMatching(/^[ \t]?-?[0-9]{0,10}[HMSmun]?[ \t]?$/),
  fc.stringMatching(/^[ \t]?-?[0-9]{0,6}[HMSmun]?[ \t]?(,[ \t]?-?[0-9]{0,6}[HMSmun]?[ \t]?){1,2}$/)
).map((s) => Buffer.from(s, 'latin1'))

test('parsing matches the header definitions, for any bytes', () => {
  fc.assert(fc.property(names, fc.oneof(fc.uint8Array({ maxLength: 12 }), near), (name, bytes) => {
    assert.deepEqual(N.parseDeadlineHeader(name, Buffer.from(bytes)), reference(name, bytes))
  }), { numRuns: 2000 })
})

test('the smallest valid budget wins; ignored headers are listed in order', () => {
  const header = fc.tuple(names, fc.stringMatching(/^-?[0-9]{1,9}[HMSmun]?$/))
  fc.assert(fc.property(fc.array(header, { maxLength: 6 }), (headers) => {
    const r = N.parseDeadlineHeaders(headers)
    const each = headers.map(([n, v]) => [n, reference(n, Buffer.from(v))])
    const valid = each.filter(([, x]) => x.ignored === null).map(([, x]) => x.budgetMs)
    assert.equal(r.budgetMs, valid.length ? Math.min(...valid) : null)
    assert.deepEqual(r.ignored, each.filter(([, x]) => x.ignored !== null).map(([n, x]) => [n, x.ignored]))
  }))
})

test('formatting rounds down, parses back, and is null when nothing is left', () => {
  fc.assert(fc.property(fc.bigInt(0n, 2n * BigInt(CAP)), fc.integer({ min: 0, max: 1000 }), fc.boolean(), (budget, marginUs, grpc) => {
    const now = 10n ** 12n
    const name = grpc ? 'grpc-timeout' : 'surgeguard-timeout-ms'
    const v = N.formatDeadlineHeader(name, now + budget, marginUs / 1000, now)
    let left = budget - BigInt(marginUs) * 1000n
    if (left < 0n) left = 0n
    if (left > BigInt(CAP)) left = BigInt(CAP)
    if (left < (grpc ? 1n : 1000000n)) return v === null
    const back = N.parseDeadlineHeader(name, v)
    return back.ignored === null && back.budgetMs * 1e6 <= Number(left)
  }))
})

test('out-of-range numbers are RangeErrors', () => {
  for (const bad of [-1n, (1n << 62n) + 1n, 1n << 64n]) {
    assert.throws(() => N.formatDeadlineHeader('grpc-timeout', bad), /deadlineNs/)
    assert.throws(() => N.deadlineAt(1, bad), /nowNs/)
    assert.throws(() => N.formatDeadlineHeader('grpc-timeout', 10n, 0, bad), /nowNs/)
  }
  for (const bad of [-1, NaN, Infinity]) {
    assert.throws(() => N.deadlineAt(bad, 0n), /budgetMs/)
    assert.throws(() => N.formatDeadlineHeader('grpc-timeout', 10n, bad, 0n), /marginMs/)
  }
  assert.equal(N.deadlineAt(1000, 1n << 62n), 1n << 62n)
  assert.equal(N.DEADLINE_MAX_BUDGET_MS, 3600000)
  assert.deepEqual(N.deadlineHeaders(), ['grpc-timeout', 'x-envoy-expected-rq-timeout-ms', 'surgeguard-timeout-ms'])
})
