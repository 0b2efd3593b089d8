'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

const fixed = (n, extra) => new sg.Gate(Object.assign({ algorithm: 'fixed', initialLimit: n }, extra))

test('tryAcquire: a permit or null, never queues', () => {
  const g = fixed(1)
  const p = g.tryAcquire()
  assert.ok(p)
  assert.equal(g.tryAcquire(), null)
  assert.equal(g.lastRejection.reason, 'limit_reached')
  assert.equal(g.waiting, 0)
  p.success()
  assert.equal(g.livePermits, 0)
})

test('acquire resolves at once when there is room', async () => {
  const g = fixed(2)
  const p = await g.acquire()
  const q = await g.acquire({ priority: 'background' })
  assert.equal(q.priority, 2)
  p.success()
  q.success()
  assert.equal(g.inflight, 0)
})

test('waiters are woken in priority order, FIFO within a level', async () => {
  const g = fixed(1, { codel: false })
  const held = g.tryAcquire({ priority: 'critical' })
  const order = []
  const wait = (priority, tag) => g.acquire({ priority }).then((p) => {
    order.push(tag)
    p.success()
  })
  const all = [wait('background', 'bg1'), wait('normal', 'n1'), wait('background', 'bg2'), wait('critical', 'c1'), wait('normal', 'n2')]
  assert.equal(g.waiting, 5)
  assert.equal(g.tryAcquire({ priority: 'background' }), null, 'no overtaking of waiters')
  held.success()
  await Promise.all(all)
  assert.deepEqual(order, ['c1', 'n1', 'n2', 'bg1', 'bg2'])
  assert.equal(g.livePermits, 0)
  assert.equal(g.metrics().granted, 5)
})

test('timeout: a waiter past timeoutMs is rejected with expired and leaves the queue', async () => {
  const g = fixed(1, { codel: false })
  const held = g.tryAcquire()
  const err = await g.acquire({ timeoutMs: 20 }).then(() => null, (e) => e)
  assert.ok(err instanceof sg.RejectedError)
  assert.equal(err.code, 'SG_REJECTED')
  assert.equal(err.reason, 'expired')
  assert.ok(err.retryAfterMs >= 0)
  assert.equal(g.waiting, 0)
  held.success()
  assert.equal(g.metrics().expired, 1)
  assert.equal(g.livePermits, 0)
})

test('maxWaitMs expires waiters through the one timer', async () => {
  const g = fixed(1, { codel: false, maxWaitMs: 15 })
  const held = g.tryAcquire()
  const errs = await Promise.all([g.acquire(), g.acquire({ priority: 'critical' })].map((p) => p.then(() => null, (e) => e)))
  assert.deepEqual(errs.map((e) => e.reason), ['expired', 'expired'])
  held.ignore()
  assert.equal(g.waiting, 0)
})

test('timeoutMs 0 means no wait: admitted now or refused now', async () => {
  const g = fixed(1, { codel: false })
  const p = await g.acquire({ timeoutMs: 0 })
  const e = await g.acquire({ timeoutMs: 0 }).then(() => null, (x) => x)
  assert.equal(e.reason, 'limit_reached')
  assert.equal(g.waiting, 0)
  p[Symbol.dispose]()
  assert.equal(p.released, true)
  assert.equal(g.metrics().limiter.ignored, 1)
  p[Symbol.dispose]() // a second dispose is a no-op
})

test('the sync paths make the core arrival\'s decisions: clock clamp and deadline', async () => {
  const g = fixed(2, { codel: false })
  const ms = 1_000_000n
  const held = g.tryAcquire({ nowNs: 10n * ms })
  held.release('success', 11n * ms)
  // `now` behind the gate's clock is the gate's clock: a 1 ns timeout from 5 ms has
  // passed at 11 ms, though a slot is free (the core refuses; nothing is admitted).
  const e = await g.acquire({ nowNs: 5n * ms, timeoutMs: 1e-6 }).then(() => null, (x) => x)
  assert.equal(e && e.reason, 'deadline_unmeetable')
  assert.equal(g.inflight, 0)
  assert.equal(g.metrics().deadlineUnmeetable, 1)
  // The raw non-queueing call takes the same deadline: (h, level, timeoutMs, nowNs).
  const { F } = require('../lib/native')
  assert.equal(F.gateTryAcquire(g._h, 0, 1e-6, 5n * ms), -(sg.REASONS.indexOf('deadline_unmeetable') + 1))
  const id = F.gateTryAcquire(g._h, 0, 1, 12n * ms)
  assert.ok(id >= 0, 'a deadline ahead of the clock with a free slot is admitted')
  assert.equal(F.gateRelease(g._h, id, 2, 12n * ms), 0)
  assert.throws(() => F.gateTryAcquire(g._h, 0, -2), { name: 'RangeError', code: 'SG_INVALID_ARG' })
  assert.throws(() => F.gateTryAcquire(g._h, 0, '5'), { name: 'TypeError', code: 'SG_INVALID_ARG' })
  assert.equal(g.inflight, 0)
})

test('AbortSignal cancels the ticket', async () => {
  const g = fixed(1, { codel: false })
  const held = g.tryAcquire()
  const ac = new AbortController()
  const pending = g.acquire({ signal: ac.signal })
  assert.equal(g.waiting, 1)
  ac.abort()
  const err = await pending.then(() => null, (e) => e)
  assert.equal(err.name, 'AbortError')
  assert.equal(g.waiting, 0)
  assert.equal(g.metrics().cancelled, 1)
  held.success()
  assert.equal(g.inflight, 0, 'the freed slot was not handed to the cancelled waiter')
  // An already aborted signal rejects without queueing.
  const err2 = await g.acquire({ signal: AbortSignal.abort() }).then(() => null, (e) => e)
  assert.equal(err2.name, 'AbortError')
  assert.equal(g.metrics().queued, 1)
})

