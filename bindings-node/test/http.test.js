'use strict'
// End-to-end: real Express and Fastify servers on 127.0.0.1 (port 0), a slow handler,
// bounded load from this process only.
const test = require('node:test')
const assert = require('node:assert/strict')
const { setTimeout: sleep } = require('node:timers/promises')
const sg = require('..')

const SLOW_MS = 60

async function expressServer (opts) {
  const express = require('express')
  const app = express()
  app.use(sg.express(opts))
  app.get('/work', async (req, res) => {
    await sleep(SLOW_MS)
    res.json({ ok: true })
  })
  app.get('/bad', (req, res) => res.status(400).end())
  app.get('/fail', (req, res) => res.status(503).end())
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s))
  })
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(r) }) }
}

async function fastifyServer (opts) {
  const fastify = require('fastify')({ logger: false })
  await fastify.register(sg.fastify, opts)
  fastify.get('/work', async () => {
    await sleep(SLOW_MS)
    return { ok: true }
  })
  fastify.get('/bad', async (req, reply) => reply.code(400).send())
  fastify.get('/fail', async (req, reply) => reply.code(503).send())
  await fastify.listen({ port: 0, host: '127.0.0.1' })
  return { url: `http://127.0.0.1:${fastify.server.address().port}`, close: () => fastify.close(), fastify }
}

async function get (url, headers) {
  const res = await fetch(url, { headers })
  const text = await res.text()
  return { status: res.status, retryAfter: res.headers.get('retry-after'), type: res.headers.get('content-type'), text }
}

async function drained (gate, keyed) {
  for (let i = 0; i < 200 && (gate.livePermits > 0 || (keyed && keyed.livePermits > 0)); i++) await sleep(5)
  assert.equal(gate.livePermits, 0, 'no leaked gate permits')
  assert.equal(gate.inflight, 0)
  if (keyed) assert.equal(keyed.livePermits, 0, 'no leaked key permits')
}

for (const [name, make] of [['express', expressServer], ['fastify', fastifyServer]]) {
  test(`${name}: overload answers 503 + Retry-After + JSON; permits released on close`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 2, queueCapacity: 2, codel: false })
    const srv = await make({ gate, readinessRoute: '/ready' })
    try {
      const results = await Promise.all(Array.from({ length: 12 }, () => get(srv.url + '/work')))
      const ok = results.filter((r) => r.status === 200)
      const shed = results.filter((r) => r.status === 503)
      assert.ok(ok.length >= 4, `served ${ok.length}`)
      assert.ok(shed.length >= 1, 'some were shed')
      assert.equal(ok.length + shed.length, 12)
      for (const r of shed) {
        assert.ok(Number(r.retryAfter) >= 1, `Retry-After ${r.retryAfter}`)
        assert.match(r.type, /application\/json/)
        const body = JSON.parse(r.text)
        assert.equal(body.error, 'service overloaded')
        assert.equal(body.reason, 'queue_full')
      }
      const ready = await get(srv.url + '/ready')
      assert.equal(ready.status, 200)
      assert.ok(['healthy', 'overloaded'].includes(JSON.parse(ready.text).status))
      // Outcomes from the status: 400 → ignore, 503 from the handler → dropped.
      const before = gate.metrics().limiter
      assert.equal((await get(srv.url + '/bad')).status, 400)
      assert.equal((await get(srv.url + '/fail')).status, 503)
      await drained(gate)
      const after = gate.metrics().limiter
      assert.equal(after.ignored - before.ignored, 1)
      assert.equal(after.drops - before.drops, 1)
      // The shed switch: background refused at once (counted once), critical still served.
      gate.setShedLevel('background')
      const shedBefore = gate.metrics().shed
      const s = await get(srv.url + '/work', { 'x-request-priority': 'background' })
      assert.equal(s.status, 503)
      assert.equal(JSON.parse(s.text).reason, 'shed')
      assert.equal(gate.metrics().shed - shedBefore, 1)
      assert.equal((await get(srv.url + '/work', { 'x-request-priority': 'critical' })).status, 200)
      gate.setShedLevel(null)
      await drained(gate)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: critical keeps succeeding while background is shed`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 4, queueCapacity: 6, codel: false })
    const srv = await make({ gate })
    try {
      // Background floods (8 per wave against 4 slots of 60 ms); one critical per wave,
      // well within capacity.
      const bg = []
      const crit = []
      for (let wave = 0; wave < 4; wave++) {
        for (let i = 0; i < 8; i++) bg.push(get(srv.url + '/work', { 'x-request-priority': 'background' }))
        await sleep(5)
        crit.push(get(srv.url + '/work', { 'x-request-priority': 'critical' }))
        await sleep(25)
      }
      const b = await Promise.all(bg)
      const c = await Promise.all(crit)
      assert.deepEqual(c.map((r) => r.status), c.map(() => 200), 'every critical request succeeded')
      const shed = b.filter((r) => r.status === 503)
      assert.ok(shed.length >= 5, `background shed: ${shed.length} of ${b.length}`)
      for (const r of shed) assert.ok(['queue_full', 'evicted'].includes(JSON.parse(r.text).reason), r.text)
      await drained(gate)
    } finally {
      await srv.close()
    }
  })

  test(`${name}: a flooding tenant gets 429 + JSON while another keeps succeeding`, async () => {
    const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 50 })
    const keyed = new sg.KeyedLimits({ shards: 64, shardsPerKey: 2, shardLimit: 1, limitRetryAfterMs: 2000, seed: 11 })
    // Pick a quiet tenant that does not share both shards with the noisy one.
    const noisy = keyed.shardsOf('tenant-noisy')
    let quiet = 'tenant-quiet'
    for (let i = 0; keyed.shardsOf(quiet).some((s) => noisy.includes(s)); i++) quiet = 'tenant-quiet-' + i
    const srv = await make({ gate, keyed, key: 'X-Tenant-Id' })
    try {
      const flood = Array.from({ length: 12 }, () => get(srv.url + '/work', { 'x-tenant-id': 'tenant-noisy' }))
      await sleep(5)
      const q = []
      for (let i = 0; i < 3; i++) q.push(await get(srv.url + '/work', { 'x-tenant-id': quiet }))
      const f = await Promise.all(flood)
      const refused = f.filter((r) => r.status === 429)
      assert.ok(refused.length >= 8, `noisy refused ${refused.length}`)
      assert.ok(f.filter((r) => r.status === 200).length <= 4)
      for (const r of refused) {
        assert.equal(r.retryAfter, '2')
        assert.equal(r.text, '{"error": "too many requests", "reason": "key_limit", "retry_after_s": 2, "retry": "not before retry_after_s"}')
      }
      assert.deepEqual(q.map((r) => r.status), [200, 200, 200], 'the quiet tenant is unaffected')
      assert.equal((await get(srv.url + '/work')).status, 200, 'no key: only the gate applies')
      await drained(gate, keyed)
      const top = keyed.metrics().topKeys
      assert.equal(top[0].key, 'tenant-noisy')
    } finally {
      await srv.close()
    }
  })
}

test('middleware options are validated', () => {
  assert.throws(() => sg.express({}), TypeError)
  assert.throws(() => sg.express({ gate: {} }), TypeError)
  const gate = new sg.Gate()
  assert.throws(() => sg.express({ gate, key: 'x-tenant-id' }), TypeError)
  assert.throws(() => sg.express({ gate, timeoutMs: -1 }), RangeError)
  assert.throws(() => sg.readiness({}), TypeError)
})
