//! Client-side adaptive throttling (Google SRE book ch. 21): a client that sees its
//! backend refuse work starts refusing locally, with probability
//! `max(0, (requests − K·accepts) / (requests + 1))`, so rejected work costs the backend
//! nothing. Constants: the SRE book (K = 2, a 2-minute window) and Finagle's
//! `NackAdmissionFilter`.

use crate::sync::{AtomicU64, Exclusive, Ordering};
use crate::time::{AtomicMonotonic, SEC};
use crate::types::check_range;
use crate::{ConfigError, Reason, Rejected};

/// Buckets in the exact ring: the 2-minute SRE window in 1-second buckets
/// (120 × 1 s buckets of (requests, accepts)).
pub const THROTTLE_BUCKETS: usize = 120;

/// How the throttle remembers the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ThrottleForm {
    /// The SRE book's form: exact counts over the last `window`, in
    /// [`THROTTLE_BUCKETS`] buckets (a sample counts for `window`, give or take a bucket).
    #[default]
    Ring,
    /// O(1) form: counts decayed exponentially with time constant `window`, the SRE
    /// formula over them. With many requests it is Finagle's `NackAdmissionFilter`
    /// (`1 − K·ema(accept rate)`); unlike that, it keeps the `+1`, so a
    /// sporadic client is not throttled on one failure.
    Ema,
}

/// Settings of an [`AdaptiveThrottle`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveThrottleConfig {
    /// The multiplier `K`: how many requests per accept the client may send before it
    /// throttles. SRE: 2 ("typical"); lower (e.g. 1.1) throttles sooner. In `[1, 1000]`.
    pub k: f64,
    /// The window, ns. SRE: 2 minutes. In `[1 s, 1 h]`.
    pub window: u64,
    /// Cap on the local drop probability, in `[0, 1]`. Finagle: 0.75, so that some
    /// traffic always reaches the backend and recovery stays visible.
    pub max_drop_probability: f64,
    /// Exact ring or O(1) decayed counts.
    pub form: ThrottleForm,
}

impl Default for AdaptiveThrottleConfig {
    /// K = 2 and a 2-minute window (SRE book), drop cap 0.75 (Finagle
    /// `NackAdmissionFilter` `MaxDropProbability`), exact ring.
    fn default() -> Self {
        Self { k: 2.0, window: 120 * SEC, max_drop_probability: 0.75, form: ThrottleForm::Ring }
    }
}

impl AdaptiveThrottleConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_range(self.k, 1.0, 1000.0, "adaptive_throttle.k")?;
        check_range(self.max_drop_probability, 0.0, 1.0, "adaptive_throttle.max_drop_probability")?;
        if self.window < SEC || self.window > 3600 * SEC {
            return Err(ConfigError::out_of_range("adaptive_throttle.window"));
        }
        Ok(())
    }
}

/// Requests (low half) and accepts (high half) recorded since the last fold.
const PENDING_REQUEST: u64 = 1;
const PENDING_ACCEPT: u64 = 1 << 32;
const PENDING_HALF_MASK: u64 = (1 << 32) - 1;

/// Window state, touched only by whichever thread folds.
#[derive(Debug)]
struct FoldState {
    started: bool,
    /// The bucket pending counts are folded into.
    epoch: u64,
    /// Time of the last fold (for the decay of the EMA form).
    last_fold: u64,
    ring: [(u32, u32); THROTTLE_BUCKETS],
    requests: u64,
    accepts: u64,
    ema_requests: f64,
    ema_accepts: f64,
}

