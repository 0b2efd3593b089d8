//! A circuit breaker: closed / open / half-open, count- or time-based windows, failure-rate
//! and slow-call-rate thresholds, a jittered open duration, half-open probes through
//! compare-and-swap slots with a lease, and a traffic ramp after closing.
//!
//! Semantics follow resilience4j (thresholds, minimum calls, slow calls, N permitted
//! half-open calls) and Polly (10 buckets per time window). What they lack: the open
//! duration is jittered so a fleet of clients does not half-open in unison (synchronized
//! recovery re-creates the spike that tripped them), a probe that never reports loses its
//! slot when its lease ends so the breaker cannot stick half-open (resilience4j #903,
//! #1389), and after closing, traffic comes back gradually, 10 % → 25 % → 50 % → 100 %, so
//! a dependency that just recovered is not hit with full load at once.

use crate::rng::mix;
use crate::sync::{AtomicU32, AtomicU64, Exclusive, Ordering};
use crate::time::{AtomicMonotonic, MS, SEC};
use crate::types::check_range;
use crate::{ConfigError, Outcome, Reason, Rejected};

/// The largest count-based window, calls.
pub const MAX_COUNT_WINDOW: u32 = 512;
/// Buckets of a time-based window (Polly: 10 windows of `sampling_duration / 10`).
pub const TIME_BUCKETS: usize = 10;
/// The most half-open probes.
pub const MAX_PROBES: u32 = 32;
/// Traffic admitted in each third of the ramp, per mille: 10 %, 25 %, 50 % (then all).
pub const RAMP_PERMILLE: [u32; 3] = [100, 250, 500];

const WINDOW_WORDS: usize = (MAX_COUNT_WINDOW as usize).div_ceil(64);
const MAX_DURATION: u64 = 86_400 * SEC;
/// SplitMix64's increment (Steele, Lea, Flood 2014), for the shared jitter generator.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// What the breaker's window counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerWindow {
    /// The last `n` calls (resilience4j `COUNT_BASED`), `1 ..= MAX_COUNT_WINDOW`.
    Count(u32),
    /// The calls of the last `d` ns, in [`TIME_BUCKETS`] buckets (resilience4j
    /// `TIME_BASED`, Polly). `d` in `[10 ms, 1 day]`.
    Time(u64),
}

/// Settings of a [`CircuitBreaker`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircuitBreakerConfig {
    /// The window the rates are computed over.
    pub window: BreakerWindow,
    /// Open when failures / calls ≥ this, in `(0, 1]`. resilience4j: 0.5.
    pub failure_rate_threshold: f64,
    /// Open when slow calls / calls ≥ this, in `(0, 1]`. resilience4j: 1.0.
    pub slow_call_rate_threshold: f64,
    /// A call at least this long (ns) is slow. resilience4j: 60 s. At least 1 ns.
    pub slow_call_duration: u64,
    /// No rate is judged on fewer calls than this (minimum throughput). resilience4j: 100.
    /// At least 1; for a count window, at most its size.
    pub minimum_calls: u32,
    /// How long the breaker stays open before probing, ns. resilience4j: 60 s.
    /// In `[1 ms, 1 day]`.
    pub open_duration: u64,
    /// Up to this fraction of `open_duration` is added at random to each open period, in
    /// `[0, 1]`, so a fleet of breakers that opened together does not probe together.
    pub open_jitter: f64,
    /// Probes admitted in half-open, `1 ..= MAX_PROBES`. resilience4j: 10.
    pub half_open_probes: u32,
    /// A probe that has not reported after this long (ns) gives its slot to the next
    /// caller. In `[1 ms, 1 day]`.
    pub probe_lease: u64,
    /// After closing, traffic ramps 10 % → 25 % → 50 % → 100 %, each step a third of this
    /// (ns). 0 = no ramp. At most 1 day.
    pub ramp_duration: u64,
    /// Seed of the jitter generator.
    pub seed: u64,
}

impl Default for CircuitBreakerConfig {
    /// resilience4j's defaults (count window of 100, 50 % failures, 100 % slow calls over
    /// 60 s, 100 minimum calls, 60 s open, 10 half-open calls) plus 20 % open jitter, a
    /// 60 s probe lease and a 30 s ramp.
    fn default() -> Self {
        Self {
            window: BreakerWindow::Count(100),
            failure_rate_threshold: 0.5,
            slow_call_rate_threshold: 1.0,
            slow_call_duration: 60 * SEC,
            minimum_calls: 100,
            open_duration: 60 * SEC,
            open_jitter: 0.2,
            half_open_probes: 10,
            probe_lease: 60 * SEC,
            ramp_duration: 30 * SEC,
            seed: 0,
        }
    }
}

impl CircuitBreakerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        match self.window {
            BreakerWindow::Count(n) => {
                if n == 0 || n > MAX_COUNT_WINDOW {
                    return Err(ConfigError::out_of_range("breaker.window.count"));
                }
                if self.minimum_calls > n {
                    return Err(ConfigError::inconsistent(
                        "breaker.minimum_calls",
                        "must not be above",
                        "breaker.window.count",
                    ));
                }
            }
            BreakerWindow::Time(d) => {
                if !(10 * MS..=MAX_DURATION).contains(&d) {
                    return Err(ConfigError::out_of_range("breaker.window.time"));
                }
            }
        }
        for (x, what) in [
            (self.failure_rate_threshold, "breaker.failure_rate_threshold"),
            (self.slow_call_rate_threshold, "breaker.slow_call_rate_threshold"),
        ] {
            if check_range(x, 0.0, 1.0, what)? == 0.0 {
                return Err(ConfigError::out_of_range(what));
            }
        }
        check_range(self.open_jitter, 0.0, 1.0, "breaker.open_jitter")?;
        if self.slow_call_duration == 0 {
            return Err(ConfigError::out_of_range("breaker.slow_call_duration"));
        }
        if self.minimum_calls == 0 {
            return Err(ConfigError::out_of_range("breaker.minimum_calls"));
        }
        if !(MS..=MAX_DURATION).contains(&self.open_duration) {
            return Err(ConfigError::out_of_range("breaker.open_duration"));
        }
        if self.half_open_probes == 0 || self.half_open_probes > MAX_PROBES {
            return Err(ConfigError::out_of_range("breaker.half_open_probes"));
        }
        if !(MS..=MAX_DURATION).contains(&self.probe_lease) {
            return Err(ConfigError::out_of_range("breaker.probe_lease"));
        }
        if self.ramp_duration > MAX_DURATION {
            return Err(ConfigError::out_of_range("breaker.ramp_duration"));
        }
        Ok(())
    }
}

