'use strict'
// A real `cluster` of 4 workers in front of a dependency that counts its concurrency
// (an HTTP server in the primary, 100 ms a call). Each worker admits a call through a
// limiter of limit L = 2: with `Limiter.shared` the dependency never sees more than L at
// once; with one `Limiter` per worker it sees up to 4L. Then a worker holding both permits
// is killed with SIGKILL and the others are admitted again; a worker started with another
// config is refused. This file is both the test (primary) and the worker
// (SG_CLUSTER_ROLE=worker).
const cluster = require('node:cluster')
const http = require('node:http')
const path = require('node:path')

const L = 2
const WORKERS = 4
const DEP_MS = 100

if (process.env.SG_CLUSTER_ROLE === 'worker') {
  worker()
} else {
  primary()
}

function worker () {
  const sg = require(path.join(__dirname, '..'))
  const opts = { algorithm: 'fixed', initialLimit: Number(process.env.SG_LIMIT), levels: 1 }
  let limiter
  try {
    limiter = process.env.SG_MODE === 'shared' ? sg.Limiter.shared(process.env.SG_NAME, opts) : new sg.Limiter(opts)
  } catch (e) {
    process.send({ error: e.code || e.message })
    return
  }
  const held = []
  const depPort = Number(process.env.SG_DEP_PORT)
  const server = http.createServer((req, res) => {
    if (req.url === '/hold') {
      // Takes every permit it can and keeps them (until this process dies).
      for (let p = limiter.tryAcquire(); p; p = limiter.tryAcquire()) held.push(p)
      res.end(JSON.stringify({ pid: process.pid, held: held.length }))
      return
    }
    const permit = limiter.tryAcquire()
    if (permit === null) {
      res.statusCode = 503
      res.end('overloaded')
      return
    }
    http.get({ port: depPort, path: '/', agent: false }, (dep) => {
      dep.resume()
      dep.on('end', () => {
        permit.success()
        res.end('ok')
      })
    }).on('error', () => {
      permit.dropped()
      res.statusCode = 502
      res.end('dependency failed')
    })
  })
  server.listen(0, '127.0.0.1', () => process.send({ port: server.address().port, pid: process.pid }))
}

