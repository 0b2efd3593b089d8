'use strict'
const N = require('./native')

/** Every reason name, in wire order: `REASONS[code - 1]`. */
const REASONS = Object.freeze(N.reasonNames())

/**
 * Every `code` a surgeguard error carries, native or JS layer alike:
 * - `SG_INVALID_ARG`: a bad argument or option (a `TypeError` for a wrong type, a
 *   `RangeError` for a value out of range, `nowNs` above 2^62 included);
 * - `SG_REJECTED`: a refusal (`RejectedError`);
 * - `SG_ALREADY_RELEASED`, `SG_FOREIGN_HANDLE`, `SG_UNKNOWN_TICKET`, `SG_BAD_LEVEL`,
 *   `SG_USAGE`: misuse of a permit or ticket (`OverloadError`);
 * - `SG_DEADLINE_TOO_SHORT`, `SG_DEADLINE_EXCEEDED`: the caller's deadline does not cover
 *   the call (`DeadlineTooShortError`, `DeadlineExceededError`, both `DeadlineError`s);
 * - `SG_SHM_REFUSED`: a shared object's name holds one of another config, kind, layout or
 *   version (`OverloadError`; nothing was created or changed);
 * - `SG_SHM_UNAVAILABLE`: shared memory could not be used (a system call failed, every
 *   process slot is taken, or not Linux) (`OverloadError`).
 */
const ERROR_CODES = Object.freeze([
  'SG_INVALID_ARG', 'SG_REJECTED', 'SG_ALREADY_RELEASED', 'SG_FOREIGN_HANDLE',
  'SG_UNKNOWN_TICKET', 'SG_BAD_LEVEL', 'SG_USAGE', 'SG_DEADLINE_TOO_SHORT', 'SG_DEADLINE_EXCEEDED',
  'SG_SHM_REFUSED', 'SG_SHM_UNAVAILABLE'
])

/**
 * The base of every error surgeguard throws on purpose, except argument errors (those are
 * `TypeError`/`RangeError` with code `SG_INVALID_ARG`). `code` is one of `ERROR_CODES`.
 */
class OverloadError extends Error {
  constructor (message, code, options) {
    super(message, options)
    this.name = 'OverloadError'
    this.code = code
  }
}

/**
 * A refusal: `reason` is the core's reason name (`limit_reached`, `queue_full`, `shed`,
 * `expired`, `breaker_open`, `budget_exhausted`, `key_limit`, ...), `retryAfterMs` says
 * when trying again could succeed.
 */
class RejectedError extends OverloadError {
  constructor (reason, retryAfterMs, message) {
    super(message || `surgeguard: rejected (${reason}); retry after ${Math.ceil(retryAfterMs)} ms`, 'SG_REJECTED')
    this.name = 'RejectedError'
    this.reason = reason
    this.retryAfterMs = retryAfterMs
  }
}

/** The reason name of a fast-path refusal code (`-r`). */
function reasonName (code) {
  return REASONS[code - 1] || 'unknown'
}

function alreadyReleased () {
  return new OverloadError('surgeguard: permit already released', 'SG_ALREADY_RELEASED')
}

/** Maps an error thrown by a native cold call to a TypeError/RangeError/OverloadError. */
function mapNative (err) {
  if (!err || typeof err.message !== 'string') return err
  const code = err.code
  if (code === 'SG_INVALID_ARG' && (err instanceof TypeError || err instanceof RangeError)) return err
  // Config errors arrive with the options' own spelling (the addon's table, fields.rs).
  const msg = 'surgeguard: ' + err.message
  if (code === 'InvalidArg') {
    const e = new RangeError(msg)
    e.code = 'SG_INVALID_ARG'
    return e
  }
  if (typeof code === 'string' && /Expected$/.test(code)) {
    const e = new TypeError(msg)
    e.code = 'SG_INVALID_ARG'
    return e
  }
  const m = /^(SG_[A-Z_]+): /.exec(err.message)
  if (m) return new OverloadError('surgeguard: ' + err.message.slice(m[0].length), m[1])
  return err
}

/** Runs a native cold call, mapping its errors. */
function call (fn) {
  try {
    return fn()
  } catch (err) {
    throw mapNative(err)
  }
}

module.exports = { ERROR_CODES, OverloadError, RejectedError, REASONS, reasonName, alreadyReleased, mapNative, call }
