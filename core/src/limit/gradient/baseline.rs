//! The probe-free baseline (state machine step 4): the uncongested sample RTT every
//! window is compared with, and the windows' typical log-spread that sets the noise of
//! each comparison.

use super::flat::Point;
use super::*;

// Probe-free baseline (our design; constants tuned in convergence.rs).
// The baseline is a sample-weighted mean of up to this many samples from windows that are
// statistically indistinguishable from it, then freezes (so windows with a small queue cannot
// ratchet it up).
pub(super) const BASELINE_SAMPLES: f64 = 2000.0;
// One-sigma error of a histogram quantile (stats: bucket error <= 3.1%).
pub(super) const QUANTILE_SE: f64 = 0.02;
// A window whose drops exceed 1/DROP_SHARE_DIVISOR of its outcomes never lowers the baseline:
// a burst of fast rejections must not poison it.
pub(super) const DROP_SHARE_DIVISOR: u64 = 10;
// Memory, in samples, of the windows' typical log-spread.
pub(super) const SIGMA_MEMORY: f64 = 500.0;
// A window that reached the limit only at a burst, its mean in-flight (Little's law, drop-free
// windows only) below this share of the whole permits, holds no standing queue of ours: a
// limit that binds by design keeps in-flight at the limit all window long.
pub(super) const QUEUE_FILL: f64 = 0.85;

/// The baseline `B` and what its comparisons need.
///
/// Invariants: `value` is 0 before the first measurement (probe-free and probe mode) and
/// positive after; pinned, it never changes. `weight` is the number of samples `value` was
/// learned from (it stops growing at `BASELINE_SAMPLES`, where the estimate freezes).
/// `sigma` is a moving average (over ~`SIGMA_MEMORY` samples) of the log-spread of windows
/// of at least `MIN_SAMPLES` samples. `below_run` / `above_run` count consecutive windows
/// clearly below the baseline / clearly above it with one request in flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Baseline {
    pub(super) value: f64,
    pub(super) weight: f64,
    /// Moving average of the windows' log-spread.
    pub(super) sigma: f32,
    /// Consecutive windows clearly below the baseline.
    pub(super) below_run: u8,
    /// Consecutive windows with one request in flight clearly above the baseline.
    pub(super) above_run: u8,
}

impl Baseline {
    /// `pinned_ns` is the configured fixed baseline (0: none, learned).
    pub(super) fn new(pinned_ns: u64) -> Self {
        Self { value: pinned_ns as f64, weight: 0.0, sigma: 0.0, below_run: 0, above_run: 0 }
    }
}

