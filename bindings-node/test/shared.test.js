'use strict'
// Shared-memory objects (Linux): Limiter.shared, RateLimiter.shared, RetryBudget.shared.
// Bad input and refused attaches (typed errors, no state change), worker_threads of one
// process sharing a name, a real process killed with SIGKILL while holding permits, and a
// fast-check property: a shared limiter decides like an in-process one.
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { Worker } = require('node:worker_threads')
const fc = require('fast-check')
const sg = require('..')

const PKG = path.join(__dirname, '..')
const linux = process.platform === 'linux'
let seq = 0
/** A name no other test (or run) uses; unlinked by `cleanup`. */
function fresh () {
  return `sg-node-test-${process.pid}-${++seq}`
}
const fileOf = (name) => `/dev/shm/surgeguard.${name}`
const FIXED2 = { algorithm: 'fixed', initialLimit: 2, levels: 1 }

function cleanup (...names) {
  for (const n of names) sg.unlinkShared(n)
}

test('a shared limiter is one limit for every object opening the name', { skip: !linux }, () => {
  const name = fresh()
  try {
    const a = sg.Limiter.shared(name, FIXED2)
    const b = sg.Limiter.shared(name, FIXED2)
    assert.ok(a instanceof sg.Limiter && a.shared && !new sg.Limiter(FIXED2).shared)
    assert.equal(a.created, true)
    assert.equal(b.created, false)
    assert.ok(fs.existsSync(fileOf(name)))
    const p1 = a.tryAcquire()
    const p2 = b.tryAcquire()
    assert.ok(p1 && p2)
    assert.equal(a.tryAcquire(), null)
    assert.equal(b.tryAcquire(), null)
    assert.equal(b.lastRejection.reason, 'limit_reached')
    assert.equal(a.inflight, 2)
    assert.equal(b.inflight, 2)
    assert.equal(a.heldHere, 1) // each object counts its own permits (its own slot)
    assert.equal(b.heldHere, 1)
    p1.success()
    assert.equal(b.inflight, 1)
    assert.ok(b.tryAcquire() !== null, 'the slot a released is b\'s now')
    assert.equal(a.metrics().successes, 1)
  } finally {
    cleanup(name)
  }
})

test('a permit released twice throws SG_ALREADY_RELEASED and changes nothing', { skip: !linux }, () => {
  const name = fresh()
  try {
    const l = sg.Limiter.shared(name, FIXED2)
    const keep = l.tryAcquire()
    const p = l.tryAcquire()
    p.success()
    const before = l.metrics()
    assert.throws(() => p.success(), (e) => e instanceof sg.OverloadError && e.code === 'SG_ALREADY_RELEASED')
    assert.throws(() => p.release('dropped'), (e) => e.code === 'SG_ALREADY_RELEASED')
    assert.deepEqual(l.metrics(), before)
    assert.equal(l.inflight, 1)
    // A bad argument throws before anything changes and the permit can still be ended.
    assert.throws(() => keep.success(-1n), (e) => e instanceof RangeError && e.code === 'SG_INVALID_ARG')
    assert.equal(l.inflight, 1)
    keep.ignore()
    assert.equal(l.inflight, 0)
  } finally {
    cleanup(name)
  }
})

