'use strict'
// Regression tests for the bad-input contract (README, "Errors and bad input"): every call
// succeeds or fails with TypeError, RangeError, OverloadError or RejectedError (async calls
// reject, never throw); a failed call changes nothing observable; errors name the option
// as JS spells it and carry one of `ERROR_CODES`.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { setTimeout: sleep } = require('node:timers/promises')
const sg = require('..')

/** Everything a caller can observe of `o` (metrics and gauges), as a string. */
function snap (o) {
  const s = { metrics: o.metrics() }
  for (const k of ['inflight', 'limit', 'livePermits', 'waiting', 'shedLevel', 'state', 'lastRejection']) {
    if (k in o) s[k] = o[k]
  }
  return JSON.stringify(s)
}

/** `fn()` throws `cls` with a code of the documented set, and `o` is unchanged. */
function refuses (o, fn, cls, re) {
  const before = snap(o)
  assert.throws(fn, (e) => {
    assert.ok(e instanceof cls, `${e && e.name}: ${e && e.message} is not a ${cls.name}`)
    assert.ok(sg.ERROR_CODES.includes(e.code), `code ${e.code}`)
    if (re) assert.match(e.message, re)
    return true
  })
  assert.equal(snap(o), before, 'state changed by a refused call')
}

/** `fn()` returns a promise (no synchronous throw) that rejects with `cls`; `o` unchanged. */
async function rejects (o, fn, cls, re) {
  const before = snap(o)
  let p
  assert.doesNotThrow(() => { p = fn() }, 'an async API threw synchronously')
  assert.ok(p instanceof Promise)
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof cls, `${e && e.name}: ${e && e.message} is not a ${cls.name}`)
    assert.ok(sg.ERROR_CODES.includes(e.code), `code ${e.code}`)
    if (re) assert.match(e.message, re)
    return true
  })
  assert.equal(snap(o), before, 'state changed by a refused call')
}

const PROTO_KEYS = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', 'isPrototypeOf']

// 1. A priority header named like an Object.prototype member.
test('priority names are looked up without Object.prototype: constructor/__proto__ are not levels', () => {
  const gate = new sg.Gate()
  for (const k of PROTO_KEYS) {
    assert.equal(gate.levels.fromHeader(k), gate.levels.default, k)
    refuses(gate, () => gate.tryAcquire({ priority: k }), RangeError, /priority/)
  }
})

async function expressApp (opts, handler) {
  const express = require('express')
  const app = express()
  app.use(sg.express(opts))
  app.get('/work', handler)
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r) }) }
}

async function fastifyApp (opts, handler) {
  const fastify = require('fastify')({ logger: false })
  await fastify.register(sg.fastify, opts)
  fastify.get('/work', async (req, reply) => {
    await handler(req, reply.raw)
    return reply
  })
  await fastify.listen({ port: 0, host: '127.0.0.1' })
  return { url: `http://127.0.0.1:${fastify.server.address().port}`, close: () => fastify.close() }
}

const SERVERS = [['express', expressApp], ['fastify', fastifyApp]]

for (const [name, make] of SERVERS) {
  test(`${name}: an X-Request-Priority of constructor/__proto__/toString is the default level, not a 500`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
    const srv = await make({ gate }, (req, res) => { res.statusCode = 200; res.end('ok') })
    try {
      for (const k of PROTO_KEYS) {
        const r = await fetch(srv.url + '/work', { headers: { 'x-request-priority': k } })
        assert.equal(r.status, 200, k)
        await r.text()
      }
    } finally {
      await srv.close()
    }
    assert.equal(gate.livePermits, 0)
  })
}

// 2. A permit is marked released only after its arguments pass.
test('a permit ended with a bad argument throws first, stays held, and can still be ended', () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2 })
  const limiter = new sg.Limiter({ algorithm: 'fixed', initialLimit: 2 })
  const breaker = new sg.CircuitBreaker()
  for (const owner of [gate, limiter, breaker]) {
    const p = owner.tryAcquire()
    const bad = [
      [() => p.success(5), TypeError],
      [() => p.dropped(-1n), RangeError],
      [() => p.ignore((1n << 62n) + 1n), RangeError],
      [() => p.release('toString'), RangeError],
      [() => p.release('constructor'), RangeError],
      [() => p.release(5), TypeError],
      [() => p.release('success', 'now'), TypeError]
    ]
    for (const [fn, cls] of bad) {
      refuses(owner, fn, cls)
      assert.equal(p.released, false)
    }
    assert.equal(owner.livePermits, 1)
    p.success()
    assert.equal(p.released, true)
    assert.equal(owner.livePermits, 0)
    assert.throws(() => p.success(), { name: 'OverloadError', code: 'SG_ALREADY_RELEASED' })
  }
})