impl Gradient {
    /// Probe-free: folds one window's statistic into the baseline (state machine step 4).
    /// `allowance` is the drop share the window may carry and still count as answers.
    pub(super) fn track_baseline(
        &mut self,
        now: u64,
        dur: u64,
        w: &Window,
        stat: f64,
        allowance: f64,
    ) {
        if self.dn.from > 0.0 {
            // A downward probe is under way: its verdict is the test (the flat test and the
            // speed-up rule would read its transition windows).
            return;
        }
        let total = w.samples as u64 + w.drops as u64;
        // Up to the intrinsic share (drops found not to respond to back-off), drops are the
        // dependency's tail, not fast rejections.
        let mostly_answers = w.drops as u64 * DROP_SHARE_DIVISOR <= total
            || (self.intr.share > 0.0 && w.drops as f64 <= allowance * total as f64);
        let n = w.samples as f64;
        // The window's own spread, but never below the recent typical one: a small window
        // often shows a narrow p50..p90 by chance.
        let own = log_spread(w);
        if w.samples >= MIN_SAMPLES {
            let s = self.base.sigma as f64;
            self.base.sigma = (s + (own - s) * n / (n + SIGMA_MEMORY)) as f32;
        }
        let sigma = own.max(self.base.sigma as f64);
        let bound = !self.ss.on && w.max_inflight as f64 + 1.0 > self.limit;
        // One request in flight cannot queue behind another of ours: such a window shows
        // the dependency's own latency, whatever the limit.
        let alone = w.max_inflight <= 1;
        // A bound window whose mean in-flight stayed well below the whole permits reached
        // the limit only in a burst (a long tail at a modest load), not with a standing queue:
        // it may refine the baseline too, or a baseline learned a little low would read
        // every such window as congested and sink the limit below what the dependency serves.
        let mean_inflight =
            if dur > 0 && w.drops == 0 { n * w.avg_ns as f64 / dur as f64 } else { f64::MAX };
        let queued = bound
            && w.max_inflight as f32 > self.intr.flat_upto
            && !alone
            && mean_inflight >= QUEUE_FILL * libm::floor(self.limit);
        if self.base.value <= 0.0 {
            self.base.value = stat;
            self.base.weight = n;
            if !self.ss.warm_checked {
                self.ss.warm_checked = true;
                self.ss.warm_inflight = w.max_inflight as f32;
                self.ss.warm_mean = mean_inflight as f32;
            }
        } else if mostly_answers {
            // Compare in log space: the window's median and the baseline each have a
            // standard error 1.25·σ/√n, plus the histogram's quantile error. Clearly below
            // takes two windows in a row (three while drops are intrinsic: the answers are
            // a censored, long-tailed sample), or one beyond 4 SE: a real speed-up is large,
            // a lone small window of a long-tailed dependency is often 2 SE low.
            let se_w = 1.2533 * sigma / libm::sqrt(n.max(1.0));
            let se_b = 1.2533 * sigma / libm::sqrt(self.base.weight.max(1.0));
            let se = libm::sqrt(se_w * se_w + se_b * se_b + 2.0 * QUANTILE_SE * QUANTILE_SE);
            let diff = libm::log(stat / self.base.value);
            let below = diff < -2.0 * se;
            self.base.below_run = if below { self.base.below_run.saturating_add(1) } else { 0 };
            // Clearly above with a single request in flight: no queue of ours can explain
            // it, so the baseline is stale or was learned low (a small first window of a
            // long-tailed dependency). Two such windows in a row restart it; otherwise a
            // limit at its floor would read every window as congested and never leave.
            let above_alone = alone && diff > 2.0 * se;
            self.base.above_run =
                if above_alone { self.base.above_run.saturating_add(1) } else { 0 };
            let run = if self.intr.share > 0.0 { 3 } else { 2 };
            if below && (self.base.below_run >= run || diff < -4.0 * se) {
                self.base.below_run = 0;
                // Clearly below: the dependency got faster. Queueing only adds latency, so
                // this window is the better estimate; start over from it. If our limit was
                // binding, this window still holds our queue: cut the limit by the speed-up
                // so the next windows see the uncongested latency, and slow-start back.
                // What was learned about the old dependency's drops no longer applies.
                // Back at the latency it had before the incident (the limit to come back to
                // was learned then), the baseline of that time is the better estimate: one
                // window right after a change is a poor one.
                let before = self.recall.base as f64;
                let se_r = libm::sqrt(se_w * se_w + 2.0 * QUANTILE_SE * QUANTILE_SE);
                let back = self.recall.limit > 0.0
                    && before > 0.0
                    && libm::fabs(libm::log(stat / before)) <= 2.0 * se_r;
                self.base.value = if back { before } else { stat };
                self.base.weight = n;
                self.forget_drops();
                self.clear_history();
                if bound {
                    self.remember(self.limit, self.base.value);
                    self.recall.cut_to = (self.limit * libm::exp(diff)) as f32;
                }
            } else if above_alone && self.base.above_run >= 2 {
                self.base.above_run = 0;
                self.base.value = stat;
                self.base.weight = n;
                self.clear_history();
                self.m.rebaselines += 1;
            } else if !below && diff <= 2.0 * se && self.base.weight < BASELINE_SAMPLES && !queued {
                // Indistinguishable, and no queue of our making (slow start, the limit was
                // not reached, or in-flight stayed where a hold found latency flat): a
                // sample-weighted mean refines it. At a binding limit the controller keeps a
                // standing queue by design, so those windows never count; once
                // BASELINE_SAMPLES are in, the estimate freezes.
                self.base.value += (stat - self.base.value) * n / (self.base.weight + n);
                self.base.weight += n;
                if self.ss.warm_inflight > 0.0 {
                    self.ss.warm_inflight = self.ss.warm_inflight.min(w.max_inflight as f32);
                    self.ss.warm_mean = self.ss.warm_mean.min(mean_inflight as f32);
                }
            }
        }
        if w.samples >= MIN_SAMPLES && dur > 0 {
            let inflight = n * w.avg_ns as f64 / dur as f64;
            let se = median_se(sigma, n);
            let here = Point {
                at: stamp(now),
                inflight: inflight as f32,
                stat: stat as f32,
                se: se as f32,
                weight: n as f32,
            };
            self.flat_test(here);
        }
    }

    /// A probe's verdict: the baseline becomes `base`, learned from `weight` samples.
    pub(super) fn rebase(&mut self, base: f64, weight: f64) {
        self.base.value = base;
        self.base.weight = weight;
        self.clear_history();
        self.m.rebaselines += 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_plant::*;
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn the_baseline_survives_a_long_quiet_period() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        // Ten quiet minutes: no windows at all. The dependency is now 3x slower.
        p.now += 600 * SEC;
        p.service_ms = 30.0;
        p.run(&mut g, 100);
        let l = g.limit();
        let b = g.baseline_ns() as f64 / MS as f64;
        assert!((16.0..=equilibrium_high(16.0)).contains(&l), "{l} (baseline {b} ms)");
        assert!((29.0..=33.0).contains(&b), "baseline {b} ms");
    }

    #[test]
    fn a_faster_dependency_lowers_the_baseline_at_once() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 20.0);
        p.run(&mut g, 100);
        p.service_ms = 10.0;
        p.run(&mut g, 30);
        let b = g.baseline_ns() as f64 / MS as f64;
        assert!((9.5..=11.0).contains(&b), "baseline {b} ms");
        // The median of the next 10 windows (a downward probe is a short transient).
        let mut next: Vec<f64> = (0..10).map(|_| p.run(&mut g, 1)).collect();
        next.sort_by(f64::total_cmp);
        let l = next[5];
        assert!((16.0..=equilibrium_high(16.0)).contains(&l), "{l}");
    }

    #[test]
    fn fast_rejections_do_not_poison_the_baseline() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        let before = g.baseline_ns();
        // A window where half the outcomes are fast rejections and the few answers are fast.
        let mut w = p.window(g.limit());
        w.p50_ns = MS;
        w.p90_ns = 2 * MS;
        w.drops = w.samples;
        let cfg = GradientConfig { drop_tolerance: 0.6, ..GradientConfig::default() };
        let mut tolerant = Gradient::new(cfg).unwrap();
        p.now = 0;
        p.run(&mut tolerant, 100);
        let tolerant_before = tolerant.baseline_ns();
        w.now = p.now + 100 * MS;
        tolerant.update(&w);
        assert_eq!(tolerant.baseline_ns(), tolerant_before);
        // With the default tolerance the drops back the limit off instead.
        let l = g.limit();
        w.now = p.now + 100 * MS;
        assert!(g.update(&w) < l);
        assert_eq!(g.baseline_ns(), before);
    }
}
