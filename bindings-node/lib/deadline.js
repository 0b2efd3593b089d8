'use strict'
// Deadlines: the caller's remaining budget, read from a request at arrival, carried through
// the handler's async work in an AsyncLocalStorage, and passed on to the next hop by the
// fetch wrapper, minus a margin (the Google SRE book, "Addressing Cascading Failures":
// deadline propagation; gRPC does the same with `grpc-timeout`).
//
// Time is the binding's monotonic clock (`sg.nowNs()`, a bigint of nanoseconds): a deadline
// is an absolute bigint on that clock, the same one every Gate call reads.
const { AsyncLocalStorage } = require('node:async_hooks')
const N = require('./native')
const v = require('./validate')
const { OverloadError } = require('./errors')
const H = require('./headers')
const { guard } = require('./brand')

const NS_PER_MS = 1e6

/**
 * A deadline error: the caller's budget does not cover the work. `code` is
 * `SG_DEADLINE_TOO_SHORT` (refused locally before any work: too little budget left) or
 * `SG_DEADLINE_EXCEEDED` (the budget ran out while the work ran). `remainingMs` is what was
 * left when it was decided (0 when none), `expectedMs` the latency the work needs, if known.
 */
class DeadlineError extends OverloadError {
  constructor (message, code, remainingMs, expectedMs, options) {
    super(message, code, options)
    this.name = 'DeadlineError'
    this.remainingMs = remainingMs
    this.expectedMs = expectedMs
  }
}

/** Too little budget left to start: failed fast, nothing was sent or started. */
class DeadlineTooShortError extends DeadlineError {
  constructor (remainingMs, expectedMs) {
    const need = expectedMs === undefined ? '' : `; the call needs about ${round(expectedMs)} ms`
    super(`surgeguard: deadline too short: ${round(remainingMs)} ms left${need}`, 'SG_DEADLINE_TOO_SHORT', remainingMs, expectedMs)
    this.name = 'DeadlineTooShortError'
  }
}

/** The budget ran out while the call was in flight (it was aborted). */
class DeadlineExceededError extends DeadlineError {
  constructor (cause) {
    super('surgeguard: deadline exceeded', 'SG_DEADLINE_EXCEEDED', 0, undefined, cause === undefined ? undefined : { cause })
    this.name = 'DeadlineExceededError'
  }
}

function round (ms) {
  return Math.round(ms * 1000) / 1000
}

/**
 * One scope of the request context: its absolute deadline (bigint ns, or undefined), and,
 * inside a middleware, the raw response (to mark a stale answer).
 */
class Scope {
  constructor (deadlineNs, res) {
    this.deadlineNs = deadlineNs
    this.res = res
    this.stale = false
  }
}

const als = new AsyncLocalStorage()

/** The earlier of two optional deadlines. */
function earlier (a, b) {
  if (a === undefined) return b
  if (b === undefined) return a
  return a < b ? a : b
}

/** ms → ns as a bigint, rounded down (a budget never grows by rounding). */
function msToNs (ms) {
  return BigInt(Math.floor(ms * NS_PER_MS))
}

/** Counters of the deadline machinery, process-wide (every middleware and fetch wrapper). */
const counts = {
  /** Requests that arrived with a usable deadline header. */
  headerDeadlines: 0,
  /** Requests with no usable header that got a budget from the server (`defaultBudgetMs`, `timeoutMs`). */
  defaultDeadlines: 0,
  /** Requests served without any deadline. */
  noDeadline: 0,
  /** Deadline headers ignored, by reason (`malformed`, `negative`, `too_large`). */
  ignoredByReason: Object.fromEntries(H.IGNORE_REASONS.map((r) => [r, 0])),
  /** Outgoing calls that carried a deadline header. */
  propagated: 0,
  /** Outgoing calls refused locally (`DeadlineTooShortError`). */
  failedFast: 0,
  /** Outgoing calls aborted by the deadline (`DeadlineExceededError`). */
  exceeded: 0,
  /** Retries not made because they could not finish within the budget. */
  retriesSkipped: 0
}

/**
 * The deadline API (`sg.deadline`): the current request's deadline, set by the Express
 * and Fastify middlewares from the caller's headers or by `run` for other code.
 */
