'use strict'
// Gate.shared and KeyedLimits.shared (Linux): one queue across objects, processes and
// worker threads; waiters granted by releases elsewhere (through the native pump thread);
// abort and timeout; typed errors; a fast-check property (a shared gate decides like an
// in-process one); a process killed with SIGKILL holding key permits; the middlewares
// on shared objects.
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { Worker } = require('node:worker_threads')
const { setTimeout: sleep } = require('node:timers/promises')
const fc = require('fast-check')
const sg = require('..')

const PKG = path.join(__dirname, '..')
const linux = process.platform === 'linux'
let seq = 0
function fresh () {
  return `sg-node-gate-${process.pid}-${++seq}`
}
const FIXED = (n) => ({ algorithm: 'fixed', initialLimit: n, levels: 1, codel: false })

/** Resolves true if `p` settles within `ms`, false otherwise. */
function settlesWithin (p, ms) {
  return Promise.race([p.then(() => true, () => true), sleep(ms).then(() => false)])
}

test('a shared gate: one limit and one queue; a release by one object grants the waiter of another', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const a = sg.Gate.shared(name, FIXED(1))
    const b = sg.Gate.shared(name, FIXED(1))
    assert.ok(a instanceof sg.Gate && a.shared && !new sg.Gate().shared)
    assert.equal(a.created, true)
    assert.equal(b.created, false)
    const p = a.tryAcquire()
    assert.ok(p)
    assert.equal(b.tryAcquire(), null)
    assert.equal(b.lastRejection.reason, 'limit_reached')
    const w = b.acquire()
    assert.equal(await settlesWithin(w, 50), false, 'queued while the permit is held')
    assert.equal(a.waiting, 1)
    p.success()
    const q = await w
    assert.equal(b.inflight, 1)
    assert.equal(b.heldHere, 1)
    assert.equal(a.heldHere, 0)
    q.success()
    assert.throws(() => q.success(), (e) => e.code === 'SG_ALREADY_RELEASED')
    assert.equal(a.inflight, 0)
    assert.equal(a.waiting, 0)
    const m = a.metrics()
    assert.equal(m.queued, 1)
    assert.equal(m.granted, 1)
  } finally {
    sg.unlinkShared(name)
  }
})

test('a shared gate: abort and timeout withdraw the ticket; errors are typed and change nothing', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const g = sg.Gate.shared(name, FIXED(1))
    const held = g.tryAcquire()
    // Abort: rejected with the signal's reason, the ticket withdrawn.
    const ac = new AbortController()
    const w = g.acquire({ signal: ac.signal })
    await sleep(5)
    assert.equal(g.waiting, 1)
    ac.abort(new Error('gone'))
    await assert.rejects(w, /gone/)
    assert.equal(g.waiting, 0)
    assert.equal(g.metrics().cancelled, 1)
    // Timeout: the pump thread polls the gate at its next wakeup and the waiter expires.
    const t0 = performance.now()
    await assert.rejects(g.acquire({ timeoutMs: 30 }), (e) => e instanceof sg.RejectedError && e.reason === 'expired')
    const ms = performance.now() - t0
    assert.ok(ms >= 25 && ms < 1000, `expired after ${ms.toFixed(0)} ms`)
    assert.equal(g.waiting, 0)
    // timeoutMs 0: no wait at all.
    await assert.rejects(g.acquire({ timeoutMs: 0 }), (e) => e.reason === 'limit_reached')
    held.success()
    assert.equal(g.inflight, 0)
    // Bad input: typed, nothing changed.
    assert.throws(() => sg.Gate.shared(undefined, FIXED(1)), TypeError)
    assert.throws(() => sg.Gate.shared(42, FIXED(1)), TypeError)
    assert.throws(() => sg.Gate.shared('bad name!', FIXED(1)), (e) => e.code === 'SG_INVALID_ARG')
    assert.throws(() => sg.Gate.shared(name, FIXED(2)), (e) => e.code === 'SG_SHM_REFUSED')
    assert.throws(() => sg.Gate.shared(name, { ...FIXED(1), queueCapacity: 1000 }), (e) => e.code === 'SG_INVALID_ARG')
    assert.throws(() => g.tryAcquire({ priority: 'nope' }), (e) => e.code === 'SG_INVALID_ARG')
    await assert.rejects(g.acquire({ timeoutMs: -1 }), (e) => e.code === 'SG_INVALID_ARG')
    await assert.rejects(g.acquire({ timeoutMs: NaN }), (e) => e.code === 'SG_INVALID_ARG')
    assert.throws(() => g.tryAcquire.call({}), TypeError)
    assert.equal(g.inflight, 0)
    assert.equal(g.waiting, 0)
    // run(): success on resolve, the permit ends either way.
    assert.equal(await g.run(async () => 7), 7)
    await assert.rejects(g.run(async () => { throw new Error('app') }), /app/)
    assert.equal(g.inflight, 0)
    assert.equal(g.livePermits, 0)
  } finally {
    sg.unlinkShared(name)
  }
})

