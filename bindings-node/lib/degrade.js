'use strict'
// Graceful degradation: a fallback for refusals and deadlines, the last good value when the
// origin refuses or fails (stale-if-error, RFC 5861's name), and optional work dimmed by the
// gate's brownout value (Klein et al., "Brownout: building more robust cloud
// applications", ICSE 2014). Bugs are never hidden behind a fallback: only refusals,
// deadlines (and, for stale-if-error, failures of the origin) are degraded.
const v = require('./validate')
const { OverloadError, RejectedError } = require('./errors')
const { Gate } = require('./gate')
const D = require('./deadline')
const { guard, badThis } = require('./brand')

/** The `Warning` a response carries when a handler served a stale value (RFC 7234 §5.5.1). */
const STALE_WARNING = '110 - "Response is Stale"'

/** Error classes that mean a bug or bad input, never a capacity problem. */
const BUGS = [TypeError, RangeError, ReferenceError, SyntaxError, EvalError, URIError]

/**
 * Whether `err` is a refusal or a deadline, which a fallback may answer: a `RejectedError`
 * (the gate's or limiter's refusals, an open breaker, an empty retry budget, a rate or key
 * limit), a `DeadlineError` (too short, exceeded), or a `TimeoutError` (an
 * `AbortSignal.timeout` firing). Never a usage error, a TypeError/RangeError from bad
 * input, or any other exception.
 */
function isDegradable (err) {
  if (err instanceof RejectedError || err instanceof D.DeadlineError) return true
  return err !== null && typeof err === 'object' && err.name === 'TimeoutError' && !(err instanceof TypeError || err instanceof RangeError)
}

/**
 * Whether `err` is a failure of the origin a stale value may answer: anything degradable,
 * and any other error that is not a bug (a network error, a rejected 5xx the caller threw).
 * Bugs are JS's own error classes (TypeError, RangeError, ...) and surgeguard's usage
 * errors, except undici's `TypeError('fetch failed')`, which is how fetch reports a network
 * error.
 */
function isFailure (err) {
  if (isDegradable(err)) return true
  if (err === null || typeof err !== 'object') return false
  if (err instanceof TypeError && err.message === 'fetch failed' && err.cause !== undefined) return true
  if (BUGS.some((C) => err instanceof C)) return false
  if (err instanceof OverloadError) return false // a usage error (a refusal is degradable above)
  if (err.name === 'AbortError') return false // the caller cancelled: nobody to answer
  return true
}

/** The value of a fallback: a function's result (given the error), or the value itself. */
function fallbackValue (fallback, err) {
  return typeof fallback === 'function' ? fallback(err) : fallback
}

/**
 * Runs `fn()`; when it throws or rejects with a refusal or a deadline (`isDegradable`, or
 * `options.on(err)` if given), resolves to `fallback` instead: `fallback(err)` if it is a
 * function, else the value itself (a precomputed default). Any other error propagates.
 * Always returns a Promise.
 */
function withFallback (fn, options) {
  let on
  let fallback
  try {
    v.fn('withFallback: fn', fn)
    if (options === null || typeof options !== 'object' || Array.isArray(options) || !Object.hasOwn(options, 'fallback')) {
      throw v.typeErr('withFallback needs { fallback } (a value or a function of the error)')
    }
    const o = v.options('withFallback', options, { fallback: (w, x) => x, on: 'fn' })
    on = o.on || isDegradable
    fallback = options.fallback
  } catch (err) {
    return Promise.reject(err)
  }
  const handle = (err) => {
    if (!on(err)) throw err
    return fallbackValue(fallback, err)
  }
  try {
    return Promise.resolve(fn()).catch(handle)
  } catch (err) {
    try {
      return Promise.resolve(handle(err))
    } catch (e) {
      return Promise.reject(e)
    }
  }
}

/** Marks the current request's response stale (a `Warning` header), if there is one. */
function markStale () {
  const s = D.scope()
  if (s === undefined) return
  s.stale = true
  const res = s.res
  if (res !== undefined && !res.headersSent && typeof res.setHeader === 'function') res.setHeader('warning', STALE_WARNING)
}

/**
 * Stale-if-error: the last good value per key, served when the origin refuses or fails.
 * `get(key, fn)` calls `fn()`; on success it stores the value and resolves to
 * `{ value, stale: false }`; on a failure (`isFailure`, or `options.isFailure`) with a value
 * stored less than `maxAgeMs` ago it resolves to `{ value, stale: true, ageMs, error }`
 * and, inside a middleware, adds `Warning: 110 - "Response is Stale"` to the response;
 * otherwise it rejects with the error (bugs always propagate).
 *
 * Bounded: at most `maxEntries` keys (default 1000), least recently used evicted first; a
 * value older than `maxAgeMs` (default 5 minutes) is never served and is dropped when
 * seen. Its own memory is O(maxEntries) (a Map entry, a timestamp and a reference per key);
 * the values themselves are the caller's, so keep them small or count them in maxEntries.
 */
