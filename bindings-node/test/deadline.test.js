'use strict'
// Deadlines: the AsyncLocalStorage API, header parsing (fast-check over arbitrary values,
// against a reference model written from the header formats), and the Express and Fastify
// middlewares on real loopback servers.
const test = require('node:test')
const assert = require('node:assert/strict')
const { setTimeout: sleep } = require('node:timers/promises')
const fc = require('fast-check')
const sg = require('..')

const RUNS = Number(process.env.SG_SWEEP_RUNS || 200)
const HOUR_MS = 3600000

const invalid = (e) => (e instanceof TypeError || e instanceof RangeError) && e.code === 'SG_INVALID_ARG'

test('deadline: no scope, no deadline', () => {
  assert.equal(sg.deadline.current(), undefined)
  assert.equal(sg.deadline.remaining(), undefined)
  assert.equal(sg.deadline.expired(), false)
  assert.equal(sg.deadline.signal(), undefined)
})

test('deadline.run: remaining counts down; nested scopes keep the earlier deadline', async () => {
  await sg.deadline.run(200, async () => {
    const outer = sg.deadline.current()
    assert.equal(typeof outer, 'bigint')
    const r = sg.deadline.remaining()
    assert.ok(r > 150 && r <= 200, `remaining ${r}`)
    // A longer inner budget cannot extend the caller's.
    sg.deadline.run(10000, () => assert.equal(sg.deadline.current(), outer))
    // A shorter one holds inside, and only inside.
    await sg.deadline.run(20, async () => {
      assert.ok(sg.deadline.current() < outer)
      assert.ok(sg.deadline.remaining() <= 20)
      await sleep(30)
      assert.equal(sg.deadline.remaining(), 0)
      assert.equal(sg.deadline.expired(), true)
    })
    assert.equal(sg.deadline.current(), outer)
    assert.equal(sg.deadline.expired(), false)
    // runUntil with an absolute deadline, arguments passed through.
    assert.equal(sg.deadline.runUntil(outer - 1n, (a, b) => [sg.deadline.current(), a + b], 1, 2)[1], 3)
    assert.equal(sg.deadline.runUntil(outer - 1n, () => sg.deadline.current()), outer - 1n)
  })
  assert.equal(sg.deadline.current(), undefined)
})

test('deadline.headers: the outgoing values for another client', () => {
  assert.deepEqual(sg.deadline.headers(), {})
  sg.deadline.run(500, () => {
    const h = sg.deadline.headers({ marginMs: 20, names: ['surgeguard-timeout-ms', 'GRPC-Timeout'] })
    assert.deepEqual(Object.keys(h), ['surgeguard-timeout-ms', 'grpc-timeout'])
    const ms = Number(h['surgeguard-timeout-ms'])
    assert.ok(Number.isInteger(ms) && ms > 200 && ms <= 480, h['surgeguard-timeout-ms'])
    assert.match(h['grpc-timeout'], /^\d{1,8}[mun]$/)
    // What the server side reads back is no more than what was sent.
    assert.ok(sg.deadline.parseHeaders(h).budgetMs <= 480)
    assert.throws(() => sg.deadline.headers({ marginMs: 600 }), (e) => e instanceof sg.DeadlineTooShortError && e.code === 'SG_DEADLINE_TOO_SHORT')
    for (const bad of [{ marginMs: -1 }, { names: 'x' }, { names: ['a b'] }, { other: 1 }, 5]) {
      assert.throws(() => sg.deadline.headers(bad), invalid, JSON.stringify(bad))
    }
  })
})

test('deadline.signal aborts at the deadline with a DeadlineExceededError', async () => {
  const signal = sg.deadline.run(20, () => sg.deadline.signal())
  assert.equal(signal.aborted, false)
  await sleep(60)
  assert.equal(signal.aborted, true)
  assert.ok(signal.reason instanceof sg.DeadlineExceededError)
  assert.equal(signal.reason.code, 'SG_DEADLINE_EXCEEDED')
  assert.ok(signal.reason instanceof sg.OverloadError)
  assert.ok(sg.ERROR_CODES.includes('SG_DEADLINE_EXCEEDED') && sg.ERROR_CODES.includes('SG_DEADLINE_TOO_SHORT'))
})

