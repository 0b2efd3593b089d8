'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

test('Limiter admits up to a fixed limit and refuses beyond it', () => {
  const l = new sg.Limiter({ algorithm: 'fixed', initialLimit: 3, levels: 1 })
  const ps = [l.tryAcquire(), l.tryAcquire(), l.tryAcquire()]
  assert.ok(ps.every((p) => p instanceof sg.Permit))
  assert.equal(l.inflight, 3)
  assert.equal(l.tryAcquire(), null)
  assert.equal(l.lastRejection.reason, 'limit_reached')
  assert.ok(l.lastRejection.retryAfterMs > 0)
  ps[0].success()
  ps[1].dropped()
  ps[2].ignore()
  assert.equal(l.inflight, 0)
  assert.equal(l.livePermits, 0)
  const m = l.metrics()
  assert.equal(m.algorithm, 'fixed')
  assert.equal(m.limit, 3)
  assert.equal(m.successes, 1)
  assert.equal(m.drops, 1)
  assert.equal(m.ignored, 1)
  assert.equal(m.rejected, 1)
})

test('every algorithm builds with its own options and admits', () => {
  const specific = {
    fixed: {},
    aimd: { targetLatencyMs: 50, backoffRatio: 0.9, slowStart: false },
    hysteresis: { targetLatencyMs: 100, coolOffMs: 5000 },
    gradient: { buffer: 0.2, probeIntervalMs: 1000, seed: 3 },
    gradient2: { smoothing: 0.2, longWindow: 600, rttTolerance: 1.5 },
    vegas: { alpha: 3, beta: 6, seed: 1 }
  }
  for (const algorithm of sg.ALGORITHMS) {
    const l = new sg.Limiter(Object.assign({ algorithm, initialLimit: 10 }, specific[algorithm]))
    const p = l.tryAcquire({ priority: 'critical' })
    assert.ok(p, algorithm)
    p.success()
    assert.ok(l.metrics().algorithm.startsWith(algorithm), l.metrics().algorithm)
  }
})

test('an option of another algorithm is refused, not ignored', () => {
  assert.throws(() => new sg.Limiter({ algorithm: 'fixed', targetLatencyMs: 5 }), /does not apply to algorithm fixed/)
  assert.throws(() => new sg.Gate({ algorithm: 'vegas', buffer: 0.1 }), /does not apply/)
  assert.throws(() => new sg.Limiter({ algorithm: 'aimd', targetLatencyMs: -5 }), RangeError)
  assert.throws(() => new sg.Limiter({ algorithm: 'aimd', backoffRatio: 5 }), RangeError)
})

test('priorities by name or number; shares reserve capacity for important levels', () => {
  const l = new sg.Limiter({ algorithm: 'fixed', initialLimit: 10 })
  assert.equal(l.tryAcquire({ priority: 'critical' }).priority, 0)
  assert.equal(l.tryAcquire({ priority: 1 }).priority, 1)
  assert.equal(l.tryAcquire().priority, 1) // default: normal
  // critical is active and holds 1 of its 7: background may not take its reservation.
  const bg = []
  let p
  while ((p = l.tryAcquire({ priority: 'background' })) !== null) bg.push(p)
  assert.ok(l.inflight < 10, 'the critical reservation stays free')
  assert.ok(l.tryAcquire({ priority: 'critical' }), 'critical still finds a slot')
})

test('a permit ends once: double release throws and changes nothing', () => {
  const l = new sg.Limiter({ algorithm: 'fixed', initialLimit: 2 })
  const p = l.tryAcquire()
  const q = l.tryAcquire()
  p.success()
  assert.equal(p.released, true)
  assert.throws(() => p.success(), (e) => e instanceof sg.OverloadError && e.code === 'SG_ALREADY_RELEASED')
  assert.throws(() => p.release('dropped'), { code: 'SG_ALREADY_RELEASED' })
  assert.equal(l.inflight, 1, 'the other permit is untouched')
  assert.throws(() => q.release('nope'), RangeError)
  assert.equal(q.released, false)
  q.release('ignore')
  assert.equal(l.metrics().successes, 1)
})

