//! Envoy's adaptive-concurrency gradient controller, plus a probe-free baseline.
//!
//! See [`Gradient`] for a summary of the state machine; every step is written out in
//! `docs/gradient.md` in the repository, and `core/tests/convergence.rs` holds the
//! closed-loop scenarios its defaults were tuned on.
//!
//! One module per mechanism, each owning its state:
//!
//! - `config`: [`GradientConfig`], its defaults and validation;
//! - `baseline`: the probe-free baseline (step 4) and the windows' typical spread;
//! - `flat`: the flat test and its history of operating points (step 4);
//! - `episode`: back-off episodes and the intrinsic drop share (step 2);
//! - `slow_start`: slow start and the warm-start check (step 6);
//! - `recall`: the limits to come back to after a cut (step 8);
//! - `probe`: the upward and downward probes (step 9);
//! - `envoy`: Envoy's min-RTT probe (probe mode, step 1).
//!
//! This module keeps the controller itself: the per-window sequence (`update`) and the
//! statistics every mechanism shares.

mod baseline;
mod config;
mod envoy;
mod episode;
mod flat;
mod probe;
mod recall;
mod slow_start;
#[cfg(all(test, not(loom)))]
mod test_plant;

pub use config::GradientConfig;

use self::baseline::{Baseline, QUANTILE_SE};
use self::envoy::MinRtt;
use self::episode::{Episode, Intrinsic};
use self::flat::{History, FLAT_HISTORY, FLAT_HORIZON_NS};
use self::probe::{DownProbe, UpProbe, UP_WAIT_NS};
use self::recall::Recall;
use self::slow_start::SlowStart;
use super::{Algorithm, Window};
use crate::time::{Monotonic, MS};
use crate::ConfigError;

// Envoy gradient_controller.cc: the gradient is clamped to [0.5, 2.0].
pub(super) const MIN_GRADIENT: f64 = 0.5;
const MAX_GRADIENT: f64 = 2.0;
// A window needs this many samples to move the baseline or join the flat test
// (NCL WindowedLimit's minimum window size).
pub(super) const MIN_SAMPLES: u32 = 10;

/// A snapshot of a [`Gradient`]'s state and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradientMetrics {
    /// The current limit.
    pub limit: f64,
    /// The baseline (uncongested sample RTT) in ns; 0 before the first measurement.
    pub baseline_ns: u64,
    /// The last window's sample RTT in ns.
    pub sample_ns: u64,
    /// The last gradient computed (1 before any).
    pub gradient: f64,
    /// Windows folded.
    pub windows: u64,
    /// Back-offs caused by drops.
    pub backoffs: u64,
    /// Probe-free: times the flat test raised the baseline.
    pub rebaselines: u64,
    /// Probe mode: min-RTT measurements completed.
    pub probes: u64,
    /// Probe-free: back-off episodes that ended in a hold (the drops did not respond).
    pub holds: u64,
    /// Probe-free: the drop share found intrinsic to the dependency (0 when none); drops up
    /// to about this share, plus noise and `drop_tolerance`, cause no back-off.
    pub intrinsic_drop_share: f64,
    /// The limit that uncongested windows double back towards (0 when none pending).
    pub recall_limit: f64,
    /// Still in slow start.
    pub slow_start: bool,
    /// A min-RTT measurement is under way (the limit is pinned).
    pub probing: bool,
}

/// The counters of [`GradientMetrics`] (the gauges are read from the state).
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    windows: u64,
    backoffs: u64,
    rebaselines: u64,
    probes: u64,
    holds: u64,
    sample_ns: u64,
    gradient: f32,
}

