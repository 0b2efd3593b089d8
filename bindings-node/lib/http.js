'use strict'
// HTTP admission for Express and Fastify: per-key check first (429 + JSON), then the
// gate (503 + Retry-After on a global refusal, possibly after waiting in the queue).
// A client that goes away while queued cancels its ticket. Once admitted, the permit
// lasts as long as the handler's work: it ends when the handler ends the response
// (Express: `res.end()`, which `send`/`json` call; Fastify: its `onSend` hook), with an
// outcome from the status, even if the client went away before that. Ending it on the
// client's disconnect instead would let handlers keep running unseen by the limiter.
//
// Deadlines: the caller's budget is read at arrival from `grpc-timeout`,
// `x-envoy-expected-rq-timeout-ms`, `surgeguard-timeout-ms` and an optional header of the
// application's (the smallest valid one wins), becomes an absolute deadline, and goes to
// the gate (an unmeetable one is refused at arrival, an expired waiter is dropped from the
// queue) and to the handler's AsyncLocalStorage scope (`sg.deadline.remaining()`). A bad
// header is ignored and counted by reason, never an error.
const N = require('./native')
const v = require('./validate')
const D = require('./deadline')
const H = require('./headers')
const { RejectedError } = require('./errors')
const { Gate } = require('./gate')
const { Limiter } = require('./limiter')
const { KeyedLimits, actionable } = require('./keyed')

/** The default outcome of a response: < 400 success; 429/503/504 dropped; else ignore. */
function statusOutcome (status) {
  if (status < 400) return 'success'
  if (status === 429 || status === 503 || status === 504) return 'dropped'
  return 'ignore'
}

function header (req, name) {
  const h = req.headers[name]
  return Array.isArray(h) ? h[0] : h
}

/** Checks middleware options once; returns the normalized config. */
function config (type, options) {
  const o = v.options(type, options, {
    gate: (w, x) => {
      if (!(x instanceof Gate) && !(x instanceof Limiter)) throw v.typeErr(`${w} must be a surgeguard Gate or Limiter (Gate.shared, Limiter.shared too)`)
      return x
    },
    priority: 'fn',
    priorityHeader: 'string',
    keyed: (w, x) => {
      if (!(x instanceof KeyedLimits)) throw v.typeErr(`${w} must be a surgeguard KeyedLimits`)
      return x
    },
    key: (w, x) => (typeof x === 'function' ? x : v.string(w, x).toLowerCase()),
    keyCost: (w, x) => (typeof x === 'function' ? x : v.int(w, x, 0, 2 ** 32 - 1)),
    timeoutMs: 'ms',
    deadlines: 'bool',
    deadlineHeader: D.headerName,
    defaultBudgetMs: 'ms',
    outcome: 'fn',
    skip: 'fn',
    readinessRoute: (w, x) => {
      v.string(w, x)
      if (!x.startsWith('/')) throw v.rangeErr(`${w} must be a path starting with / (got ${v.show(x)})`)
      return x
    },
    overloadedStatus: (w, x) => v.int(w, x, 100, 599)
  })
  if (o.gate === undefined) throw v.typeErr(`${type} needs { gate }`)
  if (o.key !== undefined && o.keyed === undefined) throw v.typeErr(`${type}: key needs keyed (a KeyedLimits)`)
  const priorityHeader = (o.priorityHeader || 'x-request-priority').toLowerCase()
  const levels = o.gate.levels
  if (o.readinessRoute !== undefined && !(o.gate instanceof Gate)) throw v.typeErr(`${type}: readinessRoute needs a Gate (a Limiter has no queue or state to report)`)
  if (o.overloadedStatus !== undefined && o.readinessRoute === undefined) {
    throw v.typeErr(`${type}: overloadedStatus needs readinessRoute`)
  }
  if (o.deadlines === false && o.deadlineHeader !== undefined) throw v.typeErr(`${type}: deadlineHeader needs deadlines (not false)`)
  let deadlineHeaders
  if (o.deadlines !== false) {
    deadlineHeaders = H.HEADERS
    if (o.deadlineHeader !== undefined && !deadlineHeaders.includes(o.deadlineHeader)) deadlineHeaders = deadlineHeaders.concat(o.deadlineHeader)
  }
  return {
    gate: o.gate,
    keyed: o.keyed,
    priority: o.priority ? (req) => levels.of(o.priority(req)) : (req) => levels.fromHeader(header(req, priorityHeader)),
    key: o.key === undefined ? undefined : typeof o.key === 'function' ? o.key : (req) => header(req, o.key),
    keyCost: o.keyCost === undefined ? () => 1 : typeof o.keyCost === 'function' ? o.keyCost : () => o.keyCost,
    timeoutMs: o.timeoutMs,
    deadlineHeaders,
    defaultBudgetMs: o.defaultBudgetMs,
    outcome: o.outcome || statusOutcome,
    skip: o.skip,
    readinessRoute: o.readinessRoute,
    overloadedStatus: o.overloadedStatus
  }
}

