//! Slow start (state machine step 6) and the warm-start check: the limit doubles per
//! uncongested window that reached it until the first clear congestion, and a first
//! baseline learned with the initial limit held full is learned again once.

use super::baseline::QUEUE_FILL;
use super::*;

/// Slow start's state.
///
/// Invariants: `on` starts as `slow_start` in the config and is cleared by the first clear
/// congestion (two windows, or one far beyond noise), by drops, or by a hold; the probes and
/// a speed-up cut may turn it on again (only if configured). `congested` is the previous
/// window's "congested during slow start". `prev_inflight` / `prev_limit` are the previous
/// window's most in flight and the limit in force during it (the jump check).
/// `warm_inflight` is the least in-flight of the windows the first baseline was learned
/// from (0: none pending; checked once, when slow start first ends); `warm_mean` the least
/// mean in-flight of those windows (`f32::MAX`: a window with drops or no duration);
/// `warm_checked`: the check has been armed (it runs at most once).
#[derive(Clone, Copy, Debug)]
pub(super) struct SlowStart {
    pub(super) on: bool,
    pub(super) congested: bool,
    pub(super) prev_inflight: u32,
    pub(super) prev_limit: f64,
    pub(super) warm_inflight: f32,
    pub(super) warm_mean: f32,
    pub(super) warm_checked: bool,
}

impl SlowStart {
    pub(super) fn new(on: bool) -> Self {
        Self {
            on,
            congested: false,
            prev_inflight: 0,
            prev_limit: 0.0,
            warm_inflight: 0.0,
            warm_mean: 0.0,
            warm_checked: false,
        }
    }
}

impl Gradient {
    /// Slow start ends for the first time (probe-free): the warm-start check. True when the
    /// limit was drained and the baseline is to be learned again (the window ends there).
    pub(super) fn warm_restart(&mut self, dur: u64, w: &Window) -> bool {
        // Slow start ends for the first time. If the baseline was learned only in
        // windows that held the initial limit full (a warm start, which may exceed a
        // small dependency's capacity), it may hold our own queue: drain to an eighth of
        // that in-flight and learn it again, once. Full means on average, not at a peak:
        // a burst that touches the limit of a service at half its capacity (a mean
        // in-flight of a fifth of it) queues nothing of ours, and a drain would refuse
        // its load for the windows slow start takes to come back.
        let learned_at = self.ss.warm_inflight as f64;
        // (The first window has no duration, so this one's mean counts too.)
        let now_mean = if dur > 0 && w.drops == 0 {
            w.samples as f64 * w.avg_ns as f64 / dur as f64
        } else {
            f64::MAX
        };
        let mean = now_mean.min(self.ss.warm_mean as f64);
        let held = mean >= QUEUE_FILL * libm::floor(self.cfg.initial_limit);
        self.ss.warm_inflight = 0.0;
        if learned_at + 1.0 > self.cfg.initial_limit && learned_at >= 2.0 && held {
            self.base.value = 0.0;
            self.base.weight = 0.0;
            self.ss.congested = false;
            self.clear_history();
            self.m.rebaselines += 1;
            self.limit = self.clamp(learned_at / 8.0);
            return true;
        }
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn slow_start_doubles_only_a_limit_that_was_reached() {
        // 75% of a 16-slot dependency under the initial limit of 20: a burst to 17 in
        // flight (above 80% of the limit) used to double it to 40, then to 80, far above
        // what the dependency serves; a capacity loss then queued everything admitted.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let w = |now, inflight| Window {
            now,
            samples: 100,
            drops: 0,
            avg_ns: 10 * MS,
            min_ns: 5 * MS,
            p50_ns: 10 * MS,
            p90_ns: 13 * MS,
            p99_ns: 20 * MS,
            max_inflight: inflight,
            inflight,
        };
        assert_eq!(g.update(&w(100 * MS, 17)), 20.0);
        assert!(g.metrics().slow_start);
        // Every permit taken: it doubles.
        assert_eq!(g.update(&w(200 * MS, 20)), 40.0);
        // At 13 in flight, then every permit at once (a capacity loss queues what the
        // dependency served; this window's answers predate it): one window waits.
        assert_eq!(g.update(&w(300 * MS, 13)), 40.0);
        assert_eq!(g.update(&w(400 * MS, 40)), 40.0);
        assert!(g.metrics().slow_start);
        // Still every permit, without the jump: it doubles.
        assert_eq!(g.update(&w(500 * MS, 40)), 80.0);
    }

    /// A window of `samples` answers at `lat_ms` (spread like a constant service time plus
    /// queueing), `max` at most in flight.
    fn plain(now: u64, samples: u32, lat_ms: u64, max: u32) -> Window {
        Window {
            now,
            samples,
            drops: 0,
            avg_ns: lat_ms * MS,
            min_ns: lat_ms * MS * 9 / 10,
            p50_ns: lat_ms * MS,
            p90_ns: lat_ms * MS * 11 / 10,
            p99_ns: lat_ms * MS * 12 / 10,
            max_inflight: max,
            inflight: max / 2,
        }
    }

    #[test]
    fn a_burst_that_touches_the_initial_limit_does_not_drain_it() {
        // A service at half its capacity (4 in flight on average, 40 ms answers) whose
        // bursts touch the initial 20: the first baseline came from windows that reached
        // every permit, but only at a peak. When slow start ends on a burst's queue, the
        // limit follows the gradient; it used to drain to 20 / 8 = 2.5 and refuse or queue
        // the next 300 ms of a healthy load.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        assert_eq!(g.update(&plain(100 * MS, 10, 40, 20)), 40.0);
        assert_eq!(g.update(&plain(200 * MS, 10, 40, 20)), 40.0);
        // A burst's queue (2.5x the baseline, far beyond the noise) ends slow start.
        let l = g.update(&plain(300 * MS, 10, 100, 20));
        assert!(!g.metrics().slow_start);
        assert_eq!(g.metrics().rebaselines, 0);
        assert!(l >= 20.0, "{l}");
    }

    #[test]
    fn a_warm_start_that_held_the_limit_full_drains_and_relearns() {
        // 20 permits held the whole time on a small dependency (its own queue in the first
        // baseline): when slow start ends, the limit drains to an eighth and relearns.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        // 20 in flight for 100 ms at 40 ms: 50 answers.
        assert_eq!(g.update(&plain(100 * MS, 50, 40, 20)), 40.0);
        // 40 in flight at 80 ms (50 answers, twice the latency) ends slow start.
        assert_eq!(g.update(&plain(200 * MS, 50, 80, 40)), 2.5);
        assert_eq!(g.metrics().rebaselines, 1);
        assert_eq!(g.baseline_ns(), 0);
    }
}