/// SRE client-side adaptive throttling, in the exact ring form or an O(1) decayed form
/// ([`ThrottleForm`]), with a cap on the drop probability.
///
/// Call [`should_throttle`](Self::should_throttle) before sending; if it refuses, fail
/// the request locally (that refusal counts as a request, as in the SRE book). After a
/// sent request completes, call [`record`](Self::record) with whether the backend
/// accepted it (a 429/503 or "overloaded" is not an accept).
///
/// ```
/// use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig};
/// use surgeguard_core::time::SEC;
/// let throttle = AdaptiveThrottle::new(AdaptiveThrottleConfig::default()).unwrap();
/// let now = 10 * SEC;
/// for _ in 0..100 {
///     throttle.record(now, false); // the backend refuses everything
/// }
/// // (100 − 2·0) / 101 = 0.99, capped at 0.75.
/// assert_eq!(throttle.drop_probability(now), 0.75);
/// // `rand` is the caller's random word: a low one falls under 0.75.
/// assert!(throttle.should_throttle(now, 0).is_err());
/// assert!(throttle.should_throttle(now, u64::MAX).is_ok());
/// ```
///
/// **Randomness.** The caller passes a uniformly random `u64` per decision (so a shared
/// `&self` throttle needs no generator state, and tests replay exactly).
///
/// **Progress.** Wait-free: each call is one `fetch_add` or a few loads; once per bucket
/// (window / 120) one caller folds the counts into the window (plain arithmetic over at most
/// 120 buckets); others never wait for it.
///
/// **Cost.** `record`: one load, one `fetch_add`. `should_throttle`: four loads, a few
/// float operations. Size: about 1 KiB (the ring).
///
/// **Precision.** Counts are folded per bucket, so a sample counts for `window` give or take
/// one bucket; under contention at a bucket boundary a sample can land in the neighbouring
/// bucket.
///
/// **Time.** A `now` older than the current bucket counts in the current bucket. A `now`
/// above [`MAX_NOW`](crate::time::MAX_NOW) is bad input: the call acts at the latest time
/// seen (no bucket is folded for it).
#[derive(Debug)]
pub struct AdaptiveThrottle {
    config: AdaptiveThrottleConfig,
    width: u64,
    clock: AtomicMonotonic,
    pending: AtomicU64,
    next_fold: AtomicU64,
    /// Published window totals: integers (ring) or f64 bits (EMA).
    requests: AtomicU64,
    accepts: AtomicU64,
    throttled: AtomicU64,
    state: Exclusive<FoldState>,
}

/// A snapshot of an [`AdaptiveThrottle`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdaptiveThrottleMetrics {
    /// Requests in the window (decayed in the EMA form), local refusals included.
    pub requests: f64,
    /// Accepted requests in the window (decayed in the EMA form).
    pub accepts: f64,
    /// The current local drop probability.
    pub drop_probability: f64,
    /// Requests refused locally, ever.
    pub throttled: u64,
}

impl AdaptiveThrottle {
    /// A throttle with `config`, or why the config cannot be used.
    pub fn new(config: AdaptiveThrottleConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let zero = match config.form {
            ThrottleForm::Ring => 0,
            ThrottleForm::Ema => 0f64.to_bits(),
        };
        Ok(Self {
            config,
            width: config.window / THROTTLE_BUCKETS as u64,
            clock: AtomicMonotonic::new(),
            pending: AtomicU64::new(0),
            next_fold: AtomicU64::new(0),
            requests: AtomicU64::new(zero),
            accepts: AtomicU64::new(zero),
            throttled: AtomicU64::new(0),
            state: Exclusive::new(FoldState {
                started: false,
                epoch: 0,
                last_fold: 0,
                ring: [(0, 0); THROTTLE_BUCKETS],
                requests: 0,
                accepts: 0,
                ema_requests: 0.0,
                ema_accepts: 0.0,
            }),
        })
    }

    /// The config this throttle was built from.
    pub fn config(&self) -> AdaptiveThrottleConfig {
        self.config
    }

    /// Records a request that was sent: `accepted` is whether the backend took it.
    pub fn record(&self, now: u64, accepted: bool) {
        let now = self.clock.in_range_or_latest(now);
        self.fold_if_due(now);
        let add = PENDING_REQUEST + if accepted { PENDING_ACCEPT } else { 0 };
        self.pending.fetch_add(add, Ordering::Relaxed);
    }