/** A refusal answer: the core's status, Retry-After and JSON body. */
function refusal (rejection) {
  const a = actionable(rejection)
  return { status: a.status, retryAfterS: a.retryAfterS, body: a.body, reason: a.reason }
}

/**
 * Admits one request. Resolves to `{ permit, keyPermit, deadlineNs }` when admitted (the
 * caller ends the permits when the handler is done, see `finisher`; `deadlineNs` is the
 * request's absolute deadline or undefined), to a refusal `{ status, retryAfterS, body }`,
 * or to `false` when the client went away while waiting (its ticket is cancelled).
 */
async function admit (cfg, req, res) {
  // The budget starts at arrival: time spent queued here is time the caller has lost.
  const deadlineNs = D.requestDeadline(cfg, req.headers, N.nowNs())
  let kp = null
  let key
  if (cfg.keyed !== undefined && cfg.key !== undefined) {
    key = cfg.key(req)
    if (typeof key === 'string' && key !== '') {
      kp = cfg.keyed.tryAcquire(key, cfg.keyCost(req))
      if (kp === null) return refusal(cfg.keyed.lastRejection)
    } else {
      key = undefined
    }
  }
  const ac = new AbortController()
  let permit = null
  let gone = false
  // While queued only: a disconnect cancels the ticket.
  const onClose = () => {
    gone = true
    ac.abort()
  }
  res.once('close', onClose)
  try {
    const priority = cfg.priority(req)
    // Admitted at once (the common case) without a Promise; otherwise wait in the queue.
    // `timeoutMs` is part of the deadline (its cap).
    // A Limiter admits or refuses (no queue, no deadline check).
    const isGate = cfg.gate instanceof Gate
    permit = cfg.gate.tryAcquire(deadlineNs === undefined || !isGate ? { priority } : { priority, deadlineNs })
    if (permit === null && !isGate) {
      const rej = cfg.gate.lastRejection
      throw new RejectedError(rej.reason, rej.retryAfterMs)
    }
    if (permit === null) {
      // Only a full limiter may still queue; shed, an unmeetable deadline, ... are final.
      const rej = cfg.gate.lastRejection
      if (rej.reason !== 'limit_reached') throw new RejectedError(rej.reason, rej.retryAfterMs)
      const opts = { priority, signal: ac.signal }
      if (deadlineNs !== undefined) opts.deadlineNs = deadlineNs
      permit = await cfg.gate.acquire(opts)
    }
  } catch (err) {
    res.removeListener('close', onClose)
    if (kp !== null) kp.release()
    if (err instanceof RejectedError) {
      if (key !== undefined) cfg.keyed.recordRejection(key)
      return refusal(err)
    }
    if (gone) return false
    throw err
  }
  res.removeListener('close', onClose)
  if (gone) {
    // The client went away between the grant and this continuation: no handler runs.
    permit.ignore()
    if (kp !== null) kp.release()
    return false
  }
  return { permit, keyPermit: kp, deadlineNs }
}

/**
 * Ends an admitted request's permits once, with the outcome of `status` (the handler's
 * work is done, whether or not the client is still there).
 */
function finisher (cfg, admitted) {
  let ended = false
  return (status) => {
    if (ended) return
    ended = true
    const outcome = cfg.outcome(status)
    admitted.permit.release(outcome === 'success' || outcome === 'dropped' ? outcome : 'ignore')
    if (admitted.keyPermit !== null) admitted.keyPermit.release()
  }
}

/** The request's path without the query (Express's `req.path`, or from `req.url`). */
function pathOf (req) {
  if (typeof req.path === 'string') return req.path
  const url = typeof req.url === 'string' ? req.url : ''
  const q = url.indexOf('?')
  return q < 0 ? url : url.slice(0, q)
}

function readinessBody (gate) {
  return {
    status: gate.state,
    waiting: gate.waiting,
    inflight: gate.inflight,
    limit: gate.limit,
    shedLevel: gate.shedLevel
  }
}

/**
 * A readiness handler for Express, Fastify or plain `http`: 200 with
 * `{ status: 'healthy' | 'overloaded', ... }`. Overloaded is not broken (failing
 * readiness under load takes an instance out of rotation and removes capacity when it
 * is most needed: the SRE book's "Handling Overload"), so it answers
 * 200 unless `overloadedStatus` says otherwise.
 */
