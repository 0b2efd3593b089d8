'use strict'
// Two real hops on loopback: a client → service A (Express) → dependency B (Fastify), A
// calling B through the fetch wrapper. B slows down (1 slot of 200 ms: 5 requests/s)
// while the client sends 20 requests/s, each with a 500 ms budget, giving up at 500 ms.
// With deadline propagation B never STARTS work whose caller has already given up; without
// it, it does, and the test counts how much. All three run in this one process: the
// wrapper's margin (50 ms here) covers the loopback transit, which on a loaded machine
// includes waiting for this process's event loop.
const test = require('node:test')
const assert = require('node:assert/strict')
const { setTimeout: sleep } = require('node:timers/promises')
const sg = require('..')

const REQUESTS = 16
const INTERVAL_MS = 50
const BUDGET_MS = 500
const SLOW_MS = 200
const MARGIN_MS = 50

// Node loads its fetch on first use, which on a loaded machine can eat a client's whole
// budget: load it before any timing starts.
void globalThis.fetch

async function hops (propagate) {
  // B: the slow dependency.
  const starts = new Map() // request id → when B's handler started (performance.now())
  const gateB = new sg.Gate({ algorithm: 'fixed', initialLimit: 1, codel: false, queueCapacity: 64, initialServiceMs: SLOW_MS })
  const b = require('fastify')({ logger: false })
  await b.register(sg.fastify, { gate: gateB, deadlines: propagate })
  b.get('/dep', async (request) => {
    starts.set(request.headers['x-req-id'], performance.now())
    await sleep(SLOW_MS)
    return { ok: true }
  })
  await b.listen({ port: 0, host: '127.0.0.1' })
  const bUrl = `http://127.0.0.1:${b.server.address().port}/dep`

  // A: the service, calling B through the wrapper (no retries: one call per request).
  const gateA = new sg.Gate({ algorithm: 'fixed', initialLimit: 100 })
  const call = sg.createFetch({ deadlines: propagate, deadlineMarginMs: MARGIN_MS, budget: false, maxAttempts: 1 })
  const app = require('express')()
  app.use(sg.express({ gate: gateA, deadlines: propagate }))
  app.get('/', async (req, res) => {
    try {
      const r = await call(bUrl, { headers: { 'x-req-id': req.headers['x-req-id'] } })
      res.status(r.status).json(await r.json())
    } catch (err) {
      res.status(err instanceof sg.DeadlineError ? 504 : 502).json({ error: err.code || err.name })
    }
  })
  const a = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
  const aUrl = `http://127.0.0.1:${a.address().port}/`

  // The client: a request every INTERVAL_MS, each with its budget, abandoned when it runs out.
  const gaveUp = new Map() // request id → when the client aborted
  const statuses = await Promise.all(Array.from({ length: REQUESTS }, async (_, i) => {
    const id = String(i)
    await sleep(i * INTERVAL_MS)
    const ac = new AbortController()
    const timer = setTimeout(() => {
      gaveUp.set(id, performance.now())
      ac.abort()
    }, BUDGET_MS)
    try {
      const res = await fetch(aUrl, { headers: { 'x-req-id': id, 'surgeguard-timeout-ms': String(BUDGET_MS) }, signal: ac.signal })
      await res.text()
      return res.status
    } catch {
      return 'gave up'
    } finally {
      clearTimeout(timer)
    }
  }))
  // Let B finish (or drop) everything still queued.
  for (let i = 0; i < 200 && (gateB.waiting > 0 || gateB.inflight > 0 || gateA.inflight > 0); i++) await sleep(10)
  await sleep(SLOW_MS)
  let wasted = 0
  for (const [id, at] of starts) if (gaveUp.has(id) && at > gaveUp.get(id)) wasted++
  const out = { statuses, started: starts.size, wasted, gaveUp: gaveUp.size, b: gateB.metrics(), livePermits: gateA.livePermits + gateB.livePermits }
  a.closeAllConnections()
  await new Promise((resolve) => a.close(resolve))
  b.server.closeAllConnections()
  await b.close()
  return out
}

test('two hops: with propagation the dependency never starts work for a caller that gave up; without, it does', async (t) => {
  const off = await hops(false)
  const on = await hops(true)
  t.diagnostic(`propagation off: B started ${off.started} of ${REQUESTS}, ${off.wasted} after the caller gave up (${off.gaveUp} gave up)`)
  t.diagnostic(`propagation on:  B started ${on.started} of ${REQUESTS}, ${on.wasted} after the caller gave up (${on.gaveUp} gave up); B expired ${on.b.expired}, cancelled ${on.b.cancelled}, unmeetable ${on.b.deadlineUnmeetable}`)
  // Off: B works through its whole queue, long after most callers left.
  assert.equal(off.started, REQUESTS)
  assert.ok(off.wasted >= REQUESTS / 4, `wasted without propagation: ${off.wasted}`)
  // On: no work started after its caller gave up; what B did not start was dropped from
  // its queue (expired or cancelled) or refused at arrival.
  assert.equal(on.wasted, 0, `wasted with propagation: ${on.wasted}`)
  assert.ok(on.started < REQUESTS)
  assert.ok(on.b.expired + on.b.cancelled + on.b.deadlineUnmeetable >= REQUESTS - on.started - 1, JSON.stringify(on.b))
  // Callers that were served were served in time either way; nothing leaked.
  assert.ok(on.statuses.filter((s) => s === 200).length >= 1)
  assert.equal(off.livePermits + on.livePermits, 0)
})