    /// Decides whether to refuse a request locally. `rand` is a uniformly random `u64`
    /// from the caller; the request is refused iff `rand / 2^64 < p`. A refusal is counted
    /// as a request (not accepted) and says [`Reason::Throttled`], with a `retry_after` of
    /// the time to the next bucket (when the estimate next changes).
    pub fn should_throttle(&self, now: u64, rand: u64) -> Result<(), Rejected> {
        let now = self.clock.in_range_or_latest(now);
        self.fold_if_due(now);
        let p = self.probability();
        let u = (rand >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        if u < p {
            self.pending.fetch_add(PENDING_REQUEST, Ordering::Relaxed);
            self.throttled.fetch_add(1, Ordering::Relaxed);
            Err(Rejected::new(Reason::Throttled, self.width - now % self.width))
        } else {
            Ok(())
        }
    }

    /// The current local drop probability (after folding up to `now`).
    pub fn drop_probability(&self, now: u64) -> f64 {
        let now = self.clock.in_range_or_latest(now);
        self.fold_if_due(now);
        self.probability()
    }

    /// A snapshot (as of the last call's time).
    pub fn metrics(&self) -> AdaptiveThrottleMetrics {
        let (requests, accepts) = self.counts();
        AdaptiveThrottleMetrics {
            requests,
            accepts,
            drop_probability: self.probability_of(requests, accepts),
            throttled: self.throttled.load(Ordering::Relaxed),
        }
    }

    fn counts(&self) -> (f64, f64) {
        let pending = self.pending.load(Ordering::Relaxed);
        let (pr, pa) = ((pending & PENDING_HALF_MASK) as f64, (pending >> 32) as f64);
        let (r, a) = (self.requests.load(Ordering::Relaxed), self.accepts.load(Ordering::Relaxed));
        match self.config.form {
            ThrottleForm::Ring => (r as f64 + pr, a as f64 + pa),
            ThrottleForm::Ema => (f64::from_bits(r) + pr, f64::from_bits(a) + pa),
        }
    }

    fn probability(&self) -> f64 {
        let (r, a) = self.counts();
        self.probability_of(r, a)
    }

    fn probability_of(&self, requests: f64, accepts: f64) -> f64 {
        // SRE book ch. 21: max(0, (requests − K·accepts) / (requests + 1)), then the cap.
        let p = (requests - self.config.k * accepts) / (requests + 1.0);
        p.max(0.0).min(self.config.max_drop_probability)
    }

    fn fold_if_due(&self, now: u64) {
        // Acquire: pairs with the Release store at the end of `fold` (the published totals
        // are then at least that fold's).
        if now >= self.next_fold.load(Ordering::Acquire) {
            let _ = self.state.try_with(|s| self.fold(s, now));
        }
    }

    fn fold(&self, s: &mut FoldState, now: u64) {
        let epoch = now / self.width;
        if !s.started {
            s.started = true;
            s.epoch = epoch;
            s.last_fold = now;
        }
        // Acquire: the folded counts come from increments made before the swap.
        let pending = self.pending.swap(0, Ordering::Acquire);
        let (r, a) = (pending & PENDING_HALF_MASK, pending >> 32);
        match self.config.form {
            ThrottleForm::Ring => {
                let n = THROTTLE_BUCKETS as u64;
                let bucket = &mut s.ring[(s.epoch % n) as usize];
                bucket.0 = bucket.0.saturating_add(r as u32);
                bucket.1 = bucket.1.saturating_add(a as u32);
                s.requests += r;
                s.accepts += a;
                if epoch > s.epoch && epoch >= n {
                    let last_expired = (epoch - n).min(s.epoch);
                    let mut e = s.epoch.saturating_sub(n - 1);
                    while e <= last_expired {
                        let b = &mut s.ring[(e % n) as usize];
                        s.requests -= b.0 as u64;
                        s.accepts -= b.1 as u64;
                        *b = (0, 0);
                        e += 1;
                    }
                }
                self.requests.store(s.requests, Ordering::Relaxed);
                self.accepts.store(s.accepts, Ordering::Relaxed);
            }
            ThrottleForm::Ema => {
                let t = now.max(s.last_fold);
                let decay = libm::exp(-((t - s.last_fold) as f64) / self.config.window as f64);
                s.ema_requests = s.ema_requests * decay + r as f64;
                s.ema_accepts = s.ema_accepts * decay + a as f64;
                s.last_fold = t;
                self.requests.store(s.ema_requests.to_bits(), Ordering::Relaxed);
                self.accepts.store(s.ema_accepts.to_bits(), Ordering::Relaxed);
            }
        }
        s.epoch = s.epoch.max(epoch);
        // Release: pairs with the Acquire load in `fold_if_due`.
        self.next_fold
            .store(s.epoch.saturating_add(1).saturating_mul(self.width), Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn throttle(form: ThrottleForm, cap: f64) -> AdaptiveThrottle {
        AdaptiveThrottle::new(AdaptiveThrottleConfig {
            max_drop_probability: cap,
            form,
            ..AdaptiveThrottleConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn sre_formula_exactly_in_the_ring_form() {
        let t = throttle(ThrottleForm::Ring, 1.0);
        let now = 1000 * SEC;
        assert_eq!(t.drop_probability(now), 0.0);
        for i in 0..100 {
            t.record(now, i % 5 == 0); // 20 accepts of 100
        }
        let expected = (100.0 - 2.0 * 20.0) / 101.0;
        assert!((t.drop_probability(now) - expected).abs() < 1e-12);
        // Half accepted is exactly K = 2's break-even: no throttling.
        let t = throttle(ThrottleForm::Ring, 1.0);
        for i in 0..100 {
            t.record(now, i % 2 == 0);
        }
        assert_eq!(t.drop_probability(now), 0.0);
    }

    #[test]
    fn the_cap_keeps_some_traffic_flowing() {
        for form in [ThrottleForm::Ring, ThrottleForm::Ema] {
            let t = throttle(form, 0.75);
            let now = 7 * SEC;
            for _ in 0..10_000 {
                t.record(now, false);
            }
            assert_eq!(t.drop_probability(now), 0.75);
            // rand just above 0.75 · 2^64 passes, just below is refused.
            let edge = (0.75 * (1u64 << 53) as f64) as u64;
            assert!(t.should_throttle(now, (edge + 1) << 11).is_ok());
            assert!(t.should_throttle(now, (edge - 1) << 11).is_err());
        }
    }

    #[test]
    fn local_refusals_count_as_requests() {
        let t = throttle(ThrottleForm::Ring, 1.0);
        let now = 3 * SEC;
        for _ in 0..10 {
            t.record(now, false);
        }
        let refused = t.should_throttle(now, 0).unwrap_err();
        assert_eq!(refused.reason, Reason::Throttled);
        assert_eq!(refused.retry_after, SEC);
        let m = t.metrics();
        assert_eq!((m.requests, m.accepts, m.throttled), (11.0, 0.0, 1));
        assert!((m.drop_probability - 11.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn ring_forgets_after_the_window() {
        let t = throttle(ThrottleForm::Ring, 1.0);
        let t0 = 500 * SEC;
        for _ in 0..50 {
            t.record(t0, false);
        }
        for _ in 0..50 {
            t.record(t0 + 60 * SEC, false);
        }
        assert_eq!(t.metrics().requests, 100.0);
        // The first 50 leave once their bucket is 120 buckets old.
        assert!(t.drop_probability(t0 + 120 * SEC) > 0.0);
        assert_eq!(t.metrics().requests, 50.0);
        assert_eq!(t.drop_probability(t0 + 181 * SEC), 0.0);
        assert_eq!(t.metrics().requests, 0.0);
        // Healthy again: accepted traffic drives p to 0.
        for _ in 0..10 {
            t.record(t0 + 200 * SEC, true);
        }
        assert_eq!(t.drop_probability(t0 + 200 * SEC), 0.0);
    }

    #[test]
    fn ema_decays_with_the_window_as_time_constant() {
        let t = throttle(ThrottleForm::Ema, 1.0);
        let t0 = 10 * SEC;
        for _ in 0..1000 {
            t.record(t0, false);
        }
        t.drop_probability(t0 + SEC);
        assert_eq!(t.metrics().requests, 1000.0);
        t.drop_probability(t0 + SEC + 120 * SEC);
        let r = t.metrics().requests;
        assert!((r - 1000.0 / core::f64::consts::E).abs() < 1e-6, "{r}");
    }

    #[test]
    fn ema_matches_finagle_for_heavy_traffic() {
        // Finagle NackAdmissionFilter: p = 1 − 2·(accept rate) for rate < 0.5.
        let t = throttle(ThrottleForm::Ema, 1.0);
        let mut now = 100 * SEC;
        for _ in 0..600 {
            for i in 0..100 {
                t.record(now, i % 10 < 3); // 30 % accepted
            }
            now += SEC;
        }
        let p = t.drop_probability(now);
        assert!((p - 0.4).abs() < 0.01, "{p}");
    }

    #[test]
    fn bad_configs_are_refused() {
        let ok = AdaptiveThrottleConfig::default();
        for bad in [
            AdaptiveThrottleConfig { k: 0.9, ..ok },
            AdaptiveThrottleConfig { k: f64::NAN, ..ok },
            AdaptiveThrottleConfig { max_drop_probability: 1.01, ..ok },
            AdaptiveThrottleConfig { max_drop_probability: -0.1, ..ok },
            AdaptiveThrottleConfig { window: SEC - 1, ..ok },
            AdaptiveThrottleConfig { window: 3601 * SEC, ..ok },
        ] {
            assert!(AdaptiveThrottle::new(bad).is_err(), "{bad:?}");
        }
    }
}
