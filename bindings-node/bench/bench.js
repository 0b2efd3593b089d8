'use strict'
// One run, by hand (`npm run bench`), not in `make test`. What it simulates: the per-request
// cost a Node gateway pays to admit one request and report its outcome, with no waiting
// (the fast path that runs on every request), beside the peers a Node user would reach
// for, and a raw N-API call as the floor. Reports ns/op (median of rounds) and ratios.
//
//   sync:     gate.tryAcquire() + permit.success()         vs the raw N-API floor
//   promise:  await gate.acquire() + success; gate.run()   vs p-limit, bottleneck,
//             cockatiel bulkhead (overhead above a bare `await fn()`)
//   breaker:  breaker.run(fn)                              vs opossum, cockatiel breaker
//             (overhead above a bare `await fn()`)
const sg = require('..')
const { F } = require('../lib/native')
const Bottleneck = require('bottleneck')
const Opossum = require('opossum')
const cockatiel = require('cockatiel')

const ROUNDS = Number(process.env.ROUNDS || 7)
const SYNC_N = Number(process.env.SYNC_N || 2_000_000)
const ASYNC_N = Number(process.env.ASYNC_N || 200_000)

function median (xs) {
  const s = [...xs].sort((a, b) => a - b)
  return s[s.length >> 1]
}

function syncBench (fn, n = SYNC_N) {
  const out = []
  for (let r = 0; r < ROUNDS; r++) {
    const t = process.hrtime.bigint()
    for (let i = 0; i < n; i++) fn()
    out.push(Number(process.hrtime.bigint() - t) / n)
  }
  return median(out)
}

async function asyncBench (fn, n = ASYNC_N) {
  const out = []
  for (let r = 0; r < ROUNDS; r++) {
    const t = process.hrtime.bigint()
    for (let i = 0; i < n; i++) await fn()
    out.push(Number(process.hrtime.bigint() - t) / n)
  }
  return median(out)
}

