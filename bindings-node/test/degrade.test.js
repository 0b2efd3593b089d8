'use strict'
// Graceful degradation: withFallback answers refusals and deadlines and never bugs;
// StaleIfError serves the last good value, bounded and marked stale (a Warning header in
// the middlewares); optional() dims optional work by the gate's brownout value.
const test = require('node:test')
const assert = require('node:assert/strict')
const { setTimeout: sleep } = require('node:timers/promises')
const fc = require('fast-check')
const sg = require('..')

const RUNS = Number(process.env.SG_SWEEP_RUNS || 200)

const invalid = (e) => (e instanceof TypeError || e instanceof RangeError) && e.code === 'SG_INVALID_ARG'

/** Errors a fallback answers, made the way the library makes them. */
async function degradables () {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1 })
  gate.setShedLevel('critical')
  const shed = await gate.acquire().catch((e) => e)
  const breaker = new sg.CircuitBreaker({ windowCalls: 2, minimumCalls: 2, failureRateThreshold: 0.5, openMs: 60000 })
  for (let i = 0; i < 2; i++) await breaker.run(() => Promise.reject(new Error('boom'))).catch(() => {})
  const open = await breaker.run(() => 1).catch((e) => e)
  const tooShort = await sg.deadline.run(0, () => sg.createFetch({ fetch: async () => new Response('x') })('http://127.0.0.1:1/')).catch((e) => e)
  const s = AbortSignal.timeout(1)
  await sleep(20) // AbortSignal.timeout's timer does not keep the loop alive; this does
  const timeout = s.reason
  return { shed, open, tooShort, exceeded: new sg.DeadlineExceededError(), timeout }
}

test('isDegradable: refusals and deadlines yes; bugs and other errors no', async () => {
  const d = await degradables()
  assert.equal(d.shed.reason, 'shed')
  assert.equal(d.open.reason, 'breaker_open')
  assert.ok(d.tooShort instanceof sg.DeadlineTooShortError && d.tooShort.code === 'SG_DEADLINE_TOO_SHORT', String(d.tooShort))
  assert.equal(d.timeout.name, 'TimeoutError')
  for (const [k, e] of Object.entries(d)) assert.equal(sg.isDegradable(e), true, k)
  const gate = new sg.Gate()
  const p = gate.tryAcquire()
  p.success()
  let usage
  try { p.success() } catch (e) { usage = e }
  assert.equal(usage.code, 'SG_ALREADY_RELEASED')
  let badArg
  try { gate.tryAcquire({ priority: NaN }) } catch (e) { badArg = e }
  const abort = new DOMException('aborted', 'AbortError')
  for (const e of [usage, badArg, new TypeError('x'), new RangeError('x'), new ReferenceError('x'), new Error('boom'), abort, null, undefined, 'str', 5]) {
    assert.equal(sg.isDegradable(e), false, String(e))
  }
})

test('withFallback: the fallback answers refusals and deadlines; bugs propagate', async () => {
  const d = await degradables()
  for (const [k, e] of Object.entries(d)) {
    assert.equal(await sg.withFallback(() => Promise.reject(e), { fallback: 'default' }), 'default', k)
    // Thrown synchronously too; a function fallback gets the error.
    assert.equal(await sg.withFallback(() => { throw e }, { fallback: (err) => err === e }), true, k)
  }
  assert.equal(await sg.withFallback(async () => 'live', { fallback: 'default' }), 'live')
  assert.equal(await sg.withFallback(() => 'sync', { fallback: 'default' }), 'sync')
  const bug = new TypeError('undefined is not a function')
  await assert.rejects(sg.withFallback(() => { throw bug }, { fallback: 'default' }), (e) => e === bug)
  await assert.rejects(sg.withFallback(() => Promise.reject(new Error('app')), { fallback: 'default' }), /app/)
  // on: widen (or narrow) what the fallback answers.
  assert.equal(await sg.withFallback(() => Promise.reject(new Error('app')), { fallback: 1, on: () => true }), 1)
  await assert.rejects(sg.withFallback(() => Promise.reject(d.shed), { fallback: 1, on: () => false }), (e) => e === d.shed)
  // A fallback that throws rejects with its own error.
  await assert.rejects(sg.withFallback(() => Promise.reject(d.shed), { fallback: () => { throw new Error('fb') } }), /fb/)
  // Bad usage: rejected, fn never called.
  let called = 0
  const fn = () => called++
  for (const bad of [undefined, null, {}, { fallback: 1, on: 5 }, { fallback: 1, extra: 1 }, 'x']) {
    await assert.rejects(sg.withFallback(fn, bad), invalid, JSON.stringify(bad))
  }
  await assert.rejects(sg.withFallback('nope', { fallback: 1 }), invalid)
  assert.equal(called, 0)
})

