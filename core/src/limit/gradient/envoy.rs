//! Envoy's min-RTT probe (probe mode, state machine step 1): the limit is pinned low
//! while the baseline is measured, then restored; the next probe is jittered.

use super::*;
use crate::rng::SplitMix64;

// Envoy PR #10647: re-measure minRTT after 5 consecutive windows at the floor.
pub(super) const FLOOR_WINDOWS_BEFORE_PROBE: u32 = 5;

/// An Envoy min-RTT measurement under way.
#[derive(Clone, Copy, Debug)]
pub(super) struct Probe {
    pub(super) deferred_limit: f64,
    pub(super) skip_windows: u32,
    pub(super) samples: u64,
    pub(super) weighted_sum: f64,
}

/// Probe mode's state.
///
/// Invariants: `probe` is `Some` exactly while a measurement is under way (the limit is
/// then pinned at `min(limit, probe_limit)` and restored to its `deferred_limit` after
/// `probe_samples` samples). `next_at` is when the next probe starts; `floor_windows`
/// counts consecutive windows at the floor; `rng` draws the jitter (seeded, so a run
/// replays). Unused outside probe mode.
#[derive(Clone, Debug)]
pub(super) struct MinRtt {
    pub(super) probe: Option<Probe>,
    pub(super) next_at: u64,
    pub(super) floor_windows: u32,
    pub(super) rng: SplitMix64,
}

impl MinRtt {
    pub(super) fn new(seed: u64) -> Self {
        Self { probe: None, next_at: 0, floor_windows: 0, rng: SplitMix64::new(seed) }
    }
}

impl Gradient {
    pub(super) fn start_probe(&mut self, skip_windows: u32) {
        self.envoy.probe =
            Some(Probe { deferred_limit: self.limit, skip_windows, samples: 0, weighted_sum: 0.0 });
        self.envoy.floor_windows = 0;
        self.limit = self.clamp(self.limit.min(self.cfg.probe_limit));
    }

    pub(super) fn schedule_probe(&mut self, now: u64) {
        let interval = self.cfg.probe_interval_ns;
        // Envoy: interval + random % ceil(interval · jitter).
        let span = libm::ceil(interval as f64 * self.cfg.probe_jitter) as u64;
        let jitter = if span > 0 { self.envoy.rng.below(span) } else { 0 };
        self.envoy.next_at = now.saturating_add(interval).saturating_add(jitter);
    }

    /// Probe mode: folds one window into the measurement. True while still probing.
    pub(super) fn fold_probe(&mut self, now: u64, w: &Window) -> bool {
        let Some(mut p) = self.envoy.probe else { return false };
        if p.skip_windows > 0 {
            p.skip_windows -= 1;
        } else if w.samples > 0 {
            p.samples += w.samples as u64;
            p.weighted_sum += self.stat(w) * w.samples as f64;
        }
        if p.samples >= self.cfg.probe_samples as u64 {
            self.base.value = p.weighted_sum / p.samples as f64;
            self.limit = p.deferred_limit;
            self.envoy.probe = None;
            self.m.probes += 1;
            self.schedule_probe(now);
            false
        } else {
            self.envoy.probe = Some(p);
            true
        }
    }

    /// Probe mode, after each window: a probe starts after `FLOOR_WINDOWS_BEFORE_PROBE`
    /// consecutive windows at the floor (Envoy PR #10647) or when one is due.
    pub(super) fn after_window(&mut self, now: u64) {
        if self.limit <= self.cfg.min_limit {
            self.envoy.floor_windows += 1;
        } else {
            self.envoy.floor_windows = 0;
        }
        if self.envoy.floor_windows >= FLOOR_WINDOWS_BEFORE_PROBE || now >= self.envoy.next_at {
            self.start_probe(1);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_plant::*;
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn envoy_probe_pins_measures_and_restores() {
        let cfg = GradientConfig { initial_limit: 40.0, ..GradientConfig::envoy(SEC) };
        let mut g = Gradient::new(cfg).unwrap();
        // Starts inside a probe, pinned at min_concurrency.
        assert!(g.metrics().probing);
        assert_eq!(g.limit(), 3.0);
        let mut p = overloaded(16.0, 10.0);
        // 3 in flight → 30 samples per window: two windows end the 50-sample probe.
        p.run(&mut g, 2);
        assert!(!g.metrics().probing);
        assert_eq!(g.metrics().probes, 1);
        assert_eq!(g.baseline_ns(), 10 * MS);
        assert!(g.limit() > 40.0, "restored then grown: {}", g.limit());
        // Runs freely until the jittered interval: [1 s, 1.15 s) after the probe ended.
        let ended = p.now;
        let mut started = 0;
        for _ in 0..20 {
            p.run(&mut g, 1);
            if g.metrics().probing {
                started = p.now;
                break;
            }
        }
        assert!(started >= ended + SEC && started < ended + SEC + 150 * MS + 100 * MS);
        assert_eq!(g.limit(), 3.0);
        // The first window after the pin is discarded, then 50 samples end it.
        p.run(&mut g, 1);
        assert!(g.metrics().probing);
        p.run(&mut g, 2);
        assert!(!g.metrics().probing);
        assert_eq!(g.metrics().probes, 2);
    }

    #[test]
    fn envoy_stale_baseline_settles_near_its_fixed_point() {
        // The Envoy failure mode the probe-free mode fixes: after a slowdown the stale
        // minRTT holds the limit near g = 0.625's fixed point (~4-5) until the next probe.
        let mut g = Gradient::new(GradientConfig::envoy(3600 * SEC)).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        p.service_ms = 20.0;
        let l = p.run(&mut g, 50);
        assert!((3.0..=6.0).contains(&l), "{l}");
    }

    #[test]
    fn envoy_reprobes_after_five_windows_at_the_floor() {
        // g >= 0.5 has a fixed point of 4, so the floor is reached only when it is above 4
        // (Envoy #38338: a high min_concurrency).
        let cfg = GradientConfig {
            min_limit: 6.0,
            initial_limit: 6.0,
            ..GradientConfig::envoy(3600 * SEC)
        };
        let mut g = Gradient::new(cfg).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 20);
        assert_eq!(g.metrics().probes, 1);
        p.service_ms = 100.0; // g = 0.5 every window: the limit sinks to the floor of 3
        p.run(&mut g, 20);
        assert!(g.metrics().probes >= 2);
        assert!(g.baseline_ns() >= 90 * MS);
    }

    #[test]
    fn pinned_baseline_never_moves() {
        let cfg = GradientConfig { pinned_baseline_ns: 10 * MS, ..GradientConfig::default() };
        let mut g = Gradient::new(cfg).unwrap();
        let mut p = overloaded(16.0, 20.0);
        let l = p.run(&mut g, 100);
        assert_eq!(g.baseline_ns(), 10 * MS);
        assert!(l < 16.0, "{l}");
    }
}
