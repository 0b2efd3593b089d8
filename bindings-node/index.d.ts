// Type definitions for surgeguard (Node). Hand-written; the native loader's generated
// types (native/binding.d.ts) are internal.
//
// Units: durations are milliseconds (number); `nowNs` is an optional bigint of
// nanoseconds on the binding's monotonic clock (`nowNs()`), for deterministic tests.

/// <reference types="node" />

/** A priority: a default level name or a level number (0 = most important). */
export type Priority = 'critical' | 'normal' | 'background' | number

/** Why something was refused (the core's reason names). */
export type Reason =
  | 'limit_reached' | 'queue_full' | 'evicted' | 'deadline_unmeetable' | 'expired'
  | 'codel_slough' | 'shed' | 'breaker_open' | 'budget_exhausted' | 'throttled'
  | 'rate_limited' | 'key_limit' | 'key_rate' | 'cancelled' | 'no_credit'

/** How admitted work ended. */
export type Outcome = 'success' | 'dropped' | 'ignore'

export interface Rejection {
  reason: Reason
  retryAfterMs: number
}

export declare const REASONS: readonly Reason[]
export declare const PRIORITY: Readonly<{ critical: 0, normal: 1, background: 2 }>
export declare const ALGORITHMS: readonly Algorithm[]

/** The binding's monotonic clock, ns. */
export declare function nowNs (): bigint

/**
 * Removes the name of a shared object (`Limiter.shared` and the others): processes
 * attached keep theirs, the next opener creates a new one. Whether the name existed.
 * Names only: a path (containing `/`) is a RangeError; remove such a segment with `fs.unlinkSync`.
 */
export declare function unlinkShared (name: string): boolean

/** The native addon's version, e.g. "0.1.0" (equals the package's). */
export declare const version: string

/**
 * Every `code` a surgeguard error carries. Argument errors are `TypeError` (wrong type) or
 * `RangeError` (out of range, `nowNs` above 2^62 included) with `SG_INVALID_ARG`; misuse of
 * a permit or ticket is an `OverloadError`; refusals are `RejectedError`s (`SG_REJECTED`).
 */
export type ErrorCode =
  | 'SG_INVALID_ARG' | 'SG_REJECTED' | 'SG_ALREADY_RELEASED' | 'SG_FOREIGN_HANDLE'
  | 'SG_UNKNOWN_TICKET' | 'SG_BAD_LEVEL' | 'SG_USAGE'
  | 'SG_DEADLINE_TOO_SHORT' | 'SG_DEADLINE_EXCEEDED'
  | 'SG_SHM_REFUSED' | 'SG_SHM_UNAVAILABLE'
export declare const ERROR_CODES: readonly ErrorCode[]

/** Every error surgeguard throws on purpose except argument errors; `code` is stable (`SG_*`). */
export declare class OverloadError extends Error {
  readonly code: ErrorCode
}

/** A refusal (`code` is `SG_REJECTED`). */
export declare class RejectedError extends OverloadError {
  readonly code: 'SG_REJECTED'
  readonly reason: Reason
  readonly retryAfterMs: number
}

/**
 * The caller's deadline does not cover the call: `SG_DEADLINE_TOO_SHORT` (refused before
 * anything was sent) or `SG_DEADLINE_EXCEEDED` (aborted at the deadline).
 */
export declare class DeadlineError extends OverloadError {
  readonly code: 'SG_DEADLINE_TOO_SHORT' | 'SG_DEADLINE_EXCEEDED'
  /** Budget left when it was decided, ms (after the margin; 0 when none). */
  readonly remainingMs: number
  /** The latency the call needs (fixed or learned), ms, if known. */
  readonly expectedMs: number | undefined
}

/** Too little budget left to start the call: failed fast, nothing was sent. */
export declare class DeadlineTooShortError extends DeadlineError {
  readonly code: 'SG_DEADLINE_TOO_SHORT'
}

/** The budget ran out while the call was in flight; `cause` is the abort error. */
export declare class DeadlineExceededError extends DeadlineError {
  readonly code: 'SG_DEADLINE_EXCEEDED'
}

/**
 * An admission: end it exactly once (in `finally`). A second end throws
 * `OverloadError` with code `SG_ALREADY_RELEASED` and changes nothing; a bad argument
 * throws before anything changes. Only the binding creates permits (`new Permit()` is a
 * TypeError), so a permit can end only its own admission.
 */
export declare class Permit {
  private constructor ()
  /** The level it was admitted at. */
  readonly priority: number
  readonly released: boolean
  /** Completed: its latency is a sample. */
  success (nowNs?: bigint): void
  /** An overload signal (timeout, 429/503 from below). */
  dropped (nowNs?: bigint): void
  /** Not a capacity signal (4xx, caller went away). */
  ignore (nowNs?: bigint): void
  release (outcome?: Outcome, nowNs?: bigint): void
  [Symbol.dispose] (): void
}

export type Algorithm = 'fixed' | 'aimd' | 'hysteresis' | 'gradient' | 'gradient2' | 'vegas'