/// Where a breaker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BreakerState {
    /// Calls flow; the window is watched.
    Closed = 0,
    /// Closed, and traffic is ramping back up (a fraction is shed).
    Ramping = 1,
    /// Calls are refused until the open period ends.
    Open = 2,
    /// Up to `half_open_probes` calls test the dependency.
    HalfOpen = 3,
}

// The state word: state (2 bits) | generation (21 bits) | spare | time in ms mod 2^40.
// Time is the open deadline (Open) or the transition time (HalfOpen, Ramping).
const STATE_MASK: u64 = 0b11;
const GEN_SHIFT: u32 = 2;
const GEN_BITS: u32 = 21;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const TIME_SHIFT: u32 = 24;
const TIME_BITS: u32 = 40;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

const CLOSED: u64 = 0;
const RAMPING: u64 = 1;
const OPEN: u64 = 2;
const HALF_OPEN: u64 = 3;

// A probe slot: status (3 bits) | generation (21 bits) | lease end in ms mod 2^40.
const STATUS_MASK: u64 = 0b111;
const SLOT_GEN_SHIFT: u32 = 3;
const FREE: u64 = 0;
const LEASED: u64 = 1;
const PROBE_OK: u64 = 2;
const PROBE_FAILED: u64 = 3;
const PROBE_SLOW: u64 = 4;

const NO_PROBE: u8 = u8::MAX;

const fn pack_state(state: u64, generation: u32, time_ms: u64) -> u64 {
    state | ((generation as u64 & GEN_MASK) << GEN_SHIFT) | ((time_ms & TIME_MASK) << TIME_SHIFT)
}
const fn state_of(word: u64) -> u64 {
    word & STATE_MASK
}
const fn gen_of(word: u64) -> u32 {
    ((word >> GEN_SHIFT) & GEN_MASK) as u32
}
const fn time_of(word: u64) -> u64 {
    word >> TIME_SHIFT
}
const fn pack_slot(status: u64, generation: u32, time_ms: u64) -> u64 {
    status
        | ((generation as u64 & GEN_MASK) << SLOT_GEN_SHIFT)
        | ((time_ms & TIME_MASK) << TIME_SHIFT)
}
const fn slot_status(word: u64) -> u64 {
    word & STATUS_MASK
}
const fn slot_gen(word: u64) -> u32 {
    ((word >> SLOT_GEN_SHIFT) & GEN_MASK) as u32
}
const fn next_gen(generation: u32) -> u32 {
    (generation + 1) & GEN_MASK as u32
}
/// `a − b` for ms timestamps mod 2^40, as a signed difference (valid within ±17 years).
const fn ms_diff(a: u64, b: u64) -> i64 {
    let d = a.wrapping_sub(b) & TIME_MASK;
    ((d << (64 - TIME_BITS)) as i64) >> (64 - TIME_BITS)
}
/// Whether generation `g` is older than `current` (21-bit wrap-aware).
const fn gen_older(g: u32, current: u32) -> bool {
    let d = (current.wrapping_sub(g)) & GEN_MASK as u32;
    d != 0 && d < (1 << (GEN_BITS - 1))
}

/// Permission for one call. Report how it went with [`CircuitBreaker::record`]; a permit
/// dropped unreported costs nothing, except that a probe's slot stays taken until its lease
/// ends.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "report the call's outcome with CircuitBreaker::record"]
pub struct BreakerPermit {
    generation: u32,
    slot: u8,
    lease: u64,
}

impl BreakerPermit {
    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.slot != NO_PROBE
    }
}

/// The last `n` calls as two ring bitsets (failed, slow).
#[derive(Debug)]
struct CountWindow {
    head: AtomicU64,
    failed: [AtomicU64; WINDOW_WORDS],
    slow: [AtomicU64; WINDOW_WORDS],
}

/// A time window folded per bucket (as the throttle's ring).
#[derive(Debug)]
struct TimeWindow {
    width: u64,
    pending_calls: AtomicU64,
    /// Failed (low half) and slow (high half) calls since the last fold.
    pending_bad: AtomicU64,
    next_fold: AtomicU64,
    calls: AtomicU64,
    bad: AtomicU64,
    ring: Exclusive<TimeRing>,
}

#[derive(Debug)]
struct TimeRing {
    started: bool,
    epoch: u64,
    buckets: [(u64, u32, u32); TIME_BUCKETS],
    calls: u64,
    failed: u64,
    slow: u64,
}

#[derive(Debug)]
enum Window {
    Count(CountWindow),
    Time(TimeWindow),
}

const HALF: u64 = (1 << 32) - 1;

