'use strict'
// Argument checks in the facade: wrong types are TypeErrors, NaN / infinite / negative /
// fractional / huge values RangeErrors, each naming the option; nothing is changed on
// failure. Semantic checks (min above max, ...) are the core's, surfaced as RangeErrors.

function typeErr (msg) {
  const e = new TypeError('surgeguard: ' + msg)
  e.code = 'SG_INVALID_ARG'
  return e
}

function rangeErr (msg) {
  const e = new RangeError('surgeguard: ' + msg)
  e.code = 'SG_INVALID_ARG'
  return e
}

function show (v) {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? v.slice(0, 40) + '…' : v)
  if (typeof v === 'bigint') return v + 'n'
  if (typeof v === 'number' || typeof v === 'boolean' || v == null) return String(v)
  return typeof v
}

/** A finite number. */
function number (what, v) {
  if (typeof v !== 'number') throw typeErr(`${what} must be a number (got ${show(v)})`)
  if (!Number.isFinite(v)) throw rangeErr(`${what} must be finite (got ${show(v)})`)
  return v
}

/** A finite number ≥ 0. */
function nonNegative (what, v) {
  number(what, v)
  if (v < 0) throw rangeErr(`${what} must not be negative (got ${show(v)})`)
  return v
}

/** A duration in milliseconds: finite, ≥ 0, at most ~285 years. */
function ms (what, v) {
  nonNegative(what, v)
  if (v > 9e12) throw rangeErr(`${what} is too large (got ${show(v)} ms)`)
  return v
}

/** A whole number in [lo, hi]. */
function int (what, v, lo = 0, hi = Number.MAX_SAFE_INTEGER) {
  number(what, v)
  if (!Number.isInteger(v)) throw rangeErr(`${what} must be a whole number (got ${show(v)})`)
  if (v < lo || v > hi) throw rangeErr(`${what} must be in [${lo}, ${hi}] (got ${show(v)})`)
  return v
}

function string (what, v) {
  if (typeof v !== 'string') throw typeErr(`${what} must be a string (got ${show(v)})`)
  return v
}

function bool (what, v) {
  if (typeof v !== 'boolean') throw typeErr(`${what} must be a boolean (got ${show(v)})`)
  return v
}

function fn (what, v) {
  if (typeof v !== 'function') throw typeErr(`${what} must be a function (got ${show(v)})`)
  return v
}

/**
 * The largest accepted `nowNs`: 2^62 ns (about 146 years of a monotonic clock). A larger
 * value is bad input, not a time, in every surgeguard binding.
 */
const MAX_NOW_NS = 1n << 62n

/** An optional BigInt timestamp (`nowNs`) in [0, 2^62]. */
function nowNs (v) {
  if (v === undefined) return undefined
  if (typeof v !== 'bigint') throw typeErr(`nowNs must be a bigint (got ${show(v)})`)
  if (v < 0n || v > MAX_NOW_NS) throw rangeErr(`nowNs must be in [0, 2^62] (got ${show(v)})`)
  return v
}

/**
 * Per-call options (`{ priority, nowNs, ... }`): undefined, or an object whose keys are all
 * in `keys` (an array); anything else is a TypeError naming `what`.
 */
function callOptions (what, o, keys) {
  if (o === undefined) return
  if (o === null || typeof o !== 'object' || Array.isArray(o)) {
    throw typeErr(`${what} options must be an object (got ${show(o)})`)
  }
  for (const k in o) {
    if (!keys.includes(k)) throw typeErr(`${what}: unknown option ${JSON.stringify(k)} (takes ${keys.join(', ')})`)
  }
}

const CHECKS = { number, nonNegative, ms, int, string, bool, fn }

/**
 * Checks an options object against `spec` ({ key: 'ms' | 'int' | 'number' | ... | fn }),
 * refusing unknown keys (typos), and returns a plain copy with the checked keys only.
 */
function options (type, o, spec) {
  if (o === undefined || o === null) return {}
  if (typeof o !== 'object' || Array.isArray(o)) throw typeErr(`${type} options must be an object (got ${show(o)})`)
  const out = {}
  for (const k of Object.keys(o)) {
    const v = o[k]
    // Own keys of the spec only: `constructor`, `__proto__`, `toString` are not options.
    if (!Object.hasOwn(spec, k)) throw typeErr(`${type}: unknown option ${JSON.stringify(k)}`)
    if (v === undefined) continue
    const check = spec[k]
    out[k] = typeof check === 'function' ? check(`${type}.${k}`, v) : CHECKS[check](`${type}.${k}`, v)
  }
  return out
}

/** A check accepting one of the given strings. */
function oneOf (...names) {
  return (what, v) => {
    if (typeof v !== 'string') throw typeErr(`${what} must be one of ${names.join(', ')} (got ${show(v)})`)
    if (!names.includes(v)) throw rangeErr(`${what} must be one of ${names.join(', ')} (got ${show(v)})`)
    return v
  }
}

/** A check accepting an array of finite numbers. */
function numbers (what, v) {
  if (!Array.isArray(v)) throw typeErr(`${what} must be an array of numbers (got ${show(v)})`)
  return v.map((x, i) => nonNegative(`${what}[${i}]`, x))
}

module.exports = { typeErr, rangeErr, show, number, nonNegative, ms, int, string, bool, fn, nowNs, MAX_NOW_NS, callOptions, options, oneOf, numbers }