export interface LimiterOptions {
  /** Default `gradient`. */
  algorithm?: Algorithm
  // The algorithms' settings (refused when the chosen algorithm does not take them).
  // Where algorithms share an option its default is the chosen algorithm's, listed by name.
  /** The limit before any window, between minLimit and maxLimit (defaults: gradient 20, fixed 20, aimd 10, hysteresis 20, gradient2 20, vegas 20). */
  initialLimit?: number
  /** Floor, may be below 1 (default 1 for every algorithm). */
  minLimit?: number
  /** Ceiling (defaults: gradient 1000, fixed 1000, aimd 200, hysteresis 1000, gradient2 1000, vegas 1000). */
  maxLimit?: number
  /** Priority levels, 1..8 (default 3). */
  levels?: number
  /** Share per level: the most a level may hold back while active (its recent peak demand plus one slot, at most this; default 0.7 / 0.25 / 0.05). */
  weights?: number[]
  /** A window is at least this long (default 100 ms). */
  minWindowMs?: number
  /** ... and at most this long (default 1 s). */
  maxWindowMs?: number
  /** Window length = this × the previous window's smallest latency (default 2). */
  windowRttMultiple?: number
  /** A window closes only with this many samples, or a drop (default 10). */
  minSamples?: number
  /** A level is active while it saw an arrival within this long (default 1 s). */
  activeMs?: number
  /** aimd: a window below this latency grows the limit by 1, one above backs off; hysteresis: the latency the zones are measured against (default 50 ms for both). */
  targetLatencyMs?: number
  /** aimd: the latency compared with the target, 0 = the mean, or exactly 0.5, 0.9 or 0.99 (default 0). */
  latencyPercentile?: number
  /** aimd, gradient2 (its fixed mode): the factor applied on overload, in [0.5, 1) (default 0.9 for both). */
  backoffRatio?: number
  /** aimd: a window whose latency exceeds this counts as a drop (default 5 s). */
  timeoutMs?: number
  /** aimd, hysteresis, gradient2, vegas: no growth while the window's most in flight is below this × limit; 0 = off (default 0.5 for each). */
  appLimitedFraction?: number
  /** Grow the limit per uncongested window until the first congestion signal (defaults: gradient true, aimd false, hysteresis false, gradient2 false, vegas false). */
  slowStart?: boolean
  /** aimd: reproduce Netflix concurrency-limits' AIMDLimit exactly, whole-number limits (default false). */
  netflixParity?: boolean
  /** hysteresis: healthy while the rolling p99 is below this × target (default 0.8). */
  healthyBelow?: number
  /** hysteresis: critical once the rolling p99 is above this × target (default 1.5). */
  criticalAbove?: number
  /** hysteresis: the factor of a critical event, in (0, 1) (default 0.5). */
  criticalFactor?: number
  /** hysteresis: a jump is a rise of the average latency by more than this fraction within jumpWindowMs (default 0.2). */
  jumpRise?: number
  /** hysteresis: the look-back of jump detection (default 2 s). */
  jumpWindowMs?: number
  /** hysteresis: the factor applied on a jump, in (0, 1) (default 0.8). */
  jumpFactor?: number
  /** hysteresis: EWMA weight of each completion in the average latency, in (0, 1] (default 0.1). */
  avgAlpha?: number
  /** hysteresis: no additive increase for this long after a critical event (default 5 s). */
  coolOffMs?: number
  /** hysteresis: the horizon of the rolling p99 (default 10 s). */
  p99WindowMs?: number
  /** gradient: latency allowance over the baseline, in [0, 10] (default 0.1). */
  buffer?: number
  /** Multiplier of the sqrt(limit · gradient) headroom, in [0, 10] (default 0.8). */
  headroom?: number
  /** Fraction of each step applied; gradient: in [0.01, 1], gradient2 and vegas: in (0, 1], 1 = no smoothing (defaults: gradient 0.3, gradient2 0.2, vegas 1). */
  smoothing?: number
  /** The window latency percentile used as the sample, in [50, 99] (default 50). */
  samplePercentile?: number
  /** Min-RTT re-measurement interval (at least 1 ms); 0 = probe-free baseline (default 0). */
  probeIntervalMs?: number
  /** Probe start jitter, in [0, 1] (default 0.15). */
  probeJitter?: number
  /** The limit pinned during a probe (default 3). */
  probeLimit?: number
  /** Samples that end a probe (default 50). */
  probeSamples?: number
  /** A fixed baseline; 0 = off (default 0). */
  pinnedBaselineMs?: number
  /** Back-off on a window whose drops exceed dropTolerance, in [0.1, 1]; 1 = ignore drops (default 0.9). */
  backoff?: number
  /** Share of a window's outcomes that may be drops without a back-off, in [0, 0.999] (default 0.01). */
  dropTolerance?: number
  /** No growth while the window's most in flight is below this × limit; 0 = off (default 0.6). */
  appLimitedRatio?: number
  /** Seed of the probe jitter (defaults: gradient 0x5EED5EED5EED5EED, vegas 0). */
  seed?: number
  /** gradient2: the queue allowance added each window, in [0, 1e6] (default 4). */
  queueSize?: number
  /** gradient2: windows in the long-term RTT average, in [1, 1e6] (default 600). */
  longWindow?: number
  /** gradient2: how far the short RTT may exceed the long one before the limit shrinks, in [1, 1000] (default 1.5). */
  rttTolerance?: number
  /** gradient2: drops back off and the allowance needs a gradient of 0.9; false = Netflix parity (default true). */
  fixed?: boolean
  /** vegas: queue size under which the limit grows, at most beta (default: Netflix's 3·log10(limit)). */
  alpha?: number
  /** vegas: queue size above which the limit shrinks (default: Netflix's 6·log10(limit)). */
  beta?: number
  /** vegas: queue size at or under which the limit grows by beta at once (default: log10(limit)). */
  threshold?: number
  /** vegas: the decrease limit × this, in (0, 1) (default: Netflix's limit − log10(limit)). */
  decreaseRatio?: number
  /** vegas: re-measure the no-load RTT every jitter × this × limit windows; 0 = never (default 30). */
  probeMultiplier?: number
}