/// A circuit breaker: closed / open / half-open, with a count- or time-based window,
/// failure-rate and slow-call-rate thresholds, minimum calls, a jittered open duration,
/// leased half-open probes and a traffic ramp after closing.
///
/// ```
/// use surgeguard_core::breaker::{BreakerState, BreakerWindow, CircuitBreaker, CircuitBreakerConfig};
/// use surgeguard_core::time::{MS, SEC};
/// use surgeguard_core::Outcome;
/// let cfg = CircuitBreakerConfig {
///     window: BreakerWindow::Count(10),
///     minimum_calls: 4,
///     open_duration: 5 * SEC,
///     open_jitter: 0.0,
///     half_open_probes: 1,
///     ramp_duration: 0,
///     ..CircuitBreakerConfig::default()
/// };
/// let breaker = CircuitBreaker::new(cfg).unwrap();
/// let now = 100 * SEC;
/// for _ in 0..4 {
///     let permit = breaker.try_acquire(now).unwrap();
///     breaker.record(permit, now, Outcome::Dropped, 10 * MS);
/// }
/// let refused = breaker.try_acquire(now).unwrap_err();
/// assert_eq!(refused.reason.as_str(), "breaker_open");
/// assert_eq!(refused.retry_after, 5 * SEC);
/// // After the open period one probe goes through; a second caller is refused.
/// let probe = breaker.try_acquire(now + 5 * SEC).unwrap();
/// assert!(probe.is_probe() && breaker.try_acquire(now + 5 * SEC).is_err());
/// breaker.record(probe, now + 5 * SEC, Outcome::Success, 10 * MS);
/// assert_eq!(breaker.state(now + 5 * SEC), BreakerState::Closed);
/// ```
///
/// **How.** The state, its generation and a time (the open deadline or the transition
/// time) live in one `AtomicU64`; every transition is one compare-and-swap from the exact
/// word it was decided on, so two callers never both open, both close, or both start a
/// half-open phase, and a permit from an older generation cannot move a newer phase. Probes
/// take one of `half_open_probes` slots by compare-and-swap with a lease deadline: at most
/// `half_open_probes` probes are outstanding however large the burst, and a probe that
/// never reports frees its slot when its lease ends. The ramp admits exactly the step's
/// fraction of calls by a counter (call `c` passes iff `⌈(c+1)·f⌉ > ⌈c·f⌉`), so it is
/// deterministic and evenly spread.
///
/// **Progress.** Wait-free: every call is a bounded number of atomic steps (at most
/// `half_open_probes` slot attempts, a few state attempts); a lost compare-and-swap means
/// another caller made progress, and nobody retries in a loop or waits for anyone.
///
/// **Cost.** Closed: `try_acquire` is one load; `record` in a count window one
/// `fetch_add`, two loads, a bit update only when the bit changes, and on a failure a
/// popcount over `⌈n/64⌉` words ×2. A time window: two to three `fetch_add`s and four loads,
/// and one fold per bucket. Open: one load and a counter. Size: about 600 bytes.
///
/// **Time.** `now` in ns; the state stores ms, so deadlines are rounded up to the ms.
/// A `now` older than the last transition never moves the breaker back: the ramp counts it
/// as the transition's time, and an open breaker refuses it with a correspondingly longer
/// hint. A `now` above [`MAX_NOW`](crate::time::MAX_NOW) is bad input: the call acts at
/// the latest time seen (it never sets an open deadline or a lease from the bad value).
///
/// **Randomness.** The open-duration jitter comes from a SplitMix64 sequence seeded from
/// `seed` and advanced by `fetch_add` (wait-free, shared by `&self`).
#[derive(Debug)]
pub struct CircuitBreaker {
    config: CircuitBreakerConfig,
    fail_ppm: u64,
    slow_ppm: u64,
    count_size: u64,
    ramp_ms: u64,
    clock: AtomicMonotonic,
    state: AtomicU64,
    probes: [AtomicU64; MAX_PROBES as usize],
    window: Window,
    window_gen: AtomicU32,
    ramp_counter: AtomicU64,
    rng: AtomicU64,
    opened: AtomicU64,
    half_opened: AtomicU64,
    closed: AtomicU64,
    rejected: AtomicU64,
    ramp_shed: AtomicU64,
    probes_admitted: AtomicU64,
    stale_records: AtomicU64,
}

/// A snapshot of a [`CircuitBreaker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerMetrics {
    /// The state the next call would see.
    pub state: BreakerState,
    /// Traffic admitted now, per mille: 1000 when closed, the ramp step when ramping, 0
    /// when open or half-open (only probes pass).
    pub admit_permille: u32,
    /// Time left in the open period, ns (0 unless open).
    pub open_remaining: u64,
    /// Calls in the window.
    pub window_calls: u64,
    /// Failed calls in the window.
    pub window_failures: u64,
    /// Slow calls in the window.
    pub window_slow: u64,
    /// Transitions to open, ever (from closed or half-open).
    pub opened: u64,
    /// Transitions to half-open, ever.
    pub half_opened: u64,
    /// Transitions to closed, ever.
    pub closed: u64,
    /// Calls refused because open or because no probe slot was free, ever.
    pub rejected: u64,
    /// Calls shed by the ramp, ever.
    pub ramp_shed: u64,
    /// Half-open probes admitted, ever.
    pub probes: u64,
    /// Reports for permits of an earlier phase (ignored), ever.
    pub stale_records: u64,
}

enum Probe {
    Admitted(BreakerPermit),
    Refused(u64),
    /// Every slot has reported but nobody moved the state: evaluated, look again.
    Reevaluated,
}

impl CircuitBreaker {
    /// A closed breaker with `config`, or why the config cannot be used.
    pub fn new(config: CircuitBreakerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let ppm = |x: f64| libm::round(x * 1e6) as u64;
        let (window, count_size) = match config.window {
            BreakerWindow::Count(n) => (
                Window::Count(CountWindow {
                    head: AtomicU64::new(0),
                    failed: core::array::from_fn(|_| AtomicU64::new(0)),
                    slow: core::array::from_fn(|_| AtomicU64::new(0)),
                }),
                n as u64,
            ),
            BreakerWindow::Time(d) => (
                Window::Time(TimeWindow {
                    width: d / TIME_BUCKETS as u64,
                    pending_calls: AtomicU64::new(0),
                    pending_bad: AtomicU64::new(0),
                    next_fold: AtomicU64::new(0),
                    calls: AtomicU64::new(0),
                    bad: AtomicU64::new(0),
                    ring: Exclusive::new(TimeRing {
                        started: false,
                        epoch: 0,
                        buckets: [(0, 0, 0); TIME_BUCKETS],
                        calls: 0,
                        failed: 0,
                        slow: 0,
                    }),
                }),
                0,
            ),
        };
        Ok(Self {
            config,
            fail_ppm: ppm(config.failure_rate_threshold),
            slow_ppm: ppm(config.slow_call_rate_threshold),
            count_size,
            ramp_ms: config.ramp_duration / MS,
            clock: AtomicMonotonic::new(),
            state: AtomicU64::new(pack_state(CLOSED, 0, 0)),
            probes: core::array::from_fn(|_| AtomicU64::new(pack_slot(FREE, GEN_MASK as u32, 0))),
            window,
            window_gen: AtomicU32::new(0),
            ramp_counter: AtomicU64::new(0),
            rng: AtomicU64::new(config.seed),
            opened: AtomicU64::new(0),
            half_opened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            ramp_shed: AtomicU64::new(0),
            probes_admitted: AtomicU64::new(0),
            stale_records: AtomicU64::new(0),
        })
    }

    /// The config this breaker was built from.
    pub fn config(&self) -> CircuitBreakerConfig {
        self.config
    }