/// Envoy's adaptive-concurrency gradient controller with a
/// probe-free baseline (ours), the crate's default algorithm.
///
/// Each window's sample RTT `S` (a percentile, p50 by default) is compared with a baseline
/// `B`, the uncongested value of the same statistic:
///
/// ```text
/// g      = clamp(B·(1 + buffer) / S, 0.5, 2)
/// target = L·g + headroom·sqrt(L·g)            // Envoy: buffer 0.25, headroom 1
/// L      = clamp(L + smoothing·(target − L), min_limit, max_limit)
/// ```
///
/// At equilibrium `g = 1 − headroom/sqrt(L)`: over a dependency that serves `C` at once
/// without queueing, the default keeps a standing queue of about `0.1·C + 0.8·sqrt(C)`
/// requests, enough to cover the gaps between Poisson arrivals.
///
/// # State machine
///
/// Phases: **slow start** → **steady**, plus **probing** in probe mode (Envoy's min-RTT
/// measurement). Every window, in order: (1) a min-RTT measurement under way pins the
/// limit; (2) drops beyond the allowance back off, and probe-free, a back-off *episode*
/// tests whether the drops respond to back-off (if not, the controller *holds* and
/// tolerates that *intrinsic* drop share); (3) a window without samples changes nothing;
/// (4) the baseline is tracked (pinned, measured, or probe-free: a sample-weighted mean of
/// indistinguishable windows, restarted by a speed-up, raised by the *flat test* when
/// latency ignores concurrency); (5) the gradient; (6) slow start or the smoothed step;
/// (7) the app-limited guard; (8) the *recall* of a limit held before a cut; (9) the
/// upward and downward probes, so a limit below what the dependency serves is no
/// absorbing state; (10) the clamp. Each step's rule, threshold and reason is written out
/// in `docs/gradient.md` in the repository; the code of each mechanism sits in its own
/// module beside its tests.
///
/// **Fractional limits.** Below 1 the headroom becomes `x·sqrt(x)` (continuous at 1), so a
/// congested limit keeps shrinking towards a fractional floor. Envoy's `sqrt` would hold it
/// at its fixed point of 4.
///
/// ```
/// use surgeguard_core::limit::{Algorithm, Gradient, GradientConfig, Window};
///
/// let mut g = Gradient::new(GradientConfig::default()).unwrap();
/// let ms = 1_000_000;
/// let window = |now, p50: u64, inflight| Window {
///     now, samples: 100, drops: 0, avg_ns: p50, min_ns: p50 / 2, p50_ns: p50,
///     p90_ns: p50 * 13 / 10, p99_ns: p50 * 2, max_inflight: inflight, inflight,
/// };
/// let l0 = g.limit();
/// assert!(g.update(&window(100 * ms, 10 * ms, 20)) > l0); // uncongested: slow start grows
/// let l1 = g.limit();
/// g.update(&window(200 * ms, 30 * ms, 40)); // latency tripled: the first window holds,
/// assert!(g.update(&window(300 * ms, 30 * ms, 40)) < l1); // the second backs off
/// ```
///
/// Progress: not shared (`&mut self`; the [`Limiter`](crate::Limiter) folds windows from one
/// CAS winner). Cost per window: a constant number of float operations, plus a scan of
/// 8 history points. No allocation; the state is a fixed ~700 bytes. Sources: Envoy
/// `gradient_controller.cc` and `pinned_gradient_controller.cc`;
/// probe-free baseline, our design; the episode
/// test and the recall are our design, tuned on `core/tests/convergence.rs` (a dependency
/// 10× slower with the caller's timeout in its tail, the simulator's `retry-storm`).
#[derive(Clone, Debug)]
pub struct Gradient {
    cfg: GradientConfig,
    limit: f64,
    clock: Monotonic,
    /// When the previous window closed (0: none yet).
    last_at: u64,
    base: Baseline,
    flat: History,
    ss: SlowStart,
    recall: Recall,
    up: UpProbe,
    dn: DownProbe,
    ep: Episode,
    intr: Intrinsic,
    envoy: MinRtt,
    m: Counters,
}

impl Gradient {
    /// Builds it, validating the config (a bad one returns [`ConfigError`]).
    pub fn new(config: GradientConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut g = Self {
            cfg: config,
            limit: config.initial_limit,
            clock: Monotonic::new(),
            last_at: 0,
            base: Baseline::new(config.pinned_baseline_ns),
            flat: History::new(),
            ss: SlowStart::new(config.slow_start),
            recall: Recall::default(),
            up: UpProbe::new(),
            dn: DownProbe::new(),
            ep: Episode::default(),
            intr: Intrinsic::default(),
            envoy: MinRtt::new(config.seed),
            m: Counters { gradient: 1.0, ..Counters::default() },
        };
        if g.probing_mode() {
            // Envoy: the controller starts inside a minRTT window (nothing to discard yet).
            g.start_probe(0);
        }
        Ok(g)
    }

