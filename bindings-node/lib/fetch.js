'use strict'
// A fetch wrapper (Node 20's global fetch by default) with a retry budget, jittered
// backoff that honours Retry-After, AbortSignal, idempotency rules, and deadline
// propagation: inside a deadline scope (`sg.deadline`, which the middlewares set from the
// caller's headers) each attempt carries the remaining budget minus a margin in its
// headers, is aborted when the budget runs out, is refused locally when the budget is below
// the dependency's expected latency, and is retried only if the retry fits in the budget.
const N = require('./native')
const v = require('./validate')
const { RejectedError } = require('./errors')
const { RetryBudget, Backoff, CircuitBreaker, AdaptiveThrottle } = require('./resilience')
const D = require('./deadline')
const H = require('./headers')

/** EWMA weight of a new latency sample, and samples needed before the estimate is used. */
const LEARN_ALPHA = 0.2
const LEARN_WARMUP = 5

/**
 * The dependency's expected latency, ms: fixed, or learned as an EWMA of the time to
 * response headers of the calls it answered (below 500, not 429), used once
 * `LEARN_WARMUP` samples are in (0 until then: only an exhausted budget fails fast).
 */
class Latency {
  constructor (fixed) {
    this.fixed = fixed
    this.ewma = 0
    this.samples = 0
  }

  expected () {
    if (this.fixed !== undefined) return this.fixed
    return this.samples >= LEARN_WARMUP ? this.ewma : 0
  }

  record (ms) {
    this.ewma = this.samples === 0 ? ms : this.ewma + LEARN_ALPHA * (ms - this.ewma)
    this.samples++
  }
}

/** Milliseconds from now until `deadlineNs`, 0 once passed. */
function leftMs (deadlineNs) {
  const left = deadlineNs - N.nowNs()
  return left > 0n ? Number(left) / D.NS_PER_MS : 0
}

const IDEMPOTENT = ['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']

/** `Retry-After` (seconds or an HTTP date) in ms, or undefined. */
function parseRetryAfter (value, nowMs = Date.now()) {
  if (typeof value !== 'string' || value === '') return undefined
  const s = value.trim()
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000
  const t = Date.parse(s)
  return Number.isNaN(t) ? undefined : Math.max(0, t - nowMs)
}

function sleep (ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason)
    const t = setTimeout(() => {
      if (signal) signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    function onAbort () {
      clearTimeout(t)
      reject(signal.reason)
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
  })
}

function hasHeader (headers, name) {
  if (!headers) return false
  if (typeof headers.has === 'function') return headers.has(name)
  if (Array.isArray(headers)) return headers.some(([k]) => String(k).toLowerCase() === name)
  return Object.keys(headers).some((k) => k.toLowerCase() === name)
}

/** Whether a body can be sent again (not a one-shot stream). */
function replayable (body) {
  return body === undefined || body === null || typeof body === 'string' ||
    body instanceof ArrayBuffer || ArrayBuffer.isView(body) || body instanceof URLSearchParams ||
    (typeof Blob !== 'undefined' && body instanceof Blob) ||
    (typeof FormData !== 'undefined' && body instanceof FormData)
}

/**
 * `createFetch(options)` → `fetch(input, init)` with retries that cannot amplify an
 * outage: each call deposits into a `RetryBudget`, each retry withdraws; a retry happens
 * only for an idempotent request (GET/HEAD/OPTIONS/PUT/DELETE/TRACE, or any method with
 * an `Idempotency-Key` header) with a replayable body, on a network error or a status in
 * `retryOn`, after `Backoff.nextDelayMs(attempt, Retry-After)`; never after the signal
 * aborts; never when Retry-After exceeds `maxRetryAfterMs`. Optional `breaker` and
 * `throttle` refuse locally with `RejectedError`.
 *
 * Deadlines (unless `deadlines: false`), when the call runs in a deadline scope: each
 * attempt sets `deadlineHeaders` (default `surgeguard-timeout-ms`) to the remaining budget
 * minus `deadlineMarginMs` (default 5), is aborted at the deadline
 * (`DeadlineExceededError`), and is refused before sending (`DeadlineTooShortError`) when
 * that is below `expectedLatencyMs` (a number, or `'learned'`, the default); a retry is
 * made only if its backoff plus the expected latency fits in what is left.
 */
