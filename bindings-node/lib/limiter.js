'use strict'
const N = require('./native')
const { F } = N
const { call, reasonName, OverloadError } = require('./errors')
const v = require('./validate')
const { guard, badThis } = require('./brand')
const { Levels } = require('./priority')
const { newPermit } = require('./permit')
const { OPEN, sharedName, tableFull } = require('./shared')

/** `limiterAcquire`'s code for a shared limiter whose process table is full. */
const TABLE_FULL = -64

const ALGORITHMS = Object.freeze(['fixed', 'aimd', 'hysteresis', 'gradient', 'gradient2', 'vegas'])

/** A concurrency limit: a finite number in [1e-6, 1e9] (fractions allowed). */
function limitValue (what, x) {
  v.number(what, x)
  if (!(x >= 1e-6 && x <= 1e9)) throw v.rangeErr(`${what} must be in [1e-6, 1e9] (got ${v.show(x)})`)
  return x
}

/** Options of the limiter (shared by `Gate`'s `limiter` part). */
const LIMITER_SPEC = {
  algorithm: v.oneOf(...ALGORITHMS),
  initialLimit: limitValue,
  minLimit: limitValue,
  maxLimit: limitValue,
  levels: (w, x) => v.int(w, x, 1, 8),
  weights: v.numbers,
  minWindowMs: 'ms',
  maxWindowMs: 'ms',
  windowRttMultiple: 'nonNegative',
  minSamples: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  activeMs: 'ms',
  // Algorithm-specific (see ALGORITHM_OPTIONS).
  targetLatencyMs: 'ms',
  latencyPercentile: 'number',
  backoffRatio: 'number',
  timeoutMs: 'ms',
  appLimitedFraction: 'number',
  slowStart: 'bool',
  netflixParity: 'bool',
  healthyBelow: 'number',
  criticalAbove: 'number',
  criticalFactor: 'number',
  jumpRise: 'number',
  jumpWindowMs: 'ms',
  jumpFactor: 'number',
  avgAlpha: 'number',
  coolOffMs: 'ms',
  p99WindowMs: 'ms',
  buffer: 'number',
  headroom: 'number',
  smoothing: 'number',
  samplePercentile: 'number',
  probeIntervalMs: 'ms',
  probeJitter: 'number',
  probeLimit: 'number',
  probeSamples: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  pinnedBaselineMs: 'ms',
  backoff: 'number',
  dropTolerance: 'number',
  appLimitedRatio: 'number',
  seed: (w, x) => v.int(w, x),
  queueSize: 'number',
  longWindow: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  rttTolerance: 'number',
  fixed: 'bool',
  alpha: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  beta: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  threshold: (w, x) => v.int(w, x, 0, 2 ** 32 - 1),
  decreaseRatio: 'number',
  probeMultiplier: (w, x) => v.int(w, x, 0, 2 ** 32 - 1)
}

/** The algorithm-specific options each algorithm takes (the core's `limit::*Config`). */
const ALGORITHM_OPTIONS = {
  fixed: [],
  aimd: ['targetLatencyMs', 'latencyPercentile', 'backoffRatio', 'timeoutMs', 'appLimitedFraction', 'slowStart', 'netflixParity'],
  hysteresis: ['targetLatencyMs', 'healthyBelow', 'criticalAbove', 'criticalFactor', 'jumpRise', 'jumpWindowMs', 'jumpFactor', 'avgAlpha', 'coolOffMs', 'p99WindowMs', 'appLimitedFraction', 'slowStart'],
  gradient: ['buffer', 'headroom', 'smoothing', 'samplePercentile', 'probeIntervalMs', 'probeJitter', 'probeLimit', 'probeSamples', 'pinnedBaselineMs', 'backoff', 'dropTolerance', 'slowStart', 'appLimitedRatio', 'seed'],
  gradient2: ['smoothing', 'queueSize', 'longWindow', 'rttTolerance', 'fixed', 'backoffRatio', 'appLimitedFraction', 'slowStart'],
  vegas: ['smoothing', 'alpha', 'beta', 'threshold', 'decreaseRatio', 'probeMultiplier', 'seed', 'appLimitedFraction', 'slowStart']
}
const COMMON = new Set(['algorithm', 'initialLimit', 'minLimit', 'maxLimit', 'levels', 'weights', 'minWindowMs', 'maxWindowMs', 'windowRttMultiple', 'minSamples', 'activeMs'])

/** Refuses an option the chosen algorithm does not take (a silent no-op otherwise). */
function checkAlgorithmOptions (type, o) {
  const algorithm = o.algorithm || 'gradient'
  const allowed = ALGORITHM_OPTIONS[algorithm]
  for (const k of Object.keys(o)) {
    if (!COMMON.has(k) && !allowed.includes(k)) {
      throw v.typeErr(`${type}: option ${JSON.stringify(k)} does not apply to algorithm ${algorithm}`)
    }
  }
  return o
}