test('a shared gate: a grant that raced with an abort is released as ignored', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const a = sg.Gate.shared(name, FIXED(1))
    const b = sg.Gate.shared(name, FIXED(1))
    const p = a.tryAcquire()
    const ac = new AbortController()
    const w = b.acquire({ signal: ac.signal })
    // In one tick: the release grants b's ticket (in its mailbox, not yet taken), then
    // b's waiter aborts before its pump delivers the grant.
    p.success()
    assert.equal(b.waiting, 0)
    assert.equal(b.inflight, 1, 'granted to b')
    ac.abort(new Error('client gone'))
    await assert.rejects(w, /client gone/)
    assert.equal(b.inflight, 0, 'the raced grant was released')
    assert.equal(b.heldHere, 0)
    assert.equal(b.livePermits, 0)
    assert.equal(b.metrics().granted, 1)
    const q = a.tryAcquire()
    assert.ok(q, 'the slot is free again')
    q.success()
  } finally {
    sg.unlinkShared(name)
  }
})

test('a shared gate: reclaim() gives back a killed process\'s permit once and withdraws its ticket', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const g = sg.Gate.shared(name, FIXED(1))
    const code = `
      const sg = require(${JSON.stringify(PKG)})
      const g = sg.Gate.shared(process.argv[1], { algorithm: 'fixed', initialLimit: 1, levels: 1, codel: false })
      const p = g.tryAcquire()
      g.acquire().catch(() => {})
      console.log(p ? 'held' : 'refused')
    `
    const child = spawn(process.execPath, ['-e', code, name], { stdio: ['ignore', 'pipe', 'inherit'] })
    const line = await new Promise((resolve) => child.stdout.once('data', (b) => resolve(String(b).trim())))
    assert.equal(line, 'held')
    assert.equal(g.inflight, 1)
    assert.equal(g.waiting, 1)
    assert.equal(g.tryAcquire(), null)
    child.kill('SIGKILL')
    await new Promise((resolve) => child.on('exit', resolve))
    assert.equal(g.reclaim(), 1)
    assert.equal(g.reclaim(), 0, 'once')
    assert.equal(g.waiting, 0, 'its ticket was withdrawn')
    assert.equal(g.inflight, 0)
    const p = g.tryAcquire()
    assert.ok(p)
    p.success()
  } finally {
    sg.unlinkShared(name)
  }
})

test('a shared gate does not keep the event loop alive when nothing waits', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const code = `
      const sg = require(${JSON.stringify(PKG)})
      const g = sg.Gate.shared(process.argv[1], { algorithm: 'fixed', initialLimit: 1, levels: 1 })
      const p = g.tryAcquire()
      const w = g.acquire()
      setTimeout(() => p.success(), 20)
      w.then((q) => { q.success(); console.log('granted') })
    `
    const child = spawn(process.execPath, ['-e', code, name], { stdio: ['ignore', 'pipe', 'inherit'] })
    let out = ''
    child.stdout.on('data', (b) => { out += b })
    const t0 = performance.now()
    const code2 = await new Promise((resolve) => child.on('exit', resolve))
    assert.equal(code2, 0)
    assert.equal(out.trim(), 'granted')
    // The pump thread is told to stop when the last waiter settles (exits within 100 ms).
    assert.ok(performance.now() - t0 < 5000)
  } finally {
    sg.unlinkShared(name)
  }
})

function thread (code, data) {
  const msgs = []
  const w = new Worker(`const sg = require(${JSON.stringify(PKG)}); const { workerData: d, parentPort } = require('node:worker_threads');\n${code}`, { eval: true, workerData: data })
  const first = new Promise((resolve, reject) => {
    w.on('message', (m) => { msgs.push(m); resolve(m) })
    w.on('error', reject)
  })
  const exited = new Promise((resolve, reject) => {
    w.on('error', reject)
    w.on('exit', (c) => (c === 0 ? resolve(msgs) : reject(new Error(`worker exit ${c}`))))
  })
  exited.catch(() => {}) // terminate() ends with code 1
  return { w, first, exited, post: (m) => w.postMessage(m) }
}

