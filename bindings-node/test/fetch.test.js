'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const sg = require('..')
const { parseRetryAfter } = require('../lib/fetch')

/** A server that answers each request with the next scripted status. */
async function scripted (statuses, headers = {}) {
  const seen = []
  const server = http.createServer((req, res) => {
    seen.push(req.method)
    const status = statuses[Math.min(seen.length - 1, statuses.length - 1)]
    res.writeHead(status, status === 200 ? {} : headers)
    res.end(String(status))
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    seen,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r) })
  }
}

const quick = () => new sg.Backoff({ baseMs: 1, capMs: 5, jitter: 'none' })

test('retries an idempotent request on 503 and honours Retry-After', async () => {
  const s = await scripted([503, 503, 200], { 'retry-after': '0' })
  try {
    const f = sg.createFetch({ backoff: quick() })
    const res = await f(s.url)
    assert.equal(res.status, 200)
    assert.deepEqual(s.seen, ['GET', 'GET', 'GET'])
  } finally {
    await s.close()
  }
})

test('does not retry a POST unless it carries an Idempotency-Key', async () => {
  const s = await scripted([503, 503, 200])
  try {
    const f = sg.createFetch({ backoff: quick() })
    assert.equal((await f(s.url, { method: 'POST', body: 'x' })).status, 503)
    assert.equal(s.seen.length, 1)
    const r = await f(s.url, { method: 'POST', body: 'x', headers: { 'Idempotency-Key': 'k1' } })
    assert.equal(r.status, 200)
    assert.equal(s.seen.length, 3)
  } finally {
    await s.close()
  }
})

test('the retry budget bounds retries; maxAttempts bounds one call', async () => {
  const s = await scripted([503])
  try {
    const budget = new sg.RetryBudget({ minRetriesPerSec: 0, percentCanRetry: 0.5 })
    const f = sg.createFetch({ budget, backoff: quick(), maxAttempts: 5 })
    for (let i = 0; i < 4; i++) assert.equal((await f(s.url)).status, 503)
    // 4 requests fund 2 retries: 6 attempts, not 4 × 5 = 20.
    assert.equal(s.seen.length, 6)
    assert.equal(budget.metrics().retriesDenied >= 1, true)
  } finally {
    await s.close()
  }
})

test('a Retry-After beyond maxRetryAfterMs returns the response instead of waiting', async () => {
  const s = await scripted([429, 200], { 'retry-after': '120' })
  try {
    const f = sg.createFetch({ backoff: quick(), maxRetryAfterMs: 1000 })
    const r = await f(s.url)
    assert.equal(r.status, 429)
    assert.equal(s.seen.length, 1)
  } finally {
    await s.close()
  }
})

test('AbortSignal stops the retries', async () => {
  const s = await scripted([503], { 'retry-after': '1' })
  try {
    const f = sg.createFetch({ backoff: quick() })
    const ac = new AbortController()
    const p = f(s.url, { signal: ac.signal })
    // Abort during the Retry-After wait: once the first attempt has been answered (a fixed
    // 50 ms could pass before it even arrives on a loaded machine).
    const t0 = Date.now()
    while (s.seen.length === 0 && Date.now() - t0 < 5000) await new Promise((resolve) => setTimeout(resolve, 5))
    await new Promise((resolve) => setTimeout(resolve, 20))
    ac.abort()
    await assert.rejects(p, (e) => e.name === 'AbortError')
    assert.equal(s.seen.length, 1)
  } finally {
    await s.close()
  }
})

test('network errors are retried for idempotent requests; a breaker refuses locally', async () => {
  let calls = 0
  const failing = async () => {
    calls++
    throw new TypeError('fetch failed')
  }
  const f = sg.createFetch({ fetch: failing, backoff: quick(), maxAttempts: 3 })
  await assert.rejects(f('http://127.0.0.1:1/'), /fetch failed/)
  assert.equal(calls, 3)
  const breaker = new sg.CircuitBreaker({ windowCalls: 2, minimumCalls: 2, openMs: 60000 })
  const g = sg.createFetch({ fetch: failing, backoff: quick(), maxAttempts: 1, breaker })
  await assert.rejects(g('http://x/'))
  await assert.rejects(g('http://x/'))
  await assert.rejects(g('http://x/'), (e) => e instanceof sg.RejectedError && e.reason === 'breaker_open')
  assert.equal(calls, 5)
  assert.throws(() => sg.createFetch({ maxAttempts: 0 }), RangeError)
  assert.throws(() => sg.createFetch({ breaker: {} }), TypeError)
})

test('parseRetryAfter: seconds or an HTTP date', () => {
  assert.equal(parseRetryAfter('3'), 3000)
  assert.equal(parseRetryAfter(new Date(Date.UTC(2030, 0, 1, 0, 0, 10)).toUTCString(), Date.UTC(2030, 0, 1)), 10000)
  assert.equal(parseRetryAfter('soon'), undefined)
  assert.equal(parseRetryAfter(null), undefined)
})
