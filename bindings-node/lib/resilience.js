'use strict'
const N = require('./native')
const { F } = N
const { call, reasonName, RejectedError, OverloadError } = require('./errors')
const v = require('./validate')
const { guard, badThis } = require('./brand')
const { newPermit, OUTCOMES } = require('./permit')
const { releaseFailure } = require('./limiter')
const { OPEN, sharedName } = require('./shared')

const NOW_ONLY = ['nowNs']

function refusalOf (code) {
  return { reason: reasonName(code), retryAfterMs: F.lastRetryAfterMs() }
}

/**
 * A retry budget (Finagle/SRE): every request deposits, every retry withdraws; retries
 * stay within `percentCanRetry` of traffic plus `minRetriesPerSec`.
 */
class RetryBudget {
  constructor (options, open, name) {
    const o = v.options('RetryBudget', options, {
      ttlMs: 'ms',
      minRetriesPerSec: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
      // A fraction, as in Finagle's RetryBudget: 0.2 lets retries add 20% to traffic.
      // Above 1 is refused rather than guessed: 10 could mean 10% or 1000%.
      percentCanRetry: (w, x) => {
        v.number(w, x)
        if (!(x >= 0 && x <= 1)) {
          throw v.rangeErr(`${w} is a fraction in [0, 1] (0.2 = 20% of traffic; got ${v.show(x)}); for more retries than requests use retryRatio`)
        }
        return x
      },
      // The same quantity without the percent-sounding name: retries per request, up to
      // 1000 as in Finagle.
      retryRatio: (w, x) => {
        v.number(w, x)
        if (!(x >= 0 && x <= 1000)) throw v.rangeErr(`${w} must be in [0, 1000] retries per request (got ${v.show(x)})`)
        return x
      }
    })
    if (o.retryRatio !== undefined) {
      if (o.percentCanRetry !== undefined) throw v.typeErr('RetryBudget: give percentCanRetry or retryRatio, not both')
      o.percentCanRetry = o.retryRatio
      delete o.retryRatio
    }
    this._n = call(() => open === OPEN ? N.NativeRetryBudget.openShared(name, o) : new N.NativeRetryBudget(o))
    this._h = this._n.handle()
    this.lastRejection = null
  }

  /**
   * The retry budget named `name` in shared memory (Linux), one budget for every process
   * and thread that opens the name; see `Limiter.shared`.
   */
  static shared (name, options) {
    return new RetryBudget(options, OPEN, sharedName('RetryBudget.shared', name))
  }

  /** Whether it lives in shared memory. */
  get shared () {
    return this._n.isShared()
  }

  /** Records a request (call once per original request, not per retry). */
  deposit (nowNs) {
    if (this?._h === undefined) throw badThis('RetryBudget', 'deposit')
    if (nowNs === undefined) F.budgetDeposit(this._h)
    else F.budgetDeposit(this._h, nowNs)
  }

  /** Takes one retry from the budget: true if the retry may go. */
  tryWithdraw (nowNs) {
    if (this?._h === undefined) throw badThis('RetryBudget', 'tryWithdraw')
    const r = nowNs === undefined ? F.budgetTryWithdraw(this._h) : F.budgetTryWithdraw(this._h, nowNs)
    if (r === 0) return true
    this.lastRejection = refusalOf(-r)
    return false
  }

  /** Retries the budget holds now. */
  available (nowNs) {
    return call(() => this._n.available(v.nowNs(nowNs)))
  }

  metrics () {
    return this._n.metrics()
  }
}

/** The gRPC A6 retry throttle: tokens lost on failures, regained on successes. */
class TokenRetryThrottle {
  constructor (options) {
    const o = v.options('TokenRetryThrottle', options, { maxTokens: 'number', tokenRatio: 'number' })
    this._n = call(() => new N.NativeTokenRetryThrottle(o))
    this.lastRejection = null
  }

  /** Records an RPC result. */
  record (success) {
    this._n.record(v.bool('success', success))
  }

  /** Takes a retry: true if it may go. */
  tryRetry () {
    const r = this._n.tryRetry()
    if (r == null) return true
    this.lastRejection = r
    return false
  }

  get isRetryAllowed () {
    return this._n.isRetryAllowed()
  }

  get tokens () {
    return this._n.tokens()
  }

  metrics () {
    return this._n.metrics()
  }
}

/**
 * Client-side adaptive throttling (SRE book): refuse locally with probability
 * `max(0, (requests − K·accepts) / (requests + 1))`.
 */
class AdaptiveThrottle {
  constructor (options) {
    const o = v.options('AdaptiveThrottle', options, {
      k: 'number',
      windowMs: 'ms',
      maxDropProbability: 'number',
      form: v.oneOf('ring', 'ema'),
      seed: (w, x) => v.int(w, x)
    })
    this._n = call(() => new N.NativeAdaptiveThrottle(o))
    this._h = this._n.handle()
    this.lastRejection = null
  }

