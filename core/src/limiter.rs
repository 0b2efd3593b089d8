//! The lock-free, exact, priority-aware concurrency [`Limiter`].

use crate::limit::{Algorithm, AlgorithmConfig, AnyAlgorithm, Window};
use crate::stats::{AtomicLatencyHistogram, LatencyCursor, BUCKETS};
use crate::sync::{fence, next_instance_id, AtomicBool, AtomicU32, AtomicU64, Exclusive, Ordering};
use crate::time::{check_now, AtomicMonotonic, MAX_NOW, MS, SEC};
use crate::types::check_range;
use crate::{ConfigError, Outcome, Priority, Reason, Rejected, UsageError};

const LEVELS: usize = Priority::MAX_LEVELS;

/// Low 32 bits of the admission word: requests in flight.
const INFLIGHT_MASK: u64 = 0xFFFF_FFFF;
/// Bits 32..=62 of the admission word: the whole-number limit (slots).
const SLOTS_SHIFT: u32 = 32;
const SLOTS_MASK: u64 = 0x7FFF_FFFF << SLOTS_SHIFT;
/// Bit 63: the limit is below 1, so one request at a time with idle time between them.
/// The limit is then one slot, and bits 32..=62 hold a release generation instead.
const FRACTIONAL_BIT: u64 = 1 << 63;
/// Under a fractional limit: bits 32..=62 count releases (wrapping), so an admission CAS
/// that read the idle deadline fails if any release published a newer one since.
const GEN_MASK: u64 = SLOTS_MASK;
/// One release in the generation field.
const GEN_ONE: u64 = 1 << SLOTS_SHIFT;
/// The most slots a limit can have.
pub const MAX_SLOTS: u32 = 0x7FFF_FFFF;
/// `pinned` value meaning "no static limit" (a NaN bit pattern no finite limit has).
const NO_PIN: u64 = u64::MAX;
/// A level's last-arrival stamp is refreshed at most this often (saves stores).
const SEEN_GRANULARITY: u64 = MS;
/// How far the limiter's clock may trail the latest accepted `now`: it is written at most
/// once per millisecond (a load on the hot paths, a rare `fetch_max`).
const CLOCK_GRANULARITY: u64 = MS;

/// How a [`Limiter`] is built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimiterConfig {
    /// The limit algorithm (default: [`AlgorithmConfig::default`]).
    pub algorithm: AlgorithmConfig,
    /// Priority levels in use, 1..=8 (default 3: critical, normal, background).
    pub levels: u8,
    /// Each level's share: the most of the limit it may hold back for itself while
    /// active (its reservation follows its recent peak demand, capped by the share; see
    /// [`Limiter`]); the sum must not exceed 1. Default 0.7 / 0.25 / 0.05. A share is a
    /// ceiling, not an allotment: a level holds back only its recent peak plus one slot,
    /// so at healthy load the weights refuse nothing. They matter under overload,
    /// when a level's demand is high: critical work may then keep up to 70% of the limit
    /// from less important work, normal work a quarter from background work. The least
    /// important level's share holds nothing back (no level is below it).
    pub weights: [f64; LEVELS],
    /// A window is at least this long (default 100 ms).
    pub min_window_ns: u64,
    /// ... and at most this long (default 1 s), whatever the latency.
    pub max_window_ns: u64,
    /// Window length = this × the previous window's smallest latency, clamped to
    /// `[min_window_ns, max_window_ns]` (Netflix WindowedLimit uses 2).
    pub window_rtt_multiple: f64,
    /// A window closes only with at least this many samples, or any drop (default 10,
    /// Netflix WindowedLimit's minimum).
    pub min_samples: u32,
    /// A level counts as active (its unused reservation is held back, not lent) while it
    /// saw an arrival within this long (default 1 s).
    pub active_ns: u64,
}

impl Default for LimiterConfig {
    fn default() -> Self {
        let mut weights = [0.0; LEVELS];
        weights[..3].copy_from_slice(&[0.7, 0.25, 0.05]);
        Self {
            algorithm: AlgorithmConfig::default(),
            levels: 3,
            weights,
            min_window_ns: 100 * MS,
            max_window_ns: SEC,
            window_rtt_multiple: 2.0,
            min_samples: 10,
            active_ns: SEC,
        }
    }
}

impl LimiterConfig {
    /// A config using `algorithm` and the other defaults.
    pub fn with_algorithm(algorithm: AlgorithmConfig) -> Self {
        Self { algorithm, ..Self::default() }
    }

    /// Checks every field; `Limiter::new` calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.levels == 0 || self.levels as usize > LEVELS {
            return Err(ConfigError::out_of_range("limiter.levels"));
        }
        let mut sum = 0.0;
        for &w in &self.weights[..self.levels as usize] {
            sum += check_range(w, 0.0, 1.0, "limiter.weights")?;
        }
        if sum > 1.0 + 1e-9 {
            return Err(ConfigError::inconsistent_alone(
                "limiter.weights",
                "the levels in use sum above 1",
            ));
        }
        if self.max_window_ns == 0 || self.max_window_ns > 3600 * SEC {
            return Err(ConfigError::out_of_range("limiter.max_window_ns"));
        }
        if self.min_window_ns > self.max_window_ns {
            return Err(ConfigError::inconsistent(
                "limiter.min_window_ns",
                "must not be above",
                "limiter.max_window_ns",
            ));
        }
        check_range(self.window_rtt_multiple, 0.0, 1e6, "limiter.window_rtt_multiple")?;
        if self.min_samples > 1_000_000 {
            return Err(ConfigError::out_of_range("limiter.min_samples"));
        }
        if self.active_ns == 0 {
            return Err(ConfigError::out_of_range("limiter.active_ns"));
        }
        Ok(())
    }
}

/// What only the window folder touches (inside [`Exclusive`]).
#[derive(Debug)]
#[repr(C)]
struct FoldState {
    algorithm: AnyAlgorithm,
    cursor: LatencyCursor,
    prev_drops: u64,
}

