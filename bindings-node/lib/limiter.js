'use strict'
const N = require('./native')
const { F } = N
const { call, reasonName, OverloadError } = require('./errors')
const v = require('./validate')
const { Levels } = require('./priority')
const { Permit } = require('./permit')

const ALGORITHMS = ['fixed', 'aimd', 'hysteresis', 'gradient', 'gradient2', 'vegas']

/** Options of the limiter (shared by `Gate`'s `limiter` part). */
const LIMITER_SPEC = {
  algorithm: v.oneOf(...ALGORITHMS),
  initialLimit: 'number',
  minLimit: 'number',
  maxLimit: 'number',
  levels: (w, x) => v.int(w, x, 1, 8),
  weights: v.numbers,
  minWindowMs: 'ms',
  maxWindowMs: 'ms',
  windowRttMultiple: 'nonNegative',
  minSamples: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  activeMs: 'ms'
}

/** A release code from the fast path as an error (never expected through a Permit). */
function releaseFailure (r) {
  return r === -2
    ? new OverloadError('surgeguard: permit belongs to another object', 'SG_FOREIGN_HANDLE')
    : new OverloadError('surgeguard: permit already released', 'SG_ALREADY_RELEASED')
}

/**
 * A concurrency limiter: admits work while in-flight is below an adaptive limit (exact,
 * lock-free, per-priority shares), learns the limit from completions.
 */
class Limiter {
  constructor (options) {
    const o = v.options('Limiter', options, LIMITER_SPEC)
    this._n = call(() => new N.NativeLimiter(o))
    this._h = this._n.handle()
    this._lv = new Levels(o.levels === undefined ? 3 : o.levels)
    this._rej = 0
    this._rejMs = 0
  }

  /** A permit, or `null` when the limit (or the level's share) is reached. Sync. */
  tryAcquire (opts) {
    let lvl = this._lv.default
    let now
    if (opts !== undefined) {
      if (opts.priority !== undefined) lvl = this._lv.of(opts.priority)
      now = opts.nowNs
    }
    const r = now === undefined ? F.limiterAcquire(this._h, lvl) : F.limiterAcquire(this._h, lvl, now)
    if (r >= 0) return new Permit(this, r, lvl)
    this._rej = -r
    this._rejMs = F.lastRetryAfterMs()
    return null
  }

  /** Why the last `tryAcquire` returned null: `{ reason, retryAfterMs }`, or null. */
  get lastRejection () {
    return this._rej === 0 ? null : { reason: reasonName(this._rej), retryAfterMs: this._rejMs }
  }

  _release (id, outcome, nowNs) {
    const r = nowNs === undefined ? F.limiterRelease(this._h, id, outcome) : F.limiterRelease(this._h, id, outcome, nowNs)
    if (r < 0) throw releaseFailure(r)
  }

  /** The limit in force. */
  get limit () {
    return this._n.limit()
  }

  /** Requests in flight. */
  get inflight () {
    return this._n.inflight()
  }

  /** Permits handed to JS and not yet ended (a leak check). */
  get livePermits () {
    return this._n.livePermits()
  }

  /** The kill switch (seed 000): pin the limit to `limit`, or `null` to let it adapt. */
  setStaticLimit (limit) {
    if (limit !== null) v.number('limit', limit)
    call(() => this._n.setStaticLimit(limit))
  }

  /** A snapshot of counters and gauges. */
  metrics () {
    return this._n.metrics()
  }
}

module.exports = { Limiter, LIMITER_SPEC, ALGORITHMS, releaseFailure }
