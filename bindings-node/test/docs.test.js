'use strict'
// The README and index.d.ts against the runtime: the defaults table, the defaults the
// type comments state, and README examples run as written. A default changed in code (or
// in a doc) fails here until the other follows.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const sg = require('..')

const README = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
const DTS = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')

/** The second cell of the README table row whose first cell starts with `label`. */
function defaultsRow (label) {
  const row = README.split('\n').find((l) => l.startsWith(`| ${label}`))
  assert.ok(row, `README: no row "${label}" in the defaults table`)
  return row.split('|')[2].trim()
}

/** The README's ```js blocks. */
function jsBlocks () {
  return [...README.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1])
}

/** The doc comment of option `key` in interface `iface` of index.d.ts. */
function dtsDoc (iface, key) {
  const body = new RegExp(`^export interface ${iface} (?:extends \\w+ )?\\{([\\s\\S]*?)^\\}`, 'm').exec(DTS)
  assert.ok(body, `index.d.ts: no interface ${iface}`)
  const m = new RegExp(`/\\*\\*((?:(?!\\*/)[\\s\\S])*)\\*/\\n {2}${key}\\?:`).exec(body[1])
  assert.ok(m, `index.d.ts: no doc comment on ${iface}.${key}`)
  return m[1]
}

/** The number a doc comment gives as the default: `(default 3)`, `(default 0.1: 10%)`. */
function statedDefault (doc) {
  const m = /\(default (\d[\d.]*)/.exec(doc)
  assert.ok(m, `no "(default N" in: ${doc}`)
  return Number(m[1])
}

test('README defaults: the initial limit of every algorithm', () => {
  const cell = defaultsRow('initial limit')
  const list = /the algorithm's own: ([^.]*)\./.exec(cell)
  assert.ok(list, cell)
  // "aimd 10; fixed, hysteresis, gradient, gradient2 and vegas 20"
  const stated = {}
  for (const group of list[1].split(';')) {
    const m = /^\s*(.*?)\s+(\d+)\s*$/.exec(group)
    assert.ok(m, `cannot read "${group}"`)
    for (const a of m[1].split(/,\s*|\s+and\s+/)) stated[a] = Number(m[2])
  }
  assert.deepEqual(Object.keys(stated).sort(), [...sg.ALGORITHMS].sort(), 'every algorithm listed once')
  for (const [algorithm, limit] of Object.entries(stated)) {
    assert.equal(new sg.Gate({ algorithm }).limit, limit, `Gate ${algorithm}`)
    assert.equal(new sg.Limiter({ algorithm }).limit, limit, `Limiter ${algorithm}`)
  }
})

test('README defaults: algorithm, levels and shares, queue capacity, CoDel', () => {
  const m = new sg.Gate().metrics()
  assert.equal(m.limiter.algorithm, /^`(\w+)`/.exec(defaultsRow('algorithm'))[1])

  const levels = defaultsRow('priority levels')
  assert.equal(m.limiter.levels, Number(/^(\d+)/.exec(levels)[1]))
  const shares = /shares ([\d. /]+) of the limit/.exec(levels)[1].split('/').map(Number)
  assert.deepEqual(m.limiter.shareByLevel, shares.map((s) => Math.round(s * m.limiter.limit)))

  const [, capacity, most] = /^(\d+) waiters \(at most (\d+)\)/.exec(defaultsRow('queue capacity'))
  assert.equal(m.capacity, Number(capacity))
  assert.equal(new sg.Gate({ queueCapacity: Number(most) }).metrics().capacity, Number(most))
  assert.throws(() => new sg.Gate({ queueCapacity: Number(most) + 1 }), { name: 'RangeError', code: 'SG_INVALID_ARG' })

  assert.match(defaultsRow('CoDel'), /^on, per level/)
  assert.equal(m.codel.length, m.limiter.levels, 'one CoDel per level')
})

test('index.d.ts defaults: levels, queueCapacity, RetryBudget percentCanRetry', () => {
  const m = new sg.Gate().metrics()
  assert.equal(m.limiter.levels, statedDefault(dtsDoc('LimiterOptions', 'levels')))
  assert.equal(m.capacity, statedDefault(dtsDoc('GateOptions', 'queueCapacity')))

  // The budget's fraction shows in what 1000 requests add to it, at one injected instant.
  const p = statedDefault(dtsDoc('RetryBudgetOptions', 'percentCanRetry'))
  const credit = (options) => {
    const b = new sg.RetryBudget(options)
    const t = 10n ** 12n
    const before = b.available(t)
    for (let i = 0; i < 1000; i++) b.deposit(t)
    return b.available(t) - before
  }
  assert.equal(credit(), Math.floor(1000 * p))
  assert.equal(credit(), credit({ percentCanRetry: p }))
})

test('README: the per-tenant example runs as written', async () => {
  const code = jsBlocks().find((b) => b.includes('new sg.KeyedLimits('))
  assert.ok(code, 'the per-tenant example')
  const fastify = require('fastify')({ logger: false })
  const app = require('express')()
  const gate = new sg.Gate() // from the first example
  // eslint-disable-next-line no-new-func
  new Function('sg', 'gate', 'fastify', 'app', 'require', code)(sg, gate, fastify, app, require)
  await fastify.ready() // the plugin checks its options at registration
  await fastify.close()
})