test('injected time (nowNs) gives latency samples', () => {
  const l = new sg.Limiter({ algorithm: 'fixed', initialLimit: 5, minSamples: 1, minWindowMs: 1 })
  for (let i = 0; i < 20; i++) {
    const t = BigInt(1e9 + i * 10e6)
    const p = l.tryAcquire({ nowNs: t })
    p.success(t + 3_000_000n) // 3 ms
  }
  const m = l.metrics()
  assert.ok(m.windows >= 1)
  assert.ok(Math.abs(m.avgRttMs - 3) < 0.5, `avg ${m.avgRttMs}`)
  assert.throws(() => l.tryAcquire({ nowNs: 5 }), TypeError)
  assert.throws(() => l.tryAcquire({ nowNs: -1n }), RangeError)
  assert.throws(() => l.tryAcquire({ nowNs: (1n << 62n) + 1n }), RangeError)
})

test('static limit (kill switch)', () => {
  const l = new sg.Limiter({ algorithm: 'aimd', initialLimit: 10 })
  l.setStaticLimit(2)
  assert.equal(l.limit, 2)
  assert.equal(l.metrics().staticLimit, 2)
  l.setStaticLimit(null)
  assert.equal(l.limit, 10)
  assert.throws(() => l.setStaticLimit(NaN), RangeError)
  assert.throws(() => l.setStaticLimit(-1), RangeError)
  assert.throws(() => l.setStaticLimit('3'), TypeError)
  assert.equal(l.limit, 10)
})

test('bad options are TypeErrors or RangeErrors naming the option', () => {
  const bad = [
    [{ algorithm: 'nope' }, RangeError, /algorithm/],
    [{ algorithm: 3 }, TypeError, /algorithm/],
    [{ initialLimit: NaN }, RangeError, /initialLimit/],
    [{ initialLimit: '10' }, TypeError, /initialLimit/],
    [{ levels: 9 }, RangeError, /levels/],
    [{ levels: 1.5 }, RangeError, /levels/],
    [{ minWindowMs: -1 }, RangeError, /minWindowMs/],
    [{ minWindowMs: 1e300 }, RangeError, /minWindowMs/],
    [{ weights: [0.9, 0.9, 0.9] }, RangeError, /Limiter: weights is inconsistent: the levels in use sum above 1/],
    [{ minLimit: 10, maxLimit: 5, initialLimit: 7 }, RangeError, /Limiter: minLimit must not be above maxLimit/],
    [{ initialLimit: -1 }, RangeError, /initialLimit/],
    [{ algorithm: 'fixed', initialLimit: 0 }, RangeError, /initialLimit/],
    [{ minLimit: 2, maxLimit: 5, initialLimit: 7 }, RangeError, /Limiter: initialLimit must not be above maxLimit/],
    [{ minLimit: 6, maxLimit: 9, initialLimit: 5 }, RangeError, /Limiter: initialLimit must not be below minLimit/],
    [{ dropTolerance: 2 }, RangeError, /Limiter: dropTolerance is out of range/],
    [{ initalLimit: 3 }, TypeError, /unknown option/],
    ['x', TypeError, /options/]
  ]
  for (const [opts, cls, re] of bad) {
    assert.throws(() => new sg.Limiter(opts), (e) => e instanceof cls && re.test(e.message), JSON.stringify(opts))
  }
  const l = new sg.Limiter({ algorithm: 'fixed', initialLimit: 1 })
  assert.throws(() => l.tryAcquire({ priority: 3 }), RangeError)
  assert.throws(() => l.tryAcquire({ priority: 1.5 }), RangeError)
  assert.throws(() => l.tryAcquire({ priority: 'urgent' }), RangeError)
  assert.throws(() => l.tryAcquire({ priority: {} }), TypeError)
  assert.equal(l.inflight, 0)
})

test('nowNs() is a monotonic bigint clock', () => {
  const a = sg.nowNs()
  const b = sg.nowNs()
  assert.equal(typeof a, 'bigint')
  assert.ok(b >= a)
})
