//! Drops that do not respond to back-off (state machine step 2): the back-off episode that
//! tests whether a window's drops are ours, and the intrinsic drop share a hold tolerates.

use super::flat::FLAT_SPAN;
use super::*;

// Drops that do not respond to back-off (our design; constants tuned
// in convergence.rs). A back-off episode pools the windows from where it began until
// in-flight fell by FLAT_SPAN (up to EPISODE_OUTCOMES outcomes), then the windows there,
// without further cuts, until EPISODE_OUTCOMES outcomes over EPISODE_WINDOWS windows (the
// first window after a cut still answers requests admitted before it).
pub(super) const EPISODE_OUTCOMES: f32 = 60.0;
pub(super) const EPISODE_WINDOWS: u8 = 3;
// A dependency that fails most calls whatever our concurrency is down, not slow: no hold.
pub(super) const HOLD_MAX_SHARE: f64 = 0.5;
// Memory, in outcomes, of the intrinsic drop share's moving average.
pub(super) const INTRINSIC_MEMORY: f64 = 200.0;

/// Windows of one operating point of a back-off episode, pooled: the most in flight, the
/// outcomes and drops, and the sample-weighted log statistic.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pool {
    pub(super) inflight: f32,
    pub(super) outcomes: f32,
    pub(super) drops: f32,
    pub(super) samples: f32,
    pub(super) log_stat: f32,
}

impl Pool {
    pub(super) fn of(w: &Window, stat: f64) -> Self {
        let n = w.samples as f32;
        let log_stat = if w.samples > 0 { libm::log(stat) as f32 } else { 0.0 };
        Self {
            inflight: w.max_inflight as f32,
            outcomes: n + w.drops as f32,
            drops: w.drops as f32,
            samples: n,
            log_stat: n * log_stat,
        }
    }

    pub(super) fn add(&mut self, o: &Pool) {
        self.inflight = self.inflight.max(o.inflight);
        self.outcomes += o.outcomes;
        self.drops += o.drops;
        self.samples += o.samples;
        self.log_stat += o.log_stat;
    }

    pub(super) fn share(&self) -> f64 {
        (self.drops / self.outcomes.max(1.0)) as f64
    }

    /// The pooled statistic in log space, and its standard error for log-spread `sigma`.
    pub(super) fn log_median(&self, sigma: f64) -> (f64, f64) {
        let n = self.samples.max(1.0) as f64;
        (self.log_stat as f64 / n, median_se(sigma, n))
    }
}

/// A back-off episode under way: the pooled starting point and the pooled lower point.
///
/// Invariants: `ref_windows == 0` means no episode (then `low_windows` is 0 too and the
/// pools mean nothing); `low_windows > 0` means in-flight fell by `FLAT_SPAN` from the
/// starting point and the lower point is being measured, with no further cuts. `at` is the
/// stamp of when the starting point was set; an episode older than `FLAT_HORIZON_NS` is
/// dropped.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Episode {
    /// Windows pooled on each side of the back-off episode (`reference` empty: none).
    pub(super) ref_windows: u8,
    pub(super) low_windows: u8,
    pub(super) at: u32,
    pub(super) reference: Pool,
    pub(super) low: Pool,
}

/// What a hold learned about the dependency's own drops.
///
/// Invariants: `0 <= share <= cap`; `share == 0` means none known (then no drop allowance
/// beyond `drop_tolerance`). `flat_upto` is the in-flight up to which the last hold found
/// latency and drops flat (0: none). All three are forgotten together when the
/// dependency changes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Intrinsic {
    /// The drop share found intrinsic, and its cap (the share measured at the hold).
    pub(super) share: f32,
    pub(super) cap: f32,
    /// The in-flight up to which the last hold found latency and drops flat (0: none).
    pub(super) flat_upto: f32,
}

impl Gradient {
    /// The drop share a window of `total` outcomes may carry without a back-off: the
    /// configured tolerance, plus the intrinsic share and two binomial standard errors of it.
    pub(super) fn drop_allowance(&self, total: u64) -> f64 {
        let p = self.intr.share as f64;
        if p <= 0.0 {
            return self.cfg.drop_tolerance;
        }
        let sd = libm::sqrt(p * (1.0 - p) / (total.max(1) as f64));
        self.cfg.drop_tolerance + p + 2.0 * sd
    }

    /// Forgets the back-off episode and the intrinsic drop share (the dependency changed).
    pub(super) fn forget_drops(&mut self) {
        self.ep.ref_windows = 0;
        self.ep.low_windows = 0;
        self.intr.share = 0.0;
        self.intr.cap = 0.0;
        self.intr.flat_upto = 0.0;
    }