test('deadline.run / runUntil refuse bad input without running anything', () => {
  let ran = 0
  const fn = () => ran++
  for (const ms of [NaN, -1, Infinity, -Infinity, 1e13, '5', 5n, null, undefined, {}]) {
    assert.throws(() => sg.deadline.run(ms, fn), invalid, String(ms))
  }
  for (const d of [-1n, (1n << 62n) + 1n, 5, '5', null, undefined]) {
    assert.throws(() => sg.deadline.runUntil(d, fn), invalid, String(d))
  }
  assert.throws(() => sg.deadline.run(5, 'not a function'), invalid)
  assert.throws(() => sg.deadline.parseHeaders(null), invalid)
  assert.throws(() => sg.deadline.parseHeaders({}, 5), invalid)
  assert.equal(ran, 0)
})

// A reference model of the header formats (the gRPC PROTOCOL-HTTP2 spec's TimeoutValue +
// TimeoutUnit; whole milliseconds for the others), written from the rules, not the code:
// budget in ms, or the reason the value is ignored.
const UNIT_MS = { H: 3600000, M: 60000, S: 1000, m: 1, u: 1e-3, n: 1e-6 }
/** A value is a comma-separated list (a header sent twice, joined): the smallest valid item, else the first item's reason. */
function model (name, value) {
  const items = value.split(',').map((x) => modelItem(name, x))
  const valid = items.filter((m) => typeof m === 'number')
  return valid.length > 0 ? Math.min(...valid) : items[0]
}
function modelItem (name, value) {
  const s = value.replace(/^[ \t]+|[ \t]+$/g, '')
  const re = name === 'grpc-timeout' ? /^(-?)([0-9]{1,8})([HMSmun])$/ : /^(-?)([0-9]+)$/
  const m = re.exec(s)
  if (m === null) return 'malformed'
  if (m[1] === '-') return 'negative'
  const ms = name === 'grpc-timeout' ? Number(m[2]) * UNIT_MS[m[3]] : Number(m[2])
  return ms > HOUR_MS ? 'too_large' : ms
}

/** Header values: well-formed, near-misses and arbitrary strings. */
const valueArb = fc.oneof(
  fc.string({ maxLength: 14 }),
  fc.tuple(fc.constantFrom('', '-', ' ', '\t', '+', '0x'), fc.nat({ max: 4000000 }), fc.constantFrom('', 'H', 'M', 'S', 'm', 'u', 'n', 'ms', ' ', 'x', '.5'))
    .map(([a, n, b]) => a + n + b),
  fc.bigInt({ min: 0n, max: 10n ** 20n }).map(String),
  fc.constantFrom('0', '0m', '1H', '2H', '60M', '61M', '3600S', '3600001', '99999999n', '100000000n', '1e3', '１２', '٣', '')
)
const NAMES = ['grpc-timeout', 'x-envoy-expected-rq-timeout-ms', 'surgeguard-timeout-ms']

test('parseHeaders: any value of any deadline header → the model\'s budget or reason; the smallest valid wins', () => {
  fc.assert(fc.property(fc.dictionary(fc.constantFrom(...NAMES), valueArb, { maxKeys: 3 }), (headers) => {
    const r = sg.deadline.parseHeaders(headers)
    const expect = Object.entries(headers).map(([n, x]) => [n, model(n, x)])
    const valid = expect.filter(([, m]) => typeof m === 'number').map(([, m]) => m)
    if (valid.length === 0) {
      assert.equal(r.budgetMs, undefined)
    } else {
      assert.ok(Math.abs(r.budgetMs - Math.min(...valid)) < 1e-6, `${JSON.stringify(headers)}: ${r.budgetMs}`)
      assert.ok(r.budgetMs >= 0 && r.budgetMs <= HOUR_MS, 'never an unbounded deadline')
    }
    assert.deepEqual(
      r.ignored.map((x) => [x.header, x.reason]).sort(),
      expect.filter(([, m]) => typeof m === 'string').sort()
    )
  }), { numRuns: RUNS * 5 })
})