export interface LimiterMetrics {
  algorithm: string
  limit: number
  staticLimit?: number
  inflight: number
  levels: number
  inflightByLevel: number[]
  shareByLevel: number[]
  demandByLevel: number[]
  admitted: number
  rejected: number
  rejectedByLevel: number[]
  successes: number
  drops: number
  ignored: number
  windows: number
  foldedSamples: number
  minRttMs: number
  avgRttMs: number
  p99RttMs: number
}

/** Per-call options; any other key is a TypeError. */
export interface AcquireNowOptions {
  priority?: Priority
  /** Injected time, ns, in [0, 2^62] (for deterministic tests); default the native clock. */
  nowNs?: bigint
}

/** An exact, lock-free, priority-aware adaptive concurrency limiter. */
export declare class Limiter {
  constructor (options?: LimiterOptions)
  /**
   * The limiter named `name` in shared memory (Linux): created by the first caller,
   * attached to by the others, so every `cluster` worker, PM2 instance or worker thread
   * opening the name shares one limit. `name`: 1 to 200 characters of `[A-Za-z0-9._-]`
   * (the file `/dev/shm/surgeguard.<name>`) or a path containing `/`. Another config under
   * the name throws `SG_SHM_REFUSED`; a bad name a `RangeError` (`SG_INVALID_ARG`). The
   * permits of a process that dies come back (on open, on `reclaim()`, and within 100 ms
   * of the first acquire they cause to be refused).
   */
  static shared (name: string, options?: LimiterOptions): Limiter
  /** Whether it lives in shared memory. */
  readonly shared: boolean
  /** Shared: whether this object created the segment (false: attached). True in-process. */
  readonly created: boolean
  /** Shared: process-table slots in use (each shared object that has acquired holds one, per process or worker thread, until collected or dead). 1 in-process. */
  readonly attachedProcesses: number
  /** Permits held through this object (shared: counted to this process). */
  readonly heldHere: number
  /** Shared: gives back dead processes' permits now; how many. 0 in-process. */
  reclaim (): number
  /** The levels of this limiter. */
  readonly levels: Levels
  /** A permit or null (sync). */
  tryAcquire (options?: AcquireNowOptions): Permit | null
  readonly lastRejection: Rejection | null
  readonly limit: number
  readonly inflight: number
  readonly livePermits: number
  /** The kill switch: pin the limit, or null to let it adapt. */
  setStaticLimit (limit: number | null): void
  metrics (): LimiterMetrics
}

export type Classify = (err: unknown) => Outcome

export interface GateOptions extends LimiterOptions {
  /** Waiters held at most, 1..4096 (default 1024). */
  queueCapacity?: number
  /** CoDel per level (default true: folly 5 ms / 100 ms, raised to half and five times the dependency's uncongested call time when calls take over 10 ms). */
  codel?: boolean
  /** Acceptable standing queueing delay, below codelIntervalMs (default 5 ms). */
  codelTargetMs?: number
  /** Window over which the minimum delay is judged (default 100 ms). */
  codelIntervalMs?: number
  /** The drop rule (default folly). */
  codelMode?: 'folly' | 'rfc8289'
  /** `codel`, `never`, or an occupancy fraction in (0, 1] (default codel). */
  lifo?: 'codel' | 'never' | number
  /**
   * The longest any waiter of this gate stays queued (queueing time only); default none.
   * Compare `timeoutMs` of `acquire`/`run`/the middleware: a per-request deadline.
   */
  maxWaitMs?: number
  /** Aging: waiters of `from` queued longer than `afterMs` move to level `to` (default false: no aging; all three are required when given). */
  aging?: { from: Priority, to: Priority, afterMs: number }
  /** Expected service time before any sample; 0 = unknown until the first success (default 0). */
  initialServiceMs?: number
  /** EWMA weight of each success latency in the service-time estimate, in (0, 1] (default 0.1). */
  serviceAlpha?: number
  /** retryAfterMs when nothing better is known (default 1 s). */
  fallbackRetryAfterMs?: number
  /** Outcome of work that threw inside `run` (default: dropped for overload/timeouts, else ignore). */
  classify?: Classify
}

