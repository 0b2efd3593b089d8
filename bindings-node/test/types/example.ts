// A typed example of the public API; `npm run typecheck` runs `tsc --noEmit` over it.
import * as sg from '../..'
import {
  Gate, Limiter, RejectedError, OverloadError, CircuitBreaker, RetryBudget, Backoff,
  KeyedLimits, createFetch, renderPrometheus, type Permit, type Priority, type Rejection
} from '../..'

const gate = new Gate({ algorithm: 'gradient', initialLimit: 20, maxWaitMs: 500, aging: { from: 'normal', to: 'background', afterMs: 500 } })

function handle (priority: Priority): boolean {
  const permit: Permit | null = gate.tryAcquire({ priority })
  if (permit === null) {
    const why: Rejection | null = gate.lastRejection
    return why !== null && why.retryAfterMs >= 0
  }
  try {
    return true
  } finally {
    permit.success()
  }
}

async function queued (signal: AbortSignal): Promise<number> {
  try {
    const p = await gate.acquire({ priority: 'critical', timeoutMs: 100, signal })
    p.release('dropped')
    return p.priority
  } catch (err) {
    if (err instanceof RejectedError) return err.retryAfterMs
    if (err instanceof OverloadError) return err.code.length
    throw err
  }
}

async function run (): Promise<string> {
  const n: number = await gate.run(async (permit) => permit.priority + 1, { priority: 0 })
  const breaker = new CircuitBreaker({ windowCalls: 20, minimumCalls: 10, openMs: 30_000 })
  const s: string = await breaker.run(async (x: number) => String(x + n), 1)
  return s
}

const limiter = new Limiter({ algorithm: 'aimd', targetLatencyMs: 50, levels: 2 })
const lp = limiter.tryAcquire({ priority: 1, nowNs: sg.nowNs() })
lp?.ignore()
limiter.setStaticLimit(null)

const budget = new RetryBudget({ percentCanRetry: 0.1 })
budget.deposit()
const mayRetry: boolean = budget.tryWithdraw()
const delay: number = new Backoff({ jitter: 'decorrelated' }).nextDelayMs(1, 250)

const keyed = new KeyedLimits({ shardLimit: 4, ratePerSecond: 50, rateBurst: 10 })
const kp = keyed.tryAcquire('tenant-a')
kp?.release()
const body: string = sg.actionable({ reason: 'key_limit', retryAfterMs: 1000 }).body

const fetchWithRetries = createFetch({ budget, backoff: { baseMs: 50 }, maxAttempts: 3 })
const text: string = renderPrometheus({ api: gate, budget, keyed })
const hash: bigint = sg.hashKey('tenant-a', 42n)

const mw = sg.express({ gate, keyed, key: 'x-tenant-id', timeoutMs: 200, readinessRoute: '/ready' })
const ready = sg.readiness(gate, { overloadedStatus: 503 })

export { handle, queued, run, mayRetry, delay, body, fetchWithRetries, text, hash, mw, ready }

// The error codes are one typed set.
const codes: readonly sg.ErrorCode[] = sg.ERROR_CODES
const budgetRatio = new RetryBudget({ retryRatio: 2 })
void codes
void budgetRatio

// Deadlines and degradation.
const left: number | undefined = sg.deadline.remaining()
const at: bigint | undefined = sg.deadline.current()
const scoped: Promise<number> = sg.deadline.run(250, async (x: number) => x + (sg.deadline.remaining() ?? 0), 1)
const until: string = sg.deadline.runUntil(sg.nowNs() + 1_000_000n, () => 'ok')
const parsed = sg.deadline.parseHeaders({ 'grpc-timeout': '250m' }, 'x-my-timeout-ms')
const firstIgnored: sg.IgnoreReason | undefined = parsed.ignored[0]?.reason
const ignoredMalformed: number = sg.deadline.metrics().ignoredByReason.malformed
const deadlineSignal: AbortSignal | undefined = sg.deadline.signal()
const outHeaders: Record<string, string> = sg.deadline.headers({ marginMs: 10, names: ['grpc-timeout'] })
const withDeadlines = createFetch({ deadlineHeaders: ['surgeguard-timeout-ms', 'grpc-timeout'], deadlineMarginMs: 10, expectedLatencyMs: 'learned' })
const mwDeadlines = sg.express({ gate, deadlineHeader: 'x-my-timeout-ms', defaultBudgetMs: 2000, timeoutMs: 5000 })
const inner: Promise<Permit> = gate.acquire({ deadlineNs: sg.deadline.current(), priority: 'normal' })

async function degrade (): Promise<string> {
  try {
    await withDeadlines('http://dep/')
  } catch (err) {
    if (err instanceof sg.DeadlineTooShortError) return `${err.code} ${err.remainingMs} ${err.expectedMs ?? 0}`
    if (err instanceof sg.DeadlineError) return err.code
  }
  const v: string | number = await sg.withFallback(async () => 'live', { fallback: 0 })
  const w: string = await sg.withFallback(() => 'live', { fallback: (err: unknown) => String(sg.isDegradable(err)) })
  const cache = new sg.StaleIfError({ maxEntries: 100, maxAgeMs: 60_000 })
  const r = await cache.get('k', async () => ({ price: 1 }))
  const price: number = r.value.price
  if (r.stale) void r.ageMs
  const opt = sg.optional(gate, { random: Math.random })
  const extra: string[] = await opt.run(async () => ['a'], [] as string[])
  return `${v} ${w} ${price} ${extra.length} ${opt.enabled()} ${sg.STALE_WARNING}`
}

function sharedObjects (): number {
  const db: sg.Limiter = sg.Limiter.shared('myservice-db', { algorithm: 'fixed', initialLimit: 2, levels: 1 })
  const rate: sg.RateLimiter = sg.RateLimiter.shared('myservice-rate', { perSecond: 50, burst: 10 })
  const budget: sg.RetryBudget = sg.RetryBudget.shared('myservice-retries', { percentCanRetry: 0.2 })
  const flags: boolean[] = [db.shared, db.created, rate.shared, budget.shared]
  const p = db.tryAcquire()
  p?.success()
  const code: sg.ErrorCode = 'SG_SHM_REFUSED'
  const removed: boolean = sg.unlinkShared('myservice-db')
  return db.reclaim() + db.attachedProcesses + db.heldHere + flags.length + code.length + Number(removed)
}

async function sharedGate (): Promise<number> {
  const gate: sg.Gate = sg.Gate.shared('myservice-gate', { algorithm: 'fixed', initialLimit: 4, queueCapacity: 64 })
  const keyed: sg.KeyedLimits = sg.KeyedLimits.shared('myservice-keys', { shardLimit: 2 })
  const p = await gate.acquire({ timeoutMs: 100, signal: AbortSignal.timeout(200) })
  p.success()
  const mw = sg.express({ gate: sg.Limiter.shared('myservice-db', { algorithm: 'fixed', initialLimit: 2 }), keyed, key: 'x-tenant-id' })
  const flags: boolean[] = [gate.shared, gate.created, keyed.shared, keyed.created, typeof mw === 'function']
  return gate.reclaim() + gate.attachedProcesses + gate.heldHere + keyed.reclaim() + keyed.attachedProcesses + flags.length
}

export { sharedObjects, sharedGate, left, at, scoped, until, outHeaders, firstIgnored, ignoredMalformed, deadlineSignal, mwDeadlines, inner, degrade }
