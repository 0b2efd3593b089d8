'use strict'
// A fetch wrapper (Node 20's global fetch by default) with a retry budget, jittered
// backoff that honours Retry-After, AbortSignal, and idempotency rules.
const v = require('./validate')
const { RejectedError } = require('./errors')
const { RetryBudget, Backoff, CircuitBreaker, AdaptiveThrottle } = require('./resilience')

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
    maxRetryAfterMs: 'ms'
  })
  const fetchFn = o.fetch || globalThis.fetch
  const budget = o.budget === undefined ? new RetryBudget() : o.budget
  const backoff = o.backoff || new Backoff()
  const breaker = o.breaker
  const throttle = o.throttle
  const maxAttempts = o.maxAttempts === undefined ? 3 : o.maxAttempts
  const retryOn = new Set(o.retryOn || [429, 502, 503, 504])
  const methods = new Set(o.methods || IDEMPOTENT)
  const maxRetryAfterMs = o.maxRetryAfterMs === undefined ? 30000 : o.maxRetryAfterMs

  return async function surgeguardFetch (input, init) {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request
    const method = String((init && init.method) || (isRequest ? input.method : 'GET')).toUpperCase()
    const headers = (init && init.headers) || (isRequest ? input.headers : undefined)
    const signal = (init && init.signal) || (isRequest ? input.signal : undefined)
    const body = init ? init.body : undefined
    const canReplay = replayable(body) && !(isRequest && input.body !== null && body === undefined)
    const idempotent = canReplay && (methods.has(method) || hasHeader(headers, 'idempotency-key'))
    if (budget) budget.deposit()
    backoff.reset()
    for (let attempt = 1; ; attempt++) {
      if (signal && signal.aborted) throw signal.reason
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
      try {
        res = await fetchFn(input, init)
      } catch (err) {
        error = err
      }
      if (error !== undefined) {
        if (permit) permit.dropped()
        if (throttle) throttle.record(false)
        if ((signal && signal.aborted) || (error && error.name === 'AbortError')) throw error
        if (!idempotent || attempt >= maxAttempts || (budget && !budget.tryWithdraw())) throw error
        await sleep(backoff.nextDelayMs(attempt), signal)
        continue
      }
      const overloaded = res.status === 429 || res.status === 503
      if (permit) {
        if (res.status >= 500 || res.status === 429) permit.dropped()
        else permit.success()
      }
      if (throttle) throttle.record(!overloaded)
      if (!retryOn.has(res.status) || !idempotent || attempt >= maxAttempts) return res
      const retryAfterMs = parseRetryAfter(res.headers.get('retry-after'))
      if (retryAfterMs !== undefined && retryAfterMs > maxRetryAfterMs) return res
      if (budget && !budget.tryWithdraw()) return res
      const delay = backoff.nextDelayMs(attempt, retryAfterMs)
      if (res.body) {
        try {
          await res.body.cancel()
        } catch {}
      }
      await sleep(delay, signal)
    }
  }
}

module.exports = { createFetch, parseRetryAfter, IDEMPOTENT }
