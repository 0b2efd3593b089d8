//! `Limiter` (every limit algorithm) and the options shared with `Gate`.

use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use surgeguard::placement::{PlaceError, Placed, PlacedRawPermit};
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig,
    VegasConfig,
};
use surgeguard_core::{Limiter, LimiterConfig, LimiterMetrics, Outcome, Priority};

use crate::convert::{config_err, finite, int_in, ms_to_ns, range};
use crate::handle::{new_handle, tags, Tagged};
use crate::raw::{
    args, handle_arg, handle_id_outcome_now, level, now, refuse, ret, Callback, SHM_TABLE_FULL,
};
use crate::shared::open;
use crate::slab::Slab;

/// Limiter options, as the facade normalises them (durations in ms).
#[napi(object)]
#[derive(Default)]
pub struct LimiterOptions {
    /// `fixed`, `aimd`, `hysteresis`, `gradient` (default), `gradient2` or `vegas`.
    pub algorithm: Option<String>,
    /// The limit before any window.
    pub initial_limit: Option<f64>,
    /// Floor.
    pub min_limit: Option<f64>,
    /// Ceiling.
    pub max_limit: Option<f64>,
    /// Priority levels in use, 1..=8 (default 3).
    pub levels: Option<f64>,
    /// Each level's share: the most it may hold back for itself while active (it holds back its
    /// recent peak demand plus one slot, at most this share; default 0.7 / 0.25 / 0.05).
    pub weights: Option<Vec<f64>>,
    /// Shortest window, ms.
    pub min_window_ms: Option<f64>,
    /// Longest window, ms.
    pub max_window_ms: Option<f64>,
    /// Window = this × the smallest latency.
    pub window_rtt_multiple: Option<f64>,
    /// Samples a window needs to close.
    pub min_samples: Option<f64>,
    /// A level is active while it saw an arrival within this long, ms.
    pub active_ms: Option<f64>,
    // Algorithm-specific settings (each applies to the algorithms named; the facade
    // refuses one that does not apply). See the core's `limit::*Config` docs.
    /// aimd, hysteresis.
    pub target_latency_ms: Option<f64>,
    /// aimd.
    pub latency_percentile: Option<f64>,
    /// aimd, gradient2.
    pub backoff_ratio: Option<f64>,
    /// aimd.
    pub timeout_ms: Option<f64>,
    /// aimd, hysteresis, gradient2, vegas.
    pub app_limited_fraction: Option<f64>,
    /// aimd, hysteresis, gradient, gradient2, vegas.
    pub slow_start: Option<bool>,
    /// aimd.
    pub netflix_parity: Option<bool>,
    /// hysteresis.
    pub healthy_below: Option<f64>,
    pub critical_above: Option<f64>,
    pub critical_factor: Option<f64>,
    pub jump_rise: Option<f64>,
    pub jump_window_ms: Option<f64>,
    pub jump_factor: Option<f64>,
    pub avg_alpha: Option<f64>,
    pub cool_off_ms: Option<f64>,
    pub p99_window_ms: Option<f64>,
    /// gradient.
    pub buffer: Option<f64>,
    pub headroom: Option<f64>,
    /// gradient, gradient2, vegas.
    pub smoothing: Option<f64>,
    /// gradient.
    pub sample_percentile: Option<f64>,
    pub probe_interval_ms: Option<f64>,
    pub probe_jitter: Option<f64>,
    pub probe_limit: Option<f64>,
    pub probe_samples: Option<f64>,
    pub pinned_baseline_ms: Option<f64>,
    pub backoff: Option<f64>,
    pub drop_tolerance: Option<f64>,
    pub app_limited_ratio: Option<f64>,
    /// gradient, vegas.
    pub seed: Option<f64>,
    /// gradient2.
    pub queue_size: Option<f64>,
    pub long_window: Option<f64>,
    pub rtt_tolerance: Option<f64>,
    pub fixed: Option<bool>,
    /// vegas.
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub threshold: Option<f64>,
    pub decrease_ratio: Option<f64>,
    pub probe_multiplier: Option<f64>,
}

