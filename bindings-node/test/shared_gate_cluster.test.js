'use strict'
// A real `cluster` of 4 workers in front of a dependency that counts its concurrency (an
// HTTP server in the primary, 50 ms a call). Each worker runs the README's shared-gate
// example as written (its `Gate.shared` behind the Express middleware, L = 2; only the
// segment names differ): with `Gate.shared` the dependency never sees more than L at once
// and requests queue rather than being refused; with one `Gate` per worker (the same code,
// in-process objects) it sees up to 4L. Then a worker holding every permit and queued
// tickets is killed with SIGKILL: its slots come back within the sweep bound and the other
// workers' waiters are granted. This file is both the test (primary) and the worker
// (SG_CLUSTER_ROLE=worker). Each worker listens on its own port, so the primary can aim
// requests at one worker.
const cluster = require('node:cluster')
const fs = require('node:fs')
const http = require('node:http')
const path = require('node:path')

const L = 2
const WORKERS = 4
const DEP_MS = 50

if (process.env.SG_CLUSTER_ROLE === 'worker') {
  worker()
} else {
  primary()
}

/** The README's example of a shared gate behind the middleware, with its names set to `name`. */
function readmeExample (name) {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
  const code = [...readme.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1])
    .find((b) => b.includes("sg.Gate.shared('myservice-gate'") && b.includes('sg.express('))
  if (code === undefined) throw new Error('README: no shared-gate middleware example')
  return code.replaceAll("'myservice-gate'", JSON.stringify(name)).replaceAll("'myservice-tenants'", JSON.stringify(`${name}-tenants`))
}

/** Runs the example with `sg` and `app` in scope; returns its objects. */
function runExample (name, sg, app) {
  // eslint-disable-next-line no-new-func
  return new Function('sg', 'app', 'require', readmeExample(name) + '\nreturn { gate, keyed }')(sg, app, require)
}

/** The options the example opens its gate with. */
function gateOptions () {
  let options
  const stub = { Gate: { shared: (n, o) => { options = o } }, KeyedLimits: { shared () {} }, express () {} }
  runExample('x', stub, { use () {} })
  return options
}

function worker () {
  const sg = require(path.join(__dirname, '..'))
  const express = require('express')
  // One `Gate` per worker: the same code with in-process objects.
  const local = { ...sg, Gate: { shared: (n, o) => new sg.Gate(o) }, KeyedLimits: { shared: (n, o) => new sg.KeyedLimits(o) } }
  const app = express()
  const { gate } = runExample(process.env.SG_NAME, process.env.SG_MODE === 'shared' ? sg : local, app)
  const held = []
  const depPort = Number(process.env.SG_DEP_PORT)
  app.get('/call', (req, res) => {
    http.get({ port: depPort, path: '/', agent: false }, (dep) => {
      dep.resume()
      dep.on('end', () => res.end('ok'))
    }).on('error', () => {
      res.statusCode = 502
      res.end('dependency failed')
    })
  })
  const server = http.createServer((req, res) => {
    if (req.url !== '/hold') return app(req, res)
    // Takes every permit it can and queues 3 more acquires; keeps them all (until this
    // process dies).
    for (let p = gate.tryAcquire(); p; p = gate.tryAcquire()) held.push(p)
    for (let i = 0; i < 3; i++) gate.acquire().then((p) => held.push(p), () => {})
    res.end(JSON.stringify({ pid: process.pid, held: held.length }))
  })
  server.listen({ port: 0, host: '127.0.0.1', exclusive: true }, () => process.send({ port: server.address().port, pid: process.pid }))
}