    /// Asks to make a call. Refusals say [`Reason::BreakerOpen`] with `retry_after` = the
    /// rest of the open period, the earliest probe lease end (half-open, no slot free), or
    /// the start of the next ramp step (shed by the ramp).
    pub fn try_acquire(&self, now: u64) -> Result<BreakerPermit, Rejected> {
        let now = self.clock.in_range_or_latest(now);
        let now_ms = now / MS;
        // Acquire: pairs with the AcqRel transition CASes, so a caller that sees a new
        // phase also sees the slot and counter resets made before it was published.
        let mut word = self.state.load(Ordering::Acquire);
        for _ in 0..4 {
            let generation = gen_of(word);
            match state_of(word) {
                CLOSED => return Ok(Self::permit(generation)),
                RAMPING => return self.ramp_admit(word, now),
                OPEN => {
                    let left = ms_diff(time_of(word), now_ms);
                    if left > 0 {
                        self.rejected.fetch_add(1, Ordering::Relaxed);
                        let wait = left as u64 * MS - now % MS;
                        return Err(Rejected::new(Reason::BreakerOpen, wait));
                    }
                    let next = pack_state(HALF_OPEN, next_gen(generation), now_ms);
                    // AcqRel: Release publishes the new phase; Acquire (also on failure)
                    // so the word we continue with is as fresh as a load's.
                    match self.state.compare_exchange(
                        word,
                        next,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => {
                            self.half_opened.fetch_add(1, Ordering::Relaxed);
                            word = next;
                        }
                        Err(current) => word = current,
                    }
                }
                _ => match self.try_probe(generation, now) {
                    Probe::Admitted(permit) => return Ok(permit),
                    Probe::Refused(wait) => {
                        self.rejected.fetch_add(1, Ordering::Relaxed);
                        return Err(Rejected::new(Reason::BreakerOpen, wait));
                    }
                    // Acquire: as the first load.
                    Probe::Reevaluated => word = self.state.load(Ordering::Acquire),
                },
            }
        }
        // The state moved under us at every step: others are making progress; refuse.
        self.rejected.fetch_add(1, Ordering::Relaxed);
        Err(Rejected::new(Reason::BreakerOpen, 0))
    }

