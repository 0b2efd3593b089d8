//! The brownout dimmer: how much *optional* work to skip, from the Gate's state, before
//! the Gate has to refuse requests.
//!
//! Brownout (C. Klein, M. Maggio, K.-E. Årzén, F. Hernández-Rodriguez, "Brownout:
//! building more robust cloud applications", ICSE 2014) marks part of each response as
//! optional (recommendations, previews, personalisation) and serves it with a probability
//! set by a controller, the *dimmer*. Here the dimmer value `d ∈ [0, 1]` says how dark to
//! go: serve optional content with probability (or in the fraction) **`1 − d`**. `d = 0`:
//! serve everything; `d = 1`: serve no optional content.
//!
//! # The rule
//!
//! At each update, three signals, each mapped to `[0, 1]` by a linear ramp
//! `ramp(x, lo, hi) = clamp((x − lo) / (hi − lo), 0, 1)`:
//!
//! - **occupancy** `o = waiting / capacity` of the admission queue:
//!   `ramp(o, 0.2, 0.8)`. It starts at a fifth of the queue and is full at 0.8 (HBase's
//!   LIFO threshold: the queue stands), before the queue is full and refuses arrivals.
//! - **sojourn**, CoDel's view: the largest minimum queueing delay of the current CoDel
//!   interval among the levels that have waiters, against CoDel's target `T`:
//!   `ramp(delay, T/2, 2T)`. CoDel calls the queue standing only above `T` (the term is
//!   then already 1/3) and sloughs waiters only past `2T` (folly's slough timeout), where
//!   the term is 1. Without CoDel (or with no waiters) the term is 0.
//! - **refusals**: the fraction of decisions of the last closed window that were
//!   refusals, `refused / (refused + admitted)`, with `ramp(f, 0, 0.1)`: one refusal in ten
//!   dims fully. Refusals are the Gate's own: queue full, deadline unmeetable, shed,
//!   expired, sloughed and evicted waiters (a `try_arrive` refused for want of a slot is
//!   not counted: the limiter counts it together with arrivals that then queue). A window
//!   closes at the first update at least [`WINDOW_NS`] (1 s) after the previous close.
//!
//! The on-call shed switch counts as full dimming (the Gate sheds a level on purpose).
//!
//! The target is `raw = max(occupancy, sojourn, refusals)` (1 while the shed switch is on).
//! The published value **rises at once** to `raw` and **falls at most linearly**, by
//! `Δt / FALL_NS` (full scale in [`FALL_NS`] = 2 s) since the previous update:
//! `d = max(raw, d_prev − Δt / FALL_NS)`. Rising at once is what lets it lead the Gate's
//! shedding; falling slowly keeps it from flapping with a queue that fills and drains.
//!
//! Degradation order: optional features first (`d > 0` dims them), then background work
//! (the Gate's priority levels refuse it first), then normal work (the Gate's own
//! shedding). The dimmer reaches 1 while the Gate still admits every level.
//!
//! # Determinism and progress
//!
//! The value is a function of the sequence of operations and their `now`s: nothing else
//! (no clock, no randomness) enters it. An update reads the Gate and never changes its
//! decisions.
//!
//! Progress: **wait-free**. A reader makes one compare-and-swap attempt on a flag; the
//! winner computes the update (a bounded number of loads; at a window boundary also the
//! Gate's counters and a scan of its queue) and publishes it, and a reader that loses
//! returns the last published value at once.

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::time::{MAX_NOW, SEC};

/// Length of the refusal-rate window: one second.
pub const WINDOW_NS: u64 = SEC;
/// Time for the dimmer to fall from 1 to 0 when every signal is gone: two seconds.
pub const FALL_NS: u64 = 2 * SEC;
/// Occupancy at which dimming starts.
pub const OCCUPANCY_START: f64 = 0.2;
/// Occupancy at which dimming is full (HBase `AdaptiveLifoCoDelCallQueue`'s LIFO
/// threshold: the queue stands).
pub const OCCUPANCY_FULL: f64 = 0.8;
/// Refusal fraction at which dimming is full.
pub const REFUSALS_FULL: f64 = 0.1;

/// The Gate's state at one update (cheap to read: a few loads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Waiters in the queue.
    pub waiting: u32,
    /// The queue's bound.
    pub capacity: u32,
    /// The largest CoDel minimum delay of the current interval among levels with
    /// waiters, ns (0 if none).
    pub sojourn_ns: u64,
    /// CoDel's target, ns; 0 = no CoDel (no sojourn term).
    pub target_ns: u64,
    /// The on-call shed switch is on.
    pub shedding: bool,
}

