//! Envoy's adaptive-concurrency gradient controller, plus a probe-free baseline.
//!
//! See [`Gradient`] for the state machine.

use super::{check_bounds, Algorithm, Window};
use crate::rng::SplitMix64;
use crate::time::Monotonic;
use crate::types::check_range;
use crate::ConfigError;

// Envoy gradient_controller.cc: the gradient is clamped to [0.5, 2.0] (research/limiters.md §3).
const MIN_GRADIENT: f64 = 0.5;
const MAX_GRADIENT: f64 = 2.0;
// Envoy PR #10647: re-measure minRTT after 5 consecutive windows at the floor.
const FLOOR_WINDOWS_BEFORE_PROBE: u32 = 5;

// Probe-free baseline, "flat test" (our design, DESIGN.md "Gradient"): two recent windows whose
// mean in-flight differs by at least FLAT_SPAN while the latency statistic moved by less than
// (span)^FLAT_ELASTICITY are below the knee of the dependency; their latency is uncongested.
const FLAT_HISTORY: usize = 8;
const FLAT_MIN_SAMPLES: u32 = 10; // NCL WindowedLimit minimum window size
const FLAT_HORIZON_NS: u64 = 2 * crate::time::SEC;

/// Configuration of [`Gradient`].
///
/// Every field is a plain number so that bindings can fill it in; `Default` is the tuned
/// probe-free controller, [`GradientConfig::envoy`] is Envoy parity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientConfig {
    /// The limit before any window.
    pub initial_limit: f64,
    /// Floor. May be below 1 (a fractional limit admits that fraction).
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
    /// Latency allowance over the baseline before the gradient falls below 1
    /// (Envoy `buffer`, default there 25%). Range `[0, 10]`.
    pub buffer: f64,
    /// Multiplier of the `sqrt` headroom (Envoy: 1, unconfigurable). Range `[0, 10]`.
    pub headroom: f64,
    /// Fraction of each computed step applied (Envoy: 1). Range `(0, 1]`.
    pub smoothing: f64,

    /// Which latency percentile of a window is the sample RTT, in `[50, 99]` (Envoy
    /// `sample_aggregate_percentile`, default 50). Exact at 50, 90 and 99, interpolated
    /// linearly between the window's p50/p90/p99 otherwise.
    pub sample_percentile: f64,
    /// Envoy min-RTT re-measurement interval in ns; `0` selects the probe-free baseline.
    pub probe_interval_ns: u64,
    /// Envoy `jitter`: a probe starts in `[interval, interval·(1+jitter))`. Range `[0, 1]`.
    pub probe_jitter: f64,
    /// The limit pinned during a probe (Envoy `min_concurrency`, default 3).
    pub probe_limit: f64,
    /// Samples that end a probe (Envoy `request_count`, default 50).
    pub probe_samples: u32,
    /// A fixed baseline in ns (Envoy PinnedGradientController); `0` disables it.
    pub pinned_baseline_ns: u64,
    /// Multiplicative back-off on a window with drops above `drop_tolerance`; `1` ignores
    /// drops (Envoy). Range `[0.1, 1]`.
    pub backoff: f64,
    /// Fraction of a window's outcomes that may be drops without a back-off. Range `[0, 1)`.
    pub drop_tolerance: f64,
    /// Double the limit per uncongested window until the first congestion signal.
    pub slow_start: bool,
    /// No growth while the window's most in-flight is below `ratio · limit`; `0` disables.
    /// Range `[0, 1]`.
    pub app_limited_ratio: f64,
    /// Seed of the probe jitter.
    pub seed: u64,
}

impl Default for GradientConfig {
    fn default() -> Self {
        Self {
            initial_limit: 10.0,
            min_limit: 1.0,
            max_limit: 1000.0, // Envoy max_concurrency_limit default
            buffer: 0.1,
            headroom: 0.5,
            smoothing: 0.3,
            sample_percentile: 50.0, // Envoy default
            probe_interval_ns: 0,
            probe_jitter: 0.15, // Envoy default
            probe_limit: 3.0,   // Envoy min_concurrency default
            probe_samples: 50,  // Envoy request_count default
            pinned_baseline_ns: 0,
            backoff: 0.9, // NCL AIMD / congestion-limiter back-off ratio
            drop_tolerance: 0.01,
            slow_start: true,
            app_limited_ratio: 0.8, // congestion-limiter AIMD min utilisation
            seed: 0x5eed_9ad1_e47,
        }
    }
}