  /** True if this request should be refused locally (it is counted as a request). */
  shouldThrottle (nowNs) {
    if (this?._h === undefined) throw badThis('AdaptiveThrottle', 'shouldThrottle')
    const r = nowNs === undefined ? F.throttleCheck(this._h) : F.throttleCheck(this._h, nowNs)
    if (r === 0) return false
    this.lastRejection = refusalOf(-r)
    return true
  }

  /** Records a request sent to the backend: `accepted` is whether it took it. */
  record (accepted, nowNs) {
    if (this?._h === undefined) throw badThis('AdaptiveThrottle', 'record')
    if (nowNs === undefined) F.throttleRecord(this._h, accepted)
    else F.throttleRecord(this._h, accepted, nowNs)
  }

  dropProbability (nowNs) {
    return call(() => this._n.dropProbability(v.nowNs(nowNs)))
  }

  metrics () {
    return this._n.metrics()
  }
}

/** Exponential backoff with jitter that never retries sooner than the server said. */
class Backoff {
  constructor (options) {
    const o = v.options('Backoff', options, {
      baseMs: 'ms',
      multiplier: 'number',
      capMs: 'ms',
      jitter: v.oneOf('none', 'full', 'equal', 'decorrelated'),
      seed: (w, x) => v.int(w, x)
    })
    this._n = call(() => new N.NativeBackoff(o))
  }

  /** The delay before retry `attempt` (1 = first retry; 0 is refused), ms; at least `retryAfterMs`. */
  nextDelayMs (attempt, retryAfterMs) {
    v.int('attempt', attempt, 1, 2 ** 32 - 1)
    if (retryAfterMs !== undefined && retryAfterMs !== null) v.ms('retryAfterMs', retryAfterMs)
    else retryAfterMs = undefined
    return call(() => this._n.nextDelayMs(attempt, retryAfterMs))
  }

  /** The ceiling before jitter for retry `attempt` (1 = first retry; 0 is refused), ms. */
  ceilingMs (attempt) {
    v.int('attempt', attempt, 1, 2 ** 32 - 1)
    return this._n.ceilingMs(attempt)
  }

  reset () {
    this._n.reset()
  }
}

/** Default classification of a failed call: every error counts as a failure. */
function failure () {
  return 'dropped'
}

/**
 * A circuit breaker: count or time windows, failure-rate and slow-call thresholds,
 * jittered open period, half-open probes, then a traffic ramp (10 → 25 → 50 → 100 %).
 */
class CircuitBreaker {
  constructor (options) {
    const o = v.options('CircuitBreaker', options, {
      windowCalls: (w, x) => v.int(w, x, 1, 2 ** 32 - 1),
      windowMs: 'ms',
      failureRateThreshold: 'number',
      slowCallRateThreshold: 'number',
      slowCallMs: 'ms',
      minimumCalls: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
      openMs: 'ms',
      openJitter: 'number',
      halfOpenProbes: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
      probeLeaseMs: 'ms',
      rampMs: 'ms',
      seed: (w, x) => v.int(w, x),
      classify: 'fn'
    })
    this._classify = o.classify || failure
    delete o.classify
    this._n = call(() => new N.NativeCircuitBreaker(o))
    this._h = this._n.handle()
    this.lastRejection = null
  }

  /** A permit for one call (end it with success/dropped/ignore), or null when open. */
  tryAcquire (opts) {
    if (this?._h === undefined) throw badThis('CircuitBreaker', 'tryAcquire')
    let now
    if (opts !== undefined) {
      v.callOptions('CircuitBreaker.tryAcquire', opts, NOW_ONLY)
      now = v.nowNs(opts.nowNs)
    }
    const r = now === undefined ? F.breakerAcquire(this._h) : F.breakerAcquire(this._h, now)
    if (r >= 0) return newPermit(this, releaseBreaker, r, 0)
    this.lastRejection = refusalOf(-r)
    return null
  }

  /**
   * Runs `fn` if the breaker admits it and records how it went (its latency, and an error
   * as classified by `classify(err)` → 'dropped' (a failure, default) | 'ignore' |
   * 'success'). Rejects with `RejectedError('breaker_open')` without calling `fn` when open.
   */
  run (fn) {
    if (this?._h === undefined) return Promise.reject(badThis('CircuitBreaker', 'run'))
    // Checked before admission: a call that is not made records nothing.
    if (typeof fn !== 'function') return Promise.reject(v.typeErr(`run needs a function (got ${v.show(fn)})`))
    const h = this._h
    const r = F.breakerAcquire(h)
    if (r < 0) {
      const rej = refusalOf(-r)
      this.lastRejection = rej
      return Promise.reject(new RejectedError(rej.reason, rej.retryAfterMs))
    }
    let p
    try {
      // No rest parameter: most calls pass no arguments, and a rest array costs an
      // allocation on every call.
      p = arguments.length === 1 ? fn() : fn.apply(undefined, Array.prototype.slice.call(arguments, 1))
    } catch (err) {
      this._fail(r, err)
      return Promise.reject(err)
    }
    if (p === null || typeof p !== 'object' || typeof p.then !== 'function') {
      F.breakerRecord(h, r, 0)
      return Promise.resolve(p)
    }
    return p.then((value) => {
      F.breakerRecord(h, r, 0)
      return value
    }, (err) => {
      this._fail(r, err)
      throw err
    })
  }