test('withFallback in a gate-protected path: refused work falls back, admitted work runs', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1, queueCapacity: 1, codel: false })
  let ran = 0
  const work = () => gate.run(async () => { ran++; await sleep(30); return 'fresh' }, { timeoutMs: 0 })
  const results = await Promise.all([1, 2, 3].map(() => sg.withFallback(work, { fallback: 'cached' })))
  assert.deepEqual(results.sort(), ['cached', 'cached', 'fresh'])
  assert.equal(ran, 1)
})

test('StaleIfError: serves the last good value on failure, marked stale; bugs and misses propagate', async () => {
  const cache = new sg.StaleIfError({ maxEntries: 10, maxAgeMs: 10000 })
  assert.deepEqual(await cache.get('a', () => 1), { value: 1, stale: false })
  const shed = new sg.RejectedError('shed', 100)
  const r = await cache.get('a', () => Promise.reject(shed))
  assert.equal(r.value, 1)
  assert.equal(r.stale, true)
  assert.equal(r.error, shed)
  assert.ok(r.ageMs >= 0 && r.ageMs < 10000)
  // A failure of the origin (not a bug), and fetch's network error, serve stale too.
  assert.equal((await cache.get('a', () => Promise.reject(new Error('503 from origin')))).stale, true)
  const netErr = await fetch('http://127.0.0.1:1/').catch((e) => e)
  assert.equal((await cache.get('a', () => Promise.reject(netErr))).stale, true)
  // No value yet: the error propagates.
  await assert.rejects(cache.get('b', () => Promise.reject(shed)), (e) => e === shed)
  // Bugs propagate even with a value.
  const bug = new TypeError('x is not a function')
  await assert.rejects(cache.get('a', () => { throw bug }), (e) => e === bug)
  // A fresh value replaces the old one.
  assert.deepEqual(await cache.get('a', () => 2), { value: 2, stale: false })
  assert.equal((await cache.get('a', () => Promise.reject(shed))).value, 2)
  const m = cache.metrics()
  assert.deepEqual([m.fresh, m.stale, m.misses, m.entries], [2, 4, 1, 1])
  assert.match(sg.renderPrometheus({ cache }), /^surgeguard_stale_if_error_stale_total\{name="cache"\} 4$/m)
  await assert.rejects(cache.get(5, () => 1), invalid)
  await assert.rejects(cache.get('a', 5), invalid)
  assert.equal(cache.size, 1)
})

test('StaleIfError: maxAgeMs bounds what is served', async () => {
  const cache = new sg.StaleIfError({ maxAgeMs: 20 })
  await cache.get('k', () => 'v')
  await sleep(40)
  const err = new sg.RejectedError('limit_reached', 0)
  await assert.rejects(cache.get('k', () => Promise.reject(err)), (e) => e === err)
  assert.equal(cache.size, 0, 'an expired value is dropped when seen')
})

test('StaleIfError: a model of a bounded LRU (fast-check): never more than maxEntries, serves exactly what the model holds', async () => {
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 1, max: 5 }),
    fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'g'), fc.boolean(), fc.integer()), { maxLength: 60 }),
    async (max, ops) => {
      const cache = new sg.StaleIfError({ maxEntries: max })
      const model = [] // [key, value], least recently used first
      const shed = new sg.RejectedError('shed', 0)
      for (const [key, ok, value] of ops) {
        const i = model.findIndex(([k]) => k === key)
        if (ok) {
          assert.deepEqual(await cache.get(key, () => value), { value, stale: false })
          if (i >= 0) model.splice(i, 1)
          model.push([key, value])
          if (model.length > max) model.shift()
        } else if (i >= 0) {
          const r = await cache.get(key, () => Promise.reject(shed))
          assert.equal(r.stale, true)
          assert.equal(r.value, model[i][1])
          model.push(model.splice(i, 1)[0]) // served: most recently used
        } else {
          await assert.rejects(cache.get(key, () => Promise.reject(shed)), (e) => e === shed)
        }
        assert.ok(cache.size <= max)
        assert.equal(cache.size, model.length)
      }
    }
  ), { numRuns: RUNS })
})

test('StaleIfError: constructor options are checked', () => {
  for (const bad of [{ maxEntries: 0 }, { maxEntries: 1.5 }, { maxEntries: -1 }, { maxAgeMs: NaN }, { maxAgeMs: -1 }, { isFailure: 1 }, { x: 1 }, 5]) {
    assert.throws(() => new sg.StaleIfError(bad), invalid, JSON.stringify(bad))
  }
})