test('parseHeaders: a WHATWG Headers, a custom header, repeated headers', () => {
  const h = new Headers({ 'grpc-timeout': '250m', 'x-my-timeout-ms': '100' })
  assert.equal(sg.deadline.parseHeaders(h).budgetMs, 250)
  assert.equal(sg.deadline.parseHeaders(h, 'X-My-Timeout-Ms').budgetMs, 100)
  // A repeated header (an array, or Node's joined "200, 100") reads as its smallest
  // valid value, as in every binding (the core's list rule).
  for (const value of [['200', '100'], '200, 100', ['oops', '100'], 'oops,100']) {
    const r = sg.deadline.parseHeaders({ 'surgeguard-timeout-ms': value })
    assert.equal(r.budgetMs, 100, JSON.stringify(value))
    assert.deepEqual(r.ignored, [])
  }
  const r = sg.deadline.parseHeaders({ 'surgeguard-timeout-ms': ['-5', 'oops'] })
  assert.equal(r.budgetMs, undefined)
  assert.deepEqual(r.ignored, [{ header: 'surgeguard-timeout-ms', reason: 'negative' }])
  assert.equal(sg.deadline.parseHeaders(new Headers([['grpc-timeout', '2S'], ['grpc-timeout', '300m']])).budgetMs, 300)
})

// ---------------------------------------------------------------------------------------
// Real servers

async function expressServer (opts, route) {
  const express = require('express')
  const app = express()
  app.use(sg.express(opts))
  app.get('/', route)
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r) }) }
}

async function fastifyServer (opts, route) {
  const fastify = require('fastify')({ logger: false })
  await fastify.register(sg.fastify, opts)
  // An application's own async hook between admission and the handler keeps the scope.
  fastify.addHook('preHandler', async () => { await sleep(1) })
  // The same handler as Express's: (req, res) on the raw objects, through reply.
  fastify.get('/', (request, reply) => route(request, {
    json: (body) => reply.send(body),
    status: (code) => { reply.code(code); return { json: (b) => reply.send(b) } }
  }))
  await fastify.listen({ port: 0, host: '127.0.0.1' })
  return { url: `http://127.0.0.1:${fastify.server.address().port}`, close: () => fastify.close() }
}

/** A handler that reports what it sees of its deadline, after `delayMs`. */
function reporter (delayMs = 0, seen) {
  return async (req, res) => {
    if (seen) seen.push(Date.now())
    // (`?.`: this file also runs against a build without deadlines, to see it fail.)
    const before = sg.deadline?.remaining()
    if (delayMs) await sleep(delayMs)
    // Still in scope after an await.
    const after = sg.deadline?.remaining()
    res.json({ before: before === undefined ? null : before, after: after === undefined ? null : after })
  }
}

async function get (url, headers) {
  const res = await fetch(url, { headers })
  const text = await res.text()
  return { status: res.status, text, json: res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : undefined, headers: res.headers }
}

/** A GET with `headers` as Node's http client sends them: an array value is one line per item. */
function getLines (url, headers) {
  const http = require('node:http')
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers, agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (c) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }))
    })
    req.on('error', reject)
  })
}

