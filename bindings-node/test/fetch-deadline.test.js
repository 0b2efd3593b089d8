'use strict'
// The fetch wrapper under a deadline: outgoing headers (remaining minus the margin), fail
// fast below the expected latency (fixed or learned), abort at the deadline, retries only
// within the budget. Real loopback servers.
const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { setTimeout: sleep } = require('node:timers/promises')
const sg = require('..')

/** A server answering `status` after `delayMs`, recording each request's headers. */
async function server ({ status = 200, delayMs = 0 } = {}) {
  const seen = []
  const s = http.createServer((req, res) => {
    seen.push(req.headers)
    setTimeout(() => {
      res.writeHead(status)
      res.end(String(status))
    }, delayMs)
  })
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${s.address().port}/`,
    seen,
    set delayMs (ms) { delayMs = ms },
    close: () => new Promise((resolve) => { s.closeAllConnections(); s.close(resolve) })
  }
}

const quick = () => new sg.Backoff({ baseMs: 1, capMs: 5, jitter: 'none' })

test('fetch: sends the remaining budget minus the margin; nothing outside a deadline', async () => {
  const s = await server()
  try {
    const f = sg.createFetch({ deadlineMarginMs: 20, deadlineHeaders: ['surgeguard-timeout-ms', 'grpc-timeout', 'x-custom-ms'] })
    await f(s.url)
    assert.equal(s.seen[0]['surgeguard-timeout-ms'], undefined)
    assert.equal(s.seen[0]['grpc-timeout'], undefined)
    await sg.deadline.run(500, () => f(s.url, { headers: { 'x-app': '1' } }))
    const h = s.seen[1]
    const ms = Number(h['surgeguard-timeout-ms'])
    assert.ok(Number.isInteger(ms) && ms > 200 && ms <= 480, `surgeguard-timeout-ms ${ms}`)
    assert.ok(Number(h['x-custom-ms']) <= 480)
    const m = /^(\d{1,8})([HMSmun])$/.exec(h['grpc-timeout'])
    assert.ok(m, `grpc-timeout ${h['grpc-timeout']}`)
    const grpcMs = Number(m[1]) * { H: 3600000, M: 60000, S: 1000, m: 1, u: 1e-3, n: 1e-6 }[m[2]]
    assert.ok(grpcMs > 200 && grpcMs <= 480, `grpc-timeout ${h['grpc-timeout']}`)
    assert.equal(h['x-app'], '1', 'the caller\'s headers are kept')
    // A Request as input keeps its headers too.
    await sg.deadline.run(300, () => f(new Request(s.url, { headers: { 'x-req': 'r' } })))
    assert.equal(s.seen[2]['x-req'], 'r')
    assert.ok(Number(s.seen[2]['surgeguard-timeout-ms']) <= 280)
    // deadlines: false sends none.
    await sg.deadline.run(500, () => sg.createFetch({ deadlines: false })(s.url))
    assert.equal(s.seen[3]['surgeguard-timeout-ms'], undefined)
  } finally {
    await s.close()
  }
})

test('fetch: fails fast below the expected latency, sending nothing', async () => {
  const s = await server()
  try {
    const f = sg.createFetch({ expectedLatencyMs: 100, deadlineMarginMs: 5 })
    const before = sg.deadline.metrics().failedFast
    const err = await sg.deadline.run(50, () => f(s.url)).catch((e) => e)
    assert.ok(err instanceof sg.DeadlineTooShortError, String(err))
    assert.ok(err instanceof sg.DeadlineError && err instanceof sg.OverloadError)
    assert.equal(err.code, 'SG_DEADLINE_TOO_SHORT')
    assert.equal(err.expectedMs, 100)
    assert.ok(err.remainingMs <= 45)
    assert.equal(s.seen.length, 0, 'nothing was sent')
    assert.equal(sg.deadline.metrics().failedFast - before, 1)
    // Exhausted: nothing left after the margin, whatever the expected latency.
    const f0 = sg.createFetch({ expectedLatencyMs: 0, deadlineMarginMs: 50 })
    await assert.rejects(sg.deadline.run(40, () => f0(s.url)), (e) => e.code === 'SG_DEADLINE_TOO_SHORT')
    await assert.rejects(sg.deadline.run(0, () => f0(s.url)), (e) => e.code === 'SG_DEADLINE_TOO_SHORT')
    assert.equal(s.seen.length, 0)
    // Enough budget: sent.
    assert.equal((await sg.deadline.run(1000, () => f(s.url))).status, 200)
    assert.equal(s.seen.length, 1)
  } finally {
    await s.close()
  }
})

test('fetch: the expected latency is learned from answered calls', async () => {
  const s = await server({ delayMs: 40 })
  try {
    const f = sg.createFetch()
    // Before 5 samples only an exhausted budget fails fast: this one is sent (and aborted).
    await assert.rejects(sg.deadline.run(15, () => f(s.url)), (e) => e.code === 'SG_DEADLINE_EXCEEDED')
    for (let i = 0; i < 5; i++) assert.equal((await f(s.url)).status, 200)
    const sent = s.seen.length
    const err = await sg.deadline.run(25, () => f(s.url)).catch((e) => e)
    assert.equal(err.code, 'SG_DEADLINE_TOO_SHORT', String(err))
    assert.ok(err.expectedMs >= 35, `learned ${err.expectedMs}`)
    assert.equal(s.seen.length, sent)
    assert.equal((await sg.deadline.run(500, () => f(s.url))).status, 200)
  } finally {
    await s.close()
  }
})

test('fetch: a call still running at the deadline is aborted with DeadlineExceededError', async () => {
  const s = await server({ delayMs: 1000 })
  try {
    const f = sg.createFetch({ expectedLatencyMs: 0, backoff: quick() })
    const t0 = performance.now()
    const err = await sg.deadline.run(150, () => f(s.url)).catch((e) => e)
    const took = performance.now() - t0
    assert.ok(err instanceof sg.DeadlineExceededError, String(err))
    assert.equal(err.cause.name, 'TimeoutError')
    assert.ok(took < 800, `took ${took} ms`)
    await sleep(50)
    assert.ok(s.seen.length <= 1, 'not retried')
    // The caller's own signal still wins with its own reason.
    const ac = new AbortController()
    setTimeout(() => ac.abort(new Error('mine')), 10)
    await assert.rejects(sg.deadline.run(200, () => f(s.url, { signal: ac.signal })), /mine/)
  } finally {
    await s.close()
  }
})

test('fetch: retries stay within the remaining budget', async () => {
  const s = await server({ status: 503 })
  try {
    const opts = {
      budget: new sg.RetryBudget({ retryRatio: 100 }),
      backoff: new sg.Backoff({ baseMs: 100, multiplier: 1, capMs: 100, jitter: 'none' }),
      maxAttempts: 10,
      expectedLatencyMs: 0
    }
    // Without a deadline: every attempt.
    assert.equal((await sg.createFetch(opts)(s.url)).status, 503)
    assert.equal(s.seen.length, 10)
    // 350 ms of budget, 100 ms between attempts: at most 4 attempts fit (0, 100, 200, 300).
    const skipped = sg.deadline.metrics().retriesSkipped
    const t0 = performance.now()
    const res = await sg.deadline.run(350, () => sg.createFetch(opts)(s.url)).catch((e) => e)
    const took = performance.now() - t0
    const attempts = s.seen.length - 10
    assert.ok(attempts >= 1 && attempts <= 4, `${attempts} attempts`)
    if (res instanceof Error) {
      // On a loaded machine an attempt may still be running at the deadline: aborted there.
      assert.ok(res instanceof sg.DeadlineExceededError, String(res))
      assert.ok(took < 350 + 150, `took ${took} ms`)
    } else {
      assert.equal(res.status, 503, 'the last answer is returned')
      assert.equal(await res.text(), '503', 'with its body')
      // Sleeping past the deadline would end at 400 ms or later (the next 100 ms wait after
      // the attempt at 300 ms); under 400 leaves 50 ms for a loaded machine's scheduling.
      assert.ok(took < 400, `never slept past the deadline (took ${took} ms)`)
      assert.equal(sg.deadline.metrics().retriesSkipped - skipped, 1)
    }
  } finally {
    await s.close()
  }
})

test('createFetch: deadline options are checked', () => {
  const invalid = (e) => (e instanceof TypeError || e instanceof RangeError) && e.code === 'SG_INVALID_ARG'
  for (const bad of [{ deadlines: 1 }, { deadlineHeaders: 'x' }, { deadlineHeaders: ['bad header'] }, { deadlineHeaders: [5] },
    { deadlineMarginMs: -1 }, { deadlineMarginMs: NaN }, { expectedLatencyMs: 'soon' }, { expectedLatencyMs: -5 }]) {
    assert.throws(() => sg.createFetch(bad), invalid, JSON.stringify(bad))
  }
  sg.createFetch({ expectedLatencyMs: 'learned', deadlineHeaders: ['grpc-timeout'], deadlineMarginMs: 0 })
})

