'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

const S = 1_000_000_000n

test('RetryBudget: deposits fund a share of retries, then it refuses', () => {
  const b = new sg.RetryBudget({ minRetriesPerSec: 0, percentCanRetry: 0.1 })
  const t = 5n * S
  for (let i = 0; i < 10; i++) b.deposit(t)
  assert.equal(b.tryWithdraw(t), true)
  assert.equal(b.tryWithdraw(t), false)
  assert.equal(b.lastRejection.reason, 'budget_exhausted')
  const m = b.metrics()
  assert.equal(m.requests, 10)
  assert.equal(m.retriesAllowed, 1)
  assert.equal(m.retriesDenied, 1)
  assert.throws(() => new sg.RetryBudget({ ttlMs: 100 }), RangeError) // below 1 s
  assert.throws(() => new sg.RetryBudget({ percentCanRetry: -0.1 }), RangeError)
  assert.throws(() => new sg.RetryBudget({ minRetriesPerSec: 1.5 }), RangeError)
})

test('TokenRetryThrottle: gRPC A6 half-capacity rule', () => {
  const t = new sg.TokenRetryThrottle({ maxTokens: 10, tokenRatio: 0.1 })
  assert.equal(t.tryRetry(), true)
  for (let i = 0; i < 5; i++) t.record(false)
  assert.equal(t.tryRetry(), false)
  assert.equal(t.lastRejection.reason, 'budget_exhausted')
  t.record(true)
  assert.equal(t.isRetryAllowed, true)
  assert.ok(Math.abs(t.tokens - 5.1) < 1e-9)
  assert.throws(() => t.record(1), TypeError)
  assert.equal(t.metrics().failures, 5)
})

test('AdaptiveThrottle: throttles when the backend refuses most requests', () => {
  const a = new sg.AdaptiveThrottle({ seed: 7 })
  const t = 10n * S
  for (let i = 0; i < 1000; i++) a.record(i % 10 === 0, t)
  assert.ok(a.dropProbability(t) > 0.5)
  let refused = 0
  for (let i = 0; i < 1000; i++) if (a.shouldThrottle(t)) refused++
  assert.ok(refused > 300 && refused < 1000, `refused ${refused}`)
  assert.equal(a.lastRejection.reason, 'throttled')
  const healthy = new sg.AdaptiveThrottle()
  for (let i = 0; i < 100; i++) healthy.record(true, t)
  assert.equal(healthy.shouldThrottle(t), false)
  assert.throws(() => a.record('yes'), TypeError)
  assert.throws(() => new sg.AdaptiveThrottle({ k: 0.5 }), RangeError)
  assert.throws(() => new sg.AdaptiveThrottle({ form: 'exact' }), RangeError)
})

test('Backoff: exponential ceiling, jitter range, server hint wins', () => {
  const b = new sg.Backoff({ baseMs: 100, multiplier: 2, capMs: 1000, jitter: 'none' })
  assert.deepEqual([1, 2, 3, 4, 5].map((a) => b.nextDelayMs(a)), [100, 200, 400, 800, 1000])
  assert.equal(b.nextDelayMs(1, 5000), 5000)
  const f = new sg.Backoff({ seed: 1 })
  for (let i = 0; i < 100; i++) {
    const d = f.nextDelayMs(3)
    assert.ok(d >= 0 && d <= 400)
  }
  assert.equal(f.ceilingMs(10), 1000)
  const s1 = new sg.Backoff({ seed: 9 })
  const s2 = new sg.Backoff({ seed: 9 })
  assert.deepEqual([1, 2, 3].map((a) => s1.nextDelayMs(a)), [1, 2, 3].map((a) => s2.nextDelayMs(a)))
  assert.throws(() => b.nextDelayMs(-1), RangeError)
  assert.throws(() => b.nextDelayMs(1, NaN), RangeError)
  assert.throws(() => new sg.Backoff({ baseMs: 0 }), RangeError)
  assert.throws(() => new sg.Backoff({ jitter: 'random' }), RangeError)
})