test('bad names are typed errors and create nothing', { skip: !linux }, () => {
  for (const make of [
    (n) => sg.Limiter.shared(n, FIXED2),
    (n) => sg.RateLimiter.shared(n, { perSecond: 5 }),
    (n) => sg.RetryBudget.shared(n, {})
  ]) {
    for (const bad of [undefined, null, 5, {}, Symbol('x'), ['a']]) {
      assert.throws(() => make(bad), (e) => e instanceof TypeError && e.code === 'SG_INVALID_ARG', String(bad))
    }
    for (const bad of ['', '.', '..', 'a'.repeat(201), 'sp ace', 'nul\0', 'é', 'a*b']) {
      assert.throws(() => make(bad), (e) => e instanceof RangeError && e.code === 'SG_INVALID_ARG', JSON.stringify(bad))
      if (bad !== '' && !bad.includes('\0')) assert.ok(!fs.existsSync(fileOf(bad)))
    }
  }
  assert.throws(() => sg.unlinkShared(7), (e) => e instanceof TypeError && e.code === 'SG_INVALID_ARG')
  assert.throws(() => sg.unlinkShared('a/../\0'), (e) => e.code === 'SG_INVALID_ARG')
  // A path is refused by unlinkShared (it could be any file), though it may name a segment.
  const dir = fs.mkdtempSync('/tmp/sg-node-')
  try {
    const at = path.join(dir, 'seg')
    assert.ok(sg.Limiter.shared(at, FIXED2).shared)
    assert.ok(fs.existsSync(at))
    assert.throws(() => sg.unlinkShared(at), (e) => e instanceof RangeError && e.code === 'SG_INVALID_ARG')
    assert.ok(fs.existsSync(at))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
  // The longest good name (200) works.
  const long = 'n'.repeat(200)
  try {
    assert.ok(sg.Limiter.shared(long, FIXED2).shared)
  } finally {
    cleanup(long)
  }
})

test('a bad config is refused before any file is made', { skip: !linux }, () => {
  const name = fresh()
  assert.throws(() => sg.Limiter.shared(name, { initialLimit: NaN }), (e) => e instanceof RangeError && e.code === 'SG_INVALID_ARG')
  assert.throws(() => sg.Limiter.shared(name, { algorithm: 'fixed', minLimit: 5, maxLimit: 1 }), (e) => e.code === 'SG_INVALID_ARG')
  assert.throws(() => sg.RateLimiter.shared(name, { perSecond: -1 }), (e) => e.code === 'SG_INVALID_ARG')
  assert.throws(() => sg.RetryBudget.shared(name, { percentCanRetry: 2 }), (e) => e.code === 'SG_INVALID_ARG')
  assert.ok(!fs.existsSync(fileOf(name)))
})

test('another config or another kind under the name is SG_SHM_REFUSED and changes nothing', { skip: !linux }, () => {
  const name = fresh()
  try {
    const l = sg.Limiter.shared(name, FIXED2)
    const p = l.tryAcquire()
    const before = l.metrics()
    const refused = (e) => e instanceof sg.OverloadError && e.code === 'SG_SHM_REFUSED'
    assert.throws(() => sg.Limiter.shared(name, { ...FIXED2, initialLimit: 3 }), refused)
    assert.throws(() => sg.Limiter.shared(name, { ...FIXED2, levels: 2 }), refused)
    assert.throws(() => sg.Limiter.shared(name, { algorithm: 'aimd', initialLimit: 2, levels: 1 }), refused)
    assert.throws(() => sg.RateLimiter.shared(name, { perSecond: 2 }), refused)
    assert.throws(() => sg.RetryBudget.shared(name, {}), refused)
    assert.deepEqual(l.metrics(), before)
    assert.equal(sg.Limiter.shared(name, FIXED2).inflight, 1, 'the same config still attaches')
    p.success()
  } finally {
    cleanup(name)
  }
  // Not a segment at all.
  const junk = fresh()
  fs.writeFileSync(fileOf(junk), Buffer.alloc(4096, 7))
  try {
    assert.throws(() => sg.Limiter.shared(junk, FIXED2), (e) => e.code === 'SG_SHM_REFUSED')
    assert.equal(fs.readFileSync(fileOf(junk)).every((b) => b === 7), true, 'left as it was')
  } finally {
    cleanup(junk)
  }
})

test('unlinkShared removes the name; attached objects keep their segment', { skip: !linux }, () => {
  const name = fresh()
  const a = sg.Limiter.shared(name, FIXED2)
  const p = a.tryAcquire()
  assert.equal(sg.unlinkShared(name), true)
  assert.equal(sg.unlinkShared(name), false)
  assert.ok(!fs.existsSync(fileOf(name)))
  const b = sg.Limiter.shared(name, FIXED2)
  try {
    assert.equal(b.created, true)
    assert.equal(b.inflight, 0, 'a new segment')
    assert.equal(a.inflight, 1, 'the old one lives on while mapped')
    p.success()
  } finally {
    cleanup(name)
  }
})

test('a shared rate limiter and retry budget: one rate, one budget', { skip: !linux }, () => {
  const rn = fresh()
  const bn = fresh()
  try {
    const t = 1_000_000_000n
    const r1 = sg.RateLimiter.shared(rn, { perSecond: 10, burst: 3 })
    const r2 = sg.RateLimiter.shared(rn, { perSecond: 10, burst: 3 })
    const local = new sg.RateLimiter({ perSecond: 10, burst: 3 })
    // Alternating between the two shared objects decides like one in-process limiter.
    for (let i = 0; i < 12; i++) {
      const now = t + BigInt(i) * 40_000_000n
      assert.equal((i % 2 ? r1 : r2).tryTake(1, now), local.tryTake(1, now), `take ${i}`)
    }
    assert.deepEqual(r1.metrics(), local.metrics())
    assert.ok(r1.shared && !local.shared)
    const before = r1.metrics()
    assert.throws(() => sg.RateLimiter.shared(rn, { perSecond: 11, burst: 3 }), (e) => e.code === 'SG_SHM_REFUSED')
    assert.throws(() => sg.RateLimiter.shared(rn, { perSecond: 10, burst: 4 }), (e) => e.code === 'SG_SHM_REFUSED')
    assert.deepEqual(r1.metrics(), before)

    const b1 = sg.RetryBudget.shared(bn, { percentCanRetry: 0.5, minRetriesPerSec: 0 })
    const b2 = sg.RetryBudget.shared(bn, { percentCanRetry: 0.5, minRetriesPerSec: 0 })
    for (let i = 0; i < 4; i++) b1.deposit(t)
    assert.equal(b2.tryWithdraw(t), true)
    assert.equal(b1.tryWithdraw(t), true)
    assert.equal(b2.tryWithdraw(t), false, 'four requests at 50% fund two retries across both')
    assert.equal(b1.metrics().retriesAllowed, 2)
    assert.throws(() => sg.RetryBudget.shared(bn, { percentCanRetry: 0.4, minRetriesPerSec: 0 }), (e) => e.code === 'SG_SHM_REFUSED')
    assert.throws(() => sg.RetryBudget.shared(bn, { percentCanRetry: 0.5 }), (e) => e.code === 'SG_SHM_REFUSED')
    assert.equal(b2.tryWithdraw(t), false, 'unchanged by the refused opens')
  } finally {
    cleanup(rn, bn)
  }
})

/**
 * Starts `code` in a worker thread with `data`: `first` resolves with its first message,
 * `exited` with every message once it exits; `post` sends it a message.
 */
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
  return { first, exited, post: (m) => w.postMessage(m) }
}

