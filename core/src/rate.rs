//! Rate limits: GCRA on one atomic word ([`RateLimiter`], [`gcra_decide`]) and a paced
//! drain of a backlog after an outage ([`PacedDrain`]).
//!
//! GCRA formulas as in the governor crate: emission interval `t`, tolerance
//! `τ = t·(burst − 1)`, a request of weight `n` needs `w = t·(n − 1) ≤ τ` and is allowed at
//! `now ≥ tat + w − τ`, after which `tat = max(tat, now) + t + w`. Unlike a sleeping
//! limiter, a refusal returns the wait, so the caller can reject with `Retry-After` or
//! schedule its own timer.

#[cfg(all(not(loom), target_has_atomic = "64"))]
use crate::layout::{fingerprint, Placeable};
use crate::sync::{AtomicU64, Ordering};
use crate::time::{secs_to_nanos, AtomicMonotonic, SEC};
use crate::types::check_range;
use crate::{ConfigError, Reason, Rejected};

/// One GCRA step, pure: given the stored theoretical arrival time `tat` (0 = never used),
/// decide a request of weight `cost` at `now`.
///
/// Returns `Ok(new_tat)` to store if the request conforms, or `Err(wait_ns)`: how long
/// from `now` until it would. `Err(u64::MAX)` means never: `cost` exceeds the burst
/// (governor's `InsufficientCapacity`). `cost == 0` conforms and changes nothing. An
/// `emission_ns` of 0 is taken as 1 ns (as governor). Arithmetic saturates instead of
/// wrapping.
///
/// Shared by [`RateLimiter`] and by per-key limits, which keep one `tat` word per key.
///
/// ```
/// use surgeguard_core::rate::gcra_decide;
/// // 1 per 100 ns, burst 3 (tolerance 200 ns).
/// let tat = gcra_decide(0, 1000, 100, 200, 3).unwrap();
/// assert_eq!(tat, 1300);
/// assert_eq!(gcra_decide(tat, 1000, 100, 200, 1), Err(100));
/// assert_eq!(gcra_decide(tat, 1000, 100, 200, 4), Err(u64::MAX));
/// ```
pub fn gcra_decide(
    tat: u64,
    now: u64,
    emission_ns: u64,
    tolerance_ns: u64,
    cost: u32,
) -> Result<u64, u64> {
    if cost == 0 {
        return Ok(tat);
    }
    let t = emission_ns.max(1) as u128;
    let tau = tolerance_ns as u128;
    // governor: w = t·(n − 1); more than τ can never conform.
    let w = t * (cost as u128 - 1);
    if w > tau {
        return Err(u64::MAX);
    }
    let (tat, now) = (tat as u128, now as u128);
    // Earliest conforming time: tat + w − τ.
    let earliest = (tat + w).saturating_sub(tau);
    if now < earliest {
        return Err((earliest - now).min(u64::MAX as u128) as u64);
    }
    Ok((tat.max(now) + t + w).min(u64::MAX as u128) as u64)
}

/// Settings of a [`RateLimiter`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimiterConfig {
    /// Sustained rate, units per second. In `[1e-6, 1e9]`.
    pub per_second: f64,
    /// Largest burst, units (also the largest single `cost`). In `[1, 1e9]`.
    pub burst: u32,
}