/// A concurrency limiter: admits work while in-flight is below an adaptive limit, learns
/// the limit from completions, and splits it between priority levels.
///
/// ```
/// use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};
/// use surgeguard_core::limit::{AlgorithmConfig, AimdConfig};
///
/// let limiter = Limiter::new(LimiterConfig::with_algorithm(
///     AlgorithmConfig::Aimd(AimdConfig::default()),
/// )).unwrap();
/// let now = 1_000_000; // ns, from your monotonic clock
/// match limiter.try_acquire(now, Priority::NORMAL) {
///     Ok(permit) => {
///         // ... call the dependency ...
///         permit.release(now + 3_000_000, Outcome::Success); // latency 3 ms
///     }
///     Err(rejected) => {
///         // shed: answer 503 with Retry-After = rejected.retry_after
///         let _ = rejected;
///     }
/// }
/// assert_eq!(limiter.inflight(), 0);
/// ```
///
/// **Exact.** In-flight and the whole-number limit share one atomic word; a request is
/// admitted only by a compare-and-swap that sees `in_flight < limit`, so admissions never
/// exceed the limit, not even in a race (Netflix's partitioned limiter and Envoy over-admit
/// by up to the number of threads). When the limit falls below in-flight, admissions
/// stop until enough permits return.
///
/// **Partitions** (work-conserving, with a reservation that follows demand). Level `p`'s
/// *share* is `g[p] = floor(limit × weights[p])`: the most it may hold back for itself.
/// Its *demand* `d[p]` is the most it recently held, or was refused at (`held + 1`);
/// at each window it decays by a quarter toward what the level holds,
/// `max(held, d − ⌈d/4⌉)`. A level is *active* while it saw an arrival (admitted, refused,
/// or held by a queue through [`note_arrival`](Self::note_arrival)) within `active_ns`.
/// An active level reserves what it does not use of its *target*
/// `t[q] = min(g[q], d[q] + 1)` (its recent peak plus one slot):
/// `r[q] = max(0, t[q] − in_flight[q])`. An arrival at level `p` is admitted iff
/// `in_flight + Σ_{q more important than p, q active} r[q] < limit`. So:
/// - the limit is exact: nothing is admitted while `in_flight ≥ limit`;
/// - the most important level is refused only when every slot is taken, and any level
///   is refused with slots free only for the headroom of a more important level that is
///   active: a light critical flow (a peak of 2 in flight) holds back 3 slots, not 70% of
///   the limit, and an idle level (no arrival for `active_ns`) holds back nothing;
/// - **the bound.** Every admission of a level less important than `p` leaves at least
///   `Σ_{q ≤ p, q active} r[q]` slots free (the rule above, read at that instant). So an
///   arrival at level `p` holding fewer than its target `t[p]` is admitted at once unless
///   (a) a more important level holds more than its own target, or (b) less important
///   work admitted before `p`'s target last rose (by its demand, its activity, or the
///   limit) still holds slots. However long less important work keeps slots taken while
///   `p`'s target stands, it never makes `p` wait below that target. Beyond it, `p` waits
///   only for the next release: a refused arrival raises `d[p]` to what it holds plus one
///   (so its target grows with each refusal), and the [`Gate`](crate::gate) queues it and
///   hands it the next freed slot ahead of every less important waiter.
///
/// The price: a burst of important work beyond its recent peak plus one, while less
/// important work fills the limit, waits for releases (it gets each freed slot first);
/// holding back a level's whole share while it is active never made it wait below its
/// share, but refused less important work with most of the limit idle (a light critical
/// flow reserved 70% of the limit by default). A refusal for a reservation while slots
/// are free counts as demand: the window that saw it reports the whole limit as used, so
/// the adaptive limit is not held back as app-limited. Per-level counts are updated next
/// to the exact total (acquire: total then level; release: level then total), so a
/// concurrent reader sees reservations that err on the safe side. Demands and shares are
/// in the metrics.
///
/// **Fractional limits.** A limit `L < 1` admits one request at a time and, after each
/// completion (`Success` or `Dropped`) of latency `r`, stays idle for `r·(1/L − 1)`: the
/// dependency is busy `L` of the time. An arrival inside the idle period is refused with
/// `retry_after` = the idle time left. No admission ever happens inside an idle period,
/// under any interleaving: a release publishes the idle deadline *before* it frees the
/// slot, and under a fractional limit the admission word carries a release generation
/// (in place of the slot count), so an admission CAS that read an older deadline fails.
/// (Should 2^31 releases wrap the generation between one acquirer's two steps, a check
/// after its CAS gives the slot back.)
///
/// **Windows.** Latencies are recorded into an [`AtomicLatencyHistogram`] (a log-linear
/// histogram with the exact latency sum; below ~2.1 ms one `fetch_add` records both) and
/// drops into a cumulative counter. When a window is due, whichever releasing thread wins
/// a compare-and-swap folds it: it collects what was recorded since the last fold (each
/// sample exactly once across a roll-over), feeds the [`Window`] to the algorithm and
/// publishes the new limit. A window closes after `clamp(window_rtt_multiple × min
/// latency, min_window_ns, max_window_ns)` and at least `min_samples` samples (or a drop).
///
/// **Progress.** `try_acquire` is lock-free (one CAS loop that retries only when another
/// thread changed the word); release is wait-free (lock-free under a fractional limit:
/// a CAS loop that frees the slot and bumps the generation) plus, once per window, one fold by the
/// CAS winner (bounded work: one pass over the histogram); nobody ever waits for the
/// folder. **Cost**: uncontended single-level acquire + release with a sample below
/// ~2.1 ms is three atomic read-modify-writes (the admission CAS, the in-flight decrement,
/// the sample); a larger sample adds one, and more than one level adds two (the level's
/// in-flight count, up and down). See BENCHMARKS.md.
///
/// **Time** is the caller's `now` in ns. A latency is never negative (`now` before the
/// permit's start counts as 0), and windows never close backwards.
///
/// **Placeable** ([`Placeable`](crate::layout::Placeable)): `#[repr(C)]`, no pointers, so
/// it may live in memory shared between processes when every process passes `now` from
/// the same clock (raw `CLOCK_MONOTONIC`). Two caveats there: the algorithm's state inside
/// the fold cell is a Rust enum (its encoding is pinned only by building both sides with
/// the same compiler, which the segment header checks), and a process killed *inside* a
/// fold (once per window, bounded work) leaves the fold taken, so the limit stops adapting
/// (admission and release go on).
#[derive(Debug)]
#[repr(C)]
pub struct Limiter {
    id: u32,
    levels: u8,
    weights: [f64; LEVELS],
    min_window_ns: u64,
    max_window_ns: u64,
    window_rtt_multiple: f64,
    min_samples: u32,
    active_ns: u64,
    /// The algorithm's code (`limit::ALGORITHM_NAMES`): a code, not a `&'static str`, so
    /// the limiter holds no pointer and may live in memory shared between processes.
    algorithm_code: u8,
    /// `in_flight | slots << 32 | fractional << 63`.
    state: AtomicU64,
    level_inflight: [AtomicU32; LEVELS],
    level_share: [AtomicU32; LEVELS],
    level_seen: [AtomicU64; LEVELS],
    level_demand: [AtomicU32; LEVELS],
    rejected: [AtomicU64; LEVELS],
    limit_bits: AtomicU64,
    pinned_bits: AtomicU64,
    publish_pending: AtomicBool,
    idle_until: AtomicU64,
    /// The last generation `publish` saw in the word under a fractional limit (only
    /// `publish` touches it, one at a time).
    last_generation: AtomicU64,
    next_fold: AtomicU64,
    max_inflight: AtomicU32,
    hist: AtomicLatencyHistogram,
    drops: AtomicU64,
    ignored: AtomicU64,
    windows: AtomicU64,
    folded_samples: AtomicU64,
    last_min_ns: AtomicU64,
    last_avg_ns: AtomicU64,
    last_p99_ns: AtomicU64,
    clock: AtomicMonotonic,
    fold: Exclusive<FoldState>,
}

// The layout other processes rely on (see `layout`).
const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<AtomicMonotonic>() == 8 && align_of::<AtomicMonotonic>() == 8);
    assert!(align_of::<Limiter>() >= 8 && size_of::<Limiter>() % align_of::<Limiter>() == 0);
};

