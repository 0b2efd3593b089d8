//! Pause/resume with hysteresis: Kafka consumer `pause()`/`resume()` on a bounded
//! in-flight semaphore, with a resume mark above the pause mark so it never flaps.

use crate::sync::{AtomicU64, Ordering};
use crate::time::AtomicMonotonic;
use crate::ConfigError;

/// Settings of [`Watermarks`], in units of the level observed (in-flight items, buffered
/// records, bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WatermarksConfig {
    /// Total capacity; free capacity is `capacity − level` (0 when the level is above it).
    pub capacity: u64,
    /// Low mark: pause when free capacity falls below this (at least 1).
    pub pause_below: u64,
    /// High mark: resume when free capacity rises above this. Must be above `pause_below`
    /// (the gap is the hysteresis) and below `capacity` (so resuming is reachable).
    pub resume_above: u64,
}

impl Default for WatermarksConfig {
    fn default() -> Self {
        Self {
            // A Kafka consumer with `inflight = Semaphore(400)`:
            capacity: 400,
            // pause when `inflight.available() < 100`;
            pause_below: 100,
            // resuming as soon as that is false would flap at the mark; resume only once half
            // the capacity is free (hysteresis: a band between the two marks).
            resume_above: 200,
        }
    }
}

impl WatermarksConfig {
    /// Checks `1 ≤ pause_below < resume_above < capacity`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.pause_below == 0 {
            return Err(ConfigError::out_of_range("watermarks.pause_below"));
        }
        if self.resume_above <= self.pause_below {
            return Err(ConfigError::inconsistent(
                "watermarks.resume_above",
                "must be above",
                "watermarks.pause_below",
            ));
        }
        if self.resume_above >= self.capacity {
            return Err(ConfigError::inconsistent(
                "watermarks.resume_above",
                "must be below",
                "watermarks.capacity",
            ));
        }
        Ok(())
    }
}

/// What the consumer should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Transition {
    /// Stop fetching (Kafka `consumer.pause(partitions)`): free capacity fell below the
    /// low mark.
    Pause = 1,
    /// Fetch again (Kafka `consumer.resume(partitions)`): free capacity rose above the
    /// high mark.
    Resume = 2,
}

impl Transition {
    /// A stable, machine-readable name: `"pause"` or `"resume"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
        }
    }
}

/// A snapshot of [`Watermarks`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WatermarksMetrics {
    /// Whether the consumer is paused now.
    pub paused: bool,
    /// Pauses, in total.
    pub pauses: u64,
    /// Resumes, in total.
    pub resumes: u64,
    /// Nanoseconds spent paused, in total, including the current pause up to `now`.
    pub time_paused: u64,
    /// The level passed to the latest `observe`.
    pub last_level: u64,
}

// State word: 0 while running; `since << 1 | PAUSED` while paused since `since` (ns).
const PAUSED: u64 = 1;
const SINCE_SHIFT: u32 = 1;
const MAX_SINCE: u64 = u64::MAX >> SINCE_SHIFT;

/// Pause/resume with hysteresis on a level (in-flight or buffered count), Kafka
/// `pause()`/`resume()` style: the consumer keeps polling (and its group membership)
/// but stops fetching while paused, instead of blocking (which would miss `poll()`
/// deadlines and trigger a rebalance).
///
/// [`observe`](Self::observe) pauses when free capacity (`capacity − level`) falls below
/// `pause_below`, and resumes only when it rises above `resume_above`. Between the two
/// marks nothing changes, so a load that saws up and down inside the band never toggles
/// the consumer: every pause/resume pair needs one full crossing from below the low mark
/// to above the high one.
///
/// ```
/// use surgeguard_core::flow::{Transition, Watermarks, WatermarksConfig};
///
/// let wm = Watermarks::new(WatermarksConfig::default()).unwrap(); // 400; pause <100 free; resume >200
/// assert_eq!(wm.observe(0, 250), None); // 150 free
/// assert_eq!(wm.observe(1, 301), Some(Transition::Pause)); // 99 free
/// assert_eq!(wm.observe(2, 250), None); // 150 free: still paused, no flap
/// assert!(wm.is_paused());
/// assert_eq!(wm.observe(3, 199), Some(Transition::Resume)); // 201 free
/// assert_eq!(wm.metrics(3).time_paused, 2);
/// ```
///
/// Progress: wait-free. `observe` is a clock `fetch_max`, one load, and at most one CAS
/// (no retry: a failed CAS means another thread made the transition) plus relaxed counter
/// updates; queries are loads. Threads observing racing levels each get a transition
/// that answers the level they saw, and exactly one thread reports each transition.
/// Cost: 72 bytes.
#[derive(Debug)]
pub struct Watermarks {
    /// `0` running, or `since << 1 | PAUSED`.
    state: AtomicU64,
    pauses: AtomicU64,
    resumes: AtomicU64,
    paused_ns: AtomicU64,
    last_level: AtomicU64,
    clock: AtomicMonotonic,
    config: WatermarksConfig,
}