    /// Probe-free: folds a window into the back-off episode (state machine step 2). `start`:
    /// this window backs off and no episode is under way. True when the episode showed the
    /// drops to be intrinsic, and the controller now holds.
    pub(super) fn fold_episode(&mut self, now: u64, w: &Window, stat: f64, start: bool) -> bool {
        let here = Pool::of(w, stat);
        if self.ep.ref_windows > 0 && elapsed(stamp(now), self.ep.at) > FLAT_HORIZON_NS {
            self.ep.ref_windows = 0; // too old to compare with
        }
        if self.ep.ref_windows == 0 {
            if start {
                self.ep.reference = here;
                self.ep.low = Pool::default();
                self.ep.ref_windows = 1;
                self.ep.low_windows = 0;
                self.ep.at = stamp(now);
            }
            return false;
        }
        if here.inflight * FLAT_SPAN as f32 > self.ep.reference.inflight {
            if self.ep.low_windows > 0 {
                // In-flight rose again before the verdict: the lower side starts afresh
                // (and cuts resume).
                self.ep.low = Pool::default();
                self.ep.low_windows = 0;
            } else if self.ep.reference.outcomes < EPISODE_OUTCOMES {
                // Not fallen yet: more of the starting side.
                self.ep.reference.add(&here);
                self.ep.ref_windows = self.ep.ref_windows.saturating_add(1);
            }
            return false;
        }
        self.ep.low.add(&here);
        self.ep.low_windows = self.ep.low_windows.saturating_add(1);
        let (a, b) = (self.ep.reference, self.ep.low);
        if b.outcomes < EPISODE_OUTCOMES || self.ep.low_windows < EPISODE_WINDOWS {
            return false;
        }
        // Did the drops or the latency fall as in-flight fell? (Two standard errors.)
        let (da, db) = (a.share(), b.share());
        let sd = libm::sqrt(
            da * (1.0 - da) / a.outcomes.max(1.0) as f64
                + db * (1.0 - db) / b.outcomes.max(1.0) as f64,
        );
        let drops_fell = da - db > 2.0 * sd;
        let min = MIN_SAMPLES as f32;
        let latency_fell = a.samples < min || {
            let sigma = self.base.sigma as f64;
            let ((la, sa), (lb, sb)) = (a.log_median(sigma), b.log_median(sigma));
            la - lb > 2.0 * libm::sqrt(sa * sa + sb * sb)
        };
        let unknown = a.outcomes < EPISODE_OUTCOMES / 4.0 || b.samples < min;
        if drops_fell || latency_fell || unknown || db > HOLD_MAX_SHARE {
            // Back-off helped (queueing), too little is known, or the dependency fails most
            // calls: this level is the new starting point; keep backing off.
            self.ep.reference = b;
            self.ep.ref_windows = self.ep.low_windows;
            self.ep.low = Pool::default();
            self.ep.low_windows = 0;
            self.ep.at = stamp(now);
            return false;
        }
        // Intrinsic: neither fell. Hold: back to the starting point's in-flight (it did no
        // worse), re-learn the baseline at the lower point (the dependency is not queueing
        // there), and tolerate this drop share from now on.
        self.limit = self.clamp(self.limit.max(a.inflight as f64));
        let (lb, _) = b.log_median(0.0);
        self.base.value = libm::exp(lb);
        self.base.weight = b.samples as f64;
        self.intr.share = db as f32;
        self.intr.cap = db as f32;
        self.intr.flat_upto = a.inflight;
        self.ep.ref_windows = 0;
        self.ep.low_windows = 0;
        self.ss.on = false;
        self.recall.resume_at = 0.0;
        self.recall.cut_to = 0.0;
        self.recall.was_near = false;
        self.clear_history();
        self.m.holds += 1;
        self.m.rebaselines += 1;
        true
    }

    /// A window without a back-off moves the intrinsic share towards its own (at most up to
    /// the share measured at the hold), so it fades once the dependency stops dropping.
    pub(super) fn track_intrinsic(&mut self, share: f64, total: u64) {
        if self.intr.share <= 0.0 || total < MIN_SAMPLES as u64 {
            return;
        }
        let t = total as f64;
        let p = self.intr.share as f64;
        let p = (p + (share - p) * t / (t + INTRINSIC_MEMORY)).min(self.intr.cap as f64);
        // Gone once it is a fraction of what the configured tolerance absorbs anyway.
        self.intr.share = if p < 0.5 * self.cfg.drop_tolerance { 0.0 } else { p as f32 };
    }