// SAFETY: `#[repr(C)]` (the fold state too), no pointers (the algorithm is a code, not a
// `&'static str`) and no `Drop`. The config fields are written once, before publication;
// afterwards only atomics change (integers, `f64` bits, and `publish_pending`, only ever
// stored `false`/`true`), plus the fold state through the one-at-a-time `Exclusive` cell.
// LAYOUT covers every field's offset and the sizes of the nested types. What it cannot see
// is the encoding of the algorithm enum and its `Option`s inside the fold state: a segment
// holding a `Limiter` also checks that every attacher was built by the same compiler.
#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unsafe_code)]
unsafe impl crate::layout::Placeable for Limiter {
    const LAYOUT: u64 = {
        use core::mem::{align_of, offset_of, size_of};
        crate::layout::fingerprint(
            "surgeguard_core::Limiter/2",
            &[
                size_of::<Self>() as u64,
                align_of::<Self>() as u64,
                size_of::<AtomicLatencyHistogram>() as u64,
                size_of::<FoldState>() as u64,
                size_of::<AnyAlgorithm>() as u64,
                size_of::<Exclusive<FoldState>>() as u64,
                offset_of!(FoldState, algorithm) as u64,
                offset_of!(FoldState, cursor) as u64,
                offset_of!(FoldState, prev_drops) as u64,
                LEVELS as u64,
                BUCKETS as u64,
                offset_of!(Self, id) as u64,
                offset_of!(Self, levels) as u64,
                offset_of!(Self, weights) as u64,
                offset_of!(Self, min_window_ns) as u64,
                offset_of!(Self, max_window_ns) as u64,
                offset_of!(Self, window_rtt_multiple) as u64,
                offset_of!(Self, min_samples) as u64,
                offset_of!(Self, active_ns) as u64,
                offset_of!(Self, algorithm_code) as u64,
                offset_of!(Self, state) as u64,
                offset_of!(Self, level_inflight) as u64,
                offset_of!(Self, level_share) as u64,
                offset_of!(Self, level_seen) as u64,
                offset_of!(Self, level_demand) as u64,
                offset_of!(Self, rejected) as u64,
                offset_of!(Self, limit_bits) as u64,
                offset_of!(Self, pinned_bits) as u64,
                offset_of!(Self, publish_pending) as u64,
                offset_of!(Self, idle_until) as u64,
                offset_of!(Self, last_generation) as u64,
                offset_of!(Self, next_fold) as u64,
                offset_of!(Self, max_inflight) as u64,
                offset_of!(Self, hist) as u64,
                offset_of!(Self, drops) as u64,
                offset_of!(Self, ignored) as u64,
                offset_of!(Self, windows) as u64,
                offset_of!(Self, folded_samples) as u64,
                offset_of!(Self, last_min_ns) as u64,
                offset_of!(Self, last_avg_ns) as u64,
                offset_of!(Self, last_p99_ns) as u64,
                offset_of!(Self, clock) as u64,
                offset_of!(Self, fold) as u64,
            ],
        )
    };

    #[inline]
    fn fold_cells<'a>(&'a self, f: &mut dyn FnMut(crate::layout::FoldCell<'a>)) {
        f(crate::layout::FoldCell(self.fold.flag()));
    }
}

/// An admission, released exactly once by [`Permit::release`] (or as
/// [`Outcome::Ignored`] when dropped unreleased). It cannot be copied, so it cannot be
/// released twice.
#[must_use = "a permit holds a slot until released"]
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    raw: Option<RawPermit>,
}

/// A permit detached from the limiter's lifetime, for bindings that keep it in their
/// own objects. Move-only: release it with [`Limiter::release_raw`] exactly once.
///
/// **A dropped `RawPermit` is a lost slot**, so dropping one is loud: it adds one to the
/// process-wide [`leaked_permits`] counter (always), and with the `std` feature in a
/// debug build it also panics, unless the thread is already panicking (so a panic that
/// unwinds past a held permit is not turned into an abort). Without `std` the core cannot
/// ask whether it is unwinding, so there only the counter is kept. Rust code that wants
/// release-on-drop holds a [`Permit`] instead. `release_raw` consumes the permit without
/// counting it, also when it refuses it.
#[must_use = "a permit holds a slot until released"]
#[derive(Debug, PartialEq, Eq)]
pub struct RawPermit {
    owner: u32,
    level: u8,
    started_at: u64,
}

// A plain process-wide counter, not shared state of any structure: a `core` atomic even
// under loom (as `sync::next_instance_id`), the `sync` shim's otherwise.
#[cfg(loom)]
use core::sync::atomic::AtomicU64 as CounterU64;
#[cfg(not(loom))]
use AtomicU64 as CounterU64;
static LEAKED_PERMITS: CounterU64 = CounterU64::new(0);

/// How many [`RawPermit`]s were dropped without being released, in this process, ever
/// (each one a slot its limiter never gets back). Tests assert it stays put.
pub fn leaked_permits() -> u64 {
    LEAKED_PERMITS.load(Ordering::Relaxed)
}

impl Drop for RawPermit {
    fn drop(&mut self) {
        LEAKED_PERMITS.fetch_add(1, Ordering::Relaxed);
        #[cfg(all(debug_assertions, feature = "std"))]
        if !std::thread::panicking() {
            panic!(
                "a RawPermit (level {}, started at {} ns) was dropped without release_raw: \
                 its slot is lost",
                self.level, self.started_at
            );
        }
    }
}

impl RawPermit {
    /// The level it was admitted at.
    pub fn level(&self) -> Priority {
        Priority::new(self.level).unwrap_or_default()
    }
    /// The `now` it was admitted at.
    pub fn started_at(&self) -> u64 {
        self.started_at
    }
}

impl<'a> Permit<'a> {
    /// Ends the work: a `Success` latency (`now − start`) becomes a sample, `Dropped`
    /// is an overload signal, `Ignored` just returns the slot. A `now` above
    /// [`MAX_NOW`](crate::time::MAX_NOW) acts at the latest time the limiter has seen.
    #[inline(always)]
    pub fn release(mut self, now: u64, outcome: Outcome) {
        if let Some(raw) = self.raw.take() {
            let now = match check_now(now) {
                Ok(now) => now,
                Err(_) => self.limiter.latest_now(&raw),
            };
            // Cannot fail: the permit came from this limiter and `now` is in range.
            let _ = self.limiter.release_raw(raw, now, outcome);
        }
    }

    /// Detaches the permit from the limiter's lifetime.
    #[must_use = "a permit holds a slot until released"]
    pub fn into_raw(mut self) -> RawPermit {
        self.raw.take().expect("a live permit always holds its raw part")
    }

    /// The level it was admitted at.
    pub fn level(&self) -> Priority {
        self.raw.as_ref().map(RawPermit::level).unwrap_or_default()
    }

    /// The `now` it was admitted at.
    pub fn started_at(&self) -> u64 {
        self.raw.as_ref().map_or(0, |r| r.started_at)
    }
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let now = self.limiter.latest_now(&raw);
            let _ = self.limiter.release_raw(raw, now, Outcome::Ignored);
        }
    }
}

/// A snapshot of a limiter's counters and gauges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimiterMetrics {
    /// The algorithm's name.
    pub algorithm: &'static str,
    /// The limit in force.
    pub limit: f64,
    /// The static limit pinned by the kill switch, if any.
    pub static_limit: Option<f64>,
    /// Requests in flight.
    pub inflight: u32,
    /// Levels in use.
    pub levels: u8,
    /// In flight per level.
    pub inflight_by_level: [u32; LEVELS],
    /// Guaranteed share per level (`floor(limit × weight)`).
    pub share_by_level: [u32; LEVELS],
    /// Recent demand per level: the most it held, or was refused at for want of a slot
    /// (`held + 1`); at each window it decays to `max(held, d − ⌈d/4⌉)`. Informational:
    /// admission does not depend on it.
    pub demand_by_level: [u32; LEVELS],
    /// Admissions ever (= successes + drops + ignored + in flight).
    pub admitted: u64,
    /// Rejections ever (all `LimitReached`).
    pub rejected: u64,
    /// Rejections per level.
    pub rejected_by_level: [u64; LEVELS],
    /// `Success` releases (latency samples).
    pub successes: u64,
    /// `Dropped` releases.
    pub drops: u64,
    /// `Ignored` releases.
    pub ignored: u64,
    /// Windows folded into the algorithm.
    pub windows: u64,
    /// Latency samples those windows held (each success is folded exactly once).
    pub folded_samples: u64,
    /// Smallest latency of the last window (ns).
    pub min_rtt_ns: u64,
    /// Mean latency of the last window (ns).
    pub avg_rtt_ns: u64,
    /// p99 latency of the last window (ns).
    pub p99_rtt_ns: u64,
}

/// What an active level holds back for itself: its recent peak demand `d` plus one slot,
/// never more than its share `g`.
#[inline]
pub(crate) fn reservation_target(share: u32, demand: u32) -> u32 {
    demand.saturating_add(1).min(share)
}

