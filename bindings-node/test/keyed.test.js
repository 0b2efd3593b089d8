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

test('long keys are hashed whole: a multibyte char across byte 255, keys past 256 bytes', () => {
  const seed = 7
  const hex = (key) => sg.hashKey(key, BigInt(seed)).toString(16).padStart(16, '0')
  // 254 ASCII bytes then 'é' (2 bytes): the char crosses byte 255, where a 256-byte copy
  // buffer stops short, at 254 bytes.
  const base = 'k'.repeat(254) + 'é'
  const keys = [
    base + 'ü'.repeat(20) + 'a', // ~300 bytes
    base + 'ü'.repeat(20) + 'b', // differs from the first only after byte 255
    'k'.repeat(253) + '€x', // a 3-byte char across byte 255
    'k'.repeat(252) + '😀', // a 4-byte char ending at byte 256
    'k'.repeat(255), // exactly the stack buffer's room
    'k'.repeat(256),
    'ü'.repeat(5000) // far beyond the stack buffer
  ]
  assert.notEqual(hex(keys[0]), hex(keys[1]))
  // The hot path (keyedAcquire) hashes each key like hashKey (the napi String path): a
  // refused key shows in topKeys under its own hash, with its text.
  for (const key of keys) {
    const k = new sg.KeyedLimits({ shards: 64, shardsPerKey: 1, shardLimit: 1, seed })
    const p = k.tryAcquire(key)
    assert.ok(p)
    assert.equal(k.tryAcquire(key), null)
    const top = k.metrics().topKeys
    assert.equal(top.length, 1)
    assert.equal(top[0].keyHash, hex(key), `key of ${Buffer.byteLength(key)} bytes`)
    assert.equal(top[0].key, key)
    p.release()
  }
  // Two keys differing only after byte 255 are two keys: one filling its shards leaves
  // the other's free (their shards are checked to differ first).
  const k = new sg.KeyedLimits({ shards: 64, shardsPerKey: 2, shardLimit: 1, seed })
  const a = k.shardsOf(keys[0])
  assert.ok(k.shardsOf(keys[1]).some((s) => !a.includes(s)))
  const held = [k.tryAcquire(keys[0]), k.tryAcquire(keys[0])]
  assert.ok(held.every((p) => p !== null))
  assert.equal(k.tryAcquire(keys[0]), null)
  const other = k.tryAcquire(keys[1])
  assert.ok(other, 'the second key is not taken for the first')
  other.release()
  for (const p of held) p.release()
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
