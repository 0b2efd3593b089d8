//! The [`Gate`]: a [`Limiter`] in front of a bounded priority [`WaitQueue`], plus the
//! on-call shed switch, driven as an event pump so that each binding owns its waiters.
//!
//! ```text
//! arrive ──► shed? ──► waiter ahead (same or more important)? ──no──► limiter ──► Admitted
//!                 │                      │ yes                            │ full
//!                 ▼                      ▼                                ▼
//!              Rejected        deadline meetable? ──► queue (evict less important if full)
//!                                                         │
//! release ──► limiter ──► (caller) poll ──► Granted(ticket, permit) / Expired(ticket, why)
//! ```
//!
//! Rules:
//! - **Order.** The most important level first; within a level FIFO, or LIFO while the
//!   queue stands ([`LifoTrigger`]: CoDel overloaded, or occupancy above a threshold —
//!   HBase uses 0.8). Expiry is always checked from the oldest end, even in LIFO mode
//!   (HHVM `JobQueue`), so stale waiters never sit forgotten at the bottom of a stack.
//! - **No overtaking.** An arrival goes to the limiter directly only if no waiter of the
//!   same or a more important level is queued; otherwise it queues behind them. Dispatch
//!   stops at the first level the limiter refuses, so a refused important waiter receives
//!   the next freed slot before any less important one (the limiter's partition rule is
//!   monotone in the level).
//! - **Deadlines.** A waiter whose remaining time is shorter than the expected service
//!   time (an EWMA of observed latencies) is dropped, never dispatched; an arrival whose
//!   deadline cannot be met at the current drain rate (`limit / service time`) is refused
//!   at once with `DeadlineUnmeetable`.
//! - **CoDel** (folly by default; RFC 8289 as an option), one per level, judged on the
//!   sojourn of the waiter being dequeued (the newest in LIFO) each time a slot is handed
//!   out; an arrival admitted at once counts as a zero-delay dequeue, as it would in folly
//!   where every request passes through the queue; a sloughed waiter is reported
//!   `Expired(CodelSlough)`. While a level's CoDel says its queue stands, no waiter of that
//!   level waits longer than the slough timeout (folly: 2 × target): older ones are
//!   sloughed from the oldest end ("if the queue has not been empty for the last interval,
//!   the time spent in the queue is limited", Maurer, "Fail at Scale", ACM Queue 2015).
//!   In LIFO, CoDel reads only the newest waiters, so without this the older ones would
//!   wait out their callers' timeouts, and each such wait ends in a retry: after a
//!   slowdown the queue would keep the dependency overloaded for as long as the callers
//!   keep retrying.
//! - **Full queue.** A cancelled waiter's place is free at once (no poll needed). When
//!   every place holds a waiter, a more important arrival evicts the oldest waiter of the
//!   least important level below it (reported `Expired(Evicted)` by the next poll);
//!   otherwise the arrival is refused with `QueueFull`.
//! - **Aging** (optional): a waiter of one level older than a threshold moves to a
//!   less important level.
//! - **Shed switch** (for the on-call engineer): `set_shed_level(Some(p))` refuses every arrival at level
//!   ≥ p at once and expires such waiters at the next poll.

use crate::codel::{Codel, CodelConfig, CodelMetrics, CodelMode};
use crate::dimmer::{self, Dimmer};
use crate::queue::{Dispatcher, Ticket, WaitQueue, Waiter, NO_DEADLINE};
use crate::sync::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use crate::time::{check_now, MAX_NOW, MS, SEC};
use crate::types::check_range;
use crate::{
    ConfigError, Limiter, LimiterConfig, LimiterMetrics, Outcome, Priority, RawPermit, Reason,
    Rejected, UsageError,
};

const LEVELS: usize = Priority::MAX_LEVELS;
/// `shed` value meaning "shed nothing".
const NO_SHED: u8 = u8::MAX;
/// The smallest `retry_after` hint computed from estimates (1 ms).
const MIN_RETRY_AFTER_NS: u64 = MS;
/// The largest `retry_after` (and similar) setting accepted: one hour.
const MAX_SETTING_NS: u64 = 3600 * SEC;
/// Fraction bits of the service-time estimate (Q16: 1/65536 ns).
const SERVICE_FRAC: u32 = 16;
/// Longest service time the estimate holds (2^47 ns ≈ 39 h), so it fits in Q16.
const MAX_SERVICE_NS: u64 = (1 << (64 - SERVICE_FRAC - 1)) - 1;
/// The uncongested service time (`Gate::service_floor_ns`) rises by at most its own value
/// per this much time: a third in ten seconds.
const FLOOR_RISE_NS: u64 = 30 * SEC;
/// 2^32: the unit of `service_alpha_q32`.
const Q32: u64 = 1 << 32;
/// A word alone on its cache line (128 bytes: two 64-byte lines, as adjacent-line
/// prefetchers pair them; the layout crossbeam's `CachePadded` uses on x86-64), so that
/// writing it does not invalidate the read-mostly words next to it on other cores.
///
/// Not under loom: its model threads run on 32 KiB stacks, there is no cache to share, and
/// the padding around loom's larger atomics overflowed them.
#[derive(Debug)]
#[cfg_attr(not(loom), repr(C, align(128)))]
#[cfg_attr(loom, repr(C))]
struct Line<T>(T);

impl<T> core::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// When a level switches from FIFO to LIFO dispatch (adaptive LIFO, "Fail at Scale").
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(C, u8)]
pub enum LifoTrigger {
    /// Always FIFO.
    Never,
    /// LIFO while the level's CoDel says the queue stands (the "Fail at Scale" wording).
    /// Without CoDel this is the same as `Never`.
    #[default]
    CodelOverloaded,
    /// LIFO while the queue holds more than this fraction of its capacity, in `(0, 1]`
    /// (HBase `AdaptiveLifoCoDelCallQueue`: 0.8).
    Occupancy(f64),
}

/// HBase `lifo.threshold` default.
pub const HBASE_LIFO_THRESHOLD: f64 = 0.8;

/// Aging: a waiter of level `from` that waited `after_ns` moves to level `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Aging {
    /// The level that ages.
    pub from: Priority,
    /// The (less important) level it moves to.
    pub to: Priority,
    /// How long it may wait first, ns.
    pub after_ns: u64,
}

impl Aging {
    /// A normal waiter that waited more than 500 ms becomes background work: it then
    /// yields to fresh normal requests instead of holding them up.
    pub const NORMAL_TO_BACKGROUND_AFTER_500_MS: Aging =
        Aging { from: Priority::NORMAL, to: Priority::BACKGROUND, after_ns: 500 * MS };
}

/// How a [`Gate`] is built. `Default`: the default limiter, queue capacity `CAP`, folly
/// CoDel, LIFO while CoDel says overloaded, no maximum wait, no aging, service time
/// learned from the first success, EWMA weight 0.1, fallback `retry_after` 1 s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateConfig {
    /// The limiter (its `levels` are the gate's levels).
    pub limiter: LimiterConfig,
    /// Waiters held at most; `None` = `CAP`. Size it by time with
    /// [`capacity_for`](crate::queue::capacity_for)`(drain rate, wait budget)`.
    pub queue_capacity: Option<usize>,
    /// CoDel per level (`None`: no sloughing, and `LifoTrigger::CodelOverloaded` is FIFO).
    /// Its target and interval are floors: each dispatch raises them to follow the
    /// dependency, target `max(target, s / 2)` and interval `max(interval, 10 × target)`,
    /// where `s` is the uncongested service time ([`Gate::service_floor_ns`]; see
    /// [`Codel::follow_service`] for why). With calls under 10 ms the configured values
    /// (folly's 5 ms / 100 ms by default) stand.
    pub codel: Option<CodelConfig>,
    /// When to dispatch newest-first.
    pub lifo: LifoTrigger,
    /// A waiter queued longer than this is expired (HHVM `maxJobQueuingMs`; the
    /// wait budget). `None`: only deadlines and CoDel expire waiters.
    pub max_wait_ns: Option<u64>,
    /// Optional aging (e.g. [`Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS`]).
    pub aging: Option<Aging>,
    /// Expected service time before any sample, ns; 0 = unknown until the first success.
    pub initial_service_ns: u64,
    /// EWMA weight of each success latency in the service-time estimate, `(0, 1]`
    /// (default 0.1).
    pub service_alpha: f64,
    /// `retry_after` when nothing better is known (an HTTP `Retry-After: 1`): 1 s.
    pub fallback_retry_after_ns: u64,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            limiter: LimiterConfig::default(),
            queue_capacity: None,
            codel: Some(CodelConfig::default()),
            lifo: LifoTrigger::CodelOverloaded,
            max_wait_ns: None,
            aging: None,
            initial_service_ns: 0,
            // A latency EWMA with weight 0.1: about the last ten requests.
            service_alpha: 0.1,
            // A 503 with `Retry-After: 1`.
            fallback_retry_after_ns: SEC,
        }
    }
}

impl GateConfig {
    /// Checks every field against a queue of compile-time capacity `cap`.
    pub fn validate(&self, cap: usize) -> Result<(), ConfigError> {
        self.limiter.validate()?;
        if self.queue_capacity.is_some_and(|c| c > cap) {
            return Err(ConfigError::out_of_range("gate.queue_capacity")
                .with_detail("above the queue's compile-time capacity"));
        }
        if let Some(c) = &self.codel {
            c.validate()?;
        }
        if let LifoTrigger::Occupancy(f) = self.lifo {
            check_range(f, f64::MIN_POSITIVE, 1.0, "gate.lifo.occupancy")?;
        }
        if self.max_wait_ns.is_some_and(|w| w == 0 || w > MAX_SETTING_NS) {
            return Err(ConfigError::out_of_range("gate.max_wait_ns"));
        }
        if let Some(a) = self.aging {
            if a.after_ns == 0 || a.after_ns > MAX_SETTING_NS {
                return Err(ConfigError::out_of_range("gate.aging.after_ns"));
            }
            if a.from >= a.to {
                return Err(ConfigError::inconsistent(
                    "gate.aging.to",
                    "must be a less important level than",
                    "gate.aging.from",
                ));
            }
            if a.to.index() >= self.limiter.levels as usize {
                return Err(ConfigError::inconsistent(
                    "gate.aging.to",
                    "must be a level below",
                    "limiter.levels",
                ));
            }
        }
        if self.initial_service_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("gate.initial_service_ns"));
        }
        check_range(self.service_alpha, f64::MIN_POSITIVE, 1.0, "gate.service_alpha")?;
        if self.fallback_retry_after_ns == 0 || self.fallback_retry_after_ns > MAX_SETTING_NS {
            return Err(ConfigError::out_of_range("gate.fallback_retry_after_ns"));
        }
        Ok(())
    }
}

/// What [`Gate::arrive`] decided.
#[must_use = "an admitted permit must be released; a queued ticket waits for poll"]
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Go ahead; release the permit with [`Gate::release`] when done.
    Admitted(RawPermit),
    /// Wait: a later [`Gate::poll`] reports `Granted` or `Expired` for this ticket. Call
    /// `poll` once now as well (a slot may have freed while it was being queued).
    Queued(Ticket),
    /// Refused at once; `retry_after` says when trying again could succeed.
    Rejected(Rejected),
}

/// What [`Gate::poll`] reports about a queued ticket. Each ticket gets exactly one event,
/// unless it was cancelled.
#[must_use = "a granted permit must be released"]
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The waiter may go ahead with this permit.
    Granted(Ticket, RawPermit),
    /// The waiter was dropped: `Expired` (deadline or maximum wait), `CodelSlough`,
    /// `Evicted` or `Shed`, with a `retry_after` hint.
    Expired(Ticket, Rejected),
}

/// Readiness: overloaded is not broken (a load balancer should keep sending traffic to an
/// overloaded instance that sheds, not restart it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GateState {
    /// Serving without a standing queue.
    Healthy,
    /// Shedding, queue full, or a queue standing above the CoDel target.
    Overloaded,
}

