'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

const S = 1_000_000_000n

test('Credits: a producer never takes more than was granted', () => {
  const c = new sg.Credits({ capacity: 4, lowWater: 1 })
  assert.equal(c.available, 0)
  assert.equal(c.tryTake(), false)
  assert.equal(c.lastRejection.reason, 'no_credit')
  assert.equal(c.replenish(), 4)
  assert.equal(c.takeUpTo(10), 4)
  assert.equal(c.isStalled, true)
  c.complete(3)
  assert.equal(c.replenish(), 3)
  assert.throws(() => c.complete(10), (e) => e instanceof sg.OverloadError)
  assert.throws(() => c.tryTake(-1), RangeError)
  assert.equal(c.metrics().taken, 4)
})

test('LagMeter: lag in seconds and time to drain (lag ÷ net drain rate)', () => {
  const m = new sg.LagMeter()
  m.observeTotals(3_600_000, 0, 0n)
  for (let s = 1; s <= 60; s++) m.observeTotals(3_600_000 + 1000 * s, 1200 * s, BigInt(s) * S)
  const now = 61n * S
  assert.equal(m.lag(now), 3_588_000)
  assert.equal(m.consumeRate(now), 1200)
  assert.equal(m.lagTimeMs(now), 2990 * 1000)
  assert.equal(m.timeToDrainMs(now), 17_940 * 1000)
  assert.equal(m.timeToDrainExceeds(4 * 3600 * 1000, now), true)
  assert.equal(m.metrics(now).ratesKnown, true)
  assert.throws(() => m.recordProduced(-1), RangeError)
})

test('Watermarks: pause and resume with hysteresis', () => {
  const w = new sg.Watermarks({ capacity: 100, pauseBelow: 10, resumeAbove: 50 })
  assert.equal(w.observe(50, S), null)
  assert.equal(w.observe(95, S), 'pause')
  assert.equal(w.isPaused, true)
  assert.equal(w.observe(60, S), null)
  assert.equal(w.observe(40, 2n * S), 'resume')
  assert.equal(w.metrics(2n * S).pauses, 1)
  assert.throws(() => new sg.Watermarks({ capacity: 10, pauseBelow: 5, resumeAbove: 4 }), RangeError)
})