// 3. setShedLevel() / setShedLevel(undefined).
test('setShedLevel() and setShedLevel(undefined) are TypeErrors; only null turns shedding off', () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
  refuses(gate, () => gate.setShedLevel(), TypeError, /null/)
  refuses(gate, () => gate.setShedLevel(undefined), TypeError)
  refuses(gate, () => gate.setShedLevel('bogus'), RangeError)
  refuses(gate, () => gate.setShedLevel('constructor'), RangeError)
  refuses(gate, () => gate.setShedLevel(1.5), RangeError)
  assert.equal(gate.shedLevel, null)
  const p = gate.tryAcquire()
  assert.ok(p, 'normal traffic is still admitted')
  p.success()
  gate.setShedLevel('background')
  assert.equal(gate.shedLevel, 2)
  gate.setShedLevel(null)
  assert.equal(gate.shedLevel, null)
})

// 4. tryAcquire with something that is not an options object.
test('tryAcquire(\'critical\') / tryAcquire(5) / unknown option keys throw, like acquire rejects', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
  const limiter = new sg.Limiter({ algorithm: 'fixed', initialLimit: 4 })
  for (const o of [gate, limiter]) {
    for (const arg of ['critical', 5, null, true, 5n, [], { priorty: 'critical' }, { constructor: 1 }]) {
      refuses(o, () => o.tryAcquire(arg), TypeError)
    }
    refuses(o, () => o.tryAcquire({ priority: 'bogus' }), RangeError)
  }
  for (const arg of ['critical', 5, null, { priorty: 'critical' }]) {
    await rejects(gate, () => gate.acquire(arg), TypeError)
  }
  const p = gate.tryAcquire({ priority: 'critical' })
  assert.equal(p.priority, 0, 'the documented form still works')
  p.success()
})

// 5. run() rejects on bad options instead of throwing.
test('gate.run(fn, bad options) rejects (never throws) and does not call fn', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
  let calls = 0
  const fn = () => { calls++ }
  for (const [opts, cls] of [[{ priority: 'bogus' }, RangeError], [null, TypeError], ['critical', TypeError],
    [{ classify: 5 }, TypeError], [{ timeoutMs: -1 }, RangeError], [{ signal: {} }, TypeError], [{ nowNs: 5 }, TypeError],
    [{ nowNs: 1n << 63n }, RangeError], [{ constructor: 1 }, TypeError]]) {
    await rejects(gate, () => gate.run(fn, opts), cls)
  }
  await rejects(gate, () => gate.run('not a function'), TypeError)
  assert.equal(calls, 0)
  assert.equal(await gate.run(() => 7, { priority: 'critical' }), 7)
})

// 6. breaker.run('not a function') records nothing.
test('breaker.run(non-function) rejects with a TypeError and records no failure', async () => {
  const breaker = new sg.CircuitBreaker({ windowCalls: 5, minimumCalls: 5 })
  for (let i = 0; i < 20; i++) await rejects(breaker, () => breaker.run('not a function'), TypeError)
  assert.equal(breaker.state(), 'closed')
  assert.equal(breaker.metrics().windowCalls, 0)
  refuses(breaker, () => breaker.tryAcquire('x'), TypeError)
  refuses(breaker, () => breaker.tryAcquire({ nowNs: -1n }), RangeError)
})

// 7. Options named like Object.prototype members.
test('every options object refuses keys named like Object.prototype members', () => {
  const ctors = [
    [sg.Gate, {}], [sg.Limiter, {}], [sg.RetryBudget, {}], [sg.TokenRetryThrottle, {}],
    [sg.AdaptiveThrottle, {}], [sg.Backoff, {}], [sg.CircuitBreaker, {}],
    [sg.RateLimiter, { perSecond: 5 }], [sg.PacedDrain, { targetPerSec: 5 }], [sg.Credits, {}],
    [sg.LagMeter, {}], [sg.Watermarks, {}], [sg.KeyedLimits, { shardLimit: 4 }]
  ]
  for (const [C, base] of ctors) {
    new C(base) // eslint-disable-line no-new
    for (const k of PROTO_KEYS) {
      // JSON.parse makes `__proto__` an own key, as a config file would.
      const json = JSON.stringify(base)
      const o = JSON.parse(json.slice(0, -1) + (json === '{}' ? '' : ',') + `"${k}": 1}`)
      assert.ok(Object.hasOwn(o, k))
      assert.throws(() => new C(o), (e) => e instanceof TypeError && e.code === 'SG_INVALID_ARG' && /unknown option/.test(e.message), `${C.name} ${k}`)
    }
  }
  const gate = new sg.Gate()
  for (const k of PROTO_KEYS) {
    assert.throws(() => sg.express(JSON.parse(`{"${k}": 1}`)), TypeError)
    assert.throws(() => sg.readiness(gate, JSON.parse(`{"${k}": 1}`)), TypeError)
    assert.throws(() => sg.createFetch(JSON.parse(`{"${k}": 1}`)), TypeError)
    assert.throws(() => sg.renderPrometheus({ gate }, JSON.parse(`{"${k}": 1}`)), TypeError)
  }
})