  _fail (id, err) {
    let o = 1
    try {
      const name = this._classify(err)
      const c = typeof name === 'string' ? OUTCOMES.get(name) : undefined
      if (c !== undefined) o = c
    } catch {}
    F.breakerRecord(this._h, id, o)
  }

  /** `closed`, `ramping`, `open` or `half_open`. */
  state (nowNs) {
    return call(() => this._n.state(v.nowNs(nowNs)))
  }

  isOpen (nowNs) {
    return call(() => this._n.isOpen(v.nowNs(nowNs)))
  }

  get livePermits () {
    return this._n.livePermits()
  }

  metrics (nowNs) {
    return call(() => this._n.metrics(v.nowNs(nowNs)))
  }
}

/** Ends a breaker permit, recording its outcome. */
function releaseBreaker (breaker, id, outcome, nowNs) {
  const h = breaker._h
  const r = nowNs === undefined ? F.breakerRecord(h, id, outcome) : F.breakerRecord(h, id, outcome, nowNs)
  if (r < 0) throw releaseFailure(r)
}

/** A GCRA rate limiter: weighted cost, returns the wait instead of sleeping. */
class RateLimiter {
  constructor (options, open, name) {
    if (options === undefined || options === null || options.perSecond === undefined) {
      throw v.typeErr('RateLimiter needs { perSecond }')
    }
    const o = v.options('RateLimiter', options, {
      perSecond: 'number',
      burst: (w, x) => v.int(w, x, 0, 2 ** 32 - 1)
    })
    this._n = call(() => open === OPEN ? N.NativeRateLimiter.openShared(name, o) : new N.NativeRateLimiter(o))
    this._h = this._n.handle()
    this.lastRejection = null
  }

  /**
   * The rate limiter named `name` in shared memory (Linux), one rate for every process
   * and thread that opens the name; see `Limiter.shared`.
   */
  static shared (name, options) {
    return new RateLimiter(options, OPEN, sharedName('RateLimiter.shared', name))
  }

  /** Whether it lives in shared memory. */
  get shared () {
    return this._n.isShared()
  }

  /** Takes `cost` units (default 1) if they conform now: true if taken. */
  tryTake (cost = 1, nowNs) {
    if (this?._h === undefined) throw badThis('RateLimiter', 'tryTake')
    const r = nowNs === undefined ? F.rateCheck(this._h, cost) : F.rateCheck(this._h, cost, nowNs)
    if (r === 0) return true
    this.lastRejection = refusalOf(-r)
    return false
  }

  /** Takes up to `max` units now; how many were taken. */
  takeUpTo (max, nowNs) {
    return call(() => this._n.takeUpTo(v.int('max', max, 0, 2 ** 32 - 1), v.nowNs(nowNs)))
  }

  available (nowNs) {
    return call(() => this._n.available(v.nowNs(nowNs)))
  }

  /** How long until `cost` units conform, ms (0 = now). */
  waitTimeMs (cost = 1, nowNs) {
    return call(() => this._n.waitTimeMs(v.int('cost', cost, 0, 2 ** 32 - 1), v.nowNs(nowNs)))
  }

  metrics () {
    return this._n.metrics()
  }
}

/** Paces the drain of a backlog after an outage, with headroom for live traffic. */
class PacedDrain {
  constructor (options) {
    if (options === undefined || options === null || options.targetPerSec === undefined) {
      throw v.typeErr('PacedDrain needs { targetPerSec }')
    }
    const o = v.options('PacedDrain', options, {
      targetPerSec: 'number',
      headroom: 'number',
      burst: (w, x) => v.int(w, x, 0, 2 ** 32 - 1)
    })
    this._n = call(() => new N.NativePacedDrain(o))
  }

  /** How many backlog items may start now. */
  permits (backlog, nowNs) {
    return call(() => this._n.permits(v.int('backlog', backlog), v.nowNs(nowNs)))
  }

  nextPermitInMs (nowNs) {
    return call(() => this._n.nextPermitInMs(v.nowNs(nowNs)))
  }

  /** Time to drain `backlog` while `producePerSec` keeps arriving, ms; null if never. */
  timeToDrainMs (backlog, producePerSec = 0) {
    return call(() => this._n.timeToDrainMs(v.int('backlog', backlog), v.nonNegative('producePerSec', producePerSec)))
  }

  get drainPerSec () {
    return this._n.drainPerSec()
  }

  metrics () {
    return this._n.metrics()
  }
}

guard(RetryBudget, ['deposit', 'tryWithdraw'])
guard(TokenRetryThrottle)
guard(AdaptiveThrottle, ['shouldThrottle', 'record'])
guard(Backoff)
guard(CircuitBreaker, ['tryAcquire', 'run'])
guard(RateLimiter, ['tryTake'])
guard(PacedDrain)

module.exports = {
  RetryBudget,
  TokenRetryThrottle,
  AdaptiveThrottle,
  Backoff,
  CircuitBreaker,
  RateLimiter,
  PacedDrain,
  OverloadError
}