/// The Gate's decision counters (read only when a window closes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Refusals ever (arrivals and waiters).
    pub refused: u64,
    /// Admissions ever (immediate and granted).
    pub admitted: u64,
}

/// `clamp((x − lo) / (hi − lo), 0, 1)`.
fn ramp(x: f64, lo: f64, hi: f64) -> f64 {
    let r = (x - lo) / (hi - lo);
    if r.is_nan() {
        0.0
    } else {
        r.clamp(0.0, 1.0)
    }
}

/// The target value for one reading and the last window's refusal fraction (the rule
/// above, before smoothing).
pub fn target(reading: &Reading, refused_fraction: f64) -> f64 {
    if reading.shedding {
        return 1.0;
    }
    let occupancy = if reading.capacity == 0 {
        0.0
    } else {
        ramp(
            f64::from(reading.waiting) / f64::from(reading.capacity),
            OCCUPANCY_START,
            OCCUPANCY_FULL,
        )
    };
    let sojourn = if reading.target_ns == 0 || reading.waiting == 0 {
        0.0
    } else {
        let t = reading.target_ns as f64;
        ramp(reading.sojourn_ns as f64, t / 2.0, 2.0 * t)
    };
    let refusals = ramp(refused_fraction, 0.0, REFUSALS_FULL);
    occupancy.max(sojourn).max(refusals)
}

/// Releases the update flag when the update ends (also if it unwinds).
struct Holding<'a>(&'a AtomicBool);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire exchange of the next update, which then sees
        // every word this one wrote.
        self.0.store(false, Ordering::Release);
    }
}

/// The dimmer's state: the published value and what the next update needs. Owned by a
/// Gate ([`crate::gate::Gate::brownout`]); usable on its own with any source of
/// [`Reading`]s and [`Tally`]s.
///
/// Progress: wait-free (see the module docs). Size: eight words.
#[derive(Debug)]
#[repr(C)]
pub struct Dimmer {
    /// An update is running.
    busy: AtomicBool,
    /// The published value (f64 bits).
    value: AtomicU64,
    /// The `now` of the last update (0 = none yet).
    at: AtomicU64,
    /// The `now` of the last window close.
    window_start: AtomicU64,
    /// The tally at the last window close.
    base_refused: AtomicU64,
    base_admitted: AtomicU64,
    /// The refusal fraction of the last closed window (f64 bits).
    refused_fraction: AtomicU64,
}

impl Default for Dimmer {
    fn default() -> Self {
        Self::new()
    }
}