impl GradientConfig {
    /// Envoy's controller with its defaults (research/limiters.md §3): probe every
    /// `interval_ns` (+ up to 15% jitter) pinned at 3 for 50 samples, buffer 25%, p50, limit
    /// 3..1000, starting inside a probe; no drop back-off, slow start or app-limited guard.
    pub fn envoy(interval_ns: u64) -> Self {
        Self {
            initial_limit: 3.0,
            min_limit: 3.0,
            max_limit: 1000.0,
            buffer: 0.25,
            headroom: 1.0,
            smoothing: 1.0,
            probe_interval_ns: interval_ns,
            backoff: 1.0,
            drop_tolerance: 0.0,
            slow_start: false,
            app_limited_ratio: 0.0,
            ..Self::default()
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_bounds(self.min_limit, self.initial_limit, self.max_limit)?;
        check_range(self.buffer, 0.0, 10.0, "buffer")?;
        check_range(self.headroom, 0.0, 10.0, "headroom")?;
        check_range(self.smoothing, 0.01, 1.0, "smoothing")?;
        check_range(self.sample_percentile, 50.0, 99.0, "sample_percentile")?;
        check_range(self.probe_jitter, 0.0, 1.0, "probe_jitter")?;
        check_range(self.probe_limit, 1e-6, 1e9, "probe_limit")?;
        check_range(self.backoff, 0.1, 1.0, "backoff")?;
        check_range(self.drop_tolerance, 0.0, 0.999, "drop_tolerance")?;
        check_range(self.app_limited_ratio, 0.0, 1.0, "app_limited_ratio")?;
        if self.probe_interval_ns > 0 {
            if self.probe_interval_ns < crate::time::MS {
                // Envoy: interval must be at least 1 ms.
                return Err(ConfigError::OutOfRange("probe_interval_ns"));
            }
            if self.probe_interval_ns > u64::MAX / 4 {
                return Err(ConfigError::OutOfRange("probe_interval_ns"));
            }
            if self.probe_samples == 0 {
                return Err(ConfigError::OutOfRange("probe_samples"));
            }
        }
        Ok(())
    }
}

/// A snapshot of a [`Gradient`]'s state and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradientMetrics {
    /// The current limit.
    pub limit: f64,
    /// The baseline (no-load latency) in ns; 0 before the first measurement.
    pub baseline_ns: u64,
    /// The last window's sample RTT in ns.
    pub sample_ns: u64,
    /// The last gradient applied (1 when none).
    pub gradient: f64,
    /// Windows folded.
    pub windows: u64,
    /// Back-offs caused by drops.
    pub backoffs: u64,
    /// Probe-free: times the baseline was raised by the flat test.
    pub rebaselines: u64,
    /// Probe mode: min-RTT measurements completed.
    pub probes: u64,
    /// Still in slow start.
    pub slow_start: bool,
    /// A min-RTT measurement is under way (the limit is pinned).
    pub probing: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Point {
    at: u64,
    inflight: f64,
    stat: f64,
}

#[derive(Clone, Copy, Debug)]
struct Probe {
    deferred_limit: f64,
    skip_windows: u32,
    samples: u64,
    weighted_sum: f64,
}

/// Envoy's adaptive-concurrency gradient controller (research/limiters.md §3), with a
/// probe-free baseline as the default (DESIGN.md "Gradient").
///
/// STUB DOC: filled in below once tuned.
#[derive(Clone, Debug)]
pub struct Gradient {
    cfg: GradientConfig,
    limit: f64,
    baseline: f64,
    clock: Monotonic,
    last_at: u64,
    prev_stat: f64,
    history: [Point; FLAT_HISTORY],
    history_len: usize,
    history_next: usize,
    slow_start: bool,
    floor_windows: u32,
    probe: Option<Probe>,
    next_probe_at: u64,
    rng: SplitMix64,
    m: GradientMetrics,
    baseline_n: u32,
    resume_at: f64,
}

impl Gradient {
    /// Builds it, validating the config.
    pub fn new(config: &GradientConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut g = Self {
            cfg: *config,
            limit: config.initial_limit,
            baseline: config.pinned_baseline_ns as f64,
            clock: Monotonic::new(),
            last_at: 0,
            prev_stat: 0.0,
            history: [Point::default(); FLAT_HISTORY],
            history_len: 0,
            history_next: 0,
            slow_start: config.slow_start,
            floor_windows: 0,
            probe: None,
            next_probe_at: 0,
            rng: SplitMix64::new(config.seed),
            m: GradientMetrics::default(),
            baseline_n: 0,
            resume_at: 0.0,
        };
        if g.probing_mode() {
            // Envoy: the controller starts inside a minRTT window.
            g.start_probe(0);
        }
        g.m.gradient = 1.0;
        Ok(g)
    }