// 9. Permits cannot be forged.
test('Permit and KeyPermit cannot be constructed or forged to end another object\'s permit', () => {
  const gateB = new sg.Gate({ algorithm: 'fixed', initialLimit: 2 })
  const real = gateB.tryAcquire()
  refuses(gateB, () => new sg.Permit(gateB, 0, 1), TypeError, /no public constructor/)
  const forged = Object.create(sg.Permit.prototype)
  Object.assign(forged, { _o: gateB, _id: 0, priority: 1 })
  refuses(gateB, () => forged.success(), TypeError)
  refuses(gateB, () => sg.Permit.prototype.success.call({ _o: gateB, _id: 0 }), TypeError)
  assert.equal(gateB.inflight, 1)
  assert.ok(real instanceof sg.Permit, 'real permits are still Permits')
  real.success()
  assert.equal(gateB.inflight, 0)

  const keyed = new sg.KeyedLimits({ shardLimit: 2 })
  const kp = keyed.tryAcquire('tenant')
  refuses(keyed, () => new sg.KeyPermit(keyed, 0, 'tenant'), TypeError, /no public constructor/)
  refuses(keyed, () => sg.KeyPermit.prototype.release.call(Object.create(sg.KeyPermit.prototype)), TypeError)
  assert.equal(keyed.livePermits, 1)
  kp.release()
  assert.equal(keyed.livePermits, 0)
})

// 10. One error model.
test('errors: one code set, string-for-number is a TypeError everywhere, names as JS spells them', () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2 })
  const rate = new sg.RateLimiter({ perSecond: 10 })
  const keyed = new sg.KeyedLimits({ shardLimit: 2 })
  const backoff = new sg.Backoff()
  const credits = new sg.Credits()
  const budget = new sg.RetryBudget()
  const throttle = new sg.AdaptiveThrottle()
  refuses(rate, () => rate.tryTake('1'), TypeError) // native fast path
  refuses(rate, () => rate.tryTake(-1), RangeError)
  refuses(keyed, () => keyed.tryAcquire('k', '1'), TypeError) // native fast path
  refuses(keyed, () => keyed.tryAcquire(5), TypeError)
  refuses(gate, () => gate.setStaticLimit('5'), TypeError)
  refuses(credits, () => credits.tryTake('1'), TypeError)
  refuses(budget, () => budget.deposit(5), TypeError)
  refuses(budget, () => budget.tryWithdraw(1n << 63n), RangeError)
  refuses(throttle, () => throttle.record('yes'), TypeError)
  refuses(throttle, () => throttle.shouldThrottle((1n << 62n) + 1n), RangeError)
  assert.throws(() => backoff.nextDelayMs('1'), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => new sg.Limiter({ initialLimit: '5' }), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  // A config error names the option the caller passed, in the caller's spelling (the
  // addon's table of core paths), and says what is wrong with it.
  const noSnake = (e) => !/_/.test(e.message.replace(/^surgeguard: /, ''))
  for (const [opts, re] of [[{ initialLimit: -1 }, /initialLimit/], // checked by the facade first
    [{ minLimit: 5, maxLimit: 2 }, /^surgeguard: Gate: minLimit must not be above maxLimit$/],
    [{ minLimit: 5, maxLimit: 9, initialLimit: 20 }, /^surgeguard: Gate: initialLimit must not be above maxLimit$/],
    [{ dropTolerance: 1 }, /^surgeguard: Gate: dropTolerance is out of range$/],
    [{ queueCapacity: 5, codelTargetMs: 100, codelIntervalMs: 100 }, /codelTargetMs must be below codelIntervalMs/],
    [{ aging: { from: 1, to: 1, afterMs: 5 } }, /^surgeguard: Gate: aging\.to must be a less important level than aging\.from$/],
    [{ aging: { from: 1, to: 2, afterMs: 0 } }, /^surgeguard: Gate: aging\.afterMs is out of range$/]]) {
    assert.throws(() => new sg.Gate(opts), (e) => e instanceof RangeError && e.code === 'SG_INVALID_ARG' && re.test(e.message) && noSnake(e), JSON.stringify(opts))
  }
  for (const [C, opts, re] of [[sg.RetryBudget, { ttlMs: 0 }, /RetryBudget: ttlMs is out of range/], [sg.CircuitBreaker, { openMs: 0 }, /openMs is out of range/],
    [sg.Gate, { codelTargetMs: 200, codelIntervalMs: 100 }, /codelTargetMs must be below codelIntervalMs/],
    [sg.KeyedLimits, { shardLimit: 4, ratePerSecond: 1e-12 }, /ratePerSecond is out of range/], [sg.Backoff, { baseMs: 10, capMs: 1 }, /capMs must not be below baseMs/]]) {
    assert.throws(() => new C(opts), (e) => e instanceof RangeError && re.test(e.message) && noSnake(e), `${C.name} ${JSON.stringify(opts)}`)
  }
  // A detached method or a wrong `this` is a TypeError that says so.
  const detached = gate.metrics
  assert.throws(() => detached(), (e) => e instanceof TypeError && /not a Gate/.test(e.message))
  assert.throws(() => sg.Gate.prototype.tryAcquire.call(undefined), (e) => e instanceof TypeError && /not a Gate/.test(e.message))
  assert.throws(() => Object.getOwnPropertyDescriptor(sg.Gate.prototype, 'inflight').get.call({}), /not a Gate/)
  assert.throws(() => sg.Limiter.prototype.tryAcquire.call(null), /not a Limiter/)
  return Promise.all([
    rejects(gate, () => sg.Gate.prototype.acquire.call(null), TypeError, /not a Gate/),
    rejects(gate, () => sg.CircuitBreaker.prototype.run.call(5, () => 1), TypeError, /not a CircuitBreaker/)
  ])
})

