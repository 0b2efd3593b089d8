'use strict'
const { alreadyReleased } = require('./errors')
const v = require('./validate')

/** Outcome names → wire values. A Map, so `toString` or `constructor` is not an outcome. */
const OUTCOMES = new Map([['success', 0], ['dropped', 1], ['ignore', 2], ['ignored', 2]])

/** Only this module's `newPermit` holds it: `new Permit(...)` from outside is refused. */
const TOKEN = Symbol('surgeguard.Permit')

let endPermit
let isPermit

function notPermit () {
  return v.typeErr('not a Permit (permits come from tryAcquire(), acquire() or run())')
}

/**
 * An admission. End it exactly once with `success()` (a latency sample), `dropped()`
 * (an overload signal: timeout, 429/503 from below) or `ignore()` (not a capacity
 * signal: a 4xx, the caller went away). A second end throws `SG_ALREADY_RELEASED` and
 * changes nothing; a bad argument throws before anything changes, and the permit can
 * still be ended. Permits are not garbage-collected back: end them in `finally`.
 *
 * Permits cannot be built by callers: the constructor needs a module-private token, and
 * the owner and id live in private fields, so a permit can end only the admission it was
 * issued for.
 */
class Permit {
  #owner
  #release
  #id

  constructor (token, owner, release, id, level) {
    if (token !== TOKEN) {
      throw v.typeErr('Permit has no public constructor: permits come from tryAcquire(), acquire() or run()')
    }
    this.#owner = owner
    this.#release = release
    this.#id = id
    /** The level it was admitted at (0 = most important). */
    this.priority = level
  }

  /** Completed: its latency is a sample for the limit algorithm. */
  success (nowNs) {
    if (!isPermit(this)) throw notPermit()
    this.#end(0, nowNs)
  }

  /** An overload signal: every limit algorithm backs off. */
  dropped (nowNs) {
    if (!isPermit(this)) throw notPermit()
    this.#end(1, nowNs)
  }

  /** Not a capacity signal: the slot returns, no sample. */
  ignore (nowNs) {
    if (!isPermit(this)) throw notPermit()
    this.#end(2, nowNs)
  }

  /** Ends the permit with an outcome name: `success`, `dropped` or `ignore`. */
  release (outcome = 'success', nowNs) {
    if (!isPermit(this)) throw notPermit()
    if (typeof outcome !== 'string') throw v.typeErr(`outcome must be a string (got ${v.show(outcome)})`)
    const o = OUTCOMES.get(outcome)
    if (o === undefined) throw v.rangeErr(`outcome must be success, dropped or ignore (got ${v.show(outcome)})`)
    this.#end(o, nowNs)
  }

  /** Whether it has been ended. */
  get released () {
    if (!isPermit(this)) throw notPermit()
    return this.#id < 0
  }

  #end (outcome, nowNs) {
    const id = this.#id
    if (id < 0) throw alreadyReleased()
    // Every argument is checked before the permit is marked: a bad `nowNs` throws and
    // leaves it held (and endable).
    if (nowNs !== undefined) v.nowNs(nowNs)
    this.#id = -1
    this.#release(this.#owner, id, outcome, nowNs)
  }

  /** Ends it as `ignore` if still held (for TypeScript `using`; Node 20 has no `using`). */
  [Symbol.dispose] () {
    if (!isPermit(this)) throw notPermit()
    if (this.#id >= 0) this.ignore()
  }

  static {
    endPermit = (p, outcome) => p.#end(outcome, undefined)
    isPermit = (x) => x !== null && typeof x === 'object' && #id in x
  }
}

/**
 * A permit for admission `id` of `owner`, ended through `release(owner, id, outcome,
 * nowNs)`.
 */
function newPermit (owner, release, id, level) {
  return new Permit(TOKEN, owner, release, id, level)
}

module.exports = { Permit, OUTCOMES, newPermit, endPermit }