fn slots_of(limit: f64) -> u64 {
    if limit >= MAX_SLOTS as f64 {
        MAX_SLOTS as u64
    } else if limit >= 1.0 {
        libm::floor(limit) as u64
    } else {
        1
    }
}

impl Limiter {
    /// Builds a limiter; every number in `config` is checked first.
    pub fn new(config: LimiterConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let algorithm = AnyAlgorithm::new(config.algorithm)?;
        let limit = algorithm.limit();
        let limiter = Self {
            id: next_instance_id(),
            levels: config.levels,
            weights: config.weights,
            min_window_ns: config.min_window_ns,
            max_window_ns: config.max_window_ns,
            window_rtt_multiple: config.window_rtt_multiple,
            min_samples: config.min_samples,
            active_ns: config.active_ns,
            algorithm_code: algorithm.code(),
            state: AtomicU64::new(0),
            level_inflight: core::array::from_fn(|_| AtomicU32::new(0)),
            level_share: core::array::from_fn(|_| AtomicU32::new(0)),
            level_seen: core::array::from_fn(|_| AtomicU64::new(0)),
            level_demand: core::array::from_fn(|_| AtomicU32::new(0)),
            rejected: core::array::from_fn(|_| AtomicU64::new(0)),
            limit_bits: AtomicU64::new(0),
            pinned_bits: AtomicU64::new(NO_PIN),
            publish_pending: AtomicBool::new(false),
            idle_until: AtomicU64::new(0),
            last_generation: AtomicU64::new(0),
            next_fold: AtomicU64::new(0),
            max_inflight: AtomicU32::new(0),
            hist: AtomicLatencyHistogram::new(),
            drops: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            windows: AtomicU64::new(0),
            folded_samples: AtomicU64::new(0),
            last_min_ns: AtomicU64::new(0),
            last_avg_ns: AtomicU64::new(0),
            last_p99_ns: AtomicU64::new(0),
            clock: AtomicMonotonic::new(),
            fold: Exclusive::new(FoldState {
                algorithm,
                cursor: LatencyCursor::new(),
                prev_drops: 0,
            }),
        };
        limiter.publish(limit);
        Ok(limiter)
    }