export interface AcquireOptions extends AcquireNowOptions {
  /**
   * A deadline for this request, ms from now, covering its wait AND its expected service
   * time (the gate's running estimate): refused at once (`deadline_unmeetable`) or while
   * queued (`expired`) when it could not finish in time. 0 = no wait at all.
   */
  timeoutMs?: number
  /**
   * An absolute deadline, ns on the `nowNs()` clock (e.g. `deadline.current()`), with the
   * same effect as `timeoutMs`; with both, the earlier holds.
   */
  deadlineNs?: bigint
  /** Aborting cancels the ticket; the Promise rejects with the signal's reason. */
  signal?: AbortSignal
}

export interface RunOptions extends AcquireOptions {
  classify?: Classify
}

export interface CodelMetrics {
  minDelayMs: number
  overloaded: boolean
  load: number
  drops: number
  intervals: number
}

export interface GateMetrics {
  state: 'healthy' | 'overloaded'
  waitingByLevel: number[]
  waiting: number
  capacity: number
  oldestAgeMs: number
  queued: number
  granted: number
  expired: number
  sloughed: number
  evicted: number
  cancelled: number
  shed: number
  queueFull: number
  deadlineUnmeetable: number
  aged: number
  lifoSwitches: number
  lifoLevels: number
  shedLevel?: number
  serviceMs: number
  codel: CodelMetrics[]
  limiter: LimiterMetrics
}

export interface Levels {
  readonly count: number
  readonly default: number
  of (priority?: Priority): number
  fromHeader (value: string | undefined): number
  name (level: number): string
}

/** Limiter + bounded priority admission queue + shed switch. */
export declare class Gate {
  constructor (options?: GateOptions)
  /** A permit now or null; never queues (sync); with `deadlineNs`, refused if it cannot be met. */
  tryAcquire (options?: AcquireNowOptions & { deadlineNs?: bigint }): Permit | null
  readonly lastRejection: Rejection | null
  /** A permit, waiting in the queue if needed; rejects with RejectedError or the abort reason. */
  acquire (options?: AcquireOptions): Promise<Permit>
  /** Runs `fn` under a permit and records its outcome. */
  run<T> (fn: (permit: Permit) => T | PromiseLike<T>, options?: RunOptions): Promise<T>
  /** The on-call switch: refuse every level ≥ `priority`; null (only null) turns it off. */
  setShedLevel (priority: Priority | null): void
  readonly shedLevel: number | null
  /** The brownout dimmer in [0, 1]: serve optional content with probability `1 - d` (0: all, 1: none). */
  brownout (nowNs?: bigint): number
  readonly state: 'healthy' | 'overloaded'
  readonly waiting: number
  readonly limit: number
  readonly inflight: number
  readonly livePermits: number
  readonly levels: Levels
  setStaticLimit (limit: number | null): void
  metrics (): GateMetrics
  /**
   * The gate named `name` in shared memory (Linux): one limit, one priority queue and one
   * shed switch across every `cluster` worker, PM2 instance or worker thread opening the
   * name; a release in any process grants the next waiter, whichever process queued it
   * (a native thread per object with waiters wakes on the process's mailbox; it does not
   * keep the event loop alive when nothing waits). `queueCapacity` at most 256 (default
   * 256); one object holds at most 64 queued tickets at once (more are refused
   * `limit_reached`). Another config under the name throws `SG_SHM_REFUSED`; a bad name a
   * `RangeError` (`SG_INVALID_ARG`). A process that dies gives back its permits and
   * withdraws its tickets (swept every 100 ms while anything waits, on open, and on
   * `reclaim()`).
   */
  static shared (name: string, options?: GateOptions): Gate
  /** Whether it lives in shared memory. */
  readonly shared: boolean
  /** Shared: whether this object created the segment (false: attached). True in-process. */
  readonly created: boolean
  /** Shared: process-table slots in use. 1 in-process. */
  readonly attachedProcesses: number
  /** Permits held through this object (shared: counted to this process). */
  readonly heldHere: number
  /** Shared: gives back dead processes' permits and tickets now; the permits. 0 in-process. */
  reclaim (): number
}

export interface RetryBudgetOptions {
  /** How long a deposit can fund retries, in [1 s, 60 s] (default 10 s). */
  ttlMs?: number
  /** Retries per second allowed even with no traffic, at most 1 000 000 (default 10). */
  minRetriesPerSec?: number
  /** Retries as a fraction of requests, in [0, 1] (default 0.1: 10%; Finagle's is 0.2). */
  percentCanRetry?: number
  /** The same ratio without the cap at 1: retries per request, in [0, 1000]. Not with percentCanRetry. */
  retryRatio?: number
}

export declare class RetryBudget {
  constructor (options?: RetryBudgetOptions)
  /** The budget named `name` in shared memory (Linux): one budget for every process and thread opening it (see `Limiter.shared`). */
  static shared (name: string, options?: RetryBudgetOptions): RetryBudget
  /** Whether it lives in shared memory. */
  readonly shared: boolean
  deposit (nowNs?: bigint): void
  tryWithdraw (nowNs?: bigint): boolean
  lastRejection: Rejection | null
  available (nowNs?: bigint): number
  metrics (): { requests: number, retriesAllowed: number, retriesDenied: number, available: number }
}