    /// Reports how a permitted call went. `latency` (ns) at or above
    /// `slow_call_duration` makes it a slow call. [`Outcome::Ignored`] records nothing (a
    /// probe's slot is freed for another caller).
    pub fn record(&self, permit: BreakerPermit, now: u64, outcome: Outcome, latency: u64) {
        let now = self.clock.in_range_or_latest(now);
        let slow = latency >= self.config.slow_call_duration;
        if permit.is_probe() {
            self.record_probe(permit, now, outcome, slow);
            return;
        }
        if outcome == Outcome::Ignored {
            return;
        }
        // Acquire: pairs with the transition CASes (see `try_acquire`).
        let word = self.state.load(Ordering::Acquire);
        let state = state_of(word);
        if gen_of(word) != permit.generation || !(state == CLOSED || state == RAMPING) {
            self.stale_records.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let failed = outcome == Outcome::Dropped;
        // Acquire: pairs with the Release store in `reset_window`; the window we are about
        // to judge was cleared for this generation.
        if self.window_gen.load(Ordering::Acquire) != permit.generation
            && !self.reset_window(permit.generation)
        {
            return;
        }
        let counts = match &self.window {
            Window::Count(w) => w.record(self.count_size, self.config.minimum_calls, failed, slow),
            Window::Time(w) => Some(w.record(now, failed, slow)),
        };
        if let Some((calls, failures, slows)) = counts {
            if self.rates_reached(calls, failures, slows, self.config.minimum_calls as u64) {
                self.trip(word, now);
            }
        }
    }

    /// The state the next call would see at `now` (an open period that has ended reads as
    /// half-open).
    pub fn state(&self, now: u64) -> BreakerState {
        let now = self.clock.in_range_or_latest(now);
        let word = self.state.load(Ordering::Acquire);
        match state_of(word) {
            CLOSED => BreakerState::Closed,
            RAMPING if self.ramp_step(word, now).is_none() => BreakerState::Closed,
            RAMPING => BreakerState::Ramping,
            OPEN if ms_diff(time_of(word), now / MS) <= 0 => BreakerState::HalfOpen,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Whether calls are refused outright at `now`.
    pub fn is_open(&self, now: u64) -> bool {
        self.state(now) == BreakerState::Open
    }

    /// A snapshot at `now`.
    pub fn metrics(&self, now: u64) -> BreakerMetrics {
        let now = self.clock.in_range_or_latest(now);
        let word = self.state.load(Ordering::Acquire);
        let state = self.state(now);
        let (admit_permille, open_remaining) = match state {
            BreakerState::Open => {
                let left = ms_diff(time_of(word), now / MS).max(0) as u64;
                (0, (left * MS).saturating_sub(now % MS))
            }
            BreakerState::Ramping => {
                (self.ramp_step(word, now).map_or(1000, |s| RAMP_PERMILLE[s]), 0)
            }
            BreakerState::HalfOpen => (0, 0),
            BreakerState::Closed => (1000, 0),
        };
        let (window_calls, window_failures, window_slow) = match &self.window {
            Window::Count(w) => w.counts(self.count_size),
            Window::Time(w) => w.counts(),
        };
        BreakerMetrics {
            state,
            admit_permille,
            open_remaining,
            window_calls,
            window_failures,
            window_slow,
            opened: self.opened.load(Ordering::Relaxed),
            half_opened: self.half_opened.load(Ordering::Relaxed),
            closed: self.closed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            ramp_shed: self.ramp_shed.load(Ordering::Relaxed),
            probes: self.probes_admitted.load(Ordering::Relaxed),
            stale_records: self.stale_records.load(Ordering::Relaxed),
        }
    }

    const fn permit(generation: u32) -> BreakerPermit {
        BreakerPermit { generation, slot: NO_PROBE, lease: 0 }
    }

    fn rates_reached(&self, calls: u64, failures: u64, slows: u64, minimum: u64) -> bool {
        calls >= minimum.max(1)
            && (failures * 1_000_000 >= self.fail_ppm * calls
                || slows * 1_000_000 >= self.slow_ppm * calls)
    }

    /// The ramp step (0..3) at `now`, or `None` once the ramp is over.
    fn ramp_step(&self, word: u64, now: u64) -> Option<usize> {
        let elapsed = ms_diff(now / MS, time_of(word)).max(0) as u64;
        if elapsed >= self.ramp_ms {
            None
        } else {
            Some((elapsed * 3 / self.ramp_ms) as usize)
        }
    }

    fn ramp_admit(&self, word: u64, now: u64) -> Result<BreakerPermit, Rejected> {
        let generation = gen_of(word);
        let Some(step) = self.ramp_step(word, now) else {
            // The ramp is over: stop paying for it (same generation, so permits stay valid).
            let closed = pack_state(CLOSED, generation, time_of(word));
            // Relaxed: nothing else is published with this change.
            let _ = self.state.compare_exchange(word, closed, Ordering::Relaxed, Ordering::Relaxed);
            return Ok(Self::permit(generation));
        };
        let f = RAMP_PERMILLE[step] as u64;
        let c = self.ramp_counter.fetch_add(1, Ordering::Relaxed);
        // Call c passes iff ⌈(c+1)·f/1000⌉ > ⌈c·f/1000⌉: exactly f per mille, evenly spread,
        // the first call after closing included.
        if ((c + 1) * f).div_ceil(1000) > (c * f).div_ceil(1000) {
            return Ok(Self::permit(generation));
        }
        self.ramp_shed.fetch_add(1, Ordering::Relaxed);
        let step_end = time_of(word) + self.ramp_ms * (step as u64 + 1) / 3;
        let left = ms_diff(step_end, now / MS).max(1) as u64;
        Err(Rejected::new(Reason::BreakerOpen, left * MS - now % MS))
    }

    fn try_probe(&self, generation: u32, now: u64) -> Probe {
        let now_ms = now / MS;
        let lease_end = (now.saturating_add(self.config.probe_lease)).div_ceil(MS);
        let lease = pack_slot(LEASED, generation, lease_end);
        let mut soonest = i64::MAX;
        let mut reported = 0;
        for (i, slot) in self.probes[..self.config.half_open_probes as usize].iter().enumerate() {
            // Acquire: pairs with the AcqRel slot CASes of earlier holders.
            let s = slot.load(Ordering::Acquire);
            let g = slot_gen(s);
            let status = slot_status(s);
            let free = if g == generation {
                status == FREE || (status == LEASED && ms_diff(time_of(s), now_ms) <= 0)
            } else if gen_older(g, generation) {
                true
            } else {
                // A newer phase has begun: this caller's view is stale.
                return Probe::Refused(0);
            };
            if free {
                // AcqRel: the slot is the probe's lease; Release publishes it, Acquire
                // orders us after the previous holder's report.
                if slot.compare_exchange(s, lease, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    self.probes_admitted.fetch_add(1, Ordering::Relaxed);
                    return Probe::Admitted(BreakerPermit { generation, slot: i as u8, lease });
                }
            } else if status == LEASED {
                soonest = soonest.min(ms_diff(time_of(s), now_ms));
            } else {
                reported += 1;
            }
        }
        if reported == self.config.half_open_probes {
            // Every probe reported, yet the phase is still half-open: the reporters raced
            // and each missed the other's report. Decide now so the breaker cannot stick.
            self.evaluate_half_open(generation, now);
            return Probe::Reevaluated;
        }
        let wait = if soonest == i64::MAX { MS } else { soonest.max(1) as u64 * MS - now % MS };
        Probe::Refused(wait)
    }

    fn record_probe(&self, permit: BreakerPermit, now: u64, outcome: Outcome, slow: bool) {
        let status = match outcome {
            Outcome::Success if slow => PROBE_SLOW,
            Outcome::Success => PROBE_OK,
            Outcome::Dropped => PROBE_FAILED,
            Outcome::Ignored => FREE,
        };
        let word = self.state.load(Ordering::Acquire);
        if state_of(word) != HALF_OPEN || gen_of(word) != permit.generation {
            // The phase this probe tested is over; a newer phase treats its slot as free.
            self.stale_records.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let slot = &self.probes[permit.slot as usize];
        let done = pack_slot(status, permit.generation, 0);
        // AcqRel: Release publishes the report to the scans in `evaluate_half_open`.
        if slot.compare_exchange(permit.lease, done, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            // The lease ended and the slot went to another probe, or a newer phase began.
            self.stale_records.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if status != FREE {
            self.evaluate_half_open(permit.generation, now);
        }
    }

    /// Opens as soon as the probes' failures (or slow calls) make the threshold certain;
    /// closes once every probe has reported below it.
    fn evaluate_half_open(&self, generation: u32, now: u64) {
        let word = self.state.load(Ordering::Acquire);
        if state_of(word) != HALF_OPEN || gen_of(word) != generation {
            return;
        }
        let n = self.config.half_open_probes as u64;
        let (mut done, mut failed, mut slow) = (0, 0, 0);
        for slot in &self.probes[..n as usize] {
            // Acquire: pairs with the report CASes in `record_probe`.
            let s = slot.load(Ordering::Acquire);
            if slot_gen(s) != generation {
                continue;
            }
            match slot_status(s) {
                PROBE_OK => done += 1,
                PROBE_FAILED => (done, failed) = (done + 1, failed + 1),
                PROBE_SLOW => (done, slow) = (done + 1, slow + 1),
                _ => {}
            }
        }
        // Rates over all n probes: once reached they stay reached whatever the rest report.
        if self.rates_reached(n, failed, slow, 1) {
            self.trip(word, now);
        } else if done == n {
            self.close(word, now);
        }
    }

    /// Opens from `word` (closed, ramping or half-open), once.
    fn trip(&self, mut word: u64, now: u64) {
        let until = now.saturating_add(self.open_period()).div_ceil(MS);
        for _ in 0..2 {
            let next = pack_state(OPEN, next_gen(gen_of(word)), until);
            // AcqRel: see `try_acquire`.
            match self.state.compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.opened.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // Ramping → closed keeps the generation: try once more from the new word.
                Err(current)
                    if gen_of(current) == gen_of(word)
                        && state_of(word) == RAMPING
                        && state_of(current) == CLOSED =>
                {
                    word = current
                }
                Err(_) => return,
            }
        }
    }

    fn close(&self, word: u64, now: u64) {
        let generation = next_gen(gen_of(word));
        let state = if self.ramp_ms == 0 { CLOSED } else { RAMPING };
        // Reset before publishing: the first calls of the new phase see a clean ramp.
        self.ramp_counter.store(0, Ordering::Relaxed);
        let next = pack_state(state, generation, now / MS);
        // AcqRel: see `try_acquire`.
        if self.state.compare_exchange(word, next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.closed.fetch_add(1, Ordering::Relaxed);
            self.reset_window(generation);
        }
    }

    /// Clears the window for `generation`; false if a time window is mid-fold (the next
    /// record retries).
    fn reset_window(&self, generation: u32) -> bool {
        let cleared = match &self.window {
            Window::Count(w) => {
                w.clear();
                true
            }
            Window::Time(w) => w.clear(),
        };
        if cleared {
            // Release: pairs with the Acquire load in `record`.
            self.window_gen.store(generation, Ordering::Release);
        }
        cleared
    }

    /// `open_duration` plus up to `open_jitter` of it, at random.
    fn open_period(&self) -> u64 {
        let base = self.config.open_duration;
        if self.config.open_jitter == 0.0 {
            return base;
        }
        // Relaxed: a counter-based generator; only uniqueness of the values matters.
        let state = self.rng.fetch_add(GOLDEN_GAMMA, Ordering::Relaxed).wrapping_add(GOLDEN_GAMMA);
        let u = (mix(state) >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        base + (base as f64 * self.config.open_jitter * u) as u64
    }
}

impl CountWindow {
    /// Records one call; returns the window's counts when the rates need judging (a failed
    /// or slow call, or the call that reaches the minimum).
    fn record(&self, size: u64, minimum: u32, failed: bool, slow: bool) -> Option<(u64, u64, u64)> {
        // Relaxed throughout: the bits are statistics; a race at most mislabels one call.
        let i = self.head.fetch_add(1, Ordering::Relaxed);
        let pos = i % size;
        let (word, bit) = ((pos / 64) as usize, 1u64 << (pos % 64));
        Self::set_bit(&self.failed[word], bit, failed);
        Self::set_bit(&self.slow[word], bit, slow);
        if !(failed || slow || i + 1 == minimum as u64) {
            return None;
        }
        let (_, f, s) = self.counts(size);
        Some(((i + 1).min(size), f, s))
    }

    fn set_bit(word: &AtomicU64, bit: u64, on: bool) {
        let current = word.load(Ordering::Relaxed);
        if (current & bit != 0) != on {
            if on {
                word.fetch_or(bit, Ordering::Relaxed);
            } else {
                word.fetch_and(!bit, Ordering::Relaxed);
            }
        }
    }

    fn counts(&self, size: u64) -> (u64, u64, u64) {
        let words = size.div_ceil(64) as usize;
        let ones = |bits: &[AtomicU64]| {
            bits[..words].iter().map(|w| w.load(Ordering::Relaxed).count_ones() as u64).sum()
        };
        let calls = self.head.load(Ordering::Relaxed).min(size);
        (calls, ones(&self.failed), ones(&self.slow))
    }

    fn clear(&self) {
        for w in self.failed.iter().chain(self.slow.iter()) {
            w.store(0, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
    }
}

impl TimeWindow {
    fn record(&self, now: u64, failed: bool, slow: bool) -> (u64, u64, u64) {
        // Acquire: pairs with the Release store ending `fold`.
        if now >= self.next_fold.load(Ordering::Acquire) {
            let _ = self.ring.try_with(|r| self.fold(r, now));
        }
        self.pending_calls.fetch_add(1, Ordering::Relaxed);
        if failed || slow {
            self.pending_bad.fetch_add(failed as u64 | (slow as u64) << 32, Ordering::Relaxed);
        }
        self.counts()
    }

    fn counts(&self) -> (u64, u64, u64) {
        let calls = self.calls.load(Ordering::Relaxed) + self.pending_calls.load(Ordering::Relaxed);
        let (bad, pending) =
            (self.bad.load(Ordering::Relaxed), self.pending_bad.load(Ordering::Relaxed));
        (calls, (bad & HALF) + (pending & HALF), (bad >> 32) + (pending >> 32))
    }

    fn fold(&self, r: &mut TimeRing, now: u64) {
        let epoch = now / self.width;
        if !r.started {
            r.started = true;
            r.epoch = epoch;
        }
        // Acquire: the increments we fold happened before the swap.
        let calls = self.pending_calls.swap(0, Ordering::Acquire);
        let bad = self.pending_bad.swap(0, Ordering::Acquire);
        let n = TIME_BUCKETS as u64;
        let b = &mut r.buckets[(r.epoch % n) as usize];
        *b = (b.0 + calls, b.1.saturating_add(bad as u32), b.2.saturating_add((bad >> 32) as u32));
        r.calls += calls;
        r.failed += bad & HALF;
        r.slow += bad >> 32;
        if epoch > r.epoch && epoch >= n {
            let last_expired = (epoch - n).min(r.epoch);
            let mut e = r.epoch.saturating_sub(n - 1);
            while e <= last_expired {
                let b = &mut r.buckets[(e % n) as usize];
                r.calls -= b.0;
                r.failed -= b.1 as u64;
                r.slow -= b.2 as u64;
                *b = (0, 0, 0);
                e += 1;
            }
        }
        r.epoch = r.epoch.max(epoch);
        self.publish(r);
        // Release: pairs with the Acquire load in `record`.
        self.next_fold
            .store(r.epoch.saturating_add(1).saturating_mul(self.width), Ordering::Release);
    }

    fn publish(&self, r: &TimeRing) {
        self.calls.store(r.calls, Ordering::Relaxed);
        self.bad.store(r.failed.min(HALF) | r.slow.min(HALF) << 32, Ordering::Relaxed);
    }

    fn clear(&self) -> bool {
        self.ring
            .try_with(|r| {
                r.buckets = [(0, 0, 0); TIME_BUCKETS];
                (r.calls, r.failed, r.slow) = (0, 0, 0);
                // Acquire: as in `fold`.
                self.pending_calls.swap(0, Ordering::Acquire);
                self.pending_bad.swap(0, Ordering::Acquire);
                self.publish(r);
            })
            .is_some()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn config(window: BreakerWindow) -> CircuitBreakerConfig {
        CircuitBreakerConfig {
            window,
            minimum_calls: 10,
            open_duration: 10 * SEC,
            open_jitter: 0.0,
            half_open_probes: 2,
            probe_lease: 5 * SEC,
            ramp_duration: 0,
            slow_call_duration: SEC,
            ..CircuitBreakerConfig::default()
        }
    }

    fn call(b: &CircuitBreaker, now: u64, outcome: Outcome, latency: u64) -> bool {
        match b.try_acquire(now) {
            Ok(p) => {
                b.record(p, now, outcome, latency);
                true
            }
            Err(_) => false,
        }
    }

    #[test]
    fn minimum_calls_then_failure_rate_trips() {
        for window in [BreakerWindow::Count(20), BreakerWindow::Time(10 * SEC)] {
            let b = CircuitBreaker::new(config(window)).unwrap();
            let now = 1000 * SEC;
            // 9 failures: 100 % but under the minimum of 10 calls.
            for _ in 0..9 {
                assert!(call(&b, now, Outcome::Dropped, MS));
            }
            assert_eq!(b.state(now), BreakerState::Closed);
            // The 10th call is a success: 9/10 ≥ 50 %, minimum reached.
            assert!(call(&b, now, Outcome::Success, MS));
            assert_eq!(b.state(now), BreakerState::Open, "{window:?}");
            let m = b.metrics(now);
            assert_eq!((m.opened, m.open_remaining, m.admit_permille), (1, 10 * SEC, 0));
        }
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn healthy_traffic_below_threshold_stays_closed() {
        for window in [BreakerWindow::Count(20), BreakerWindow::Time(10 * SEC)] {
            let b = CircuitBreaker::new(config(window)).unwrap();
            let mut now = 1000 * SEC;
            for i in 0..1000 {
                // 30 % failures: no run of 10 or more calls reaches 50 %.
                let outcome = if i % 10 < 3 { Outcome::Dropped } else { Outcome::Success };
                assert!(call(&b, now, outcome, MS), "{window:?} {i}");
                now += 10 * MS;
            }
            let m = b.metrics(now);
            assert_eq!(m.state, BreakerState::Closed);
            assert!(m.window_calls >= 20 && m.window_failures * 10 == m.window_calls * 3, "{m:?}");
        }
    }

    #[test]
    fn slow_calls_trip_on_their_own_threshold() {
        let cfg = CircuitBreakerConfig {
            slow_call_rate_threshold: 0.8,
            ..config(BreakerWindow::Count(10))
        };
        let b = CircuitBreaker::new(cfg).unwrap();
        let now = 50 * SEC;
        for _ in 0..7 {
            call(&b, now, Outcome::Success, 2 * SEC);
        }
        for _ in 0..3 {
            call(&b, now, Outcome::Success, MS);
        }
        assert_eq!(b.state(now), BreakerState::Closed); // 70 % slow
                                                        // The ring replaces the 7 slow calls with 7 slow calls: still 70 %.
        for _ in 0..7 {
            call(&b, now, Outcome::Success, SEC);
        }
        assert_eq!(b.state(now), BreakerState::Closed);
        // The next slow call replaces a fast one: 80 %.
        call(&b, now, Outcome::Success, SEC);
        assert_eq!(b.state(now), BreakerState::Open);
        assert_eq!(b.metrics(now).window_failures, 0);
    }

    fn tripped(cfg: CircuitBreakerConfig, now: u64) -> CircuitBreaker {
        let b = CircuitBreaker::new(cfg).unwrap();
        while b.state(now) != BreakerState::Open {
            assert!(call(&b, now, Outcome::Dropped, MS));
        }
        b
    }

    #[test]
    fn only_n_probes_then_close_on_success() {
        let t0 = 100 * SEC;
        let b = tripped(config(BreakerWindow::Count(20)), t0);
        let refused = b.try_acquire(t0 + 4 * SEC).unwrap_err();
        assert_eq!((refused.reason, refused.retry_after), (Reason::BreakerOpen, 6 * SEC));
        let t1 = t0 + 10 * SEC;
        let p1 = b.try_acquire(t1).unwrap();
        let p2 = b.try_acquire(t1).unwrap();
        assert!(p1.is_probe() && p2.is_probe());
        for _ in 0..100 {
            let refused = b.try_acquire(t1).unwrap_err();
            assert_eq!(refused.retry_after, 5 * SEC); // the leases' end
        }
        b.record(p1, t1, Outcome::Success, MS);
        assert_eq!(b.state(t1), BreakerState::HalfOpen);
        b.record(p2, t1, Outcome::Success, MS);
        let m = b.metrics(t1);
        assert_eq!(
            (m.state, m.opened, m.half_opened, m.closed, m.probes),
            (BreakerState::Closed, 1, 1, 1, 2)
        );
        // The window was cleared: a fresh start.
        assert_eq!(m.window_calls, 0);
        assert!(call(&b, t1, Outcome::Dropped, MS));
        assert_eq!(b.state(t1), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_reopens_at_once() {
        let t0 = 100 * SEC;
        let b = tripped(config(BreakerWindow::Count(20)), t0);
        let t1 = t0 + 10 * SEC;
        let p1 = b.try_acquire(t1).unwrap();
        let p2 = b.try_acquire(t1).unwrap();
        // One failure of two probes is 50 %: the threshold is reached whatever p2 says.
        b.record(p1, t1, Outcome::Dropped, MS);
        assert_eq!(b.state(t1), BreakerState::Open);
        // p2's late report belongs to the old phase.
        b.record(p2, t1, Outcome::Success, MS);
        let m = b.metrics(t1);
        assert_eq!((m.state, m.opened, m.stale_records), (BreakerState::Open, 2, 1));
    }

    #[test]
    fn a_lost_probe_frees_its_slot_when_the_lease_ends() {
        let t0 = 100 * SEC;
        let b = tripped(config(BreakerWindow::Count(20)), t0);
        let t1 = t0 + 10 * SEC;
        let lost = b.try_acquire(t1).unwrap();
        let p2 = b.try_acquire(t1).unwrap();
        b.record(p2, t1, Outcome::Success, MS);
        assert!(b.try_acquire(t1 + 4 * SEC).is_err());
        // The lease (5 s) ends: the slot goes to a new caller, so half-open cannot stick.
        let p3 = b.try_acquire(t1 + 5 * SEC).unwrap();
        b.record(lost, t1 + 6 * SEC, Outcome::Dropped, MS); // too late: ignored
        assert_eq!(b.state(t1 + 6 * SEC), BreakerState::HalfOpen);
        b.record(p3, t1 + 6 * SEC, Outcome::Success, MS);
        assert_eq!(b.state(t1 + 6 * SEC), BreakerState::Closed);
        assert_eq!(b.metrics(t1).stale_records, 1);
    }

    #[test]
    fn an_ignored_probe_gives_its_slot_back() {
        let t0 = 100 * SEC;
        let b = tripped(
            CircuitBreakerConfig { half_open_probes: 1, ..config(BreakerWindow::Count(20)) },
            t0,
        );
        let t1 = t0 + 10 * SEC;
        let p = b.try_acquire(t1).unwrap();
        assert!(b.try_acquire(t1).is_err());
        b.record(p, t1, Outcome::Ignored, MS);
        let p = b.try_acquire(t1).unwrap();
        b.record(p, t1, Outcome::Success, MS);
        assert_eq!(b.state(t1), BreakerState::Closed);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn ramp_admits_10_25_50_then_all() {
        let cfg = CircuitBreakerConfig {
            ramp_duration: 30 * SEC,
            half_open_probes: 1,
            ..config(BreakerWindow::Count(20))
        };
        let t0 = 100 * SEC;
        let b = tripped(cfg, t0);
        let t1 = t0 + 10 * SEC;
        let p = b.try_acquire(t1).unwrap();
        b.record(p, t1, Outcome::Success, MS);
        assert_eq!(b.state(t1), BreakerState::Ramping);
        for (offset, expect) in [(0, 100), (10 * SEC, 250), (20 * SEC, 500), (30 * SEC, 1000)] {
            let now = t1 + offset;
            let mut admitted = 0u32;
            for _ in 0..1000 {
                match b.try_acquire(now) {
                    Ok(p) => {
                        admitted += 1;
                        b.record(p, now, Outcome::Success, MS);
                    }
                    Err(e) => {
                        assert_eq!(e.reason, Reason::BreakerOpen);
                        assert_eq!(e.retry_after, 10 * SEC - offset % (10 * SEC));
                    }
                }
            }
            assert!(admitted.abs_diff(expect) <= 1, "at +{offset}: {admitted}");
            assert_eq!(b.metrics(now).admit_permille, expect);
        }
        assert_eq!(b.state(t1 + 30 * SEC), BreakerState::Closed);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn open_jitter_spreads_a_fleet() {
        let t0 = 100 * SEC;
        let mut ends = [0u64; 50];
        for (seed, end) in ends.iter_mut().enumerate() {
            let cfg = CircuitBreakerConfig {
                open_jitter: 0.5,
                seed: seed as u64,
                ..config(BreakerWindow::Count(20))
            };
            let b = tripped(cfg, t0);
            *end = b.metrics(t0).open_remaining;
            assert!((10 * SEC..=15 * SEC).contains(end), "{end}");
        }
        ends.sort_unstable();
        // 50 breakers tripped at the same instant probe at well-spread times.
        assert!(ends[49] - ends[0] > 3 * SEC);
        let distinct = ends.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(distinct >= 45);
    }

    #[test]
    fn stale_permits_do_not_count() {
        let t0 = 100 * SEC;
        let b = CircuitBreaker::new(config(BreakerWindow::Count(20))).unwrap();
        let old = b.try_acquire(t0).unwrap();
        while b.state(t0) != BreakerState::Open {
            call(&b, t0, Outcome::Dropped, MS);
        }
        b.record(old, t0, Outcome::Dropped, MS);
        assert_eq!(b.metrics(t0).stale_records, 1);
    }

    #[test]
    fn time_window_forgets_old_failures() {
        let b = CircuitBreaker::new(config(BreakerWindow::Time(10 * SEC))).unwrap();
        let t0 = 1000 * SEC;
        for _ in 0..8 {
            call(&b, t0, Outcome::Dropped, MS);
        }
        // 10 s later those 8 failures have left the window.
        let t1 = t0 + 11 * SEC;
        for _ in 0..8 {
            call(&b, t1, Outcome::Success, MS);
        }
        call(&b, t1, Outcome::Dropped, MS);
        call(&b, t1, Outcome::Dropped, MS);
        let m = b.metrics(t1);
        assert_eq!((m.state, m.window_calls, m.window_failures), (BreakerState::Closed, 10, 2));
    }

    #[test]
    fn time_goes_backwards_safely() {
        let t0 = 100 * SEC;
        let b = tripped(config(BreakerWindow::Count(20)), t0);
        let refused = b.try_acquire(t0 - 50 * SEC).unwrap_err();
        assert_eq!(refused.retry_after, 60 * SEC);
        assert_eq!(b.state(t0 - 50 * SEC), BreakerState::Open);
    }

    #[test]
    fn bad_configs_are_refused() {
        let ok = CircuitBreakerConfig::default();
        for bad in [
            CircuitBreakerConfig { window: BreakerWindow::Count(0), ..ok },
            CircuitBreakerConfig { window: BreakerWindow::Count(MAX_COUNT_WINDOW + 1), ..ok },
            CircuitBreakerConfig { window: BreakerWindow::Count(50), ..ok }, // minimum 100 > 50
            CircuitBreakerConfig { window: BreakerWindow::Time(MS), ..ok },
            CircuitBreakerConfig { failure_rate_threshold: 0.0, ..ok },
            CircuitBreakerConfig { failure_rate_threshold: f64::NAN, ..ok },
            CircuitBreakerConfig { slow_call_rate_threshold: 1.5, ..ok },
            CircuitBreakerConfig { open_jitter: -0.1, ..ok },
            CircuitBreakerConfig { slow_call_duration: 0, ..ok },
            CircuitBreakerConfig { minimum_calls: 0, ..ok },
            CircuitBreakerConfig { open_duration: 0, ..ok },
            CircuitBreakerConfig { open_duration: MAX_DURATION + 1, ..ok },
            CircuitBreakerConfig { half_open_probes: 0, ..ok },
            CircuitBreakerConfig { half_open_probes: MAX_PROBES + 1, ..ok },
            CircuitBreakerConfig { probe_lease: 0, ..ok },
            CircuitBreakerConfig { ramp_duration: MAX_DURATION + 1, ..ok },
        ] {
            assert!(CircuitBreaker::new(bad).is_err(), "{bad:?}");
        }
        assert!(CircuitBreaker::new(ok).is_ok());
    }
}