impl Dimmer {
    /// A dimmer at 0 that has seen nothing.
    pub fn new() -> Self {
        Self {
            busy: AtomicBool::new(false),
            value: AtomicU64::new(0f64.to_bits()),
            at: AtomicU64::new(0),
            window_start: AtomicU64::new(0),
            base_refused: AtomicU64::new(0),
            base_admitted: AtomicU64::new(0),
            refused_fraction: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// The last published value, without updating.
    pub fn value(&self) -> f64 {
        // Relaxed: a recent value is all a reader needs.
        f64::from_bits(self.value.load(Ordering::Relaxed))
    }

    /// Updates at `now` (a `now` above [`MAX_NOW`] or older than the last update acts at
    /// the last update's time) and returns the value. `reading` is called once per
    /// update; `tally` only when a window closes. If another thread is updating, returns
    /// the last published value at once.
    pub fn update(
        &self,
        now: u64,
        reading: impl FnOnce() -> Reading,
        tally: impl FnOnce() -> Tally,
    ) -> f64 {
        // Acquire: pairs with the Release in `Holding::drop` of the previous update.
        if self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return self.value();
        }
        let _holding = Holding(&self.busy);
        // Relaxed below: only the flag's holder writes these words; the flag orders them.
        let at = self.at.load(Ordering::Relaxed);
        let now = if now > MAX_NOW { at } else { now.max(at) };
        let mut fraction = f64::from_bits(self.refused_fraction.load(Ordering::Relaxed));
        if now - self.window_start.load(Ordering::Relaxed) >= WINDOW_NS {
            let t = tally();
            let refused = t.refused.saturating_sub(self.base_refused.load(Ordering::Relaxed));
            let admitted = t.admitted.saturating_sub(self.base_admitted.load(Ordering::Relaxed));
            let decided = refused.saturating_add(admitted);
            fraction = if decided == 0 { 0.0 } else { refused as f64 / decided as f64 };
            self.refused_fraction.store(fraction.to_bits(), Ordering::Relaxed);
            self.base_refused.store(t.refused, Ordering::Relaxed);
            self.base_admitted.store(t.admitted, Ordering::Relaxed);
            self.window_start.store(now, Ordering::Relaxed);
        }
        let raw = target(&reading(), fraction);
        let prev = self.value();
        let fallen = prev - (now - at) as f64 / FALL_NS as f64;
        let d = raw.max(fallen).clamp(0.0, 1.0);
        self.at.store(now, Ordering::Relaxed);
        // Relaxed: readers want a recent value; the next holder is ordered by the flag.
        self.value.store(d.to_bits(), Ordering::Relaxed);
        d
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn reading(waiting: u32, capacity: u32) -> Reading {
        Reading { waiting, capacity, ..Reading::default() }
    }

    #[test]
    fn occupancy_ramps_from_a_fifth_to_four_fifths() {
        assert_eq!(target(&reading(0, 100), 0.0), 0.0);
        assert_eq!(target(&reading(20, 100), 0.0), 0.0);
        assert!(close(target(&reading(50, 100), 0.0), 0.5));
        assert_eq!(target(&reading(80, 100), 0.0), 1.0);
        assert_eq!(target(&reading(100, 100), 0.0), 1.0);
        assert_eq!(target(&reading(0, 0), 0.0), 0.0);
    }

    #[test]
    fn sojourn_ramps_from_half_the_target_to_twice_it() {
        let r = |sojourn_ns| Reading {
            waiting: 1,
            capacity: 1000,
            sojourn_ns,
            target_ns: 10 * MS,
            shedding: false,
        };
        assert_eq!(target(&r(5 * MS), 0.0), 0.0);
        assert!((target(&r(10 * MS), 0.0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(target(&r(20 * MS), 0.0), 1.0);
        // No waiters or no CoDel: no sojourn term.
        assert_eq!(target(&Reading { waiting: 0, ..r(20 * MS) }, 0.0), 0.0);
        assert_eq!(target(&Reading { target_ns: 0, ..r(20 * MS) }, 0.0), 0.0);
    }

    #[test]
    fn refusals_and_the_shed_switch_dim() {
        assert!(close(target(&reading(0, 10), 0.05), 0.5));
        assert_eq!(target(&reading(0, 10), 0.5), 1.0);
        assert_eq!(target(&Reading { shedding: true, ..reading(0, 10) }, 0.0), 1.0);
    }

    #[test]
    fn rises_at_once_and_falls_linearly() {
        let d = Dimmer::new();
        let no_tally = || Tally::default();
        assert_eq!(d.update(SEC, || reading(80, 100), no_tally), 1.0);
        assert_eq!(d.update(SEC + FALL_NS / 4, || reading(0, 100), no_tally), 0.75);
        // An older or out-of-range now acts at the last update's time.
        assert_eq!(d.update(5, || reading(0, 100), no_tally), 0.75);
        assert_eq!(d.update(u64::MAX, || reading(0, 100), no_tally), 0.75);
        assert_eq!(d.update(SEC + FALL_NS, || reading(0, 100), no_tally), 0.0);
        assert_eq!(d.value(), 0.0);
    }

    #[test]
    fn the_refusal_fraction_is_per_window() {
        let d = Dimmer::new();
        let idle = || reading(0, 100);
        // First window [0, 1 s): 5 refused of 100 decisions → 0.5.
        assert!(close(d.update(WINDOW_NS, idle, || Tally { refused: 5, admitted: 95 }), 0.5));
        // Within the window: the fraction holds, the tally is not read.
        let v = d.update(WINDOW_NS + 1, idle, || unreachable!());
        assert!(v > 0.49 && v <= 0.5 + 1e-12);
        // Next window: nothing refused → the target drops, the value falls slowly.
        let v = d.update(2 * WINDOW_NS, idle, || Tally { refused: 5, admitted: 195 });
        assert!(close(v, 0.5 - (WINDOW_NS - 1) as f64 / FALL_NS as f64), "{v}");
    }

    #[test]
    fn a_busy_dimmer_returns_the_published_value() {
        let d = Dimmer::new();
        d.update(1, || reading(80, 100), Tally::default);
        d.busy.store(true, Ordering::Relaxed);
        assert_eq!(d.update(FALL_NS, || reading(0, 100), Tally::default), 1.0);
    }
}
