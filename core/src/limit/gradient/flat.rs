//! The flat test (state machine step 4): operating points whose latency ignores
//! concurrency are below the dependency's knee, so a baseline below them is stale. A pair
//! test and a weighted fit over the recent history of points.

use super::*;
use crate::time::SEC;

// Flat test: two operating points whose mean in-flight differs by at least FLAT_SPAN while
// the latency moved by less than span^FLAT_ELASTICITY are below the dependency's knee (a
// queue would have moved latency in proportion to in-flight, elasticity 1).
pub(super) const FLAT_SPAN: f64 = 1.4;
pub(super) const FLAT_ELASTICITY: f64 = 0.2;
pub(super) const FLAT_HISTORY: usize = 8;
// Latency moving faster than concurrency (elasticity above 1) is not our queue's doing: a
// dependency that did not change serves at least as much at a higher concurrency (it is
// work-conserving), so by Little's law our own queue moves latency at most in proportion
// to in-flight. Beyond it the dependency's throughput fell as in-flight rose: it changed.
pub(super) const FLAT_CHANGE: f64 = 1.0;
// The flat test's fit: at least this many history points (the newest window included).
pub(super) const FLAT_FIT_POINTS: usize = 4;
pub(super) const FLAT_HORIZON_NS: u64 = 4 * SEC;
// A window becomes a history point only this long after the previous point, or when its
// in-flight moved by FLAT_STEP (natural log) from it, so the points span distinct operating
// points over seconds and a slow drift is caught as well as a sharp cut.
pub(super) const FLAT_SPACING_NS: u64 = 200 * MS;
pub(super) const FLAT_STEP: f64 = 0.1;

/// One operating point of the flat test: mean in-flight and sample RTT of a window
/// (`f32`: ratios are all the test needs, and the limiter stores the algorithm by value).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Point {
    pub(super) at: u32,
    pub(super) inflight: f32,
    pub(super) stat: f32,
    pub(super) se: f32,
    pub(super) weight: f32,
}

/// The recent operating points, a ring of `FLAT_HISTORY`.
///
/// Invariants: `len <= FLAT_HISTORY`; `next` is where the next point goes, so the newest
/// is at `(next + FLAT_HISTORY - 1) % FLAT_HISTORY` when `len > 0`. Points are at least
/// `FLAT_SPACING_NS` apart or `FLAT_STEP` apart in log in-flight; the whole history is
/// dropped once its newest point is older than `FLAT_HORIZON_NS`, after a longer gap
/// between windows, and whenever the dependency is seen to change (so no stamp wraps).
#[derive(Clone, Copy, Debug)]
pub(super) struct History {
    pub(super) points: [Point; FLAT_HISTORY],
    pub(super) len: u8,
    pub(super) next: u8,
}

impl History {
    pub(super) fn new() -> Self {
        Self { points: [Point::default(); FLAT_HISTORY], len: 0, next: 0 }
    }
}

impl Gradient {
    pub(super) fn clear_history(&mut self) {
        self.flat.len = 0;
        self.flat.next = 0;
    }