/// A snapshot of a [`Gate`]. Counters are exact; gauges taken while other threads run may
/// mix instants.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateMetrics {
    /// Readiness.
    pub state: GateState,
    /// Waiters per level.
    pub waiting_by_level: [u32; LEVELS],
    /// All waiters.
    pub waiting: u32,
    /// The queue's bound.
    pub capacity: u32,
    /// Age of the oldest waiter at the latest `now` seen, ns (0 when empty).
    pub oldest_age_ns: u64,
    /// Arrivals queued (derived: every queued arrival is waiting or left one way).
    pub queued: u64,
    /// Waiters granted a permit.
    pub granted: u64,
    /// Waiters dropped for their deadline or the maximum wait.
    pub expired: u64,
    /// Waiters sloughed by CoDel.
    pub sloughed: u64,
    /// Waiters evicted by more important arrivals.
    pub evicted: u64,
    /// Waiters cancelled by their owners.
    pub cancelled: u64,
    /// Arrivals and waiters refused by the shed switch.
    pub shed: u64,
    /// Arrivals refused because the queue was full.
    pub queue_full: u64,
    /// Arrivals refused because their deadline could not be met.
    pub deadline_unmeetable: u64,
    /// Waiters moved to a less important level by aging.
    pub aged: u64,
    /// FIFO→LIFO switches, all levels.
    pub lifo_switches: u64,
    /// Levels dispatching LIFO now (bit `p` for level `p`).
    pub lifo_levels: u8,
    /// The shed level in force.
    pub shed_level: Option<Priority>,
    /// Expected service time, ns, rounded to the nearest (0 = unknown).
    pub service_ns: u64,
    /// The uncongested service time CoDel's target follows, ns ([`Gate::service_floor_ns`]).
    pub service_floor_ns: u64,
    /// CoDel of each level.
    pub codel: [CodelMetrics; LEVELS],
    /// The limiter, as callers saw it: a permit the gate took for a waiter that then left
    /// before it could be granted (sloughed, expired, evicted or cancelled at that moment)
    /// and gave back unused counts in neither `admitted` nor `ignored` here
    /// ([`Gate::limiter`]`().metrics()` counts it in both).
    pub limiter: LimiterMetrics,
}

/// Limiter + admission queue + shed switch: admits, queues or refuses each arrival, and
/// hands freed slots to waiters in priority order through [`poll`](Self::poll).
///
/// ```
/// use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
/// use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
/// use surgeguard_core::{LimiterConfig, Outcome, Priority};
///
/// let cfg = GateConfig {
///     limiter: LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
///         initial_limit: 1.0, min_limit: 1.0, max_limit: 1.0,
///     })),
///     ..GateConfig::default()
/// };
/// let gate: Gate<64> = Gate::new(cfg).unwrap();
/// let Arrival::Admitted(first) = gate.arrive(0, Priority::NORMAL, None) else { panic!() };
/// let Arrival::Queued(ticket) = gate.arrive(1, Priority::NORMAL, None) else { panic!() };
/// gate.release(first, 2_000_000, Outcome::Success).unwrap();
/// // The binding's pump: after a release (or a Queued, or when next_wakeup fires), poll.
/// let mut events: [Option<Event>; 8] = Default::default();
/// assert_eq!(gate.poll(2_000_000, &mut events), 1);
/// let Some(Event::Granted(t, permit)) = events[0].take() else { panic!() };
/// assert_eq!(t, ticket);
/// gate.release(permit, 3_000_000, Outcome::Success).unwrap();
/// ```
///
/// **Progress.** `arrive`, `release`, `cancel`, `set_shed_level`, `state` and
/// `next_wakeup` never wait for another thread: each is a bounded number of atomic steps
/// plus CAS retries that fail only when another thread made progress (lock-free); an
/// arrival that finds no free slot scans the slots for a cancelled one to reuse, then (in
/// a full queue) for its victim. `poll` is
/// single-consumer: one thread dispatches at a time; a concurrent `poll` returns 0 at
/// once, and the thread inside runs another round for it before leaving (the events of
/// that round land in the *holder's* buffer, which is why bindings route events by
/// ticket). The holder runs at most [`MAX_ROUNDS`](crate::queue::MAX_ROUNDS) rounds per
/// call, each a bounded amount of work (O(capacity) plus one event per waiter it moves),
/// so a `poll` ends even while other threads keep arriving; work left over makes
/// [`next_wakeup`](Self::next_wakeup) return `now`, so a binding that re-arms its timer
/// after each poll loses no wake-up. Whenever a slot is free and a waiter exists, the
/// next `poll` grants it; a ticket is granted at most once and never both granted and
/// expired. A panic inside a poll (a limit algorithm's bug, say) releases the dispatch
/// flag and keeps every waiter queued: the gate is never wedged.
///
/// **Time.** Every `now` is nanoseconds on the caller's monotonic clock, at most
/// [`MAX_NOW`] (2^62 ns, about 146 years). The gate's clock is its limiter's: an accepted
/// `now` is recorded when it is at least 1 ms past the time recorded (so the record trails
/// the latest `now` seen by less than 1 ms, and costs a write at most once per
/// millisecond instead of once per call), and every call acts at `max(now, recorded)`: a
/// `now` earlier than the record counts as the record. A `now` above `MAX_NOW` is bad
/// input and never moves the gate's clock: `arrive`, `try_arrive`, `poll` and
/// `next_wakeup` act at the recorded time; `release` refuses it with `TimeOutOfRange`
/// (returning the slot unused, so none leaks). A forward jump within range is taken as
/// real time passing: waiters past their deadline or maximum wait expire at the next
/// poll, and CoDel closes its interval.
///
/// **Cost.** Counting atomic read-modify-writes (RMWs; the clock costs a load, and one
/// `fetch_max` at most once per millisecond). Admitted arrival: the limiter's acquire (one
/// CAS; three RMWs in all with several levels), plus loads: the clock, the shed switch,
/// four per level up to the arrival's for "anyone waiting ahead?", and the limiter's
/// limit and in-flight. Queued arrival: three (count, claim a slot, publish it). Release:
/// the limiter's release (the in-flight `fetch_sub` and the sample's histogram add).
/// A poll: one CAS to enter and take all pending arrivals and cancels, one to leave; each
/// grant adds the limiter's acquire and one slot CAS — CoDel, the LIFO switch and the
/// dispatcher's counters are plain loads and stores under the dispatch flag. So an arrival
/// that queues and is granted by a poll costs eight RMWs with several levels (seven with
/// one) besides the release that freed the slot (before: nine, one of them the gate's
/// own clamp). Per admitted request (arrive + `Success` release, several levels): five
/// RMWs, the same as the limiter alone (before: seven, the clamp on each call).
/// Instructions per request (callgrind, `bench/callgrind.sh`): about 355 admitted, 1,260
/// queued and granted (with the release that frees the slot), against 123 for the limiter
/// alone.
///
/// **Shared cache lines written** by an admitted arrival and its `Success` release, when
/// every call advances time (a busy server): the limiter's own — its state word (a CAS
/// and a `fetch_sub`), its histogram (the sample), its per-level in-flight count (with
/// several levels) and, once per millisecond, its clock — plus the gate's service-time
/// estimate (a store, skipped when the estimate does not change, as with a steady
/// latency). Before: the gate also kept a clock word of its own on its own line, written
/// by a `fetch_max` on every call that advanced time (two more RMWs per admitted request,
/// each a line every other core then misses on). CoDel's pass note writes once per
/// dequeue and then once per `interval / 64` (1.5 ms at the default 100 ms), not per
/// call; the gate's counters are written only by refusals and by the dispatcher. The
/// estimate sits on a 128-byte line of its own, and the limiter, the queue and CoDel each
/// start on one, so no write lands on the words every arrival reads (the shed switch, the
/// LIFO mask, the hints).
/// Measured figures beside `ArrayQueue` and `Mutex<VecDeque>` are in BENCHMARKS.md
/// (`gate` bench). `cancel`: one CAS and one count, plus a push on the attention stack.
/// `metrics()` scans the slots.
///
/// **Size.** The slots are inline: about `48·CAP` bytes plus ~18 KB (`Gate<64>` ≈ 19.5 KB,
/// `Gate<1024>` ≈ 66 KB, `Gate<4096>` ≈ 213 KB). `new` returns the gate by value, and an
/// unoptimised build may hold several copies on the stack while moving it, so put a
/// large gate in a `static`, a `Box` or an `Arc` from a thread with room to build it
/// (debug builds of `Gate<4096>` need more than the 2 MB default of a spawned thread).
///
/// **Sources.** folly `Codel`, HBase `AdaptiveLifoCoDelCallQueue`, HHVM `JobQueue`
/// (priority deques, oldest-end expiry, `maxJobQueuingMs`); adaptive LIFO from "Fail at
/// Scale" (B. Maurer, ACM Queue 2015); criticality levels and shedding the least critical
/// first from the Google SRE book ("Handling Overload"); a queue sized by drain rate ×
/// acceptable wait (Little's law), and deadlines dropped at dequeue.
#[derive(Debug)]
#[repr(C)]
pub struct Gate<const CAP: usize> {
    // The limiter, the queue and CoDel each start on a line of their own, so that the
    // words one writes (the limiter's state, the queue's counts) never share a line with
    // the words another only reads on the admission path.
    limiter: Line<Limiter>,
    queue: Line<WaitQueue<CAP>>,
    codel: Line<[Codel; LEVELS]>,
    codel_on: bool,
    /// CoDel runs the RFC 8289 rule (which reads the waiters behind the dequeued one).
    codel_rfc: bool,
    levels: u8,
    lifo: LifoTrigger,
    max_wait_ns: Option<u64>,
    aging: Option<Aging>,
    /// `service_alpha` in 1/2^32 (at least 1): the estimate is kept in integers.
    service_alpha_q32: u64,
    fallback_retry_after_ns: u64,
    shed: AtomicU8,
    /// Expected service time in 1/65536 ns (Q16); 0 = unknown. Integer, not f64: a
    /// floating-point update that depended on the previous value cost ~50 ns per release
    /// in the `gate/admit_release` bench on the project's VM (cause not pinned down); the
    /// integer update measured no slower than no update at all.
    /// On its own line: every `Success` release may write it.
    service: Line<AtomicU64>,
    /// Lower bound of the earliest waiter deadline: arrivals lower it (after their push),
    /// a dispatch round that scanned every waiter raises it to the exact value unless it
    /// was lowered meanwhile.
    deadline_hint: AtomicU64,
    /// Set once any arrival carried a deadline (until then rounds skip the hint).
    deadlines_used: AtomicBool,
    /// Lower bound of the oldest waiter's arrival (kept like `deadline_hint`; only with a
    /// maximum wait).
    oldest_hint: AtomicU64,
    /// When a refusal with free slots (partition reservation, fractional idle) may lapse:
    /// the next poll worth making even if nothing is released. 0 = none.
    recheck_at: AtomicU64,
    /// When the oldest waiter of a level whose queue stands passes the slough timeout:
    /// set exactly by each dispatch round, lowered by an arrival queued at such a level.
    /// `u64::MAX` = none.
    standing_due: AtomicU64,
    /// The uncongested service time, ns (0 = unknown): a floor under the service-time
    /// estimate that falls with it and rises at most by `1/30` of itself per second, and
    /// when it last moved. CoDel's target and interval follow it
    /// ([`Codel::follow_service`]). Written by a `Success` release at most once per ms.
    service_floor: AtomicU64,
    service_floor_at: AtomicU64,
    // Dispatcher-only state and counters (written only by the dispatch holder: load+store).
    lifo_mask: AtomicU8,
    lifo_switches: AtomicU64,
    granted: AtomicU64,
    /// `granted` by level, one byte each (level `l` in bits `8l..8l+8`), each wrapping on
    /// its own: see `Gate::granted_by_level`.
    granted_levels: AtomicU64,
    expired: AtomicU64,
    sloughed: AtomicU64,
    shed_waiters: AtomicU64,
    aged: AtomicU64,
    /// Permits taken by the dispatcher and given back unused (see `GateMetrics::limiter`).
    unused_permits: AtomicU64,
    // Counters written by arrivals.
    shed_arrivals: AtomicU64,
    queue_full: AtomicU64,
    unmeetable: AtomicU64,
    /// The brownout dimmer ([`Gate::brownout`]): written only by `brownout`, so on a line
    /// of its own, away from the admission path.
    dimmer: Line<Dimmer>,
}

/// Where a dispatch round writes its events.
struct Sink<'o> {
    out: &'o mut [Option<Event>],
    n: usize,
}

impl Sink<'_> {
    fn is_full(&self) -> bool {
        self.n >= self.out.len()
    }

    /// Writes `ev` if there is room (every entry of `out` is `None`: see `poll`).
    #[inline]
    fn push(&mut self, ev: Event) -> bool {
        let Some(slot) = self.out.get_mut(self.n) else { return false };
        *slot = Some(ev);
        self.n += 1;
        true
    }
}

