//! CoDel for request queues: is a queue *standing*, and should this waiter be sloughed?
//!
//! Two drop rules share one type:
//!
//! - [`CodelMode::Folly`] (the default) — folly's `Codel` for server request queues. Over each
//!   interval (100 ms) the smallest queueing delay seen at dequeue is tracked; at the end of
//!   the interval the queue is *overloaded* iff that minimum exceeded the target (5 ms), i.e.
//!   the queue never drained below the target for a whole interval. While overloaded, a
//!   waiter whose delay exceeds the slough timeout (2 × target) is dropped. The first
//!   dequeue of every interval is never dropped ("more than one request must come in during
//!   an interval"). Load is `min(100, 100 · min_delay / (2 · target))`.
//! - [`CodelMode::Rfc8289`] — the original CoDel control law (RFC 8289 §5): once the
//!   sojourn time has stayed at or above the target for an interval, enter the dropping
//!   state and drop at times spaced `interval / √count` apart, so the drop rate rises with
//!   the square root of the drops; leave it as soon as one waiter is below the target.
//!   The packet-queue "one MTU in the queue" floor becomes "no other waiter behind this one".
//!
//! Time is an argument: `now` and `delay` are nanoseconds on the caller's clock; a `now`
//! smaller than one already seen is treated as the latest seen.

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use crate::time::MS;
use crate::ConfigError;

/// folly `codel_target_delay` default (gflags): 5 ms; also RFC 8289 `TARGET`.
pub const DEFAULT_TARGET_NS: u64 = 5 * MS;
/// folly `codel_interval` default (gflags): 100 ms; also RFC 8289 `INTERVAL`.
pub const DEFAULT_INTERVAL_NS: u64 = 100 * MS;
/// The largest interval accepted (one hour): bigger values are almost certainly a unit
/// mistake (seconds passed as nanoseconds the other way round).
pub const MAX_INTERVAL_NS: u64 = 3_600_000 * MS;
/// RFC 8289 §5.6: a new dropping episode re-uses the previous drop count only if it starts
/// within 16 intervals of the last drop.
const RFC_COUNT_MEMORY_INTERVALS: u64 = 16;

/// Which drop rule a [`Codel`] applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CodelMode {
    /// folly `Codel` (also HBase `AdaptiveLifoCoDelCallQueue`): overloaded iff the minimum
    /// delay over the last interval exceeded the target; drop iff overloaded and
    /// delay > 2 × target.
    #[default]
    Folly,
    /// RFC 8289 §5: the `interval / √count` drop schedule.
    Rfc8289,
}

/// Settings of a [`Codel`]. `Default` is folly's: target 5 ms, interval 100 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CodelConfig {
    /// Acceptable standing queueing delay, ns (folly default 5 ms).
    pub target_ns: u64,
    /// Window over which the minimum delay is judged, ns (folly default 100 ms).
    pub interval_ns: u64,
    /// The drop rule.
    pub mode: CodelMode,
}

impl Default for CodelConfig {
    fn default() -> Self {
        Self {
            target_ns: DEFAULT_TARGET_NS,
            interval_ns: DEFAULT_INTERVAL_NS,
            mode: CodelMode::Folly,
        }
    }
}

impl CodelConfig {
    /// Checks the settings: `0 < target < interval ≤ 1 h` (folly `setOptions` requires
    /// `interval > target > 0`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.target_ns == 0 {
            return Err(ConfigError::out_of_range("gate.codel.target_ns"));
        }
        if self.interval_ns == 0 || self.interval_ns > MAX_INTERVAL_NS {
            return Err(ConfigError::out_of_range("gate.codel.interval_ns"));
        }
        if self.target_ns >= self.interval_ns {
            return Err(ConfigError::inconsistent(
                "gate.codel.target_ns",
                "must be below",
                "gate.codel.interval_ns",
            ));
        }
        Ok(())
    }
}

/// A snapshot of a [`Codel`]'s state and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelMetrics {
    /// Smallest delay seen in the current interval, ns.
    pub min_delay_ns: u64,
    /// The standing-queue verdict ([`Codel::is_overloaded`]).
    pub overloaded: bool,
    /// 0–100 load estimate ([`Codel::load`]).
    pub load: u8,
    /// Dequeues answered "drop".
    pub drops: u64,
    /// Intervals closed (folly bookkeeping).
    pub intervals: u64,
    /// The target in force, ns ([`Codel::follow_service`]).
    pub target_ns: u64,
    /// The interval in force, ns.
    pub interval_ns: u64,
}

