'use strict'
const N = require('./native')
const { F } = N
const { call, reasonName, OverloadError } = require('./errors')
const v = require('./validate')
const { guard, badThis } = require('./brand')
const { OPEN, sharedName, tableFull } = require('./shared')

/** `keyedAcquire`'s code for a shared table whose process table is full. */
const TABLE_FULL = -64

/** Only this module can build a KeyPermit. */
const TOKEN = Symbol('surgeguard.KeyPermit')
let isKeyPermit

function notKeyPermit () {
  return v.typeErr('not a KeyPermit (key permits come from KeyedLimits.tryAcquire())')
}

/**
 * A per-key permit: end it with `release()` exactly once. Not constructible by callers
 * (a module-private token; owner and id in private fields).
 */
class KeyPermit {
  #owner
  #id

  constructor (token, owner, id, key) {
    if (token !== TOKEN) {
      throw v.typeErr('KeyPermit has no public constructor: key permits come from KeyedLimits.tryAcquire()')
    }
    this.#owner = owner
    this.#id = id
    this.key = key
  }

  release () {
    if (!isKeyPermit(this)) throw notKeyPermit()
    const id = this.#id
    if (id < 0) throw new OverloadError('surgeguard: key permit already released', 'SG_ALREADY_RELEASED')
    this.#id = -1
    if (F.keyedRelease(this.#owner._h, id) === -2) {
      // Shared: its process was taken for dead and the permit was given back already.
      throw new OverloadError('surgeguard: key permit already given back (its process was reclaimed)', 'SG_ALREADY_RELEASED')
    }
  }

  get released () {
    if (!isKeyPermit(this)) throw notKeyPermit()
    return this.#id < 0
  }

  [Symbol.dispose] () {
    if (!isKeyPermit(this)) throw notKeyPermit()
    if (this.#id >= 0) this.release()
  }

  static {
    isKeyPermit = (x) => x !== null && typeof x === 'object' && #id in x
  }
}

/**
 * Per-key (tenant, API key, agent) concurrency caps and rate limits in a fixed,
 * shuffle-sharded table: one noisy key fills only its own shards (shuffle sharding, as in AWS's
 * "Workload isolation using shuffle-sharding").
 */
class KeyedLimits {
  constructor (options, open, name) {
    if (options === undefined || options === null || options.shardLimit === undefined) {
      throw v.typeErr('KeyedLimits needs { shardLimit }')
    }
    const o = v.options('KeyedLimits', options, {
      shards: (w, x) => v.int(w, x, 1, 1024),
      shardsPerKey: (w, x) => v.int(w, x, 1, 8),
      shardLimit: (w, x) => v.int(w, x, 1, 2 ** 30),
      limitRetryAfterMs: 'ms',
      seed: (w, x) => v.int(w, x),
      ratePerSecond: 'number',
      rateBurst: (w, x) => v.int(w, x, 1, 1e9)
    })
    this._n = call(() => (open === OPEN ? N.NativeKeyedLimits.openShared(name, o) : new N.NativeKeyedLimits(o)))
    this._h = this._n.handle()
    this.lastRejection = null
  }

  /**
   * A permit for `key` (its string is hashed with the table's seed by the core's
   * `hash_key`), or null: `lastRejection` then says `key_limit` or `key_rate` and when.
   */
  tryAcquire (key, cost = 1, nowNs) {
    if (this?._h === undefined) throw badThis('KeyedLimits', 'tryAcquire')
    const r = nowNs === undefined ? F.keyedAcquire(this._h, key, cost) : F.keyedAcquire(this._h, key, cost, nowNs)
    if (r >= 0) return new KeyPermit(TOKEN, this, r, key)
    if (r === TABLE_FULL) throw tableFull()
    this.lastRejection = { reason: reasonName(-r), retryAfterMs: F.lastRetryAfterMs() }
    this._n.noteRefused(key)
    return null
  }

  /** Records a refusal of `key` made elsewhere (e.g. the global gate) for `topKeys`. */
  recordRejection (key) {
    return this._n.recordRejection(v.string('key', key))
  }

  /** The most permits one key can hold. */
  get keyLimit () {
    return this._n.keyLimit()
  }

  shardsOf (key) {
    return this._n.shardsOf(v.string('key', key))
  }

  isolation () {
    return this._n.isolation()
  }

  get livePermits () {
    return this._n.livePermits()
  }

  metrics () {
    return this._n.metrics()
  }

  /**
   * The table named `name` in shared memory (Linux): one set of per-key caps across every
   * `cluster` worker, PM2 instance or worker thread that opens the name. `options` as the
   * constructor's; a different config under the same name throws `SG_SHM_REFUSED`. Keys
   * are hashed with a seed drawn when the segment was created (the same in every
   * process). A dead worker's key permits come back (each once) on `reclaim()`, on open,
   * and at most every 100 ms on a refusal for want of a slot.
   */
  static shared (name, options) {
    return new KeyedLimits(options, OPEN, sharedName('KeyedLimits.shared', name))
  }

  /** Whether it lives in shared memory. */
  get shared () {
    return this._n.isShared()
  }

  /** Shared: whether this object created the segment (false: attached). True in-process. */
  get created () {
    return this._n.created()
  }

  /** Shared: process-table slots in use. 1 in-process. */
  get attachedProcesses () {
    return this._n.attached()
  }

  /** Shared: gives back the key permits of dead processes now; how many. 0 in-process. */
  reclaim () {
    return this._n.reclaim()
  }
}

/** `hash_key(seed, utf8(key))`: the same 64-bit value in every binding. */
function hashKey (key, seed = 0n) {
  v.string('key', key)
  if (typeof seed === 'number') seed = BigInt(v.int('seed', seed))
  if (typeof seed !== 'bigint') throw v.typeErr('seed must be a bigint or a whole number')
  return call(() => N.hashKey(seed, key))
}

/**
 * What an HTTP edge answers for a refusal: `{ status (429 per key | 503 global),
 * retryAfterS, reason, error, body }` — the body is the core's JSON, byte-identical in
 * every binding.
 */
function actionable (rejection) {
  if (rejection === null || typeof rejection !== 'object') throw v.typeErr('actionable needs { reason, retryAfterMs }')
  const reason = v.string('reason', rejection.reason)
  const ms = v.ms('retryAfterMs', rejection.retryAfterMs === undefined ? 0 : rejection.retryAfterMs)
  return call(() => N.actionable(reason, ms))
}

/** The shuffle-sharding isolation math for `k` of `n` shards, or null. */
function isolation (n, k) {
  return call(() => N.isolation(v.int('n', n, 0, 2 ** 32 - 1), v.int('k', k, 0, 2 ** 32 - 1)))
}

guard(KeyedLimits, ['tryAcquire'])

module.exports = { KeyedLimits, KeyPermit, hashKey, actionable, isolation }
