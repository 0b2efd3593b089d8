//! Envoy's adaptive-concurrency gradient controller, plus a probe-free baseline.
//!
//! See [`Gradient`] for the state machine, and `core/tests/convergence.rs` for the
//! closed-loop scenarios its defaults were tuned on.

use super::{bound_paths, check_bounds, Algorithm, Window};
use crate::rng::SplitMix64;
use crate::time::{Monotonic, MS, SEC};
use crate::types::check_range;
use crate::ConfigError;

// Envoy gradient_controller.cc: the gradient is clamped to [0.5, 2.0].
const MIN_GRADIENT: f64 = 0.5;
const MAX_GRADIENT: f64 = 2.0;
// Envoy PR #10647: re-measure minRTT after 5 consecutive windows at the floor.
const FLOOR_WINDOWS_BEFORE_PROBE: u32 = 5;

// Probe-free baseline (our design; constants tuned in convergence.rs).
// The baseline is a sample-weighted mean of up to this many samples from windows that are
// statistically indistinguishable from it, then freezes (so windows with a small queue cannot
// ratchet it up).
const BASELINE_SAMPLES: f64 = 2000.0;
// One-sigma error of a histogram quantile (stats: bucket error <= 3.1%).
const QUANTILE_SE: f64 = 0.02;
// A window needs this many samples to move the baseline or join the flat test
// (NCL WindowedLimit's minimum window size).
const MIN_SAMPLES: u32 = 10;
// A window whose drops exceed 1/DROP_SHARE_DIVISOR of its outcomes never lowers the baseline:
// a burst of fast rejections must not poison it.
const DROP_SHARE_DIVISOR: u64 = 10;
// Flat test: two operating points whose mean in-flight differs by at least FLAT_SPAN while
// the latency moved by less than span^FLAT_ELASTICITY are below the dependency's knee (a
// queue would have moved latency in proportion to in-flight, elasticity 1).
const FLAT_SPAN: f64 = 1.4;
const FLAT_ELASTICITY: f64 = 0.2;
const FLAT_HISTORY: usize = 8;
// Latency moving faster than concurrency (elasticity above 1) is not our queue's doing: a
// dependency that did not change serves at least as much at a higher concurrency (it is
// work-conserving), so by Little's law our own queue moves latency at most in proportion
// to in-flight. Beyond it the dependency's throughput fell as in-flight rose: it changed.
const FLAT_CHANGE: f64 = 1.0;
// The flat test's fit: at least this many history points (the newest window included).
const FLAT_FIT_POINTS: usize = 4;
const FLAT_HORIZON_NS: u64 = 4 * SEC;
// A window becomes a history point only this long after the previous point, or when its
// in-flight moved by FLAT_STEP (natural log) from it, so the points span distinct operating
// points over seconds and a slow drift is caught as well as a sharp cut.
const FLAT_SPACING_NS: u64 = 200 * MS;
const FLAT_STEP: f64 = 0.1;

// Upward probe (our design, the counterpart of Envoy's downward minRTT probe): a limit that
// binds without drops or clear congestion is, after UP_POOL_SAMPLES samples over at least
// UP_POOL_WINDOWS consecutive such windows, raised
// by UP_SPAN for a window; if latency did not rise with in-flight (elasticity below
// FLAT_ELASTICITY, beyond noise) the higher limit stays and the baseline is re-learned at
// the lower point. A failed probe doubles the wait before the next one, from UP_WAIT_NS up
// to UP_WAIT_MAX_NS, so a limit at a real knee pays one short probe per minute.
const UP_SPAN: f64 = 1.3;
const UP_MIN_SPAN: f64 = 1.2;
const UP_POOL_SAMPLES: f32 = 300.0;
const UP_POOL_WINDOWS: u8 = 5;
const UP_WAIT_NS: u64 = 4 * SEC;
const UP_WAIT_MAX_NS: u64 = 64 * SEC;
const UP_PROBE_WINDOWS: u8 = 3;
// A probe whose latency rose by less than this elasticity (beyond one standard error)
// straddled the knee: the lower point queued little.
const UP_PARTIAL_ELASTICITY: f64 = 0.7;

// Drops that do not respond to back-off (our design; constants tuned
// in convergence.rs). A back-off episode pools the windows from where it began until
// in-flight fell by FLAT_SPAN (up to EPISODE_OUTCOMES outcomes), then the windows there,
// without further cuts, until EPISODE_OUTCOMES outcomes over EPISODE_WINDOWS windows (the
// first window after a cut still answers requests admitted before it).
const EPISODE_OUTCOMES: f32 = 60.0;
const EPISODE_WINDOWS: u8 = 3;
// A dependency that fails most calls whatever our concurrency is down, not slow: no hold.
const HOLD_MAX_SHARE: f64 = 0.5;
// Memory, in outcomes, of the intrinsic drop share's moving average.
const INTRINSIC_MEMORY: f64 = 200.0;
// Memory, in samples, of the windows' typical log-spread.
const SIGMA_MEMORY: f64 = 500.0;
// A window that reached the limit only at a burst, its mean in-flight (Little's law, drop-free
// windows only) below this share of the whole permits, holds no standing queue of ours: a
// limit that binds by design keeps in-flight at the limit all window long.
const QUEUE_FILL: f64 = 0.85;

/// Configuration of [`Gradient`].
///
/// Every field is a plain number, so that bindings can fill it in. `Default` is the
/// probe-free controller tuned on the closed-loop scenarios; [`GradientConfig::envoy`] is
/// Envoy parity. Which baseline is used:
///
/// - `pinned_baseline_ns > 0`: that fixed value (Envoy's PinnedGradientController);
/// - else `probe_interval_ns > 0`: Envoy's jittered min-RTT probe;
/// - else the probe-free baseline (the default).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradientConfig {
    /// The limit before any window.
    pub initial_limit: f64,
    /// Floor. May be below 1 (a fractional limit admits that fraction).
    pub min_limit: f64,
    /// Ceiling.
    pub max_limit: f64,
    /// Latency allowance over the baseline before the gradient falls below 1 (Envoy
    /// `buffer`, 25% there). Range `[0, 10]`.
    pub buffer: f64,
    /// Multiplier of the `sqrt(limit · gradient)` headroom (Envoy: 1, not configurable
    /// there). Range `[0, 10]`.
    pub headroom: f64,
    /// Fraction of each computed step that is applied, `L += smoothing · (target − L)`
    /// (Envoy: 1). Range `[0.01, 1]`.
    pub smoothing: f64,
    /// The latency percentile of a window used as the sample RTT, in `[50, 99]` (Envoy
    /// `sample_aggregate_percentile`, default 50). Exact at 50, 90 and 99; in between,
    /// interpolated linearly between the window's p50, p90 and p99.
    pub sample_percentile: f64,
    /// Envoy's min-RTT re-measurement interval in ns (at least 1 ms); `0` selects the
    /// probe-free baseline.
    pub probe_interval_ns: u64,
    /// Envoy `jitter`: each probe starts in `[interval, interval·(1 + jitter))`. Range `[0, 1]`.
    pub probe_jitter: f64,
    /// The limit pinned during a probe, at most the current limit (Envoy
    /// `min_concurrency`, default 3; PR #46602 clamps it to the current limit).
    pub probe_limit: f64,
    /// Samples that end a probe (Envoy `request_count`, default 50).
    pub probe_samples: u32,
    /// A fixed baseline in ns (Envoy PinnedGradientController); `0` disables it.
    pub pinned_baseline_ns: u64,
    /// Multiplicative back-off on a window whose drops exceed `drop_tolerance`; `1` ignores
    /// drops (Envoy). Deeper when most of the window dropped and at least half the limit
    /// was in flight: `min(backoff, 1 − share/2)`.
    /// Range `[0.1, 1]`.
    pub backoff: f64,
    /// Share of a window's outcomes that may be drops without a back-off. Range `[0, 0.999]`.
    /// Probe-free, drops found not to respond to back-off add their share on top (see
    /// [`Gradient`], step 2).
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
    /// The probe-free controller. `buffer`, `headroom` and `smoothing` were tuned in
    /// `core/tests/convergence.rs`. Envoy's 25% buffer with the full `sqrt` headroom settles
    /// near 1.55× the uncongested median; after a dependency slowdown that keeps p99 above
    /// 2× the new base latency. `buffer 0.1, headroom 0.8` keeps a standing queue of about
    /// `0.1·C + 0.8·sqrt(C)` requests (enough for ~99.5% goodput under Poisson arrivals at
    /// 150% load; 0.4 kept ~99% there, but refused the bursts of a long-tailed or bimodal
    /// dependency at 80% load), and smoothing 0.3 damps window-to-window noise.
    /// `app_limited_ratio 0.6`: a limit grows only while a window used 60% of it (the
    /// congestion-limiter AIMD's 0.8 held the limit about 1.25× above the usual peak, and
    /// the rarer bursts of a long-tailed dependency met it).
    ///
    /// **Warm-up.** The limit starts at 20 (Netflix concurrency-limits' initial limit), so a
    /// freshly started service admits a modest load at once instead of refusing, or
    /// queueing and CoDel-sloughing, all but one request of its first second. Slow start
    /// then doubles it per window (100 ms at least) while latency stays at the baseline and
    /// the window took every permit.
    /// If every window the first baseline came from held those 20 permits full (on
    /// average, not only at a burst's peak), the dependency may have been queueing
    /// already: when slow start ends, the limit drains once to an eighth of that and the
    /// baseline is learned again. A service that expects
    /// `n` concurrent requests sets `initial_limit: n` (a few more for Poisson bursts).
    fn default() -> Self {
        Self {
            // Netflix concurrency-limits' initial limit: a fresh service admits a modest
            // load at once; slow start doubles it from there (see "Warm-up" below).
            initial_limit: 20.0,
            min_limit: 1.0,
            max_limit: 1000.0, // Envoy max_concurrency_limit default
            buffer: 0.1,
            headroom: 0.8,
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
            app_limited_ratio: 0.6,
            seed: 0x5EED_5EED_5EED_5EED,
        }
    }
}