function createFetch (options) {
  const o = v.options('createFetch', options, {
    fetch: 'fn',
    budget: (w, x) => (x === false || x instanceof RetryBudget ? x : new RetryBudget(x)),
    backoff: (w, x) => (x instanceof Backoff ? x : new Backoff(x)),
    breaker: (w, x) => {
      if (!(x instanceof CircuitBreaker)) throw v.typeErr(`${w} must be a CircuitBreaker`)
      return x
    },
    throttle: (w, x) => {
      if (!(x instanceof AdaptiveThrottle)) throw v.typeErr(`${w} must be an AdaptiveThrottle`)
      return x
    },
    maxAttempts: (w, x) => v.int(w, x, 1, 100),
    retryOn: (w, x) => {
      if (!Array.isArray(x)) throw v.typeErr(`${w} must be an array of status codes`)
      return x.map((s, i) => v.int(`${w}[${i}]`, s, 100, 599))
    },
    methods: (w, x) => {
      if (!Array.isArray(x)) throw v.typeErr(`${w} must be an array of method names`)
      return x.map((m, i) => v.string(`${w}[${i}]`, m).toUpperCase())
    },
    maxRetryAfterMs: 'ms',
    deadlines: 'bool',
    deadlineHeaders: (w, x) => {
      if (!Array.isArray(x)) throw v.typeErr(`${w} must be an array of header names`)
      return x.map((h, i) => D.headerName(`${w}[${i}]`, h))
    },
    deadlineMarginMs: 'ms',
    expectedLatencyMs: (w, x) => (x === 'learned' ? undefined : typeof x === 'string' ? v.oneOf('learned')(w, x) : v.ms(w, x))
  })
  const fetchFn = o.fetch || globalThis.fetch
  // Node loads its fetch (undici) on first use of these globals, which can take longer
  // than a short deadline: load it now, while setting up, not inside a request's budget.
  const HeadersClass = globalThis.Headers
  const budget = o.budget === undefined ? new RetryBudget() : o.budget
  const backoff = o.backoff || new Backoff()
  const breaker = o.breaker
  const throttle = o.throttle
  const maxAttempts = o.maxAttempts === undefined ? 3 : o.maxAttempts
  const retryOn = new Set(o.retryOn || [429, 502, 503, 504])
  const methods = new Set(o.methods || IDEMPOTENT)
  const maxRetryAfterMs = o.maxRetryAfterMs === undefined ? 30000 : o.maxRetryAfterMs
  const deadlines = o.deadlines !== false
  const deadlineHeaders = o.deadlineHeaders || ['surgeguard-timeout-ms']
  const marginMs = o.deadlineMarginMs === undefined ? 5 : o.deadlineMarginMs
  const marginNs = D.msToNs(marginMs)
  const latency = new Latency(o.expectedLatencyMs)

  /**
   * The init of one attempt under `deadlineNs`: the deadline headers and a signal that
   * aborts at the deadline; or a `DeadlineTooShortError` when the budget is too short.
   */
  function withDeadline (deadlineNs, input, init, isRequest, signal) {
    const now = N.nowNs()
    const left = deadlineNs > now ? Number(deadlineNs - now) / D.NS_PER_MS : 0
    const expected = latency.expected()
    const usable = Math.max(0, left - marginMs)
    if (usable <= 0 || usable < expected) return new D.DeadlineTooShortError(usable, expected || undefined)
    const headers = new HeadersClass((init && init.headers) || (isRequest ? input.headers : undefined))
    for (const name of deadlineHeaders) {
      const value = H.format(name, deadlineNs, now, marginNs)
      if (value === 'exhausted') return new D.DeadlineTooShortError(usable, expected || undefined)
      headers.set(name, value)
    }
    const timeout = AbortSignal.timeout(Math.max(1, Math.ceil(left)))
    return {
      init: Object.assign({}, init, { headers, signal: signal ? AbortSignal.any([signal, timeout]) : timeout }),
      timeout
    }
  }

  return async function surgeguardFetch (input, init) {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request
    const method = String((init && init.method) || (isRequest ? input.method : 'GET')).toUpperCase()
    const headers = (init && init.headers) || (isRequest ? input.headers : undefined)
    const signal = (init && init.signal) || (isRequest ? input.signal : undefined)
    const body = init ? init.body : undefined
    const canReplay = replayable(body) && !(isRequest && input.body !== null && body === undefined)
    const idempotent = canReplay && (methods.has(method) || hasHeader(headers, 'idempotency-key'))
    const scope = deadlines ? D.scope() : undefined
    const deadlineNs = scope === undefined ? undefined : scope.deadlineNs
    if (budget) budget.deposit()
    backoff.reset()
    // The previous attempt's answer (a Response or a thrown error), while retrying.
    let last
    for (let attempt = 1; ; attempt++) {
      if (signal && signal.aborted) throw signal.reason
      let attemptInit = init
      let timeout
      if (deadlineNs !== undefined) {
        // Before the throttle and the breaker: a call refused here was never made.
        const d = withDeadline(deadlineNs, input, init, isRequest, signal)
        if (d instanceof Error) {
          // A retry whose budget ran out while backing off: the last answer stands.
          if (last !== undefined) {
            D.counts.retriesSkipped++
            if (last.error !== undefined) throw last.error
            return last.res
          }
          D.counts.failedFast++
          throw d
        }
        attemptInit = d.init
        timeout = d.timeout
        if (last !== undefined && last.res !== undefined && last.res.body) {
          try {
            await last.res.body.cancel()
          } catch {}
        }
        D.counts.propagated++
      }
      if (throttle && throttle.shouldThrottle()) {
        const r = throttle.lastRejection
        throw new RejectedError(r.reason, r.retryAfterMs)
      }
      let permit = null
      if (breaker) {
        permit = breaker.tryAcquire()
        if (permit === null) {
          const r = breaker.lastRejection
          throw new RejectedError(r.reason, r.retryAfterMs)
        }
      }
      let res
      let error
      const t0 = performance.now()
      try {
        res = await fetchFn(input, attemptInit)
      } catch (err) {
        error = err
      }
      if (error !== undefined) {
        if (permit) permit.dropped()
        if (throttle) throttle.record(false)
        if (timeout !== undefined && timeout.aborted && !(signal && signal.aborted)) {
          D.counts.exceeded++
          throw new D.DeadlineExceededError(error)
        }
        if ((signal && signal.aborted) || (error && error.name === 'AbortError')) throw error
        if (!idempotent || attempt >= maxAttempts) throw error
        const delay = backoff.nextDelayMs(attempt)
        if (deadlineNs !== undefined && !fits(deadlineNs, delay)) throw error
        if (budget && !budget.tryWithdraw()) throw error
        last = { error }
        await sleep(delay, signal)
        continue
      }
      if (res.status < 500 && res.status !== 429) latency.record(performance.now() - t0)
      const overloaded = res.status === 429 || res.status === 503
      if (permit) {
        if (res.status >= 500 || res.status === 429) permit.dropped()
        else permit.success()
      }
      if (throttle) throttle.record(!overloaded)
      if (!retryOn.has(res.status) || !idempotent || attempt >= maxAttempts) return res
      const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'))
      if (retryAfterMs !== undefined && retryAfterMs > maxRetryAfterMs) return res
      const delay = backoff.nextDelayMs(attempt, retryAfterMs)
      if (deadlineNs !== undefined && !fits(deadlineNs, delay)) return res
      if (budget && !budget.tryWithdraw()) return res
      if (deadlineNs === undefined && res.body) {
        try {
          await res.body.cancel()
        } catch {}
      }
      // Under a deadline the body is dropped only when the retry is sent: if the budget
      // runs out while backing off, this answer is returned whole.
      last = { res }
      await sleep(delay, signal)
    }
  }

  /** Whether a retry after `delayMs` still leaves the margin and the expected latency. */
  function fits (deadlineNs, delayMs) {
    const usable = leftMs(deadlineNs) - delayMs - marginMs
    if (usable > 0 && usable >= latency.expected()) return true
    D.counts.retriesSkipped++
    return false
  }
}

module.exports = { createFetch, parseRetryAfter, IDEMPOTENT }