/// Copies an option into a config field through a conversion.
macro_rules! set {
    ($field:expr, $opt:expr, $name:literal, f64) => {
        if let Some(x) = $opt {
            $field = finite($name, x)?;
        }
    };
    ($field:expr, $opt:expr, $name:literal, ms) => {
        if let Some(x) = $opt {
            $field = ms_to_ns($name, x)?;
        }
    };
    ($field:expr, $opt:expr, $name:literal, u32) => {
        if let Some(x) = $opt {
            $field = int_in($name, x, 0, u32::MAX as u64)? as u32;
        }
    };
    ($field:expr, $opt:expr, $name:literal, some_u32) => {
        if let Some(x) = $opt {
            $field = Some(int_in($name, x, 0, u32::MAX as u64)? as u32);
        }
    };
    ($field:expr, $opt:expr, $name:literal, some_f64) => {
        if let Some(x) = $opt {
            $field = Some(finite($name, x)?);
        }
    };
    ($field:expr, $opt:expr, $name:literal, seed) => {
        if let Some(x) = $opt {
            $field = int_in($name, x, 0, 1 << 53)?;
        }
    };
    ($field:expr, $opt:expr, $name:literal, bool) => {
        if let Some(x) = $opt {
            $field = x;
        }
    };
}

macro_rules! bounds {
    ($cfg:ident, $o:expr) => {{
        if let Some(x) = $o.initial_limit {
            $cfg.initial_limit = finite("initialLimit", x)?;
        }
        if let Some(x) = $o.min_limit {
            $cfg.min_limit = finite("minLimit", x)?;
        }
        if let Some(x) = $o.max_limit {
            $cfg.max_limit = finite("maxLimit", x)?;
        }
        // A lone `initialLimit` outside the default bounds widens them, so
        // `{ algorithm: 'fixed', initialLimit: 5000 }` means what it says.
        if $o.min_limit.is_none() && $cfg.initial_limit < $cfg.min_limit {
            $cfg.min_limit = $cfg.initial_limit;
        }
        if $o.max_limit.is_none() && $cfg.initial_limit > $cfg.max_limit {
            $cfg.max_limit = $cfg.initial_limit;
        }
    }};
}