    /// Compares `here` with the recent operating points; raises a stale baseline.
    pub(super) fn flat_test(&mut self, here: Point) {
        let len = self.flat.len as usize;
        // A point whose latency differs from `here` by more than our own queue could explain
        // (elasticity above FLAT_CHANGE, or the wrong sign, beyond noise) was taken from a
        // different dependency (it slowed, sped up, lost capacity): forget the history. This
        // window is not kept either: it found the change, so it most likely straddles it
        // (answers from before and after), and would pair as a queue with the windows after.
        let changed = self.flat.points[..len].iter().any(|h| {
            let dn = libm::log(here.inflight.max(1e-9) as f64 / h.inflight.max(1e-9) as f64);
            let ds = libm::log(here.stat as f64 / h.stat as f64);
            let noise = 3.0 * libm::sqrt((here.se * here.se + h.se * h.se) as f64);
            libm::fabs(ds) > FLAT_CHANGE * libm::fabs(dn) + noise || ds * dn < -(noise * noise)
        });
        if changed {
            self.clear_history();
            return;
        }
        for i in 0..self.flat.len as usize {
            let h = self.flat.points[i];
            if elapsed(here.at, h.at) > FLAT_HORIZON_NS {
                continue;
            }
            let (lo, hi) = if h.inflight < here.inflight { (h, here) } else { (here, h) };
            let (lo_n, hi_n) = (lo.inflight as f64, hi.inflight as f64);
            let (lo_s, hi_s) = (lo.stat as f64, hi.stat as f64);
            let (lo_se, hi_se) = (lo.se as f64, hi.se as f64);
            if lo_n <= 0.0 {
                continue;
            }
            let span = hi_n / lo_n;
            // Latency may rise a little with concurrency, never fall beyond noise: a pair
            // whose latency is lower at the higher concurrency straddles a change of the
            // dependency itself, and says nothing about its knee.
            let pair_se = libm::sqrt(lo_se * lo_se + hi_se * hi_se);
            let noise = 1.0 + 2.0 * pair_se;
            // And a queue (latency in proportion to in-flight) is ruled out beyond noise:
            // windows of a few dozen samples each can show a 1.4× queue as flat by chance.
            let flat = span >= FLAT_SPAN
                && hi_s <= lo_s * libm::pow(span, FLAT_ELASTICITY)
                && hi_s <= lo_s * span * libm::exp(-2.0 * pair_se)
                && hi_s * noise >= lo_s;
            let margin = self.cfg.buffer.max(2.0 * lo_se);
            // While drops are intrinsic the answers are censored and long-tailed: a point
            // needs twice the samples to move the baseline.
            let solid = self.intr.share <= 0.0 || lo.weight >= 2.0 * MIN_SAMPLES as f32;
            if flat && solid && lo_s > self.base.value * (1.0 + margin) {
                // Both points are below the knee: their sample-weighted mean (in log space)
                // is the estimate, but never above the lower-concurrency point's.
                let (wl, wh) = (lo.weight as f64, hi.weight as f64);
                let mean = (wl * libm::log(lo_s) + wh * libm::log(hi_s)) / (wl + wh);
                self.base.value = libm::exp(mean).min(lo_s);
                self.base.weight = wl + wh;
                self.recall.resume_at = (hi_n + self.cfg.headroom * headroom(hi_n)) as f32;
                self.m.rebaselines += 1;
                self.clear_history();
                return;
            }
        }
        if self.fit_test(here) {
            return;
        }
        let len = self.flat.len as usize;
        let next = self.flat.next as usize;
        if len > 0 {
            let last = self.flat.points[(next + FLAT_HISTORY - 1) % FLAT_HISTORY];
            let moved = libm::fabs(libm::log(
                (here.inflight as f64).max(1e-9) / (last.inflight as f64).max(1e-9),
            ));
            if elapsed(here.at, last.at) < FLAT_SPACING_NS && moved < FLAT_STEP {
                return;
            }
        }
        self.flat.points[next] = here;
        self.flat.next = ((next + 1) % FLAT_HISTORY) as u8;
        self.flat.len = (len + 1).min(FLAT_HISTORY) as u8;
    }

