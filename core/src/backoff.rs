//! Exponential backoff with jitter that never retries sooner than the server said.
//!
//! Without jitter, everything that failed at the same moment retries at the same moment,
//! and the retry burst is sharper than the traffic that caused the problem (AWS
//! Architecture Blog, "Exponential Backoff And Jitter"). Formulas: gRPC A6
//! (`random(0, min(initial·multiplier^(n−1), max))`, `grpc/proposal`
//! A6-client-retries.md) and that post's full / equal / decorrelated jitter family.

use crate::rng::SplitMix64;
use crate::time::{MS, SEC};
use crate::types::check_range;
use crate::ConfigError;

/// How a delay is randomised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Jitter {
    /// No randomness: exactly `min(cap, base·multiplier^(n−1))`. Synchronises a fleet;
    /// use only in tests.
    None,
    /// Uniform in `[0, ceiling]` (gRPC A6's form): the widest spread.
    #[default]
    Full,
    /// `ceiling/2` plus uniform in `[0, ceiling/2]`: never less than half the ceiling.
    Equal,
    /// `min(cap, uniform[base, 3 × previous delay])`: each delay grows from the last one
    /// rather than from the attempt number.
    Decorrelated,
}

/// Settings of a [`Backoff`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First delay ceiling, ns. In `[1 µs, 1 day]`.
    pub base: u64,
    /// Growth per attempt. In `[1, 100]`.
    pub multiplier: f64,
    /// Largest delay this backoff chooses by itself, ns (a server's hint can exceed it).
    /// At least `base`, at most 1 day.
    pub cap: u64,
    /// The randomisation.
    pub jitter: Jitter,
}

impl Default for BackoffConfig {
    /// gRPC A6's example: initial 0.1 s, ×2, max 1 s, full jitter.
    fn default() -> Self {
        Self { base: 100 * MS, multiplier: 2.0, cap: SEC, jitter: Jitter::Full }
    }
}

const MAX_DELAY: u64 = 86_400 * SEC;

impl BackoffConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.base < 1_000 || self.base > MAX_DELAY {
            return Err(ConfigError::out_of_range("backoff.base"));
        }
        if self.cap > MAX_DELAY {
            return Err(ConfigError::out_of_range("backoff.cap"));
        }
        if self.cap < self.base {
            return Err(ConfigError::inconsistent(
                "backoff.cap",
                "must not be below",
                "backoff.base",
            ));
        }
        check_range(self.multiplier, 1.0, 100.0, "backoff.multiplier")?;
        Ok(())
    }
}

/// Delays between the attempts of one retried call: exponential with full, equal or
/// decorrelated [`Jitter`], capped, and never shorter than a server's `Retry-After` /
/// `grpc-retry-pushback-ms`.
///
/// ```
/// use surgeguard_core::backoff::{Backoff, BackoffConfig, Jitter};
/// use surgeguard_core::rng::SplitMix64;
/// use surgeguard_core::time::{MS, SEC};
/// let mut rng = SplitMix64::new(42);
/// let mut backoff = Backoff::new(BackoffConfig::default()).unwrap();
/// let d = backoff.next_delay(3, None, &mut rng);
/// assert!(d <= 400 * MS); // full jitter under 100 ms × 2²
/// // The server said "not before 5 s": the cap does not shorten that.
/// assert_eq!(backoff.next_delay(3, Some(5 * SEC), &mut rng), 5 * SEC);
/// ```
///
/// **Progress.** Not shared: `&mut self`, one per retried call (it remembers the previous
/// delay for decorrelated jitter). The config part is `Copy`.
///
/// **Cost.** A few integer and float operations and one random draw; no atomics.
///
/// **Randomness.** The caller's [`SplitMix64`], seeded from its config, so a run replays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    config: BackoffConfig,
    previous: u64,
}