export interface TokenRetryThrottleOptions {
  /** gRPC `maxTokens`, in (0, 1000]: retries are allowed while the tokens are above half of it (default 10). */
  maxTokens?: number
  /** gRPC `tokenRatio`: tokens a success adds, in [0.001, maxTokens] (default 0.1). */
  tokenRatio?: number
}

export declare class TokenRetryThrottle {
  constructor (options?: TokenRetryThrottleOptions)
  record (success: boolean): void
  tryRetry (): boolean
  lastRejection: Rejection | null
  readonly isRetryAllowed: boolean
  readonly tokens: number
  metrics (): { tokens: number, throttled: boolean, retriesAllowed: number, retriesDenied: number, successes: number, failures: number }
}

export interface AdaptiveThrottleOptions {
  /** K: requests per accept the client may send before it throttles, in [1, 1000] (default 2). */
  k?: number
  /** The window requests and accepts are counted over, in [1 s, 1 h] (default 120 s). */
  windowMs?: number
  /** Cap on the local drop probability, in [0, 1] (default 0.75). */
  maxDropProbability?: number
  /** The exact ring of buckets or O(1) decayed counts (default ring). */
  form?: 'ring' | 'ema'
  /** Seed of the drop draws. */
  seed?: number
}

export declare class AdaptiveThrottle {
  constructor (options?: AdaptiveThrottleOptions)
  shouldThrottle (nowNs?: bigint): boolean
  record (accepted: boolean, nowNs?: bigint): void
  lastRejection: Rejection | null
  dropProbability (nowNs?: bigint): number
  metrics (): { requests: number, accepts: number, dropProbability: number, throttled: number }
}

export interface BackoffOptions {
  /** First delay ceiling, in [1 µs, 1 day] (default 100 ms). */
  baseMs?: number
  /** Growth per attempt, in [1, 100] (default 2). */
  multiplier?: number
  /** Largest delay the backoff chooses itself, at least baseMs (default 1 s); a server's Retry-After may exceed it. */
  capMs?: number
  /** The randomisation (default full). */
  jitter?: 'none' | 'full' | 'equal' | 'decorrelated'
  seed?: number
}

export declare class Backoff {
  constructor (options?: BackoffOptions)
  /** `attempt`: 1 = the first retry; 0 is a RangeError. */
  nextDelayMs (attempt: number, retryAfterMs?: number | null): number
  ceilingMs (attempt: number): number
  reset (): void
}

export interface CircuitBreakerOptions {
  /** A window of the last this many calls, 1..512 (default 100). */
  windowCalls?: number
  /** A window of the calls in the last this long, instead of windowCalls (default none). */
  windowMs?: number
  /** Open when failures / calls reach this, in (0, 1] (default 0.5). */
  failureRateThreshold?: number
  /** Open when slow calls / calls reach this, in (0, 1] (default 1). */
  slowCallRateThreshold?: number
  /** A call at least this long is slow (default 60 s). */
  slowCallMs?: number
  /** No rate is judged on fewer calls; for a count window at most its size (default 100). */
  minimumCalls?: number
  /** How long the breaker stays open before probing, in [1 ms, 1 day] (default 60 s). */
  openMs?: number
  /** Up to this fraction of openMs is added at random to each open period, in [0, 1] (default 0.2). */
  openJitter?: number
  /** Probes admitted in half-open, 1..32 (default 10). */
  halfOpenProbes?: number
  /** A probe silent this long gives its slot to the next caller (default 60 s). */
  probeLeaseMs?: number
  /** After closing, traffic ramps up over this long; 0 = no ramp (default 30 s). */
  rampMs?: number
  /** Seed of the jitter (default 0). */
  seed?: number
  classify?: Classify
}

export type BreakerState = 'closed' | 'ramping' | 'open' | 'half_open'

export interface BreakerMetrics {
  state: BreakerState
  admitPermille: number
  openRemainingMs: number
  windowCalls: number
  windowFailures: number
  windowSlow: number
  opened: number
  halfOpened: number
  closed: number
  rejected: number
  rampShed: number
  probes: number
  staleRecords: number
}

export declare class CircuitBreaker {
  constructor (options?: CircuitBreakerOptions)
  tryAcquire (options?: { nowNs?: bigint }): Permit | null
  run<T, A extends unknown[]> (fn: (...args: A) => T | PromiseLike<T>, ...args: A): Promise<T>
  lastRejection: Rejection | null
  state (nowNs?: bigint): BreakerState
  isOpen (nowNs?: bigint): boolean
  readonly livePermits: number
  metrics (nowNs?: bigint): BreakerMetrics
}

export declare class RateLimiter {
  constructor (options: { perSecond: number, burst?: number })
  /** The rate limiter named `name` in shared memory (Linux): one rate for every process and thread opening it (see `Limiter.shared`). */
  static shared (name: string, options: { perSecond: number, burst?: number }): RateLimiter
  /** Whether it lives in shared memory. */
  readonly shared: boolean
  tryTake (cost?: number, nowNs?: bigint): boolean
  lastRejection: Rejection | null
  takeUpTo (max: number, nowNs?: bigint): number
  available (nowNs?: bigint): number
  waitTimeMs (cost?: number, nowNs?: bigint): number
  metrics (): { allowed: number, denied: number, emissionMs: number, burst: number }
}