function primary () {
  const test = require('node:test')
  const assert = require('node:assert/strict')
  const sg = require('..')

  if (process.platform !== 'linux') {
    test('cluster sharing (Linux only)', { skip: 'shared memory needs Linux' }, () => {})
    return
  }

  /** The dependency: counts calls in flight, remembers the peak. */
  function dependency () {
    const s = { now: 0, peak: 0, calls: 0 }
    const server = http.createServer((req, res) => {
      s.now++
      s.calls++
      s.peak = Math.max(s.peak, s.now)
      setTimeout(() => {
        s.now--
        res.end('dep')
      }, DEP_MS)
    })
    return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, s, port: server.address().port })))
  }

  /** Forks a worker with `env`; resolves with it and its first message. */
  function fork (env) {
    const w = cluster.fork({ SG_CLUSTER_ROLE: 'worker', ...env })
    return new Promise((resolve, reject) => {
      w.once('message', (m) => resolve({ w, m }))
      w.once('exit', (code, signal) => reject(new Error(`worker exited early (${code ?? signal})`)))
    }).then((r) => {
      r.w.removeAllListeners('exit')
      return r
    })
  }

  async function start (env) {
    const ws = await Promise.all(Array.from({ length: WORKERS }, () => fork(env)))
    assert.ok(ws.every((x) => x.m.port === ws[0].m.port), 'one port for the cluster')
    return { workers: ws.map((x) => x.w), port: ws[0].m.port }
  }

  function stop (workers) {
    return Promise.all(workers.filter((w) => !w.isDead()).map((w) => new Promise((resolve) => {
      w.once('exit', resolve)
      w.process.kill('SIGKILL')
    })))
  }

  function get (port, p = '/call') {
    return new Promise((resolve, reject) => {
      http.get({ port, host: '127.0.0.1', path: p, agent: false }, (res) => {
        let body = ''
        res.on('data', (b) => { body += b })
        res.on('end', () => resolve({ status: res.statusCode, body }))
      }).on('error', reject)
    })
  }

  /** 24 clients, 3 requests each, all at once. */
  async function load (port) {
    const statuses = {}
    await Promise.all(Array.from({ length: 24 }, async () => {
      for (let i = 0; i < 3; i++) {
        const r = await get(port)
        statuses[r.status] = (statuses[r.status] || 0) + 1
      }
    }))
    return statuses
  }

  cluster.setupPrimary({ exec: __filename })
  const name = `sg-node-cluster-${process.pid}`

  test(`cluster of ${WORKERS}, limit ${L}: shared, the dependency sees at most L; unshared up to ${WORKERS}L`, async (t) => {
    const dep = await dependency()
    try {
      const peaks = {}
      for (const mode of ['shared', 'local']) {
        dep.s.peak = 0
        dep.s.calls = 0
        const c = await start({ SG_MODE: mode, SG_NAME: name, SG_LIMIT: String(L), SG_DEP_PORT: String(dep.port) })
        try {
          const statuses = await load(c.port)
          peaks[mode] = dep.s.peak
          t.diagnostic(`${mode}: dependency peak ${dep.s.peak}, ${dep.s.calls} calls, statuses ${JSON.stringify(statuses)}`)
          assert.equal(statuses[200], dep.s.calls, 'every admitted request called the dependency once')
          assert.equal((statuses[200] || 0) + (statuses[503] || 0), 72)
        } finally {
          await stop(c.workers)
        }
      }
      assert.ok(peaks.shared <= L, `shared: peak ${peaks.shared} <= ${L}`)
      assert.ok(peaks.shared >= 1)
      assert.ok(peaks.local > L, `unshared: peak ${peaks.local} > ${L} (each worker admits L)`)
      assert.ok(peaks.local <= WORKERS * L)
    } finally {
      dep.server.close()
      sg.unlinkShared(name)
    }
  })

  test('kill -9 of a worker holding every permit: the others are admitted again; another config is refused', async (t) => {
    const dep = await dependency()
    const kname = `${name}-kill`
    const c = await start({ SG_MODE: 'shared', SG_NAME: kname, SG_LIMIT: String(L), SG_DEP_PORT: String(dep.port) })
    try {
      const hold = JSON.parse((await get(c.port, '/hold')).body)
      assert.equal(hold.held, L)
      // Every worker is refused now: the holder has the whole shared limit.
      for (let i = 0; i < WORKERS; i++) assert.equal((await get(c.port)).status, 503)
      const victim = c.workers.find((w) => w.process.pid === hold.pid)
      await new Promise((resolve) => {
        victim.once('exit', resolve)
        victim.process.kill('SIGKILL')
      })
      // No reclaim() call: a refused acquire sweeps (at most every 100 ms across the cluster).
      const t0 = process.hrtime.bigint()
      let ok = 0
      let tries = 0
      while (ok === 0 && process.hrtime.bigint() - t0 < 3_000_000_000n) {
        tries++
        if ((await get(c.port)).status === 200) ok++
        else await new Promise((resolve) => setTimeout(resolve, 10))
      }
      const ms = Number(process.hrtime.bigint() - t0) / 1e6
      t.diagnostic(`admitted ${ms.toFixed(0)} ms after the kill (${tries} requests)`)
      assert.equal(ok, 1, 'a live worker is admitted after the holder died')
      // The 100 ms sweep bound, the 100 ms dependency call, and slack for a loaded machine.
      assert.ok(ms < 1000, `admitted ${ms.toFixed(0)} ms after the kill`)
      // Both slots are back: two at once are admitted.
      const two = await Promise.all([get(c.port), get(c.port)])
      assert.deepEqual(two.map((r) => r.status), [200, 200])

      // A worker with another config is refused, the running ones are untouched.
      const bad = await fork({ SG_MODE: 'shared', SG_NAME: kname, SG_LIMIT: String(L + 1), SG_DEP_PORT: String(dep.port) })
      assert.deepEqual(bad.m, { error: 'SG_SHM_REFUSED' })
      await stop([bad.w])
      assert.equal((await get(c.port)).status, 200)
    } finally {
      await stop(c.workers)
      dep.server.close()
      sg.unlinkShared(kname)
    }
  })
}