test('worker_threads of one process opening a name share the limit', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const opts = { algorithm: 'fixed', initialLimit: 3, levels: 1 }
    const main = sg.Limiter.shared(name, opts)
    const held = main.tryAcquire()
    // Two threads: each takes what it can, reports, and waits (holding its permits) until
    // both have reported; then it ends without releasing.
    const code = `
      const l = sg.Limiter.shared(d.name, d.opts)
      const got = []
      for (let i = 0; i < 3; i++) { const p = l.tryAcquire(); if (p) got.push(p) }
      parentPort.postMessage({ got: got.length, inflight: l.inflight, created: l.created })
      parentPort.once('message', () => process.exit(0))
    `
    const t1 = thread(code, { name, opts })
    const m1 = await t1.first
    const t2 = thread(code, { name, opts })
    const m2 = await t2.first
    assert.equal(m1.created, false)
    assert.equal(m2.created, false)
    assert.equal(m1.got, 2, 'limit 3, the main thread holds 1')
    assert.equal(m2.got, 0, 'the first thread holds the other 2')
    assert.equal(m2.inflight, 3)
    assert.equal(main.inflight, 3)
    assert.equal(main.tryAcquire(), null)
    t1.post('exit')
    t2.post('exit')
    await Promise.all([t1.exited, t2.exited])
    // The threads ended holding their permits; their objects were finalised with them.
    assert.equal(main.inflight, 1, 'an ended thread\'s permits came back')
    const two = [main.tryAcquire(), main.tryAcquire()]
    assert.ok(two.every(Boolean))
    assert.equal(main.tryAcquire(), null)
    for (const p of two) p.success()
    held.success()
    // A mismatched config is refused in a thread as in a process.
    const t3 = thread(`
      try { sg.Limiter.shared(d.name, { algorithm: 'fixed', initialLimit: 4, levels: 1 }); parentPort.postMessage('opened') }
      catch (e) { parentPort.postMessage(e.code) }`, { name })
    assert.equal(await t3.first, 'SG_SHM_REFUSED')
    await t3.exited
  } finally {
    cleanup(name)
  }
})