/// Adds `n` to a counter only the dispatch holder writes (no read-modify-write needed).
fn bump(counter: &AtomicU64, n: u64) {
    // Relaxed: single writer; readers want a value, not an order.
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

fn prio(l: usize) -> Priority {
    Priority::new(l as u8).unwrap_or_default()
}

impl<const CAP: usize> Gate<CAP> {
    /// Builds a gate; every number in `cfg` is checked first.
    pub fn new(cfg: GateConfig) -> Result<Self, ConfigError> {
        cfg.validate(CAP)?;
        let limiter = Limiter::new(cfg.limiter)?;
        let queue = WaitQueue::new(cfg.limiter.levels, cfg.queue_capacity.unwrap_or(CAP))?;
        let codel_cfg = cfg.codel.unwrap_or_default();
        let mut codels = [const { None }; LEVELS];
        for c in codels.iter_mut() {
            *c = Some(Codel::new(codel_cfg)?);
        }
        Ok(Self {
            limiter: Line(limiter),
            queue: Line(queue),
            codel: Line(codels.map(|c| c.expect("filled above"))),
            codel_on: cfg.codel.is_some(),
            codel_rfc: codel_cfg.mode == CodelMode::Rfc8289,
            levels: cfg.limiter.levels,
            lifo: cfg.lifo,
            max_wait_ns: cfg.max_wait_ns,
            aging: cfg.aging,
            // In (0, 1] (validated): the nearest multiple of 1/2^32, never 0.
            service_alpha_q32: ((cfg.service_alpha * Q32 as f64 + 0.5) as u64).clamp(1, Q32),
            fallback_retry_after_ns: cfg.fallback_retry_after_ns,
            shed: AtomicU8::new(NO_SHED),
            service: Line(AtomicU64::new(
                cfg.initial_service_ns.min(MAX_SERVICE_NS) << SERVICE_FRAC,
            )),
            deadline_hint: AtomicU64::new(NO_DEADLINE),
            deadlines_used: AtomicBool::new(false),
            oldest_hint: AtomicU64::new(u64::MAX),
            recheck_at: AtomicU64::new(0),
            standing_due: AtomicU64::new(u64::MAX),
            service_floor: AtomicU64::new(cfg.initial_service_ns.min(MAX_SERVICE_NS)),
            service_floor_at: AtomicU64::new(0),
            lifo_mask: AtomicU8::new(0),
            lifo_switches: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            granted_levels: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            sloughed: AtomicU64::new(0),
            shed_waiters: AtomicU64::new(0),
            aged: AtomicU64::new(0),
            unused_permits: AtomicU64::new(0),
            shed_arrivals: AtomicU64::new(0),
            queue_full: AtomicU64::new(0),
            unmeetable: AtomicU64::new(0),
            dimmer: Line(Dimmer::new()),
        })
    }

    /// The limiter inside.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// Levels in use.
    pub fn levels(&self) -> u8 {
        self.levels
    }

    /// The clock clamp: `max(now, the time recorded)`, or the recorded time if `now` is
    /// above [`MAX_NOW`](crate::time::MAX_NOW) (bad input never moves the gate's clock).
    /// The gate keeps no clock word of its own: it reads the limiter's, which records a
    /// `now` at most once per millisecond (so it trails the latest `now` seen by less than
    /// 1 ms). One load, and a `fetch_max` at most once per millisecond.
    #[inline(always)]
    fn observe(&self, now: u64) -> u64 {
        self.limiter.observe_time(now)
    }

    /// The time recorded by the clamp.
    #[inline(always)]
    fn latest(&self) -> u64 {
        self.limiter.latest_time()
    }

    fn clamp(&self, level: Priority) -> usize {
        level.index().min(self.levels as usize - 1)
    }

    /// Expected service time, ns, rounded to the nearest (0 = unknown).
    pub fn service_ns(&self) -> u64 {
        // Relaxed: the estimate orders nothing else.
        (self.service.0.load(Ordering::Relaxed) + (1 << (SERVICE_FRAC - 1))) >> SERVICE_FRAC
    }

    /// How long `ahead` waiters (plus the one asking) take to drain at the current rate:
    /// `(ahead + 1) × service / limit`. 0 when the service time is unknown.
    fn drain_time(&self, ahead: u32, service: u64) -> u64 {
        let limit = self.limiter.limit().max(1e-9);
        let t = (f64::from(ahead) + 1.0) * service as f64 / limit;
        if t >= MAX_SETTING_NS as f64 {
            MAX_SETTING_NS
        } else {
            t as u64
        }
    }

    /// `retry_after` for a refusal: the time to drain what is queued, or the fallback when
    /// nothing is known.
    fn retry_hint(&self, service: u64) -> u64 {
        if service == 0 {
            return self.fallback_retry_after_ns;
        }
        self.drain_time(self.queue.len(), service).max(MIN_RETRY_AFTER_NS)
    }

    /// Whether level `lvl` dispatches newest-first now (as last decided by a poll).
    fn lifo_now(&self, lvl: usize) -> bool {
        self.lifo_mask.load(Ordering::Relaxed) & (1 << lvl) != 0
    }

    /// The refusals an arrival meets before anything else: the shed switch, then a
    /// deadline already passed.
    #[inline]
    fn refuse_early(&self, now: u64, lvl: usize, deadline: u64) -> Option<Rejected> {
        if lvl >= self.shed.load(Ordering::Relaxed) as usize {
            self.shed_arrivals.fetch_add(1, Ordering::Relaxed);
            return Some(Rejected::new(Reason::Shed, self.fallback_retry_after_ns));
        }
        if deadline <= now {
            return Some(self.unmeetable_now());
        }
        None
    }

    /// Counts and builds the refusal of a deadline that has passed already.
    #[cold]
    fn unmeetable_now(&self) -> Rejected {
        self.unmeetable.fetch_add(1, Ordering::Relaxed);
        Rejected::new(Reason::DeadlineUnmeetable, self.retry_hint(self.service_ns()))
    }

    /// A permit at once, if nobody of the same or a more important level is waiting (no
    /// overtaking) and the limiter grants one (it is skipped when every slot is visibly
    /// taken). `None`: the arrival would have to wait.
    #[inline]
    fn admit_now(&self, now: u64, lvl: usize) -> Option<RawPermit> {
        if self.queue.waiting_through(prio(lvl)) == 0 && !self.limiter_full() {
            let permit = self.limiter.try_acquire_raw(now, prio(lvl)).ok()?;
            if self.codel_on {
                // A request that never waited is a zero-delay dequeue for CoDel: without
                // it, the verdict of the last queued dequeue would stand for as long as
                // every request is admitted at once.
                self.codel[lvl].on_pass(now);
            }
            return Some(permit);
        }
        None
    }

    /// An arrival that never waits: the same checks and order as [`arrive`](Self::arrive)
    /// up to the queue — the shed switch (`Shed`), a deadline already passed
    /// (`DeadlineUnmeetable`), then a free slot with nobody of the same or a more important
    /// level waiting — and where `arrive` would queue, a refusal (`LimitReached`, with the
    /// time to drain what waits as `retry_after`). Bindings use it for their synchronous
    /// `try_acquire`, so that path makes exactly the Gate's decisions.
    pub fn try_arrive(
        &self,
        now: u64,
        level: Priority,
        deadline: Option<u64>,
    ) -> Result<RawPermit, Rejected> {
        let now = self.observe(now);
        let lvl = self.clamp(level);
        if let Some(r) =
            self.refuse_early(now, lvl, deadline.filter(|&d| d <= MAX_NOW).unwrap_or(NO_DEADLINE))
        {
            return Err(r);
        }
        match self.admit_now(now, lvl) {
            Some(permit) => Ok(permit),
            None => {
                self.limiter.note_arrival(now, prio(lvl));
                Err(Rejected::new(Reason::LimitReached, self.retry_hint(self.service_ns())))
            }
        }
    }

    /// One arrival at `level` with an optional absolute `deadline` (ns, same clock; one
    /// above [`MAX_NOW`] means no deadline).
    /// Levels beyond the configured ones count as the least important level.
    ///
    /// In order: the shed switch (`Shed`); a deadline already passed
    /// (`DeadlineUnmeetable`); a free slot with nobody of the same or a more important
    /// level waiting (`Admitted`); otherwise the arrival would queue, so a deadline that
    /// cannot be met — `now + (waiters ahead + 1) × service / limit + service > deadline`
    /// — is refused (`DeadlineUnmeetable`); then a place in the queue, evicting a less
    /// important waiter if full (`Queued`), or `QueueFull`.
    pub fn arrive(&self, now: u64, level: Priority, deadline: Option<u64>) -> Arrival {
        let now = self.observe(now);
        let lvl = self.clamp(level);
        let deadline = deadline.filter(|&d| d <= MAX_NOW).unwrap_or(NO_DEADLINE);
        if let Some(r) = self.refuse_early(now, lvl, deadline) {
            return Arrival::Rejected(r);
        }
        if let Some(permit) = self.admit_now(now, lvl) {
            return Arrival::Admitted(permit);
        }
        self.enqueue(now, lvl, deadline)
    }

    /// The part of [`arrive`](Self::arrive) after the limiter: the deadline estimate, then
    /// a place in the queue.
    #[inline(never)]
    fn enqueue(&self, now: u64, lvl: usize, deadline: u64) -> Arrival {
        let p = prio(lvl);
        self.limiter.note_arrival(now, p);
        let service = self.service_ns();
        if deadline != NO_DEADLINE {
            let mut ahead = if lvl > 0 { self.queue.waiting_through(prio(lvl - 1)) } else { 0 };
            if !self.lifo_now(lvl) {
                ahead += self.queue.waiting(p);
            }
            let wait = self.drain_time(ahead, service);
            if now.saturating_add(wait).saturating_add(service) > deadline {
                self.unmeetable.fetch_add(1, Ordering::Relaxed);
                let hint = wait.max(MIN_RETRY_AFTER_NS);
                return Arrival::Rejected(Rejected::new(Reason::DeadlineUnmeetable, hint));
            }
        }
        match self.queue.push(p, now, deadline, true) {
            Some(ticket) => {
                if self.codel_on && self.codel[lvl].is_overloaded() {
                    // Queued where the queue stands: it may be sloughed at the timeout.
                    let due = now.saturating_add(self.codel[lvl].slough_timeout_ns()) + 1;
                    if due < self.standing_due.load(Ordering::Relaxed) {
                        self.standing_due.fetch_min(due, Ordering::Relaxed);
                    }
                }
                if self.max_wait_ns.is_some() && now < self.oldest_hint.load(Ordering::Relaxed) {
                    // Release: pairs with the Acquire load in `poll` (as for deadlines).
                    self.oldest_hint.fetch_min(now, Ordering::Release);
                }
                if deadline != NO_DEADLINE {
                    if !self.deadlines_used.load(Ordering::Relaxed) {
                        self.deadlines_used.store(true, Ordering::Relaxed);
                    }
                    // Release: pairs with the Acquire swap at the start of a dispatch
                    // round; a round that takes this bound also sees the push above.
                    self.deadline_hint.fetch_min(deadline, Ordering::Release);
                }
                Arrival::Queued(ticket)
            }
            None => {
                self.queue_full.fetch_add(1, Ordering::Relaxed);
                Arrival::Rejected(Rejected::new(Reason::QueueFull, self.retry_hint(service)))
            }
        }
    }

    /// Ends admitted work: a `Success` latency updates the expected service time and is a
    /// sample for the limit algorithm. Then call [`poll`](Self::poll) if anyone waits
    /// (and when [`next_wakeup`](Self::next_wakeup) comes, which may be at once with
    /// nobody waiting: an eviction still to report).
    /// A permit of another gate or limiter is refused with `ForeignHandle`.
    ///
    /// A `now` above [`MAX_NOW`] is refused with `TimeOutOfRange`:
    /// the clock does not move and no sample is taken, but the permit (moved in, so it
    /// cannot be handed back) still returns its slot — as `Ignored`, at the latest time
    /// seen — so a bad time never leaks a slot.
    pub fn release(&self, permit: RawPermit, now: u64, outcome: Outcome) -> Result<(), UsageError> {
        if let Err(e) = check_now(now) {
            self.limiter.release_raw(permit, self.latest(), Outcome::Ignored)?;
            return Err(e);
        }
        // The clock moves only once the permit is accepted: a refused call changes nothing.
        let now = now.max(self.latest());
        let latency = now.saturating_sub(permit.started_at());
        // The limiter records `now` (at most once per ms): the gate's clock is its clock.
        self.limiter.release_raw(permit, now, outcome)?;
        if outcome == Outcome::Success {
            self.record_service(latency, now);
        }
        Ok(())
    }

    /// Folds a latency into the service-time EWMA with a load and a store: under
    /// contention a concurrent sample may be overwritten (wait-free, no read-modify-write;
    /// the estimate is a mean, not a count).
    fn record_service(&self, latency: u64, now: u64) {
        let x = latency.min(MAX_SERVICE_NS) << SERVICE_FRAC;
        // Relaxed: the estimate orders nothing else.
        let old = self.service.0.load(Ordering::Relaxed);
        let new = if old == 0 {
            x
        } else {
            // old + alpha·(x − old), in 1/65536 ns, rounded down. |x − old| < 2^63 and
            // alpha < 2^33 in Q32, so the product fits in an i128 and the result in
            // [min(old, x) − 1, max(old, x)].
            let step = ((x as i128 - old as i128) * self.service_alpha_q32 as i128) >> 32;
            (old as i128 + step) as u64
        };
        // An unchanged estimate (a steady latency has converged) is not written: the line
        // stays shared in every core's cache.
        if new != old {
            self.service.0.store(new, Ordering::Relaxed);
        }
        self.follow_floor((new + (1 << (SERVICE_FRAC - 1))) >> SERVICE_FRAC, now);
    }

    /// Moves the uncongested service time towards the estimate `service` (ns) at `now`, at
    /// most once per ms: down to it at once, up by at most `floor × elapsed / 30 s`. A
    /// slowdown of the dependency (a queue of its own, or a slower dependency) raises the
    /// estimate within a few answers but this floor by at most a third in ten seconds, so a
    /// gate whose dependency slowed keeps judging its queue by the service time it had.
    fn follow_floor(&self, service: u64, now: u64) {
        // Relaxed: a heuristic; racing releases may overwrite each other's step.
        let at = self.service_floor_at.load(Ordering::Relaxed);
        let floor = self.service_floor.load(Ordering::Relaxed);
        let elapsed = now.saturating_sub(at);
        if floor != 0 && elapsed < MS {
            return;
        }
        let next = if floor == 0 {
            service
        } else {
            let rise = (u128::from(floor) * u128::from(elapsed) / u128::from(FLOOR_RISE_NS)) as u64;
            service.min(floor.saturating_add(rise))
        };
        self.service_floor.store(next, Ordering::Relaxed);
        self.service_floor_at.store(now, Ordering::Relaxed);
    }

    /// The uncongested service time, ns (0 = unknown): CoDel's target follows it.
    pub fn service_floor_ns(&self) -> u64 {
        self.service_floor.load(Ordering::Relaxed)
    }

    /// Withdraws a queued ticket. `UnknownTicket` if it already left (granted, expired,
    /// evicted, cancelled — a racing grant wins or loses as a whole), `ForeignHandle` if it
    /// belongs to another gate. If the ticket had evicted a waiter that no poll has
    /// reported yet, that report is still owed with nobody left waiting:
    /// [`next_wakeup`](Self::next_wakeup) returns `now` until a poll makes it.
    pub fn cancel(&self, ticket: Ticket) -> Result<(), UsageError> {
        self.queue.cancel(ticket).map(|_| ())
    }

    /// The on-call switch: `Some(p)` refuses every arrival at level ≥ p at once
    /// (`Shed`) and expires such waiters at the next poll; `None` turns it off.
    pub fn set_shed_level(&self, level: Option<Priority>) {
        let v = level.map_or(NO_SHED, |p| p.index() as u8);
        self.shed.store(v, Ordering::Relaxed);
    }

    /// The shed level in force.
    pub fn shed_level(&self) -> Option<Priority> {
        Priority::new(self.shed.load(Ordering::Relaxed))
    }

    /// Hands freed slots to waiters and reports waiters dropped, writing up to
    /// `out.len()` events into `out[0..n]`; returns `n`.
    ///
    /// Call it after `arrive` returned `Queued`, after every `release`, and when
    /// [`next_wakeup`](Self::next_wakeup) comes; call it again while it fills `out`.
    /// Returns 0 at once if another thread is polling (that thread does this call's
    /// work).
    ///
    /// **An event is never overwritten.** Only the leading run of `None` entries of `out`
    /// is used: poll stops at the first entry that still holds an event (a grant not
    /// taken yet, perhaps from another gate's poll into the same buffer), so a caller
    /// takes every event it was given (`Option::take`) before polling with the same
    /// buffer again. A buffer whose first entry is occupied makes `poll` return 0 and do
    /// nothing.
    pub fn poll(&self, now: u64, out: &mut [Option<Event>]) -> usize {
        let room = out.iter().position(Option::is_some).unwrap_or(out.len());
        let out = &mut out[..room];
        if out.is_empty() {
            return 0;
        }
        let now = self.observe(now);
        let mut sink = Sink { out, n: 0 };
        // The deadline bound, read before the dispatcher takes the arrivals. Acquire:
        // pairs with the Release fetch_min in `arrive` (after its push), so every deadline
        // in this value belongs to a waiter the first round links.
        let bound = if self.deadlines_used.load(Ordering::Relaxed) {
            self.deadline_hint.load(Ordering::Acquire)
        } else {
            NO_DEADLINE
        };
        // The same for the oldest arrival (only needed with a maximum wait).
        let oldest = if self.max_wait_ns.is_some() {
            self.oldest_hint.load(Ordering::Acquire)
        } else {
            u64::MAX
        };
        self.queue.try_dispatch(|d| {
            let finished = self.round(d, now, &mut sink, bound);
            if self.max_wait_ns.is_some() {
                let exact = (0..self.levels as usize)
                    .filter_map(|l| d.oldest(prio(l)).map(|w| w.enqueued_at()))
                    .min()
                    .unwrap_or(u64::MAX);
                // Relaxed: a bound for `next_wakeup`; fails (keeping a lower bound) if an
                // arrival lowered it since `oldest` was read.
                let _ = self.oldest_hint.compare_exchange(
                    oldest,
                    exact,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            finished
        });
        sink.n
    }

    /// One dispatch round; `false` if it stopped because `sink` is full. `bound` is the
    /// deadline bound read before the first round.
    fn round(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        now: u64,
        sink: &mut Sink<'_>,
        bound: u64,
    ) -> bool {
        // Relaxed: a lower bound of the waiters' deadlines, possibly including arrivals
        // not linked yet (a scan that finds nothing due is harmless).
        let current = if self.deadlines_used.load(Ordering::Relaxed) {
            self.deadline_hint.load(Ordering::Relaxed)
        } else {
            NO_DEADLINE
        };
        let mut earliest = None;
        let finished = self.round_inner(d, now, sink, current, &mut earliest);
        if let Some(e) = earliest {
            // Raise the bound to the exact earliest deadline of the linked waiters, unless
            // an arrival lowered it since `bound` was read (then its value stays: still a
            // lower bound). Relaxed: the bound orders nothing else.
            let _ =
                self.deadline_hint.compare_exchange(bound, e, Ordering::Relaxed, Ordering::Relaxed);
        }
        finished
    }

    fn round_inner(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        now: u64,
        sink: &mut Sink<'_>,
        hint: u64,
        earliest_out: &mut Option<u64>,
    ) -> bool {
        let service = self.service_ns();
        if self.codel_on {
            let floor = self.service_floor_ns();
            for c in &self.codel[..self.levels as usize] {
                c.follow_service(floor);
            }
        }
        // The `retry_after` of each expiry, from the queue as it stands at that expiry, so
        // the hints do not depend on how many events the caller's buffer takes per poll.
        let mut retry = || self.retry_hint(service);
        // 1. Link arrivals, settle cancels, report evictions.
        d.refresh(|t| sink.push(Event::Expired(t, Rejected::new(Reason::Evicted, retry()))));
        if sink.is_full() {
            return false;
        }
        // 2. Aging, then the shed switch.
        if let Some(a) = self.aging {
            while let Some(w) = d.oldest(a.from) {
                if now.saturating_sub(w.enqueued_at()) < a.after_ns {
                    break;
                }
                if d.demote(&w, a.to) {
                    bump(&self.aged, 1);
                }
            }
        }
        let shed = self.shed.load(Ordering::Relaxed) as usize;
        for l in shed..self.levels as usize {
            while let Some(w) = d.oldest(prio(l)) {
                if !self.drop_waiter(d, sink, &w, Reason::Shed, self.fallback_retry_after_ns) {
                    return false;
                }
            }
        }
        // 3. Expiry, if anything can expire: every waiter when the earliest deadline may
        // have come; the oldest end of every level always (maximum wait, HHVM order).
        let expiry_on = self.max_wait_ns.is_some() || hint != NO_DEADLINE;
        if now.saturating_add(service) > hint {
            let mut earliest = NO_DEADLINE;
            for l in 0..self.levels as usize {
                let mut cur = d.oldest(prio(l));
                while let Some(w) = cur {
                    cur = d.newer(&w);
                    if self.is_expired(&w, now, service) {
                        if !self.drop_waiter(d, sink, &w, Reason::Expired, retry()) {
                            return false;
                        }
                    } else {
                        earliest = earliest.min(w.deadline());
                    }
                }
            }
            *earliest_out = Some(earliest);
        }
        if expiry_on {
            for l in 0..self.levels as usize {
                if !self.expire_oldest(d, sink, prio(l), now, service, &mut retry) {
                    return false;
                }
            }
        }
        // A standing queue limits the wait (folly's slough timeout, the "Fail at Scale"
        // rule): while a level's CoDel says overloaded, no waiter of it waits longer
        // than the slough timeout. CoDel judges the waiter it dequeues, the newest in
        // LIFO, so without this the older waiters would wait out their callers' timeouts.
        if !self.slough_standing(d, sink, now, &mut retry) {
            return false;
        }
        // 4. Dispatch, most important level first.
        let mut refused_with_room = None;
        let mut held: Option<RawPermit> = None;
        let mut finished = true;
        'levels: for l in 0..self.levels as usize {
            let p = prio(l);
            if !d.has_linked(p) {
                continue;
            }
            let lifo = self.decide_lifo(l);
            while let Some(oldest) = d.oldest(p) {
                // Checked even when no sweep ran: a waiter is never dispatched late.
                if self.is_expired(&oldest, now, service) {
                    if !self.drop_waiter(d, sink, &oldest, Reason::Expired, retry()) {
                        finished = false;
                        break 'levels;
                    }
                    continue;
                }
                if sink.is_full() {
                    finished = false;
                    break 'levels;
                }
                let permit = match held.take() {
                    Some(permit) => permit,
                    None => match self.try_permit(now, p) {
                        Ok(permit) => permit,
                        Err(wait) => {
                            refused_with_room = wait;
                            break 'levels;
                        }
                    },
                };
                let chosen = if lifo { d.newest(p).unwrap_or(oldest) } else { oldest };
                if lifo && self.is_expired(&chosen, now, service) {
                    held = Some(permit);
                    self.drop_waiter(d, sink, &chosen, Reason::Expired, retry());
                    continue;
                }
                // CoDel judges the waiter being dequeued (the newest in LIFO), as folly
                // and HBase do.
                if self.codel_on {
                    let sojourn = now.saturating_sub(chosen.enqueued_at());
                    // Only RFC mode reads how many wait behind (folly ignores it).
                    let behind =
                        if self.codel_rfc { d.waiting(p).saturating_sub(1) as usize } else { 0 };
                    // The dispatch flag makes this thread the only caller, and orders the
                    // callers one after another.
                    if self.codel[l].on_dequeue_exclusive(now, sojourn, behind) {
                        held = Some(permit);
                        if d.remove(&chosen) {
                            bump(&self.sloughed, 1);
                            let rejected = Rejected::new(Reason::CodelSlough, retry());
                            sink.push(Event::Expired(chosen.ticket(), rejected));
                        }
                        continue;
                    }
                }
                if d.remove(&chosen) {
                    self.count_grant(l);
                    sink.push(Event::Granted(chosen.ticket(), permit));
                } else {
                    held = Some(permit);
                }
            }
            if let Some(permit) = held.take() {
                self.give_back(permit, now);
            }
        }
        if let Some(permit) = held.take() {
            self.give_back(permit, now);
        }
        let recheck = refused_with_room.map_or(0, |w: u64| now.saturating_add(w.max(MS)));
        if self.recheck_at.load(Ordering::Relaxed) != recheck {
            // Relaxed: a hint for `next_wakeup`.
            self.recheck_at.store(recheck, Ordering::Relaxed);
        }
        // Dispatch may have closed a CoDel interval as overloaded: its level's stale
        // waiters go in this round too, so a poll leaves nothing due (every binding, one
        // poll or several, reports the same events).
        if !self.slough_standing(d, sink, now, &mut retry) {
            return false;
        }
        let mut due = u64::MAX;
        if self.codel_on {
            for l in 0..self.levels as usize {
                if let Some(w) = d.oldest(prio(l)) {
                    if self.codel[l].is_overloaded() {
                        let timeout = self.codel[l].slough_timeout_ns();
                        due = due.min(w.enqueued_at().saturating_add(timeout).saturating_add(1));
                    }
                }
            }
        }
        if self.standing_due.load(Ordering::Relaxed) != due {
            // Relaxed: a hint for `next_wakeup` (an arrival may lower it meanwhile; the
            // next round sets it exactly again).
            self.standing_due.store(due, Ordering::Relaxed);
        }
        finished
    }

    /// Returns a permit no caller saw, and counts it so that `metrics` leaves it out.
    fn give_back(&self, permit: RawPermit, now: u64) {
        if self.limiter.release_raw(permit, now, Outcome::Ignored).is_ok() {
            bump(&self.unused_permits, 1);
        }
    }

    /// Whether every whole slot of the limit is visibly taken (a fractional limit never
    /// counts as full here: the limiter decides).
    fn limiter_full(&self) -> bool {
        let limit = self.limiter.limit();
        // For a limit ≥ 1, truncation is the floor (and saturates above u32::MAX).
        limit >= 1.0 && self.limiter.inflight() >= limit as u32
    }

    /// A permit for a waiter at `p`, or `Err(Some(wait))` if the limiter refused although
    /// slots are free (a partition reservation or a fractional limit's idle time, which
    /// lapse with time), `Err(None)` if every slot is taken (a release will come).
    fn try_permit(&self, now: u64, p: Priority) -> Result<RawPermit, Option<u64>> {
        if self.limiter_full() {
            return Err(None);
        }
        self.limiter
            .try_acquire_raw(now, p)
            .map_err(|r| (!self.limiter_full()).then_some(r.retry_after))
    }

    /// Expires waiters from the oldest end of `p` while they are expired. `false` if the
    /// sink filled up.
    fn expire_oldest(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        sink: &mut Sink<'_>,
        p: Priority,
        now: u64,
        service: u64,
        retry: &mut impl FnMut() -> u64,
    ) -> bool {
        self.drop_oldest_while(d, sink, p, Reason::Expired, retry, |w| {
            self.is_expired(w, now, service)
        })
    }

    /// Every level whose CoDel says overloaded sloughs its waiters older than the slough
    /// timeout, from the oldest end. `false` if the sink filled up.
    fn slough_standing(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        sink: &mut Sink<'_>,
        now: u64,
        retry: &mut impl FnMut() -> u64,
    ) -> bool {
        if !self.codel_on {
            return true;
        }
        for l in 0..self.levels as usize {
            let codel = &self.codel[l];
            if !d.has_linked(prio(l)) || !codel.is_overloaded() {
                continue;
            }
            let timeout = codel.slough_timeout_ns();
            let stale = |w: &Waiter| now.saturating_sub(w.enqueued_at()) > timeout;
            if !self.drop_oldest_while(d, sink, prio(l), Reason::CodelSlough, retry, stale) {
                return false;
            }
        }
        true
    }

    /// Drops waiters of `p` from the oldest end, for `reason`, while `pred` holds. `false`
    /// if the sink filled up.
    fn drop_oldest_while(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        sink: &mut Sink<'_>,
        p: Priority,
        reason: Reason,
        retry: &mut impl FnMut() -> u64,
        pred: impl Fn(&Waiter) -> bool,
    ) -> bool {
        while let Some(w) = d.oldest(p) {
            if !pred(&w) {
                break;
            }
            if !self.drop_waiter(d, sink, &w, reason, retry()) {
                return false;
            }
        }
        true
    }

    /// Removes `w` and reports it. `false` (and nothing changed) if the sink is full.
    fn drop_waiter(
        &self,
        d: &mut Dispatcher<'_, CAP>,
        sink: &mut Sink<'_>,
        w: &Waiter,
        reason: Reason,
        retry: u64,
    ) -> bool {
        if sink.is_full() {
            return false;
        }
        if d.remove(w) {
            match reason {
                Reason::Shed => bump(&self.shed_waiters, 1),
                Reason::CodelSlough => bump(&self.sloughed, 1),
                _ => bump(&self.expired, 1),
            }
            sink.push(Event::Expired(w.ticket(), Rejected::new(reason, retry)));
        }
        true
    }

    /// Whether `w` should be dropped: its remaining time is shorter than the expected
    /// service time, or it waited longer than the maximum wait.
    fn is_expired(&self, w: &Waiter, now: u64, service: u64) -> bool {
        (w.deadline() != NO_DEADLINE && now.saturating_add(service) > w.deadline())
            || self.max_wait_ns.is_some_and(|m| now.saturating_sub(w.enqueued_at()) > m)
    }

    /// Decides FIFO or LIFO for level `l` this round, counting switches to LIFO.
    fn decide_lifo(&self, l: usize) -> bool {
        let on = match self.lifo {
            LifoTrigger::Never => false,
            LifoTrigger::CodelOverloaded => self.codel_on && self.codel[l].is_overloaded(),
            LifoTrigger::Occupancy(f) => {
                f64::from(self.queue.len()) > f * self.queue.capacity() as f64
            }
        };
        let mask = self.lifo_mask.load(Ordering::Relaxed);
        let bit = 1u8 << l;
        if on != (mask & bit != 0) {
            if on {
                bump(&self.lifo_switches, 1);
            }
            // Relaxed: written by the dispatch holder only; read as a hint.
            self.lifo_mask.store(mask ^ bit, Ordering::Relaxed);
        }
        on
    }

    /// When the binding's one timer should next call [`poll`](Self::poll), if at all:
    /// the earliest moment a waiter's deadline or maximum wait (or, while its level's queue
    /// stands, the slough timeout) runs out, or a refusal
    /// with free slots may lapse; `now` while work is left for a poll (a poll stopped at
    /// its bound of rounds, or an eviction not reported yet — even with nobody waiting,
    /// once the arrival that evicted was cancelled). `None` when nothing waits and
    /// nothing is owed. Never earlier than `now`.
    pub fn next_wakeup(&self, now: u64) -> Option<u64> {
        let now = self.observe(now);
        if self.queue.needs_dispatch() {
            // A poll stopped at its bound of rounds (or panicked), or an eviction waits
            // to be reported: poll now.
            return Some(now);
        }
        if self.queue.is_empty() {
            return None;
        }
        let service = self.service_ns();
        let mut t = u64::MAX;
        let hint = self.deadline_hint.load(Ordering::Relaxed);
        if hint != NO_DEADLINE {
            t = t.min(hint.saturating_sub(service).saturating_add(1));
        }
        if let Some(m) = self.max_wait_ns {
            let oldest = self.oldest_hint.load(Ordering::Relaxed);
            if oldest != u64::MAX {
                t = t.min(oldest.saturating_add(m).saturating_add(1));
            }
        }
        // A standing queue's slough timeout (`u64::MAX`: none).
        t = t.min(self.standing_due.load(Ordering::Relaxed));
        let recheck = self.recheck_at.load(Ordering::Relaxed);
        if recheck != 0 {
            t = t.min(recheck);
        }
        (t != u64::MAX).then(|| t.max(now))
    }

    /// Readiness: `Overloaded` while shedding, while the queue is full, or while a level
    /// with waiters has a standing queue (its CoDel is overloaded); `Healthy` otherwise.
    pub fn state(&self) -> GateState {
        if self.shed.load(Ordering::Relaxed) != NO_SHED {
            return GateState::Overloaded;
        }
        let waiting = self.queue.len();
        if waiting > 0 && waiting as usize >= self.queue.capacity() {
            return GateState::Overloaded;
        }
        let standing = self.codel_on
            && (0..self.levels as usize)
                .any(|l| self.queue.waiting(prio(l)) > 0 && self.codel[l].is_overloaded());
        if standing {
            GateState::Overloaded
        } else {
            GateState::Healthy
        }
    }

    /// Waiters at `level`.
    pub fn waiting(&self, level: Priority) -> u32 {
        self.queue.waiting(level)
    }

    /// All waiters.
    pub fn waiting_total(&self) -> u32 {
        self.queue.len()
    }

    /// A snapshot of counters and gauges (scans the queue's slots: O(capacity)).
    pub fn metrics(&self) -> GateMetrics {
        let q = self.queue.metrics();
        let now = self.latest();
        let oldest_age_ns = q.oldest_enqueued_at.map_or(0, |t| now.saturating_sub(t));
        let granted = self.granted.load(Ordering::Relaxed);
        let expired = self.expired.load(Ordering::Relaxed);
        let sloughed = self.sloughed.load(Ordering::Relaxed);
        let shed_waiters = self.shed_waiters.load(Ordering::Relaxed);
        // Read before the limiter's counters: each unused permit was counted there first.
        let unused = self.unused_permits.load(Ordering::Relaxed);
        let mut limiter = self.limiter.metrics();
        limiter.admitted = limiter.admitted.saturating_sub(unused);
        limiter.ignored = limiter.ignored.saturating_sub(unused);
        GateMetrics {
            state: self.state(),
            waiting_by_level: q.waiting_by_level,
            waiting: q.waiting,
            capacity: q.capacity,
            oldest_age_ns,
            queued: granted
                + expired
                + sloughed
                + q.evictions
                + shed_waiters
                + q.cancels
                + u64::from(q.waiting),
            granted,
            expired,
            sloughed,
            evicted: q.evictions,
            cancelled: q.cancels,
            shed: self.shed_arrivals.load(Ordering::Relaxed) + shed_waiters,
            queue_full: self.queue_full.load(Ordering::Relaxed),
            deadline_unmeetable: self.unmeetable.load(Ordering::Relaxed),
            aged: self.aged.load(Ordering::Relaxed),
            lifo_switches: self.lifo_switches.load(Ordering::Relaxed),
            lifo_levels: self.lifo_mask.load(Ordering::Relaxed),
            shed_level: self.shed_level(),
            service_ns: self.service_ns(),
            service_floor_ns: self.service_floor_ns(),
            codel: core::array::from_fn(|l| self.codel[l].metrics()),
            limiter,
        }
    }

    /// The brownout dimmer at `now`: `d` in `[0, 1]`; serve optional content with
    /// probability `1 − d` (0: serve everything; 1: none). It rises before the gate
    /// sheds — from queue occupancy (a fifth of the queue onwards) and CoDel's queueing
    /// delay (half the target onwards) — and with the refusals of the last second; it
    /// falls back by at most 1/2 per second. The rule, the constants and the degradation
    /// order are in [`crate::dimmer`].
    ///
    /// Reads the gate and never changes its decisions: a `now` earlier than the gate's
    /// latest counts as the latest, and one above [`MAX_NOW`] acts at the latest time the
    /// dimmer has seen (neither moves the gate's clock).
    ///
    /// Progress: wait-free (one compare-and-swap attempt; a caller that finds another
    /// updating gets the last published value). Cost: a few loads per level; once per
    /// window, the gate's counters and a scan of the queue (O(capacity)).
    pub fn brownout(&self, now: u64) -> f64 {
        let now = if now > MAX_NOW { now } else { now.max(self.latest()) };
        self.dimmer.update(now, || self.dimmer_reading(), || self.dimmer_tally())
    }

    fn dimmer_reading(&self) -> dimmer::Reading {
        let sojourn_ns = if self.codel_on {
            (0..self.levels as usize)
                .filter(|&l| self.queue.waiting(prio(l)) > 0)
                .map(|l| self.codel[l].metrics().min_delay_ns)
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        dimmer::Reading {
            waiting: self.queue.len(),
            capacity: self.queue.capacity() as u32,
            sojourn_ns,
            target_ns: if self.codel_on { self.codel[0].config().target_ns } else { 0 },
            shedding: self.shed.load(Ordering::Relaxed) != NO_SHED,
        }
    }

    fn dimmer_tally(&self) -> dimmer::Tally {
        let m = self.metrics();
        dimmer::Tally {
            refused: m.queue_full
                + m.deadline_unmeetable
                + m.shed
                + m.expired
                + m.sloughed
                + m.evicted,
            admitted: m.limiter.admitted,
        }
    }
}

impl<const CAP: usize> Gate<CAP> {
    /// The index (below `CAP`) of the queue slot a ticket of this gate names, or `None`
    /// for a ticket of another gate or a slot beyond the capacity. Several tickets name
    /// the same slot over time (one per occupancy): a shared-memory layer keys its
    /// per-waiter records by it.
    pub fn ticket_slot(&self, ticket: Ticket) -> Option<usize> {
        self.queue.slot_of(ticket)
    }

    /// Whether `ticket` still waits in the queue.
    #[doc(hidden)]
    pub fn is_waiting(&self, ticket: Ticket) -> bool {
        self.queue.is_waiting(ticket)
    }

    /// Rebuilds the queue after a thread stopped for good inside it (see
    /// `WaitQueue::rebuild_after_lost_thread`): a shared-memory gate whose dispatching,
    /// arriving or cancelling process was killed. Permits that thread had taken are not
    /// given back here (the caller accounts for them).
    ///
    /// # Safety
    ///
    /// As `WaitQueue::rebuild_after_lost_thread`: no other thread arrives, cancels or
    /// polls during the call, and none that was doing so before ever runs again.
    #[doc(hidden)]
    #[allow(unsafe_code)]
    pub unsafe fn rebuild_after_lost_thread(&self) {
        // SAFETY: the caller's guarantee is the queue's.
        unsafe { self.queue.rebuild_after_lost_thread() }
    }

    /// Waiters granted so far: bumped by the dispatch round once the waiter is out of the
    /// queue, before its event (and permit) is handed out — a shared-memory layer that
    /// records the count with the events it took knows how many grants a dispatcher
    /// killed inside a round had in hand.
    #[doc(hidden)]
    pub fn granted_total(&self) -> u64 {
        self.granted.load(Ordering::Relaxed)
    }

    /// [`granted_total`](Self::granted_total) by level, modulo 256 each: level `l`'s count
    /// in bits `8l..8l+8`, wrapping without carrying into the next level. A shared-memory
    /// layer that records it with the events it took knows the level of each grant a
    /// dispatcher killed inside a round had in hand (at most 255 per level).
    #[doc(hidden)]
    pub fn granted_by_level(&self) -> u64 {
        self.granted_levels.load(Ordering::Relaxed)
    }

    /// Counts a grant at level `l` (dispatch holder only).
    fn count_grant(&self, l: usize) {
        bump(&self.granted, 1);
        let shift = 8 * (l % LEVELS);
        let w = self.granted_levels.load(Ordering::Relaxed);
        let byte = ((w >> shift) as u8).wrapping_add(1);
        // Relaxed: single writer, as `bump`.
        self.granted_levels
            .store(w & !(0xFF << shift) | u64::from(byte) << shift, Ordering::Relaxed);
    }

    /// Test hook: see `WaitQueue::abandon_dispatch_round` (a dispatcher killed inside a
    /// round). With `grant`, the oldest waiter is taken out only if a permit is free, and
    /// that permit is taken and the grant counted, as a round does before handing the
    /// event out; the permit and the event are then lost with the round.
    #[doc(hidden)]
    pub fn abandon_dispatch_round(&self, now: u64, grant: bool) -> Option<Ticket> {
        let mut permit = None;
        let taken = self.queue.abandon_dispatch_round(|w| {
            if !grant {
                return true;
            }
            permit = self.try_permit(now, w.level()).ok();
            permit.is_some()
        });
        if let Some(p) = permit {
            if taken.is_some() {
                self.count_grant(p.level().index());
            }
            core::mem::forget(p);
        }
        taken
    }
}

// SAFETY: `#[repr(C)]` down to the queue's slots, CoDel and the dimmer; no pointers and
// no `Drop`. The config fields (`codel_on`, `codel_rfc`, `levels`, `lifo`, `max_wait_ns`,
// `aging`, `service_alpha_q32`, `fallback_retry_after_ns`, and the queue's and CoDel's
// settings) are written once, before publication; afterwards only atomics holding
// integers change, plus the limiter's fold cell (see `Limiter`'s impl). LAYOUT covers the
// offset of every field of the gate and the sizes of the nested types and the limiter's
// own fingerprint; like the limiter's, it cannot see the encoding of the `Option`s among
// the config fields, so a segment also checks the build.
#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unsafe_code)]
unsafe impl<const CAP: usize> crate::layout::Placeable for Gate<CAP> {
    const LAYOUT: u64 = {
        use core::mem::{align_of, offset_of, size_of};
        crate::layout::fingerprint(
            "surgeguard_core::gate::Gate/2",
            &[
                CAP as u64,
                size_of::<Self>() as u64,
                align_of::<Self>() as u64,
                <Limiter as crate::layout::Placeable>::LAYOUT,
                size_of::<WaitQueue<CAP>>() as u64,
                size_of::<Codel>() as u64,
                size_of::<Dimmer>() as u64,
                size_of::<LifoTrigger>() as u64,
                size_of::<Option<u64>>() as u64,
                size_of::<Option<Aging>>() as u64,
                offset_of!(Self, limiter) as u64,
                offset_of!(Self, queue) as u64,
                offset_of!(Self, codel) as u64,
                offset_of!(Self, codel_on) as u64,
                offset_of!(Self, codel_rfc) as u64,
                offset_of!(Self, levels) as u64,
                offset_of!(Self, lifo) as u64,
                offset_of!(Self, max_wait_ns) as u64,
                offset_of!(Self, aging) as u64,
                offset_of!(Self, service_alpha_q32) as u64,
                offset_of!(Self, fallback_retry_after_ns) as u64,
                offset_of!(Self, shed) as u64,
                offset_of!(Self, service) as u64,
                offset_of!(Self, deadline_hint) as u64,
                offset_of!(Self, deadlines_used) as u64,
                offset_of!(Self, oldest_hint) as u64,
                offset_of!(Self, recheck_at) as u64,
                offset_of!(Self, standing_due) as u64,
                offset_of!(Self, service_floor) as u64,
                offset_of!(Self, service_floor_at) as u64,
                offset_of!(Self, lifo_mask) as u64,
                offset_of!(Self, lifo_switches) as u64,
                offset_of!(Self, granted) as u64,
                offset_of!(Self, granted_levels) as u64,
                offset_of!(Self, expired) as u64,
                offset_of!(Self, sloughed) as u64,
                offset_of!(Self, shed_waiters) as u64,
                offset_of!(Self, aged) as u64,
                offset_of!(Self, unused_permits) as u64,
                offset_of!(Self, shed_arrivals) as u64,
                offset_of!(Self, queue_full) as u64,
                offset_of!(Self, unmeetable) as u64,
                offset_of!(Self, dimmer) as u64,
                crate::queue::LAYOUT_WORDS[0],
                crate::queue::LAYOUT_WORDS[1],
                crate::queue::LAYOUT_WORDS[2],
            ],
        )
    };
}

// The gate's words each start where the admission path expects them (cheap checks of
// the layout the fingerprint covers).
#[cfg(all(not(loom), target_has_atomic = "64"))]
const _: () = {
    assert!(core::mem::offset_of!(Gate<64>, limiter) == 0);
    assert!(core::mem::align_of::<Gate<64>>() == 128);
    assert!(core::mem::size_of::<Gate<64>>() % 128 == 0);
};

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::limit::{AlgorithmConfig, FixedConfig};
    use crate::queue::capacity_for;
    use std::vec::Vec;

    const P0: Priority = Priority::CRITICAL;
    const P1: Priority = Priority::NORMAL;
    const P2: Priority = Priority::BACKGROUND;

    fn fixed(limit: f64, levels: u8) -> LimiterConfig {
        let mut weights = [0.0; LEVELS];
        weights[..3].copy_from_slice(&[0.0, 0.0, 0.0]);
        LimiterConfig {
            levels,
            weights,
            ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: limit,
                min_limit: limit.min(1.0),
                max_limit: limit.max(1.0),
            }))
        }
    }

    /// A gate with a fixed limit, no partitions, no CoDel, FIFO.
    fn plain<const C: usize>(limit: f64, levels: u8) -> Gate<C> {
        Gate::new(GateConfig {
            limiter: fixed(limit, levels),
            codel: None,
            lifo: LifoTrigger::Never,
            ..GateConfig::default()
        })
        .unwrap()
    }

    fn admitted(a: Arrival) -> RawPermit {
        match a {
            Arrival::Admitted(p) => p,
            other => panic!("expected Admitted, got {other:?}"),
        }
    }

    fn queued(a: Arrival) -> Ticket {
        match a {
            Arrival::Queued(t) => t,
            other => panic!("expected Queued, got {other:?}"),
        }
    }

    fn rejected(a: Arrival) -> Rejected {
        match a {
            Arrival::Rejected(r) => r,
            other => panic!("expected Rejected, got {other:?}"),
        }
    }

    type Grants = Vec<(Ticket, RawPermit)>;

    /// Polls with a roomy buffer; returns (granted tickets with permits, expired).
    fn poll<const C: usize>(g: &Gate<C>, now: u64) -> (Grants, Vec<(Ticket, Reason)>) {
        let mut out: [Option<Event>; 16] = Default::default();
        let n = g.poll(now, &mut out);
        let mut granted = Vec::new();
        let mut expired = Vec::new();
        for e in out.iter_mut().take(n) {
            match e.take().unwrap() {
                Event::Granted(t, p) => granted.push((t, p)),
                Event::Expired(t, r) => {
                    assert!(r.retry_after > 0, "every rejection carries a retry_after");
                    expired.push((t, r.reason));
                }
            }
        }
        assert!(out.iter().all(Option::is_none), "nothing written beyond n");
        (granted, expired)
    }

    fn tickets(g: &[(Ticket, RawPermit)]) -> Vec<Ticket> {
        g.iter().map(|(t, _)| *t).collect()
    }

    #[test]
    fn admits_under_the_limit_then_queues_and_grants_fifo_on_release() {
        let g: Gate<8> = plain(2.0, 1);
        let a = admitted(g.arrive(0, P0, None));
        let b = admitted(g.arrive(0, P0, None));
        let t1 = queued(g.arrive(1, P0, None));
        let t2 = queued(g.arrive(2, P0, None));
        assert_eq!(poll(&g, 3).0.len(), 0, "no slot free: nothing granted");
        g.release(a, 10 * MS, Outcome::Success).unwrap();
        let (granted, expired) = poll(&g, 10 * MS);
        assert_eq!(tickets(&granted), [t1]);
        assert!(expired.is_empty());
        assert_eq!(g.limiter().inflight(), 2);
        g.release(b, 11 * MS, Outcome::Dropped).unwrap();
        let (granted2, _) = poll(&g, 11 * MS);
        assert_eq!(tickets(&granted2), [t2]);
        for (_, p) in granted.into_iter().chain(granted2) {
            g.release(p, 12 * MS, Outcome::Success).unwrap();
        }
        assert_eq!(g.limiter().inflight(), 0);
        let m = g.metrics();
        assert_eq!((m.queued, m.granted, m.waiting), (2, 2, 0));
        // EWMA (alpha 0.1) of the successes: 10 ms, then 2 ms, then 1 ms.
        let mut ewma = 10e6;
        for x in [2e6, 1e6] {
            ewma += 0.1 * (x - ewma);
        }
        assert_eq!(m.service_ns, libm::round(ewma) as u64);
    }

    #[test]
    fn an_arrival_never_overtakes_an_equal_or_more_important_waiter() {
        let g: Gate<8> = plain(1.0, 3);
        let a = admitted(g.arrive(0, P1, None));
        let waiting = queued(g.arrive(1, P1, None));
        g.release(a, 2, Outcome::Ignored).unwrap();
        // A slot is free, but a normal waiter is queued: a normal or background arrival
        // queues behind it...
        let later = queued(g.arrive(3, P1, None));
        let bg = queued(g.arrive(3, P2, None));
        assert_eq!(g.limiter().inflight(), 0);
        // ...while a more important arrival may take the free slot at once.
        let crit = admitted(g.arrive(3, P0, None));
        g.release(crit, 4, Outcome::Ignored).unwrap();
        let (granted, _) = poll(&g, 4);
        assert_eq!(tickets(&granted), [waiting]);
        let mut all = granted;
        for expect in [later, bg] {
            let p = all.pop().unwrap().1;
            g.release(p, 5, Outcome::Ignored).unwrap();
            let (next, _) = poll(&g, 5);
            assert_eq!(tickets(&next), [expect]);
            all.extend(next);
        }
        for (_, p) in all {
            g.release(p, 6, Outcome::Ignored).unwrap();
        }
    }

    #[test]
    fn most_important_level_is_dispatched_first() {
        let g: Gate<8> = plain(1.0, 3);
        let a = admitted(g.arrive(0, P0, None));
        let b = queued(g.arrive(1, P2, None));
        let n = queued(g.arrive(2, P1, None));
        let c = queued(g.arrive(3, P0, None));
        g.release(a, 4, Outcome::Ignored).unwrap();
        let mut order = Vec::new();
        for t in 5..8 {
            let (granted, _) = poll(&g, t);
            assert_eq!(granted.len(), 1);
            order.push(granted[0].0);
            g.release(granted.into_iter().next().unwrap().1, t, Outcome::Ignored).unwrap();
        }
        assert_eq!(order, [c, n, b]);
    }

    #[test]
    fn a_refused_important_arrival_gets_the_next_freed_slot_under_partitions() {
        // Default weights 0.7 / 0.25 / 0.05 of a limit of 10: shares 7 / 2 / 0.
        let cfg = GateConfig {
            limiter: LimiterConfig { weights: LimiterConfig::default().weights, ..fixed(10.0, 3) },
            codel: None,
            ..GateConfig::default()
        };
        let g: Gate<16> = Gate::new(cfg).unwrap();
        // Critical is active and holds 1: its target is 1 + 1 = 2, so it holds back 1.
        let mut permits = std::vec![admitted(g.arrive(MS, P0, None))];
        let mut bg = Vec::new();
        for _ in 0..8 {
            bg.push(admitted(g.arrive(MS, P2, None)));
        }
        let bg_waiter = queued(g.arrive(MS, P2, None));
        for _ in 0..1 {
            permits.push(admitted(g.arrive(MS, P0, None)));
        }
        let crit_waiter = queued(g.arrive(2 * MS, P0, None));
        // A background permit returns: the slot goes to the critical waiter.
        g.release(bg.pop().unwrap(), 3 * MS, Outcome::Success).unwrap();
        let (granted, _) = poll(&g, 3 * MS);
        assert_eq!(tickets(&granted), [crit_waiter]);
        assert_eq!(g.waiting(P2), 1);
        let _ = bg_waiter;
        for p in permits.into_iter().chain(bg).chain(granted.into_iter().map(|(_, p)| p)) {
            g.release(p, 4 * MS, Outcome::Ignored).unwrap();
        }
    }

    #[test]
    fn a_reservation_refusal_schedules_a_recheck_so_no_wakeup_is_lost() {
        let cfg = GateConfig {
            limiter: LimiterConfig { weights: LimiterConfig::default().weights, ..fixed(10.0, 3) },
            codel: None,
            ..GateConfig::default()
        };
        let g: Gate<16> = Gate::new(cfg).unwrap();
        // Critical is active with a peak of 6: its target is 6 + 1 = 7 (its share), all
        // held back once its permits return.
        let c: Vec<_> = (0..6).map(|_| admitted(g.arrive(MS, P0, None))).collect();
        for p in c {
            g.release(p, MS, Outcome::Ignored).unwrap();
        }
        let bg: Vec<_> = (0..3).map(|_| admitted(g.arrive(MS, P2, None))).collect();
        let t = queued(g.arrive(MS, P2, None));
        assert!(poll(&g, 2 * MS).0.is_empty(), "critical's reservation holds");
        // Slots are free but refused: the gate asks to be polled again, no release needed.
        let wake = g.next_wakeup(2 * MS).expect("a recheck is due");
        assert!(wake > 2 * MS);
        // Once critical has been idle for `active_ns`, its share is lent.
        let lapse = MS + SEC + 1; // critical last seen at 1 ms, active_ns = 1 s
        let mut now = wake;
        let mut granted = Vec::new();
        while granted.is_empty() {
            assert!(now <= lapse + SEC, "the waiter was never granted");
            granted = poll(&g, now).0;
            now = g.next_wakeup(now).unwrap_or(now + MS).max(now + 1);
        }
        assert_eq!(tickets(&granted), [t]);
        for p in bg.into_iter().chain(granted.into_iter().map(|(_, p)| p)) {
            g.release(p, now, Outcome::Ignored).unwrap();
        }
    }

    #[test]
    fn try_arrive_makes_arrives_decisions_without_queueing() {
        let g: Gate<8> = plain(1.0, 3);
        let held = g.try_arrive(10 * MS, P1, None).unwrap();
        // Full: where `arrive` would queue, `try_arrive` refuses and queues nothing.
        let r = g.try_arrive(10 * MS, P0, None).unwrap_err();
        assert_eq!(r.reason, Reason::LimitReached);
        assert!(r.retry_after > 0);
        assert_eq!(g.waiting_total(), 0);
        // Time behind the gate's clock is the gate's clock: a 1 ns deadline has passed.
        g.release(held, 11 * MS, Outcome::Success).unwrap();
        let r = g.try_arrive(5 * MS, P0, Some(5 * MS + 1)).unwrap_err();
        assert_eq!(r.reason, Reason::DeadlineUnmeetable);
        // No overtaking: a free slot with a waiter of the same level ahead is refused.
        let held = admitted(g.arrive(12 * MS, P1, None));
        let t = queued(g.arrive(12 * MS, P1, None));
        g.release(held, 13 * MS, Outcome::Success).unwrap();
        assert_eq!(g.try_arrive(13 * MS, P1, None).unwrap_err().reason, Reason::LimitReached);
        let (granted, _) = poll(&g, 13 * MS);
        assert_eq!(tickets(&granted), [t]);
        // The shed switch.
        g.set_shed_level(Some(P2));
        assert_eq!(g.try_arrive(14 * MS, P2, None).unwrap_err().reason, Reason::Shed);
        for (_, p) in granted {
            g.release(p, 14 * MS, Outcome::Ignored).unwrap();
        }
        assert_eq!(g.limiter().inflight(), 0);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn expiry_hints_do_not_depend_on_the_poll_buffer_size() {
        // The same CoDel-sloughing sequence polled 16 events at a time and 1 at a time.
        // Releases are `Ignored` (no service sample), so CoDel keeps folly's 5 ms / 100 ms.
        let run = |batch: usize| {
            let cfg = GateConfig { limiter: fixed(1.0, 1), ..GateConfig::default() };
            let g: Gate<32> = Gate::new(cfg).unwrap();
            let mut permit = admitted(g.arrive(0, P0, None));
            // Tickets carry the gate's id: compare by arrival order instead.
            let order: Vec<Ticket> = (1..=20).map(|k| queued(g.arrive(k * MS, P0, None))).collect();
            let idx = |t: Ticket| order.iter().position(|&o| o == t).unwrap();
            let mut seen = Vec::new();
            for step in 1..=6u64 {
                let now = step * 60 * MS;
                g.release(permit, now, Outcome::Ignored).unwrap();
                let mut granted = None;
                loop {
                    let mut out: [Option<Event>; 16] = Default::default();
                    let n = g.poll(now, &mut out[..batch]);
                    for e in out.iter_mut().take(n) {
                        match e.take().unwrap() {
                            Event::Granted(t, p) => {
                                seen.push((idx(t), None, 0));
                                granted = Some(p);
                            }
                            Event::Expired(t, r) => {
                                seen.push((idx(t), Some(r.reason), r.retry_after));
                            }
                        }
                    }
                    if n < batch {
                        break;
                    }
                }
                match granted {
                    Some(p) => permit = p,
                    None => return seen,
                }
            }
            seen
        };
        let roomy = run(16);
        assert!(roomy.iter().any(|(_, r, _)| *r == Some(Reason::CodelSlough)), "{roomy:?}");
        assert_eq!(run(1), roomy);
    }

    #[test]
    fn a_standing_queue_sloughs_stale_waiters_from_the_oldest_end_and_lifo_serves_the_newest() {
        let cfg = GateConfig { limiter: fixed(1.0, 1), ..GateConfig::default() };
        let g: Gate<16> = Gate::new(cfg).unwrap();
        // Releases are `Ignored` (no service sample): CoDel keeps folly's 5 ms / 100 ms.
        // Taken from the limiter, not through the gate: an arrival admitted at once would
        // be a zero-delay dequeue for CoDel, and this test wants a queue that stands.
        let mut permit = g.limiter().try_acquire_raw(0, P0).unwrap();
        let old: Vec<_> = (1..=4).map(|k| queued(g.arrive(k * MS, P0, None))).collect();
        // t = 50 ms: first dequeue of CoDel's first interval, FIFO.
        g.release(permit, 50 * MS, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 50 * MS);
        assert_eq!((tickets(&granted), expired.len()), (std::vec![old[0]], 0));
        permit = granted.into_iter().next().unwrap().1;
        // t = 160 ms: the interval's minimum was 49 ms > 5 ms: overloaded from now on, but
        // the first dequeue of the new interval is never dropped. While the queue stands,
        // no waiter waits longer than the slough timeout (2 × target): the stale ones go in
        // the same round, from the oldest end (in LIFO, CoDel's own verdict reads only the
        // newest, which would leave them to wait out their callers' timeouts).
        g.release(permit, 160 * MS, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 160 * MS);
        assert_eq!(tickets(&granted), [old[1]]);
        assert_eq!(expired, [(old[2], Reason::CodelSlough), (old[3], Reason::CodelSlough)]);
        assert_eq!(g.next_wakeup(160 * MS), None, "nothing waits, nothing is due");
        permit = granted.into_iter().next().unwrap().1;
        // Two fresh arrivals: LIFO serves the newest, and CoDel judges the waiter it
        // dequeues (4 ms: kept), as folly and HBase do.
        let f1 = queued(g.arrive(170 * MS, P0, None));
        let f2 = queued(g.arrive(171 * MS, P0, None));
        assert_eq!(g.state(), GateState::Overloaded, "a standing queue");
        assert_eq!(g.next_wakeup(171 * MS), Some(170 * MS + 10 * MS + 1), "f1's slough time");
        g.release(permit, 175 * MS, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 175 * MS);
        assert_eq!((tickets(&granted), expired.len()), (std::vec![f2], 0));
        permit = granted.into_iter().next().unwrap().1;
        // Then f1 (6 ms: kept).
        g.release(permit, 176 * MS, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 176 * MS);
        assert_eq!((tickets(&granted), expired.len()), (std::vec![f1], 0));
        permit = granted.into_iter().next().unwrap().1;
        g.release(permit, 177 * MS, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 177 * MS);
        assert!(granted.is_empty() && expired.is_empty());
        let m = g.metrics();
        assert_eq!((m.sloughed, m.lifo_switches, m.lifo_levels), (2, 1, 1));
        assert_eq!(g.waiting(P0), 0);
        assert_eq!((m.limiter.admitted, m.limiter.ignored), (5, 5), "no unseen admission");
    }

    #[test]
    fn hhvm_oldest_end_expiry_still_runs_in_lifo_mode() {
        let cfg = GateConfig {
            limiter: fixed(1.0, 1),
            codel: None,
            lifo: LifoTrigger::Occupancy(0.5),
            max_wait_ns: Some(50 * MS),
            ..GateConfig::default()
        };
        let g: Gate<4> = Gate::new(cfg).unwrap();
        let a = admitted(g.arrive(0, P0, None));
        let w1 = queued(g.arrive(MS, P0, None));
        let w: Vec<_> = (100..103).map(|k| queued(g.arrive(k * MS, P0, None))).collect();
        assert_eq!(g.next_wakeup(103 * MS), Some(103 * MS), "w1 is already past its wait");
        g.release(a, 110 * MS, Outcome::Success).unwrap();
        let (granted, expired) = poll(&g, 110 * MS);
        assert_eq!(expired, [(w1, Reason::Expired)], "the oldest is expired, not left behind");
        assert_eq!(tickets(&granted), [w[2]], "occupancy 4/4 > 0.5: newest first");
        assert_eq!(g.metrics().lifo_switches, 1);
        // Back under the threshold (2/4 is not above 0.5): FIFO again.
        g.release(granted.into_iter().next().unwrap().1, 111 * MS, Outcome::Success).unwrap();
        let (granted, _) = poll(&g, 111 * MS);
        assert_eq!(tickets(&granted), [w[0]]);
        assert_eq!(g.metrics().lifo_levels, 0);
        g.release(granted.into_iter().next().unwrap().1, 112 * MS, Outcome::Ignored).unwrap();
    }

    #[test]
    fn deadlines_are_judged_against_expected_service_and_drain_rate() {
        let cfg = GateConfig {
            limiter: fixed(1.0, 1),
            codel: None,
            initial_service_ns: 10 * MS,
            ..GateConfig::default()
        };
        let g: Gate<8> = Gate::new(cfg).unwrap();
        // Already past: refused even with a free slot.
        let r = rejected(g.arrive(MS, P0, Some(MS)));
        assert_eq!(r.reason, Reason::DeadlineUnmeetable);
        let a = admitted(g.arrive(MS, P0, Some(100 * MS)));
        // 1 ms + one completion (10 ms) + service 10 ms = 21 ms ≤ 30 ms: queued.
        let b = queued(g.arrive(MS, P0, Some(30 * MS)));
        // 2 ms + two completions + service = 32 ms > 25 ms: refused at once.
        let r = rejected(g.arrive(2 * MS, P0, Some(25 * MS)));
        assert_eq!(r, Rejected::new(Reason::DeadlineUnmeetable, 20 * MS));
        // b is due for the timer when its remaining time falls below the service time.
        assert_eq!(g.next_wakeup(3 * MS), Some(20 * MS + 1));
        assert!(poll(&g, 20 * MS).1.is_empty());
        // At 25 ms the slot frees, but b has 5 ms left and service takes ~11.4 ms: dropped.
        g.release(a, 25 * MS, Outcome::Success).unwrap();
        assert_eq!(g.service_ns(), (10e6 + 0.1 * (24e6 - 10e6)) as u64);
        let (granted, expired) = poll(&g, 25 * MS);
        assert!(granted.is_empty(), "never dispatched late");
        assert_eq!(expired, [(b, Reason::Expired)]);
        assert_eq!(g.metrics().deadline_unmeetable, 2);
        assert_eq!(g.next_wakeup(26 * MS), None);
    }

    #[test]
    fn a_timer_at_next_wakeup_expires_the_waiter() {
        let g: Gate<8> = plain(1.0, 1);
        let a = admitted(g.arrive(0, P0, None));
        let b = queued(g.arrive(0, P0, Some(40 * MS)));
        let c = queued(g.arrive(0, P0, Some(30 * MS)));
        let wake = g.next_wakeup(0).unwrap();
        assert_eq!(wake, 30 * MS + 1, "service unknown: the deadline itself");
        assert!(poll(&g, wake - 1).1.is_empty());
        assert_eq!(poll(&g, wake).1, [(c, Reason::Expired)]);
        assert_eq!(g.next_wakeup(wake), Some(40 * MS + 1));
        let _ = b;
        g.release(a, wake, Outcome::Ignored).unwrap();
    }

    #[test]
    fn full_queue_evicts_less_important_waiters_and_refuses_the_rest() {
        let g: Gate<2> = plain(1.0, 3);
        let a = admitted(g.arrive(0, P1, None));
        let b1 = queued(g.arrive(1, P2, None));
        let b2 = queued(g.arrive(2, P2, None));
        let r = rejected(g.arrive(3, P2, None));
        assert_eq!(r.reason, Reason::QueueFull);
        assert_eq!(r.retry_after, SEC, "nothing known yet: the fallback");
        let c = queued(g.arrive(4, P0, None)); // evicts b1 (oldest background)
        let n = queued(g.arrive(5, P1, None)); // evicts b2
        assert_eq!(rejected(g.arrive(6, P1, None)).reason, Reason::QueueFull);
        assert_eq!(g.cancel(b1), Err(UsageError::UnknownTicket));
        assert_eq!(g.state(), GateState::Overloaded, "full");
        let (granted, expired) = poll(&g, 7);
        assert!(granted.is_empty());
        let mut ev = expired.clone();
        ev.sort_by_key(|e| e.0);
        let mut want = std::vec![(b1, Reason::Evicted), (b2, Reason::Evicted)];
        want.sort_by_key(|e| e.0);
        assert_eq!(ev, want);
        let m = g.metrics();
        assert_eq!((m.evicted, m.queue_full, m.waiting), (2, 2, 2));
        assert_eq!((m.waiting_by_level[0], m.waiting_by_level[1]), (1, 1));
        let _ = (c, n);
        g.release(a, 8, Outcome::Ignored).unwrap();
    }

    #[test]
    fn aging_moves_a_normal_waiter_to_background_after_500_ms() {
        let cfg = GateConfig {
            limiter: fixed(1.0, 3),
            codel: None,
            aging: Some(Aging::NORMAL_TO_BACKGROUND_AFTER_500_MS),
            ..GateConfig::default()
        };
        let g: Gate<8> = Gate::new(cfg).unwrap();
        let a = admitted(g.arrive(0, P0, None));
        let old_bg = queued(g.arrive(0, P2, None));
        let n = queued(g.arrive(10 * MS, P1, None));
        let new_bg = queued(g.arrive(20 * MS, P2, None));
        assert!(poll(&g, 500 * MS).0.is_empty());
        assert_eq!(g.waiting(P1), 1, "exactly 500 ms is not older than 500 ms");
        poll(&g, 511 * MS);
        assert_eq!((g.waiting(P1), g.waiting(P2)), (0, 3));
        assert_eq!(g.metrics().aged, 1);
        // In background it keeps its arrival order: after old_bg, before new_bg.
        let mut order = Vec::new();
        let mut p = a;
        for t in 0..3 {
            g.release(p, 520 * MS + t, Outcome::Ignored).unwrap();
            let (granted, _) = poll(&g, 520 * MS + t);
            order.push(granted[0].0);
            p = granted.into_iter().next().unwrap().1;
        }
        assert_eq!(order, [old_bg, n, new_bg]);
        g.release(p, 530 * MS, Outcome::Ignored).unwrap();
    }

    #[test]
    fn the_shed_switch_refuses_and_expires_less_important_levels() {
        let g: Gate<8> = plain(1.0, 3);
        let a = admitted(g.arrive(0, P0, None));
        let n = queued(g.arrive(1, P1, None));
        let c = queued(g.arrive(1, P0, None));
        g.set_shed_level(Some(P1));
        assert_eq!(g.state(), GateState::Overloaded);
        assert_eq!(g.shed_level(), Some(P1));
        for p in [P1, P2] {
            let r = rejected(g.arrive(2, p, None));
            assert_eq!((r.reason, r.retry_after), (Reason::Shed, SEC));
        }
        let (granted, expired) = poll(&g, 3);
        assert!(granted.is_empty());
        assert_eq!(expired, [(n, Reason::Shed)]);
        g.release(a, 4, Outcome::Ignored).unwrap();
        let (granted, _) = poll(&g, 4);
        assert_eq!(tickets(&granted), [c], "critical still served");
        g.set_shed_level(None);
        assert_eq!(g.state(), GateState::Healthy);
        assert!(matches!(g.arrive(5, P2, None), Arrival::Queued(_)));
        assert_eq!(g.metrics().shed, 3);
        g.release(granted.into_iter().next().unwrap().1, 6, Outcome::Ignored).unwrap();
    }

    #[test]
    fn cancel_withdraws_once_and_detects_stale_and_foreign_tickets() {
        let g: Gate<4> = plain(1.0, 1);
        let other: Gate<4> = plain(1.0, 1);
        let a = admitted(g.arrive(0, P0, None));
        let t = queued(g.arrive(1, P0, None));
        let u = queued(g.arrive(2, P0, None));
        assert_eq!(other.cancel(t), Err(UsageError::ForeignHandle));
        assert_eq!(g.cancel(t), Ok(()));
        assert_eq!(g.cancel(t), Err(UsageError::UnknownTicket));
        g.release(a, 3, Outcome::Ignored).unwrap();
        let (granted, expired) = poll(&g, 3);
        assert_eq!(tickets(&granted), [u], "the cancelled ticket is never granted");
        assert!(expired.is_empty());
        assert_eq!(g.cancel(u), Err(UsageError::UnknownTicket), "already granted");
        let p = granted.into_iter().next().unwrap().1;
        assert_eq!(other.release(p, 4, Outcome::Success), Err(UsageError::ForeignHandle));
        assert_eq!(g.metrics().cancelled, 1);
    }

    #[test]
    fn a_small_buffer_loses_nothing() {
        let g: Gate<8> = plain(1.0, 2);
        let a = admitted(g.arrive(0, P0, None));
        let doomed: Vec<_> = (0..3).map(|k| queued(g.arrive(k, P0, Some(10 * MS + k)))).collect();
        let bg = queued(g.arrive(3, P1, None));
        // An eviction pending too: fill the rest and push one more critical.
        g.release(a, 20 * MS, Outcome::Ignored).unwrap();
        let mut seen = Vec::new();
        let mut grants = Vec::new();
        loop {
            let mut out: [Option<Event>; 1] = Default::default();
            let n = g.poll(20 * MS, &mut out);
            if n == 0 {
                break;
            }
            match out[0].take().unwrap() {
                Event::Expired(t, r) => seen.push((t, r.reason)),
                Event::Granted(t, p) => grants.push((t, p)),
            }
        }
        let want: Vec<_> = doomed.iter().map(|&t| (t, Reason::Expired)).collect();
        assert_eq!(seen, want);
        assert_eq!(tickets(&grants), [bg]);
        for (_, p) in grants {
            g.release(p, 21 * MS, Outcome::Ignored).unwrap();
        }
    }

    #[test]
    fn an_unconsumed_event_is_never_overwritten() {
        let g: Gate<4> = plain(1.0, 1);
        let a = admitted(g.arrive(0, P0, None));
        let t = queued(g.arrive(0, P0, None));
        g.release(a, 1, Outcome::Ignored).unwrap();
        let mut out: [Option<Event>; 2] = Default::default();
        assert_eq!(g.poll(1, &mut out), 1);
        assert_eq!(g.limiter().inflight(), 1);
        let u = queued(g.arrive(2, P0, Some(3)));
        // Polling into the same buffer without taking the grant: nothing is written, not
        // even into the free entry after it.
        assert_eq!(g.poll(10, &mut out), 0);
        let Some(Event::Granted(t0, p)) = out[0].take() else { panic!("the grant stays") };
        assert_eq!(t0, t);
        assert!(out[1].is_none());
        assert_eq!(g.poll(10, &mut out), 1);
        assert!(matches!(out[0].take(), Some(Event::Expired(x, _)) if x == u));
        g.release(p, 11, Outcome::Success).unwrap();
        assert_eq!(g.limiter().inflight(), 0);
    }

    #[test]
    fn configs_are_validated() {
        let ok = GateConfig::default();
        assert!(Gate::<4>::new(ok).is_ok());
        let bad = [
            GateConfig { queue_capacity: Some(5), ..ok },
            GateConfig { lifo: LifoTrigger::Occupancy(f64::NAN), ..ok },
            GateConfig { lifo: LifoTrigger::Occupancy(0.0), ..ok },
            GateConfig { lifo: LifoTrigger::Occupancy(1.5), ..ok },
            GateConfig { max_wait_ns: Some(0), ..ok },
            GateConfig { aging: Some(Aging { from: P2, to: P1, after_ns: MS }), ..ok },
            GateConfig { aging: Some(Aging { from: P1, to: P2, after_ns: 0 }), ..ok },
            GateConfig {
                aging: Some(Aging { from: P1, to: Priority::new(5).unwrap(), after_ns: MS }),
                ..ok
            },
            GateConfig { service_alpha: 0.0, ..ok },
            GateConfig { service_alpha: f64::INFINITY, ..ok },
            GateConfig { fallback_retry_after_ns: 0, ..ok },
            GateConfig { initial_service_ns: u64::MAX, ..ok },
            GateConfig {
                codel: Some(CodelConfig { target_ns: 0, ..CodelConfig::default() }),
                ..ok
            },
            GateConfig { limiter: LimiterConfig { levels: 0, ..ok.limiter }, ..ok },
        ];
        for cfg in bad {
            assert!(Gate::<4>::new(cfg).is_err(), "{cfg:?} accepted");
        }
        assert!(Gate::<{ capacity_for(2_000, 100 * MS) }>::new(ok).is_ok());
    }

    #[test]
    fn metrics_report_depth_age_and_state() {
        let g: Gate<4> = plain(1.0, 3);
        assert_eq!(g.state(), GateState::Healthy);
        let a = admitted(g.arrive(0, P0, None));
        let _t = queued(g.arrive(10 * MS, P1, None));
        let _u = queued(g.arrive(20 * MS, P2, None));
        g.poll(50 * MS, &mut [None]);
        let m = g.metrics();
        assert_eq!((m.waiting, m.waiting_by_level[1], m.waiting_by_level[2]), (2, 1, 1));
        assert_eq!((m.oldest_age_ns, m.capacity, m.queued), (40 * MS, 4, 2));
        assert_eq!(m.limiter.inflight, 1);
        assert_eq!(m.state, GateState::Healthy, "no CoDel, not full, not shedding");
        g.release(a, 60 * MS, Outcome::Ignored).unwrap();
    }

    /// The one word of the gate's own that an admitted arrival or its release may write
    /// (the service estimate; the clock is the limiter's) shares no 128-byte line with
    /// the read-mostly words every arrival loads (the shed switch, the LIFO mask, the
    /// settings), or with the limiter, the queue or CoDel.
    #[cfg(not(loom))]
    #[test]
    fn written_words_sit_on_lines_of_their_own() {
        use core::mem::{offset_of, size_of};
        type G = Gate<4>;
        let line = |off: usize| off / 128;
        let service = offset_of!(G, service);
        assert_eq!(size_of::<Line<AtomicU64>>(), 128);
        assert_eq!(service % 128, 0);
        let read_mostly = [
            offset_of!(G, shed),
            offset_of!(G, lifo_mask),
            offset_of!(G, levels),
            offset_of!(G, codel_on),
            offset_of!(G, deadline_hint),
            offset_of!(G, recheck_at),
            offset_of!(G, standing_due),
        ];
        for off in read_mostly {
            assert_ne!(line(off), line(service), "offset {off} shares the estimate's line");
        }
        for (start, size) in [
            (offset_of!(G, limiter), size_of::<Limiter>()),
            (offset_of!(G, queue), size_of::<WaitQueue<4>>()),
            (offset_of!(G, codel), size_of::<[Codel; LEVELS]>()),
        ] {
            assert_eq!(start % 128, 0, "starts on a line of its own");
            let (first, last) = (line(start), line(start + size - 1));
            assert!(line(service) < first || line(service) > last, "the estimate inside a part");
        }
    }
}