    /// Admits one unit of work at `level`, or says why not. Levels beyond the configured
    /// ones count as the least important level.
    #[inline]
    #[must_use = "a permit holds a slot until released"]
    pub fn try_acquire(&self, now: u64, level: Priority) -> Result<Permit<'_>, Rejected> {
        self.try_acquire_raw(now, level).map(|raw| Permit { limiter: self, raw: Some(raw) })
    }

    /// [`try_acquire`](Self::try_acquire) returning a lifetime-free [`RawPermit`].
    // `inline(always)` here, on `release_raw` and `Permit::release`: the hot path is a few
    // dozen instructions around its atomic steps, and callers live in other crates (gate,
    // bindings, benches) where LLVM otherwise often keeps the calls. Cold parts (folding,
    // fractional idling) stay out of line.
    #[inline(always)]
    #[must_use = "a permit holds a slot until released"]
    pub fn try_acquire_raw(&self, now: u64, level: Priority) -> Result<RawPermit, Rejected> {
        let now = self.checked_now(now);
        let lvl = level.index().min(self.levels as usize - 1);
        let multi = self.levels > 1;
        if multi {
            self.note_arrival_at(now, lvl);
        }
        // Relaxed: the CAS below re-validates the word; admission orders no other memory
        // (under a fractional limit `idle_wait` adds the Acquire it needs).
        let mut word = self.state.load(Ordering::Relaxed);
        loop {
            let inflight = word & INFLIGHT_MASK;
            let fractional = word & FRACTIONAL_BIT != 0;
            let slots = if fractional { 1 } else { (word & SLOTS_MASK) >> SLOTS_SHIFT };
            let reserved = if multi && lvl > 0 { self.reserved_above(now, lvl) } else { 0 };
            if inflight + reserved >= slots {
                if multi {
                    // A refused arrival is demand too: it raises the level's reservation.
                    let want = self.level_inflight[lvl].load(Ordering::Relaxed) + 1;
                    self.level_demand[lvl].fetch_max(want, Ordering::Relaxed);
                    if inflight < slots {
                        // Refused for a reservation with slots free: the limit is in use
                        // (held or held back), so the window is not app-limited.
                        self.max_inflight.fetch_max(slots as u32, Ordering::Relaxed);
                    }
                }
                return Err(self.reject(now, lvl, inflight));
            }
            if fractional {
                if let Some(wait) = self.idle_wait(now) {
                    return Err(self.reject_for(lvl, wait));
                }
            }
            match self.state.compare_exchange_weak(
                word,
                word + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) if fractional && self.idle_wait(now).is_some() => {
                    // Only if 2^31 releases wrapped the generation between our reads:
                    // give the slot back rather than admit inside an idle period.
                    self.state.fetch_sub(1, Ordering::Relaxed);
                    let wait = self.idle_wait(now).unwrap_or(MS);
                    return Err(self.reject_for(lvl, wait));
                }
                Ok(_) => break,
                Err(actual) => word = actual,
            }
        }
        if multi {
            let held = self.level_inflight[lvl].fetch_add(1, Ordering::Relaxed) + 1;
            if held > self.level_demand[lvl].load(Ordering::Relaxed) {
                self.level_demand[lvl].fetch_max(held, Ordering::Relaxed);
            }
        }
        let inflight = ((word & INFLIGHT_MASK) + 1) as u32;
        if inflight > self.max_inflight.load(Ordering::Relaxed) {
            self.max_inflight.fetch_max(inflight, Ordering::Relaxed);
        }
        Ok(RawPermit { owner: self.id, level: lvl as u8, started_at: now })
    }

    /// Slots held back for the active levels more important than `lvl`: each reserves
    /// what it does not use of its target, `target(share, demand) − in_flight`.
    #[inline]
    fn reserved_above(&self, now: u64, lvl: usize) -> u64 {
        let mut reserved = 0u64;
        for q in 0..lvl {
            let seen = self.level_seen[q].load(Ordering::Relaxed);
            if seen != 0 && now.saturating_sub(seen) <= self.active_ns {
                let share = self.level_share[q].load(Ordering::Relaxed);
                let demand = self.level_demand[q].load(Ordering::Relaxed);
                let used = self.level_inflight[q].load(Ordering::Relaxed);
                reserved += reservation_target(share, demand).saturating_sub(used) as u64;
            }
        }
        reserved
    }

    /// At each window: a level's demand decays by a quarter toward what it holds now.
    fn decay_demand(&self) {
        for lvl in 0..self.levels as usize {
            let demand = self.level_demand[lvl].load(Ordering::Relaxed);
            let held = self.level_inflight[lvl].load(Ordering::Relaxed);
            let decayed = (demand - demand.div_ceil(4)).max(held);
            // A failed exchange means an admission raised the demand meanwhile: keep that.
            let _ = self.level_demand[lvl].compare_exchange(
                demand,
                decayed,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    fn reject(&self, now: u64, lvl: usize, inflight: u64) -> Rejected {
        // Expected wait for one slot: a mean latency spread over what is in flight.
        let avg = self.last_avg_ns.load(Ordering::Relaxed);
        let hint = avg.checked_div(inflight).unwrap_or(avg);
        let _ = now;
        self.reject_for(lvl, hint.max(MS))
    }

    fn reject_for(&self, lvl: usize, retry_after: u64) -> Rejected {
        self.rejected[lvl].fetch_add(1, Ordering::Relaxed);
        Rejected::new(Reason::LimitReached, retry_after)
    }

    /// The latest time seen (at least `permit`'s start), within the accepted range.
    fn latest_now(&self, permit: &RawPermit) -> u64 {
        self.clock.latest().max(permit.started_at).min(crate::time::MAX_NOW)
    }

    /// How to end an admission its caller abandoned (a client that went away, a cancelled
    /// task) at `now`: `Dropped` if it was held longer than the p99 latency of the last
    /// window, `Ignored` otherwise (and before any window). A caller that gave up after
    /// waiting longer than nearly every request of the last window took most likely timed
    /// out, which is the overload signal a drop carries; an earlier cancel says nothing
    /// about capacity. Without it, a slowdown in which every client times out before its
    /// answer leaves the limiter with no sample and no drop, and the limit never moves.
    pub fn abandoned_outcome(&self, permit: &RawPermit, now: u64) -> Outcome {
        self.abandoned_outcome_at(permit.started_at, now)
    }

    /// [`abandoned_outcome`](Self::abandoned_outcome) of a permit admitted at
    /// `started_at` (for permits the limiter did not issue as a [`RawPermit`], such as a
    /// shared gate's).
    pub fn abandoned_outcome_at(&self, started_at: u64, now: u64) -> Outcome {
        let p99 = self.last_p99_ns.load(Ordering::Relaxed);
        if p99 > 0 && now.saturating_sub(started_at) > p99 {
            Outcome::Dropped
        } else {
            Outcome::Ignored
        }
    }

    /// Whether `permit` was issued by this limiter.
    pub fn owns(&self, permit: &RawPermit) -> bool {
        permit.owner == self.id
    }

    /// Marks `level` active at `now` without admitting anything: a queue calls this for
    /// arrivals it holds, so their share is reserved while they wait.
    pub fn note_arrival(&self, now: u64, level: Priority) {
        if self.levels > 1 {
            let now = self.checked_now(now);
            self.note_arrival_at(now, level.index().min(self.levels as usize - 1));
        }
    }

    #[inline]
    fn note_arrival_at(&self, now: u64, lvl: usize) {
        let now = now.max(1); // 0 means "never seen"
        let seen = self.level_seen[lvl].load(Ordering::Relaxed);
        // A level never seen becomes active at its first arrival, whenever that is (the
        // granularity only spares rewriting a stamp that is already recent).
        if seen == 0 || now >= seen.saturating_add(SEEN_GRANULARITY) {
            self.level_seen[lvl].fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Ends an admission made by [`try_acquire_raw`](Self::try_acquire_raw). A permit of
    /// another limiter is refused with [`UsageError::ForeignHandle`]; a refusal changes
    /// nothing here, but the permit is consumed without being counted as leaked (a
    /// caller that may hold another limiter's permits checks [`owns`](Self::owns) first;
    /// the C ABI keeps its copy).
    #[inline(always)]
    pub fn release_raw(
        &self,
        permit: RawPermit,
        now: u64,
        outcome: Outcome,
    ) -> Result<(), UsageError> {
        // Consumed here on every path, refusals included: never counted as leaked.
        let permit = core::mem::ManuallyDrop::new(permit);
        if permit.owner != self.id {
            return Err(UsageError::ForeignHandle);
        }
        // A `now` above `time::MAX_NOW` is refused, but the permit was moved in: its slot
        // still comes back, as `Ignored` at the latest time recorded (no sample, idle
        // period or window comes from the bad value), so a bad time never leaks a slot.
        let (now, outcome, refused) = if now > MAX_NOW {
            let latest = self.clock.latest().max(permit.started_at).min(MAX_NOW);
            (latest, Outcome::Ignored, Err(UsageError::TimeOutOfRange))
        } else {
            (self.checked_now(now), outcome, Ok(()))
        };
        if self.levels > 1 {
            self.level_inflight[permit.level as usize].fetch_sub(1, Ordering::Relaxed);
        }
        let latency = now.saturating_sub(permit.started_at);
        // Relaxed: only the mode is read here; the slot is freed by an RMW below.
        if self.state.load(Ordering::Relaxed) & FRACTIONAL_BIT != 0 {
            self.release_fractional(now, latency, outcome);
        } else {
            // Relaxed: the count is the only thing this publishes; admissions re-check it
            // by CAS. (If a fractional limit was published since the load above, this
            // release ends work admitted under the whole-number limit: no idle time.)
            self.state.fetch_sub(1, Ordering::Relaxed);
        }
        match outcome {
            Outcome::Success => self.hist.record(latency),
            Outcome::Dropped => {
                self.drops.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Ignored => {
                self.ignored.fetch_add(1, Ordering::Relaxed);
            }
        }
        if outcome != Outcome::Ignored && now >= self.next_fold.load(Ordering::Relaxed) {
            self.try_fold(now);
        }
        refused
    }

    /// `now` if it is an accepted time, else the latest time recorded (a `now` above
    /// [`MAX_NOW`] is bad input and never moves the clock). The clock is written at most
    /// once per [`CLOCK_GRANULARITY`], so the hot paths read its line and rarely write it.
    #[inline(always)]
    fn checked_now(&self, now: u64) -> u64 {
        let latest = self.clock.latest();
        if now > MAX_NOW {
            return latest;
        }
        if now >= latest.saturating_add(CLOCK_GRANULARITY) {
            self.clock.observe(now);
        }
        now
    }

    /// The clamp of a structure built around this limiter that takes its time from the
    /// limiter's record instead of keeping a clock word of its own (the
    /// [`Gate`](crate::gate::Gate)): `max(now, recorded time)`, recording `now` at most once
    /// per [`CLOCK_GRANULARITY`] like the admission path; the recorded time for a `now`
    /// above [`MAX_NOW`] (which records nothing). A load, and a rare `fetch_max`.
    #[inline(always)]
    pub(crate) fn observe_time(&self, now: u64) -> u64 {
        let latest = self.clock.latest();
        if now > MAX_NOW {
            return latest;
        }
        if now >= latest.saturating_add(CLOCK_GRANULARITY) {
            self.clock.observe(now);
        }
        now.max(latest)
    }

    /// The latest time this limiter has recorded. It trails the latest accepted `now` it
    /// was given by less than 1 ms (the clock is written once per millisecond at most); a
    /// `now` above [`MAX_NOW`] acts at this time.
    pub fn latest_time(&self) -> u64 {
        self.clock.latest()
    }

    /// Under a limit below 1: publishes the idle deadline `now + latency × (1/limit − 1)`
    /// *before* freeing the slot, and frees it with a generation bump, so no acquirer can
    /// take the slot and miss the deadline (it either sees the deadline, or its CAS fails
    /// on the new generation).
    #[cold]
    #[inline(never)]
    fn release_fractional(&self, now: u64, latency: u64, outcome: Outcome) {
        let limit = f64::from_bits(self.limit_bits.load(Ordering::Relaxed));
        if outcome != Outcome::Ignored && limit > 0.0 && limit < 1.0 {
            let idle = (latency as f64 * (1.0 / limit - 1.0)).min(3600.0 * SEC as f64);
            self.idle_until.fetch_max(now.saturating_add(idle as u64), Ordering::Relaxed);
        }
        let mut word = self.state.load(Ordering::Relaxed);
        loop {
            let new = if word & FRACTIONAL_BIT != 0 {
                let generation = (word & GEN_MASK).wrapping_add(GEN_ONE) & GEN_MASK;
                ((word - 1) & !GEN_MASK) | generation
            } else {
                word - 1 // a whole-number limit was published meanwhile
            };
            // Release: pairs with the Acquire fence in `idle_wait`; an acquirer that sees
            // this slot free also sees the idle deadline stored above.
            match self.state.compare_exchange_weak(word, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// Under a limit below 1: how long `now` is still inside the idle period, if it is.
    #[cold]
    #[inline(never)]
    fn idle_wait(&self, now: u64) -> Option<u64> {
        // Acquire: pairs with the Release CAS in `release_fractional`, whose freed slot
        // (or a later value of the word) the caller has just read.
        fence(Ordering::Acquire);
        let idle_until = self.idle_until.load(Ordering::Relaxed);
        (now < idle_until).then(|| idle_until - now)
    }

    /// Folds the current window into the algorithm if it is due and no other thread is
    /// folding. Returns the window fed to the algorithm, if any.
    #[cold]
    #[inline(never)]
    fn try_fold(&self, now: u64) -> Option<Window> {
        let folded = self
            .fold
            .try_with(|st| {
                let now = self.clock.observe(now);
                if now < self.next_fold.load(Ordering::Relaxed) {
                    return None;
                }
                let mut delta = [0u64; BUCKETS];
                let (samples, sum) = self.hist.collect(&mut st.cursor, &mut delta);
                let drops = self.drops.load(Ordering::Relaxed);
                let window_drops = drops.wrapping_sub(st.prev_drops);
                if samples < self.min_samples as u64 && window_drops == 0 {
                    // Long enough but too few samples: look again a little later.
                    let retry = (self.min_window_ns / 4).max(MS);
                    self.next_fold.store(now.saturating_add(retry), Ordering::Relaxed);
                    return None;
                }
                let inflight = (self.state.load(Ordering::Relaxed) & INFLIGHT_MASK) as u32;
                let max_inflight = self.max_inflight.swap(inflight, Ordering::Relaxed);
                let window = crate::stats::summarize_window(
                    now,
                    &delta,
                    samples,
                    sum,
                    window_drops,
                    max_inflight.max(inflight),
                    inflight,
                );
                st.cursor.commit();
                st.prev_drops = drops;
                let limit = st.algorithm.update(&window);
                self.apply(limit);
                if self.levels > 1 {
                    self.decay_demand();
                }
                if samples > 0 {
                    self.last_min_ns.store(window.min_ns, Ordering::Relaxed);
                    self.last_avg_ns.store(window.avg_ns, Ordering::Relaxed);
                    self.last_p99_ns.store(window.p99_ns, Ordering::Relaxed);
                }
                self.windows.fetch_add(1, Ordering::Relaxed);
                self.folded_samples.fetch_add(samples, Ordering::Relaxed);
                let len = (window.min_ns as f64 * self.window_rtt_multiple) as u64;
                let len = len.clamp(self.min_window_ns, self.max_window_ns).max(1);
                self.next_fold.store(now.saturating_add(len), Ordering::Relaxed);
                Some(window)
            })
            .flatten();
        self.drain_publish();
        folded
    }

    /// Publishes the algorithm's limit unless a static limit is pinned. Only called inside
    /// the fold cell, so publishes never interleave.
    fn apply(&self, algorithm_limit: f64) {
        self.publish(self.pinned().unwrap_or(algorithm_limit));
    }

    /// Asks for a publish from outside the fold cell (the kill switch): done now if the
    /// cell is free, otherwise by the thread inside it as it leaves.
    fn request_publish(&self) {
        // Release: pairs with the Acquire load in `drain_publish`, so whoever serves the
        // request sees the pin stored before it.
        self.publish_pending.store(true, Ordering::Release);
        self.drain_publish();
    }

    /// Serves a pending publish request if the cell is free. Dekker-style hand-off: the
    /// requester writes `publish_pending` then tries the cell; the holder leaves the cell
    /// then reads `publish_pending`; the SeqCst fence on both sides guarantees at least one
    /// of them sees the other's write, so a request is never stranded.
    fn drain_publish(&self) {
        loop {
            fence(Ordering::SeqCst);
            // Acquire: pairs with the Release store in `request_publish`.
            if !self.publish_pending.load(Ordering::Acquire) {
                return;
            }
            let served = self.fold.try_with(|st| {
                self.publish_pending.store(false, Ordering::Relaxed);
                self.apply(st.algorithm.limit());
            });
            if served.is_none() {
                return; // the holder drains as it leaves
            }
        }
    }

    /// Makes `limit` the limit in force: slots in the admission word, exact value and
    /// level shares beside it.
    fn publish(&self, limit: f64) {
        let slots = slots_of(limit);
        // Relaxed: publishes happen one at a time inside the fold cell (whose Acquire /
        // Release order them); admissions only need the word itself.
        let mut word = self.state.load(Ordering::Relaxed);
        loop {
            let new = if limit < 1.0 {
                // Staying fractional keeps the generation; entering takes a fresh one
                // (one past the last generation left), so no acquirer's stale word
                // comes back.
                let generation = if word & FRACTIONAL_BIT != 0 {
                    word & GEN_MASK
                } else {
                    self.last_generation.load(Ordering::Relaxed).wrapping_add(GEN_ONE) & GEN_MASK
                };
                (word & INFLIGHT_MASK) | generation | FRACTIONAL_BIT
            } else {
                (word & INFLIGHT_MASK) | (slots << SLOTS_SHIFT)
            };
            match self.state.compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let seen = if word & FRACTIONAL_BIT != 0 { word } else { new };
                    if seen & FRACTIONAL_BIT != 0 {
                        self.last_generation.store(seen & GEN_MASK, Ordering::Relaxed);
                    }
                    break;
                }
                Err(actual) => word = actual,
            }
        }
        self.limit_bits.store(limit.to_bits(), Ordering::Relaxed);
        for lvl in 0..self.levels as usize {
            let share = libm::floor(limit * self.weights[lvl]).min(MAX_SLOTS as f64) as u32;
            self.level_share[lvl].store(share, Ordering::Relaxed);
        }
    }

    fn pinned(&self) -> Option<f64> {
        // Acquire: pairs with the Release store in `set_static_limit`.
        let bits = self.pinned_bits.load(Ordering::Acquire);
        (bits != NO_PIN).then(|| f64::from_bits(bits))
    }

    /// The kill switch, for when the adaptive controller misbehaves: `Some(n)` pins the limit to `n`; `None` hands control back to the
    /// algorithm's current limit. Takes effect before this call returns unless a window is
    /// being folded at that instant, in which case the folding thread applies it as it
    /// finishes. The algorithm keeps learning while pinned.
    pub fn set_static_limit(&self, limit: Option<f64>) -> Result<(), ConfigError> {
        match limit {
            Some(n) => {
                check_range(n, 1e-6, MAX_SLOTS as f64, "limiter.static_limit")?;
                // Release: pairs with the Acquire in `pinned`.
                self.pinned_bits.store(n.to_bits(), Ordering::Release);
            }
            None => self.pinned_bits.store(NO_PIN, Ordering::Release),
        }
        self.request_publish();
        Ok(())
    }

    /// The limit in force (possibly fractional).
    pub fn limit(&self) -> f64 {
        f64::from_bits(self.limit_bits.load(Ordering::Relaxed))
    }

    /// Requests in flight.
    pub fn inflight(&self) -> u32 {
        (self.state.load(Ordering::Relaxed) & INFLIGHT_MASK) as u32
    }

    /// Requests in flight at `level` (0 when only one level is configured).
    pub fn inflight_of(&self, level: Priority) -> u32 {
        let lvl = level.index().min(self.levels as usize - 1);
        if self.levels == 1 {
            return self.inflight();
        }
        self.level_inflight[lvl].load(Ordering::Relaxed)
    }

    /// Levels in use.
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// A snapshot of counters and gauges. Counters are exact; a snapshot taken while
    /// other threads run may mix instants.
    pub fn metrics(&self) -> LimiterMetrics {
        let successes = self.hist.total();
        let drops = self.drops.load(Ordering::Relaxed);
        let ignored = self.ignored.load(Ordering::Relaxed);
        let inflight = self.inflight();
        let rejected_by_level: [u64; LEVELS] =
            core::array::from_fn(|l| self.rejected[l].load(Ordering::Relaxed));
        let inflight_by_level = if self.levels == 1 {
            let mut a = [0; LEVELS];
            a[0] = inflight;
            a
        } else {
            core::array::from_fn(|l| self.level_inflight[l].load(Ordering::Relaxed))
        };
        LimiterMetrics {
            algorithm: crate::limit::algorithm_name(self.algorithm_code),
            limit: self.limit(),
            static_limit: self.pinned(),
            inflight,
            levels: self.levels,
            inflight_by_level,
            share_by_level: core::array::from_fn(|l| self.level_share[l].load(Ordering::Relaxed)),
            demand_by_level: core::array::from_fn(|l| self.level_demand[l].load(Ordering::Relaxed)),
            admitted: successes + drops + ignored + inflight as u64,
            rejected: rejected_by_level.iter().sum(),
            rejected_by_level,
            successes,
            drops,
            ignored,
            windows: self.windows.load(Ordering::Relaxed),
            folded_samples: self.folded_samples.load(Ordering::Relaxed),
            min_rtt_ns: self.last_min_ns.load(Ordering::Relaxed),
            avg_rtt_ns: self.last_avg_ns.load(Ordering::Relaxed),
            p99_rtt_ns: self.last_p99_ns.load(Ordering::Relaxed),
        }
    }
}

impl Limiter {
    /// A permit standing for one admitted at `level` by a holder that can no longer release
    /// it (a worker process that died holding it, found by the `surgeguard` crate's shared
    /// memory reclaimer). Release it with [`release_raw`](Self::release_raw) as
    /// [`Outcome::Ignored`] (no sample comes from it). The caller must own exactly one
    /// admission it counted and never released: releasing a permit made here for nothing
    /// frees a slot someone else holds.
    #[doc(hidden)]
    pub fn reissue_permit(&self, level: Priority) -> RawPermit {
        let level = (level.index() as u8).min(self.levels.saturating_sub(1));
        RawPermit { owner: self.id, level, started_at: self.clock.latest() }
    }

    /// A permit standing for one admitted at `level` at `started_at` whose `RawPermit`
    /// value crossed a process boundary (a shared-memory gate grants a waiter of another
    /// process: the grant is stored as its level and start time and rebuilt here by the
    /// process that releases it). The same contract as
    /// [`reissue_permit`](Self::reissue_permit): exactly one counted, unreleased
    /// admission per call.
    #[doc(hidden)]
    pub fn reissue_permit_at(&self, level: Priority, started_at: u64) -> RawPermit {
        let level = (level.index() as u8).min(self.levels.saturating_sub(1));
        RawPermit { owner: self.id, level, started_at }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::limit::FixedConfig;

    fn fixed(limit: f64, levels: u8) -> Limiter {
        let cfg = LimiterConfig {
            levels,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: limit.min(1.0),
                max_limit: limit.max(1.0),
            }))
        };
        Limiter::new(cfg).unwrap()
    }

    #[test]
    fn admits_exactly_up_to_the_limit() {
        let l = fixed(2.0, 1);
        let a = l.try_acquire(0, Priority::NORMAL).unwrap();
        let b = l.try_acquire(0, Priority::NORMAL).unwrap();
        let err = l.try_acquire(0, Priority::NORMAL).unwrap_err();
        assert_eq!(err.reason, Reason::LimitReached);
        assert!(err.retry_after > 0);
        assert_eq!(l.inflight(), 2);
        a.release(5 * MS, Outcome::Success);
        let c = l.try_acquire(6 * MS, Priority::NORMAL).unwrap();
        b.release(7 * MS, Outcome::Dropped);
        drop(c); // released as Ignored
        let m = l.metrics();
        assert_eq!((m.inflight, m.successes, m.drops, m.ignored), (0, 1, 1, 1));
        assert_eq!((m.admitted, m.rejected), (3, 1));
    }

    #[test]
    fn foreign_permit_is_refused_and_changes_nothing() {
        let a = fixed(4.0, 1);
        let b = fixed(4.0, 1);
        let p = a.try_acquire_raw(0, Priority::NORMAL).unwrap();
        let q = b.try_acquire_raw(0, Priority::NORMAL).unwrap();
        assert_eq!(b.release_raw(p, 1, Outcome::Success), Err(UsageError::ForeignHandle));
        assert_eq!((a.inflight(), b.inflight()), (1, 1));
        assert_eq!(b.metrics().successes, 0);
        assert_eq!(b.release_raw(q, 1, Outcome::Success), Ok(()));
        assert_eq!(b.inflight(), 0);
    }

    #[test]
    fn an_active_level_holds_back_its_peak_plus_one_up_to_its_share() {
        // limit 10, shares 7 / 2 / 0.
        let l = fixed(10.0, 3);
        let crit: std::vec::Vec<_> =
            (0..4).map(|_| l.try_acquire(MS, Priority::CRITICAL).unwrap()).collect();
        // Critical's peak is 4: its target is min(7, 4 + 1) = 5, so it holds back 1.
        let bg: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(MS, Priority::BACKGROUND).ok()).collect();
        assert_eq!(bg.len(), 5, "10 - 4 held - 1 held back");
        assert!(l.try_acquire(MS, Priority::NORMAL).is_err(), "the 1 is critical's");
        let more = l.try_acquire(MS, Priority::CRITICAL).unwrap();
        assert_eq!(l.inflight(), 10);
        // Refused at the limit: critical's demand becomes 5 + 1 = 6, its target 7.
        assert!(l.try_acquire(MS, Priority::CRITICAL).is_err(), "at the limit");
        drop(bg);
        // Critical holds 5 and holds back 2; normal (refused above at 0: a peak of 1,
        // target 2) holds back 2 of the 5 free slots.
        let bg2: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(MS, Priority::BACKGROUND).ok()).collect();
        assert_eq!(bg2.len(), 1);
        // Beyond its share, critical may use what the others leave free.
        let beyond: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(MS, Priority::CRITICAL).ok()).collect();
        assert_eq!(beyond.len(), 4);
        assert_eq!(l.inflight_of(Priority::CRITICAL), 9, "above its share of 7");
        drop((crit, more, bg2, beyond));
        assert_eq!(l.inflight(), 0);
    }

    #[test]
    fn a_light_critical_flow_holds_back_its_peak_plus_one_not_its_share() {
        // Default weights, limit 20 (critical's share 14). Critical holds 1 and 2 at
        // most: it holds back 2 + 1 − held, and normal work gets the rest.
        let l = fixed(20.0, 3);
        let a = l.try_acquire(MS, Priority::CRITICAL).unwrap();
        let b = l.try_acquire(MS, Priority::CRITICAL).unwrap();
        b.release(2 * MS, Outcome::Success);
        let normal: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(3 * MS, Priority::NORMAL).ok()).collect();
        assert_eq!(normal.len(), 20 - 1 - 2, "20 - 1 held - 2 held back");
        // The held-back slots are critical's at once.
        let c: std::vec::Vec<_> =
            (0..2).map(|_| l.try_acquire(3 * MS, Priority::CRITICAL).unwrap()).collect();
        assert_eq!(l.inflight(), 20);
        drop((a, c, normal));
    }

    #[test]
    fn a_refusal_with_slots_free_is_demand_not_app_limited() {
        // Limit 10; critical's peak of 7 (target min(7, 8)) holds back its share. Normal
        // work is refused with 3 slots free: the window reports the whole limit as in use.
        let l = Limiter::new(LimiterConfig {
            min_samples: 0,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: 10.0,
                min_limit: 1.0,
                max_limit: 10.0,
            }))
        })
        .unwrap();
        let mut crit: std::vec::Vec<_> =
            (0..7).map(|_| l.try_acquire(MS, Priority::CRITICAL).unwrap()).collect();
        for p in crit.drain(1..) {
            p.release(2 * MS, Outcome::Success);
        }
        let normal: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(3 * MS, Priority::NORMAL).ok()).collect();
        assert_eq!(normal.len(), 10 - 7, "1 held + 6 held back");
        assert_eq!(l.inflight(), 4);
        let w = l.try_fold(SEC).expect("a window is due");
        assert_eq!(w.max_inflight, 10, "the refusal counts the limit as used");
        drop((crit, normal));
    }

    #[test]
    fn critical_within_its_target_is_not_starved_by_long_held_background() {
        // Default weights, limit 10: critical holds 1 (a peak of 1: target 2) and
        // background takes what it can and keeps it. Critical reaches its target at once
        // however long background holds its slots; beyond it, each refusal raises its
        // target, and background gets none of the slots critical frees.
        let l = fixed(10.0, 3);
        let first = l.try_acquire(MS, Priority::CRITICAL).unwrap();
        let bg: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(MS, Priority::BACKGROUND).ok()).collect();
        assert_eq!(bg.len(), 8, "10 - 1 held - 1 held back");
        let now = MS + 100 * MS;
        let mut crit = std::vec![first];
        crit.push(l.try_acquire(now, Priority::CRITICAL).expect("critical within its target"));
        // At the limit: the next critical arrival is refused (the Gate would queue it)
        // and its demand becomes 3, its target 4.
        assert!(l.try_acquire(MS + 300 * MS, Priority::CRITICAL).is_err());
        assert_eq!(l.metrics().demand_by_level[0], 3);
        // A critical permit returns: the slot is critical's, not background's.
        crit.pop().unwrap().release(MS + 310 * MS, Outcome::Success);
        assert!(l.try_acquire(MS + 320 * MS, Priority::BACKGROUND).is_err());
        crit.push(l.try_acquire(MS + 320 * MS, Priority::CRITICAL).unwrap());
        assert_eq!(l.inflight_of(Priority::CRITICAL), 2);
        drop((crit, bg));
    }

    #[test]
    fn an_abandoned_admission_held_past_the_last_p99_is_a_drop() {
        let l = Limiter::new(LimiterConfig {
            min_samples: 1,
            min_window_ns: MS,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: 10.0,
                min_limit: 1.0,
                max_limit: 10.0,
            }))
        })
        .unwrap();
        // Before any window nothing is known: a cancel is Ignored.
        let p = l.try_acquire_raw(0, Priority::NORMAL).unwrap();
        assert_eq!(l.abandoned_outcome(&p, 10 * SEC), Outcome::Ignored);
        l.release_raw(p, 40 * MS, Outcome::Success).unwrap(); // a window: p99 about 40 ms
        let p99 = l.metrics().p99_rtt_ns;
        assert!(p99 > 30 * MS && p99 < 50 * MS, "{p99}");
        let p = l.try_acquire_raw(100 * MS, Priority::NORMAL).unwrap();
        assert_eq!(l.abandoned_outcome(&p, 100 * MS + p99), Outcome::Ignored, "not past p99");
        assert_eq!(l.abandoned_outcome(&p, 100 * MS + p99 + 1), Outcome::Dropped);
        l.release_raw(p, 200 * MS, Outcome::Ignored).unwrap();
    }

    #[test]
    fn inactive_levels_lend_their_share() {
        let l = fixed(10.0, 3);
        let bg: std::vec::Vec<_> =
            (0..10).map(|_| l.try_acquire(SEC, Priority::BACKGROUND).unwrap()).collect();
        assert_eq!(bg.len(), 10);
        // Critical wakes up after 2 s idle... it arrives when everything is on loan.
        let err = l.try_acquire(3 * SEC, Priority::CRITICAL).unwrap_err();
        assert_eq!(err.reason, Reason::LimitReached);
        drop(bg);
        // Critical (active now: it was refused at 0, a peak of 1) holds back 1 + 1 = 2;
        // normal is idle.
        let bg2: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(3 * SEC, Priority::BACKGROUND).ok()).collect();
        assert_eq!(bg2.len(), 8);
        // Once critical has been quiet for longer than active_ns, nothing is held back.
        let late: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(3 * SEC + 2 * SEC, Priority::BACKGROUND).ok())
                .collect();
        assert_eq!(late.len(), 2);
    }

    #[test]
    fn fractional_limit_idles_between_requests() {
        let l = fixed(0.5, 1);
        let p = l.try_acquire(0, Priority::NORMAL).unwrap();
        assert!(l.try_acquire(0, Priority::NORMAL).is_err(), "one at a time");
        p.release(10 * MS, Outcome::Success);
        // Busy half the time: idle for 10 ms × (1/0.5 − 1) = 10 ms.
        let err = l.try_acquire(15 * MS, Priority::NORMAL).unwrap_err();
        assert_eq!(err.retry_after, 5 * MS);
        assert!(l.try_acquire(20 * MS, Priority::NORMAL).is_ok());
    }

    #[test]
    fn kill_switch_pins_and_releases_the_limit() {
        let l = fixed(8.0, 1);
        let held: std::vec::Vec<_> =
            (0..5).map(|_| l.try_acquire(0, Priority::NORMAL).unwrap()).collect();
        l.set_static_limit(Some(3.0)).unwrap();
        assert_eq!(l.limit(), 3.0);
        assert_eq!(l.metrics().static_limit, Some(3.0));
        assert!(l.try_acquire(0, Priority::NORMAL).is_err(), "5 in flight > 3: wait");
        drop(held);
        let again: std::vec::Vec<_> =
            core::iter::from_fn(|| l.try_acquire(0, Priority::NORMAL).ok()).collect();
        assert_eq!(again.len(), 3);
        drop(again);
        assert!(l.set_static_limit(Some(f64::NAN)).is_err());
        assert!(l.set_static_limit(Some(-1.0)).is_err());
        assert_eq!(l.limit(), 3.0, "a bad pin changes nothing");
        l.set_static_limit(None).unwrap();
        assert_eq!(l.limit(), 8.0);
        assert_eq!(l.metrics().static_limit, None);
    }

    #[test]
    fn windows_fold_after_time_and_samples() {
        let l = fixed(100.0, 1);
        let mut t = 0;
        let mut step = |l: &Limiter| {
            let p = l.try_acquire(t, Priority::NORMAL).unwrap();
            t += 20 * MS;
            p.release(t, Outcome::Success);
        };
        for _ in 0..9 {
            step(&l);
        }
        assert_eq!(l.metrics().windows, 0, "9 samples < min_samples");
        // Too-small windows are looked at again every min_window/4 (25 ms), so the window
        // closes within two more 20 ms completions.
        step(&l);
        step(&l);
        let m = l.metrics();
        assert_eq!(m.windows, 1);
        assert_eq!(m.successes, 11);
        let err = (m.avg_rtt_ns as f64 - (20 * MS) as f64).abs() / (20 * MS) as f64;
        assert!(err < 1e-9, "avg {}", m.avg_rtt_ns);
        assert!(m.min_rtt_ns <= 20 * MS && m.min_rtt_ns as f64 >= 0.95 * (20 * MS) as f64);
    }

    #[test]
    fn bad_configs_are_refused() {
        let bad = [
            LimiterConfig { levels: 0, ..LimiterConfig::default() },
            LimiterConfig { levels: 9, ..LimiterConfig::default() },
            LimiterConfig {
                weights: [0.9, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ..LimiterConfig::default()
            },
            LimiterConfig {
                weights: [f64::NAN, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                ..LimiterConfig::default()
            },
            LimiterConfig {
                min_window_ns: 2 * SEC,
                max_window_ns: SEC,
                ..LimiterConfig::default()
            },
            LimiterConfig { window_rtt_multiple: f64::INFINITY, ..LimiterConfig::default() },
            LimiterConfig { active_ns: 0, ..LimiterConfig::default() },
        ];
        for cfg in bad {
            assert!(Limiter::new(cfg).is_err(), "{cfg:?}");
        }
        assert!(Limiter::new(LimiterConfig::default()).is_ok());
    }
}