/// The algorithm `o` names, with its bounds.
pub fn algorithm_config(o: &LimiterOptions) -> Result<AlgorithmConfig> {
    let name = o.algorithm.as_deref().unwrap_or("gradient");
    Ok(match name {
        "fixed" => {
            let mut c = FixedConfig::default();
            bounds!(c, o);
            // A fixed limit: one number, unless the caller gave explicit bounds.
            if o.min_limit.is_none() && o.max_limit.is_none() {
                c.min_limit = c.initial_limit;
                c.max_limit = c.initial_limit;
            }
            AlgorithmConfig::Fixed(c)
        }
        "aimd" => {
            let mut c = AimdConfig::default();
            bounds!(c, o);
            set!(c.target_latency_ns, o.target_latency_ms, "targetLatencyMs", ms);
            set!(c.latency_percentile, o.latency_percentile, "latencyPercentile", f64);
            set!(c.backoff_ratio, o.backoff_ratio, "backoffRatio", f64);
            set!(c.timeout_ns, o.timeout_ms, "timeoutMs", ms);
            set!(c.app_limited_fraction, o.app_limited_fraction, "appLimitedFraction", f64);
            set!(c.slow_start, o.slow_start, "slowStart", bool);
            set!(c.netflix_parity, o.netflix_parity, "netflixParity", bool);
            AlgorithmConfig::Aimd(c)
        }
        "hysteresis" => {
            let mut c = HysteresisConfig::default();
            bounds!(c, o);
            set!(c.target_latency_ns, o.target_latency_ms, "targetLatencyMs", ms);
            set!(c.healthy_below, o.healthy_below, "healthyBelow", f64);
            set!(c.critical_above, o.critical_above, "criticalAbove", f64);
            set!(c.critical_factor, o.critical_factor, "criticalFactor", f64);
            set!(c.jump_rise, o.jump_rise, "jumpRise", f64);
            set!(c.jump_window_ns, o.jump_window_ms, "jumpWindowMs", ms);
            set!(c.jump_factor, o.jump_factor, "jumpFactor", f64);
            set!(c.avg_alpha, o.avg_alpha, "avgAlpha", f64);
            set!(c.cool_off_ns, o.cool_off_ms, "coolOffMs", ms);
            set!(c.p99_window_ns, o.p99_window_ms, "p99WindowMs", ms);
            set!(c.app_limited_fraction, o.app_limited_fraction, "appLimitedFraction", f64);
            set!(c.slow_start, o.slow_start, "slowStart", bool);
            AlgorithmConfig::Hysteresis(c)
        }
        "gradient" => {
            let mut c = GradientConfig::default();
            bounds!(c, o);
            set!(c.buffer, o.buffer, "buffer", f64);
            set!(c.headroom, o.headroom, "headroom", f64);
            set!(c.smoothing, o.smoothing, "smoothing", f64);
            set!(c.sample_percentile, o.sample_percentile, "samplePercentile", f64);
            set!(c.probe_interval_ns, o.probe_interval_ms, "probeIntervalMs", ms);
            set!(c.probe_jitter, o.probe_jitter, "probeJitter", f64);
            set!(c.probe_limit, o.probe_limit, "probeLimit", f64);
            set!(c.probe_samples, o.probe_samples, "probeSamples", u32);
            set!(c.pinned_baseline_ns, o.pinned_baseline_ms, "pinnedBaselineMs", ms);
            set!(c.backoff, o.backoff, "backoff", f64);
            set!(c.drop_tolerance, o.drop_tolerance, "dropTolerance", f64);
            set!(c.slow_start, o.slow_start, "slowStart", bool);
            set!(c.app_limited_ratio, o.app_limited_ratio, "appLimitedRatio", f64);
            set!(c.seed, o.seed, "seed", seed);
            AlgorithmConfig::Gradient(c)
        }
        "gradient2" => {
            let mut c = Gradient2Config::default();
            bounds!(c, o);
            set!(c.smoothing, o.smoothing, "smoothing", f64);
            set!(c.queue_size, o.queue_size, "queueSize", f64);
            set!(c.long_window, o.long_window, "longWindow", u32);
            set!(c.rtt_tolerance, o.rtt_tolerance, "rttTolerance", f64);
            set!(c.fixed, o.fixed, "fixed", bool);
            set!(c.backoff_ratio, o.backoff_ratio, "backoffRatio", f64);
            set!(c.app_limited_fraction, o.app_limited_fraction, "appLimitedFraction", f64);
            set!(c.slow_start, o.slow_start, "slowStart", bool);
            AlgorithmConfig::Gradient2(c)
        }
        "vegas" => {
            let mut c = VegasConfig::default();
            bounds!(c, o);
            set!(c.smoothing, o.smoothing, "smoothing", f64);
            set!(c.alpha, o.alpha, "alpha", some_u32);
            set!(c.beta, o.beta, "beta", some_u32);
            set!(c.threshold, o.threshold, "threshold", some_u32);
            set!(c.decrease_ratio, o.decrease_ratio, "decreaseRatio", some_f64);
            set!(c.probe_multiplier, o.probe_multiplier, "probeMultiplier", u32);
            set!(c.seed, o.seed, "seed", seed);
            set!(c.app_limited_fraction, o.app_limited_fraction, "appLimitedFraction", f64);
            set!(c.slow_start, o.slow_start, "slowStart", bool);
            AlgorithmConfig::Vegas(c)
        }
        other => {
            return Err(range(
                "algorithm",
                &format!(
                    "must be one of fixed, aimd, hysteresis, gradient, gradient2, vegas (got {other:?})"
                ),
            ))
        }
    })
}

/// The whole limiter config `o` describes (unchecked by the core yet).
pub fn limiter_config(o: &LimiterOptions) -> Result<LimiterConfig> {
    let mut c = LimiterConfig::with_algorithm(algorithm_config(o)?);
    if let Some(x) = o.levels {
        c.levels = int_in("levels", x, 1, Priority::MAX_LEVELS as u64)? as u8;
        if o.weights.is_none() {
            // Default shares only make sense for the default three levels; otherwise
            // split evenly below 1.
            let mut w = [0.0; Priority::MAX_LEVELS];
            if c.levels == 3 {
                w[..3].copy_from_slice(&[0.7, 0.25, 0.05]);
            } else {
                for x in w.iter_mut().take(c.levels as usize) {
                    *x = 1.0 / f64::from(c.levels);
                }
            }
            c.weights = w;
        }
    }
    if let Some(ws) = &o.weights {
        if ws.len() != c.levels as usize {
            return Err(range("weights", &format!("must have one entry per level ({})", c.levels)));
        }
        let mut w = [0.0; Priority::MAX_LEVELS];
        for (d, s) in w.iter_mut().zip(ws) {
            *d = finite("weights", *s)?;
        }
        c.weights = w;
    }
    if let Some(x) = o.min_window_ms {
        c.min_window_ns = ms_to_ns("minWindowMs", x)?;
    }
    if let Some(x) = o.max_window_ms {
        c.max_window_ns = ms_to_ns("maxWindowMs", x)?;
    }
    if let Some(x) = o.window_rtt_multiple {
        c.window_rtt_multiple = finite("windowRttMultiple", x)?;
    }
    if let Some(x) = o.min_samples {
        c.min_samples = int_in("minSamples", x, 0, u32::MAX as u64)? as u32;
    }
    if let Some(x) = o.active_ms {
        c.active_ns = ms_to_ns("activeMs", x)?;
    }
    Ok(c)
}