for (const name of ['express', 'fastify']) {
  test(`${name}: a handler that serves stale gets Warning: 110 on its response`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4 })
    const cache = new sg.StaleIfError()
    let originUp = true
    const origin = () => (originUp ? Promise.resolve({ price: 42 }) : Promise.reject(new sg.RejectedError('breaker_open', 1000)))
    const handler = async () => {
      const r = await cache.get('price', origin)
      return { price: r.value.price, stale: r.stale }
    }
    let url, close
    if (name === 'express') {
      const app = require('express')()
      app.use(sg.express({ gate }))
      app.get('/', async (req, res) => res.json(await handler()))
      const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
      url = `http://127.0.0.1:${server.address().port}/`
      close = () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) })
    } else {
      const app = require('fastify')({ logger: false })
      await app.register(sg.fastify, { gate })
      app.get('/', handler)
      await app.listen({ port: 0, host: '127.0.0.1' })
      url = `http://127.0.0.1:${app.server.address().port}/`
      close = () => app.close()
    }
    try {
      let res = await fetch(url)
      assert.deepEqual(await res.json(), { price: 42, stale: false })
      assert.equal(res.headers.get('warning'), null)
      originUp = false
      res = await fetch(url)
      assert.deepEqual(await res.json(), { price: 42, stale: true })
      assert.equal(res.headers.get('warning'), sg.STALE_WARNING)
      assert.equal(sg.STALE_WARNING, '110 - "Response is Stale"')
      originUp = true
      res = await fetch(url)
      assert.equal(res.headers.get('warning'), null, 'only the stale response is marked')
      await res.text()
    } finally {
      await close()
    }
  })
}

/** mulberry32: a small seeded PRNG in [0, 1). */
function seeded (seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

test('optional: runs with probability 1 − d, deterministically for a seeded source', async () => {
  const gate = new sg.Gate()
  let d = 0
  gate.brownout = () => d // the dimmer's value, set by hand here
  fc.assert(fc.property(fc.double({ min: 0, max: 1, noNaN: true }), fc.integer(), (dim, seed) => {
    d = dim
    const a = sg.optional(gate, { random: seeded(seed) })
    const b = sg.optional(gate, { random: seeded(seed) })
    const runs = Array.from({ length: 400 }, () => a.enabled())
    assert.deepEqual(Array.from({ length: 400 }, () => b.enabled()), runs, 'same seed, same decisions')
    const served = runs.filter(Boolean).length
    // Binomial(400, 1 − d): within 5 standard deviations (+1 for rounding).
    const sd = Math.sqrt(400 * dim * (1 - dim))
    assert.ok(Math.abs(served - 400 * (1 - dim)) <= 5 * sd + 1, `d=${dim}: ${served} of 400`)
    if (dim === 0) assert.equal(served, 400)
    if (dim === 1) assert.equal(served, 0)
    assert.deepEqual(a.metrics(), { served, dimmed: 400 - served })
  }), { numRuns: RUNS })
  d = 1
  let called = 0
  const o = sg.optional(gate)
  assert.equal(await o.run(() => { called++; return 'full' }, 'lite'), 'lite')
  assert.equal(await o.run(() => { called++; return 'full' }, () => 'computed'), 'computed')
  d = 0
  assert.equal(await o.run(() => { called++; return 'full' }, 'lite'), 'full')
  assert.equal(called, 1)
  assert.match(sg.renderPrometheus({ extras: o }), /^surgeguard_optional_dimmed_total\{name="extras"\} 2$/m)
  // Bad input: refused, nothing counted.
  assert.throws(() => sg.optional({}), invalid)
  assert.throws(() => sg.optional(gate, { random: 5 }), invalid)
  const bad = sg.optional(gate, { random: () => 1.5 })
  assert.throws(() => bad.enabled(), invalid)
  await assert.rejects(o.run('x', 'lite'), invalid)
  assert.deepEqual(bad.metrics(), { served: 0, dimmed: 0 })
})

test('optional over a real gate: optional work dims as the queue fills, before the gate refuses anything', async () => {
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1, queueCapacity: 10, codel: false })
  const extras = sg.optional(gate, { random: seeded(7) })
  const share = () => Array.from({ length: 200 }, () => extras.enabled()).filter(Boolean).length / 200
  const held = gate.tryAcquire()
  assert.equal(share(), 1, 'idle: every optional feature on')
  const waiters = []
  const shares = []
  for (let i = 0; i < 9; i++) {
    waiters.push(gate.acquire().catch((e) => e))
    shares.push(share())
  }
  const m = gate.metrics()
  assert.equal(m.queueFull + m.shed + m.evicted + m.expired + m.sloughed, 0, 'nothing refused yet')
  assert.ok(shares[shares.length - 1] < 0.05, `full queue: ${shares}`)
  for (let i = 1; i < shares.length; i++) assert.ok(shares[i] <= shares[i - 1] + 0.1, `dims monotonically: ${shares}`)
  held.success()
  for (const w of waiters) (await w).success()
  assert.equal(gate.livePermits, 0)
})