    /// A snapshot of the state and counters.
    pub fn metrics(&self) -> GradientMetrics {
        GradientMetrics {
            limit: self.limit,
            baseline_ns: self.baseline as u64,
            slow_start: self.slow_start,
            probing: self.probe.is_some(),
            ..self.m
        }
    }

    /// The current baseline (no-load latency) in ns; 0 before the first measurement.
    pub fn baseline_ns(&self) -> u64 {
        self.baseline as u64
    }

    fn probing_mode(&self) -> bool {
        self.cfg.pinned_baseline_ns == 0 && self.cfg.probe_interval_ns > 0
    }

    fn clamp(&self, x: f64) -> f64 {
        x.max(self.cfg.min_limit).min(self.cfg.max_limit)
    }

    fn stat(&self, w: &Window) -> f64 {
        let p = self.cfg.sample_percentile;
        let (p50, p90, p99) = (w.p50_ns as f64, w.p90_ns as f64, w.p99_ns as f64);
        let s = if p <= 90.0 {
            p50 + (p - 50.0) / 40.0 * (p90 - p50)
        } else {
            p90 + (p - 90.0) / 9.0 * (p99 - p90)
        };
        s.max(1.0)
    }

    fn start_probe(&mut self, now: u64) {
        let deferred = match self.probe {
            Some(p) => p.deferred_limit,
            None => self.limit,
        };
        self.probe = Some(Probe {
            deferred_limit: deferred,
            // Envoy discards samples of requests started before the measurement epoch
            // (PR #11579); a window that closes right after the pin holds mostly such requests.
            skip_windows: if now == 0 { 0 } else { 1 },
            samples: 0,
            weighted_sum: 0.0,
        });
        self.floor_windows = 0;
        self.limit = deferred.min(self.cfg.probe_limit).max(self.cfg.min_limit.min(deferred));
    }

    fn schedule_probe(&mut self, now: u64) {
        let interval = self.cfg.probe_interval_ns;
        // Envoy: interval + random % ceil(interval · jitter).
        let span = libm::ceil(interval as f64 * self.cfg.probe_jitter) as u64;
        let jitter = if span > 0 { self.rng.below(span) } else { 0 };
        self.next_probe_at = now.saturating_add(interval).saturating_add(jitter);
    }

    /// Probe mode: one window of a min-RTT measurement. Returns true while still probing.
    fn fold_probe(&mut self, now: u64, w: &Window) -> bool {
        let Some(mut p) = self.probe else { return false };
        if p.skip_windows > 0 {
            p.skip_windows -= 1;
        } else if w.samples > 0 {
            p.samples += w.samples as u64;
            p.weighted_sum += self.stat(w) * w.samples as f64;
        }
        if p.samples >= self.cfg.probe_samples as u64 {
            self.baseline = p.weighted_sum / p.samples as f64;
            self.limit = p.deferred_limit;
            self.probe = None;
            self.m.probes += 1;
            self.schedule_probe(now);
            false
        } else {
            self.probe = Some(p);
            true
        }
    }