export declare class PacedDrain {
  constructor (options: { targetPerSec: number, headroom?: number, burst?: number })
  permits (backlog: number, nowNs?: bigint): number
  nextPermitInMs (nowNs?: bigint): number
  timeToDrainMs (backlog: number, producePerSec?: number): number | null
  readonly drainPerSec: number
  metrics (): { started: number, calls: number, drainPerSec: number }
}

export interface CreditsOptions {
  /** High water: the most credit outstanding at once, the consumer's buffer (default 256). */
  capacity?: number
  /** Low water: replenish only once outstanding credit falls to this, below capacity (default 64). */
  lowWater?: number
}

export declare class Credits {
  constructor (options?: CreditsOptions)
  tryTake (k?: number): boolean
  lastRejection: Rejection | null
  takeUpTo (k: number): number
  complete (k?: number): void
  grant (n: number): number
  readonly grantDue: number
  replenish (): number
  readonly available: number
  readonly buffered: number
  readonly outstanding: number
  readonly isStalled: boolean
  metrics (): { granted: number, taken: number, completed: number, refused: number, available: number, buffered: number, stalled: number, capacity: number }
}

export interface LagMeterOptions {
  /** Width of one rate bucket, 1 µs to 1 day (default 1 s). */
  bucketMs?: number
}

export declare class LagMeter {
  constructor (options?: LagMeterOptions)
  recordProduced (n?: number, nowNs?: bigint): void
  recordConsumed (n?: number, nowNs?: bigint): void
  observeTotals (produced: number, consumed: number, nowNs?: bigint): void
  reportOldest (enqueuedAtNs: bigint | null, nowNs?: bigint): void
  lag (nowNs?: bigint): number
  produceRate (nowNs?: bigint): number | null
  consumeRate (nowNs?: bigint): number | null
  lagTimeMs (nowNs?: bigint): number | null
  timeToDrainMs (nowNs?: bigint): number | null
  timeToDrainExceeds (limitMs: number, nowNs?: bigint): boolean
  oldestAgeMs (nowNs?: bigint): number | null
  metrics (nowNs?: bigint): { produced: number, consumed: number, lag: number, ratesKnown: boolean, produceRate: number, consumeRate: number, lagSeconds: number, timeToDrainSeconds: number, oldestAgeMs?: number }
}

export interface WatermarksOptions {
  /** Total capacity (default 400). */
  capacity?: number
  /** Pause when free capacity falls below this (default 100). */
  pauseBelow?: number
  /** Resume when free capacity rises above this, above pauseBelow and below capacity (default 200). */
  resumeAbove?: number
}

export declare class Watermarks {
  constructor (options?: WatermarksOptions)
  observe (level: number, nowNs?: bigint): 'pause' | 'resume' | null
  readonly isPaused: boolean
  metrics (nowNs?: bigint): { paused: boolean, pauses: number, resumes: number, timePausedMs: number, lastLevel: number }
}

export interface KeyedOptions {
  /** 16, 64 (default), 256 or 1024. */
  shards?: number
  /** 1..8 (default 2). */
  shardsPerKey?: number
  shardLimit: number
  limitRetryAfterMs?: number
  /** Seed of the key hash and shard mapping: choose at random, keep private. */
  seed?: number
  ratePerSecond?: number
  rateBurst?: number
}

export interface Isolation {
  shards: number
  shardsPerKey: number
  combinations: number
  shareAll: number
  shareAny: number
  unaffected: number
}

export declare class KeyPermit {
  private constructor ()
  readonly key: string
  readonly released: boolean
  release (): void
  [Symbol.dispose] (): void
}

export declare class KeyedLimits {
  constructor (options: KeyedOptions)
  tryAcquire (key: string, cost?: number, nowNs?: bigint): KeyPermit | null
  lastRejection: Rejection | null
  recordRejection (key: string): boolean
  readonly keyLimit: number
  shardsOf (key: string): number[]
  isolation (): Isolation
  readonly livePermits: number
  metrics (): {
    admitted: number
    rejectedKeyLimit: number
    rejectedKeyRate: number
    foreignReleases: number
    inFlight: number
    fullShards: number
    shards: number
    topKeys: Array<{ key?: string, keyHash: string, count: number, error: number }>
  }
  /**
   * The table named `name` in shared memory (Linux): one set of per-key caps across every
   * process or worker thread opening the name. Keys are hashed with a seed drawn when the
   * segment was created (the same in every process). Another config under the name throws
   * `SG_SHM_REFUSED`. A dead process's key permits come back once (on open, on
   * `reclaim()`, and at most every 100 ms on a `key_limit` refusal).
   */
  static shared (name: string, options: KeyedOptions): KeyedLimits
  /** Whether it lives in shared memory. */
  readonly shared: boolean
  /** Shared: whether this object created the segment (false: attached). True in-process. */
  readonly created: boolean
  /** Shared: process-table slots in use. 1 in-process. */
  readonly attachedProcesses: number
  /** Shared: gives back dead processes' key permits now; how many. 0 in-process. */
  reclaim (): number
}