/** A child process that opens `name`, takes `n` permits, says so, and waits to be killed. */
function holder (name, opts, n) {
  const child = spawn(process.execPath, ['-e', `
    const sg = require(${JSON.stringify(PKG)})
    const l = sg.Limiter.shared(${JSON.stringify(name)}, ${JSON.stringify(opts)})
    const got = []
    for (let i = 0; i < ${n}; i++) got.push(l.tryAcquire())
    process.stdout.write('held ' + got.filter(Boolean).length + '\\n')
    setInterval(() => {}, 1000)`], { stdio: ['ignore', 'pipe', 'inherit'] })
  const ready = new Promise((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (b) => {
      out += b
      if (out.includes('\n')) resolve(out.trim())
    })
    child.on('exit', (code) => reject(new Error(`holder exited ${code}: ${out}`)))
  })
  const dead = new Promise((resolve) => child.on('exit', (code, signal) => resolve(signal)))
  return { child, ready, dead }
}

test('kill -9 of a process holding permits: reclaim() gives them back exactly once', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const l = sg.Limiter.shared(name, FIXED2)
    const h = holder(name, FIXED2, 2)
    assert.equal(await h.ready, 'held 2')
    assert.equal(l.inflight, 2)
    assert.equal(l.reclaim(), 0, 'a live process is never reclaimed')
    h.child.kill('SIGKILL')
    assert.equal(await h.dead, 'SIGKILL')
    assert.equal(l.reclaim(), 2)
    assert.equal(l.reclaim(), 0, 'exactly once')
    assert.equal(l.inflight, 0)
    assert.equal(l.metrics().ignored, 2, 'given back as ignored (no latency sample)')
    const ps = [l.tryAcquire(), l.tryAcquire()]
    assert.ok(ps.every(Boolean))
    for (const p of ps) p.success()
  } finally {
    cleanup(name)
  }
})

test('kill -9 of a process holding permits: a refused acquire sweeps them within the 100 ms bound', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const l = sg.Limiter.shared(name, FIXED2)
    const h = holder(name, FIXED2, 2)
    assert.equal(await h.ready, 'held 2')
    const t0 = sg.nowNs()
    assert.equal(l.tryAcquire({ nowNs: t0 }), null, 'refused while the holder lives (this refusal sweeps: nothing dead yet)')
    h.child.kill('SIGKILL')
    await h.dead
    // No reclaim() call. The sweep just run blocks others for 100 ms (across processes):
    // just before that, a refusal does not sweep; at 100 ms one does, and the retry admits.
    assert.equal(l.tryAcquire({ nowNs: t0 + 99_000_000n }), null, 'within the interval: still refused')
    assert.equal(l.inflight, 2)
    const p = l.tryAcquire({ nowNs: t0 + 100_000_000n })
    assert.ok(p, 'the refusal 100 ms after the last sweep swept and the retry was admitted')
    assert.equal(l.inflight, 1)
    assert.equal(l.metrics().ignored, 2, 'both dead permits given back')
    p.success(t0 + 100_000_000n)
  } finally {
    cleanup(name)
  }
})