impl Backoff {
    /// A backoff with `config`, or why the config cannot be used.
    pub fn new(config: BackoffConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { config, previous: config.base })
    }

    /// The config this backoff was built from.
    pub fn config(&self) -> BackoffConfig {
        self.config
    }

    /// Forgets the previous delay (decorrelated jitter starts again from `base`).
    pub fn reset(&mut self) {
        self.previous = self.config.base;
    }

    /// The ceiling before jitter for retry number `attempt` (1 = first retry):
    /// `min(cap, base · multiplier^(attempt−1))`. Attempt 0 is not a retry: it counts as
    /// 1 here, and every binding (C, Python, Node) refuses it as bad input.
    pub fn ceiling(&self, attempt: u32) -> u64 {
        let c = &self.config;
        let exp = attempt.max(1) - 1;
        let d = c.base as f64 * libm::pow(c.multiplier, exp as f64);
        if d >= c.cap as f64 {
            c.cap
        } else {
            d as u64
        }
    }

    /// The delay before retry number `attempt` (1 = first retry; 0 counts as 1, and the
    /// bindings refuse it), ns. Never less than
    /// `retry_after_hint` (the server's `Retry-After` or pushback, ns): the cap bounds
    /// only the delay this backoff picks itself.
    pub fn next_delay(
        &mut self,
        attempt: u32,
        retry_after_hint: Option<u64>,
        rng: &mut SplitMix64,
    ) -> u64 {
        let ceiling = self.ceiling(attempt);
        let delay = match self.config.jitter {
            Jitter::None => ceiling,
            Jitter::Full => rng.below(ceiling + 1),
            Jitter::Equal => ceiling / 2 + rng.below(ceiling - ceiling / 2 + 1),
            Jitter::Decorrelated => {
                if attempt <= 1 {
                    self.previous = self.config.base;
                }
                let lo = self.config.base;
                let hi = self.previous.saturating_mul(3).max(lo);
                let d = (lo + rng.below(hi - lo + 1)).min(self.config.cap);
                self.previous = d;
                d
            }
        };
        delay.max(retry_after_hint.unwrap_or(0))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn backoff(jitter: Jitter) -> Backoff {
        Backoff::new(BackoffConfig { jitter, ..BackoffConfig::default() }).unwrap()
    }

    #[test]
    fn exponential_ceiling_is_capped() {
        let b = backoff(Jitter::None);
        let mut rng = SplitMix64::new(1);
        let mut b2 = b;
        let got: [u64; 6] = core::array::from_fn(|i| b2.next_delay(i as u32 + 1, None, &mut rng));
        assert_eq!(got, [100 * MS, 200 * MS, 400 * MS, 800 * MS, SEC, SEC]);
        assert_eq!(b.ceiling(0), 100 * MS);
        assert_eq!(b.ceiling(u32::MAX), SEC);
    }

    #[test]
    fn jitter_stays_in_its_range_and_spreads() {
        let mut rng = SplitMix64::new(7);
        for (jitter, lo_frac) in [(Jitter::Full, 0.0), (Jitter::Equal, 0.5)] {
            let mut b = backoff(jitter);
            let (mut min, mut max) = (u64::MAX, 0);
            for _ in 0..10_000 {
                let d = b.next_delay(3, None, &mut rng);
                min = min.min(d);
                max = max.max(d);
            }
            let ceiling = 400 * MS;
            assert!(max <= ceiling && max > ceiling * 99 / 100, "{jitter:?} {max}");
            let lo = (ceiling as f64 * lo_frac) as u64;
            assert!(min >= lo && min < lo + ceiling / 100, "{jitter:?} {min}");
        }
    }

    #[test]
    fn decorrelated_grows_from_the_previous_delay() {
        let mut rng = SplitMix64::new(3);
        let mut b = backoff(Jitter::Decorrelated);
        let mut prev = 100 * MS;
        for attempt in 1..50 {
            let d = b.next_delay(attempt, None, &mut rng);
            let hi = if attempt == 1 { 300 * MS } else { (prev * 3).min(SEC) };
            assert!(d >= 100 * MS && d <= hi, "attempt {attempt}: {d}");
            prev = d;
        }
        // A new call (attempt 1) starts from base again.
        assert!(b.next_delay(1, None, &mut rng) <= 300 * MS);
    }

    #[test]
    fn never_sooner_than_the_server_says() {
        let mut rng = SplitMix64::new(9);
        for jitter in [Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
            let mut b = backoff(jitter);
            for attempt in 1..10 {
                let hint = attempt as u64 * 300 * MS;
                assert!(b.next_delay(attempt, Some(hint), &mut rng) >= hint);
            }
            assert_eq!(b.next_delay(9, Some(30 * SEC), &mut rng), 30 * SEC);
        }
    }

    #[test]
    fn same_seed_same_delays() {
        let run = |seed| {
            let mut rng = SplitMix64::new(seed);
            let mut b = backoff(Jitter::Full);
            core::array::from_fn::<u64, 8, _>(|i| b.next_delay(i as u32 + 1, None, &mut rng))
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn bad_configs_are_refused() {
        let ok = BackoffConfig::default();
        for bad in [
            BackoffConfig { base: 0, ..ok },
            BackoffConfig { cap: 50 * MS, ..ok },
            BackoffConfig { cap: MAX_DELAY + 1, ..ok },
            BackoffConfig { multiplier: 0.5, ..ok },
            BackoffConfig { multiplier: f64::NAN, ..ok },
            BackoffConfig { multiplier: f64::INFINITY, ..ok },
        ] {
            assert!(Backoff::new(bad).is_err(), "{bad:?}");
        }
    }
}