impl Watermarks {
    /// Watermarks in the running (not paused) state.
    pub fn new(config: WatermarksConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            state: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
            paused_ns: AtomicU64::new(0),
            last_level: AtomicU64::new(0),
            clock: AtomicMonotonic::new(),
            config,
        })
    }

    /// The settings.
    pub const fn config(&self) -> WatermarksConfig {
        self.config
    }

    /// Reports the current level (in-flight or buffered count) and returns the transition
    /// the consumer must make, if any.
    pub fn observe(&self, now: u64, level: u64) -> Option<Transition> {
        let now = self.clock.observe(now);
        // Relaxed: every atomic here is self-contained; the state word alone decides.
        self.last_level.store(level, Ordering::Relaxed);
        let free = self.config.capacity.saturating_sub(level);
        let cur = self.state.load(Ordering::Relaxed);
        if cur & PAUSED == 0 {
            if free >= self.config.pause_below {
                return None;
            }
            let paused = (now.min(MAX_SINCE) << SINCE_SHIFT) | PAUSED;
            self.state.compare_exchange(cur, paused, Ordering::Relaxed, Ordering::Relaxed).ok()?;
            self.pauses.fetch_add(1, Ordering::Relaxed);
            Some(Transition::Pause)
        } else {
            if free <= self.config.resume_above {
                return None;
            }
            self.state.compare_exchange(cur, 0, Ordering::Relaxed, Ordering::Relaxed).ok()?;
            let since = cur >> SINCE_SHIFT;
            self.paused_ns.fetch_add(now.saturating_sub(since), Ordering::Relaxed);
            self.resumes.fetch_add(1, Ordering::Relaxed);
            Some(Transition::Resume)
        }
    }

    /// Whether the consumer should be paused now.
    pub fn is_paused(&self) -> bool {
        self.state.load(Ordering::Relaxed) & PAUSED != 0
    }

    /// A snapshot; `time_paused` includes the current pause up to `now`.
    pub fn metrics(&self, now: u64) -> WatermarksMetrics {
        let now = self.clock.observe(now);
        let cur = self.state.load(Ordering::Relaxed);
        let paused = cur & PAUSED != 0;
        let current = if paused { now.saturating_sub(cur >> SINCE_SHIFT) } else { 0 };
        WatermarksMetrics {
            paused,
            pauses: self.pauses.load(Ordering::Relaxed),
            resumes: self.resumes.load(Ordering::Relaxed),
            time_paused: self.paused_ns.load(Ordering::Relaxed).saturating_add(current),
            last_level: self.last_level.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MAX_NOW;

    fn wm(capacity: u64, pause_below: u64, resume_above: u64) -> Watermarks {
        Watermarks::new(WatermarksConfig { capacity, pause_below, resume_above }).unwrap()
    }

    #[test]
    fn bad_configs_are_refused() {
        let new = |c, p, r| {
            Watermarks::new(WatermarksConfig { capacity: c, pause_below: p, resume_above: r })
        };
        assert_eq!(new(10, 0, 5).unwrap_err(), ConfigError::out_of_range("watermarks.pause_below"));
        assert!(new(10, 5, 5).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(new(10, 6, 5).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(new(10, 2, 10).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(new(0, 1, 2).is_err_and(|e| e.kind == crate::ConfigErrorKind::Inconsistent));
        assert!(new(3, 1, 2).is_ok());
        assert!(WatermarksConfig::default().validate().is_ok());
    }

    #[test]
    fn pauses_below_the_low_mark_and_resumes_above_the_high_mark() {
        let w = wm(10, 3, 6); // pause at free < 3 (level > 7), resume at free > 6 (level < 4)
        assert_eq!(w.observe(0, 7), None); // free 3
        assert_eq!(w.observe(0, 8), Some(Transition::Pause)); // free 2
        assert_eq!(w.observe(0, 9), None);
        for level in 4..=7 {
            assert_eq!(w.observe(0, level), None, "inside the band at level {level}");
        }
        assert_eq!(w.observe(0, 3), Some(Transition::Resume)); // free 7
        assert_eq!(w.observe(0, 0), None);
        assert!(!w.is_paused());
    }

    #[test]
    fn a_level_above_capacity_counts_as_no_free_capacity() {
        let w = wm(10, 1, 5);
        assert_eq!(w.observe(0, u64::MAX), Some(Transition::Pause));
        assert_eq!(w.metrics(0).last_level, u64::MAX);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn a_sawtooth_inside_the_band_never_flaps() {
        let w = wm(400, 100, 200);
        // Level saws between 250 and 299 (free 101..150): neither mark is crossed.
        for t in 0..10_000u64 {
            assert_eq!(w.observe(t, 250 + t % 50), None);
        }
        // Saw between 250 and 320 (free 80..150): pauses once, never resumes.
        let flips = (0..10_000u64).filter(|&t| w.observe(t, 250 + t % 71).is_some()).count();
        assert_eq!(flips, 1);
        assert!(w.is_paused());
    }

    #[test]
    fn time_paused_is_accounted_including_the_current_pause() {
        let w = wm(10, 3, 6);
        w.observe(100, 9);
        assert_eq!(w.metrics(150).time_paused, 50);
        w.observe(300, 0);
        w.observe(1000, 9);
        w.observe(1010, 0);
        let m = w.metrics(2000);
        assert_eq!((m.pauses, m.resumes, m.time_paused, m.paused), (2, 2, 210, false));
        w.observe(2000, 9);
        assert_eq!(w.metrics(1500).time_paused, 210, "time never runs backwards");
        assert_eq!(w.metrics(2005).time_paused, 215);
    }

    #[test]
    fn a_now_in_the_past_is_clamped() {
        let w = wm(10, 3, 6);
        w.observe(500, 9);
        w.observe(100, 0); // treated as 500
        assert_eq!(w.metrics(500).time_paused, 0);
    }

    #[test]
    fn the_largest_time_fits_the_state_word() {
        let w = wm(10, 3, 6);
        assert_eq!(w.observe(MAX_NOW - 5, 9), Some(Transition::Pause));
        assert!(w.is_paused());
        assert_eq!(w.metrics(MAX_NOW).time_paused, 5);
        assert_eq!(w.observe(MAX_NOW, 0), Some(Transition::Resume));
        assert_eq!(w.metrics(MAX_NOW).time_paused, 5);
        assert_eq!(Transition::Pause.as_str(), "pause");
        assert_eq!(Transition::Resume.as_str(), "resume");
    }

    #[test]
    fn an_out_of_range_now_acts_at_the_latest_time() {
        for bad in [MAX_NOW + 1, u64::MAX] {
            let w = wm(10, 3, 6);
            assert_eq!(w.observe(1000, 9), Some(Transition::Pause));
            assert_eq!(w.metrics(bad).time_paused, 0);
            assert_eq!(w.observe(bad, 0), Some(Transition::Resume));
            // The pause ended at 1000, not at the bad time.
            assert_eq!(w.metrics(2000).time_paused, 0);
        }
    }
}
