//! Time is an argument: nanoseconds on a monotonic clock the caller chooses.
//!
//! The core never reads a clock. Every structure keeps the latest `now` it has seen, and
//! a call acts at `max(now, latest seen)`: time never runs backwards inside a structure,
//! so a clock read a little late on another thread is harmless.
//!
//! # The accepted range of `now`
//!
//! `now` must be in `0..=MAX_NOW` ([`MAX_NOW`] = 2^62 ns, about 146 years of
//! `CLOCK_MONOTONIC`). A larger value (`u64::MAX` is the C ABI's "never") is bad input,
//! never a time:
//!
//! - it never moves a structure's clock: the call acts at the latest time seen, as if
//!   `now` were that time, and nothing derived from the bad value is stored (no latency
//!   sample, no window boundary, no deadline, no open timer);
//! - this holds for releases too (`Limiter::release_raw`, `Gate::release`): they take the
//!   permit by value, so refusing would lose its slot; they release at the latest time
//!   seen instead;
//! - a method that returns a [`UsageError`] for other reasons and has nothing to lose
//!   refuses it with [`UsageError::TimeOutOfRange`] and changes nothing; the bindings and
//!   the C ABI refuse an injected out-of-range `now` up front ([`check_now`]).
//!
//! Other absolute times a caller passes follow the same range: a deadline above
//! [`MAX_NOW`] means "no deadline", and an enqueue time above it (the lag meter's oldest
//! item) is ignored.
//!
//! # What a forward jump does
//!
//! A `now` far ahead of the last one (a suspended VM, a test that skips an hour) is a
//! valid time, and every structure reads it as that much time having passed with nothing
//! happening:
//!
//! - **Windows and rings** (the limiter's and the Gate's sample windows, the retry
//!   budget, the adaptive throttle, the breaker's time window, the lag meter's
//!   snapshots): the current window closes, and every slot older than the window expires.
//!   Limit algorithms see one long window; their own timers (cool-offs, probes, min-RTT
//!   expiry) count the jump as elapsed.
//! - **Rate limits** (`RateLimiter`, `PacedDrain`, per-key rates): the bucket refills,
//!   capped at the burst.
//! - **Breakers**: an open breaker's timer expires (the next call half-opens it), and a
//!   ramp moves on to the step the elapsed time reaches.
//! - **The Gate and CoDel**: waiters' deadlines and `max_wait` pass, so the next poll
//!   expires them; CoDel's interval closes. (`WaitQueue` itself only stores the caller's
//!   enqueue times and deadlines; it decides nothing from them.)
//! - **Watermarks and meters**: a pause in progress counts the jump as time paused; ages
//!   grow by the jump.
//!
//! A backward jump is never seen as such: calls act at the latest time until the clock
//! catches up.

use crate::sync::{AtomicU64, Ordering};
use crate::types::UsageError;

/// Nanoseconds per millisecond.
pub const MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const SEC: u64 = 1_000_000_000;
/// Nanoseconds per microsecond.
pub const US: u64 = 1_000;

/// The largest `now` any structure accepts: 2^62 ns, about 146 years of a monotonic
/// clock (`CLOCK_MONOTONIC` counts from boot). A `now` above it is bad input, never a
/// time: it must not move any structure's clock (one `u64::MAX` would otherwise freeze
/// every window and deadline for good). Below it, sums such as `now + interval` cannot
/// overflow for any accepted interval.
pub const MAX_NOW: u64 = 1 << 62;

/// `Ok(now)` if `now` is an accepted time (at most [`MAX_NOW`]), else
/// [`UsageError::TimeOutOfRange`]. Bindings call it before handing an injected `now` to a
/// structure, so the caller gets a clear error and nothing changes.
#[inline]
pub const fn check_now(now: u64) -> Result<u64, UsageError> {
    if now <= MAX_NOW {
        Ok(now)
    } else {
        Err(UsageError::TimeOutOfRange)
    }
}

/// A monotonic clamp for structures updated through `&mut self`.
///
/// Progress: not shared (plain `&mut self`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Monotonic {
    latest: u64,
}

impl Monotonic {
    /// A clamp that has seen nothing yet (time 0).
    pub const fn new() -> Self {
        Self { latest: 0 }
    }

    /// Returns `max(now, latest seen)` and remembers it. A `now` above [`MAX_NOW`] is
    /// ignored: the latest time seen is returned and nothing changes.
    #[inline]
    pub fn observe(&mut self, now: u64) -> u64 {
        if now > self.latest && now <= MAX_NOW {
            self.latest = now;
        }
        self.latest
    }

    /// The latest time seen.
    pub const fn latest(&self) -> u64 {
        self.latest
    }
}

