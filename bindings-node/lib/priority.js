'use strict'
const { typeErr, rangeErr, show } = require('./validate')

/**
 * The default level names (the values of the `X-Request-Priority` header, as in the
 * criticality classes of the Google SRE book, "Handling Overload") and their indices.
 */
const PRIORITY = Object.freeze({ critical: 0, normal: 1, background: 2 })

/**
 * The levels of one limiter or gate: names map to indices clamped to `levels - 1`, the
 * default is `normal`.
 */
class Levels {
  constructor (levels) {
    this.count = levels
    // A Map, not a plain object: `constructor`, `__proto__` or `toString` (from a header
    // or a caller) must not find Object.prototype's members.
    this.names = new Map([
      ['critical', 0],
      ['normal', Math.min(1, levels - 1)],
      ['background', Math.min(2, levels - 1)]
    ])
    this.default = this.names.get('normal')
  }

  /** A priority (name or whole number below `count`) as a level index. */
  of (p) {
    if (!(this instanceof Levels)) throw badThis('Levels', 'of')
    if (p === undefined) return this.default
    if (typeof p === 'number') {
      if (Number.isInteger(p) && p >= 0 && p < this.count) return p
      throw rangeErr(`priority must be a whole number in [0, ${this.count - 1}] or a name (got ${show(p)})`)
    }
    if (typeof p === 'string') {
      const l = this.names.get(p)
      if (l !== undefined) return l
      throw rangeErr(`priority must be critical, normal or background, or a level number (got ${show(p)})`)
    }
    throw typeErr(`priority must be a name or a number (got ${show(p)})`)
  }

  /**
   * A priority from an HTTP header value: a name or a level number; anything else
   * (missing, garbage) is the default level, so a client cannot fail a request by
   * sending a bad header.
   */
  fromHeader (v) {
    if (!(this instanceof Levels)) throw badThis('Levels', 'fromHeader')
    if (typeof v !== 'string' || v === '') return this.default
    const s = v.trim().toLowerCase()
    const l = this.names.get(s)
    if (l !== undefined) return l
    if (/^[0-7]$/.test(s)) return Math.min(Number(s), this.count - 1)
    return this.default
  }

  /** The name of level `l` (`level3` for unnamed ones). */
  name (l) {
    if (typeof l !== 'number') throw typeErr(`level must be a number (got ${show(l)})`)
    if (!Number.isInteger(l) || l < 0 || l >= this.count) {
      throw rangeErr(`level must be a whole number in [0, ${this.count - 1}] (got ${show(l)})`)
    }
    if (l === 0) return 'critical'
    if (l === 1 && this.count > 2) return 'normal'
    if (l === this.count - 1 && this.count >= 2) return 'background'
    return 'level' + l
  }
}

const { guard, badThis } = require('./brand')
guard(Levels, ['of', 'fromHeader'])

module.exports = { PRIORITY, Levels }
