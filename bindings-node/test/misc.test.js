'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const sg = require('..')
const { F } = require('../lib/native')

test('every documented export is present', () => {
  const names = ['Gate', 'Limiter', 'Permit', 'RetryBudget', 'TokenRetryThrottle', 'AdaptiveThrottle', 'Backoff',
    'CircuitBreaker', 'RateLimiter', 'PacedDrain', 'Credits', 'LagMeter', 'Watermarks', 'KeyedLimits', 'KeyPermit',
    'hashKey', 'actionable', 'isolation', 'OverloadError', 'RejectedError', 'REASONS', 'PRIORITY', 'ALGORITHMS',
    'nowNs', 'renderPrometheus', 'express', 'fastify', 'readiness', 'createFetch']
  for (const n of names) assert.ok(sg[n] !== undefined, n)
  assert.deepEqual({ ...sg.PRIORITY }, { critical: 0, normal: 1, background: 2 })
  assert.ok(new sg.RejectedError('shed', 5) instanceof sg.OverloadError)
})

test('hot paths refuse a handle of another kind (no misread memory)', () => {
  const gate = new sg.Gate()
  const limiter = new sg.Limiter()
  // One code for every argument error, native or JS: SG_INVALID_ARG; a wrong type is a
  // TypeError, a value out of range a RangeError.
  assert.throws(() => F.limiterAcquire(gate._h, 0), (e) => e instanceof TypeError && e.code === 'SG_INVALID_ARG')
  assert.throws(() => F.gateTryAcquire(limiter._h, 0), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire({}, 0), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire(gate._h, 0.5), { name: 'RangeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire(gate._h, '0'), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateRelease(gate._h, 0, 3), { name: 'RangeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire(gate._h, 0, -1, 1n << 63n), { name: 'RangeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire(gate._h, 0, -1, 5), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.equal(F.gateRelease(gate._h, 12345, 0), -1, 'an id never issued is refused')
  assert.equal(gate.inflight, 0)
})

test('readiness: 200 while healthy; overloadedStatus opt-in while shedding', async () => {
  const gate = new sg.Gate()
  const server = http.createServer(sg.readiness(gate, { overloadedStatus: 503 }))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${server.address().port}/`
  try {
    let res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal((await res.json()).status, 'healthy')
    gate.setShedLevel('background')
    res = await fetch(url)
    assert.equal(res.status, 503)
    const body = await res.json()
    assert.equal(body.status, 'overloaded')
    assert.equal(body.shedLevel, 2)
  } finally {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
})

test('the native clock follows Instant and never goes backwards', async () => {
  const N = require('../lib/native')
  let last = 0n
  let worst = 0
  const until = Date.now() + 300 // past the 100 ms TSC calibration, if the machine has one
  while (Date.now() < until) {
    for (let i = 0; i < 1000; i++) {
      const t = sg.nowNs()
      assert.ok(t >= last, 'monotonic')
      last = t
    }
    const [instant, fast] = N.clockCheck()
    worst = Math.max(worst, Math.abs(instant - fast))
    await new Promise((resolve) => setImmediate(resolve))
  }
  assert.ok(worst < 20e6, `|Instant − clock| up to ${worst} ns`)
})