for (const [name, make] of [['express', expressServer], ['fastify', fastifyServer]]) {
  test(`${name}: a deadline header sent on two lines reads as its smallest valid value, as in Python`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
    const srv = await make({ gate }, reporter(0))
    try {
      const before = sg.deadline.metrics()
      let r = await getLines(srv.url, { 'surgeguard-timeout-ms': ['900', '300'] })
      assert.equal(r.status, 200)
      assert.ok(r.json.before > 100 && r.json.before <= 300, JSON.stringify(r.json))
      r = await getLines(srv.url, { 'grpc-timeout': ['oops', '250m'] })
      assert.ok(r.json.before > 50 && r.json.before <= 250, JSON.stringify(r.json))
      const after = sg.deadline.metrics()
      assert.equal(after.ignoredByReason.malformed - before.ignoredByReason.malformed, 0)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: the handler sees the caller's budget; the smallest header wins; bad ones are ignored and counted`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
    const srv = await make({ gate, deadlineHeader: 'x-my-timeout-ms' }, reporter(20))
    try {
      let r = await get(srv.url, { 'surgeguard-timeout-ms': '500' })
      assert.equal(r.status, 200)
      assert.ok(r.json.before > 200 && r.json.before <= 500, JSON.stringify(r.json))
      assert.ok(r.json.after < r.json.before, 'counts down across an await')
      r = await get(srv.url, { 'grpc-timeout': '2S', 'x-envoy-expected-rq-timeout-ms': '300', 'surgeguard-timeout-ms': '900' })
      assert.ok(r.json.before > 100 && r.json.before <= 300, JSON.stringify(r.json))
      r = await get(srv.url, { 'surgeguard-timeout-ms': '900', 'x-my-timeout-ms': '250' })
      assert.ok(r.json.before > 50 && r.json.before <= 250, JSON.stringify(r.json))
      const before = sg.deadline.metrics()
      for (const bad of ['-5', 'soon', '3600001', '1.5', '']) {
        r = await get(srv.url, { 'surgeguard-timeout-ms': bad })
        assert.equal(r.status, 200, `header ${JSON.stringify(bad)} never fails the request`)
        assert.equal(r.json.before, null, 'an ignored header grants no deadline')
      }
      r = await get(srv.url, { 'grpc-timeout': '100000000n' })
      assert.equal(r.json.before, null)
      // A bad header beside a good one: the good one holds.
      r = await get(srv.url, { 'grpc-timeout': 'x', 'surgeguard-timeout-ms': '400' })
      assert.ok(r.json.before > 100 && r.json.before <= 400)
      const after = sg.deadline.metrics()
      const d = (k) => after.ignoredByReason[k] - before.ignoredByReason[k]
      assert.equal(d('negative'), 1)
      assert.equal(d('malformed'), 5) // soon, 1.5, '', 9 digits of grpc-timeout, 'x'
      assert.equal(d('too_large'), 1)
      assert.match(sg.renderPrometheus({ server: sg.deadline }), /^surgeguard_deadline_ignored_by_reason_total\{name="server",reason="negative"\} \d+$/m)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: default budget, timeoutMs as the cap, deadlines: false`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
    let srv = await make({ gate, defaultBudgetMs: 300, timeoutMs: 1000 }, reporter())
    try {
      let r = await get(srv.url)
      assert.ok(r.json.before > 100 && r.json.before <= 300, JSON.stringify(r.json))
      r = await get(srv.url, { 'surgeguard-timeout-ms': '5000' })
      assert.ok(r.json.before > 500 && r.json.before <= 1000, 'timeoutMs caps a longer header')
      r = await get(srv.url, { 'surgeguard-timeout-ms': '100' })
      assert.ok(r.json.before <= 100)
    } finally {
      await srv.close()
    }
    srv = await make({ gate, deadlines: false }, reporter())
    try {
      const r = await get(srv.url, { 'surgeguard-timeout-ms': '100', 'grpc-timeout': '1S' })
      assert.equal(r.json.before, null)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: an exhausted budget is refused at arrival; an expired waiter is dropped unstarted`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1, codel: false, initialServiceMs: 50 })
    const started = []
    const srv = await make({ gate }, reporter(300, started))
    try {
      let r = await get(srv.url, { 'grpc-timeout': '0m' })
      assert.equal(r.status, 503)
      assert.equal(JSON.parse(r.text).reason, 'deadline_unmeetable')
      assert.equal(started.length, 0)
      // One slot, held 300 ms by the first request; a second with 150 ms of budget cannot
      // start in time: refused or dropped from the queue, never run.
      const first = get(srv.url)
      while (started.length === 0) await sleep(5)
      r = await get(srv.url, { 'surgeguard-timeout-ms': '150' })
      assert.equal(r.status, 503)
      assert.ok(['expired', 'deadline_unmeetable'].includes(JSON.parse(r.text).reason), r.text)
      assert.equal((await first).status, 200)
      assert.equal(started.length, 1)
      assert.equal(gate.livePermits, 0)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: arbitrary header values never fail a request, never an unbounded deadline`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 8 })
    const srv = await make({ gate, deadlineHeader: 'x-my-timeout-ms' }, reporter())
    const printable = (s) => /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(s)
    try {
      await fc.assert(fc.asyncProperty(
        fc.dictionary(fc.constantFrom(...NAMES, 'x-my-timeout-ms'), valueArb.filter(printable), { maxKeys: 4 }),
        async (headers) => {
          const r = await get(srv.url, headers)
          const valid = Object.entries(headers).map(([n, x]) => model(n === 'grpc-timeout' ? n : 'ms', x)).filter((m) => typeof m === 'number')
          if (r.status === 503) {
            // Only a real budget too short to run may be refused, never an error.
            assert.ok(valid.length > 0, `503 without a valid budget: ${JSON.stringify(headers)}`)
            assert.ok(['deadline_unmeetable', 'expired'].includes(JSON.parse(r.text).reason), r.text)
            return
          }
          assert.equal(r.status, 200, `${r.status} for ${JSON.stringify(headers)}`)
          if (valid.length === 0) assert.equal(r.json.before, null)
          else assert.ok(r.json.before <= Math.min(...valid) && r.json.before <= HOUR_MS, JSON.stringify([headers, r.json]))
        }
      ), { numRuns: Math.max(20, RUNS / 4) })
    } finally {
      await srv.close()
    }
    assert.equal(gate.livePermits, 0)
  })
}

test('gate: deadlineNs in tryAcquire/acquire/run; bad deadlineNs refused without a change', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1, codel: false, initialServiceMs: 10 })
  const now = sg.nowNs()
  assert.equal(gate.tryAcquire({ deadlineNs: now }), null)
  assert.equal(gate.lastRejection.reason, 'deadline_unmeetable')
  const p = gate.tryAcquire({ deadlineNs: now + 10n ** 9n })
  assert.ok(p)
  // Queued with a deadline it cannot meet once the holder is slow: expired, never granted.
  const waiting = gate.acquire({ deadlineNs: sg.nowNs() + 40n * 10n ** 6n }).then(() => 'granted', (e) => e)
  await sleep(60)
  p.success()
  const e = await waiting
  assert.ok(e instanceof sg.RejectedError && ['expired', 'deadline_unmeetable'].includes(e.reason), String(e))
  assert.equal(await gate.run(() => 7, { deadlineNs: sg.nowNs() + 10n ** 9n }), 7)
  const m = JSON.stringify(gate.metrics(), (k, x) => (typeof x === 'bigint' ? String(x) : x))
  for (const bad of [-1n, (1n << 62n) + 1n, 5, 'x', null]) {
    assert.throws(() => gate.tryAcquire({ deadlineNs: bad }), invalid)
    await assert.rejects(gate.acquire({ deadlineNs: bad }), invalid)
    await assert.rejects(gate.run(() => 1, { deadlineNs: bad }), invalid)
  }
  assert.equal(JSON.stringify(gate.metrics(), (k, x) => (typeof x === 'bigint' ? String(x) : x)), m)
  assert.equal(gate.livePermits, 0)
})