/** The core's seeded 64-bit key hash (the same in every binding). */
export declare function hashKey (key: string, seed?: bigint | number): bigint

export interface Actionable {
  status: 429 | 503 | number
  retryAfterS: number
  reason: Reason
  error: string
  /** The core's JSON body, byte-identical in every binding. */
  body: string
}

export declare function actionable (rejection: { reason: Reason | string, retryAfterMs?: number }): Actionable
export declare function isolation (n: number, k: number): Isolation | null

export interface MetricsSource { metrics (...args: never[]): object }

/** Prometheus text (format 0.0.4) of `{ name: object }` or `[name, object][]`. */
export declare function renderPrometheus (
  sources: Record<string, MetricsSource> | Array<[string, MetricsSource]>,
  options?: { prefix?: string }
): string

/** The request shape the middleware reads. */
export interface RequestLike { headers: Record<string, string | string[] | undefined> }

export interface HttpOptions<Req extends RequestLike = RequestLike> {
  /**
   * A Gate (admits, queues or refuses; `Gate.shared` for one queue across workers) or a
   * Limiter (admits or refuses at once; `Limiter.shared` too; no `readinessRoute`).
   */
  gate: Gate | Limiter
  /** Priority from the request (default: the X-Request-Priority header). */
  priority?: (req: Req) => Priority | undefined
  priorityHeader?: string
  /** Per-key limits, checked before the gate (429 + JSON on refusal). */
  keyed?: KeyedLimits
  /** The key: a header name (e.g. 'x-tenant-id') or a function. */
  key?: string | ((req: Req) => string | undefined)
  keyCost?: number | ((req: Req) => number)
  /**
   * A deadline per request, ms, covering the wait in the gate's queue and the expected
   * service time (see `AcquireOptions.timeoutMs`); the gate's `maxWaitMs` caps queueing
   * time alone. Default: none.
   */
  timeoutMs?: number
  /**
   * Read the caller's deadline from `grpc-timeout`, `x-envoy-expected-rq-timeout-ms` and
   * `surgeguard-timeout-ms` (default true; the smallest valid one wins, capped by
   * `timeoutMs`). A malformed, negative or absurd (> 1 h) value is ignored and counted in
   * `deadline.metrics().ignoredByReason`.
   */
  deadlines?: boolean
  /** One more deadline header, whole milliseconds, e.g. 'x-request-timeout-ms'. */
  deadlineHeader?: string
  /** The budget of a request without a usable deadline header, ms (default: none). */
  defaultBudgetMs?: number
  /** The outcome from the response status (default: <400 success, 429/503/504 dropped, else ignore). */
  outcome?: (status: number) => Outcome
  /** Requests to leave out of admission control (health checks, metrics). */
  skip?: (req: Req) => boolean
  /** Serve readiness at this path (GET). */
  readinessRoute?: string
  /** Status while overloaded (default 200: overloaded is not broken). */
  overloadedStatus?: number
}

/** Express middleware. */
export declare function express (options: HttpOptions): (req: any, res: any, next: (err?: unknown) => void) => void

/** Fastify plugin (fastify 5); register with `fastify.register(fastify, options)`. */
export declare const fastify: {
  (instance: any, options: HttpOptions, done: (err?: Error) => void): void
}

/** A readiness handler for Express, Fastify or node:http. */
export declare function readiness (gate: Gate, options?: { overloadedStatus?: number }): (req: any, res: any) => unknown

export interface FetchOptions {
  fetch?: typeof globalThis.fetch
  /** A RetryBudget or its options; `false` for none (default: a 10 % budget). */
  budget?: RetryBudget | RetryBudgetOptions | false
  backoff?: Backoff | BackoffOptions
  breaker?: CircuitBreaker
  throttle?: AdaptiveThrottle
  /** Attempts per call, including the first (default 3). */
  maxAttempts?: number
  /** Statuses worth retrying (default 429, 502, 503, 504). */
  retryOn?: number[]
  /** Idempotent methods (default GET HEAD OPTIONS PUT DELETE TRACE). */
  methods?: string[]
  /** A longer Retry-After returns the response instead of waiting (default 30 000). */
  maxRetryAfterMs?: number
  /** Propagate the current deadline (`deadline`) to each attempt (default true). */
  deadlines?: boolean
  /** Headers that carry the budget out: 'surgeguard-timeout-ms' (default), 'grpc-timeout', or any ms header. */
  deadlineHeaders?: string[]
  /** Subtracted from the budget sent on (transit, the callee's own margin), ms (default 5). */
  deadlineMarginMs?: number
  /**
   * Fail fast (`DeadlineTooShortError`) when the budget left is below this, ms; `'learned'`
   * (default): an EWMA of this client's answered calls, after 5 of them.
   */
  expectedLatencyMs?: number | 'learned'
}

/** `fetch` with budgeted, jittered retries that honour Retry-After, idempotency and AbortSignal. */
export declare function createFetch (options?: FetchOptions): typeof globalThis.fetch