class Deadlines {
  /** The absolute deadline of the current scope (bigint ns on `sg.nowNs()`), or undefined. */
  current () {
    const s = als.getStore()
    return s === undefined ? undefined : s.deadlineNs
  }

  /** Milliseconds left before the current deadline (0 once passed), or undefined if none. */
  remaining () {
    const s = als.getStore()
    if (s === undefined || s.deadlineNs === undefined) return undefined
    const left = s.deadlineNs - N.nowNs()
    return left > 0n ? Number(left) / NS_PER_MS : 0
  }

  /** True once the current deadline has passed (false when there is none). */
  expired () {
    const s = als.getStore()
    return s !== undefined && s.deadlineNs !== undefined && N.nowNs() >= s.deadlineNs
  }

  /**
   * Runs `fn(...args)` with a deadline `ms` from now, or the enclosing scope's deadline if
   * that is earlier (a nested scope never extends its caller's budget). Returns what `fn`
   * returns.
   */
  run (ms, fn, ...args) {
    v.ms('deadline.run: ms', ms)
    v.fn('deadline.run: fn', fn)
    return enter(N.nowNs() + msToNs(ms), fn, args)
  }

  /** Like `run`, with an absolute deadline (bigint ns on the `sg.nowNs()` clock). */
  runUntil (deadlineNs, fn, ...args) {
    if (typeof deadlineNs !== 'bigint') throw v.typeErr(`deadline.runUntil: deadlineNs must be a bigint (got ${v.show(deadlineNs)})`)
    if (deadlineNs < 0n || deadlineNs > v.MAX_NOW_NS) throw v.rangeErr(`deadline.runUntil: deadlineNs must be in [0, 2^62] (got ${v.show(deadlineNs)})`)
    v.fn('deadline.runUntil: fn', fn)
    return enter(deadlineNs, fn, args)
  }

  /**
   * An AbortSignal that aborts when the current deadline passes (its reason a
   * `DeadlineExceededError`), or undefined when there is no deadline.
   */
  signal () {
    const ms = this.remaining()
    if (ms === undefined) return undefined
    const ac = new AbortController()
    if (ms <= 0) {
      ac.abort(new DeadlineExceededError())
    } else {
      setTimeout(() => ac.abort(new DeadlineExceededError()), Math.ceil(ms)).unref()
    }
    return ac.signal
  }

  /**
   * The outgoing deadline headers for a client other than `createFetch` (undici, axios,
   * a gRPC call): `{ [name]: value }` for each of `names` (default
   * `['surgeguard-timeout-ms']`) carrying the remaining budget minus `marginMs` (default
   * 5), rounded down; `{}` without a deadline. Throws `DeadlineTooShortError` when nothing
   * is left after the margin: send nothing.
   */
  headers (options) {
    const o = v.options('deadline.headers', options, {
      marginMs: 'ms',
      names: (w, x) => {
        if (!Array.isArray(x)) throw v.typeErr(`${w} must be an array of header names`)
        return x.map((h, i) => headerName(`${w}[${i}]`, h))
      }
    })
    const s = als.getStore()
    if (s === undefined || s.deadlineNs === undefined) return {}
    const marginMs = o.marginMs === undefined ? 5 : o.marginMs
    const now = N.nowNs()
    const out = {}
    for (const name of o.names || ['surgeguard-timeout-ms']) {
      const value = H.format(name, s.deadlineNs, now, msToNs(marginMs))
      if (value === 'exhausted') {
        counts.failedFast++
        const left = s.deadlineNs > now ? Number(s.deadlineNs - now) / NS_PER_MS : 0
        throw new DeadlineTooShortError(Math.max(0, left - marginMs))
      }
      out[name] = value
    }
    return out
  }

  /**
   * The budget the deadline headers of `headers` (a Node `IncomingHttpHeaders` object or a
   * `Headers`) carry: `{ budgetMs, ignored: [{ header, reason }] }`, `budgetMs` undefined
   * when no header is usable. `grpc-timeout`, `x-envoy-expected-rq-timeout-ms`,
   * `surgeguard-timeout-ms` and `header` (one more name, in milliseconds) are read; the
   * smallest valid budget wins. Never throws on a header's value.
   */
  parseHeaders (headers, header) {
    if (headers === null || typeof headers !== 'object') throw v.typeErr(`deadline.parseHeaders needs a headers object (got ${v.show(headers)})`)
    const names = header === undefined ? H.HEADERS : H.HEADERS.concat(headerName('deadline.parseHeaders: header', header))
    const r = readBudget(headers, names)
    return { budgetMs: r.budgetNs === undefined ? undefined : Number(r.budgetNs) / NS_PER_MS, ignored: r.ignored }
  }