test('worker_threads share a gate: waiters in two threads are granted by releases in a third, never above the limit', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const main = sg.Gate.shared(name, FIXED(1))
    const held = main.tryAcquire()
    // A counter of work in progress across threads, and the peak it reached.
    const sab = new Int32Array(new SharedArrayBuffer(8))
    const code = `
      const g = sg.Gate.shared(d.name, { algorithm: 'fixed', initialLimit: 1, levels: 1, codel: false })
      const c = new Int32Array(d.sab)
      let done = 0
      parentPort.postMessage('ready')
      for (let i = 0; i < d.n; i++) {
        g.acquire({ timeoutMs: 10000 }).then(async (p) => {
          const now = Atomics.add(c, 0, 1) + 1
          if (now > Atomics.load(c, 1)) Atomics.store(c, 1, now)
          await new Promise((r) => setTimeout(r, 5))
          Atomics.sub(c, 0, 1)
          p.success()
          if (++done === d.n) parentPort.postMessage({ done })
        })
      }
    `
    const t1 = thread(code, { name, sab: sab.buffer, n: 4 })
    const t2 = thread(code, { name, sab: sab.buffer, n: 4 })
    await Promise.all([t1.first, t2.first])
    for (let i = 0; i < 200 && main.waiting < 8; i++) await sleep(5)
    assert.equal(main.waiting, 8, 'both threads queued (the main thread holds the permit)')
    held.success()
    const done = await Promise.all([t1, t2].map((t) => new Promise((resolve) => t.w.on('message', (m) => { if (m.done) resolve(m.done) }))))
    assert.deepEqual(done, [4, 4])
    assert.equal(sab[1], 1, 'never more than the limit at once')
    await Promise.all([t1.w.terminate(), t2.w.terminate()])
    assert.equal(main.inflight, 0)
    assert.equal(main.waiting, 0)
  } finally {
    sg.unlinkShared(name)
  }
})

test('fast-check: a shared gate decides like the in-process gate over try-acquire/release sequences', { skip: !linux }, () => {
  const op = fc.oneof(
    fc.record({ k: fc.constant('acq'), level: fc.integer({ min: 0, max: 2 }), dt: fc.integer({ min: 0, max: 20_000_000 }) }),
    fc.record({ k: fc.constant('rel'), i: fc.nat(), outcome: fc.constantFrom('success', 'dropped', 'ignore'), dt: fc.integer({ min: 0, max: 20_000_000 }) })
  )
  const configs = [
    { algorithm: 'aimd', initialLimit: 4, minLimit: 1, maxLimit: 8 },
    { algorithm: 'gradient2', initialLimit: 5, minLimit: 1, maxLimit: 10 },
    { algorithm: 'fixed', initialLimit: 3 }
  ]
  fc.assert(fc.property(fc.constantFrom(...configs), fc.array(op, { maxLength: 60 }), (cfg, ops) => {
    const name = fresh()
    const opts = { ...cfg, queueCapacity: 64 }
    try {
      const local = new sg.Gate(opts)
      const shared = sg.Gate.shared(name, opts)
      let now = 1_000_000_000n
      const held = []
      for (const o of ops) {
        now += BigInt(o.dt)
        if (o.k === 'acq') {
          const pl = local.tryAcquire({ priority: o.level, nowNs: now })
          const ps = shared.tryAcquire({ priority: o.level, nowNs: now })
          assert.equal(ps === null, pl === null, 'same admission')
          if (pl === null) assert.deepEqual(shared.lastRejection, local.lastRejection)
          else held.push([pl, ps])
        } else if (held.length > 0) {
          const [pl, ps] = held.splice(o.i % held.length, 1)[0]
          pl.release(o.outcome, now)
          ps.release(o.outcome, now)
        }
        assert.equal(shared.inflight, local.inflight)
        assert.equal(shared.limit, local.limit)
      }
      for (const [pl, ps] of held) {
        pl.ignore(now)
        ps.ignore(now)
      }
      assert.equal(shared.inflight, 0)
    } finally {
      sg.unlinkShared(name)
    }
  }), { numRuns: 60 })
})