    /// A snapshot of the state and counters.
    pub fn metrics(&self) -> GradientMetrics {
        GradientMetrics {
            limit: self.limit,
            baseline_ns: self.base.value as u64,
            sample_ns: self.m.sample_ns,
            gradient: self.m.gradient as f64,
            windows: self.m.windows,
            backoffs: self.m.backoffs,
            rebaselines: self.m.rebaselines,
            probes: self.m.probes,
            holds: self.m.holds,
            intrinsic_drop_share: self.intr.share as f64,
            recall_limit: self.recall.limit as f64,
            slow_start: self.ss.on,
            probing: self.envoy.probe.is_some(),
        }
    }

    /// The current baseline (uncongested sample RTT) in ns; 0 before the first measurement.
    pub fn baseline_ns(&self) -> u64 {
        self.base.value as u64
    }

    pub(super) fn probe_free(&self) -> bool {
        self.cfg.pinned_baseline_ns == 0 && self.cfg.probe_interval_ns == 0
    }

    pub(super) fn probing_mode(&self) -> bool {
        self.cfg.pinned_baseline_ns == 0 && self.cfg.probe_interval_ns > 0
    }

    pub(super) fn clamp(&self, x: f64) -> f64 {
        x.max(self.cfg.min_limit).min(self.cfg.max_limit)
    }

    /// The window's sample RTT: the configured percentile, interpolated between p50, p90, p99.
    pub(super) fn stat(&self, w: &Window) -> f64 {
        let p = self.cfg.sample_percentile;
        let (p50, p90, p99) = (w.p50_ns as f64, w.p90_ns as f64, w.p99_ns as f64);
        let s = if p <= 90.0 {
            p50 + (p - 50.0) / 40.0 * (p90 - p50)
        } else {
            p90 + (p - 90.0) / 9.0 * (p99 - p90)
        };
        s.max(1.0)
    }
}

/// A compact time stamp: milliseconds, wrapping every 49.7 days. Stamps are only compared
/// within the flat test's horizon; history and episodes are dropped once older (every
/// window checks), so no stamp lives long enough to wrap.
pub(super) fn stamp(now: u64) -> u32 {
    (now / MS) as u32 // truncation intended: wrapping arithmetic below
}

/// Nanoseconds from stamp `then` to stamp `now`.
pub(super) fn elapsed(now: u32, then: u32) -> u64 {
    now.wrapping_sub(then) as u64 * MS
}

/// The log-spread `σ` of a window's latencies, read from its p50..p90 (log-normal model).
pub(super) fn log_spread(w: &Window) -> f64 {
    (libm::log(w.p90_ns.max(1) as f64 / w.p50_ns.max(1) as f64) / 1.2816).max(0.0)
}

/// Relative standard error of the median of `n` samples with log-spread `sigma`
/// (`1.25·σ/√n`), combined with the histogram's quantile error.
pub(super) fn median_se(sigma: f64, n: f64) -> f64 {
    let se = 1.2533 * sigma / libm::sqrt(n.max(1.0));
    libm::sqrt(se * se + QUANTILE_SE * QUANTILE_SE)
}

/// The headroom added to `x = limit · gradient`: Envoy's `sqrt(x)`, and `x·sqrt(x)` below 1
/// so that fractional limits can still shrink (continuous at 1).
pub(super) fn headroom(x: f64) -> f64 {
    let r = libm::sqrt(x.max(0.0));
    if x >= 1.0 {
        r
    } else {
        x * r
    }
}

impl Algorithm for Gradient {
    fn limit(&self) -> f64 {
        self.limit
    }