/// A GCRA rate limiter on one `AtomicU64` (the theoretical arrival time), with weighted
/// cost and the wait returned on refusal.
///
/// Admits at most `burst + rate × T` units in any interval of length `T` (checked by the
/// quickcheck model in `tests/client_model.rs`), the same decisions as a token bucket of
/// `burst` tokens refilled at `rate`.
///
/// ```
/// use surgeguard_core::rate::{RateLimiter, RateLimiterConfig};
/// use surgeguard_core::time::{MS, SEC};
/// let limiter = RateLimiter::new(RateLimiterConfig { per_second: 10.0, burst: 5 }).unwrap();
/// let now = 7 * SEC;
/// for _ in 0..5 {
///     assert!(limiter.check(now, 1).is_ok()); // the burst
/// }
/// let refused = limiter.check(now, 1).unwrap_err();
/// assert_eq!(refused.reason.as_str(), "rate_limited");
/// assert_eq!(refused.retry_after, 100 * MS); // one emission interval
/// ```
///
/// **Progress.** Lock-free: a compare-and-swap loop that retries only when another caller
/// changed the word. **Cost.** The clock clamp (a load, and a `fetch_max` when time
/// advances), then one load and one CAS per admitted call, plus one counter `fetch_add`;
/// a refusal is a load and a counter. Reference: governor's direct limiter.
///
/// **Time.** A `now` older than one already seen is never admitted more than the newer one
/// would be (the stored `tat` already accounts for it); its hint is longer by the
/// difference. A `now` above [`MAX_NOW`](crate::time::MAX_NOW) is bad input: the call
/// acts at the latest time seen, so it never pushes the theoretical arrival time out of
/// range. A forward jump refills the bucket, capped at the burst.
///
/// **Placeable** ([`Placeable`](crate::layout::Placeable)): `#[repr(C)]`, integers and atomics only, so it may live
/// in memory shared between processes (the `surgeguard` crate's `shm` feature) when every
/// process passes `now` from the same clock (raw `CLOCK_MONOTONIC`).
#[derive(Debug)]
#[repr(C)]
pub struct RateLimiter {
    emission: u64,
    tolerance: u64,
    clock: AtomicMonotonic,
    tat: AtomicU64,
    allowed: AtomicU64,
    denied: AtomicU64,
    burst: u32,
}

// The layout other processes rely on (see `layout`): checked at compile time.
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<AtomicMonotonic>() == 8 && align_of::<AtomicMonotonic>() == 8);
    assert!(offset_of!(RateLimiter, emission) == 0);
    assert!(offset_of!(RateLimiter, tolerance) == 8);
    assert!(offset_of!(RateLimiter, clock) == 16);
    assert!(offset_of!(RateLimiter, tat) == 24);
    assert!(offset_of!(RateLimiter, allowed) == 32);
    assert!(offset_of!(RateLimiter, denied) == 40);
    assert!(offset_of!(RateLimiter, burst) == 48);
    assert!(size_of::<RateLimiter>() == 56 && align_of::<RateLimiter>() == 8);
};

// SAFETY: `#[repr(C)]`, no pointers and no `Drop`; after construction only the atomics
// change (`clock`, `tat`, the counters: plain integers); `emission`, `tolerance` and
// `burst` are written once, before the value is published. LAYOUT covers every field.
#[cfg(all(not(loom), target_has_atomic = "64"))]
#[allow(unsafe_code)]
unsafe impl Placeable for RateLimiter {
    const LAYOUT: u64 = {
        use core::mem::{offset_of, size_of};
        fingerprint(
            "surgeguard_core::rate::RateLimiter/1",
            &[
                size_of::<Self>() as u64,
                offset_of!(Self, emission) as u64,
                offset_of!(Self, tolerance) as u64,
                offset_of!(Self, clock) as u64,
                offset_of!(Self, tat) as u64,
                offset_of!(Self, allowed) as u64,
                offset_of!(Self, denied) as u64,
                offset_of!(Self, burst) as u64,
            ],
        )
    };
}

/// A snapshot of a [`RateLimiter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateLimiterMetrics {
    /// Units admitted, ever (sum of admitted costs).
    pub allowed: u64,
    /// Calls refused, ever.
    pub denied: u64,
    /// The emission interval, ns per unit.
    pub emission_ns: u64,
    /// The burst, units.
    pub burst: u32,
}

impl RateLimiter {
    /// A limiter with `config`, or why the config cannot be used.
    pub fn new(config: RateLimiterConfig) -> Result<Self, ConfigError> {
        let rate = check_range(config.per_second, 1e-6, 1e9, "rate_limiter.per_second")?;
        let emission = libm::round(SEC as f64 / rate).max(1.0) as u64;
        Self::with_interval(emission, config.burst)
    }