test('shed switch refuses at once and expires waiting sheddable work', async () => {
  const g = fixed(1, { codel: false })
  const held = g.tryAcquire()
  const waiting = g.acquire({ priority: 'background' }).then(() => null, (e) => e)
  g.setShedLevel('background')
  assert.equal(g.shedLevel, 2)
  assert.equal((await waiting).reason, 'shed')
  assert.equal(g.tryAcquire({ priority: 'background' }), null)
  assert.equal(g.lastRejection.reason, 'shed')
  const e = await g.acquire({ priority: 'background' }).then(() => null, (x) => x)
  assert.equal(e.reason, 'shed')
  assert.equal(g.state, 'overloaded')
  g.setShedLevel(null)
  assert.equal(g.shedLevel, null)
  held.success()
  assert.equal(g.state, 'healthy')
})

test('a full queue refuses less important arrivals and evicts for more important ones', async () => {
  const g = fixed(1, { codel: false, queueCapacity: 2 })
  const held = g.tryAcquire()
  const bg = g.acquire({ priority: 'background' }).then(() => null, (e) => e)
  const n = g.acquire({ priority: 'normal' })
  const full = await g.acquire({ priority: 'background' }).then(() => null, (e) => e)
  assert.equal(full.reason, 'queue_full')
  const c = g.acquire({ priority: 'critical' })
  assert.equal((await bg).reason, 'evicted')
  held.success()
  const pc = await c
  assert.equal(pc.priority, 0)
  pc.success()
  ;(await n).success()
  assert.equal(g.livePermits, 0)
})

test('run: success, thrown errors classified, refusals rejected', async () => {
  const g = fixed(1)
  assert.equal(await g.run(async (p) => {
    assert.equal(g.inflight, 1)
    return 42
  }), 42)
  assert.equal(g.inflight, 0)
  await assert.rejects(g.run(async () => { throw new Error('app bug') }), /app bug/)
  assert.equal(g.metrics().limiter.ignored, 1, 'an application error is not a capacity signal')
  const t = new Error('slow')
  t.name = 'TimeoutError'
  await assert.rejects(g.run(() => Promise.reject(t)))
  assert.equal(g.metrics().limiter.drops, 1)
  assert.equal(await g.run(() => 'sync'), 'sync')
  // Queued run: waits for the slot.
  const held = g.tryAcquire()
  const queued = g.run(async () => 'later')
  held.success()
  assert.equal(await queued, 'later')
  g.setShedLevel('critical')
  await assert.rejects(g.run(async () => 1), (e) => e instanceof sg.RejectedError && e.reason === 'shed')
  g.setShedLevel(null)
  await assert.rejects(g.run('nope'), TypeError)
  await g.run(async () => { throw new Error('x') }, { classify: () => 'dropped' }).catch(() => {})
  assert.equal(g.metrics().limiter.drops, 2)
  assert.equal(g.livePermits, 0)
})

test('no leaked permits under a burst of mixed waiters, aborts and timeouts', async () => {
  const g = fixed(3, { codel: false, queueCapacity: 64 })
  const tasks = []
  for (let i = 0; i < 200; i++) {
    const ac = new AbortController()
    const priority = ['critical', 'normal', 'background'][i % 3]
    const t = g.acquire({ priority, signal: ac.signal, timeoutMs: i % 7 === 0 ? 1 : 1000 })
      .then((p) => new Promise((resolve) => setImmediate(() => { p.success(); resolve('ok') })), (e) => e.name === 'AbortError' ? 'aborted' : e.reason)
    if (i % 5 === 0) setImmediate(() => ac.abort())
    tasks.push(t)
  }
  const results = await Promise.all(tasks)
  assert.ok(results.includes('ok'))
  assert.equal(g.inflight, 0)
  assert.equal(g.waiting, 0)
  assert.equal(g.livePermits, 0)
  const m = g.metrics()
  assert.equal(m.limiter.admitted, m.limiter.successes + m.limiter.drops + m.limiter.ignored)
})

test('gate options are validated', () => {
  assert.throws(() => fixed(1, { queueCapacity: 0 }), RangeError)
  assert.throws(() => fixed(1, { queueCapacity: 5000 }), RangeError)
  assert.throws(() => fixed(1, { maxWaitMs: NaN }), RangeError)
  assert.throws(() => fixed(1, { lifo: 'sometimes' }), RangeError)
  assert.throws(() => fixed(1, { codel: 'yes' }), TypeError)
  assert.throws(() => fixed(1, { codelTargetMs: 200, codelIntervalMs: 100 }), RangeError)
  assert.throws(() => fixed(1, { aging: { from: 'background', to: 'critical', afterMs: 10 } }), RangeError)
  assert.throws(() => fixed(1, { bogus: 1 }), TypeError)
  const g = fixed(1, { aging: { from: 'normal', to: 'background', afterMs: 500 }, lifo: 0.8 })
  assert.ok(g.tryAcquire())
})

test('acquire argument errors reject without state change', async () => {
  const g = fixed(1)
  await assert.rejects(g.acquire({ timeoutMs: -5 }), RangeError)
  await assert.rejects(g.acquire({ timeoutMs: 'soon' }), TypeError)
  await assert.rejects(g.acquire({ priority: 7 }), RangeError)
  await assert.rejects(g.acquire({ signal: {} }), TypeError)
  await assert.rejects(g.acquire(5), TypeError)
  assert.equal(g.inflight, 0)
  assert.equal(g.metrics().queued, 0)
})
