'use strict'
const N = require('./native')
const { call } = require('./errors')
const v = require('./validate')
const { guard } = require('./brand')

const count = (w, x) => v.int(w, x, 0, 2 ** 32 - 1)
const big = (w, x) => v.int(w, x)

/**
 * Credit-based flow control (Reactive Streams rule 1.1, Flink credits): a producer never
 * sends more than the consumer granted; credit is topped up in batches at `lowWater`.
 */
class Credits {
  constructor (options) {
    const o = v.options('Credits', options, { capacity: count, lowWater: count })
    this._n = call(() => new N.NativeCredits(o))
    this.lastRejection = null
  }

  /** Takes `k` credits (default 1): true if taken, false (nothing taken) otherwise. */
  tryTake (k = 1) {
    const r = call(() => this._n.tryTake(count('k', k)))
    if (r == null) return true
    this.lastRejection = r
    return false
  }

  takeUpTo (k) {
    return call(() => this._n.takeUpTo(count('k', k)))
  }

  /** The consumer finished `k` buffered items (default 1). */
  complete (k = 1) {
    call(() => this._n.complete(count('k', k)))
  }

  grant (n) {
    return call(() => this._n.grant(count('n', n)))
  }

  get grantDue () {
    return this._n.grantDue()
  }

  /** Tops credit back up to capacity once it fell to the low-water mark. */
  replenish () {
    return this._n.replenish()
  }

  get available () {
    return this._n.available()
  }

  get buffered () {
    return this._n.buffered()
  }

  get outstanding () {
    return this._n.outstanding()
  }

  get isStalled () {
    return this._n.isStalled()
  }

  metrics () {
    return this._n.metrics()
  }
}

/**
 * Consumer lag in seconds and time to drain (lag ÷ (consume rate − produce rate), as Kafka
 * lag exporters such as Burrow report it), with 1-minute rates by default.
 */
class LagMeter {
  constructor (options) {
    const o = v.options('LagMeter', options, { bucketMs: 'ms' })
    this._n = call(() => new N.NativeLagMeter(o))
  }

  recordProduced (n = 1, nowNs) {
    call(() => this._n.recordProduced(big('n', n), v.nowNs(nowNs)))
  }

  recordConsumed (n = 1, nowNs) {
    call(() => this._n.recordConsumed(big('n', n), v.nowNs(nowNs)))
  }

  /** Absolute totals (a log-end offset and a committed offset). */
  observeTotals (produced, consumed, nowNs) {
    call(() => this._n.observeTotals(big('produced', produced), big('consumed', consumed), v.nowNs(nowNs)))
  }

  /** The enqueue time (`nowNs()` clock) of the oldest unprocessed item, or null. */
  reportOldest (enqueuedAtNs, nowNs) {
    const at = enqueuedAtNs === null || enqueuedAtNs === undefined ? undefined : v.nowNs(enqueuedAtNs)
    call(() => this._n.reportOldest(at, v.nowNs(nowNs)))
  }

  lag (nowNs) {
    return call(() => this._n.lag(v.nowNs(nowNs)))
  }

  produceRate (nowNs) {
    return call(() => this._n.produceRate(v.nowNs(nowNs)))
  }

  consumeRate (nowNs) {
    return call(() => this._n.consumeRate(v.nowNs(nowNs)))
  }

  lagTimeMs (nowNs) {
    return call(() => this._n.lagTimeMs(v.nowNs(nowNs)))
  }

  timeToDrainMs (nowNs) {
    return call(() => this._n.timeToDrainMs(v.nowNs(nowNs)))
  }

  timeToDrainExceeds (limitMs, nowNs) {
    return call(() => this._n.timeToDrainExceeds(v.ms('limitMs', limitMs), v.nowNs(nowNs)))
  }

  oldestAgeMs (nowNs) {
    return call(() => this._n.oldestAgeMs(v.nowNs(nowNs)))
  }

  metrics (nowNs) {
    return call(() => this._n.metrics(v.nowNs(nowNs)))
  }
}

/** Kafka-style pause/resume with hysteresis on free capacity. */
class Watermarks {
  constructor (options) {
    const o = v.options('Watermarks', options, { capacity: big, pauseBelow: big, resumeAbove: big })
    this._n = call(() => new N.NativeWatermarks(o))
  }

  /** Observes the level: `'pause'`, `'resume'` or null (no change). */
  observe (level, nowNs) {
    return call(() => this._n.observe(big('level', level), v.nowNs(nowNs)))
  }

  get isPaused () {
    return this._n.isPaused()
  }

  metrics (nowNs) {
    return call(() => this._n.metrics(v.nowNs(nowNs)))
  }
}

for (const C of [Credits, LagMeter, Watermarks]) guard(C)

module.exports = { Credits, LagMeter, Watermarks }
