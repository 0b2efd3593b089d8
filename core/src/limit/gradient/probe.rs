//! The upward and downward probes (state machine step 9): a bound limit is raised (or
//! cut) for a few windows to ask whether latency follows in-flight, so that neither a
//! limit below what the dependency serves nor a stale baseline is an absorbing state.

use super::flat::FLAT_ELASTICITY;
use super::*;
use crate::time::SEC;

// Upward probe (our design, the counterpart of Envoy's downward minRTT probe): a limit that
// binds without drops or clear congestion is, after UP_POOL_SAMPLES samples over at least
// UP_POOL_WINDOWS consecutive such windows, raised
// by UP_SPAN for a window; if latency did not rise with in-flight (elasticity below
// FLAT_ELASTICITY, beyond noise) the higher limit stays and the baseline is re-learned at
// the lower point. A failed probe doubles the wait before the next one, from UP_WAIT_NS up
// to UP_WAIT_MAX_NS, so a limit at a real knee pays one short probe per minute.
pub(super) const UP_SPAN: f64 = 1.3;
pub(super) const UP_MIN_SPAN: f64 = 1.2;
pub(super) const UP_POOL_SAMPLES: f32 = 300.0;
pub(super) const UP_POOL_WINDOWS: u8 = 5;
pub(super) const UP_WAIT_NS: u64 = 4 * SEC;
pub(super) const UP_WAIT_MAX_NS: u64 = 64 * SEC;
pub(super) const UP_PROBE_WINDOWS: u8 = 3;
// A probe whose latency rose by less than this elasticity (beyond one standard error)
// straddled the knee: the lower point queued little.
pub(super) const UP_PARTIAL_ELASTICITY: f64 = 0.7;

/// The operating point an upward probe starts from: bound, drop-free windows pooled.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UpPool {
    /// Sum over windows of mean in-flight × samples (Little's law per window).
    pub(super) inflight: f32,
    pub(super) samples: f32,
    pub(super) log_stat: f32,
    pub(super) windows: u8,
}

impl UpPool {
    pub(super) fn mean_inflight(&self) -> f64 {
        (self.inflight / self.samples.max(1.0)) as f64
    }
    pub(super) fn log_mean(&self) -> f64 {
        (self.log_stat / self.samples.max(1.0)) as f64
    }
}

/// The upward probe.
///
/// Invariants: `from == 0` means no probe under way (then `windows` means nothing), else it
/// is the limit to return to; `pool` is the starting point, bound drop-free windows pooled
/// (forgetting its older half at twice what a probe needs). `wait` is in
/// `[UP_WAIT_NS, UP_WAIT_MAX_NS]`, doubling after each failed probe; `next_at` is when the
/// next may start; `fail_from` is the limit a probe last failed from (0: none since the
/// last success).
#[derive(Clone, Copy, Debug)]
pub(super) struct UpProbe {
    pub(super) pool: UpPool,
    pub(super) from: f32,
    pub(super) windows: u8,
    pub(super) wait: u64,
    pub(super) next_at: u64,
    /// The limit a probe last failed from (0: none since the last success).
    pub(super) fail_from: f32,
}

/// The downward probe.
///
/// Invariants: `from == 0` means no probe under way, else it is the limit to return to,
/// `windows` counts windows since the cut, `reference` is the pooled point before the cut
/// and `pool` the one after it. `acc` pools every bound, drop-free window (congested or
/// not), restarted when the dependency is seen to change. `wait` is in
/// `[UP_WAIT_NS, UP_WAIT_MAX_NS]`; `next_at` is 0 until the first window arms it;
/// `last` is the limit the last probe returned to (0: none since the limit sank below it).
/// While `from > 0` the probe's verdict alone moves the baseline.
#[derive(Clone, Copy, Debug)]
pub(super) struct DownProbe {
    pub(super) from: f32,
    pub(super) windows: u8,
    pub(super) reference: UpPool,
    pub(super) pool: UpPool,
    pub(super) acc: UpPool,
    pub(super) wait: u64,
    pub(super) next_at: u64,
    pub(super) last: f32,
}

impl UpProbe {
    pub(super) fn new() -> Self {
        Self {
            pool: UpPool::default(),
            from: 0.0,
            windows: 0,
            wait: UP_WAIT_NS,
            next_at: 0,
            fail_from: 0.0,
        }
    }
}