test('KeyedLimits.shared: per-key caps across worker threads and a process killed with SIGKILL', { skip: !linux }, async () => {
  const name = fresh()
  const opts = { shardLimit: 1, shards: 16, shardsPerKey: 1 }
  try {
    const main = sg.KeyedLimits.shared(name, opts)
    assert.ok(main.shared && main.created && !new sg.KeyedLimits(opts).shared)
    // A thread takes the key: this thread is refused it, another key is fine.
    const t = thread(`
      const k = sg.KeyedLimits.shared(d.name, d.opts)
      const p = k.tryAcquire('tenant-a')
      parentPort.postMessage({ got: p !== null, created: k.created })
      parentPort.once('message', () => { p.release(); parentPort.postMessage('released') })
    `, { name, opts })
    assert.deepEqual(await t.first, { got: true, created: false })
    assert.equal(main.tryAcquire('tenant-a'), null)
    assert.equal(main.lastRejection.reason, 'key_limit')
    t.post('release')
    await new Promise((resolve) => t.w.on('message', (m) => m === 'released' && resolve()))
    const p = main.tryAcquire('tenant-a')
    assert.ok(p, 'released in the thread, admitted here')
    p.release()
    await t.w.terminate()
    // A process holding the key is killed: reclaim gives its permit back once.
    const code = `
      const sg = require(${JSON.stringify(PKG)})
      const k = sg.KeyedLimits.shared(process.argv[1], ${JSON.stringify(opts)})
      const p = k.tryAcquire('tenant-a')
      console.log(p ? 'held' : 'refused')
      setInterval(() => {}, 1000)
    `
    const child = spawn(process.execPath, ['-e', code, name], { stdio: ['ignore', 'pipe', 'inherit'] })
    const line = await new Promise((resolve) => child.stdout.once('data', (b) => resolve(String(b).trim())))
    assert.equal(line, 'held')
    assert.equal(main.tryAcquire('tenant-a'), null)
    child.kill('SIGKILL')
    await new Promise((resolve) => child.on('exit', resolve))
    assert.equal(main.reclaim(), 1)
    assert.equal(main.reclaim(), 0, 'once')
    const q = main.tryAcquire('tenant-a')
    assert.ok(q)
    q.release()
    assert.throws(() => sg.KeyedLimits.shared(name, { ...opts, shardLimit: 2 }), (e) => e.code === 'SG_SHM_REFUSED')
    assert.throws(() => sg.KeyedLimits.shared('no spaces', opts), (e) => e.code === 'SG_INVALID_ARG')
  } finally {
    sg.unlinkShared(name)
  }
})

for (const kind of ['express', 'fastify']) {
  test(`${kind} middleware on a shared Gate (queues) and a shared Limiter (admit or refuse)`, { skip: !linux }, async () => {
    const gname = fresh()
    const lname = fresh()
    try {
      const gate = sg.Gate.shared(gname, FIXED(1))
      const limiter = sg.Limiter.shared(lname, { algorithm: 'fixed', initialLimit: 1, levels: 1 })
      for (const [obj, expectQueued] of [[gate, true], [limiter, false]]) {
        let url
        let close
        if (kind === 'express') {
          const app = require('express')()
          app.use(sg.express({ gate: obj }))
          app.get('/work', async (req, res) => { await sleep(30); res.json({ ok: true }) })
          const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)) })
          url = `http://127.0.0.1:${server.address().port}/work`
          close = () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) })
        } else {
          const f = require('fastify')({ logger: false })
          await f.register(sg.fastify, { gate: obj })
          f.get('/work', async () => { await sleep(30); return { ok: true } })
          await f.listen({ port: 0, host: '127.0.0.1' })
          url = `http://127.0.0.1:${f.server.address().port}/work`
          close = () => f.close()
        }
        try {
          const rs = await Promise.all([1, 2, 3].map(() => fetch(url).then((r) => r.status)))
          const ok = rs.filter((s) => s === 200).length
          if (expectQueued) assert.equal(ok, 3, `a shared gate queues: ${rs}`)
          else assert.ok(ok >= 1 && rs.every((s) => s === 200 || s === 503), `a shared limiter admits or refuses: ${rs}`)
          for (let i = 0; i < 100 && obj.inflight > 0; i++) await sleep(5)
          assert.equal(obj.inflight, 0)
        } finally {
          await close()
        }
      }
      assert.throws(() => sg.express({ gate: limiter, readinessRoute: '/ready' }), TypeError)
    } finally {
      sg.unlinkShared(gname)
      sg.unlinkShared(lname)
    }
  })
}