/// CoDel for a request queue: call [`on_dequeue`](Codel::on_dequeue) with each waiter's
/// queueing delay when it leaves the queue; `true` means slough it (reject it) instead of
/// serving it.
///
/// ```
/// use surgeguard_core::codel::{Codel, CodelConfig};
/// use surgeguard_core::time::MS;
///
/// let codel = Codel::new(CodelConfig::default()).unwrap();
/// // The first waiter of an interval is never dropped, whatever its delay.
/// assert!(!codel.on_dequeue(0, 50 * MS, 0));
/// // A whole interval in which no waiter got through in under 5 ms...
/// assert!(!codel.on_dequeue(60 * MS, 20 * MS, 0));
/// // ...makes the queue overloaded at the next interval; the first dequeue there is spared,
/// assert!(!codel.on_dequeue(101 * MS, 20 * MS, 0));
/// assert!(codel.is_overloaded());
/// // and later waiters that waited more than 2 × 5 ms are sloughed.
/// assert!(codel.on_dequeue(102 * MS, 11 * MS, 0));
/// assert!(!codel.on_dequeue(103 * MS, 9 * MS, 0));
/// ```
///
/// **Progress.** Folly mode: wait-free, a bounded number of atomic steps, no loops. Like
/// folly, the bookkeeping is deliberately racy under concurrent callers: the
/// interval roll-over is done by whichever caller flips the reset flag, and the
/// minimum is re-seeded with a plain store, so a concurrent smaller delay can be
/// overwritten (a heuristic, accepted by folly). RFC 8289 mode: wait-free; its state machine
/// is entered by one caller at a time through a flag, and a caller that finds it busy gets
/// "keep" without updating the state (the [`Gate`](crate::gate::Gate) calls it from its
/// single dispatcher, so that never happens there).
///
/// **Cost.** About ten relaxed atomic loads and stores per call, plus a read-modify-write
/// when time advances (the clamp), the minimum falls, an interval closes or a waiter is
/// dropped; under 160 bytes of state. The [`Gate`](crate::gate::Gate), the only caller of
/// its CoDels and one at a time, makes those loads and stores too (no read-modify-write).
///
/// **Source.** folly `folly/executors/Codel.{h,cpp}` and HBase
/// `AdaptiveLifoCoDelCallQueue` (folly rule), RFC 8289 §5 (control law).
#[derive(Debug)]
#[repr(C)]
pub struct Codel {
    /// The configured target and interval: the floors of the effective ones.
    base_target_ns: u64,
    base_interval_ns: u64,
    /// The effective target and interval ([`Codel::follow_service`]).
    target_ns: AtomicU64,
    interval_ns: AtomicU64,
    mode: CodelMode,
    /// The latest `now` seen (the monotonic clamp).
    latest: AtomicU64,
    // folly state: min delay of the current interval, the interval's end (0 = not started),
    // "the next dequeue re-seeds the minimum" and the verdict of the last closed interval.
    min_delay: AtomicU64,
    interval_end: AtomicU64,
    reset_delay: AtomicBool,
    overloaded: AtomicBool,
    // RFC 8289 state, entered by one caller at a time through `rfc_busy`.
    rfc_busy: AtomicBool,
    first_above: AtomicU64,
    drop_next: AtomicU64,
    count: AtomicU32,
    last_count: AtomicU32,
    dropping: AtomicBool,
    advance_pending: AtomicBool,
    // Requests that went through without queueing since the last dequeue: the first and
    // the latest of their times, plus one (0 = none). See `on_pass`.
    pass_first: AtomicU64,
    pass_last: AtomicU64,
    // counters
    drops: AtomicU64,
    intervals: AtomicU64,
}

impl Codel {
    /// A CoDel with the given settings, or `ConfigError` if they are invalid.
    pub fn new(cfg: CodelConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        Ok(Self {
            base_target_ns: cfg.target_ns,
            base_interval_ns: cfg.interval_ns,
            target_ns: AtomicU64::new(cfg.target_ns),
            interval_ns: AtomicU64::new(cfg.interval_ns),
            mode: cfg.mode,
            latest: AtomicU64::new(0),
            min_delay: AtomicU64::new(0),
            interval_end: AtomicU64::new(0),
            // folly: `codelResetDelay_` starts true, so the first dequeue seeds the minimum.
            reset_delay: AtomicBool::new(true),
            overloaded: AtomicBool::new(false),
            rfc_busy: AtomicBool::new(false),
            first_above: AtomicU64::new(0),
            drop_next: AtomicU64::new(0),
            count: AtomicU32::new(0),
            last_count: AtomicU32::new(0),
            dropping: AtomicBool::new(false),
            advance_pending: AtomicBool::new(false),
            pass_first: AtomicU64::new(0),
            pass_last: AtomicU64::new(0),
            drops: AtomicU64::new(0),
            intervals: AtomicU64::new(0),
        })
    }

    /// The settings this CoDel runs with.
    pub fn config(&self) -> CodelConfig {
        CodelConfig {
            target_ns: self.base_target_ns,
            interval_ns: self.base_interval_ns,
            mode: self.mode,
        }
    }