    /// Probe-free: folds one window's statistic into the baseline.
    fn track_baseline(&mut self, now: u64, dur: u64, w: &Window, stat: f64) {
        let total = w.samples + w.drops;
        if self.baseline <= 0.0 {
            self.baseline = stat;
            self.baseline_n = 1;
        } else if (w.drops as u64) * 10 <= total as u64 {
            // The window's median says the uncongested median is at most `stat` plus two
            // standard errors (queueing only adds latency). Standard error of a sample median:
            // 1.25·σ/√n, with σ, the log-spread, read from the window's own p50..p90.
            let spread = libm::log((w.p90_ns.max(1) as f64) / (w.p50_ns.max(1) as f64)) / 1.2816;
            let se = 1.2533 * spread / libm::sqrt(w.samples as f64);
            let bound = stat * (1.0 + 2.0 * se);
            if bound < self.baseline {
                // Clearly below: the dependency got faster.
                self.baseline = stat;
                self.baseline_n = 1;
            } else if self.baseline_n < BASELINE_WINDOWS && stat <= self.baseline * (1.0 + 2.0 * se)
            {
                // Indistinguishable from the baseline: average it in (refines the estimate;
                // a window with a real queue is further out and never counts).
                self.baseline_n += 1;
                self.baseline += (stat - self.baseline) / self.baseline_n as f64;
            }
        }
        self.prev_stat = stat;
        if w.samples < FLAT_MIN_SAMPLES || dur == 0 {
            return;
        }
        // Little's law: mean successful requests in flight during the window.
        let inflight = w.samples as f64 * w.avg_ns as f64 / dur as f64;
        let here = Point { at: now, inflight, stat };
        let raise_above = self.baseline * (1.0 + self.cfg.buffer);
        for i in 0..self.history_len {
            let h = self.history[i];
            if now.saturating_sub(h.at) > FLAT_HORIZON_NS {
                continue;
            }
            let (lo, hi) = if h.inflight < here.inflight { (h, here) } else { (here, h) };
            if lo.inflight <= 0.0 {
                continue;
            }
            let span = hi.inflight / lo.inflight;
            if span >= FLAT_SPAN && hi.stat <= lo.stat * libm::pow(span, FLAT_ELASTICITY) {
                // Latency ignored a large change in concurrency: the low end is uncongested.
                if lo.stat > raise_above {
                    // The dependency served `hi.inflight` without queueing: resume there.
                    self.resume_at = hi.inflight;
                    self.baseline = lo.stat;
                    self.baseline_n = 1;
                    self.m.rebaselines += 1;
                    self.history_len = 0;
                    self.history_next = 0;
                    return;
                }
            }
        }
        self.history[self.history_next] = here;
        self.history_next = (self.history_next + 1) % FLAT_HISTORY;
        if self.history_len < FLAT_HISTORY {
            self.history_len += 1;
        }
    }
}

const FLAT_SPAN: f64 = 1.4;
const BASELINE_WINDOWS: u32 = 16;
const FLAT_ELASTICITY: f64 = 0.2;

/// The headroom added to `x = limit · gradient`: Envoy's `sqrt(x)`, scaled down below 1 so
/// that fractional limits can still shrink (`x·sqrt(x)` there; continuous at 1).
fn headroom(x: f64) -> f64 {
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
        let dur = if self.last_at > 0 { now - self.last_at } else { 0 };
        self.last_at = now;
        self.m.windows += 1;

        if self.probe.is_some() && self.fold_probe(now, w) {
            return self.limit;
        }

        let total = w.samples as u64 + w.drops as u64;
        if w.drops > 0 && w.drops as f64 > self.cfg.drop_tolerance * total as f64 {
            if self.cfg.backoff < 1.0 {
                self.limit = self.clamp(self.limit * self.cfg.backoff);
                self.slow_start = false;
                self.m.backoffs += 1;
                self.prev_stat = 0.0;
                return self.limit;
            }
        }
        if w.samples == 0 {
            return self.limit;
        }
        let stat = self.stat(w);
        self.m.sample_ns = stat as u64;
        if self.cfg.pinned_baseline_ns == 0 && !self.probing_mode() {
            self.track_baseline(now, dur, w, stat);
        }
        if self.baseline <= 0.0 {
            return self.limit;
        }

        let l = self.limit;
        let base = if self.cfg.probe_interval_ns == 0 && self.cfg.pinned_baseline_ns == 0 {
            self.baseline.min(stat)
        } else {
            self.baseline
        };
        let g = (base * (1.0 + self.cfg.buffer) / stat).clamp(MIN_GRADIENT, MAX_GRADIENT);
        self.m.gradient = g;
        let mut new = if self.slow_start && g >= 1.0 {
            l * 2.0
        } else {
            self.slow_start = false;
            let target = l * g + self.cfg.headroom * headroom(l * g);
            l + self.cfg.smoothing * (target - l)
        };
        if new > l && (w.max_inflight as f64) < self.cfg.app_limited_ratio * l {
            new = l;
        }
        if self.resume_at > 0.0 {
            new = new.max(self.resume_at);
            self.resume_at = 0.0;
        }
        self.limit = self.clamp(new);

        if self.probing_mode() {
            if self.limit <= self.cfg.min_limit {
                self.floor_windows += 1;
            } else {
                self.floor_windows = 0;
            }
            if self.floor_windows >= FLOOR_WINDOWS_BEFORE_PROBE || now >= self.next_probe_at {
                self.start_probe(now);
            }
        }
        self.limit
    }

    fn name(&self) -> &'static str {
        "gradient"
    }
}