impl DownProbe {
    pub(super) fn new() -> Self {
        Self {
            from: 0.0,
            windows: 0,
            reference: UpPool::default(),
            pool: UpPool::default(),
            acc: UpPool::default(),
            wait: UP_WAIT_NS,
            next_at: 0,
            last: 0.0,
        }
    }
}

impl Gradient {
    /// Ends an upward probe or the pooling before one (a drop, a congested window, a
    /// cut, a change of the dependency).
    pub(super) fn reset_up(&mut self) {
        self.up.pool = UpPool::default();
        self.up.from = 0.0;
        self.up.windows = 0;
        self.dn.from = 0.0;
        self.dn.windows = 0;
        self.dn.pool = UpPool::default();
        self.dn.acc = UpPool::default();
    }

    /// Probe-free, state machine step 9: the upward probe. `new` is the limit the other
    /// steps chose; returns the limit to apply.
    pub(super) fn probe_up(
        &mut self,
        now: u64,
        dur: u64,
        w: &Window,
        stat: f64,
        far: bool,
        new: f64,
    ) -> f64 {
        let l = self.limit;
        let bound = w.max_inflight as f64 + 1.0 > l;
        let usable = w.samples >= MIN_SAMPLES && dur > 0 && w.drops == 0;
        if self.dn.from > 0.0 {
            return self.probe_down(now, dur, w, stat, usable);
        }
        if self.up.from > 0.0 {
            // A probe is under way: wait until in-flight has risen, then decide.
            if !usable {
                self.reset_up();
                return new.min(l);
            }
            let n_hi = w.samples as f64 * w.avg_ns as f64 / dur as f64;
            let lo = self.up.pool;
            let n_lo = lo.mean_inflight();
            self.up.windows = self.up.windows.saturating_add(1);
            if n_hi < UP_MIN_SPAN * n_lo {
                if self.up.windows < UP_PROBE_WINDOWS && bound {
                    return l; // in-flight still rising (or the window mostly predates it)
                }
                // Demand did not fill the raised limit: nothing learned, no cost.
                let back = self.up.from as f64;
                self.reset_up();
                self.up.next_at = now.saturating_add(self.up.wait);
                return new.min(back.max(n_hi + 1.0));
            }
            let sigma = log_spread(w).max(self.base.sigma as f64);
            let (se_hi, se_lo) =
                (median_se(sigma, w.samples as f64), median_se(sigma, lo.samples as f64));
            let se = libm::sqrt(se_hi * se_hi + se_lo * se_lo);
            let ds = libm::log(stat) - lo.log_mean();
            let flat = ds <= FLAT_ELASTICITY * libm::log(n_hi / n_lo) + 2.0 * se;
            let back = self.up.from as f64;
            self.reset_up();
            if flat {
                // Latency ignored a 1.2×+ rise of in-flight: below the knee at both points.
                // The lower point's latency is the dependency's own; keep the higher limit.
                let base = libm::exp(lo.log_mean());
                if base > self.base.value {
                    self.base.value = base;
                    self.base.weight = lo.samples as f64;
                    self.clear_history();
                    self.m.rebaselines += 1;
                }
                self.up.wait = UP_WAIT_NS;
                self.up.next_at = now.saturating_add(self.up.wait);
                self.up.fail_from = 0.0;
                // Nothing is known about the load above: find it fast (slow start ends at
                // the first congested window).
                self.ss.on = self.cfg.slow_start;
                return new.max(l);
            }
            // Latency rose with in-flight, but clearly less than in proportion: the probe
            // straddled the knee, so the lower point queued little, if at all. Its latency is
            // then close to the dependency's own: a baseline below it is stale (a dependency
            // that got slower). Back, with that baseline, and probe again at the usual pace.
            let base = libm::exp(lo.log_mean());
            let dn = libm::log(n_hi / n_lo);
            if ds + se < UP_PARTIAL_ELASTICITY * dn && base > self.base.value {
                self.base.value = base;
                self.base.weight = lo.samples as f64;
                self.clear_history();
                self.m.rebaselines += 1;
                self.up.wait = UP_WAIT_NS;
                self.up.next_at = now.saturating_add(self.up.wait);
                self.up.fail_from = back as f32;
                return back;
            }
            // Latency rose with in-flight: a knee. Back, and wait longer next time.
            self.up.wait = (self.up.wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
            self.up.next_at = now.saturating_add(self.up.wait);
            self.up.fail_from = back as f32;
            return back;
        }
        let quiet = self.intr.share <= 0.0 && self.recall.limit <= 0.0 && self.ep.ref_windows == 0;
        if !usable || !bound || self.ss.on || !quiet {
            self.up.pool = UpPool::default();
            self.dn.acc = UpPool::default();
            return new;
        }
        // A failed probe located a knee near where it started. Once the limit has sunk
        // well below that (a dependency that keeps getting slower reads as congestion
        // against a stale baseline, and the limit drifts down), that knee says nothing about
        // this level: the next probe need not wait.
        if self.up.fail_from > 0.0 && l * UP_MIN_SPAN < self.up.fail_from as f64 {
            self.up.fail_from = 0.0;
            self.up.wait = UP_WAIT_NS;
            self.up.next_at = now;
        }
        let n = w.samples as f32;
        let inflight = (w.samples as f64 * w.avg_ns as f64 / dur as f64) as f32;
        // Downward probe: does a point that reads as congested hold a queue of ours? (Not in
        // the first seconds: `update` arms it 4 s after the first window.) One that found
        // our own queue waits longer before the next, but a limit that has since sunk well
        // below where it returned to is falling on latency its own queue no longer explains
        // (a queue of ours shrinks as the limit falls): that verdict is stale, probe again.
        if self.dn.last > 0.0 && l * UP_MIN_SPAN < self.dn.last as f64 {
            self.dn.last = 0.0;
            self.dn.wait = UP_WAIT_NS;
            self.dn.next_at = now;
        }
        // A window whose latency differs from the pool's beyond noise (3 SE) marks a change
        // of the dependency (a capacity loss, say): the pool restarts from it, or it would
        // blend the two and read the new latency as "did not fall".
        let sigma = self.base.sigma as f64;
        if self.dn.acc.windows > 0 {
            let (se_w, se_p) =
                (median_se(sigma, n as f64), median_se(sigma, self.dn.acc.samples as f64));
            let d = libm::log(stat) - self.dn.acc.log_mean();
            if libm::fabs(d) > 3.0 * libm::sqrt(se_w * se_w + se_p * se_p) {
                self.dn.acc = UpPool::default();
            }
        }
        pool_add(&mut self.dn.acc, inflight, n, stat);
        // Above the latency at which the limit holds still (`g = 1 − headroom/sqrt(L)`):
        // the limit is sinking, so a stale baseline would drag it down for good.
        let g_eq = (1.0 - self.cfg.headroom * headroom(l) / l.max(1.0)).max(MIN_GRADIENT);
        let knee = libm::log(self.base.value * (1.0 + self.cfg.buffer) / libm::sqrt(g_eq));
        let acc = self.dn.acc;
        if acc.samples >= UP_POOL_SAMPLES
            && acc.windows >= UP_POOL_WINDOWS
            && now >= self.dn.next_at
            && acc.log_mean() > knee + 2.0 * median_se(sigma, acc.samples as f64)
            && l / UP_SPAN >= 1.0
        {
            self.dn.from = l as f32;
            self.dn.reference = acc;
            self.dn.pool = UpPool::default();
            self.dn.windows = 0;
            self.dn.acc = UpPool::default();
            self.up.pool = UpPool::default();
            return l / UP_SPAN;
        }
        if far {
            self.up.pool = UpPool::default();
            return new;
        }
        pool_add(&mut self.up.pool, inflight, n, stat);
        if self.up.pool.samples >= UP_POOL_SAMPLES
            && self.up.pool.windows >= UP_POOL_WINDOWS
            && now >= self.up.next_at
        {
            self.up.from = l as f32;
            self.up.windows = 0;
            return new.max((l * UP_SPAN).max(l + 1.0));
        }
        new
    }

    /// The downward probe under way (step 9): the first window after the cut still answers
    /// requests admitted before it and is skipped; then at least 2 windows and 100 samples
    /// at the lower point decide. Latency that did not fall with in-flight (elasticity
    /// below FLAT_ELASTICITY, beyond two standard errors) is not our queue: the baseline
    /// becomes the lower point's latency. Either way the limit returns to where it was.
    pub(super) fn probe_down(
        &mut self,
        now: u64,
        dur: u64,
        w: &Window,
        stat: f64,
        usable: bool,
    ) -> f64 {
        let back = self.dn.from as f64;
        let cut = self.limit;
        self.dn.windows = self.dn.windows.saturating_add(1);
        if !usable {
            self.reset_up();
            self.dn.wait = (self.dn.wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
            self.dn.next_at = now.saturating_add(self.dn.wait);
            return back;
        }
        if self.dn.windows == 1 {
            return cut;
        }
        let n = w.samples as f32;
        let inflight = (w.samples as f64 * w.avg_ns as f64 / dur as f64) as f32;
        self.dn.pool.inflight += inflight * n;
        self.dn.pool.samples += n;
        self.dn.pool.log_stat += n * libm::log(stat) as f32;
        self.dn.pool.windows = self.dn.pool.windows.saturating_add(1);
        if (self.dn.pool.windows < 2 || self.dn.pool.samples < 100.0) && self.dn.windows < 6 {
            return cut;
        }
        let (hi, lo) = (self.dn.reference, self.dn.pool);
        let (n_hi, n_lo) = (hi.mean_inflight(), lo.mean_inflight());
        self.reset_up();
        let sigma = self.base.sigma as f64;
        let (se_hi, se_lo) =
            (median_se(sigma, hi.samples as f64), median_se(sigma, lo.samples as f64));
        let se = libm::sqrt(se_hi * se_hi + se_lo * se_lo);
        let measured = lo.samples >= MIN_SAMPLES as f32;
        // In-flight fell enough (1.2×) to compare the two points' latencies.
        let told = measured && n_lo * UP_MIN_SPAN <= n_hi;
        let fell = hi.log_mean() - lo.log_mean();
        let dn = libm::log(n_hi / n_lo.max(1e-9));
        let base = libm::exp(lo.log_mean());
        // Latency fell, but clearly less than in proportion (as the upward probe's partial
        // verdict): the cut reached the knee, so the cut point queued little, if at all,
        // and its latency is close to the dependency's own. A baseline clearly below it
        // (beyond the buffer and two standard errors) is stale.
        let stale = measured
            && dn > 0.0
            && fell + se < UP_PARTIAL_ELASTICITY * dn
            && base > self.base.value * (1.0 + self.cfg.buffer) * (1.0 + 2.0 * se_lo);
        let longer = (self.dn.wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
        if told && fell <= FLAT_ELASTICITY * dn + 2.0 * se {
            // Latency did not fall with in-flight: not our queue. The baseline becomes the
            // lower point's latency. One that moved by more than the buffer was stale: look
            // again soon (a dependency that keeps getting slower).
            let moved = base > self.base.value * (1.0 + self.cfg.buffer);
            if base > self.base.value {
                self.rebase(base, lo.samples as f64);
            }
            self.dn.wait = if moved { UP_WAIT_NS } else { longer };
        } else if stale {
            self.rebase(base, lo.samples as f64);
            self.dn.wait = UP_WAIT_NS;
        } else {
            // A queue of ours (latency fell with in-flight, and the baseline is current), or
            // in-flight did not fall enough to tell (demand, not the limit, set it): wait
            // longer.
            self.dn.wait = longer;
        }
        self.dn.next_at = now.saturating_add(self.dn.wait);
        self.dn.last = back as f32;
        back
    }
}

/// Adds a window (mean in-flight, samples, statistic) to a probe pool. The pool forgets its
/// older half once it holds twice what a probe needs, so it stays the current operating
/// point while the limit drifts.
pub(super) fn pool_add(p: &mut UpPool, inflight: f32, n: f32, stat: f64) {
    if p.windows >= 2 * UP_POOL_WINDOWS && p.samples >= 2.0 * UP_POOL_SAMPLES {
        p.inflight *= 0.5;
        p.samples *= 0.5;
        p.log_stat *= 0.5;
        p.windows /= 2;
    }
    p.inflight += inflight * n;
    p.samples += n;
    p.log_stat += n * libm::log(stat) as f32;
    p.windows = p.windows.saturating_add(1);
}

impl Gradient {
    /// Drops during an upward probe are the probe's answer (step 2): back to where it
    /// started (no back-off, no episode), and wait longer before the next one.
    pub(super) fn up_probe_dropped(&mut self, now: u64) -> f64 {
        self.limit = self.clamp(self.limit.min(self.up.from as f64));
        self.reset_up();
        self.up.wait = (self.up.wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
        self.up.next_at = now.saturating_add(self.up.wait);
        self.recall.was_near = false;
        self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::test_plant::*;
    use super::*;
    use crate::limit::Algorithm;

    /// 10 s over 16 slots at 10 ms, then a minute in which the service time grows to
    /// `1 + growth` times the base: the controller and the limit of each window of that
    /// minute.
    fn slow_leak(growth: f64) -> (Gradient, Vec<f64>) {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        let limits = (0..600)
            .map(|k| {
                p.service_ms = 10.0 * (1.0 + growth * k as f64 / 600.0);
                p.run(&mut g, 1)
            })
            .collect();
        (g, limits)
    }

    #[test]
    fn a_dependency_that_keeps_getting_slower_keeps_its_concurrency() {
        // A slow leak: the service time grows by 1/30 of the base every second (3x after a
        // minute), the 16 slots stay. Each slower second reads as congestion against the
        // baseline; without a check of whether the latency is our queue, the limit sinks
        // below the slots and the dependency idles.
        let (g, lows) = slow_leak(2.0);
        // The median limit of the last 40 s (probes are short transients) stays at the
        // slots or above, and the baseline followed the dependency (30 ms at the end).
        let mut last = lows[200..].to_vec();
        last.sort_by(f64::total_cmp);
        let median = last[last.len() / 2];
        assert!(median >= 16.0, "median limit {median} ({:?})", g.metrics());
        let b = g.baseline_ns() as f64 / MS as f64;
        assert!(b >= 20.0, "baseline {b} ms ({:?})", g.metrics());
    }

    #[test]
    fn a_dependency_slowing_by_half_over_a_minute_keeps_its_concurrency() {
        // A slower leak than above (2× after a minute): each downward probe finds a queue of
        // ours (the limit sat above the slots), and its wait doubled (8, 16, 32 s) while the
        // dependency kept slowing, so the limit drifted between probes, as low as a quarter
        // of the slots (a 10th percentile of 8, 12% of the slot-time idle). A limit that sinks 1.2×
        // below where the last probe returned it is probed again at once.
        let (g, limits) = slow_leak(1.0);
        let idle = limits.iter().map(|&l| (16.0 - l.min(16.0)) / 16.0).sum::<f64>() / 600.0;
        let mut sorted = limits.clone();
        sorted.sort_by(f64::total_cmp);
        let p10 = sorted[60];
        assert!(p10 >= 15.0, "10th percentile limit {p10} ({:?})", g.metrics());
        assert!(idle < 0.02, "idle share of the slots {idle:.3} ({:?})", g.metrics());
    }

    /// A controller in steady state over 16 slots at 10 ms, with a downward probe's cut
    /// under way from `from` (its reference pool: `n_hi` in flight at `s_hi_ms`).
    fn probing_down(from: f64, n_hi: f32, s_hi_ms: f64) -> (Gradient, Plant) {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 100);
        let reference = UpPool {
            inflight: n_hi * 1000.0,
            samples: 1000.0,
            log_stat: 1000.0 * libm::log(s_hi_ms * MS as f64) as f32,
            windows: 10,
        };
        g.reset_up();
        g.dn.from = from as f32;
        g.dn.reference = reference;
        g.limit = from / UP_SPAN;
        (g, p)
    }

    /// A window of `samples` at `n` in flight (over 100 ms) with median `p50_ms` and a
    /// narrow spread.
    fn point_window(now: u64, n: f64, p50_ms: f64, samples: u32) -> Window {
        let p50 = (p50_ms * MS as f64) as u64;
        Window {
            now,
            samples,
            drops: 0,
            avg_ns: (n * 100.0 * MS as f64 / samples as f64) as u64,
            min_ns: p50 * 7 / 10,
            p50_ns: p50,
            p90_ns: p50 * 12 / 10,
            p99_ns: p50 * 15 / 10,
            max_inflight: n.ceil() as u32,
            inflight: n as u32,
        }
    }

    #[test]
    fn a_downward_probe_that_reached_the_knee_relearns_the_baseline() {
        // The probe cut from 24 (mean 22 in flight, 15 ms) to 18.5 (16 in flight, 13 ms):
        // latency fell, but by half the in-flight's fall (elasticity 0.45), so the cut
        // point queued little and 13 ms is close to the dependency's own latency; the
        // baseline of 10 ms is stale. Before, only a fall below elasticity 0.2 re-learned it
        // and this verdict read as a queue of ours.
        let (mut g, mut p) = probing_down(24.0, 22.0, 15.0);
        let before = g.baseline_ns() as f64 / MS as f64;
        assert!((9.5..=11.0).contains(&before), "baseline {before} ms");
        for _ in 0..4 {
            p.now += 100 * MS;
            g.update(&point_window(p.now, 16.0, 13.0, 120));
            if g.dn.from == 0.0 {
                break;
            }
        }
        assert_eq!(g.dn.from, 0.0, "the probe decided");
        let after = g.baseline_ns() as f64 / MS as f64;
        assert!((12.5..=13.5).contains(&after), "baseline {after} ms ({:?})", g.metrics());
        // A fall in proportion (a queue of ours at both points) leaves it alone.
        let (mut g, mut p) = probing_down(24.0, 22.0, 15.0);
        for _ in 0..4 {
            p.now += 100 * MS;
            g.update(&point_window(p.now, 16.0, 15.0 * 16.0 / 22.0, 120));
        }
        assert_eq!(g.dn.from, 0.0, "the probe decided");
        let kept = g.baseline_ns() as f64 / MS as f64;
        assert!((before - kept).abs() < 0.01, "baseline {before} -> {kept} ms");
    }

    #[test]
    fn a_downward_probe_owns_the_baseline_while_under_way() {
        // The first window after the cut answers requests admitted before it; one far below
        // the baseline (a burst of fast answers as in-flight drains) used to restart the
        // baseline ("the dependency got faster") and slow start from it, mid-probe.
        let (mut g, mut p) = probing_down(24.0, 22.0, 15.0);
        let before = g.baseline_ns();
        p.now += 100 * MS;
        g.update(&point_window(p.now, 18.0, 5.0, 200));
        assert_eq!(g.baseline_ns(), before);
        assert!(!g.metrics().slow_start);
        assert!(g.dn.from > 0.0, "still probing");
    }

    #[test]
    fn the_downward_probe_is_armed_from_the_first_window() {
        // 10 s at a modest load (the limit never binds), then the dependency slows down and
        // the limit binds for the first time: a probe may start at once, not 4 s later.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = Plant { slots: 16.0, service_ms: 10.0, offered: 8.0, now: 0 };
        p.run(&mut g, 100);
        assert!(g.dn.next_at > 0 && g.dn.next_at <= 4 * SEC + 100 * MS, "{}", g.dn.next_at);
    }

    /// A long-tailed dependency (log-normal, σ 1, median 6.1 ms) with 16 slots, far from
    /// loaded: latency is its own at any in-flight up to 16. Windows of 100 ms hold
    /// `limit`-bound traffic (the caller always has more work).
    fn tail_window(now: u64, limit: f64, p50_ms: f64) -> Window {
        let inflight = libm::floor(limit.max(1.0)) as u32;
        let p50 = (p50_ms * MS as f64) as u64;
        Window {
            now,
            samples: (inflight * 10).max(10),
            drops: 0,
            avg_ns: p50 * 165 / 100, // log-normal σ 1: mean = median · e^0.5
            min_ns: p50 / 10,
            p50_ns: p50,
            p90_ns: p50 * 36 / 10,  // e^1.28
            p99_ns: p50 * 102 / 10, // e^2.33
            max_inflight: inflight,
            inflight,
        }
    }

    #[test]
    fn a_baseline_learned_low_is_not_an_absorbing_state() {
        // The trace behind the lock at a limit of about 1: the first window (13 samples of a
        // long tail) reads 3.6 ms against a true median of 6.1 ms; then two timeouts of the
        // tail end slow start and the back-off takes the limit to its floor. From there
        // every window at the true median read as congested against the low baseline, and
        // one request in flight could never show that latency ignores concurrency. (Here a
        // passing congestion ends slow start and takes the limit to the floor.)
        let cfg = GradientConfig { initial_limit: 1.0, ..GradientConfig::default() };
        let mut g = Gradient::new(cfg).unwrap();
        let mut now = 100 * MS;
        let first = Window { samples: 13, ..tail_window(now, 1.0, 3.6) };
        g.update(&first);
        for _ in 0..20 {
            now += 100 * MS;
            g.update(&tail_window(now, 2.0, 20.0)); // a passing congestion: 3x the median
        }
        // (An upward probe may have tested 1 against 2 and found latency flat.)
        assert!(g.limit() < 2.0, "{:?}", g.metrics());
        assert!(!g.metrics().slow_start);
        for _ in 0..200 {
            now += 100 * MS;
            g.update(&tail_window(now, g.limit(), 6.1));
        }
        // 20 s of a dependency that never queued: the limit left the floor and the baseline
        // is the dependency's median.
        let m = g.metrics();
        assert!(m.limit >= 8.0, "{m:?}");
        let base_ms = m.baseline_ns as f64 / MS as f64;
        assert!((5.0..=7.5).contains(&base_ms), "{m:?}");
    }
}