    /// The target in force, ns: the configured one, or more after
    /// [`follow_service`](Self::follow_service).
    #[inline]
    pub fn target_ns(&self) -> u64 {
        self.target_ns.load(Ordering::Relaxed)
    }

    /// The interval in force, ns (see [`target_ns`](Self::target_ns)).
    #[inline]
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns.load(Ordering::Relaxed)
    }

    /// Scales the target and interval to the time a request holds its slot downstream,
    /// `service_ns` (the uncongested service time; 0 = unknown): target
    /// `max(configured target, service_ns / 2)`, interval `max(configured interval,
    /// 10 × target)` (at most [`MAX_INTERVAL_NS`], the target at most half of it).
    ///
    /// Why: CoDel's constants are relative to the time one unit of work takes (RFC 8289
    /// §4.3–4.4: the interval on the order of a round trip, the target 5–10% of it).
    /// folly's 5 ms / 100 ms fit a server's own request queue, whose work takes well under
    /// a millisecond. A queue in front of a dependency whose calls take 40 ms drains one
    /// place per `service / limit`, so a healthy burst keeps a few waiters for tens of
    /// milliseconds; under the folly constants that reads as a standing queue and is
    /// sloughed, and the callers' retries add load the service did not have. Here a queue
    /// is standing when it has not drained below half a call for five calls' time. (A
    /// target of a whole call sloughed less at healthy load but, after a 3× slowdown,
    /// left the backlog to time out for up to 1.5 s instead of 0.9 s.) Takes effect at the
    /// next dequeue; with `service_ns / 2` at most the configured target, the configured
    /// values stand.
    pub fn follow_service(&self, service_ns: u64) {
        let t = self.base_target_ns.max(service_ns / 2);
        let i = self.base_interval_ns.max(t.saturating_mul(10)).min(MAX_INTERVAL_NS);
        let t = t.min(i / 2);
        if self.target_ns.load(Ordering::Relaxed) != t {
            self.target_ns.store(t, Ordering::Relaxed);
        }
        if self.interval_ns.load(Ordering::Relaxed) != i {
            self.interval_ns.store(i, Ordering::Relaxed);
        }
    }

    /// folly's slough timeout: 2 × target. A waiter that waited longer than this while the
    /// queue is overloaded is dropped (folly mode).
    #[inline]
    pub fn slough_timeout_ns(&self) -> u64 {
        // folly Codel: sloughTimeout = 2 × targetDelay
        self.target_ns().saturating_mul(2)
    }

    /// Judges one dequeue: `delay` is how long the waiter waited, `remaining` how many
    /// waiters are still queued behind it (used by RFC mode as the "queue nearly empty"
    /// floor; ignored by folly mode). Returns `true` if the waiter should be dropped.
    pub fn on_dequeue(&self, now: u64, delay: u64, remaining: usize) -> bool {
        self.decide::<false>(now, delay, remaining)
    }

    /// [`on_dequeue`](Self::on_dequeue) for a caller that is the only one inside this
    /// CoDel at any time, and whose successive calls are ordered by its own
    /// synchronisation (the [`Gate`](crate::gate::Gate)'s single dispatcher): the same
    /// decisions, with every read-modify-write replaced by a load and a store.
    pub(crate) fn on_dequeue_exclusive(&self, now: u64, delay: u64, remaining: usize) -> bool {
        self.decide::<true>(now, delay, remaining)
    }

    /// Notes a request that went through without waiting in the queue (admitted at once):
    /// for CoDel it is a dequeue with zero delay. In folly every request passes through
    /// the queue, so such dequeues are what clears a verdict once the queue has drained;
    /// a caller that admits directly when nothing waits must report them here, or the
    /// last verdict would stand for as long as no request queues.
    ///
    /// Cheap enough for an admission path: two relaxed loads, and a store only when the
    /// first pass since the last dequeue is noted, or when time moved on by more than
    /// `interval / 64` since the latest one noted. The passes are folded in at the next
    /// [`on_dequeue`](Self::on_dequeue) as zero-delay dequeues at the first and the latest
    /// of their times (the ones in between change no verdict: once the minimum of an
    /// interval is 0 it stays 0), and [`is_overloaded`](Self::is_overloaded) already
    /// counts them. Racing callers may lose each other's note (a heuristic, like the rest
    /// of this type's bookkeeping).
    #[inline]
    pub fn on_pass(&self, now: u64) {
        let t = now.saturating_add(1);
        if self.pass_first.load(Ordering::Relaxed) == 0 {
            self.pass_first.store(t, Ordering::Relaxed);
        }
        let last = self.pass_last.load(Ordering::Relaxed);
        if t > last.saturating_add(self.interval_ns() / 64) || last == 0 {
            self.pass_last.store(t, Ordering::Relaxed);
        }
    }

    /// The clamp: `now`, or the latest `now` seen if that is later. It skips its
    /// read-modify-write when time did not advance.
    #[inline(always)]
    fn observe<const X: bool>(&self, now: u64) -> u64 {
        // Relaxed everywhere in this type: each cell is an independent heuristic and no
        // other data is published through them (see the type's progress note).
        let latest = self.latest.load(Ordering::Relaxed);
        // A `now` above `time::MAX_NOW` is bad input: it acts at the latest time seen.
        if now <= latest || now > crate::time::MAX_NOW {
            latest
        } else if X {
            self.latest.store(now, Ordering::Relaxed);
            now
        } else {
            self.latest.fetch_max(now, Ordering::Relaxed).max(now)
        }
    }

    /// Takes the passes noted since the last dequeue: `(first, latest)` times, if any.
    #[inline(always)]
    fn take_passes<const X: bool>(&self) -> Option<(u64, u64)> {
        if self.pass_first.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let take = |cell: &AtomicU64| {
            if X {
                let v = cell.load(Ordering::Relaxed);
                cell.store(0, Ordering::Relaxed);
                v
            } else {
                cell.swap(0, Ordering::Relaxed)
            }
        };
        let first = take(&self.pass_first);
        let last = take(&self.pass_last);
        (first != 0).then(|| (first - 1, last.max(first) - 1))
    }

    /// Folds the noted passes in as zero-delay dequeues.
    #[cold]
    fn apply_passes<const X: bool>(&self, first: u64, last: u64) {
        let a = self.observe::<X>(first);
        self.folly_overloaded::<X>(a, 0);
        let b = self.observe::<X>(last);
        if b > a {
            self.folly_overloaded::<X>(b, 0);
        }
        if self.mode == CodelMode::Rfc8289 {
            self.rfc_decide::<X>(b, 0, 0);
        }
    }

    /// The dequeue rule; `X` (exclusive) replaces read-modify-writes by loads and stores.
    #[inline(always)]
    fn decide<const X: bool>(&self, now: u64, delay: u64, remaining: usize) -> bool {
        if let Some((first, last)) = self.take_passes::<X>() {
            self.apply_passes::<X>(first, last);
        }
        let now = self.observe::<X>(now);
        let folly_drop = self.folly_overloaded::<X>(now, delay);
        let drop = match self.mode {
            CodelMode::Folly => folly_drop,
            CodelMode::Rfc8289 => self.rfc_decide::<X>(now, delay, remaining),
        };
        if drop {
            add::<X>(&self.drops, 1);
        }
        drop
    }

    /// folly `Codel::overloaded(delay)`: interval bookkeeping, then the slough rule. Run in
    /// both modes, because it also feeds [`load`](Codel::load).
    #[inline(always)]
    fn folly_overloaded<const X: bool>(&self, now: u64, delay: u64) -> bool {
        let end = self.interval_end.load(Ordering::Relaxed);
        if end == 0 {
            // The first dequeue ever starts the first interval (folly starts it at
            // construction; the core has no clock there).
            let start = now.saturating_add(self.interval_ns());
            if X {
                self.interval_end.store(start, Ordering::Relaxed);
            } else {
                let _ = self.interval_end.compare_exchange(
                    0,
                    start,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        } else if now > end
            && !self.reset_delay.load(Ordering::Relaxed)
            && !swap::<X>(&self.reset_delay, true)
        {
            // This caller closes the interval: judge it by its minimum delay.
            self.interval_end.store(now.saturating_add(self.interval_ns()), Ordering::Relaxed);
            let min = self.min_delay.load(Ordering::Relaxed);
            self.overloaded.store(min > self.target_ns(), Ordering::Relaxed);
            add::<X>(&self.intervals, 1);
        }
        if self.reset_delay.load(Ordering::Relaxed) && swap::<X>(&self.reset_delay, false) {
            // folly: the first request of an interval re-seeds the minimum and is never
            // dropped — more than one request must come in during an interval.
            self.min_delay.store(delay, Ordering::Relaxed);
            return false;
        }
        if delay < self.min_delay.load(Ordering::Relaxed) {
            if X {
                self.min_delay.store(delay, Ordering::Relaxed);
            } else {
                self.min_delay.fetch_min(delay, Ordering::Relaxed);
            }
        }
        self.overloaded.load(Ordering::Relaxed) && delay > self.slough_timeout_ns()
    }

    /// RFC 8289 §5 dequeue logic, one waiter per call.
    fn rfc_decide<const X: bool>(&self, now: u64, sojourn: u64, remaining: usize) -> bool {
        // Acquire: pairs with the Release store below by the previous caller, so this caller
        // sees the state it left. (An exclusive caller's own synchronisation does that.)
        if !X && self.rfc_busy.swap(true, Ordering::Acquire) {
            return false;
        }
        // should_drop (RFC 8289 §5.4): below target, or nothing else queued → not above.
        let first_above = self.first_above.load(Ordering::Relaxed);
        let ok_to_drop = if sojourn < self.target_ns() || remaining == 0 {
            self.first_above.store(0, Ordering::Relaxed);
            false
        } else if first_above == 0 {
            self.first_above.store(now.saturating_add(self.interval_ns()), Ordering::Relaxed);
            false
        } else {
            now >= first_above
        };
        let drop = if self.dropping.load(Ordering::Relaxed) {
            if !ok_to_drop {
                // Leave the dropping state as soon as one waiter is below target.
                self.dropping.store(false, Ordering::Relaxed);
                self.advance_pending.store(false, Ordering::Relaxed);
                false
            } else {
                let count = self.count.load(Ordering::Relaxed);
                if swap::<X>(&self.advance_pending, false) {
                    // The waiter after a drop is still above target: schedule the next drop.
                    let next = self.control_law(self.drop_next.load(Ordering::Relaxed), count);
                    self.drop_next.store(next, Ordering::Relaxed);
                }
                if now >= self.drop_next.load(Ordering::Relaxed) {
                    self.count.store(count.saturating_add(1), Ordering::Relaxed);
                    self.advance_pending.store(true, Ordering::Relaxed);
                    true
                } else {
                    false
                }
            }
        } else if ok_to_drop {
            // Enter the dropping state (RFC 8289 §5.5): drop this one, and start from the
            // previous episode's rate if that episode was recent.
            self.dropping.store(true, Ordering::Relaxed);
            let count = self.count.load(Ordering::Relaxed);
            let delta = count.saturating_sub(self.last_count.load(Ordering::Relaxed));
            let since_last = now.saturating_sub(self.drop_next.load(Ordering::Relaxed));
            let recent = since_last < RFC_COUNT_MEMORY_INTERVALS.saturating_mul(self.interval_ns());
            let count = if delta > 1 && recent { delta } else { 1 };
            self.count.store(count, Ordering::Relaxed);
            self.last_count.store(count, Ordering::Relaxed);
            self.drop_next.store(self.control_law(now, count), Ordering::Relaxed);
            self.advance_pending.store(false, Ordering::Relaxed);
            true
        } else {
            false
        };
        if !X {
            // Release: publishes this caller's state updates to the next caller's Acquire
            // swap.
            self.rfc_busy.store(false, Ordering::Release);
        }
        drop
    }

    /// RFC 8289 `control_law(t, count) = t + interval / √count`.
    fn control_law(&self, t: u64, count: u32) -> u64 {
        let step = self.interval_ns() as f64 / libm::sqrt(f64::from(count.max(1)));
        t.saturating_add(step as u64)
    }

    /// Whether the queue is standing: folly mode — the minimum delay of the last closed
    /// interval exceeded the target; RFC mode — CoDel is in its dropping state.
    ///
    /// Passes noted by [`on_pass`](Self::on_pass) and not yet folded in count already: the
    /// answer is the verdict the next dequeue would start from.
    pub fn is_overloaded(&self) -> bool {
        let first = self.pass_first.load(Ordering::Relaxed);
        match self.mode {
            CodelMode::Folly if first == 0 => self.overloaded.load(Ordering::Relaxed),
            CodelMode::Folly => {
                // Replay folly's bookkeeping for the passes on a copy of the state.
                let last = self.pass_last.load(Ordering::Relaxed).max(first);
                let mut st = FollyState {
                    end: self.interval_end.load(Ordering::Relaxed),
                    min: self.min_delay.load(Ordering::Relaxed),
                    reset: self.reset_delay.load(Ordering::Relaxed),
                    overloaded: self.overloaded.load(Ordering::Relaxed),
                };
                let latest = self.latest.load(Ordering::Relaxed);
                let a = (first - 1).max(latest);
                st.dequeue(a, 0, self.interval_ns(), self.target_ns());
                if last - 1 > a {
                    st.dequeue(last - 1, 0, self.interval_ns(), self.target_ns());
                }
                st.overloaded
            }
            // One waiter below the target ends the dropping state.
            CodelMode::Rfc8289 => first == 0 && self.dropping.load(Ordering::Relaxed),
        }
    }

    /// folly `getLoad`: `min(100, 100 · min_delay / (2 · target))`, a 0–100 estimate of how
    /// close the queue is to sloughing.
    pub fn load(&self) -> u8 {
        let min = u128::from(self.min_delay.load(Ordering::Relaxed));
        let slough = u128::from(self.slough_timeout_ns()).max(1);
        (100 * min / slough).min(100) as u8
    }

    /// A snapshot of the state and counters.
    pub fn metrics(&self) -> CodelMetrics {
        CodelMetrics {
            min_delay_ns: self.min_delay.load(Ordering::Relaxed),
            overloaded: self.is_overloaded(),
            load: self.load(),
            drops: self.drops.load(Ordering::Relaxed),
            intervals: self.intervals.load(Ordering::Relaxed),
            target_ns: self.target_ns(),
            interval_ns: self.interval_ns(),
        }
    }
}

/// folly's interval bookkeeping on plain values (the same rule as
/// `Codel::folly_overloaded`), to see what pending passes would make of the verdict.
struct FollyState {
    end: u64,
    min: u64,
    reset: bool,
    overloaded: bool,
}

impl FollyState {
    fn dequeue(&mut self, now: u64, delay: u64, interval: u64, target: u64) {
        if self.end == 0 {
            self.end = now.saturating_add(interval);
        } else if now > self.end && !self.reset {
            self.end = now.saturating_add(interval);
            self.overloaded = self.min > target;
            self.reset = true;
        }
        if self.reset {
            self.reset = false;
            self.min = delay;
        } else if delay < self.min {
            self.min = delay;
        }
    }
}

/// `cell += n`: a read-modify-write, or for an exclusive caller a load and a store.
#[inline(always)]
fn add<const X: bool>(cell: &AtomicU64, n: u64) {
    if X {
        cell.store(cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    } else {
        cell.fetch_add(n, Ordering::Relaxed);
    }
}

/// `swap(cell, v)`: a read-modify-write, or for an exclusive caller a load and a store.
#[inline(always)]
fn swap<const X: bool>(cell: &AtomicBool, v: bool) -> bool {
    if X {
        let old = cell.load(Ordering::Relaxed);
        cell.store(v, Ordering::Relaxed);
        old
    } else {
        cell.swap(v, Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn folly() -> Codel {
        Codel::new(CodelConfig::default()).unwrap()
    }

    #[test]
    fn the_target_and_interval_follow_a_slower_service() {
        let c = folly();
        // Unknown or fast: folly's constants.
        for s in [0, MS, 5 * MS, 9 * MS] {
            c.follow_service(s);
            assert_eq!((c.target_ns(), c.interval_ns()), (5 * MS, 100 * MS), "{s}");
        }
        c.follow_service(10 * MS);
        assert_eq!((c.target_ns(), c.interval_ns()), (5 * MS, 100 * MS));
        // Slower: half a service time, ten targets.
        c.follow_service(40 * MS);
        assert_eq!((c.target_ns(), c.interval_ns()), (20 * MS, 200 * MS));
        assert_eq!(c.slough_timeout_ns(), 40 * MS);
        let m = c.metrics();
        assert_eq!((m.target_ns, m.interval_ns), (20 * MS, 200 * MS));
        // The configuration is what was set.
        assert_eq!(c.config(), CodelConfig::default());
        // Huge: the interval at its cap, the target half of it.
        c.follow_service(u64::MAX);
        assert_eq!((c.target_ns(), c.interval_ns()), (MAX_INTERVAL_NS / 2, MAX_INTERVAL_NS));
        // Back: the configured values again.
        c.follow_service(0);
        assert_eq!((c.target_ns(), c.interval_ns()), (5 * MS, 100 * MS));
    }

    #[test]
    fn config_is_validated_like_folly_set_options() {
        let bad = |t, i| CodelConfig { target_ns: t, interval_ns: i, mode: CodelMode::Folly };
        assert_eq!(
            Codel::new(bad(0, 100)).err(),
            Some(ConfigError::out_of_range("gate.codel.target_ns"))
        );
        assert!(Codel::new(bad(5, 0)).is_err_and(|e| e.kind == crate::ConfigErrorKind::OutOfRange));
        let e = Codel::new(bad(100, 100)).unwrap_err();
        assert_eq!(
            (e.kind, e.field),
            (crate::ConfigErrorKind::Inconsistent, "gate.codel.target_ns")
        );
        assert_eq!(
            std::string::ToString::to_string(&e),
            "gate.codel.target_ns must be below gate.codel.interval_ns"
        );
        assert!(Codel::new(bad(200, 100))
            .is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(Codel::new(bad(5, u64::MAX))
            .is_err_and(|e| e.kind == crate::ConfigErrorKind::OutOfRange));
        assert!(Codel::new(bad(5, 100)).is_ok());
        assert_eq!(folly().slough_timeout_ns(), 10 * MS);
    }

    #[test]
    fn first_request_of_an_interval_is_never_dropped() {
        let c = folly();
        // Make the queue overloaded: one whole interval with min delay 50 ms.
        assert!(!c.on_dequeue(0, 50 * MS, 0));
        assert!(!c.on_dequeue(50 * MS, 50 * MS, 0));
        // Each later interval: the first dequeue is spared even with a huge delay,
        // the second with the same delay is dropped.
        for k in 1..5u64 {
            let t = k * 101 * MS;
            assert!(!c.on_dequeue(t, 500 * MS, 0), "first of interval {k} dropped");
            assert!(c.is_overloaded());
            assert!(c.on_dequeue(t + MS, 500 * MS, 0), "second of interval {k} kept");
        }
    }

    #[test]
    fn drops_only_when_overloaded_and_delay_above_twice_target() {
        let c = folly();
        // Not overloaded yet: nothing is dropped during the first interval, however late.
        assert!(!c.on_dequeue(0, 20 * MS, 0));
        assert!(!c.on_dequeue(10 * MS, 300 * MS, 0));
        assert!(!c.is_overloaded());
        // min over the interval was 20 ms > 5 ms → overloaded from the next interval.
        assert!(!c.on_dequeue(101 * MS, 20 * MS, 0));
        assert!(c.is_overloaded());
        assert!(!c.on_dequeue(102 * MS, 10 * MS, 0), "exactly 2×target is not above it");
        assert!(c.on_dequeue(103 * MS, 10 * MS + 1, 0));
        assert!(!c.on_dequeue(104 * MS, 6 * MS, 0), "above target but under slough: kept");
    }

    #[test]
    fn one_fast_dequeue_in_an_interval_clears_overload() {
        let c = folly();
        c.on_dequeue(0, 20 * MS, 0);
        c.on_dequeue(50 * MS, 20 * MS, 0);
        c.on_dequeue(101 * MS, 20 * MS, 0); // closes interval 1: overloaded
        assert!(c.is_overloaded());
        c.on_dequeue(150 * MS, MS, 0); // min of interval 2 drops to 1 ms ≤ target
        c.on_dequeue(150 * MS, 30 * MS, 0);
        c.on_dequeue(202 * MS, 30 * MS, 0); // closes interval 2
        assert!(!c.is_overloaded());
        assert!(!c.on_dequeue(203 * MS, 30 * MS, 0), "not overloaded: nothing sloughed");
        // The min is exactly the target: not "above target", so not overloaded either.
        let c = folly();
        c.on_dequeue(0, 5 * MS, 0);
        c.on_dequeue(50 * MS, 5 * MS, 0);
        c.on_dequeue(101 * MS, 5 * MS, 0);
        assert!(!c.is_overloaded());
    }

    #[test]
    fn a_pass_is_a_zero_delay_dequeue_folded_in_at_the_next_dequeue() {
        let c = folly();
        // Overloaded: a whole interval in which every dequeue waited 20 ms.
        assert!(!c.on_dequeue(0, 20 * MS, 0));
        assert!(!c.on_dequeue(50 * MS, 20 * MS, 0));
        assert!(!c.on_dequeue(101 * MS, 20 * MS, 0)); // closes it; first of the next
        assert!(c.is_overloaded());
        // Requests admitted at once: one inside the current interval (ends at 201 ms)...
        c.on_pass(150 * MS);
        assert!(c.is_overloaded(), "the interval has not ended");
        // ...and one after it: that interval saw a zero delay, so it closes healthy.
        c.on_pass(250 * MS);
        assert!(!c.is_overloaded());
        // The next dequeue starts from that verdict: a 20 ms waiter is kept.
        assert!(!c.on_dequeue(251 * MS, 20 * MS, 0));
        assert!(!c.is_overloaded());
        let m = c.metrics();
        assert_eq!((m.drops, m.intervals, m.min_delay_ns), (0, 2, 0));
    }

    #[test]
    fn a_pass_ends_the_rfc_dropping_state() {
        let c =
            Codel::new(CodelConfig { mode: CodelMode::Rfc8289, ..CodelConfig::default() }).unwrap();
        let mut t = 0;
        while !c.is_overloaded() {
            t += 10 * MS;
            c.on_dequeue(t, 50 * MS, 3);
            assert!(t < SEC_FOR_TEST, "never entered the dropping state");
        }
        c.on_pass(t + MS);
        assert!(!c.is_overloaded(), "one waiter below target leaves the dropping state");
        assert!(!c.on_dequeue(t + 2 * MS, 50 * MS, 3), "and the next one is not dropped");
    }

    const SEC_FOR_TEST: u64 = 1_000 * MS;

    #[test]
    fn load_is_min_delay_over_twice_target_capped_at_100() {
        let c = folly();
        assert_eq!(c.load(), 0);
        c.on_dequeue(0, 5 * MS, 0);
        assert_eq!(c.load(), 50);
        c.on_dequeue(MS, 2 * MS, 0);
        assert_eq!(c.load(), 20, "load follows the interval's minimum");
        let c = folly();
        c.on_dequeue(0, 80 * MS, 0);
        assert_eq!(c.load(), 100);
        let m = c.metrics();
        assert_eq!((m.min_delay_ns, m.load, m.drops, m.intervals), (80 * MS, 100, 0, 0));
    }

    #[test]
    fn time_running_backwards_is_clamped() {
        let c = folly();
        c.on_dequeue(0, 20 * MS, 0);
        c.on_dequeue(101 * MS, 20 * MS, 0); // closes interval 1 (overloaded)
        assert!(c.is_overloaded());
        // A stale `now` does not reopen or re-close anything: it counts as 101 ms.
        assert!(c.on_dequeue(5 * MS, 30 * MS, 0));
        assert_eq!(c.metrics().intervals, 1);
    }

    fn rfc() -> Codel {
        Codel::new(CodelConfig { mode: CodelMode::Rfc8289, ..CodelConfig::default() }).unwrap()
    }

    #[test]
    fn rfc_enters_dropping_after_an_interval_above_target_and_speeds_up_by_sqrt() {
        let c = rfc();
        let i = DEFAULT_INTERVAL_NS;
        assert!(!c.on_dequeue(0, 20 * MS, 3), "first above-target sample starts the clock");
        assert!(!c.on_dequeue(i - 1, 20 * MS, 3), "not yet a whole interval above target");
        assert!(c.on_dequeue(i, 20 * MS, 3), "a whole interval above target: drop");
        assert!(c.is_overloaded());
        // count = 1: next drop one interval later.
        assert!(!c.on_dequeue(i + 1, 20 * MS, 3));
        assert!(c.on_dequeue(2 * i, 20 * MS, 3));
        // count = 2: the following drop is interval/√2 later, not a whole interval.
        let step2 = (i as f64 / libm::sqrt(2.0)) as u64;
        assert!(!c.on_dequeue(2 * i + step2 - 1, 20 * MS, 3));
        assert!(c.on_dequeue(2 * i + step2, 20 * MS, 3));
        // One waiter below target ends the episode.
        assert!(!c.on_dequeue(3 * i, MS, 3));
        assert!(!c.is_overloaded());
        assert_eq!(c.metrics().drops, 3);
    }

    #[test]
    fn rfc_ignores_delay_when_nothing_else_is_queued() {
        let c = rfc();
        for k in 0..10 {
            assert!(!c.on_dequeue(k * DEFAULT_INTERVAL_NS, 500 * MS, 0));
        }
        assert!(!c.is_overloaded());
    }

    #[test]
    fn rfc_remembers_a_recent_episode_rate() {
        let c = rfc();
        let i = DEFAULT_INTERVAL_NS;
        c.on_dequeue(0, 20 * MS, 3);
        assert!(c.on_dequeue(i, 20 * MS, 3)); // count 1
        assert!(c.on_dequeue(2 * i, 20 * MS, 3)); // count 2
        let mut t = 2 * i;
        // Drop a few more to raise the count.
        for _ in 0..3 {
            t += i; // far enough to be past drop_next
            c.on_dequeue(t, 20 * MS, 3);
            c.on_dequeue(t, 20 * MS, 3);
        }
        let count_before = c.count.load(Ordering::Relaxed);
        assert!(count_before > 2);
        assert!(!c.on_dequeue(t + 1, MS, 3)); // leave the dropping state
                                              // Re-enter soon after: the count restarts from the previous delta, not 1.
        c.on_dequeue(t + 2, 20 * MS, 3);
        assert!(c.on_dequeue(t + 2 + i, 20 * MS, 3));
        assert!(c.count.load(Ordering::Relaxed) > 1);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn the_exclusive_path_decides_exactly_like_the_shared_one() {
        let seeds = if cfg!(miri) { 2 } else { 20 }; // Miri: the same checks, fewer runs
        for mode in [CodelMode::Folly, CodelMode::Rfc8289] {
            for seed in 0..seeds {
                let cfg = CodelConfig { mode, ..CodelConfig::default() };
                let (shared, exclusive) = (Codel::new(cfg).unwrap(), Codel::new(cfg).unwrap());
                let mut rng = crate::rng::SplitMix64::new(seed);
                let mut now = 0u64;
                for step in 0..2_000 {
                    // Mostly forward, sometimes backwards (clamped), delays around target.
                    now = if rng.below(10) == 0 {
                        now.saturating_sub(rng.below(20 * MS))
                    } else {
                        now + rng.below(20 * MS)
                    };
                    let delay = rng.below(30 * MS);
                    let behind = rng.below(4) as usize;
                    let a = shared.on_dequeue(now, delay, behind);
                    let b = exclusive.on_dequeue_exclusive(now, delay, behind);
                    assert_eq!(a, b, "{mode:?} seed {seed} step {step}");
                    assert_eq!(shared.metrics(), exclusive.metrics());
                    assert_eq!(shared.is_overloaded(), exclusive.is_overloaded());
                }
                assert!(shared.metrics().drops > 0, "{mode:?}: the sequence never dropped");
            }
        }
    }
}