    /// The flat test over all the recent points at once: a line fitted to `log S` against
    /// `log N` (weighted least squares, each point weighted by its median's `1/SE²`)
    /// through the history within the horizon and `here`. A pair of windows of a few dozen
    /// samples each of a broad latency distribution can rarely rule out a queue (a median's
    /// SE is then about 20%), so after a slowdown the limit kept sinking for seconds while
    /// pairs read as neither flat nor a queue; the fit pools the evidence of every point of
    /// the cut. Flat when the slope is below 1 (a queue) by 2 SE, above 0 (the wrong sign)
    /// within 2 SE and within 2 SE of `FLAT_ELASTICITY`, over an in-flight span of at least
    /// `FLAT_SPAN`. Then, as for a flat pair, a fitted latency at the lowest in-flight
    /// significantly above `B` becomes the baseline (at most the fit's weighted mean), and
    /// the limit resumes at the highest in-flight plus headroom. True if it rebased.
    pub(super) fn fit_test(&mut self, here: Point) -> bool {
        let mut pts = [Point::default(); FLAT_HISTORY + 1];
        let mut k = 0;
        for h in self.flat.points[..self.flat.len as usize].iter() {
            if elapsed(here.at, h.at) <= FLAT_HORIZON_NS && h.inflight > 0.0 {
                pts[k] = *h;
                k += 1;
            }
        }
        pts[k] = here;
        k += 1;
        let pts = &pts[..k];
        if k < FLAT_FIT_POINTS {
            return false;
        }
        let weight = |p: &Point| {
            let se = (p.se as f64).max(1e-3);
            1.0 / (se * se)
        };
        let x = |p: &Point| libm::log((p.inflight as f64).max(1e-9));
        let y = |p: &Point| libm::log(p.stat as f64);
        let (mut sw, mut sx, mut sy) = (0.0, 0.0, 0.0);
        let (mut n_lo, mut n_hi) = (f64::MAX, 0.0f64);
        for p in pts {
            let w = weight(p);
            sw += w;
            sx += w * x(p);
            sy += w * y(p);
            n_lo = n_lo.min(p.inflight as f64);
            n_hi = n_hi.max(p.inflight as f64);
        }
        if n_lo <= 0.0 || n_hi / n_lo < FLAT_SPAN {
            return false;
        }
        let (xm, ym) = (sx / sw, sy / sw);
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for p in pts {
            let dx = x(p) - xm;
            sxx += weight(p) * dx * dx;
            sxy += weight(p) * dx * (y(p) - ym);
        }
        if sxx <= 0.0 {
            return false;
        }
        let slope = sxy / sxx;
        let slope_se = 1.0 / libm::sqrt(sxx);
        let flat = slope + 2.0 * slope_se < 1.0
            && slope + 2.0 * slope_se > 0.0
            && slope - 2.0 * slope_se < FLAT_ELASTICITY;
        // The fitted latency at the lowest in-flight and its standard error.
        let d_lo = libm::log(n_lo) - xm;
        let lo_s = libm::exp(ym + slope * d_lo);
        let lo_se = libm::sqrt(1.0 / sw + d_lo * d_lo * slope_se * slope_se);
        let margin = self.cfg.buffer.max(2.0 * lo_se);
        if !flat || lo_s <= self.base.value * (1.0 + margin) {
            return false;
        }
        self.base.value = libm::exp(ym).min(lo_s);
        self.base.weight = pts.iter().map(|p| p.weight as f64).sum();
        self.recall.resume_at = (n_hi + self.cfg.headroom * headroom(n_hi)) as f32;
        self.m.rebaselines += 1;
        self.clear_history();
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_plant::*;
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn a_slower_dependency_is_relearned_without_a_probe() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        let before = p.run(&mut g, 200);
        p.service_ms = 20.0;
        let mut lowest = f64::MAX;
        for _ in 0..100 {
            lowest = lowest.min(p.run(&mut g, 1));
        }
        let after = g.limit();
        // It cut below the knee for a moment, learned the new baseline, and came back.
        assert!(lowest < 16.0, "{lowest}");
        assert!(lowest > 5.0, "{lowest}");
        assert!((after - before).abs() < 3.0, "{before} -> {after}");
        assert!((16.0..=equilibrium_high(16.0)).contains(&after), "{after}");
        let b = g.baseline_ns() as f64 / MS as f64;
        assert!((19.0..=22.0).contains(&b), "baseline {b} ms");
        assert!(g.metrics().rebaselines >= 1);
    }

    #[test]
    fn the_flat_test_needs_a_queue_ruled_out_beyond_noise() {
        // Two small, noisy windows (a dozen samples, σ ≈ 0.86: each median ±30%) at 10 and
        // 14 in flight with the same median of 20 ms. Flat, or a 1.4× queue read low by
        // chance? The pair cannot tell: the baseline stays.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        g.clear_history();
        let before = g.baseline_ns();
        let at = stamp(p.now);
        let point = |n: f32, weight: f32| Point {
            at,
            inflight: n,
            stat: (20 * MS) as f32,
            se: median_se(0.86, weight as f64) as f32,
            weight,
        };
        g.flat_test(point(10.0, 12.0));
        g.flat_test(point(14.0, 12.0));
        assert_eq!(g.baseline_ns(), before, "{:?}", g.metrics());
        // The same pair from windows of 300 samples each is flat beyond noise.
        g.clear_history();
        g.flat_test(point(10.0, 300.0));
        g.flat_test(point(14.0, 300.0));
        let after = g.baseline_ns() as f64 / MS as f64;
        assert!((19.5..=20.5).contains(&after), "baseline {after} ms");
    }
}