    /// A window whose drops exceed the allowance (step 2): the multiplicative back-off,
    /// unless an episode is measuring its lower point. Returns the new limit.
    pub(super) fn back_off(&mut self, w: &Window, total: u64) -> f64 {
        if self.ep.low_windows > 0 {
            // Measuring the lower operating point: no further cut until the verdict.
            self.recall.was_near = false;
            return self.limit;
        }
        let first = self.ep.ref_windows == 1 && self.ep.low_windows == 0;
        if self.probe_free() && first && !self.ss.on && self.intr.share <= 0.0 {
            // The first back-off of an episode: remember the limit to come back to.
            self.remember(self.limit, self.base.value);
        }
        // One stray timeout in a tiny window (a limit near 1) does not end slow start,
        // nor do the drops of requests admitted under a higher limit before a cut (the
        // window held more in flight than the limit now allows).
        let stale = w.max_inflight as f64 > self.limit + 1.0;
        self.reset_up();
        // The back-off deepens with the window's drop share (a window of fewer than
        // 10 outcomes counts as 10), down to a halving when every outcome dropped
        // (TCP's multiplicative decrease): a dependency that just lost most of its
        // capacity times out nearly everything we send it, and 10% a window would keep
        // it queueing, and timing out, for seconds.
        // Only a limit that binds (the window held at least half of it in flight, the
        // NCL Gradient's app-limited rule) is cut deeper: cutting a limit far above what
        // is in flight sheds nothing, and a deep cut of one (a relay whose callers time
        // out because a tier below it slowed) would only race it down to a binding
        // level before the episode test could see whether its drops respond to back-off.
        let share = w.drops as f64 / total.max(MIN_SAMPLES as u64) as f64;
        let binds = 2.0 * w.max_inflight as f64 + 1.0 > self.limit;
        let factor = if binds { self.cfg.backoff.min(1.0 - 0.5 * share) } else { self.cfg.backoff };
        self.limit = self.clamp(self.limit * factor);
        // A lone timeout is consistent with a long tail (a heavy-tailed dependency
        // times out a call now and then at any concurrency): it takes two.
        if total >= MIN_SAMPLES as u64 && !stale && w.drops >= 2 {
            self.ss.on = false;
        }
        self.m.backoffs += 1;
        self.recall.was_near = false;
        self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_plant::*;
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn only_a_binding_limit_backs_off_deeper_than_backoff() {
        // A relay whose callers time out because a tier below it slowed: every outcome of
        // the window dropped, with 100 in flight under a limit of 1,000. Cutting that limit
        // sheds nothing; halving it per window would race it down to a binding level in a
        // few windows, before the episode test could see whether the drops respond.
        let cfg = GradientConfig { initial_limit: 1000.0, ..GradientConfig::default() };
        let mut g = Gradient::new(cfg).unwrap();
        let w = |now, inflight| Window {
            now,
            samples: 0,
            drops: 50,
            ..Window::single(now, 10 * MS, inflight, false)
        };
        let l = g.update(&w(100 * MS, 100));
        assert!((l - 1000.0 * cfg.backoff).abs() < 1e-9, "{l}");
        // Once it binds (at least half of it in flight), the same window halves it.
        let l = g.update(&w(200 * MS, 900));
        assert!((l - 900.0 * 0.5).abs() < 1e-9, "{l}");
    }

    #[test]
    fn drops_back_off_and_end_slow_start() {
        let cfg = GradientConfig { initial_limit: 10.0, ..GradientConfig::default() };
        let mut g = Gradient::new(cfg).unwrap();
        assert!(g.metrics().slow_start);
        // One stray drop in a tiny window backs off but keeps slow start.
        let l = g.update(&Window::single(MS, 10 * MS, 5, true));
        assert!((l - 9.0).abs() < 1e-9, "{l}");
        assert!(g.metrics().slow_start);
        // Drops in a window of real size end it. This one filled every permit (9 of 9).
        let w =
            Window { now: 2 * MS, samples: 30, drops: 10, ..Window::single(0, 10 * MS, 9, false) };
        let l = g.update(&w);
        // A quarter of the outcomes dropped: 1 − 0.25 / 2 = 0.875, deeper than `backoff`.
        assert!((l - 9.0 * 0.875).abs() < 1e-9, "{l}");
        assert!(!g.metrics().slow_start);
        assert_eq!(g.metrics().backoffs, 2);
        // The floor holds.
        let mut now = 2 * MS;
        for _ in 0..100 {
            now += MS;
            g.update(&Window::single(now, 0, 1, true));
        }
        assert_eq!(g.limit(), cfg.min_limit);
        // Envoy parity ignores drops.
        let mut e = Gradient::new(GradientConfig::envoy(SEC)).unwrap();
        let l = e.limit();
        assert_eq!(e.update(&Window::single(MS, 10 * MS, 5, true)), l);
    }

    /// A fluid dependency behind a caller's timeout: `slots` servers, service `service_ms`,
    /// and `intrinsic` of the calls slower than the timeout whatever the load. In-flight
    /// beyond the slots queues: latency grows in proportion, and the excess times out.
    struct TimeoutPlant {
        slots: f64,
        service_ms: f64,
        intrinsic: f64,
        offered: f64,
        now: u64,
    }

    impl TimeoutPlant {
        fn window(&mut self, limit: f64) -> Window {
            self.now += 100 * MS;
            let n = limit.max(1.0).min(self.offered);
            let queue = (n / self.slots).max(1.0);
            let lat = (self.service_ms * queue * MS as f64) as u64;
            let outcomes = (n / (self.service_ms * queue) * 100.0).max(1.0);
            let share = self.intrinsic + (1.0 - self.intrinsic) * (1.0 - 1.0 / queue);
            let drops = (outcomes * share).round();
            Window {
                now: self.now,
                samples: (outcomes - drops).max(0.0) as u32,
                drops: drops as u32,
                avg_ns: lat,
                min_ns: lat / 4,
                p50_ns: lat,
                p90_ns: lat * 2,
                p99_ns: lat * 3,
                max_inflight: n.ceil() as u32,
                inflight: n as u32,
            }
        }

        /// Runs `windows` windows; returns the lowest limit seen.
        fn run(&mut self, g: &mut Gradient, windows: usize) -> f64 {
            let mut lowest = f64::MAX;
            for _ in 0..windows {
                let w = self.window(g.limit());
                lowest = lowest.min(g.update(&w));
            }
            lowest
        }
    }

    #[test]
    fn drops_that_do_not_respond_to_back_off_are_held() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p =
            TimeoutPlant { slots: 32.0, service_ms: 10.0, intrinsic: 0.0, offered: 100.0, now: 0 };
        p.run(&mut g, 200);
        // Any queue times out here, so the drops hold the limit near the knee.
        let before = g.limit();
        assert!((0.8 * 32.0..=equilibrium_high(32.0)).contains(&before), "{before}");
        // 10x slower with the same slots, and a fifth of the calls now beyond the timeout
        // whatever the concurrency: backing off cannot lower the drop share.
        p.service_ms = 100.0;
        p.intrinsic = 0.2;
        let lowest = p.run(&mut g, 100);
        let m = g.metrics();
        assert_eq!(m.holds, 1, "{m:?}");
        // One episode: in-flight fell 1.4x, the drops and the latency did not, hold.
        assert!(lowest >= before / 1.5, "{lowest} (before {before})");
        // Little's law: the same concurrency as before, a small standing queue on top.
        assert!((0.8 * 32.0..=equilibrium_high(32.0)).contains(&m.limit), "{m:?}");
        assert!((0.15..=0.25).contains(&m.intrinsic_drop_share), "{m:?}");
        assert!((95.0..=105.0).contains(&(m.baseline_ns as f64 / MS as f64)), "{m:?}");
        // The dependency recovers: the intrinsic share is forgotten and the limit is back
        // within 2 s (20 windows of 100 ms).
        p.service_ms = 10.0;
        p.intrinsic = 0.0;
        let mut back = None;
        for i in 0..100 {
            p.run(&mut g, 1);
            if back.is_none() && g.limit() >= 0.9 * before {
                back = Some(i + 1);
            }
        }
        assert!(back.is_some_and(|n| n <= 20), "{back:?}: {:?}", g.metrics());
        assert_eq!(g.metrics().intrinsic_drop_share, 0.0);
        assert!((0.8 * 32.0..=equilibrium_high(32.0)).contains(&g.limit()), "{:?}", g.metrics());
    }

    #[test]
    fn drops_from_our_own_queue_keep_backing_off() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p =
            TimeoutPlant { slots: 32.0, service_ms: 10.0, intrinsic: 0.0, offered: 100.0, now: 0 };
        p.run(&mut g, 200);
        // A quarter of the slots vanish: the limit now queues 1.5x, and the excess times
        // out. As in-flight falls, so do the drops and the latency: no hold.
        p.slots = 24.0;
        p.run(&mut g, 100);
        let m = g.metrics();
        assert_eq!(m.holds, 0, "{m:?}");
        assert!(m.backoffs >= 3, "{m:?}");
        assert_eq!(m.intrinsic_drop_share, 0.0);
        assert!((0.6 * 24.0..=equilibrium_high(24.0)).contains(&m.limit), "{m:?}");
        // And a dependency that fails most calls whatever the load is not held either.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p =
            TimeoutPlant { slots: 32.0, service_ms: 10.0, intrinsic: 0.0, offered: 100.0, now: 0 };
        p.run(&mut g, 200);
        p.intrinsic = 0.7;
        p.run(&mut g, 100);
        assert_eq!(g.metrics().holds, 0);
        assert!(g.limit() < 2.0, "{:?}", g.metrics());
    }
}