function primary () {
  const test = require('node:test')
  const assert = require('node:assert/strict')
  const sg = require('..')

  if (process.platform !== 'linux') {
    test('cluster sharing a gate (Linux only)', { skip: 'shared memory needs Linux' }, () => {})
    return
  }

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
    return ws.map((x) => ({ w: x.w, port: x.m.port, pid: x.m.pid }))
  }

  function stop (workers) {
    return Promise.all(workers.filter((x) => !x.w.isDead()).map((x) => new Promise((resolve) => {
      x.w.once('exit', resolve)
      x.w.process.kill('SIGKILL')
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

  /** 16 clients, 2 requests each, all at once, spread over the workers. */
  async function load (workers) {
    const statuses = {}
    await Promise.all(Array.from({ length: 16 }, async (_, c) => {
      for (let i = 0; i < 2; i++) {
        const r = await get(workers[(c + i) % workers.length].port)
        statuses[r.status] = (statuses[r.status] || 0) + 1
      }
    }))
    return statuses
  }

  cluster.setupPrimary({ exec: __filename })
  const name = `sg-node-gate-cluster-${process.pid}`
  const unlink = (n) => {
    sg.unlinkShared(n)
    sg.unlinkShared(`${n}-tenants`)
  }

  test('the README example opens a fixed gate of limit L', () => {
    assert.equal(gateOptions().algorithm, 'fixed')
    assert.equal(gateOptions().initialLimit, L)
  })

  test(`cluster of ${WORKERS}, shared gate of limit ${L}: the dependency sees at most L and requests queue; unshared up to ${WORKERS}L`, async (t) => {
    const dep = await dependency()
    try {
      const peaks = {}
      for (const mode of ['shared', 'local']) {
        dep.s.peak = 0
        dep.s.calls = 0
        const ws = await start({ SG_MODE: mode, SG_NAME: name, SG_DEP_PORT: String(dep.port) })
        try {
          const statuses = await load(ws)
          peaks[mode] = dep.s.peak
          const served = statuses[200] || 0
          const refused = statuses[503] || 0
          t.diagnostic(`${mode}: dependency peak ${dep.s.peak}, served ${served}, refused ${refused}`)
          assert.equal(served, dep.s.calls, 'every admitted request called the dependency once')
          assert.equal(served + refused, 32)
          if (mode === 'shared') assert.equal(served, 32, 'the shared queue holds them: none refused (README)')
        } finally {
          await stop(ws)
        }
      }
      assert.ok(peaks.shared <= L, `shared: peak ${peaks.shared} <= ${L}`)
      assert.ok(peaks.shared >= 1)
      assert.ok(peaks.local > L, `unshared: peak ${peaks.local} > ${L} (each worker admits L)`)
      assert.ok(peaks.local <= WORKERS * L)
    } finally {
      dep.server.close()
      unlink(name)
    }
  })

  test('kill -9 of a worker holding every permit and queued tickets: the other workers\' waiters are granted within the bound', async (t) => {
    const dep = await dependency()
    const kname = `${name}-kill`
    const ws = await start({ SG_MODE: 'shared', SG_NAME: kname, SG_DEP_PORT: String(dep.port) })
    // The primary attaches too, to watch the queue.
    const watch = sg.Gate.shared(kname, gateOptions())
    try {
      const [victim, ...others] = ws
      const hold = JSON.parse((await get(victim.port, '/hold')).body)
      assert.equal(hold.held, L)
      for (let i = 0; i < 100 && watch.waiting < 3; i++) await new Promise((resolve) => setTimeout(resolve, 5))
      assert.equal(watch.waiting, 3, 'the victim\'s 3 tickets queued')
      // One request to each other worker: they queue behind the victim.
      const pending = others.map((x) => get(x.port))
      for (let i = 0; i < 200 && watch.waiting < 3 + others.length; i++) await new Promise((resolve) => setTimeout(resolve, 5))
      assert.equal(watch.waiting, 3 + others.length)
      assert.equal(watch.inflight, L)
      await new Promise((resolve) => {
        victim.w.once('exit', resolve)
        victim.w.process.kill('SIGKILL')
      })
      // No reclaim() call: the waiting workers' pump threads sweep every 100 ms.
      const t0 = process.hrtime.bigint()
      const rs = await Promise.all(pending)
      const ms = Number(process.hrtime.bigint() - t0) / 1e6
      t.diagnostic(`the ${others.length} waiters were served ${ms.toFixed(0)} ms after the kill`)
      assert.deepEqual(rs.map((r) => r.status), others.map(() => 200))
      // The 100 ms sweep, two rounds of the 50 ms dependency, and slack for a loaded machine.
      assert.ok(ms < 1500, `served ${ms.toFixed(0)} ms after the kill`)
      assert.equal(watch.waiting, 0, 'the victim\'s tickets were withdrawn')
      assert.equal(watch.inflight, 0)
      const two = await Promise.all([get(others[0].port), get(others[1].port)])
      assert.deepEqual(two.map((r) => r.status), [200, 200])
    } finally {
      await stop(ws)
      dep.server.close()
      unlink(kname)
    }
  })
}