    /// A limiter admitting one unit per `emission_ns` with bursts of `burst` units.
    pub fn with_interval(emission_ns: u64, burst: u32) -> Result<Self, ConfigError> {
        if emission_ns == 0 || emission_ns > 1_000_000 * SEC {
            return Err(ConfigError::out_of_range("rate_limiter.emission_ns"));
        }
        if burst == 0 || burst > 1_000_000_000 {
            return Err(ConfigError::out_of_range("rate_limiter.burst"));
        }
        let tolerance =
            emission_ns.checked_mul(burst as u64 - 1).ok_or(ConfigError::inconsistent(
                "rate_limiter.burst",
                "is too large for",
                "rate_limiter.emission_ns",
            ))?;
        Ok(Self {
            emission: emission_ns,
            tolerance,
            burst,
            clock: AtomicMonotonic::new(),
            tat: AtomicU64::new(0),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        })
    }

    /// The emission interval, ns per unit.
    pub fn emission_ns(&self) -> u64 {
        self.emission
    }

    /// The tolerance `τ = t·(burst − 1)`, ns.
    pub fn tolerance_ns(&self) -> u64 {
        self.tolerance
    }

    /// The burst, units.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Admits `cost` units now, or refuses with [`Reason::RateLimited`] and the wait until
    /// they would conform (`u64::MAX` if `cost` exceeds the burst: never).
    pub fn check(&self, now: u64, cost: u32) -> Result<(), Rejected> {
        let now = self.clock.in_range_or_latest(now);
        // Relaxed: the word orders nothing but itself; the CAS makes each update atomic.
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            match gcra_decide(tat, now, self.emission, self.tolerance, cost) {
                Ok(new) => {
                    match self.tat.compare_exchange_weak(
                        tat,
                        new,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            self.allowed.fetch_add(cost as u64, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(current) => tat = current,
                    }
                }
                Err(wait) => {
                    self.denied.fetch_add(1, Ordering::Relaxed);
                    return Err(Rejected::new(Reason::RateLimited, wait));
                }
            }
        }
    }

    /// Admits as many units as conform now, up to `max`, and returns how many (0 if none).
    /// governor's "any-n" rule: `min(max, ⌊(now + τ − tat)/t⌋ + 1, burst)`.
    pub fn take_up_to(&self, now: u64, max: u32) -> u32 {
        let now = self.clock.in_range_or_latest(now);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let n = self.conforming(tat, now).min(max);
            if n == 0 {
                return 0;
            }
            let Ok(new) = gcra_decide(tat, now, self.emission, self.tolerance, n) else {
                return 0; // unreachable: n conforms by construction
            };
            match self.tat.compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.allowed.fetch_add(n as u64, Ordering::Relaxed);
                    return n;
                }
                Err(current) => tat = current,
            }
        }
    }

    /// Units that would conform now, without taking them.
    pub fn available(&self, now: u64) -> u32 {
        let now = self.clock.in_range_or_latest(now);
        self.conforming(self.tat.load(Ordering::Relaxed), now)
    }

    /// How long until `cost` units would conform (0 = now, `u64::MAX` = never), without
    /// taking them.
    pub fn wait_time(&self, now: u64, cost: u32) -> u64 {
        let now = self.clock.in_range_or_latest(now);
        match gcra_decide(
            self.tat.load(Ordering::Relaxed),
            now,
            self.emission,
            self.tolerance,
            cost,
        ) {
            Ok(_) => 0,
            Err(wait) => wait,
        }
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> RateLimiterMetrics {
        RateLimiterMetrics {
            allowed: self.allowed.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            emission_ns: self.emission,
            burst: self.burst,
        }
    }

    fn conforming(&self, tat: u64, now: u64) -> u32 {
        let horizon = now as u128 + self.tolerance as u128;
        if horizon < tat as u128 {
            return 0;
        }
        let n = (horizon - tat as u128) / self.emission as u128 + 1;
        n.min(self.burst as u128) as u32
    }
}

