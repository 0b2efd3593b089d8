'use strict'
const { alreadyReleased } = require('./errors')
const { typeErr, rangeErr, show } = require('./validate')

const OUTCOMES = { success: 0, dropped: 1, ignore: 2, ignored: 2 }

/**
 * An admission. End it exactly once with `success()` (a latency sample), `dropped()`
 * (an overload signal: timeout, 429/503 from below) or `ignore()` (not a capacity
 * signal: a 4xx, the caller went away). A second end throws `SG_ALREADY_RELEASED` and
 * changes nothing. Permits are not garbage-collected back: end them in `finally`.
 */
class Permit {
  constructor (owner, id, level) {
    this._o = owner
    this._id = id
    /** The level it was admitted at (0 = most important). */
    this.priority = level
  }

  /** Completed: its latency is a sample for the limit algorithm. */
  success (nowNs) {
    this._end(0, nowNs)
  }

  /** An overload signal: every limit algorithm backs off. */
  dropped (nowNs) {
    this._end(1, nowNs)
  }

  /** Not a capacity signal: the slot returns, no sample. */
  ignore (nowNs) {
    this._end(2, nowNs)
  }

  /** Ends the permit with an outcome name: `success`, `dropped` or `ignore`. */
  release (outcome = 'success', nowNs) {
    const o = OUTCOMES[outcome]
    if (o === undefined) {
      if (typeof outcome !== 'string') throw typeErr(`outcome must be a string (got ${show(outcome)})`)
      throw rangeErr(`outcome must be success, dropped or ignore (got ${show(outcome)})`)
    }
    this._end(o, nowNs)
  }

  /** Whether it has been ended. */
  get released () {
    return this._id < 0
  }

  _end (outcome, nowNs) {
    const id = this._id
    if (id < 0) throw alreadyReleased()
    this._id = -1
    this._o._release(id, outcome, nowNs)
  }

  /** Ends it as `ignore` if still held (for TypeScript `using`; Node 20 has no `using`). */
  [Symbol.dispose] () {
    if (this._id >= 0) this.ignore()
  }
}

module.exports = { Permit, OUTCOMES }