function readiness (gate, options) {
  if (!(gate instanceof Gate)) throw v.typeErr('readiness needs a surgeguard Gate')
  const o = v.options('readiness', options, { overloadedStatus: (w, x) => v.int(w, x, 100, 599) })
  const over = o.overloadedStatus || 200
  return function surgeguardReadiness (req, res) {
    const body = readinessBody(gate)
    const status = body.status === 'healthy' ? 200 : over
    if (typeof res.code === 'function' && typeof res.send === 'function') {
      return res.code(status).header('cache-control', 'no-store').send(body)
    }
    res.statusCode = status
    res.setHeader('content-type', 'application/json')
    res.setHeader('cache-control', 'no-store')
    res.end(JSON.stringify(body))
  }
}

/**
 * Express middleware: `app.use(surgeguard.express({ gate, keyed, key: 'x-tenant-id' }))`.
 * Priority from `X-Request-Priority` (or `priority(req)`); 503 + Retry-After + JSON on a
 * global refusal, 429 + Retry-After + JSON on a per-key refusal.
 */
function express (options) {
  const cfg = config('express', options)
  const ready = cfg.readinessRoute ? readiness(cfg.gate, { overloadedStatus: cfg.overloadedStatus }) : undefined
  return function surgeguardMiddleware (req, res, next) {
    if (ready !== undefined && req.method === 'GET' && pathOf(req) === cfg.readinessRoute) return ready(req, res)
    if (cfg.skip !== undefined && cfg.skip(req)) return next()
    admit(cfg, req, res).then((r) => {
      if (r === false) return
      if (r.permit !== undefined) {
        // The handler is done when it ends the response.
        const finish = finisher(cfg, r)
        const end = res.end
        res.end = function surgeguardEnd () {
          res.end = end
          finish(res.statusCode)
          return end.apply(this, arguments)
        }
        // The handler runs in the request's scope: its deadline, its response.
        return D.runRequest(r.deadlineNs, res, next)
      }
      res.statusCode = r.status
      res.setHeader('retry-after', String(r.retryAfterS))
      res.setHeader('content-type', 'application/json')
      res.end(r.body)
    }, next)
  }
}

let fastifyPlugin
/**
 * Fastify plugin (fastify 5, fastify-plugin): `fastify.register(surgeguard.fastify,
 * { gate, keyed, key: 'x-tenant-id', readinessRoute: '/ready' })`. Decorates
 * `fastify.surgeguard` with the gate.
 */
function fastify (instance, options, done) {
  let cfg
  try {
    cfg = config('fastify', options)
  } catch (err) {
    return done(err)
  }
  instance.decorate('surgeguard', cfg.gate)
  const finishers = new WeakMap()
  const deadlines = new WeakMap()
  instance.addHook('onRequest', async (request, reply) => {
    if (cfg.readinessRoute && pathOf(request.raw) === cfg.readinessRoute) return
    if (cfg.skip !== undefined && cfg.skip(request)) return
    const r = await admit(cfg, request, reply.raw)
    if (r === false) return reply.hijack()
    if (r.permit !== undefined) {
      const finish = finisher(cfg, r)
      finishers.set(request, finish)
      deadlines.set(request, r.deadlineNs)
      // A hijacked reply never reaches onSend: then the raw response's end is the signal.
      const raw = reply.raw
      const end = raw.end
      raw.end = function surgeguardEnd () {
        raw.end = end
        finish(raw.statusCode)
        return end.apply(this, arguments)
      }
      return
    }
    reply.code(r.status).header('retry-after', String(r.retryAfterS)).type('application/json').send(r.body)
    return reply
  })
  // The rest of the request (hooks, the handler) runs in its scope: its deadline, its
  // response. A callback hook, as AsyncLocalStorage needs (`done` runs inside the scope).
  instance.addHook('onRequest', (request, reply, done) => {
    if (!finishers.has(request)) return done()
    const d = deadlines.get(request)
    deadlines.delete(request)
    D.runRequest(d, reply.raw, done)
  })
  // The handler (or the error handler) produced its reply: its work is done.
  instance.addHook('onSend', async (request, reply, payload) => {
    const finish = finishers.get(request)
    if (finish !== undefined) {
      finishers.delete(request)
      finish(reply.statusCode)
    }
    return payload
  })
  if (cfg.readinessRoute) {
    instance.get(cfg.readinessRoute, readiness(cfg.gate, { overloadedStatus: cfg.overloadedStatus }))
  }
  done()
}

try {
  fastifyPlugin = require('fastify-plugin')(fastify, { fastify: '5.x', name: 'surgeguard' })
} catch {
  fastifyPlugin = fastify
}

module.exports = { express, fastify: fastifyPlugin, readiness, statusOutcome, admit }