// 11. Smaller gaps.
test('express readinessRoute works on plain node:http (req.url, query ignored)', async () => {
  const gate = new sg.Gate()
  const mw = sg.express({ gate, readinessRoute: '/ready' })
  const server = http.createServer((req, res) => mw(req, res, () => { res.statusCode = 204; res.end() }))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${server.address().port}`
  try {
    for (const path of ['/ready', '/ready?verbose=1']) {
      const r = await fetch(base + path)
      assert.equal(r.status, 200, path)
      assert.equal((await r.json()).status, 'healthy')
    }
    const r = await fetch(base + '/other')
    assert.equal(r.status, 204)
  } finally {
    server.closeAllConnections()
    server.close()
  }
})

test('renderPrometheus(5), percentCanRetry: 10 and other ambiguous input are refused', () => {
  for (const bad of [5, 'x', true, 5n]) assert.throws(() => sg.renderPrometheus(bad), TypeError)
  assert.throws(() => sg.renderPrometheus([['g', 5]]), TypeError)
  assert.throws(() => sg.renderPrometheus([[5, new sg.Gate()]]), TypeError)
  assert.equal(typeof sg.renderPrometheus({ g: new sg.Gate() }), 'string')
  assert.throws(() => new sg.RetryBudget({ percentCanRetry: 10 }), (e) => e instanceof RangeError && /fraction in \[0, 1\]/.test(e.message))
  assert.throws(() => new sg.RetryBudget({ percentCanRetry: 1.5 }), RangeError)
  new sg.RetryBudget({ percentCanRetry: 0.2 }) // eslint-disable-line no-new
  new sg.RetryBudget({ retryRatio: 10 }) // eslint-disable-line no-new
  assert.throws(() => new sg.RetryBudget({ retryRatio: 2000 }), RangeError)
  assert.throws(() => new sg.RetryBudget({ retryRatio: 2, percentCanRetry: 0.2 }), TypeError)
})

test('a nowNs above 2^62 is a RangeError on every call that takes one, and changes nothing', () => {
  const big = (1n << 62n) + 1n
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2 })
  refuses(gate, () => gate.tryAcquire({ nowNs: big }), RangeError, /2\^62/)
  const limiter = new sg.Limiter()
  refuses(limiter, () => limiter.tryAcquire({ nowNs: big }), RangeError, /2\^62/)
  const rate = new sg.RateLimiter({ perSecond: 10 })
  refuses(rate, () => rate.tryTake(1, big), RangeError)
  refuses(rate, () => rate.available(big), RangeError)
  const lag = new sg.LagMeter()
  refuses(lag, () => lag.recordProduced(1, big), RangeError)
  refuses(lag, () => lag.reportOldest(big, 5n), RangeError)
  const w = new sg.Watermarks({ capacity: 10, pauseBelow: 2, resumeAbove: 5 })
  refuses(w, () => w.observe(1, big), RangeError)
  // 2^62 itself is a time.
  const p = limiter.tryAcquire({ nowNs: 1n << 62n })
  assert.ok(p)
  p.success(1n << 62n)
})

// 12. HTTP: the permit lasts as long as the handler, whatever the client does.

/** A GET whose client gives up (destroys its socket) after `ms`. */
function giveUpAfter (url, ms) {
  return new Promise((resolve) => {
    const req = http.get(url, { agent: false }, (res) => {
      res.resume()
      res.on('end', resolve)
      res.on('error', resolve)
    })
    req.on('error', resolve)
    req.on('close', resolve)
    setTimeout(() => req.destroy(), ms)
  })
}
for (const [name, make] of SERVERS) {
  test(`${name}: clients that give up early never let more handlers run than the gate's limit`, async () => {
    const LIMIT = 2
    // One level: no per-level shares, so the limit alone decides.
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: LIMIT, levels: 1, codel: false, queueCapacity: 64 })
    let running = 0
    let most = 0
    let started = 0
    let finished = 0
    const srv = await make({ gate }, async (req, res) => {
      started++
      running++
      most = Math.max(most, running)
      await sleep(300) // keeps working after the client is gone
      running--
      finished++
      res.statusCode = 200
      res.end('done')
    })
    try {
      // Warm up (the first request of a process is slow to arrive), then count afresh.
      await giveUpAfter(srv.url + '/work', 5000)
      started = finished = most = 0
      const before = gate.metrics()
      const N = 16
      await Promise.all(Array.from({ length: N }, () => giveUpAfter(srv.url + '/work', 150)))
      // Every admitted handler finishes; nothing is left waiting or holding a slot.
      for (let i = 0; i < 200 && (running > 0 || gate.livePermits > 0 || gate.waiting > 0); i++) await sleep(10)
      assert.ok(most <= LIMIT, `${most} handlers ran at once over a limit of ${LIMIT}`)
      assert.ok(started >= 1)
      assert.equal(started, finished)
      assert.equal(gate.livePermits, 0)
      assert.equal(gate.inflight, 0)
      assert.equal(gate.waiting, 0)
      const m = gate.metrics()
      assert.ok(m.cancelled > before.cancelled, 'a client that gave up while queued cancelled its ticket')
      assert.ok(started < N, 'cancelled tickets never ran')
      assert.equal(m.limiter.successes - before.limiter.successes, started, 'each finished handler was a latency sample')
    } finally {
      await srv.close()
    }
  })
}