impl GradientConfig {
    /// Envoy's controller with its defaults (Envoy's adaptive_concurrency filter docs): a min-RTT probe
    /// every `interval_ns` plus up to 15% jitter, pinned at 3 for 50 samples; buffer 25%;
    /// sample p50; limit 3..1000 starting inside a probe; full `sqrt` headroom, no
    /// smoothing; drops, slow start and the app-limited guard off (Envoy has none).
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
        check_bounds(self.min_limit, self.initial_limit, self.max_limit, bound_paths!("gradient"))?;
        check_range(self.buffer, 0.0, 10.0, "limiter.gradient.buffer")?;
        check_range(self.headroom, 0.0, 10.0, "limiter.gradient.headroom")?;
        check_range(self.smoothing, 0.01, 1.0, "limiter.gradient.smoothing")?;
        check_range(self.sample_percentile, 50.0, 99.0, "limiter.gradient.sample_percentile")?;
        check_range(self.probe_jitter, 0.0, 1.0, "limiter.gradient.probe_jitter")?;
        check_range(self.probe_limit, 1e-6, 1e9, "limiter.gradient.probe_limit")?;
        check_range(self.backoff, 0.1, 1.0, "limiter.gradient.backoff")?;
        check_range(self.drop_tolerance, 0.0, 0.999, "limiter.gradient.drop_tolerance")?;
        check_range(self.app_limited_ratio, 0.0, 1.0, "limiter.gradient.app_limited_ratio")?;
        if self.pinned_baseline_ns > 3600 * SEC {
            return Err(ConfigError::out_of_range("limiter.gradient.pinned_baseline_ns"));
        }
        if self.probe_interval_ns > 0 {
            // Envoy: the interval is at least 1 ms; a day bounds the jitter arithmetic.
            if self.probe_interval_ns < MS || self.probe_interval_ns > 86_400 * SEC {
                return Err(ConfigError::out_of_range("limiter.gradient.probe_interval_ns"));
            }
            if self.probe_samples == 0 || self.probe_samples > 1_000_000 {
                return Err(ConfigError::out_of_range("limiter.gradient.probe_samples"));
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

/// Windows of one operating point of a back-off episode, pooled: the most in flight, the
/// outcomes and drops, and the sample-weighted log statistic.
#[derive(Clone, Copy, Debug, Default)]
struct Pool {
    inflight: f32,
    outcomes: f32,
    drops: f32,
    samples: f32,
    log_stat: f32,
}

impl Pool {
    fn of(w: &Window, stat: f64) -> Self {
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

    fn add(&mut self, o: &Pool) {
        self.inflight = self.inflight.max(o.inflight);
        self.outcomes += o.outcomes;
        self.drops += o.drops;
        self.samples += o.samples;
        self.log_stat += o.log_stat;
    }

    fn share(&self) -> f64 {
        (self.drops / self.outcomes.max(1.0)) as f64
    }

    /// The pooled statistic in log space, and its standard error for log-spread `sigma`.
    fn log_median(&self, sigma: f64) -> (f64, f64) {
        let n = self.samples.max(1.0) as f64;
        (self.log_stat as f64 / n, median_se(sigma, n))
    }
}

/// The operating point an upward probe starts from: bound, drop-free windows pooled.
#[derive(Clone, Copy, Debug, Default)]
struct UpPool {
    /// Sum over windows of mean in-flight × samples (Little's law per window).
    inflight: f32,
    samples: f32,
    log_stat: f32,
    windows: u8,
}

impl UpPool {
    fn mean_inflight(&self) -> f64 {
        (self.inflight / self.samples.max(1.0)) as f64
    }
    fn log_mean(&self) -> f64 {
        (self.log_stat / self.samples.max(1.0)) as f64
    }
}

/// One operating point of the flat test: mean in-flight and sample RTT of a window
/// (`f32`: ratios are all the test needs, and the limiter stores the algorithm by value).
#[derive(Clone, Copy, Debug, Default)]
struct Point {
    at: u32,
    inflight: f32,
    stat: f32,
    se: f32,
    weight: f32,
}

/// An Envoy min-RTT measurement under way.
#[derive(Clone, Copy, Debug)]
struct Probe {
    deferred_limit: f64,
    skip_windows: u32,
    samples: u64,
    weighted_sum: f64,
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
/// Phases: **slow start** → **steady**, plus **probing** in probe mode. Every window:
///
/// 1. *Probing* (probe mode only): the limit is pinned at `min(L, probe_limit)`. The first
///    window after the pin is discarded, because it holds requests admitted before the pin
///    (Envoy's min-RTT epoch rule, PR #11579). Further windows accumulate until
///    `probe_samples` samples. Then `B` is their sample-weighted statistic, the deferred
///    limit comes back, and the next probe is scheduled at
///    `now + interval + U[0, interval·jitter)` from the seeded SplitMix64. A probe also
///    starts after 5 consecutive windows at the floor (Envoy PR #10647). Drops are ignored
///    while probing.
/// 2. *Drops*: if drops exceed the window's allowance (`drop_tolerance` of its outcomes,
///    plus the intrinsic share below) and `backoff < 1`, then `L ×= min(backoff, 1 − d/2)`,
///    `d` the window's drop share (a window of fewer than 10 outcomes counts as 10; a limit
///    more than twice the window's most in flight takes `backoff` only), and
///    nothing else happens this window: 10% for a stray timeout, a halving when every
///    outcome dropped (a dependency that lost three quarters of its capacity is followed
///    in about a second instead of three). Slow start ends unless the window is tiny (< 10 outcomes),
///    so one stray timeout at a limit near 1 does not, or its drops are those of requests
///    admitted under a higher limit before a cut. The tolerance keeps timeouts from a heavy
///    latency tail from collapsing the limit.
///
///    **Drops that do not respond to back-off** (probe-free). By Little's law a dependency
///    that got uniformly slower with the same parallelism needs the *same* concurrency, and
///    if the caller's timeout cuts its slower tail, a share of the calls times out whatever
///    the concurrency. Backing off then only lowers throughput. So each back-off starts an
///    *episode* that tests whether the drops are ours:
///    - it pools the windows from where it began (up to 60 outcomes) until in-flight
///      (the windows' `max_inflight`) fell by 1.4×; then, without further cuts, at least 60
///      outcomes over at least 3 windows at the lower point (the first window after a cut
///      still answers requests admitted before it). If in-flight rises again first, the
///      lower point starts afresh and cuts resume;
///    - if the drop share or the pooled latency fell by more than two standard errors
///      (binomial; median in log space), the back-off helped: queueing, ours. The lower
///      point becomes the new start and back-off continues. So does it when too little is
///      known, or when more than half the calls at the lower point drop (the dependency is
///      down, not slow);
///    - otherwise the drops and the latency are intrinsic to the dependency. **Hold**: the
///      limit returns to the starting point's in-flight (it did no worse), `B` is re-learned
///      as the lower point's pooled statistic, and the lower point's drop share becomes the
///      *intrinsic share* `p`. From then on the allowance is
///      `drop_tolerance + p + 2·sqrt(p(1 − p)/n)`; `p` follows the windows that do not back
///      off (a moving average over ~200 outcomes, never above the held share) and is
///      dropped when the dependency gets faster. Windows within the allowance may refine
///      `B`, and those whose in-flight stays at or below the held start may do so even at a
///      binding limit (latency was shown flat up to there).
///
///    Genuine overload shows falling latency and drops as in-flight falls, so it still backs
///    off all the way. An episode older than 4 s is dropped.
/// 3. A window without samples changes nothing.
/// 4. *Baseline*. Pinned: fixed. Probe: the last measurement. **Probe-free** (the default):
///    - `B` is a sample-weighted mean of windows compared in log space, each with the
///      standard error of a median (`1.25·σ/√n`, `σ` read from the window's own p50..p90,
///      plus the histogram's quantile error).
///      `σ` is never taken below the windows' recent typical spread, since a small window
///      often shows a narrow p50..p90 by chance.
///    - Two windows in a row **clearly below** `B` (by more than 2 SE; three while drops
///      are intrinsic, as the answers are then a censored long-tailed sample), or one by
///      more than 4 SE, restart it: the dependency got faster, and queueing only ever adds
///      latency. The flat test's history and what was learned about drops are dropped. If
///      the window is back at the baseline learned before the limit to come back to
///      (step 8) was set, that baseline is restored: one window right after a change
///      favours the short requests. If our limit was binding, that window still holds our
///      queue, so the limit is also cut by the speed-up ratio and slow start resumes, which
///      lets the next windows see the uncongested latency.
///    - A window **indistinguishable** from `B` (within 2 SE) is averaged in, but only
///      if it holds no queue of our making: during slow start, when the limit was not
///      reached, or when it was reached only in a burst (a drop-free window whose mean
///      in-flight, by Little's law, stayed below 85% of the whole permits: a long tail at a
///      modest load). At a binding limit the controller keeps its standing queue by design,
///      in flight all window long.
///      After 2,000 samples `B` freezes, so it cannot ratchet up. Windows with more than
///      10% drops (beyond the intrinsic allowance) never move `B`, so fast rejections
///      cannot poison it.
///    - The **flat test** raises `B` when it is stale. Each window with ≥ 10 samples is an
///      operating point: its mean in-flight `N = samples·avg/duration` (Little's law) and
///      its `S`. Take two points within 4 s whose `N` differ by ≥ 1.4×. If `S` at the higher
///      `N` is at most `span^0.2` times, and no less (beyond noise) than, `S` at the lower,
///      and a queue (`S` in proportion to `N`) is ruled out beyond two standard errors of
///      the pair (windows of a few dozen samples can show a 1.4× queue as flat by chance),
///      then latency is ignoring concurrency: the dependency is below its knee at both
///      points, whatever our limit did. If the low point's `S` is then significantly above
///      `B`, the dependency slowed, or a quiet period passed. `B` becomes the two points'
///      sample-weighted mean (in log space, at most the low point's `S`), and `L` resumes
///      at once at `N_high + headroom·sqrt(N_high)`, a load the dependency has just served
///      without queueing. While drops are intrinsic the low point needs 20 samples. The
///      same question is also asked of all the recent points at once (at least 4): a line
///      fitted to `log S` against `log N`, each point weighted by its `1/SE²`, whose slope
///      is below 1 by 2 SE, not below 0 beyond 2 SE and within 2 SE of 0.2, over a span of
///      1.4×, raises `B` to the fitted latency at the lowest `N` and resumes `L` at the
///      highest `N` plus headroom (after a tenfold slowdown, windows of ~20 samples of a
///      broad latency distribution seldom make a flat pair, and the limit sank for
///      seconds). The history is dropped after a gap of more than 4 s between windows, and
///      whenever a new point's latency differs from an old one's by more than our own queue
///      could explain (elasticity above 1: a dependency that did not change serves at least
///      as much at a higher concurrency; or the wrong sign; beyond noise). That means the
///      dependency itself changed, so old points would make false pairs; the window that
///      shows it straddles the change and is not kept either.
///
///    So a slowdown costs one short, self-limiting cut, which the controller makes anyway,
///    instead of Envoy's periodic pin to 3 and its burst of 503s. The default starts at 20
///    (see [`GradientConfig::default`], "Warm-up").
/// 5. *Gradient*: `g` as above. In probe-free mode `min(B, S)` stands in for `B`, so a
///    stale-high baseline cannot double the limit.
/// 6. *Slow start*: the limit doubles until a window's `S` is clearly (2 SE of the window
///    and of the baseline together) above `B·(1 + buffer)` in two windows in a row (or one
///    beyond 4 SE), or drops (two or more in a window) end it. Otherwise the smoothed step
///    applies. A doubling needs the window to have reached the limit (every whole permit
///    taken; RFC 7661's rule for a window not in use), so a burst at a modest load does not
///    double a limit already far above what the dependency serves, and waits one window
///    when the window's most in flight rose 1.5× over the previous one's (a capacity loss
///    queues at once; the latency of the answers shows it a window later). With the
///    app-limited guard off (`app_limited_ratio = 0`) it doubles regardless.
/// 7. *App-limited guard*: no growth while the window's `max_inflight < app_limited_ratio · L`,
///    unless it reached every whole permit (`max_inflight + 1 > L`: a limiter admits `⌊L⌋`).
/// 8. *Recall* (probe-free): the limit before a cut is remembered, with the baseline of
///    that time, at an episode's first back-off (in steady state, not while drops are
///    intrinsic) and at a speed-up cut. While it is pending, two windows in a row with
///    `S ≤ B·(1 + buffer)` at a binding limit double `L` back towards it (capped there).
///    Reaching it ends the recall, and so does a congested window after such a doubling,
///    so a dependency that really lost capacity costs at most one overshoot. After a
///    slowdown ends, the limit is back at its pre-incident level within a few windows
///    instead of the headroom's slow climb.
/// 9. *Upward probe* (probe-free): **no absorbing state below what the dependency handles.**
///    A limit that binds without drops or clear congestion over at least 5 windows and 300
///    samples (pooled: mean in-flight by Little's law, log-mean statistic) is raised to
///    `max(1.3·L, L + 1)`. The first window whose mean in-flight rose by 1.2× decides: if
///    latency rose by less than `span^0.2` (beyond two standard errors of both sides),
///    the dependency is below its knee at both points, so the higher limit stays, the
///    baseline is re-learned as the pooled lower point (if higher) and slow start resumes.
///    Otherwise (or on any drop) the limit returns to where the probe started and the next
///    probe waits twice as long (4 s, doubling to 64 s), so a limit at a real knee pays
///    one short probe a minute. Once the limit has sunk 1.2× below where a probe last
///    failed, that knee says nothing about the new level and the next probe need not wait.
///    Windows read as congested, but not far beyond noise (4 SE), still pool; the pool
///    forgets its older half once it holds twice what a probe needs.
///
///    **Downward probe** (the same question from the other side). A dependency that keeps
///    getting slower (a slow leak) reads each slower second as congestion against a stale
///    baseline, and the limit sinks below what the dependency serves. So every bound,
///    drop-free window also joins a second pool (restarted when a window's latency differs
///    from it beyond 3 SE: the dependency changed, say lost capacity). When that pool's
///    latency is beyond the one at which the limit holds still (`B·(1 + buffer)/sqrt(g_eq)`,
///    `g_eq = 1 − headroom/sqrt(L)`, plus 2 SE), over 5 windows and 300 samples, the limit
///    is cut by 1.3× for a few windows (the first is skipped: it answers requests admitted
///    before the cut; then 2 windows and 100 samples). Latency that did not fall with
///    in-flight (elasticity below `span^0.2`, beyond 2 SE) is not our queue: the baseline
///    becomes the lower point's. Latency that fell, but clearly less than in proportion
///    (elasticity below 0.7, beyond 1 SE: the cut reached the knee, so the lower point
///    queued little), re-learns the baseline too when the lower point's latency is beyond
///    `B·(1 + buffer)` and 2 SE. Either way the limit returns. A baseline that moved by
///    more than `buffer` is checked again after 4 s; otherwise the wait doubles up to 64 s.
///    But once the limit has sunk 1.2× below where the last downward probe returned it, a
///    queue of ours no longer explains the latency that drags it (our queue shrinks as the
///    limit falls): the next probe need not wait. While a downward probe is under way, its
///    verdict alone moves the baseline (the flat test and the speed-up rule would read its
///    transition windows as a faster or flat dependency). The first probe may start 4 s
///    after the first window (not the first bound one: a dependency that slows under a
///    modest load binds the limit for the first time exactly then).
///    Without it, a baseline learned low (a small first window of
///    a long tail) made every later window read as congested, and a limit of 1 could never
///    show the in-flight spread the flat test needs: the limit stayed at 1 for good.
///    Also: a window with at most one request in flight holds no queue of ours, so it may
///    refine the baseline at any limit, and two such windows clearly above it restart it.
/// 10. Clamp to `[min_limit, max_limit]`.
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
/// 8 history points. No allocation; the state is a fixed ~660 bytes. Sources: Envoy
/// `gradient_controller.cc` and `pinned_gradient_controller.cc`;
/// probe-free baseline, our design; the episode
/// test and the recall are our design, tuned on `core/tests/convergence.rs` (a dependency
/// 10× slower with the caller's timeout in its tail, the simulator's `retry-storm`).
#[derive(Clone, Debug)]
pub struct Gradient {
    cfg: GradientConfig,
    limit: f64,
    baseline: f64,
    baseline_weight: f64,
    clock: Monotonic,
    last_at: u64,
    history: [Point; FLAT_HISTORY],
    history_len: u8,
    history_next: u8,
    slow_start: bool,
    /// The previous window's statistic was within `buffer` of the baseline.
    was_near: bool,
    /// A recall doubling was applied since `recall` was set.
    recalling: bool,
    /// Consecutive windows clearly below the baseline.
    below_run: u8,
    /// Consecutive windows with one request in flight clearly above the baseline.
    above_run: u8,
    /// The previous window was congested during slow start.
    ss_congested: bool,
    /// The previous window's most in flight and the limit in force during it (slow
    /// start's jump check).
    prev_inflight: u32,
    prev_limit: f64,
    /// The least in-flight of the windows the first baseline was learned from (0: none
    /// pending; checked once, when slow start ends).
    base_inflight: f32,
    /// The least mean in-flight of those windows (`f32::MAX`: a window with drops or no
    /// duration, which says nothing about it).
    base_mean: f32,
    /// The warm-start check has been armed (it runs at most once).
    warm_checked: bool,
    /// Upward probe: the pooled starting point, the limit to return to (0: no probe under
    /// way), windows waited for in-flight to rise, and when the next probe may start.
    up_pool: UpPool,
    up_from: f32,
    up_windows: u8,
    up_wait: u64,
    up_next_at: u64,
    /// The limit a probe last failed from (0: none since the last success).
    up_fail_from: f32,
    /// Downward probe: the limit to return to (0: none under way), windows since the cut,
    /// the pooled point before the cut and the pooled point after it.
    dn_from: f32,
    dn_windows: u8,
    dn_ref: UpPool,
    dn_pool: UpPool,
    /// Every bound, drop-free window pooled (congested or not), the wait after a downward
    /// probe found our own queue, and when the next may start.
    dn_acc: UpPool,
    dn_wait: u64,
    dn_next_at: u64,
    /// The limit the last downward probe returned to (0: none since the limit sank below
    /// it).
    dn_last: f32,
    /// Windows pooled on each side of the back-off episode (`ep_ref` empty: none).
    ep_ref_windows: u8,
    ep_low_windows: u8,
    resume_at: f32,
    cut_to: f32,
    /// The limit to come back to (0: none pending), and the baseline when it was set.
    recall: f32,
    recall_base: f32,
    /// Moving average of the windows' log-spread.
    sigma: f32,
    /// The drop share found intrinsic, and its cap (the share measured at the hold).
    intrinsic: f32,
    intrinsic_cap: f32,
    /// The in-flight up to which the last hold found latency and drops flat (0: none).
    flat_upto: f32,
    floor_windows: u32,
    ep_at: u32,
    ep_ref: Pool,
    ep_low: Pool,
    probe: Option<Probe>,
    next_probe_at: u64,
    rng: SplitMix64,
    m: Counters,
}

impl Gradient {
    /// Builds it, validating the config (a bad one returns [`ConfigError`]).
    pub fn new(config: GradientConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut g = Self {
            cfg: config,
            limit: config.initial_limit,
            baseline: config.pinned_baseline_ns as f64,
            baseline_weight: 0.0,
            clock: Monotonic::new(),
            last_at: 0,
            history: [Point::default(); FLAT_HISTORY],
            history_len: 0,
            history_next: 0,
            slow_start: config.slow_start,
            was_near: false,
            recalling: false,
            below_run: 0,
            above_run: 0,
            ss_congested: false,
            prev_inflight: 0,
            prev_limit: 0.0,
            base_inflight: 0.0,
            base_mean: 0.0,
            warm_checked: false,
            up_pool: UpPool::default(),
            up_from: 0.0,
            up_windows: 0,
            up_wait: UP_WAIT_NS,
            up_next_at: 0,
            up_fail_from: 0.0,
            dn_from: 0.0,
            dn_windows: 0,
            dn_ref: UpPool::default(),
            dn_pool: UpPool::default(),
            dn_acc: UpPool::default(),
            dn_wait: UP_WAIT_NS,
            dn_next_at: 0,
            dn_last: 0.0,
            ep_ref_windows: 0,
            ep_low_windows: 0,
            resume_at: 0.0,
            cut_to: 0.0,
            recall: 0.0,
            recall_base: 0.0,
            sigma: 0.0,
            intrinsic: 0.0,
            intrinsic_cap: 0.0,
            flat_upto: 0.0,
            floor_windows: 0,
            ep_at: 0,
            ep_ref: Pool::default(),
            ep_low: Pool::default(),
            probe: None,
            next_probe_at: 0,
            rng: SplitMix64::new(config.seed),
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
            baseline_ns: self.baseline as u64,
            sample_ns: self.m.sample_ns,
            gradient: self.m.gradient as f64,
            windows: self.m.windows,
            backoffs: self.m.backoffs,
            rebaselines: self.m.rebaselines,
            probes: self.m.probes,
            holds: self.m.holds,
            intrinsic_drop_share: self.intrinsic as f64,
            recall_limit: self.recall as f64,
            slow_start: self.slow_start,
            probing: self.probe.is_some(),
        }
    }

    /// The current baseline (uncongested sample RTT) in ns; 0 before the first measurement.
    pub fn baseline_ns(&self) -> u64 {
        self.baseline as u64
    }

    fn probe_free(&self) -> bool {
        self.cfg.pinned_baseline_ns == 0 && self.cfg.probe_interval_ns == 0
    }

    fn probing_mode(&self) -> bool {
        self.cfg.pinned_baseline_ns == 0 && self.cfg.probe_interval_ns > 0
    }

    fn clamp(&self, x: f64) -> f64 {
        x.max(self.cfg.min_limit).min(self.cfg.max_limit)
    }

    /// The window's sample RTT: the configured percentile, interpolated between p50, p90, p99.
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

    fn start_probe(&mut self, skip_windows: u32) {
        self.probe =
            Some(Probe { deferred_limit: self.limit, skip_windows, samples: 0, weighted_sum: 0.0 });
        self.floor_windows = 0;
        self.limit = self.clamp(self.limit.min(self.cfg.probe_limit));
    }

    fn schedule_probe(&mut self, now: u64) {
        let interval = self.cfg.probe_interval_ns;
        // Envoy: interval + random % ceil(interval · jitter).
        let span = libm::ceil(interval as f64 * self.cfg.probe_jitter) as u64;
        let jitter = if span > 0 { self.rng.below(span) } else { 0 };
        self.next_probe_at = now.saturating_add(interval).saturating_add(jitter);
    }

    /// Probe mode: folds one window into the measurement. True while still probing.
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

    /// Probe-free: folds one window's statistic into the baseline (state machine step 4).
    /// `allowance` is the drop share the window may carry and still count as answers.
    fn track_baseline(&mut self, now: u64, dur: u64, w: &Window, stat: f64, allowance: f64) {
        if self.dn_from > 0.0 {
            // A downward probe is under way: its verdict is the test (the flat test and the
            // speed-up rule would read its transition windows).
            return;
        }
        let total = w.samples as u64 + w.drops as u64;
        // Up to the intrinsic share (drops found not to respond to back-off), drops are the
        // dependency's tail, not fast rejections.
        let mostly_answers = w.drops as u64 * DROP_SHARE_DIVISOR <= total
            || (self.intrinsic > 0.0 && w.drops as f64 <= allowance * total as f64);
        let n = w.samples as f64;
        // The window's own spread, but never below the recent typical one: a small window
        // often shows a narrow p50..p90 by chance.
        let own = log_spread(w);
        if w.samples >= MIN_SAMPLES {
            let s = self.sigma as f64;
            self.sigma = (s + (own - s) * n / (n + SIGMA_MEMORY)) as f32;
        }
        let sigma = own.max(self.sigma as f64);
        let bound = !self.slow_start && w.max_inflight as f64 + 1.0 > self.limit;
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
            && w.max_inflight as f32 > self.flat_upto
            && !alone
            && mean_inflight >= QUEUE_FILL * libm::floor(self.limit);
        if self.baseline <= 0.0 {
            self.baseline = stat;
            self.baseline_weight = n;
            if !self.warm_checked {
                self.warm_checked = true;
                self.base_inflight = w.max_inflight as f32;
                self.base_mean = mean_inflight as f32;
            }
        } else if mostly_answers {
            // Compare in log space: the window's median and the baseline each have a
            // standard error 1.25·σ/√n, plus the histogram's quantile error. Clearly below
            // takes two windows in a row (three while drops are intrinsic: the answers are
            // a censored, long-tailed sample), or one beyond 4 SE: a real speed-up is large,
            // a lone small window of a long-tailed dependency is often 2 SE low.
            let se_w = 1.2533 * sigma / libm::sqrt(n.max(1.0));
            let se_b = 1.2533 * sigma / libm::sqrt(self.baseline_weight.max(1.0));
            let se = libm::sqrt(se_w * se_w + se_b * se_b + 2.0 * QUANTILE_SE * QUANTILE_SE);
            let diff = libm::log(stat / self.baseline);
            let below = diff < -2.0 * se;
            self.below_run = if below { self.below_run.saturating_add(1) } else { 0 };
            // Clearly above with a single request in flight: no queue of ours can explain
            // it, so the baseline is stale or was learned low (a small first window of a
            // long-tailed dependency). Two such windows in a row restart it; otherwise a
            // limit at its floor would read every window as congested and never leave.
            let above_alone = alone && diff > 2.0 * se;
            self.above_run = if above_alone { self.above_run.saturating_add(1) } else { 0 };
            let run = if self.intrinsic > 0.0 { 3 } else { 2 };
            if below && (self.below_run >= run || diff < -4.0 * se) {
                self.below_run = 0;
                // Clearly below: the dependency got faster. Queueing only adds latency, so
                // this window is the better estimate; start over from it. If our limit was
                // binding, this window still holds our queue: cut the limit by the speed-up
                // so the next windows see the uncongested latency, and slow-start back.
                // What was learned about the old dependency's drops no longer applies.
                // Back at the latency it had before the incident (the limit to come back to
                // was learned then), the baseline of that time is the better estimate: one
                // window right after a change is a poor one.
                let before = self.recall_base as f64;
                let se_r = libm::sqrt(se_w * se_w + 2.0 * QUANTILE_SE * QUANTILE_SE);
                let back = self.recall > 0.0
                    && before > 0.0
                    && libm::fabs(libm::log(stat / before)) <= 2.0 * se_r;
                self.baseline = if back { before } else { stat };
                self.baseline_weight = n;
                self.forget_drops();
                self.clear_history();
                if bound {
                    self.remember(self.limit, self.baseline);
                    self.cut_to = (self.limit * libm::exp(diff)) as f32;
                }
            } else if above_alone && self.above_run >= 2 {
                self.above_run = 0;
                self.baseline = stat;
                self.baseline_weight = n;
                self.clear_history();
                self.m.rebaselines += 1;
            } else if !below
                && diff <= 2.0 * se
                && self.baseline_weight < BASELINE_SAMPLES
                && !queued
            {
                // Indistinguishable, and no queue of our making (slow start, the limit was
                // not reached, or in-flight stayed where a hold found latency flat): a
                // sample-weighted mean refines it. At a binding limit the controller keeps a
                // standing queue by design, so those windows never count; once
                // BASELINE_SAMPLES are in, the estimate freezes.
                self.baseline += (stat - self.baseline) * n / (self.baseline_weight + n);
                self.baseline_weight += n;
                if self.base_inflight > 0.0 {
                    self.base_inflight = self.base_inflight.min(w.max_inflight as f32);
                    self.base_mean = self.base_mean.min(mean_inflight as f32);
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

    fn clear_history(&mut self) {
        self.history_len = 0;
        self.history_next = 0;
    }

    /// A probe's verdict: the baseline becomes `base`, learned from `weight` samples.
    fn rebase(&mut self, base: f64, weight: f64) {
        self.baseline = base;
        self.baseline_weight = weight;
        self.clear_history();
        self.m.rebaselines += 1;
    }

    /// Compares `here` with the recent operating points; raises a stale baseline.
    fn flat_test(&mut self, here: Point) {
        let len = self.history_len as usize;
        // A point whose latency differs from `here` by more than our own queue could explain
        // (elasticity above FLAT_CHANGE, or the wrong sign, beyond noise) was taken from a
        // different dependency (it slowed, sped up, lost capacity): forget the history. This
        // window is not kept either: it found the change, so it most likely straddles it
        // (answers from before and after), and would pair as a queue with the windows after.
        let changed = self.history[..len].iter().any(|h| {
            let dn = libm::log(here.inflight.max(1e-9) as f64 / h.inflight.max(1e-9) as f64);
            let ds = libm::log(here.stat as f64 / h.stat as f64);
            let noise = 3.0 * libm::sqrt((here.se * here.se + h.se * h.se) as f64);
            libm::fabs(ds) > FLAT_CHANGE * libm::fabs(dn) + noise || ds * dn < -(noise * noise)
        });
        if changed {
            self.clear_history();
            return;
        }
        for i in 0..self.history_len as usize {
            let h = self.history[i];
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
            let solid = self.intrinsic <= 0.0 || lo.weight >= 2.0 * MIN_SAMPLES as f32;
            if flat && solid && lo_s > self.baseline * (1.0 + margin) {
                // Both points are below the knee: their sample-weighted mean (in log space)
                // is the estimate, but never above the lower-concurrency point's.
                let (wl, wh) = (lo.weight as f64, hi.weight as f64);
                let mean = (wl * libm::log(lo_s) + wh * libm::log(hi_s)) / (wl + wh);
                self.baseline = libm::exp(mean).min(lo_s);
                self.baseline_weight = wl + wh;
                self.resume_at = (hi_n + self.cfg.headroom * headroom(hi_n)) as f32;
                self.m.rebaselines += 1;
                self.clear_history();
                return;
            }
        }
        if self.fit_test(here) {
            return;
        }
        let len = self.history_len as usize;
        let next = self.history_next as usize;
        if len > 0 {
            let last = self.history[(next + FLAT_HISTORY - 1) % FLAT_HISTORY];
            let moved = libm::fabs(libm::log(
                (here.inflight as f64).max(1e-9) / (last.inflight as f64).max(1e-9),
            ));
            if elapsed(here.at, last.at) < FLAT_SPACING_NS && moved < FLAT_STEP {
                return;
            }
        }
        self.history[next] = here;
        self.history_next = ((next + 1) % FLAT_HISTORY) as u8;
        self.history_len = (len + 1).min(FLAT_HISTORY) as u8;
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
    fn fit_test(&mut self, here: Point) -> bool {
        let mut pts = [Point::default(); FLAT_HISTORY + 1];
        let mut k = 0;
        for h in self.history[..self.history_len as usize].iter() {
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
        if !flat || lo_s <= self.baseline * (1.0 + margin) {
            return false;
        }
        self.baseline = libm::exp(ym).min(lo_s);
        self.baseline_weight = pts.iter().map(|p| p.weight as f64).sum();
        self.resume_at = (n_hi + self.cfg.headroom * headroom(n_hi)) as f32;
        self.m.rebaselines += 1;
        self.clear_history();
        true
    }

    /// The drop share a window of `total` outcomes may carry without a back-off: the
    /// configured tolerance, plus the intrinsic share and two binomial standard errors of it.
    fn drop_allowance(&self, total: u64) -> f64 {
        let p = self.intrinsic as f64;
        if p <= 0.0 {
            return self.cfg.drop_tolerance;
        }
        let sd = libm::sqrt(p * (1.0 - p) / (total.max(1) as f64));
        self.cfg.drop_tolerance + p + 2.0 * sd
    }

    /// Remembers `limit`, reached over baseline `base`, as one to come back to (step 8),
    /// unless a higher one is pending.
    fn remember(&mut self, limit: f64, base: f64) {
        if limit > self.recall as f64 {
            self.recall = limit as f32;
            self.recall_base = base as f32;
            self.recalling = false;
        }
    }

    /// Forgets the back-off episode and the intrinsic drop share (the dependency changed).
    fn forget_drops(&mut self) {
        self.ep_ref_windows = 0;
        self.ep_low_windows = 0;
        self.intrinsic = 0.0;
        self.intrinsic_cap = 0.0;
        self.flat_upto = 0.0;
    }

    /// Probe-free: folds a window into the back-off episode (state machine step 2). `start`:
    /// this window backs off and no episode is under way. True when the episode showed the
    /// drops to be intrinsic, and the controller now holds.
    fn fold_episode(&mut self, now: u64, w: &Window, stat: f64, start: bool) -> bool {
        let here = Pool::of(w, stat);
        if self.ep_ref_windows > 0 && elapsed(stamp(now), self.ep_at) > FLAT_HORIZON_NS {
            self.ep_ref_windows = 0; // too old to compare with
        }
        if self.ep_ref_windows == 0 {
            if start {
                self.ep_ref = here;
                self.ep_low = Pool::default();
                self.ep_ref_windows = 1;
                self.ep_low_windows = 0;
                self.ep_at = stamp(now);
            }
            return false;
        }
        if here.inflight * FLAT_SPAN as f32 > self.ep_ref.inflight {
            if self.ep_low_windows > 0 {
                // In-flight rose again before the verdict: the lower side starts afresh
                // (and cuts resume).
                self.ep_low = Pool::default();
                self.ep_low_windows = 0;
            } else if self.ep_ref.outcomes < EPISODE_OUTCOMES {
                // Not fallen yet: more of the starting side.
                self.ep_ref.add(&here);
                self.ep_ref_windows = self.ep_ref_windows.saturating_add(1);
            }
            return false;
        }
        self.ep_low.add(&here);
        self.ep_low_windows = self.ep_low_windows.saturating_add(1);
        let (a, b) = (self.ep_ref, self.ep_low);
        if b.outcomes < EPISODE_OUTCOMES || self.ep_low_windows < EPISODE_WINDOWS {
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
            let sigma = self.sigma as f64;
            let ((la, sa), (lb, sb)) = (a.log_median(sigma), b.log_median(sigma));
            la - lb > 2.0 * libm::sqrt(sa * sa + sb * sb)
        };
        let unknown = a.outcomes < EPISODE_OUTCOMES / 4.0 || b.samples < min;
        if drops_fell || latency_fell || unknown || db > HOLD_MAX_SHARE {
            // Back-off helped (queueing), too little is known, or the dependency fails most
            // calls: this level is the new starting point; keep backing off.
            self.ep_ref = b;
            self.ep_ref_windows = self.ep_low_windows;
            self.ep_low = Pool::default();
            self.ep_low_windows = 0;
            self.ep_at = stamp(now);
            return false;
        }
        // Intrinsic: neither fell. Hold: back to the starting point's in-flight (it did no
        // worse), re-learn the baseline at the lower point (the dependency is not queueing
        // there), and tolerate this drop share from now on.
        self.limit = self.clamp(self.limit.max(a.inflight as f64));
        let (lb, _) = b.log_median(0.0);
        self.baseline = libm::exp(lb);
        self.baseline_weight = b.samples as f64;
        self.intrinsic = db as f32;
        self.intrinsic_cap = db as f32;
        self.flat_upto = a.inflight;
        self.ep_ref_windows = 0;
        self.ep_low_windows = 0;
        self.slow_start = false;
        self.resume_at = 0.0;
        self.cut_to = 0.0;
        self.was_near = false;
        self.clear_history();
        self.m.holds += 1;
        self.m.rebaselines += 1;
        true
    }

    /// Ends an upward probe or the pooling before one (a drop, a congested window, a
    /// cut, a change of the dependency).
    fn reset_up(&mut self) {
        self.up_pool = UpPool::default();
        self.up_from = 0.0;
        self.up_windows = 0;
        self.dn_from = 0.0;
        self.dn_windows = 0;
        self.dn_pool = UpPool::default();
        self.dn_acc = UpPool::default();
    }

    /// Probe-free, state machine step 9: the upward probe. `new` is the limit the other
    /// steps chose; returns the limit to apply.
    fn probe_up(&mut self, now: u64, dur: u64, w: &Window, stat: f64, far: bool, new: f64) -> f64 {
        let l = self.limit;
        let bound = w.max_inflight as f64 + 1.0 > l;
        let usable = w.samples >= MIN_SAMPLES && dur > 0 && w.drops == 0;
        if self.dn_from > 0.0 {
            return self.probe_down(now, dur, w, stat, usable);
        }
        if self.up_from > 0.0 {
            // A probe is under way: wait until in-flight has risen, then decide.
            if !usable {
                self.reset_up();
                return new.min(l);
            }
            let n_hi = w.samples as f64 * w.avg_ns as f64 / dur as f64;
            let lo = self.up_pool;
            let n_lo = lo.mean_inflight();
            self.up_windows = self.up_windows.saturating_add(1);
            if n_hi < UP_MIN_SPAN * n_lo {
                if self.up_windows < UP_PROBE_WINDOWS && bound {
                    return l; // in-flight still rising (or the window mostly predates it)
                }
                // Demand did not fill the raised limit: nothing learned, no cost.
                let back = self.up_from as f64;
                self.reset_up();
                self.up_next_at = now.saturating_add(self.up_wait);
                return new.min(back.max(n_hi + 1.0));
            }
            let sigma = log_spread(w).max(self.sigma as f64);
            let (se_hi, se_lo) =
                (median_se(sigma, w.samples as f64), median_se(sigma, lo.samples as f64));
            let se = libm::sqrt(se_hi * se_hi + se_lo * se_lo);
            let ds = libm::log(stat) - lo.log_mean();
            let flat = ds <= FLAT_ELASTICITY * libm::log(n_hi / n_lo) + 2.0 * se;
            let back = self.up_from as f64;
            self.reset_up();
            if flat {
                // Latency ignored a 1.2×+ rise of in-flight: below the knee at both points.
                // The lower point's latency is the dependency's own; keep the higher limit.
                let base = libm::exp(lo.log_mean());
                if base > self.baseline {
                    self.baseline = base;
                    self.baseline_weight = lo.samples as f64;
                    self.clear_history();
                    self.m.rebaselines += 1;
                }
                self.up_wait = UP_WAIT_NS;
                self.up_next_at = now.saturating_add(self.up_wait);
                self.up_fail_from = 0.0;
                // Nothing is known about the load above: find it fast (slow start ends at
                // the first congested window).
                self.slow_start = self.cfg.slow_start;
                return new.max(l);
            }
            // Latency rose with in-flight, but clearly less than in proportion: the probe
            // straddled the knee, so the lower point queued little, if at all. Its latency is
            // then close to the dependency's own: a baseline below it is stale (a dependency
            // that got slower). Back, with that baseline, and probe again at the usual pace.
            let base = libm::exp(lo.log_mean());
            let dn = libm::log(n_hi / n_lo);
            if ds + se < UP_PARTIAL_ELASTICITY * dn && base > self.baseline {
                self.baseline = base;
                self.baseline_weight = lo.samples as f64;
                self.clear_history();
                self.m.rebaselines += 1;
                self.up_wait = UP_WAIT_NS;
                self.up_next_at = now.saturating_add(self.up_wait);
                self.up_fail_from = back as f32;
                return back;
            }
            // Latency rose with in-flight: a knee. Back, and wait longer next time.
            self.up_wait = (self.up_wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
            self.up_next_at = now.saturating_add(self.up_wait);
            self.up_fail_from = back as f32;
            return back;
        }
        let quiet = self.intrinsic <= 0.0 && self.recall <= 0.0 && self.ep_ref_windows == 0;
        if !usable || !bound || self.slow_start || !quiet {
            self.up_pool = UpPool::default();
            self.dn_acc = UpPool::default();
            return new;
        }
        // A failed probe located a knee near where it started. Once the limit has sunk
        // well below that (a dependency that keeps getting slower reads as congestion
        // against a stale baseline, and the limit drifts down), that knee says nothing about
        // this level: the next probe need not wait.
        if self.up_fail_from > 0.0 && l * UP_MIN_SPAN < self.up_fail_from as f64 {
            self.up_fail_from = 0.0;
            self.up_wait = UP_WAIT_NS;
            self.up_next_at = now;
        }
        let n = w.samples as f32;
        let inflight = (w.samples as f64 * w.avg_ns as f64 / dur as f64) as f32;
        // Downward probe: does a point that reads as congested hold a queue of ours? (Not in
        // the first seconds: `update` arms it 4 s after the first window.) One that found
        // our own queue waits longer before the next, but a limit that has since sunk well
        // below where it returned to is falling on latency its own queue no longer explains
        // (a queue of ours shrinks as the limit falls): that verdict is stale, probe again.
        if self.dn_last > 0.0 && l * UP_MIN_SPAN < self.dn_last as f64 {
            self.dn_last = 0.0;
            self.dn_wait = UP_WAIT_NS;
            self.dn_next_at = now;
        }
        // A window whose latency differs from the pool's beyond noise (3 SE) marks a change
        // of the dependency (a capacity loss, say): the pool restarts from it, or it would
        // blend the two and read the new latency as "did not fall".
        let sigma = self.sigma as f64;
        if self.dn_acc.windows > 0 {
            let (se_w, se_p) =
                (median_se(sigma, n as f64), median_se(sigma, self.dn_acc.samples as f64));
            let d = libm::log(stat) - self.dn_acc.log_mean();
            if libm::fabs(d) > 3.0 * libm::sqrt(se_w * se_w + se_p * se_p) {
                self.dn_acc = UpPool::default();
            }
        }
        pool_add(&mut self.dn_acc, inflight, n, stat);
        // Above the latency at which the limit holds still (`g = 1 − headroom/sqrt(L)`):
        // the limit is sinking, so a stale baseline would drag it down for good.
        let g_eq = (1.0 - self.cfg.headroom * headroom(l) / l.max(1.0)).max(MIN_GRADIENT);
        let knee = libm::log(self.baseline * (1.0 + self.cfg.buffer) / libm::sqrt(g_eq));
        let acc = self.dn_acc;
        if acc.samples >= UP_POOL_SAMPLES
            && acc.windows >= UP_POOL_WINDOWS
            && now >= self.dn_next_at
            && acc.log_mean() > knee + 2.0 * median_se(sigma, acc.samples as f64)
            && l / UP_SPAN >= 1.0
        {
            self.dn_from = l as f32;
            self.dn_ref = acc;
            self.dn_pool = UpPool::default();
            self.dn_windows = 0;
            self.dn_acc = UpPool::default();
            self.up_pool = UpPool::default();
            return l / UP_SPAN;
        }
        if far {
            self.up_pool = UpPool::default();
            return new;
        }
        pool_add(&mut self.up_pool, inflight, n, stat);
        if self.up_pool.samples >= UP_POOL_SAMPLES
            && self.up_pool.windows >= UP_POOL_WINDOWS
            && now >= self.up_next_at
        {
            self.up_from = l as f32;
            self.up_windows = 0;
            return new.max((l * UP_SPAN).max(l + 1.0));
        }
        new
    }

    /// The downward probe under way (step 9): the first window after the cut still answers
    /// requests admitted before it and is skipped; then at least 2 windows and 100 samples
    /// at the lower point decide. Latency that did not fall with in-flight (elasticity
    /// below FLAT_ELASTICITY, beyond two standard errors) is not our queue: the baseline
    /// becomes the lower point's latency. Either way the limit returns to where it was.
    fn probe_down(&mut self, now: u64, dur: u64, w: &Window, stat: f64, usable: bool) -> f64 {
        let back = self.dn_from as f64;
        let cut = self.limit;
        self.dn_windows = self.dn_windows.saturating_add(1);
        if !usable {
            self.reset_up();
            self.dn_wait = (self.dn_wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
            self.dn_next_at = now.saturating_add(self.dn_wait);
            return back;
        }
        if self.dn_windows == 1 {
            return cut;
        }
        let n = w.samples as f32;
        let inflight = (w.samples as f64 * w.avg_ns as f64 / dur as f64) as f32;
        self.dn_pool.inflight += inflight * n;
        self.dn_pool.samples += n;
        self.dn_pool.log_stat += n * libm::log(stat) as f32;
        self.dn_pool.windows = self.dn_pool.windows.saturating_add(1);
        if (self.dn_pool.windows < 2 || self.dn_pool.samples < 100.0) && self.dn_windows < 6 {
            return cut;
        }
        let (hi, lo) = (self.dn_ref, self.dn_pool);
        let (n_hi, n_lo) = (hi.mean_inflight(), lo.mean_inflight());
        self.reset_up();
        let sigma = self.sigma as f64;
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
            && base > self.baseline * (1.0 + self.cfg.buffer) * (1.0 + 2.0 * se_lo);
        let longer = (self.dn_wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
        if told && fell <= FLAT_ELASTICITY * dn + 2.0 * se {
            // Latency did not fall with in-flight: not our queue. The baseline becomes the
            // lower point's latency. One that moved by more than the buffer was stale: look
            // again soon (a dependency that keeps getting slower).
            let moved = base > self.baseline * (1.0 + self.cfg.buffer);
            if base > self.baseline {
                self.rebase(base, lo.samples as f64);
            }
            self.dn_wait = if moved { UP_WAIT_NS } else { longer };
        } else if stale {
            self.rebase(base, lo.samples as f64);
            self.dn_wait = UP_WAIT_NS;
        } else {
            // A queue of ours (latency fell with in-flight, and the baseline is current), or
            // in-flight did not fall enough to tell (demand, not the limit, set it): wait
            // longer.
            self.dn_wait = longer;
        }
        self.dn_next_at = now.saturating_add(self.dn_wait);
        self.dn_last = back as f32;
        back
    }

    /// A window without a back-off moves the intrinsic share towards its own (at most up to
    /// the share measured at the hold), so it fades once the dependency stops dropping.
    fn track_intrinsic(&mut self, share: f64, total: u64) {
        if self.intrinsic <= 0.0 || total < MIN_SAMPLES as u64 {
            return;
        }
        let t = total as f64;
        let p = self.intrinsic as f64;
        let p = (p + (share - p) * t / (t + INTRINSIC_MEMORY)).min(self.intrinsic_cap as f64);
        // Gone once it is a fraction of what the configured tolerance absorbs anyway.
        self.intrinsic = if p < 0.5 * self.cfg.drop_tolerance { 0.0 } else { p as f32 };
    }
}

/// Adds a window (mean in-flight, samples, statistic) to a probe pool. The pool forgets its
/// older half once it holds twice what a probe needs, so it stays the current operating
/// point while the limit drifts.
fn pool_add(p: &mut UpPool, inflight: f32, n: f32, stat: f64) {
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

/// A compact time stamp: milliseconds, wrapping every 49.7 days. Stamps are only compared
/// within the flat test's horizon; history and episodes are dropped once older (every
/// window checks), so no stamp lives long enough to wrap.
fn stamp(now: u64) -> u32 {
    (now / MS) as u32 // truncation intended: wrapping arithmetic below
}

/// Nanoseconds from stamp `then` to stamp `now`.
fn elapsed(now: u32, then: u32) -> u64 {
    now.wrapping_sub(then) as u64 * MS
}

/// The log-spread `σ` of a window's latencies, read from its p50..p90 (log-normal model).
fn log_spread(w: &Window) -> f64 {
    (libm::log(w.p90_ns.max(1) as f64 / w.p50_ns.max(1) as f64) / 1.2816).max(0.0)
}

/// Relative standard error of the median of `n` samples with log-spread `sigma`
/// (`1.25·σ/√n`), combined with the histogram's quantile error.
fn median_se(sigma: f64, n: f64) -> f64 {
    let se = 1.2533 * sigma / libm::sqrt(n.max(1.0));
    libm::sqrt(se * se + QUANTILE_SE * QUANTILE_SE)
}

/// The headroom added to `x = limit · gradient`: Envoy's `sqrt(x)`, and `x·sqrt(x)` below 1
/// so that fractional limits can still shrink (continuous at 1).
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
        let prev_inflight = core::mem::replace(&mut self.prev_inflight, w.max_inflight);
        let prev_limit = core::mem::replace(&mut self.prev_limit, self.limit);
        // The window's length, if known: after a gap longer than the flat test's horizon the
        // previous close says nothing about this window, and the history is stale.
        let mut dur = if self.last_at > 0 { now - self.last_at } else { 0 };
        if dur > FLAT_HORIZON_NS {
            dur = 0;
            self.reset_up();
            self.clear_history();
            self.ep_ref_windows = 0;
            self.ep_low_windows = 0;
        }
        if self.history_len > 0 {
            // Points older than the horizon pair with nothing: drop them before their
            // stamps could wrap.
            let next = self.history_next as usize;
            let newest = self.history[(next + FLAT_HISTORY - 1) % FLAT_HISTORY];
            if elapsed(stamp(now), newest.at) > FLAT_HORIZON_NS {
                self.clear_history();
            }
        }
        self.last_at = now;
        self.m.windows += 1;
        if self.dn_next_at == 0 && self.probe_free() {
            // The first downward probe waits out the first seconds after start (the first
            // baseline has its own checks), not the first seconds of a binding limit: a
            // dependency that slows down under a modest load binds the limit for the first
            // time exactly then.
            self.dn_next_at = now.saturating_add(UP_WAIT_NS);
        }

        // 1. A min-RTT measurement under way.
        if self.probe.is_some() && self.fold_probe(now, w) {
            return self.limit;
        }
        // 2. Drops during an upward probe are the probe's answer: back to where it
        //    started (no back-off, no episode), and wait longer before the next one.
        if self.up_from > 0.0 && w.drops > 0 {
            self.limit = self.clamp(self.limit.min(self.up_from as f64));
            self.reset_up();
            self.up_wait = (self.up_wait.saturating_mul(2)).min(UP_WAIT_MAX_NS);
            self.up_next_at = now.saturating_add(self.up_wait);
            self.was_near = false;
            return self.limit;
        }
        //    Drops, and (probe-free) whether they respond to back-off.
        let total = w.samples as u64 + w.drops as u64;
        let allowance = self.drop_allowance(total);
        let stat = if w.samples > 0 { self.stat(w) } else { 0.0 };
        let back_off =
            w.drops > 0 && w.drops as f64 > allowance * total as f64 && self.cfg.backoff < 1.0;
        if self.probe_free() && self.cfg.backoff < 1.0 {
            let start = back_off && self.ep_ref_windows == 0;
            if self.fold_episode(now, w, stat, start) {
                return self.limit; // hold: the drops are the dependency's, not our queue's
            }
        }
        if back_off {
            if self.ep_low_windows > 0 {
                // Measuring the lower operating point: no further cut until the verdict.
                self.was_near = false;
                return self.limit;
            }
            let first = self.ep_ref_windows == 1 && self.ep_low_windows == 0;
            if self.probe_free() && first && !self.slow_start && self.intrinsic <= 0.0 {
                // The first back-off of an episode: remember the limit to come back to.
                self.remember(self.limit, self.baseline);
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
            let factor =
                if binds { self.cfg.backoff.min(1.0 - 0.5 * share) } else { self.cfg.backoff };
            self.limit = self.clamp(self.limit * factor);
            // A lone timeout is consistent with a long tail (a heavy-tailed dependency
            // times out a call now and then at any concurrency): it takes two.
            if total >= MIN_SAMPLES as u64 && !stale && w.drops >= 2 {
                self.slow_start = false;
            }
            self.m.backoffs += 1;
            self.was_near = false;
            return self.limit;
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
        if self.baseline <= 0.0 {
            return self.limit;
        }
        // 5. Gradient.
        let l = self.limit;
        let base = if self.probe_free() { self.baseline.min(stat) } else { self.baseline };
        let g = (base * (1.0 + self.cfg.buffer) / stat).clamp(MIN_GRADIENT, MAX_GRADIENT);
        self.m.gradient = g as f32;
        // 6. Slow start (until latency is clearly, not just noisily, above the baseline),
        //    else the smoothed Envoy step.
        // Clearly means beyond the noise of both the window and the baseline: a baseline
        // of one small window (the first, say) must not end slow start on its own error.
        let sigma = log_spread(w).max(self.sigma as f64);
        let se_w = median_se(sigma, w.samples as f64);
        let se_b = 1.2533 * sigma / libm::sqrt(self.baseline_weight.max(1.0));
        let se = if self.probe_free() { libm::sqrt(se_w * se_w + se_b * se_b) } else { se_w };
        let congested = stat > self.baseline * (1.0 + self.cfg.buffer) * (1.0 + 2.0 * se);
        // During slow start one congested window of a long-tailed dependency is often noise:
        // unless far beyond it (4 SE), the first holds the limit and the second ends it.
        let far = stat > self.baseline * (1.0 + self.cfg.buffer) * (1.0 + 4.0 * se);
        let first_congested = self.slow_start && congested && !far && !self.ss_congested;
        self.ss_congested = self.slow_start && congested;
        if self.slow_start && congested && !first_congested && self.probe_free() {
            // Slow start ends for the first time. If the baseline was learned only in
            // windows that held the initial limit full (a warm start, which may exceed a
            // small dependency's capacity), it may hold our own queue: drain to an eighth of
            // that in-flight and learn it again, once. Full means on average, not at a peak:
            // a burst that touches the limit of a service at half its capacity (a mean
            // in-flight of a fifth of it) queues nothing of ours, and a drain would refuse
            // its load for the windows slow start takes to come back.
            let learned_at = self.base_inflight as f64;
            // (The first window has no duration, so this one's mean counts too.)
            let now_mean = if dur > 0 && w.drops == 0 {
                w.samples as f64 * w.avg_ns as f64 / dur as f64
            } else {
                f64::MAX
            };
            let mean = now_mean.min(self.base_mean as f64);
            let held = mean >= QUEUE_FILL * libm::floor(self.cfg.initial_limit);
            self.base_inflight = 0.0;
            if learned_at + 1.0 > self.cfg.initial_limit && learned_at >= 2.0 && held {
                self.baseline = 0.0;
                self.baseline_weight = 0.0;
                self.ss_congested = false;
                self.clear_history();
                self.m.rebaselines += 1;
                self.limit = self.clamp(learned_at / 8.0);
                return self.limit;
            }
        }
        let mut new = if self.slow_start && !congested {
            l * 2.0
        } else if first_congested {
            l
        } else {
            self.slow_start = false;
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
        if self.slow_start && new > l && !reached && self.cfg.app_limited_ratio > 0.0 {
            new = l;
        }
        // Nor does a window whose in-flight rose 1.5× at once double the limit: a
        // dependency that just lost capacity queues what it used to serve, and the latency
        // of this window's answers (admitted before) does not show it yet. One window
        // waits; the next shows the latency.
        // (A rise that follows a doubling of a limit the previous window reached is ours.)
        let prev_reached = prev_inflight as f64 + 1.0 > prev_limit;
        let jumped = prev_inflight > 0 && !prev_reached && 2 * w.max_inflight > 3 * prev_inflight;
        if self.slow_start && new > l && jumped && self.cfg.app_limited_ratio > 0.0 {
            new = l;
        }
        // 8. Recall (probe-free): after a cut, two windows in a row within `buffer` of the
        //    baseline at a binding limit double it back towards the limit it had before;
        //    a congested window after such a doubling ends the recall.
        let near = stat <= self.baseline * (1.0 + self.cfg.buffer);
        if self.recall > 0.0 && self.probe_free() && self.intrinsic <= 0.0 {
            if congested && self.recalling {
                self.recall = 0.0;
                self.recalling = false;
            } else if near && self.was_near && reached && l < self.recall as f64 {
                new = new.max((2.0 * l).min(self.recall as f64));
                self.recalling = true;
            }
        }
        self.was_near = near;
        if self.resume_at > 0.0 {
            new = new.max(self.resume_at as f64);
            self.resume_at = 0.0;
        }
        if self.cut_to > 0.0 {
            new = self.cut_to as f64;
            self.cut_to = 0.0;
            self.slow_start = self.cfg.slow_start;
        }
        // 9. Upward probe (probe-free): a bound limit with no drops must not be an
        //    absorbing state below what the dependency handles.
        if self.probe_free() {
            new = self.probe_up(now, dur, w, stat, far, new);
        }
        // 10. Clamp.
        self.limit = self.clamp(new);
        if self.limit >= self.recall as f64 {
            self.recall = 0.0;
            self.recalling = false;
        }

        if self.probing_mode() {
            if self.limit <= self.cfg.min_limit {
                self.floor_windows += 1;
            } else {
                self.floor_windows = 0;
            }
            if self.floor_windows >= FLOOR_WINDOWS_BEFORE_PROBE || now >= self.next_probe_at {
                self.start_probe(1);
            }
        }
        self.limit
    }

    fn name(&self) -> &'static str {
        "gradient"
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use quickcheck::{quickcheck, Arbitrary, Gen};
    use std::vec::Vec;

    /// A deterministic fluid model of a dependency with `slots` servers and service time
    /// `service_ms`, driven at `load` × its capacity by Poisson-free arrivals: each window
    /// of 100 ms, in-flight = min(limit, offered), latency = service · max(1, N / slots).
    struct Plant {
        slots: f64,
        service_ms: f64,
        /// Offered concurrency (arrival rate × service time).
        offered: f64,
        now: u64,
    }

    impl Plant {
        fn window(&mut self, limit: f64) -> Window {
            self.now += 100 * MS;
            let n = limit.max(1.0).min(self.offered);
            let lat_ms = self.service_ms * (n / self.slots).max(1.0);
            let lat = (lat_ms * MS as f64) as u64;
            let samples = (n / lat_ms * 100.0).max(1.0) as u32;
            Window {
                now: self.now,
                samples,
                drops: 0,
                avg_ns: lat,
                min_ns: lat * 7 / 10,
                p50_ns: lat,
                p90_ns: lat * 12 / 10,
                p99_ns: lat * 15 / 10,
                max_inflight: n.ceil() as u32,
                inflight: n as u32,
            }
        }

        fn run(&mut self, g: &mut Gradient, windows: usize) -> f64 {
            for _ in 0..windows {
                let w = self.window(g.limit());
                g.update(&w);
            }
            g.limit()
        }
    }

    /// The top of the band the default settles in over `slots` slots: a standing queue of
    /// about `buffer·C + headroom·sqrt(C)`, doubled, plus 2.
    fn equilibrium_high(slots: f64) -> f64 {
        let d = GradientConfig::default();
        slots * (1.0 + d.buffer) + 2.0 * d.headroom * libm::sqrt(slots) + 2.0
    }

    fn overloaded(slots: f64, service_ms: f64) -> Plant {
        Plant { slots, service_ms, offered: 10.0 * slots, now: 0 }
    }

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
        g.dn_from = from as f32;
        g.dn_ref = reference;
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
            if g.dn_from == 0.0 {
                break;
            }
        }
        assert_eq!(g.dn_from, 0.0, "the probe decided");
        let after = g.baseline_ns() as f64 / MS as f64;
        assert!((12.5..=13.5).contains(&after), "baseline {after} ms ({:?})", g.metrics());
        // A fall in proportion (a queue of ours at both points) leaves it alone.
        let (mut g, mut p) = probing_down(24.0, 22.0, 15.0);
        for _ in 0..4 {
            p.now += 100 * MS;
            g.update(&point_window(p.now, 16.0, 15.0 * 16.0 / 22.0, 120));
        }
        assert_eq!(g.dn_from, 0.0, "the probe decided");
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
        assert!(g.dn_from > 0.0, "still probing");
    }

    #[test]
    fn the_downward_probe_is_armed_from_the_first_window() {
        // 10 s at a modest load (the limit never binds), then the dependency slows down and
        // the limit binds for the first time: a probe may start at once, not 4 s later.
        let mut g = Gradient::new(GradientConfig::default()).unwrap();
        let mut p = Plant { slots: 16.0, service_ms: 10.0, offered: 8.0, now: 0 };
        p.run(&mut g, 100);
        assert!(g.dn_next_at > 0 && g.dn_next_at <= 4 * SEC + 100 * MS, "{}", g.dn_next_at);
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
    fn bad_configs_are_refused() {
        let d = GradientConfig::default();
        let bad = [
            GradientConfig { buffer: f64::NAN, ..d },
            GradientConfig { buffer: -0.1, ..d },
            GradientConfig { headroom: f64::INFINITY, ..d },
            GradientConfig { smoothing: 0.0, ..d },
            GradientConfig { sample_percentile: 40.0, ..d },
            GradientConfig { sample_percentile: 99.5, ..d },
            GradientConfig { probe_jitter: 2.0, ..d },
            GradientConfig { probe_limit: 0.0, ..d },
            GradientConfig { backoff: 0.0, ..d },
            GradientConfig { drop_tolerance: 1.0, ..d },
            GradientConfig { app_limited_ratio: 1.5, ..d },
            GradientConfig { min_limit: 5.0, max_limit: 4.0, initial_limit: 4.5, ..d },
            GradientConfig { initial_limit: 0.0, ..d },
            GradientConfig { probe_interval_ns: 1, ..d },
            GradientConfig { probe_interval_ns: SEC, probe_samples: 0, ..d },
            GradientConfig { pinned_baseline_ns: u64::MAX, ..d },
        ];
        for c in bad {
            assert!(Gradient::new(c).is_err(), "{c:?}");
        }
        assert!(Gradient::new(d).is_ok());
        assert!(Gradient::new(GradientConfig::envoy(60 * SEC)).is_ok());
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