/** Counters of deadline handling, process-wide. */
export interface DeadlineMetrics {
  /** Requests that arrived with a usable deadline header. */
  headerDeadlines: number
  /** Requests with no usable header given a budget by the server (`defaultBudgetMs`, `timeoutMs`). */
  defaultDeadlines: number
  /** Requests served without any deadline. */
  noDeadline: number
  /** Deadline headers ignored, by reason. */
  ignoredByReason: { malformed: number, negative: number, too_large: number }
  /** Outgoing calls that carried the budget. */
  propagated: number
  /** Outgoing calls refused locally (`DeadlineTooShortError`). */
  failedFast: number
  /** Outgoing calls aborted at the deadline (`DeadlineExceededError`). */
  exceeded: number
  /** Retries not made because they would not fit in the budget. */
  retriesSkipped: number
}

export type IgnoreReason = 'malformed' | 'negative' | 'too_large'

/**
 * The current request's deadline (AsyncLocalStorage): set by the middlewares from the
 * caller's headers, or by `run`/`runUntil` for other code. Nested scopes keep the earlier
 * deadline.
 */
export declare const deadline: {
  /** The absolute deadline, ns on the `nowNs()` clock, or undefined. */
  current (): bigint | undefined
  /** Milliseconds left (0 once passed), or undefined without a deadline. */
  remaining (): number | undefined
  /** True once the deadline has passed. */
  expired (): boolean
  /** Runs `fn` with a deadline `ms` from now (or the enclosing one, if earlier). */
  run<A extends unknown[], T> (ms: number, fn: (...args: A) => T, ...args: A): T
  /** Runs `fn` with an absolute deadline (or the enclosing one, if earlier). */
  runUntil<A extends unknown[], T> (deadlineNs: bigint, fn: (...args: A) => T, ...args: A): T
  /** An AbortSignal aborting at the deadline (reason: DeadlineExceededError), or undefined. */
  signal (): AbortSignal | undefined
  /**
   * Outgoing headers for another client: `names` (default ['surgeguard-timeout-ms']) set
   * to the remaining budget minus `marginMs` (default 5); `{}` without a deadline; throws
   * `DeadlineTooShortError` when nothing is left.
   */
  headers (options?: { marginMs?: number, names?: string[] }): Record<string, string>
  /** The budget the deadline headers carry (smallest valid), and those ignored. */
  parseHeaders (
    headers: Record<string, string | string[] | undefined> | Headers,
    header?: string
  ): { budgetMs: number | undefined, ignored: Array<{ header: string, reason: IgnoreReason }> }
  metrics (): DeadlineMetrics
}

/**
 * Whether `err` is a refusal (`RejectedError`: gate, limiter, open breaker, budget, rate,
 * key) or a deadline (`DeadlineError`, a `TimeoutError`): what a fallback may answer.
 * Never a bug (TypeError, RangeError, usage errors, other exceptions).
 */
export declare function isDegradable (err: unknown): boolean

export interface FallbackOptions<F> {
  /** A value (a precomputed default), or a function of the error. */
  fallback: F | ((err: unknown) => F | PromiseLike<F>)
  /** Which errors the fallback answers (default `isDegradable`). */
  on?: (err: unknown) => boolean
}

/** `fn()`, or the fallback on a refusal or a deadline; other errors propagate. */
export declare function withFallback<T, F = T> (fn: () => T | PromiseLike<T>, options: FallbackOptions<F>): Promise<T | F>

export interface StaleIfErrorOptions {
  /** Keys kept at most, least recently used evicted (default 1000). */
  maxEntries?: number
  /** A value older than this is never served, ms (default 300 000). */
  maxAgeMs?: number
  /** Which errors a stale value answers (default: refusals, deadlines and non-bug failures). */
  isFailure?: (err: unknown) => boolean
}

export type StaleResult<T> =
  | { value: T, stale: false }
  | { value: T, stale: true, ageMs: number, error: unknown }

/** The `Warning` header value a middleware response gets when a handler served stale. */
export declare const STALE_WARNING: string

/** The last good value per key, served (marked stale) when the origin refuses or fails. */
export declare class StaleIfError {
  constructor (options?: StaleIfErrorOptions)
  get<T> (key: string, fn: () => T | PromiseLike<T>): Promise<StaleResult<T>>
  set (key: string, value: unknown): void
  delete (key: string): boolean
  readonly size: number
  metrics (): { fresh: number, stale: number, misses: number, evicted: number, entries: number }
}

/** Optional work under the gate's brownout dimmer. */
export interface Optional {
  /** True with probability 1 − `gate.brownout()`. */
  enabled (): boolean
  /** `fn()` when enabled, else the fallback (a value, or a function called instead). */
  run<T, F = T> (fn: () => T | PromiseLike<T>, fallback?: F | (() => F | PromiseLike<F>)): Promise<T | F>
  metrics (): { served: number, dimmed: number }
}

/** An `Optional` over `gate`'s dimmer; `random` (default Math.random) in [0, 1). */
export declare function optional (gate: Gate, options?: { random?: () => number }): Optional