// The pump acts on a due next wakeup: a fractional limit holds a slot back for critical.
test('a queued waiter is granted by the pump alone when the share rule releases its slot', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1.8, codel: false })
  const critical = gate.tryAcquire({ priority: 'critical' })
  assert.ok(critical)
  const waiter = gate.acquire({ priority: 'normal' })
  assert.equal(gate.waiting, 1)
  critical.success()
  // Nothing else happens: no release, no arrival, no manual poll. The binding's timer must
  // follow the core's next wakeup (due at once, then every millisecond or so) until the
  // slot is granted.
  const t = await Promise.race([waiter, sleep(5000, 'timeout')])
  assert.notEqual(t, 'timeout', `still queued: waiting ${gate.waiting}, inflight ${gate.inflight}`)
  t.success()
  assert.equal(gate.inflight, 0)
  assert.equal(gate.waiting, 0)
})

for (const [name, make] of SERVERS) {
  test(`${name}: a handler that throws still ends its permit (as ignore: an application error)`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2, levels: 1 })
    const srv = await make({ gate }, async () => {
      await sleep(5)
      throw new Error('handler bug')
    })
    try {
      for (let i = 0; i < 3; i++) {
        const r = await fetch(srv.url + '/work')
        assert.equal(r.status, 500)
        await r.text()
      }
    } finally {
      await srv.close()
    }
    assert.equal(gate.livePermits, 0)
    assert.equal(gate.inflight, 0)
    const m = gate.metrics().limiter
    assert.equal(m.ignored, 3)
    assert.equal(m.drops, 0)
  })
}

test('backoff attempt 0 is not a retry: a RangeError, as in the C ABI and Python', () => {
  const b = new sg.Backoff({ seed: 1 })
  assert.throws(() => b.nextDelayMs(0), RangeError)
  assert.throws(() => b.ceilingMs(0), RangeError)
  assert.ok(b.ceilingMs(1) > 0)
})