test('a process with a mismatched config is refused and the owner is untouched', { skip: !linux }, async () => {
  const name = fresh()
  try {
    const l = sg.Limiter.shared(name, FIXED2)
    const p = l.tryAcquire()
    const out = await new Promise((resolve, reject) => {
      const c = spawn(process.execPath, ['-e', `
        const sg = require(${JSON.stringify(PKG)})
        try { sg.Limiter.shared(${JSON.stringify(name)}, { algorithm: 'fixed', initialLimit: 8, levels: 1 }); console.log('opened') }
        catch (e) { console.log(e.name + ' ' + e.code) }`], { stdio: ['ignore', 'pipe', 'inherit'] })
      let s = ''
      c.stdout.on('data', (b) => { s += b })
      c.on('exit', () => resolve(s.trim()))
      c.on('error', reject)
    })
    assert.equal(out, 'OverloadError SG_SHM_REFUSED')
    assert.equal(l.inflight, 1)
    assert.equal(l.limit, 2)
    p.success()
  } finally {
    cleanup(name)
  }
})

// ---- property: a shared limiter decides like the in-process one ----------------------

const ALGOS = {
  fixed: { algorithm: 'fixed', initialLimit: 3 },
  aimd: { algorithm: 'aimd', initialLimit: 4, minLimit: 1, maxLimit: 20, targetLatencyMs: 5, minSamples: 2, minWindowMs: 1, maxWindowMs: 50 },
  gradient: { algorithm: 'gradient', initialLimit: 4, minLimit: 1, maxLimit: 20, seed: 7, minSamples: 2, minWindowMs: 1, maxWindowMs: 50 },
  vegas: { algorithm: 'vegas', initialLimit: 4, minLimit: 1, maxLimit: 20, seed: 3, minSamples: 2, minWindowMs: 1, maxWindowMs: 50 }
}

const opArb = fc.oneof(
  fc.record({ t: fc.constant('acq'), level: fc.nat({ max: 2 }) }),
  fc.record({ t: fc.constant('rel'), pick: fc.nat(), outcome: fc.constantFrom('success', 'dropped', 'ignore') }),
  fc.record({ t: fc.constant('tick'), ms: fc.integer({ min: 0, max: 20 }) })
)

test('property: a shared limiter makes the in-process limiter\'s decisions over random operations', { skip: !linux }, () => {
  fc.assert(
    fc.property(fc.constantFrom(...Object.keys(ALGOS)), fc.integer({ min: 1, max: 3 }), fc.array(opArb, { maxLength: 80 }), (algo, levels, ops) => {
      const opts = { ...ALGOS[algo], levels }
      const name = fresh()
      try {
        const shared = sg.Limiter.shared(name, opts)
        const local = new sg.Limiter(opts)
        const held = [] // [sharedPermit, localPermit]
        let now = 1_000_000_000n
        for (const op of ops) {
          if (op.t === 'tick') {
            now += BigInt(op.ms) * 1_000_000n
          } else if (op.t === 'acq') {
            const priority = op.level % levels
            const a = shared.tryAcquire({ priority, nowNs: now })
            const b = local.tryAcquire({ priority, nowNs: now })
            assert.equal(a === null, b === null, `admission at ${now}`)
            if (a) held.push([a, b])
            else assert.deepEqual(shared.lastRejection, local.lastRejection)
          } else if (held.length > 0) {
            const [a, b] = held.splice(op.pick % held.length, 1)[0]
            a.release(op.outcome, now)
            b.release(op.outcome, now)
          }
          assert.equal(shared.inflight, local.inflight)
          assert.equal(shared.limit, local.limit)
        }
        assert.deepEqual(shared.metrics(), local.metrics())
        for (const [a, b] of held) {
          a.ignore(now)
          b.ignore(now)
        }
        assert.equal(shared.inflight, 0)
      } finally {
        cleanup(name)
      }
    }),
    { numRuns: 60 }
  )
})
