'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const sg = require('..')

test('KeyedLimits: a key is capped at shardsPerKey × shardLimit; others are unaffected', () => {
  const k = new sg.KeyedLimits({ shards: 64, shardsPerKey: 2, shardLimit: 2 })
  assert.equal(k.keyLimit, 4)
  const held = []
  let p
  while ((p = k.tryAcquire('noisy')) !== null) held.push(p)
  assert.equal(held.length, 4)
  assert.equal(k.lastRejection.reason, 'key_limit')
  assert.ok(k.lastRejection.retryAfterMs > 0)
  // Another key sharing both shards is rare (1 / C(64, 2)); most keys still get in.
  let admitted = 0
  for (let i = 0; i < 50; i++) {
    const q = k.tryAcquire('tenant-' + i)
    if (q) {
      admitted++
      q.release()
    }
  }
  assert.ok(admitted >= 48, `admitted ${admitted}`)
  for (const h of held) h.release()
  assert.throws(() => held[0].release(), { code: 'SG_ALREADY_RELEASED' })
  assert.equal(k.livePermits, 0)
  const m = k.metrics()
  assert.equal(m.inFlight, 0)
  assert.ok(m.rejectedKeyLimit >= 1)
  assert.equal(m.topKeys[0].key, 'noisy')
  assert.throws(() => k.tryAcquire(42), TypeError)
})

test('KeyedLimits with a per-shard rate refuses with key_rate', () => {
  const k = new sg.KeyedLimits({ shardLimit: 100, shardsPerKey: 1, ratePerSecond: 10, rateBurst: 2 })
  const t = 5_000_000_000n
  assert.ok(k.tryAcquire('a', 1, t))
  assert.ok(k.tryAcquire('a', 1, t))
  assert.equal(k.tryAcquire('a', 1, t), null)
  assert.equal(k.lastRejection.reason, 'key_rate')
  assert.equal(k.lastRejection.retryAfterMs, 100)
  assert.throws(() => new sg.KeyedLimits({ shardLimit: 1, shards: 100 }), RangeError)
  assert.throws(() => new sg.KeyedLimits({ shardLimit: 0 }), RangeError)
  assert.throws(() => new sg.KeyedLimits({}), TypeError)
})

test('hashKey is deterministic and seeded', () => {
  assert.equal(sg.hashKey('tenant-a', 1n), sg.hashKey('tenant-a', 1n))
  assert.notEqual(sg.hashKey('tenant-a', 1n), sg.hashKey('tenant-b', 1n))
  assert.notEqual(sg.hashKey('tenant-a', 1n), sg.hashKey('tenant-a', 2n))
  assert.equal(typeof sg.hashKey('x'), 'bigint')
  const long = 'k'.repeat(1000)
  assert.equal(sg.hashKey(long, 3n), sg.hashKey(long, 3))
  assert.throws(() => sg.hashKey(5), TypeError)
})

test('actionable: 429 per key, 503 global, the core JSON body', () => {
  const a = sg.actionable({ reason: 'key_rate', retryAfterMs: 29_400 })
  assert.equal(a.status, 429)
  assert.equal(a.retryAfterS, 30)
  assert.equal(a.body, '{"error": "too many requests", "reason": "key_rate", "retry_after_s": 30, "retry": "not before retry_after_s"}')
  assert.deepEqual(JSON.parse(a.body).reason, 'key_rate')
  const g = sg.actionable({ reason: 'queue_full', retryAfterMs: 0 })
  assert.equal(g.status, 503)
  assert.equal(g.retryAfterS, 1)
  assert.throws(() => sg.actionable({ reason: 'nope', retryAfterMs: 1 }), RangeError)
  const iso = sg.isolation(64, 2)
  assert.ok(iso.unaffected > 0.999)
  assert.equal(sg.isolation(4, 5), null)
})

test('REASONS lists the core reasons in wire order', () => {
  assert.equal(sg.REASONS[0], 'limit_reached')
  assert.ok(sg.REASONS.includes('key_limit'))
})