  /** Counters: requests with a header, a default or no deadline; ignored headers by reason; client side. */
  metrics () {
    return Object.assign({}, counts, { ignoredByReason: Object.assign({}, counts.ignoredByReason) })
  }
}

function enter (deadlineNs, fn, args) {
  const outer = als.getStore()
  const d = earlier(outer === undefined ? undefined : outer.deadlineNs, deadlineNs)
  const s = new Scope(d, outer === undefined ? undefined : outer.res)
  return als.run(s, fn, ...args)
}

/** An HTTP header name (a token), lowercased. */
function headerName (what, x) {
  v.string(what, x)
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(x)) throw v.rangeErr(`${what} must be an HTTP header name (got ${v.show(x)})`)
  return x.toLowerCase()
}

/** One header's value from Node's headers object or a WHATWG `Headers`. */
function headerValue (headers, name) {
  if (typeof headers.get === 'function' && typeof headers.has === 'function') {
    const x = headers.get(name)
    return x === null ? undefined : x
  }
  const x = Object.hasOwn(headers, name) ? headers[name] : undefined
  return Array.isArray(x) ? x.join(',') : x
}

/**
 * The smallest valid budget among `names` in `headers` (bigint ns, or undefined), and the
 * headers ignored, with why. A header present more than once is read as its joined value
 * (Node's http joins the lines with ", "), which the core reads as a list whose smallest
 * valid item wins (`deadline::parse_header`): the same budget Python and Rust read.
 */
function readBudget (headers, names) {
  let budgetNs
  let ignored
  for (const name of names) {
    const value = headerValue(headers, name)
    if (value === undefined) continue
    const r = H.parse(name, typeof value === 'string' ? value : String(value))
    if (typeof r === 'bigint') {
      budgetNs = budgetNs === undefined || r < budgetNs ? r : budgetNs
    } else {
      if (ignored === undefined) ignored = []
      ignored.push({ header: name, reason: r })
    }
  }
  return { budgetNs, ignored: ignored || [] }
}

/**
 * For the middlewares: the absolute deadline of a request that arrived at `arrivalNs`,
 * from its headers (`cfg.deadlineHeaders`, the smallest valid budget), else
 * `cfg.defaultBudgetMs`; capped by `cfg.timeoutMs`. Ignored headers are counted by reason.
 */
function requestDeadline (cfg, headers, arrivalNs) {
  let budgetNs
  let fromHeader = false
  if (cfg.deadlineHeaders !== undefined) {
    const r = readBudget(headers, cfg.deadlineHeaders)
    for (const x of r.ignored) counts.ignoredByReason[x.reason]++
    if (r.budgetNs !== undefined) {
      budgetNs = r.budgetNs
      fromHeader = true
    }
  }
  if (budgetNs === undefined && cfg.defaultBudgetMs !== undefined) budgetNs = msToNs(cfg.defaultBudgetMs)
  if (cfg.timeoutMs !== undefined) budgetNs = earlier(budgetNs, msToNs(cfg.timeoutMs))
  if (budgetNs === undefined) {
    counts.noDeadline++
    return undefined
  }
  if (fromHeader) counts.headerDeadlines++
  else counts.defaultDeadlines++
  return H.deadlineAt(arrivalNs, budgetNs)
}

/** Runs `fn` in a request's scope (its deadline and its raw response). */
function runRequest (deadlineNs, res, fn) {
  return als.run(new Scope(deadlineNs, res), fn)
}

/** The current scope, or undefined (for the fetch wrapper and StaleIfError). */
function scope () {
  return als.getStore()
}

guard(Deadlines)
const deadline = new Deadlines()

module.exports = {
  deadline,
  Deadlines,
  DeadlineError,
  DeadlineTooShortError,
  DeadlineExceededError,
  counts,
  requestDeadline,
  runRequest,
  scope,
  readBudget,
  msToNs,
  headerName,
  NS_PER_MS
}