class StaleIfError {
  constructor (options) {
    const o = v.options('StaleIfError', options, {
      maxEntries: (w, x) => v.int(w, x, 1, 2 ** 24),
      maxAgeMs: 'ms',
      isFailure: 'fn'
    })
    this._max = o.maxEntries === undefined ? 1000 : o.maxEntries
    this._maxAgeMs = o.maxAgeMs === undefined ? 300000 : o.maxAgeMs
    this._isFailure = o.isFailure || isFailure
    /** key → { value, at (performance.now() ms) }, in least-recently-used order. */
    this._map = new Map()
    this._served = 0
    this._stale = 0
    this._misses = 0
    this._evicted = 0
  }

  /** Calls `fn()` and remembers its value under `key`, or serves the last good one on failure. */
  get (key, fn) {
    if (!(this instanceof StaleIfError) || this._map === undefined) return Promise.reject(badThis('StaleIfError', 'get'))
    try {
      v.string('StaleIfError.get: key', key)
      v.fn('StaleIfError.get: fn', fn)
    } catch (err) {
      return Promise.reject(err)
    }
    let p
    try {
      p = Promise.resolve(fn())
    } catch (err) {
      p = Promise.reject(err)
    }
    return p.then((value) => {
      this.set(key, value)
      this._served++
      return { value, stale: false }
    }, (err) => {
      if (!this._isFailure(err)) throw err
      const e = this._entry(key)
      if (e === undefined) {
        this._misses++
        throw err
      }
      this._stale++
      markStale()
      return { value: e.value, stale: true, ageMs: performance.now() - e.at, error: err }
    })
  }

  /** Stores `value` as the last good value of `key` (most recently used). */
  set (key, value) {
    v.string('StaleIfError.set: key', key)
    this._map.delete(key)
    this._map.set(key, { value, at: performance.now() })
    if (this._map.size > this._max) {
      this._map.delete(this._map.keys().next().value)
      this._evicted++
    }
  }

  /** The stored entry of `key` if younger than maxAgeMs (touching it), else undefined. */
  _entry (key) {
    const e = this._map.get(key)
    if (e === undefined) return undefined
    this._map.delete(key)
    if (performance.now() - e.at > this._maxAgeMs) {
      this._evicted++
      return undefined
    }
    this._map.set(key, e)
    return e
  }

  /** Drops `key`'s value; true if there was one. */
  delete (key) {
    return this._map.delete(v.string('StaleIfError.delete: key', key))
  }

  get size () {
    return this._map.size
  }

  /** `fresh` (origin answered), `stale` (served stale), `misses` (failed, nothing to serve), `evicted`, `entries`. */
  metrics () {
    return { fresh: this._served, stale: this._stale, misses: this._misses, evicted: this._evicted, entries: this._map.size }
  }
}

/**
 * Optional work under a brownout dimmer: `enabled()` is true with probability
 * `1 − gate.brownout()` (drawn from `random`, default `Math.random`, so a seeded source
 * makes it deterministic); `run(fn, fallback)` runs `fn` when enabled, else resolves to the
 * fallback without calling `fn`. Degradation order: optional features dim first (the
 * dimmer rises before the gate sheds), then background, then normal work (the gate's own
 * refusals), critical last.
 */
class Optional {
  constructor (gate, options) {
    if (!(gate instanceof Gate)) throw v.typeErr(`optional needs a surgeguard Gate (got ${v.show(gate)})`)
    const o = v.options('optional', options, { random: 'fn' })
    this._gate = gate
    this._random = o.random || Math.random
    this._served = 0
    this._dimmed = 0
  }

  /** Whether to do the optional work now (probability 1 − the gate's dimmer value). */
  enabled () {
    const d = this._gate.brownout()
    const r = this._random()
    if (typeof r !== 'number' || !(r >= 0 && r < 1)) throw v.rangeErr(`optional: random() must return a number in [0, 1) (got ${v.show(r)})`)
    if (r >= d) {
      this._served++
      return true
    }
    this._dimmed++
    return false
  }

  /** Runs `fn()` if enabled, else resolves to `fallback` (a value, or a function called instead). */
  run (fn, fallback) {
    try {
      v.fn('optional.run: fn', fn)
      if (!this.enabled()) return Promise.resolve(fallbackValue(fallback))
      return Promise.resolve(fn())
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** `{ served, dimmed }`: optional work done and left out. */
  metrics () {
    return { served: this._served, dimmed: this._dimmed }
  }
}

/** `optional(gate, { random })` → an `Optional` over the gate's brownout dimmer. */
function optional (gate, options) {
  return new Optional(gate, options)
}

guard(StaleIfError, ['get'])
guard(Optional)

module.exports = { isDegradable, isFailure, withFallback, StaleIfError, Optional, optional, STALE_WARNING, markStale }