/// What a `Limiter` handle points at.
pub struct LimiterInner {
    /// The core limiter (in-process or shared; the local one inline, no box).
    pub core: Placed<Limiter>,
    /// Permits held by JS.
    pub permits: Slab<PlacedRawPermit>,
    /// Levels in use.
    pub levels: u8,
}

impl Drop for LimiterInner {
    /// Permits still held when the limiter is collected (or its worker thread ends) go back
    /// as `Ignored`: for a shared limiter they would otherwise count against every process
    /// until this one exits.
    fn drop(&mut self) {
        let now = self.core.limiter().latest_time();
        for p in self.permits.drain() {
            let _ = self.core.release_raw(p, now, Outcome::Ignored);
        }
    }
}

impl Tagged for LimiterInner {
    const TAG: u64 = tags::LIMITER;
}

impl LimiterInner {
    /// A permit id, `-reason`, `-1` (2^24 permits live) or `SHM_TABLE_FULL`.
    #[inline]
    pub fn acquire(&self, now: u64, level: Priority) -> f64 {
        match self.core.try_acquire_raw(now, level) {
            Ok(p) => self.permits.insert(p).unwrap_or_else(|p| {
                let _ = self.core.release_raw(p, now, Outcome::Ignored);
                -1.0
            }),
            Err(PlaceError::Rejected(r)) => refuse(r),
            // A shared limiter whose process table is full of live processes.
            Err(_) => SHM_TABLE_FULL,
        }
    }

    /// `0`, `-1` (not live: released twice, never issued, or reclaimed) or `-2` (another
    /// object's).
    #[inline]
    pub fn release(&self, id: f64, now: u64, outcome: Outcome) -> f64 {
        match self.permits.take(id) {
            Some(p) => match self.core.release_raw(p, now, outcome) {
                Ok(()) => 0.0,
                // Already given back: a reclaim released it (its process was taken for dead).
                #[cfg(target_os = "linux")]
                Err(PlaceError::Reclaimed) => -1.0,
                Err(_) => -2.0,
            },
            None => -1.0,
        }
    }
}

/// A limiter snapshot (numbers; per-level arrays have one entry per level).
#[napi(object)]
pub struct LimiterMetricsJs {
    pub algorithm: String,
    pub limit: f64,
    pub static_limit: Option<f64>,
    pub inflight: f64,
    pub levels: f64,
    pub inflight_by_level: Vec<f64>,
    pub share_by_level: Vec<f64>,
    pub demand_by_level: Vec<f64>,
    pub admitted: f64,
    pub rejected: f64,
    pub rejected_by_level: Vec<f64>,
    pub successes: f64,
    pub drops: f64,
    pub ignored: f64,
    pub windows: f64,
    pub folded_samples: f64,
    pub min_rtt_ms: f64,
    pub avg_rtt_ms: f64,
    pub p99_rtt_ms: f64,
}

/// Converts a core snapshot.
pub fn limiter_metrics(m: &LimiterMetrics) -> LimiterMetricsJs {
    let n = m.levels as usize;
    let ms = crate::convert::ns_to_ms;
    LimiterMetricsJs {
        algorithm: m.algorithm.to_string(),
        limit: m.limit,
        static_limit: m.static_limit,
        inflight: f64::from(m.inflight),
        levels: f64::from(m.levels),
        inflight_by_level: m.inflight_by_level[..n].iter().map(|&x| f64::from(x)).collect(),
        share_by_level: m.share_by_level[..n].iter().map(|&x| f64::from(x)).collect(),
        demand_by_level: m.demand_by_level[..n].iter().map(|&x| f64::from(x)).collect(),
        admitted: m.admitted as f64,
        rejected: m.rejected as f64,
        rejected_by_level: m.rejected_by_level[..n].iter().map(|&x| x as f64).collect(),
        successes: m.successes as f64,
        drops: m.drops as f64,
        ignored: m.ignored as f64,
        windows: m.windows as f64,
        folded_samples: m.folded_samples as f64,
        min_rtt_ms: ms(m.min_rtt_ns),
        avg_rtt_ms: ms(m.avg_rtt_ns),
        p99_rtt_ms: ms(m.p99_rtt_ns),
    }
}