test('CircuitBreaker: opens on failures, refuses, probes after the open period', async () => {
  const cfg = { windowCalls: 10, minimumCalls: 5, failureRateThreshold: 0.5, openMs: 1000, openJitter: 0, rampMs: 0, halfOpenProbes: 1 }
  const b = new sg.CircuitBreaker(cfg)
  const t0 = 10n * S
  assert.equal(b.state(t0), 'closed')
  for (let i = 0; i < 5; i++) b.tryAcquire({ nowNs: t0 }).dropped(t0)
  assert.equal(b.state(t0), 'open')
  assert.equal(b.isOpen(t0), true)
  assert.equal(b.tryAcquire({ nowNs: t0 }), null)
  assert.equal(b.lastRejection.reason, 'breaker_open')
  assert.ok(b.lastRejection.retryAfterMs > 0 && b.lastRejection.retryAfterMs <= 1000)
  const t1 = t0 + 2n * S
  assert.equal(b.state(t1), 'half_open')
  const probe = b.tryAcquire({ nowNs: t1 })
  assert.ok(probe)
  probe.success(t1)
  assert.equal(b.state(t1), 'closed')
  assert.equal(b.metrics(t1).opened, 1)
  assert.equal(b.livePermits, 0)
})

test('CircuitBreaker.run records outcomes and rejects without calling fn when open', async () => {
  const b = new sg.CircuitBreaker({ windowCalls: 4, minimumCalls: 2, openMs: 60000 })
  assert.equal(await b.run(async (x) => x * 2, 21), 42)
  assert.equal(await b.run(() => 'sync'), 'sync')
  const boom = () => Promise.reject(new Error('down'))
  await assert.rejects(b.run(boom), /down/)
  await assert.rejects(b.run(boom), /down/) // 2 of 4 failed: opens
  assert.equal(b.state(), 'open')
  let called = false
  await assert.rejects(b.run(() => { called = true }), (e) => e instanceof sg.RejectedError && e.reason === 'breaker_open')
  assert.equal(called, false)
  assert.equal(b.metrics().rejected, 1)
  const ignoring = new sg.CircuitBreaker({ windowCalls: 4, minimumCalls: 2, classify: () => 'ignore' })
  for (let i = 0; i < 5; i++) await ignoring.run(boom).catch(() => {})
  assert.equal(ignoring.state(), 'closed')
  assert.throws(() => new sg.CircuitBreaker({ windowCalls: 10, windowMs: 1000 }), RangeError)
  assert.throws(() => new sg.CircuitBreaker({ failureRateThreshold: 2 }), RangeError)
})

test('RateLimiter: burst then one per interval, weighted cost', () => {
  const r = new sg.RateLimiter({ perSecond: 10, burst: 5 })
  const t = 7n * S
  for (let i = 0; i < 5; i++) assert.equal(r.tryTake(1, t), true)
  assert.equal(r.tryTake(1, t), false)
  assert.equal(r.lastRejection.reason, 'rate_limited')
  assert.equal(r.lastRejection.retryAfterMs, 100)
  assert.equal(r.waitTimeMs(1, t), 100)
  assert.equal(r.tryTake(1, t + 100_000_000n), true)
  assert.equal(r.takeUpTo(10, t + 1000_000_000n), 5)
  assert.throws(() => r.tryTake(-1), RangeError)
  assert.throws(() => r.tryTake(1.5), RangeError)
  assert.throws(() => new sg.RateLimiter({ perSecond: 0 }), RangeError)
  assert.throws(() => new sg.RateLimiter({}), TypeError)
  assert.equal(r.metrics().denied, 1)
})

test('PacedDrain: drains at target × (1 − headroom)', () => {
  const d = new sg.PacedDrain({ targetPerSec: 1000 })
  const t = 10n * S
  assert.equal(d.drainPerSec, 800)
  assert.equal(d.permits(1_000_000, t), 80)
  assert.equal(d.permits(1_000_000, t + 10_000_000n), 8)
  assert.equal(d.permits(3, t + 20_000_000n), 3)
  assert.ok(d.timeToDrainMs(3_600_000, 600) > 0)
  assert.equal(d.timeToDrainMs(10, 900), null)
  assert.throws(() => d.permits(-1), RangeError)
})