    fn update(&mut self, w: &Window) -> f64 {
        let now = self.clock.observe(w.now);
        let prev_inflight = core::mem::replace(&mut self.ss.prev_inflight, w.max_inflight);
        let prev_limit = core::mem::replace(&mut self.ss.prev_limit, self.limit);
        // The window's length, if known: after a gap longer than the flat test's horizon the
        // previous close says nothing about this window, and the history is stale.
        let mut dur = if self.last_at > 0 { now - self.last_at } else { 0 };
        if dur > FLAT_HORIZON_NS {
            dur = 0;
            self.reset_up();
            self.clear_history();
            self.ep.ref_windows = 0;
            self.ep.low_windows = 0;
        }
        if self.flat.len > 0 {
            // Points older than the horizon pair with nothing: drop them before their
            // stamps could wrap.
            let next = self.flat.next as usize;
            let newest = self.flat.points[(next + FLAT_HISTORY - 1) % FLAT_HISTORY];
            if elapsed(stamp(now), newest.at) > FLAT_HORIZON_NS {
                self.clear_history();
            }
        }
        self.last_at = now;
        self.m.windows += 1;
        if self.dn.next_at == 0 && self.probe_free() {
            // The first downward probe waits out the first seconds after start (the first
            // baseline has its own checks), not the first seconds of a binding limit: a
            // dependency that slows down under a modest load binds the limit for the first
            // time exactly then.
            self.dn.next_at = now.saturating_add(UP_WAIT_NS);
        }

        // 1. A min-RTT measurement under way.
        if self.envoy.probe.is_some() && self.fold_probe(now, w) {
            return self.limit;
        }
        // 2. Drops during an upward probe are the probe's answer: back to where it
        //    started (no back-off, no episode), and wait longer before the next one.
        if self.up.from > 0.0 && w.drops > 0 {
            return self.up_probe_dropped(now);
        }
        //    Drops, and (probe-free) whether they respond to back-off.
        let total = w.samples as u64 + w.drops as u64;
        let allowance = self.drop_allowance(total);
        let stat = if w.samples > 0 { self.stat(w) } else { 0.0 };
        let back_off =
            w.drops > 0 && w.drops as f64 > allowance * total as f64 && self.cfg.backoff < 1.0;
        if self.probe_free() && self.cfg.backoff < 1.0 {
            let start = back_off && self.ep.ref_windows == 0;
            if self.fold_episode(now, w, stat, start) {
                return self.limit; // hold: the drops are the dependency's, not our queue's
            }
        }
        if back_off {
            return self.back_off(w, total);
        }
        self.track_intrinsic(if total > 0 { w.drops as f64 / total as f64 } else { 0.0 }, total);
        // 3. Nothing to measure.
        if w.samples == 0 {
            return self.limit;
        }
        // 4. Baseline.
        self.m.sample_ns = stat as u64;
        if self.probe_free() {
            self.track_baseline(now, dur, w, stat, allowance);
        }
        if self.base.value <= 0.0 {
            return self.limit;
        }
        // 5. Gradient.
        let l = self.limit;
        let base = if self.probe_free() { self.base.value.min(stat) } else { self.base.value };
        let g = (base * (1.0 + self.cfg.buffer) / stat).clamp(MIN_GRADIENT, MAX_GRADIENT);
        self.m.gradient = g as f32;
        // 6. Slow start (until latency is clearly, not just noisily, above the baseline),
        //    else the smoothed Envoy step.
        // Clearly means beyond the noise of both the window and the baseline: a baseline
        // of one small window (the first, say) must not end slow start on its own error.
        let sigma = log_spread(w).max(self.base.sigma as f64);
        let se_w = median_se(sigma, w.samples as f64);
        let se_b = 1.2533 * sigma / libm::sqrt(self.base.weight.max(1.0));
        let se = if self.probe_free() { libm::sqrt(se_w * se_w + se_b * se_b) } else { se_w };
        let congested = stat > self.base.value * (1.0 + self.cfg.buffer) * (1.0 + 2.0 * se);
        // During slow start one congested window of a long-tailed dependency is often noise:
        // unless far beyond it (4 SE), the first holds the limit and the second ends it.
        let far = stat > self.base.value * (1.0 + self.cfg.buffer) * (1.0 + 4.0 * se);
        let first_congested = self.ss.on && congested && !far && !self.ss.congested;
        self.ss.congested = self.ss.on && congested;
        if self.ss.on
            && congested
            && !first_congested
            && self.probe_free()
            && self.warm_restart(dur, w)
        {
            return self.limit;
        }
        let mut new = if self.ss.on && !congested {
            l * 2.0
        } else if first_congested {
            l
        } else {
            self.ss.on = false;
            let target = l * g + self.cfg.headroom * headroom(l * g);
            l + self.cfg.smoothing * (target - l)
        };
        // 7. App-limited guard.
        // Reaching every whole permit is never app-limited (a limiter admits floor(L)).
        let used = w.max_inflight as f64;
        let reached = used + 1.0 > l;
        if new > l && used < self.cfg.app_limited_ratio * l && !reached {
            new = l;
        }
        // A slow-start doubling needs the limit reached (RFC 7661: no growth of a window
        // that is not in use): a burst to 80% of it at a modest load would otherwise double
        // a limit that is already far above what the dependency serves, and a capacity
        // loss then queues (and times out) everything admitted under it.
        if self.ss.on && new > l && !reached && self.cfg.app_limited_ratio > 0.0 {
            new = l;
        }
        // Nor does a window whose in-flight rose 1.5× at once double the limit: a
        // dependency that just lost capacity queues what it used to serve, and the latency
        // of this window's answers (admitted before) does not show it yet. One window
        // waits; the next shows the latency.
        // (A rise that follows a doubling of a limit the previous window reached is ours.)
        let prev_reached = prev_inflight as f64 + 1.0 > prev_limit;
        let jumped = prev_inflight > 0 && !prev_reached && 2 * w.max_inflight > 3 * prev_inflight;
        if self.ss.on && new > l && jumped && self.cfg.app_limited_ratio > 0.0 {
            new = l;
        }
        // 8. Recall (probe-free): after a cut, two windows in a row within `buffer` of the
        //    baseline at a binding limit double it back towards the limit it had before;
        //    a congested window after such a doubling ends the recall.
        new = self.recall_step(stat, congested, reached, l, new);
        // 9. Upward probe (probe-free): a bound limit with no drops must not be an
        //    absorbing state below what the dependency handles.
        if self.probe_free() {
            new = self.probe_up(now, dur, w, stat, far, new);
        }
        // 10. Clamp.
        self.limit = self.clamp(new);
        if self.limit >= self.recall.limit as f64 {
            self.recall.limit = 0.0;
            self.recall.recalling = false;
        }

        if self.probing_mode() {
            self.after_window(now);
        }
        self.limit
    }