/// Settings of a [`PacedDrain`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacedDrainConfig {
    /// What the dependency sustains, items per second. In `[1e-6, 1e9]`.
    pub target_per_sec: f64,
    /// Fraction of the target kept free while draining, in `[0, 1)`: the drain runs at
    /// `target × (1 − headroom)`, so live traffic and the recovering dependency keep room.
    pub headroom: f64,
    /// Largest number started at once. In `[1, 1e9]`.
    pub burst: u32,
}

impl PacedDrainConfig {
    /// Drain against `target_per_sec` with 20 % headroom and a burst
    /// of 100 ms of the drain rate (at least 1), so a caller polling every 100 ms or
    /// faster reaches the full drain rate.
    pub fn new(target_per_sec: f64) -> Self {
        let burst = libm::ceil(target_per_sec * 0.8 / 10.0);
        let burst = if (1.0..=1e9).contains(&burst) { burst as u32 } else { 1 };
        Self { target_per_sec, headroom: 0.2, burst }
    }
}

/// Paces the drain of a backlog after an outage: given the backlog, says how many items
/// may start now, never more than `target × (1 − headroom)` per second (plus the burst).
///
/// Processing the backlog at full speed the moment a dependency returns re-saturates the
/// dependency that just came back. With headroom `h`, a backlog of `B` items drains in
/// `B / (drain_rate − produce_rate)` ([`time_to_drain`]: a 1-hour outage drained with
/// 20 % headroom takes about 5 hours).
///
/// ```
/// use surgeguard_core::rate::{PacedDrain, PacedDrainConfig};
/// use surgeguard_core::time::{MS, SEC};
/// // The dependency sustains 1000/s; drain at 800/s, bursts of 100 ms (80 items).
/// let drain = PacedDrain::new(PacedDrainConfig::new(1000.0)).unwrap();
/// let t0 = 10 * SEC;
/// assert_eq!(drain.permits(t0, 1_000_000), 80);
/// assert_eq!(drain.permits(t0 + 10 * MS, 1_000_000), 8);
/// assert_eq!(drain.permits(t0 + 20 * MS, 3), 3); // never more than the backlog
/// ```
///
/// **Progress.** Lock-free (one GCRA compare-and-swap loop). **Cost.** As
/// [`RateLimiter::take_up_to`].
#[derive(Debug)]
pub struct PacedDrain {
    config: PacedDrainConfig,
    limiter: RateLimiter,
    calls: AtomicU64,
}

/// A snapshot of a [`PacedDrain`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PacedDrainMetrics {
    /// Items started, ever.
    pub started: u64,
    /// `permits` calls, ever.
    pub calls: u64,
    /// The drain rate, items per second.
    pub drain_per_sec: f64,
}

impl PacedDrain {
    /// A drain with `config`, or why the config cannot be used.
    pub fn new(config: PacedDrainConfig) -> Result<Self, ConfigError> {
        let target = check_range(config.target_per_sec, 1e-6, 1e9, "paced_drain.target_per_sec")?;
        let headroom = check_range(config.headroom, 0.0, 1.0, "paced_drain.headroom")?;
        if headroom >= 1.0 {
            return Err(ConfigError::out_of_range("paced_drain.headroom"));
        }
        let rate = target * (1.0 - headroom);
        if rate < 1e-6 {
            return Err(ConfigError::inconsistent(
                "paced_drain.headroom",
                "leaves below 1e-6 per second of",
                "paced_drain.target_per_sec",
            ));
        }
        let limiter = RateLimiter::new(RateLimiterConfig { per_second: rate, burst: config.burst })
            .map_err(|e| match e.field {
                "rate_limiter.burst" => ConfigError { field: "paced_drain.burst", ..e },
                _ => e,
            })?;
        Ok(Self { config, limiter, calls: AtomicU64::new(0) })
    }

    /// The config this drain was built from.
    pub fn config(&self) -> PacedDrainConfig {
        self.config
    }

    /// The drain rate, items per second (`target × (1 − headroom)`, as rounded to whole
    /// nanoseconds per item).
    pub fn drain_per_sec(&self) -> f64 {
        SEC as f64 / self.limiter.emission_ns() as f64
    }

