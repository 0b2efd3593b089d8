//! `Limiter` (every limit algorithm) and the options shared with `Gate`.

use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig,
    VegasConfig,
};
use surgeguard_core::{Limiter, LimiterConfig, LimiterMetrics, Priority, RawPermit};

use crate::convert::{config_err, finite, int_in, ms_to_ns, range};
use crate::fast::tags;
use crate::handle::{new_handle, Tagged};
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
    /// Guaranteed share of each level (default 0.7 / 0.25 / 0.05).
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
            AlgorithmConfig::Aimd(c)
        }
        "hysteresis" => {
            let mut c = HysteresisConfig::default();
            bounds!(c, o);
            AlgorithmConfig::Hysteresis(c)
        }
        "gradient" => {
            let mut c = GradientConfig::default();
            bounds!(c, o);
            AlgorithmConfig::Gradient(c)
        }
        "gradient2" => {
            let mut c = Gradient2Config::default();
            bounds!(c, o);
            AlgorithmConfig::Gradient2(c)
        }
        "vegas" => {
            let mut c = VegasConfig::default();
            bounds!(c, o);
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
    /// The core limiter.
    pub core: Limiter,
    /// Permits held by JS.
    pub permits: Slab<RawPermit>,
    /// Levels in use.
    pub levels: u8,
}

impl Tagged for LimiterInner {
    const TAG: u64 = tags::LIMITER;
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
        let cfg = limiter_config(&options.unwrap_or_default())?;
        let core = Limiter::new(&cfg).map_err(|e| config_err("Limiter", e))?;
        Ok(Self {
            inner: Rc::new(LimiterInner { core, permits: Slab::default(), levels: cfg.levels }),
        })
    }

    /// The handle the `fast.limiter*` functions take.
    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    #[napi]
    pub fn limit(&self) -> f64 {
        self.inner.core.limit()
    }

    #[napi]
    pub fn inflight(&self) -> f64 {
        f64::from(self.inner.core.inflight())
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        self.inner.permits.live() as f64
    }

    #[napi]
    pub fn set_static_limit(&self, limit: Option<f64>) -> Result<()> {
        set_static(&self.inner.core, limit)
    }

    #[napi]
    pub fn metrics(&self) -> LimiterMetricsJs {
        limiter_metrics(&self.inner.core.metrics())
    }
}