/// Sets or clears (`null`) the kill switch's static limit.
pub fn set_static(core: &Limiter, limit: Option<f64>) -> Result<()> {
    core.set_static_limit(limit).map_err(|e| config_err("setStaticLimit", e))
}

/// The native `Limiter`: cold paths; the hot ones are `fast.limiterAcquire/Release`.
#[napi(js_name = "NativeLimiter")]
pub struct NativeLimiter {
    inner: Rc<LimiterInner>,
}

#[napi]
impl NativeLimiter {
    #[napi(constructor)]
    pub fn new(options: Option<LimiterOptions>) -> Result<Self> {
        Self::open(None, options)
    }

    /// The limiter named `name` in shared memory: created, or attached to if it exists
    /// (then `options` must describe the same config).
    #[napi(factory)]
    pub fn open_shared(name: String, options: Option<LimiterOptions>) -> Result<Self> {
        Self::open(Some(&name), options)
    }

    /// The core limiter (metrics, limit, kill switch); acquire through the placement.
    fn limiter(&self) -> &Limiter {
        self.inner.core.limiter()
    }

    /// In this thread's heap (`name` `None`) or in the segment `name`.
    fn open(name: Option<&str>, options: Option<LimiterOptions>) -> Result<Self> {
        let cfg = limiter_config(&options.unwrap_or_default())?;
        let core = open("Limiter", name, cfg)?;
        Ok(Self {
            inner: Rc::new(LimiterInner { core, permits: Slab::default(), levels: cfg.levels }),
        })
    }

    /// Whether it lives in shared memory.
    #[napi]
    pub fn is_shared(&self) -> bool {
        self.inner.core.is_shared()
    }

    /// Shared: whether this call created the segment (false: attached).
    #[napi]
    pub fn created(&self) -> bool {
        self.inner.core.created()
    }

    /// Shared: releases the permits of dead processes (each once); how many.
    #[napi]
    pub fn reclaim(&self) -> f64 {
        self.inner.core.reclaim() as f64
    }

    /// Shared: process-table slots in use (processes and worker threads attached).
    #[napi]
    pub fn attached(&self) -> f64 {
        f64::from(self.inner.core.attached_processes())
    }

    /// Permits held through this object (for a shared one: counted in its slot).
    #[napi]
    pub fn held_here(&self) -> f64 {
        f64::from(self.inner.core.held_by_this_process())
    }

    /// The handle the `fast.limiter*` functions take.
    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    #[napi]
    pub fn limit(&self) -> f64 {
        self.limiter().limit()
    }

    #[napi]
    pub fn inflight(&self) -> f64 {
        f64::from(self.limiter().inflight())
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        self.inner.permits.live() as f64
    }

    #[napi]
    pub fn set_static_limit(&self, limit: Option<f64>) -> Result<()> {
        set_static(self.limiter(), limit)
    }

    #[napi]
    pub fn metrics(&self) -> LimiterMetricsJs {
        limiter_metrics(&self.limiter().metrics())
    }
}

// ---------------------------------------------------------------------------------------
// The hot path, as raw callbacks (see `fast`): limiterAcquire(h, level[, nowNs]) -> permit
// id | -reason | SHM_TABLE_FULL; limiterRelease(h, id, outcome[, nowNs]) -> 0 | -1 | -2.

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn limiter_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, LimiterInner);
    let level = level!(env, argv[1], h.levels);
    let now = now!(env, argv, argc, 2);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.acquire(now, level)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn limiter_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_id_outcome_now(env, info, LimiterInner::release) }
}

/// The limiter's raw callbacks (registered by `fast`).
pub const FAST: &[(&str, Callback)] =
    &[("limiterAcquire", limiter_acquire), ("limiterRelease", limiter_release)];