    /// How many of `backlog` waiting items may start now; they are counted as started.
    pub fn permits(&self, now: u64, backlog: u64) -> u32 {
        self.calls.fetch_add(1, Ordering::Relaxed);
        // With no backlog this takes nothing, but still sees `now`.
        self.limiter.take_up_to(now, backlog.min(u32::MAX as u64) as u32)
    }

    /// How long until the next item may start (0 = now): when to set the timer.
    pub fn next_permit_in(&self, now: u64) -> u64 {
        self.limiter.wait_time(now, 1)
    }

    /// Time to drain `backlog` at this drain's rate while new work arrives at
    /// `produce_per_sec`, ns; `None` if it never drains.
    pub fn time_to_drain(&self, backlog: u64, produce_per_sec: f64) -> Option<u64> {
        time_to_drain(backlog, self.drain_per_sec(), produce_per_sec)
    }

    /// A snapshot of the counters.
    pub fn metrics(&self) -> PacedDrainMetrics {
        PacedDrainMetrics {
            started: self.limiter.metrics().allowed,
            calls: self.calls.load(Ordering::Relaxed),
            drain_per_sec: self.drain_per_sec(),
        }
    }
}

/// The drain time of a backlog: `backlog / (consume_rate − produce_rate)`, in ns. `None` when
/// the backlog never drains (consume ≤ produce) or an input is not a finite non-negative
/// number.
///
/// ```
/// use surgeguard_core::rate::time_to_drain;
/// use surgeguard_core::time::SEC;
/// // A 1-hour outage at 1000/s with 20 % headroom: 3.6 M items drain at 200/s in 5 h.
/// assert_eq!(time_to_drain(3_600_000, 1200.0, 1000.0), Some(5 * 3600 * SEC));
/// assert_eq!(time_to_drain(1, 1000.0, 1000.0), None);
/// ```
pub fn time_to_drain(backlog: u64, consume_per_sec: f64, produce_per_sec: f64) -> Option<u64> {
    if !(consume_per_sec.is_finite() && produce_per_sec.is_finite()) || produce_per_sec < 0.0 {
        return None;
    }
    let net = consume_per_sec - produce_per_sec;
    if net <= 0.0 {
        return None;
    }
    secs_to_nanos(backlog as f64 / net)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::time::MS;

    #[test]
    fn governor_style_burst_then_one_per_interval() {
        // governor: Quota::per_second(10).allow_burst(5): 5 at once, then one per 100 ms.
        let l = RateLimiter::new(RateLimiterConfig { per_second: 10.0, burst: 5 }).unwrap();
        assert_eq!((l.emission_ns(), l.tolerance_ns()), (100 * MS, 400 * MS));
        let t0 = 3 * SEC;
        for _ in 0..5 {
            assert!(l.check(t0, 1).is_ok());
        }
        assert_eq!(l.check(t0, 1).unwrap_err().retry_after, 100 * MS);
        assert_eq!(l.check(t0 + 99 * MS, 1).unwrap_err().retry_after, MS);
        assert!(l.check(t0 + 100 * MS, 1).is_ok());
        assert!(l.check(t0 + 100 * MS, 1).is_err());
        // After a long idle, the burst is back but never more.
        assert_eq!(l.available(t0 + 60 * SEC), 5);
        let m = l.metrics();
        assert_eq!((m.allowed, m.denied), (6, 3));
    }

    #[test]
    fn weighted_cost_and_insufficient_capacity() {
        let l = RateLimiter::new(RateLimiterConfig { per_second: 10.0, burst: 5 }).unwrap();
        let t0 = SEC;
        assert!(l.check(t0, 3).is_ok());
        // 2 left: a cost of 3 must wait one interval.
        assert_eq!(l.check(t0, 3).unwrap_err().retry_after, 100 * MS);
        assert!(l.check(t0, 2).is_ok());
        // More than the burst never conforms.
        assert_eq!(l.check(t0 + 3600 * SEC, 6).unwrap_err().retry_after, u64::MAX);
        assert_eq!(l.wait_time(t0 + 3600 * SEC, 5), 0);
        // cost 0 always conforms and changes nothing.
        assert!(l.check(t0, 0).is_ok());
        assert_eq!(l.available(t0), 0);
    }

    #[test]
    fn gcra_decide_saturates_at_the_ends_of_time() {
        assert_eq!(gcra_decide(0, u64::MAX, 10, 0, 1), Ok(u64::MAX));
        assert_eq!(gcra_decide(u64::MAX, 0, 10, 0, 1), Err(u64::MAX));
        assert_eq!(gcra_decide(5, 5, 0, 0, 1), Ok(6)); // emission 0 is 1 ns
        assert_eq!(gcra_decide(100, 0, 10, 1000, 1), Ok(110));
    }

    #[test]
    fn take_up_to_takes_what_conforms() {
        let l = RateLimiter::with_interval(10, 4).unwrap();
        assert_eq!(l.take_up_to(1000, 10), 4);
        assert_eq!(l.take_up_to(1000, 10), 0);
        assert_eq!(l.take_up_to(1025, 10), 2);
        assert_eq!(l.take_up_to(1100, 1), 1);
        assert_eq!(l.metrics().allowed, 7);
    }

    #[test]
    fn outage_drain_times() {
        let hour = 3600 * SEC;
        let produce = 80_000.0;
        let backlog = (produce * 3600.0) as u64;
        // A 1 h outage: 20 % headroom drains it in ~5 h; 5 %: ~20 h; 30 %: ~3.3 h.
        let twenty = time_to_drain(backlog, produce * 1.2, produce).unwrap();
        assert!(twenty.abs_diff(5 * hour) < SEC);
        let five = time_to_drain(backlog, produce * 1.05, produce).unwrap();
        assert!(five.abs_diff(20 * hour) < SEC);
        let thirty = time_to_drain(backlog, produce * 1.3, produce).unwrap();
        assert!(thirty.abs_diff(hour * 10 / 3) < SEC);
        assert_eq!(time_to_drain(backlog, produce, produce), None);
        assert_eq!(time_to_drain(backlog, f64::NAN, produce), None);
        // The PacedDrain arithmetic: target 1000/s with 20 % headroom drains 800/s; with
        // 600/s still arriving, 720 000 items take 1 h.
        let d = PacedDrain::new(PacedDrainConfig::new(1000.0)).unwrap();
        assert_eq!(d.drain_per_sec(), 800.0);
        assert_eq!(d.time_to_drain(720_000, 600.0), Some(hour));
        assert_eq!(d.time_to_drain(1, 800.0), None);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn paced_drain_follows_its_rate() {
        let d =
            PacedDrain::new(PacedDrainConfig { target_per_sec: 1000.0, headroom: 0.5, burst: 10 })
                .unwrap();
        let t0 = 100 * SEC;
        let mut started = 0u64;
        let mut now = t0;
        while now < t0 + 10 * SEC {
            started += d.permits(now, 1_000_000) as u64;
            now += 7 * MS;
        }
        // 500/s for 10 s, plus the burst.
        assert!((4990..=5000 + 10).contains(&started), "{started}");
        assert_eq!(d.metrics().started, started);
        assert_eq!(d.permits(now, 0), 0);
        assert!(d.next_permit_in(now) <= 2 * MS);
    }

    #[test]
    fn bad_configs_are_refused() {
        for (rate, burst) in [(0.0, 1), (f64::NAN, 1), (-1.0, 1), (2e9, 1), (1.0, 0)] {
            assert!(RateLimiter::new(RateLimiterConfig { per_second: rate, burst }).is_err());
        }
        assert!(RateLimiter::with_interval(0, 1).is_err());
        assert!(RateLimiter::with_interval(SEC, 1_000_000_001).is_err());
        for (target, headroom) in [(100.0, 1.0), (100.0, -0.1), (100.0, f64::NAN), (0.0, 0.2)] {
            let cfg = PacedDrainConfig { target_per_sec: target, headroom, burst: 1 };
            assert!(PacedDrain::new(cfg).is_err(), "{cfg:?}");
        }
    }
}