/** A release code from the fast path as an error (never expected through a Permit). */
function releaseFailure (r) {
  return r === -2
    ? new OverloadError('surgeguard: permit belongs to another object', 'SG_FOREIGN_HANDLE')
    : new OverloadError('surgeguard: permit already released', 'SG_ALREADY_RELEASED')
}

/** Ends a limiter permit (the permit's release hook; not reachable from outside). */
function releaseLimiter (owner, id, outcome, nowNs) {
  const r = nowNs === undefined ? F.limiterRelease(owner._h, id, outcome) : F.limiterRelease(owner._h, id, outcome, nowNs)
  if (r < 0) throw releaseFailure(r)
}

const NOW_OPTIONS = ['priority', 'nowNs']

/**
 * A concurrency limiter: admits work while in-flight is below an adaptive limit (exact,
 * lock-free, per-priority shares), learns the limit from completions.
 */
class Limiter {
  constructor (options, open, name) {
    const o = checkAlgorithmOptions('Limiter', v.options('Limiter', options, LIMITER_SPEC))
    this._n = call(() => open === OPEN ? N.NativeLimiter.openShared(name, o) : new N.NativeLimiter(o))
    this._h = this._n.handle()
    this._lv = new Levels(o.levels === undefined ? 3 : o.levels)
    this._rej = 0
    this._rejMs = 0
  }

  /** A permit, or `null` when the limit (or the level's share) is reached. Sync. */
  tryAcquire (opts) {
    if (this?._h === undefined) throw badThis('Limiter', 'tryAcquire')
    let lvl = this._lv.default
    let now
    if (opts !== undefined) {
      v.callOptions('tryAcquire', opts, NOW_OPTIONS)
      if (opts.priority !== undefined) lvl = this._lv.of(opts.priority)
      now = v.nowNs(opts.nowNs)
    }
    const r = now === undefined ? F.limiterAcquire(this._h, lvl) : F.limiterAcquire(this._h, lvl, now)
    if (r >= 0) return newPermit(this, releaseLimiter, r, lvl)
    if (r === TABLE_FULL) throw tableFull()
    this._rej = -r
    this._rejMs = F.lastRetryAfterMs()
    return null
  }

  /** The levels of this limiter (`levels.of(name)`, `levels.fromHeader(value)`). */
  get levels () {
    return this._lv
  }

  /** Why the last `tryAcquire` returned null: `{ reason, retryAfterMs }`, or null. */
  get lastRejection () {
    return this._rej === 0 ? null : { reason: reasonName(this._rej), retryAfterMs: this._rejMs }
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

  /** The kill switch: pin the limit to `limit`, or `null` to let it adapt again. */
  setStaticLimit (limit) {
    if (limit !== null) v.number('limit', limit)
    call(() => this._n.setStaticLimit(limit))
  }

  /** A snapshot of counters and gauges. */
  metrics () {
    return this._n.metrics()
  }

  /**
   * The limiter named `name` in shared memory (Linux): created by the first caller,
   * attached to by the others (every `cluster` worker, PM2 instance or worker thread that
   * opens the name shares one limit). `options` as the constructor's; a different config
   * under the same name throws `SG_SHM_REFUSED`. The file is `/dev/shm/surgeguard.<name>`,
   * or `name` itself if it contains a `/`.
   */
  static shared (name, options) {
    return new Limiter(options, OPEN, sharedName('Limiter.shared', name))
  }

  /** Whether it lives in shared memory. */
  get shared () {
    return this._n.isShared()
  }

  /** Shared: whether this object created the segment (false: attached). True in-process. */
  get created () {
    return this._n.created()
  }

  /**
   * Shared: process-table slots in use (each shared object that has acquired holds one,
   * per process or worker thread, until it is collected or its process dies). 1 in-process.
   */
  get attachedProcesses () {
    return this._n.attached()
  }

  /** Permits held through this object (shared: counted to this process's slot). */
  get heldHere () {
    return this._n.heldHere()
  }

  /**
   * Shared: gives back the permits of dead processes now (each exactly once, as ignored)
   * and returns how many. Also done on open and, at most every 100 ms, by an acquire
   * refused for want of a slot; call it from `cluster`'s `exit` event for a prompt return.
   * 0 in-process.
   */
  reclaim () {
    return this._n.reclaim()
  }
}

guard(Limiter, ['tryAcquire'])

module.exports = { Limiter, NOW_OPTIONS, limitValue, LIMITER_SPEC, ALGORITHMS, ALGORITHM_OPTIONS, checkAlgorithmOptions, releaseFailure }