async function main () {
  const noop = async () => 1
  const gate = new sg.Gate({ algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 })
  const limiter = new sg.Limiter({ algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 })
  const breaker = new sg.CircuitBreaker()
  const budget = new sg.RetryBudget()
  const { default: pLimit } = await import('p-limit')
  const plimit = pLimit(1_000_000)
  const bottleneck = new Bottleneck({ maxConcurrent: 1_000_000 })
  const bulkhead = cockatiel.bulkhead(1_000_000)
  const opossum = new Opossum(noop, { timeout: false, errorThresholdPercentage: 50, resetTimeout: 30000 })
  const cbreaker = cockatiel.circuitBreaker(cockatiel.handleAll, { halfOpenAfter: 30000, breaker: new cockatiel.ConsecutiveBreaker(5) })
  const h = gate._h

  const rows = []
  const add = (name, ns, note = '') => rows.push({ name, ns, note })

  // Warm up every path once (JIT).
  for (let i = 0; i < 200_000; i++) {
    F.floor(h, 1)
    gate.tryAcquire().success()
  }

  const floor = syncBench(() => F.floor(h, 1))
  add('raw N-API call (floor)', floor)
  add('raw N-API call × 2 (floor of acquire + release)', 2 * floor)
  add('gate.tryAcquire() + permit.success()', syncBench(() => gate.tryAcquire().success()))
  add('limiter.tryAcquire() + permit.success()', syncBench(() => limiter.tryAcquire().success()))
  let sharedNs
  if (process.platform === 'linux') {
    // The same limiter in shared memory (/dev/shm), as every cluster worker would open it.
    const name = `bench-node-${process.pid}`
    const shared = sg.Limiter.shared(name, { algorithm: 'fixed', initialLimit: 1_000_000, levels: 1 })
    sharedNs = syncBench(() => shared.tryAcquire().success())
    sg.unlinkShared(name)
    add('Limiter.shared(name).tryAcquire() + permit.success()', sharedNs, 'one limit across processes')
  }
  add('breaker.tryAcquire() + permit.success()', syncBench(() => breaker.tryAcquire().success()))
  add('budget.deposit() + budget.tryWithdraw()', syncBench(() => { budget.deposit(); budget.tryWithdraw() }))
  add('fast.gateTryAcquire + fast.gateRelease (no facade)', syncBench(() => F.gateRelease(h, F.gateTryAcquire(h, 0), 0)))

  // The async workloads run interleaved: each round runs every workload once, in the
  // same order, so garbage collection and JIT state fall alike on all of them (run one
  // after another, their ratios moved by up to 2x between runs). Median of the rounds.
  const each = (fn) => async (n) => { for (let i = 0; i < n; i++) await fn() }
  const workloads = {
    bare: async (n) => { for (let i = 0; i < n; i++) await noop() },
    // The permit is awaited in the loop body itself (as in a handler), not in an extra
    // async wrapper, so only acquire's own Promise is counted.
    acquire: async (n) => {
      for (let i = 0; i < n; i++) {
        const p = await gate.acquire()
        p.success()
      }
    },
    hybrid: async (n) => {
      for (let i = 0; i < n; i++) {
        const p = gate.tryAcquire() ?? await gate.acquire()
        p.success()
        await noop()
      }
    },
    gateRun: each(() => gate.run(noop)),
    pl: each(() => plimit(noop)),
    bh: each(() => bulkhead.execute(noop)),
    br: each(() => breaker.run(noop)),
    op: each(() => opossum.fire()),
    cb: each(() => cbreaker.execute(noop))
  }
  const samples = Object.fromEntries(Object.keys(workloads).map((k) => [k, []]))
  for (let r = 0; r < ROUNDS; r++) {
    for (const [k, body] of Object.entries(workloads)) {
      const t = process.hrtime.bigint()
      await body(ASYNC_N)
      samples[k].push(Number(process.hrtime.bigint() - t) / ASYNC_N)
    }
  }
  const m = Object.fromEntries(Object.entries(samples).map(([k, xs]) => [k, median(xs)]))
  const { bare, acquire, hybrid, gateRun, pl, bh, br, op, cb } = m
  // Bottleneck hands each job to a timer (about 1 ms or more per sequential job): few jobs.
  const bn = await asyncBench(() => bottleneck.schedule(noop), Math.max(50, ASYNC_N / 1000))
  add('await fn() (baseline)', bare)
  add('const p = await gate.acquire(); p.success() (no wait)', acquire)
  add('gate.tryAcquire() ?? await gate.acquire(), then the work (no wait)', hybrid)
  add('await gate.run(fn)', gateRun)
  add('await pLimit(n)(fn)   [p-limit 7]', pl)
  add('await bottleneck.schedule(fn)   [bottleneck 2]', bn)
  add('await bulkhead.execute(fn)   [cockatiel 3]', bh)
  add('await breaker.run(fn)', br)
  add('await opossum.fire()   [opossum 8]', op)
  add('await circuitBreaker.execute(fn)   [cockatiel 3]', cb)

  const over = (x) => Math.max(x - bare, 0.1)
  console.log(`node ${process.version}, ${ROUNDS} rounds, median ns/op\n`)
  console.log('| operation | ns/op | note |')
  console.log('|---|---:|---|')
  for (const r of rows) console.log(`| ${r.name} | ${r.ns.toFixed(1)} | ${r.note} |`)
  console.log('\nRatios (overhead = ns/op − the `await fn()` baseline):\n')
  const sync = rows.find((r) => r.name.startsWith('gate.tryAcquire')).ns
  const local = rows.find((r) => r.name.startsWith('limiter.tryAcquire')).ns
  if (sharedNs !== undefined) console.log(`- shared memory: Limiter.shared tryAcquire+success = ${sharedNs.toFixed(0)} ns = ${(sharedNs / local).toFixed(2)}× the in-process limiter's ${local.toFixed(0)} ns`)
  console.log(`- sync path: gate.tryAcquire()+success = ${sync.toFixed(0)} ns = ${(sync / floor).toFixed(1)}× the raw N-API floor (target ≤ 100 ns)`)
  console.log(`- promise path: acquire() overhead ${over(acquire).toFixed(0)} ns = ${(over(acquire) / over(pl)).toFixed(2)}× p-limit's ${over(pl).toFixed(0)} ns (target ≤ 0.33); gate.run ${(over(gateRun) / over(pl)).toFixed(2)}×; vs bottleneck ${(over(acquire) / over(bn)).toFixed(3)}×, cockatiel bulkhead ${(over(acquire) / over(bh)).toFixed(2)}×`)
  console.log(`- hybrid idiom (what the HTTP middleware does): overhead ${over(hybrid).toFixed(0)} ns = ${(over(hybrid) / over(pl)).toFixed(2)}× p-limit's`)
  console.log(`- breaker: run() overhead ${over(br).toFixed(0)} ns = ${(over(br) / over(op)).toFixed(2)}× opossum's ${over(op).toFixed(0)} ns (target ≤ 0.33); ${(over(br) / over(cb)).toFixed(2)}× cockatiel's ${over(cb).toFixed(0)} ns`)
  await bottleneck.stop({ dropWaitingJobs: true })
  opossum.shutdown()
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