    fn name(&self) -> &'static str {
        "gradient"
    }
}

impl From<GradientMetrics> for super::AlgorithmMetrics {
    /// The common shape: back-offs count as decreases and drop windows; increases and
    /// app-limited windows are not counted by Gradient (0).
    fn from(m: GradientMetrics) -> Self {
        Self {
            limit: m.limit,
            windows: m.windows,
            increases: 0,
            decreases: m.backoffs,
            drop_windows: m.backoffs,
            app_limited: 0,
            slow_start: m.slow_start,
            latency_ns: m.sample_ns,
            baseline_ns: m.baseline_ns,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::test_plant::*;
    use super::*;
    use quickcheck::{quickcheck, Arbitrary, Gen};

    #[test]
    fn settles_just_above_the_knee() {
        for slots in [4.0, 16.0, 100.0, 500.0] {
            let mut g = Gradient::new(GradientConfig::default()).unwrap();
            let mut p = overloaded(slots, 10.0);
            p.run(&mut g, 250);
            // The median limit of the last 50 windows: an upward probe (one window at 1.3×,
            // then back) is a transient by design.
            let mut last: Vec<f64> = (0..50).map(|_| p.run(&mut g, 1)).collect();
            last.sort_by(f64::total_cmp);
            let l = last[25];
            // Equilibrium: a standing queue of about buffer·C + headroom·sqrt(C).
            let high = equilibrium_high(slots);
            assert!(l >= slots && l <= high, "{slots}: {l} not in [{slots}, {high}]");
            let b = g.baseline_ns() as f64 / MS as f64;
            assert!((9.5..=11.0).contains(&b), "{slots}: baseline {b} ms");
        }
    }

    #[test]
    fn app_limited_windows_do_not_grow_the_limit() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = Plant { slots: 100.0, service_ms: 10.0, offered: 5.0, now: 0 };
        let l = p.run(&mut g, 200);
        // Demand is 5 in flight: the limit stays within 1/0.8 of what was used (and the
        // first doubling), not at the ceiling.
        assert!(l <= 20.0, "{l}");
        assert!(l >= 5.0, "{l}");
    }

    #[test]
    fn fractional_limits_shrink_below_one_and_recover() {
        let cfg = GradientConfig { min_limit: 0.01, ..GradientConfig::default() };
        let mut g = Gradient::new(cfg).unwrap();
        let mut now = 0;
        for _ in 0..60 {
            now += 100 * MS;
            g.update(&Window::single(now, 0, 1, true));
        }
        let low = g.limit();
        assert!(low < 0.05, "{low}");
        assert!(low >= 0.01);
        // Gradient below 1 keeps shrinking a fractional limit (Envoy's sqrt would hold it at 4).
        assert!(headroom(0.25) < 0.25 && (headroom(1.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn percentile_interpolates_between_window_quantiles() {
        let w = Window { p50_ns: 100, p90_ns: 200, p99_ns: 1100, samples: 1, ..Window::default() };
        let stat = |p| {
            let cfg = GradientConfig { sample_percentile: p, ..GradientConfig::default() };
            Gradient::new(cfg).unwrap().stat(&w)
        };
        assert_eq!(stat(50.0), 100.0);
        assert_eq!(stat(70.0), 150.0);
        assert_eq!(stat(90.0), 200.0);
        assert_eq!(stat(99.0), 1100.0);
    }

    #[test]
    fn time_running_backwards_is_clamped() {
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = overloaded(16.0, 10.0);
        p.run(&mut g, 50);
        let mut w = p.window(g.limit());
        w.now = 1; // far in the past
        let l = g.update(&w);
        assert!(l.is_finite() && l >= 1.0);
    }

    #[derive(Clone, Debug)]
    struct Win(Window);

    impl Arbitrary for Win {
        fn arbitrary(gen: &mut Gen) -> Self {
            let lat = |gen: &mut Gen| u64::arbitrary(gen) % (10 * SEC);
            let mut q = [lat(gen), lat(gen), lat(gen), lat(gen)];
            q.sort_unstable();
            Win(Window {
                now: u64::arbitrary(gen) % (3600 * SEC),
                samples: u32::arbitrary(gen) % 500,
                drops: if bool::arbitrary(gen) { u32::arbitrary(gen) % 50 } else { 0 },
                avg_ns: q[1],
                min_ns: q[0],
                p50_ns: q[1],
                p90_ns: q[2],
                p99_ns: q[3],
                max_inflight: u32::arbitrary(gen) % 2000,
                inflight: u32::arbitrary(gen) % 2000,
            })
        }
    }

    quickcheck! {
        /// Whatever windows arrive, in whatever order, the limit stays finite and within
        /// [floor, ceiling] in every mode.
        fn limit_stays_within_bounds(windows: Vec<Win>, mode: u8, min: u8) -> bool {
            let min_limit = 0.1 + (min % 20) as f64;
            let base = match mode % 3 {
                0 => GradientConfig::default(),
                1 => GradientConfig::envoy(SEC),
                _ => GradientConfig { pinned_baseline_ns: 5 * MS, ..GradientConfig::default() },
            };
            let cfg = GradientConfig {
                min_limit,
                initial_limit: min_limit.max(base.initial_limit),
                max_limit: 500.0,
                ..base
            };
            let mut g = Gradient::new(cfg).unwrap();
            windows.iter().all(|w| {
                let l = g.update(&w.0);
                l.is_finite() && l >= min_limit && l <= 500.0 && l == g.limit()
            })
        }
    }
}