/// A monotonic clamp shared between threads.
///
/// Progress: wait-free (a load, and one `fetch_max` when time advances).
#[derive(Debug)]
pub struct AtomicMonotonic {
    latest: AtomicU64,
}

impl Default for AtomicMonotonic {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicMonotonic {
    /// A clamp that has seen nothing yet (time 0).
    #[inline]
    pub fn new() -> Self {
        Self { latest: AtomicU64::new(0) }
    }

    /// Returns `max(now, latest seen)` and remembers it. A `now` above [`MAX_NOW`] is
    /// ignored: the latest time seen is returned and nothing changes. A `now` that does
    /// not advance time costs one load (no read-modify-write). Inlined: structures that
    /// are generic (the Gate) are compiled in their callers' crates.
    #[inline]
    pub fn observe(&self, now: u64) -> u64 {
        // Relaxed: the clamp orders nothing else; each structure orders its own state.
        let latest = self.latest.load(Ordering::Relaxed);
        if now <= latest || now > MAX_NOW {
            return latest;
        }
        let prev = self.latest.fetch_max(now, Ordering::Relaxed);
        if prev > now {
            prev
        } else {
            now
        }
    }

    /// For structures that take an older `now` as given (their state already orders
    /// time, as a GCRA arrival time or a slot ring does): remembers an accepted `now` and
    /// returns it unchanged, and returns the latest time seen in place of one above
    /// [`MAX_NOW`]. Same cost as [`observe`](Self::observe).
    #[inline]
    pub fn in_range_or_latest(&self, now: u64) -> u64 {
        let latest = self.observe(now);
        if now > MAX_NOW {
            latest
        } else {
            now
        }
    }

    /// The latest time seen.
    #[inline]
    pub fn latest(&self) -> u64 {
        self.latest.load(Ordering::Relaxed)
    }
}

/// Converts seconds (as bindings receive them) to nanoseconds, refusing NaN, negative,
/// infinite and out-of-range values.
pub fn secs_to_nanos(secs: f64) -> Option<u64> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let ns = secs * SEC as f64;
    if ns >= u64::MAX as f64 {
        return None;
    }
    Some(ns as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn time_never_runs_backwards() {
        let mut m = Monotonic::new();
        assert_eq!(m.observe(10), 10);
        assert_eq!(m.observe(5), 10);
        assert_eq!(m.observe(11), 11);
        let a = AtomicMonotonic::new();
        assert_eq!(a.observe(10), 10);
        assert_eq!(a.observe(3), 10);
        assert_eq!(a.latest(), 10);
    }

    #[test]
    fn out_of_range_time_moves_no_clock() {
        for bad in [MAX_NOW + 1, u64::MAX] {
            let mut m = Monotonic::new();
            assert_eq!(m.observe(10), 10);
            assert_eq!(m.observe(bad), 10);
            assert_eq!(m.latest(), 10);
            assert_eq!(m.observe(11), 11);
            let a = AtomicMonotonic::new();
            assert_eq!(a.observe(10), 10);
            assert_eq!(a.observe(bad), 10);
            assert_eq!(a.latest(), 10);
            assert_eq!(a.observe(11), 11);
        }
        let mut m = Monotonic::new();
        assert_eq!(m.observe(MAX_NOW), MAX_NOW);
        let a = AtomicMonotonic::new();
        assert_eq!(a.observe(MAX_NOW), MAX_NOW);
        let a = AtomicMonotonic::new();
        assert_eq!(a.in_range_or_latest(10), 10);
        assert_eq!(a.in_range_or_latest(4), 4);
        assert_eq!(a.in_range_or_latest(u64::MAX), 10);
        assert_eq!(a.in_range_or_latest(MAX_NOW + 1), 10);
        assert_eq!(a.latest(), 10);
    }

    #[test]
    fn now_is_checked_against_max_now() {
        assert_eq!(check_now(0), Ok(0));
        assert_eq!(check_now(MAX_NOW), Ok(MAX_NOW));
        assert_eq!(check_now(MAX_NOW + 1), Err(UsageError::TimeOutOfRange));
        assert_eq!(check_now(u64::MAX), Err(UsageError::TimeOutOfRange));
    }

    #[test]
    fn seconds_are_validated() {
        assert_eq!(secs_to_nanos(1.5), Some(1_500_000_000));
        assert_eq!(secs_to_nanos(f64::NAN), None);
        assert_eq!(secs_to_nanos(-0.1), None);
        assert_eq!(secs_to_nanos(f64::INFINITY), None);
        assert_eq!(secs_to_nanos(1e12), None);
    }
}
