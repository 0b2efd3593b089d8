//! The clock: nanoseconds on the operating system's monotonic clock, the same origin in
//! every process and every binding, and a manual clock for tests.
//!
//! The core never reads a clock; every call takes `now` in nanoseconds. This module is
//! where `now` comes from. [`MonotonicClock`] reads raw `CLOCK_MONOTONIC` (Linux, the
//! BSDs, macOS), not an [`Instant`](std::time::Instant) measured from a per-process
//! origin, so a timestamp taken in one process means the same in another — the Python,
//! Node and C users of the same engine see the same numbers. On other platforms it falls
//! back to an `Instant` origin fixed at the first call in the process (documented there).
//!
//! ```
//! use surgeguard::clock::{Clock, ManualClock, MonotonicClock};
//!
//! let real = MonotonicClock;
//! let a = real.now_ns();
//! assert!(real.now_ns() >= a);
//!
//! let manual = ManualClock::new(1_000);
//! manual.advance(std::time::Duration::from_millis(5)).unwrap();
//! assert_eq!(manual.now_ns(), 5_001_000);
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use surgeguard_core::UsageError;
use surgeguard_core::time::{MAX_NOW, check_now};

/// A source of `now`: monotonic nanoseconds, never above
/// [`MAX_NOW`] (2^62 ns, about 146 years).
///
/// ```
/// use surgeguard::clock::Clock;
///
/// /// A clock that always says 42 ns (a toy).
/// #[derive(Clone)]
/// struct Frozen;
/// impl Clock for Frozen {
///     fn now_ns(&self) -> u64 { 42 }
/// }
/// assert_eq!(Frozen.now_ns(), 42);
/// ```
pub trait Clock: Clone + Send + Sync + 'static {
    /// Nanoseconds now. Must not decrease between calls that are ordered (the core treats
    /// an earlier `now` as the latest it has seen, so a small step back is harmless).
    fn now_ns(&self) -> u64;
}

/// Raw `CLOCK_MONOTONIC` in nanoseconds: the clock every surgeguard binding reads.
/// About 20–30 ns per read through the vDSO; it never fails.
///
/// ```
/// use surgeguard::clock::{Clock, MonotonicClock};
/// let t = MonotonicClock.now_ns();
/// assert!(t > 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }
}

/// Raw `CLOCK_MONOTONIC` in nanoseconds (see [`MonotonicClock`]), at least 1 (so that 0
/// can mean "never" in the core) and at most `MAX_NOW`.
///
/// ```
/// let a = surgeguard::clock::monotonic_ns();
/// let b = surgeguard::clock::monotonic_ns();
/// assert!(b >= a && a >= 1);
/// ```
#[cfg(unix)]
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the whole call; CLOCK_MONOTONIC is
    // supported on every unix target Rust supports (std's `Instant` uses it too), and the
    // call writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return fallback_ns();
    }
    let ns = (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64);
    ns.clamp(1, MAX_NOW)
}

/// Monotonic nanoseconds (see [`MonotonicClock`]). On this platform there is no raw
/// `CLOCK_MONOTONIC`: the origin is the first call in this process.
#[cfg(not(unix))]
#[inline]
pub fn monotonic_ns() -> u64 {
    fallback_ns()
}

/// An `Instant` origin fixed at the first call in this process (per-process: only used
/// where `CLOCK_MONOTONIC` cannot be read).
#[cold]
fn fallback_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    (origin.elapsed().as_nanos().min(u128::from(MAX_NOW - 1)) as u64) + 1
}

/// A clock that moves only when told: for tests and simulations. Clones share one time
/// (one atomic word: reads and `set` are wait-free, `advance` is a lock-free CAS loop).
/// A time above `MAX_NOW` is refused with
/// [`UsageError::TimeOutOfRange`] and changes nothing.
///
/// ```
/// use std::time::Duration;
/// use surgeguard::clock::{Clock, ManualClock};
/// use surgeguard::UsageError;
///
/// let clock = ManualClock::new(0);
/// let seen_by_gate = clock.clone();
/// clock.set(2_000).unwrap();
/// assert_eq!(seen_by_gate.now_ns(), 2_000);
/// assert_eq!(clock.set(u64::MAX), Err(UsageError::TimeOutOfRange));
/// assert_eq!(clock.now_ns(), 2_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock showing `start_ns` (clamped to `MAX_NOW`).
    pub fn new(start_ns: u64) -> Self {
        Self { ns: Arc::new(AtomicU64::new(start_ns.min(MAX_NOW))) }
    }

    /// Shows `ns` from now on (may go backwards: the core holds its own latest time).
    pub fn set(&self, ns: u64) -> Result<(), UsageError> {
        let ns = check_now(ns)?;
        // Relaxed: the time orders nothing else; callers synchronise their own work.
        self.ns.store(ns, Ordering::Relaxed);
        Ok(())
    }

    /// Moves the time forward by `by`; refused (`TimeOutOfRange`) past `MAX_NOW`.
    pub fn advance(&self, by: Duration) -> Result<(), UsageError> {
        let by = u64::try_from(by.as_nanos()).map_err(|_| UsageError::TimeOutOfRange)?;
        self.ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_add(by).filter(|t| *t <= MAX_NOW)
            })
            .map(|_| ())
            .map_err(|_| UsageError::TimeOutOfRange)
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::Relaxed)
    }
}

/// `now + d` in nanoseconds, saturating at `MAX_NOW` (a deadline that far out is "never").
pub(crate) fn after(now: u64, d: Duration) -> u64 {
    let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    now.saturating_add(d).min(MAX_NOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_matches_instant_rate() {
        let a = monotonic_ns();
        let i = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = monotonic_ns();
        let el = i.elapsed().as_nanos() as u64;
        assert!(b - a >= 20_000_000, "{}", b - a);
        // Same clock as Instant on unix: the two spans agree closely.
        assert!((b - a).abs_diff(el) < 5_000_000, "{} vs {el}", b - a);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn monotonic_is_raw_clock_monotonic_not_a_process_origin() {
        // /proc/uptime counts from boot like CLOCK_MONOTONIC (minus suspend); a per-process
        // origin would be near zero here.
        let up = std::fs::read_to_string("/proc/uptime").unwrap();
        let up_s: f64 = up.split_whitespace().next().unwrap().parse().unwrap();
        let ns = monotonic_ns() as f64 / 1e9;
        assert!((ns - up_s).abs() < 5.0, "clock {ns} s, uptime {up_s} s");
    }

    #[test]
    fn manual_refuses_out_of_range_and_keeps_time() {
        let c = ManualClock::new(10);
        assert_eq!(c.set(MAX_NOW + 1), Err(UsageError::TimeOutOfRange));
        assert_eq!(c.now_ns(), 10);
        c.set(MAX_NOW).unwrap();
        assert_eq!(c.advance(Duration::from_nanos(1)), Err(UsageError::TimeOutOfRange));
        assert_eq!(c.now_ns(), MAX_NOW);
        assert_eq!(c.advance(Duration::MAX), Err(UsageError::TimeOutOfRange));
    }
}
