//! `Limiter` and the limit algorithms' configurations.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use surgeguard_core::limit::{
    Aimd, AimdConfig, AlgorithmConfig, Fixed, FixedConfig, Gradient, Gradient2, Gradient2Config,
    GradientConfig, HysteresisAimd, HysteresisConfig, Vegas, VegasConfig,
};
use surgeguard_core::{Limiter as CoreLimiter, LimiterConfig, Priority};

use crate::common::*;
use crate::permit::{Owner, Permit};
#[cfg(target_os = "linux")]
use crate::placed::unlink_name;
use crate::placed::{open, place_err, shared_call, where_arg};
use surgeguard::placement::Placed;

/// How one algorithm setting is read from Python and shown back.
trait Setting {
    type T;
    fn read(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Self::T>;
    fn show<'py>(py: Python<'py>, x: Self::T) -> PyResult<Bound<'py, PyAny>>;
}

macro_rules! setting {
    ($kind:ident, $t:ty, |$n:ident, $v:ident| $read:expr, |$py:ident, $x:ident| $show:expr) => {
        struct $kind;
        impl Setting for $kind {
            type T = $t;
            fn read($n: &str, $v: &Bound<'_, PyAny>) -> PyResult<$t> {
                $read
            }
            fn show<'py>($py: Python<'py>, $x: $t) -> PyResult<Bound<'py, PyAny>> {
                Ok($show.into_pyobject($py)?.to_owned().into_any())
            }
        }
    };
}

// A limit: a finite float in [1e-6, 1e9].
setting!(Limit, f64, |n, v| ranged_arg(n, v, 1e-6, 1e9), |py, x| x);
// Any float (the core checks its range; NaN and infinities are refused there).
setting!(Real, f64, |n, v| real_arg(n, v), |py, x| x);
// A duration in seconds, stored as nanoseconds.
setting!(Secs, u64, |n, v| secs_arg(n, v, 86_400.0 * 365.0), |py, x| secs(x));
setting!(Flag, bool, |n, v| bool_arg(n, v), |py, x| x);
setting!(Count, u32, |n, v| Ok(uint_arg(n, v, u32::MAX as u64)? as u32), |py, x| x);
setting!(Seed, u64, |n, v| uint_arg(n, v, u64::MAX), |py, x| x);
setting!(
    OptCount,
    Option<u32>,
    |n, v| if v.is_none() { Ok(None) } else { Ok(Some(uint_arg(n, v, u32::MAX as u64)? as u32)) },
    |py, x| x
);
setting!(
    OptReal,
    Option<f64>,
    |n, v| if v.is_none() { Ok(None) } else { Ok(Some(real_arg(n, v)?)) },
    |py, x| x
);

/// Builds one algorithm-configuration class: keyword-only settings (seconds for
/// durations), each checked as it is read, then the whole config checked by the core
/// (nothing is built on error).
macro_rules! algorithm_class {
    ($py_name:ident, $name:literal, $cfg:ident, $algo:ident, $variant:ident,
     doc = $doc:literal, { $($key:ident = $field:ident : $kind:ident),* $(,)? }) => {
        #[doc = $doc]
        #[doc = ""]
        #[doc = concat!("Settings (keyword-only): ", $(stringify!($key), " "),*)]
        #[pyclass(frozen, module = "surgeguard._native")]
        pub struct $py_name {
            pub cfg: $cfg,
        }

        #[pymethods]
        impl $py_name {
            #[new]
            #[pyo3(signature = (**kwargs))]
            fn new(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
                let mut cfg = $cfg::default();
                if let Some(kw) = kwargs {
                    for (k, v) in kw.iter() {
                        let key = k.cast::<PyString>()?.to_cow()?.into_owned();
                        match key.as_str() {
                            $(stringify!($key) => cfg.$field = <$kind>::read(stringify!($key), &v)?,)*
                            other => {
                                return Err(PyTypeError::new_err(format!(
                                    "{}() got an unexpected keyword argument {other:?}; settings: {}",
                                    stringify!($py_name),
                                    [$(stringify!($key)),*].join(", ")
                                )))
                            }
                        }
                    }
                }
                $algo::new(cfg).map_err(|e| config_err(py, stringify!($py_name), e))?;
                Ok(Self { cfg })
            }

            /// The algorithm's short name.
            #[getter]
            fn name(&self) -> &'static str {
                $name
            }

            /// The settings as a dict (durations in seconds).
            fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                $(d.set_item(stringify!($key), <$kind>::show(py, self.cfg.$field)?)?;)*
                Ok(d)
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                let parts: Vec<String> = vec![$(format!("{}={}", stringify!($key), <$kind>::show(py, self.cfg.$field)?.repr()?)),*];
                Ok(format!("{}({})", stringify!($py_name), parts.join(", ")))
            }
        }

        impl $py_name {
            pub fn algorithm(&self) -> AlgorithmConfig {
                AlgorithmConfig::$variant(self.cfg)
            }
        }
    };
}

algorithm_class!(FixedLimit, "fixed", FixedConfig, Fixed, Fixed,
    doc = "A static limit (`Limiter(FixedLimit(initial_limit=20))`, or `Limiter(limit=20)`).",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit });
algorithm_class!(AimdLimit, "aimd", AimdConfig, Aimd, Aimd,
    doc = "Additive increase while latency is under target, multiplicative decrease on overload (`netflix_parity=True` reproduces Netflix AIMDLimit).",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit,
      target_latency = target_latency_ns: Secs, latency_percentile = latency_percentile: Real,
      backoff_ratio = backoff_ratio: Real, timeout = timeout_ns: Secs,
      app_limited_fraction = app_limited_fraction: Real, slow_start = slow_start: Flag,
      netflix_parity = netflix_parity: Flag });
algorithm_class!(HysteresisLimit, "hysteresis_aimd", HysteresisConfig, HysteresisAimd, Hysteresis,
    doc = "AIMD with healthy / warning / critical zones on the rolling p99, jump detection and cool-off.",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit,
      target_latency = target_latency_ns: Secs, healthy_below = healthy_below: Real,
      critical_above = critical_above: Real, critical_factor = critical_factor: Real,
      jump_rise = jump_rise: Real, jump_window = jump_window_ns: Secs, jump_factor = jump_factor: Real,
      avg_alpha = avg_alpha: Real, cool_off = cool_off_ns: Secs, p99_window = p99_window_ns: Secs,
      app_limited_fraction = app_limited_fraction: Real, slow_start = slow_start: Flag });
algorithm_class!(GradientLimit, "gradient", GradientConfig, Gradient, Gradient,
    doc = "Envoy's gradient controller (the default): limit follows baseline RTT / sampled RTT plus sqrt headroom; probe-free baseline unless `probe_interval` is set.",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit,
      buffer = buffer: Real, headroom = headroom: Real, smoothing = smoothing: Real,
      sample_percentile = sample_percentile: Real, probe_interval = probe_interval_ns: Secs,
      probe_jitter = probe_jitter: Real, probe_limit = probe_limit: Real,
      probe_samples = probe_samples: Count, pinned_baseline = pinned_baseline_ns: Secs,
      backoff = backoff: Real, drop_tolerance = drop_tolerance: Real, slow_start = slow_start: Flag,
      app_limited_ratio = app_limited_ratio: Real, seed = seed: Seed });
algorithm_class!(Gradient2Limit, "gradient2", Gradient2Config, Gradient2, Gradient2,
    doc = "Netflix concurrency-limits' Gradient2 (long vs short RTT); `fixed=True` backs off on drops.",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit,
      smoothing = smoothing: Real, queue_size = queue_size: Real, long_window = long_window: Count,
      rtt_tolerance = rtt_tolerance: Real, fixed = fixed: Flag, backoff_ratio = backoff_ratio: Real,
      app_limited_fraction = app_limited_fraction: Real, slow_start = slow_start: Flag });
algorithm_class!(VegasLimit, "vegas", VegasConfig, Vegas, Vegas,
    doc = "Netflix concurrency-limits' Vegas (queue-size estimate from RTT).",
    { initial_limit = initial_limit: Limit, min_limit = min_limit: Limit, max_limit = max_limit: Limit,
      smoothing = smoothing: Real, alpha = alpha: OptCount, beta = beta: OptCount,
      threshold = threshold: OptCount, decrease_ratio = decrease_ratio: OptReal,
      probe_multiplier = probe_multiplier: Count, seed = seed: Seed,
      app_limited_fraction = app_limited_fraction: Real, slow_start = slow_start: Flag });

/// An algorithm given as a config object or by name (defaults).
pub fn algorithm_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<AlgorithmConfig> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(AlgorithmConfig::default());
    };
    if let Ok(s) = v.cast::<PyString>() {
        return match &*s.to_cow()? {
            "fixed" => Ok(AlgorithmConfig::Fixed(FixedConfig::default())),
            "aimd" => Ok(AlgorithmConfig::Aimd(AimdConfig::default())),
            "hysteresis" | "hysteresis_aimd" => {
                Ok(AlgorithmConfig::Hysteresis(HysteresisConfig::default()))
            }
            "gradient" => Ok(AlgorithmConfig::Gradient(GradientConfig::default())),
            "gradient2" => Ok(AlgorithmConfig::Gradient2(Gradient2Config::default())),
            "vegas" => Ok(AlgorithmConfig::Vegas(VegasConfig::default())),
            other => Err(PyValueError::new_err(format!(
                "unknown algorithm {other:?}: use 'fixed', 'aimd', 'hysteresis', 'gradient', \
                 'gradient2' or 'vegas', or a config object such as AimdLimit(...)"
            ))),
        };
    }
    macro_rules! try_cls {
        ($($cls:ident),*) => {
            $(if let Ok(c) = v.cast::<$cls>() {
                return Ok(c.get().algorithm());
            })*
        };
    }
    try_cls!(FixedLimit, AimdLimit, HysteresisLimit, GradientLimit, Gradient2Limit, VegasLimit);
    Err(PyTypeError::new_err(format!(
        "algorithm must be a name or a config object (FixedLimit, AimdLimit, ...), got {}",
        type_name(v)
    )))
}

/// Reads the limiter settings shared by `Limiter` and `Gate` from keyword arguments.
#[allow(clippy::too_many_arguments)]
pub fn limiter_config(
    algorithm: Option<&Bound<'_, PyAny>>,
    limit: Option<&Bound<'_, PyAny>>,
    levels: Option<&Bound<'_, PyAny>>,
    weights: Option<&Bound<'_, PyAny>>,
    min_window: Option<&Bound<'_, PyAny>>,
    max_window: Option<&Bound<'_, PyAny>>,
    window_rtt_multiple: Option<&Bound<'_, PyAny>>,
    min_samples: Option<&Bound<'_, PyAny>>,
    active: Option<&Bound<'_, PyAny>>,
) -> PyResult<LimiterConfig> {
    let mut cfg = LimiterConfig::default();
    if let Some(l) = limit.filter(|v| !v.is_none()) {
        if algorithm.is_some_and(|a| !a.is_none()) {
            return Err(PyTypeError::new_err(
                "give either limit= (a fixed limit) or algorithm=, not both",
            ));
        }
        let n = ranged_arg("limit", l, 1e-6, 1e9)?;
        cfg.algorithm = AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: n,
            min_limit: n.min(1.0),
            max_limit: n.max(1.0),
        });
    } else {
        cfg.algorithm = algorithm_arg(algorithm)?;
    }
    if let Some(v) = levels.filter(|v| !v.is_none()) {
        let n = uint_arg("levels", v, Priority::MAX_LEVELS as u64)?;
        if n == 0 {
            return Err(PyValueError::new_err("levels must be in [1, 8], got 0"));
        }
        cfg.levels = n as u8;
        if weights.is_none() {
            // Default shares for other level counts: everything to the most important
            // level's reservation is too strict; split evenly.
            if n != 3 {
                cfg.weights = [0.0; Priority::MAX_LEVELS];
                for w in cfg.weights.iter_mut().take(n as usize) {
                    *w = 1.0 / n as f64;
                }
            }
        }
    }
    if let Some(v) = weights.filter(|v| !v.is_none()) {
        let seq: Vec<Bound<'_, PyAny>> = v
            .try_iter()
            .map_err(|_| PyTypeError::new_err("weights must be a sequence of floats"))?
            .collect::<PyResult<_>>()?;
        if seq.len() != cfg.levels as usize {
            return Err(PyValueError::new_err(format!(
                "weights must have one entry per level ({}), got {}",
                cfg.levels,
                seq.len()
            )));
        }
        cfg.weights = [0.0; Priority::MAX_LEVELS];
        for (i, w) in seq.iter().enumerate() {
            cfg.weights[i] = ranged_arg("weights", w, 0.0, 1.0)?;
        }
    }
    if let Some(v) = opt_secs_arg("min_window", min_window, 3600.0)? {
        cfg.min_window_ns = v;
    }
    if let Some(v) = opt_secs_arg("max_window", max_window, 3600.0)? {
        cfg.max_window_ns = v;
    }
    if let Some(v) = window_rtt_multiple.filter(|v| !v.is_none()) {
        cfg.window_rtt_multiple = ranged_arg("window_rtt_multiple", v, 0.0, 1e6)?;
    }
    if let Some(v) = min_samples.filter(|v| !v.is_none()) {
        cfg.min_samples = uint_arg("min_samples", v, 1_000_000)? as u32;
    }
    if let Some(v) = opt_secs_arg("active", active, 3600.0)? {
        cfg.active_ns = v;
    }
    Ok(cfg)
}

/// A concurrency limiter: admits work while in-flight is below an adaptive limit, learns
/// the limit from completions, and splits it between priority levels.
///
/// Lock-free and exact (never over-admits, not even in a race). No queue: a refusal
/// raises at once (use `Gate` to wait). In this process, or (`shared=`, or
/// `Limiter.shared(name, ...)`, Linux) in memory shared by worker processes: one limit
/// across all of them, each permit counted to its process so a dead worker's come back.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct Limiter {
    pub core: Placed<CoreLimiter>,
    pub overload: Py<PyTuple>,
    /// `clock=`: read instead of the native clock.
    pub clock: Option<Py<PyAny>>,
}

#[pymethods]
impl Limiter {
    #[new]
    #[pyo3(signature = (algorithm=None, *, limit=None, levels=None, weights=None,
        min_window=None, max_window=None, window_rtt_multiple=None, min_samples=None,
        active=None, overload_exceptions=None, clock=None, shared=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        algorithm: Option<&Bound<'_, PyAny>>,
        limit: Option<&Bound<'_, PyAny>>,
        levels: Option<&Bound<'_, PyAny>>,
        weights: Option<&Bound<'_, PyAny>>,
        min_window: Option<&Bound<'_, PyAny>>,
        max_window: Option<&Bound<'_, PyAny>>,
        window_rtt_multiple: Option<&Bound<'_, PyAny>>,
        min_samples: Option<&Bound<'_, PyAny>>,
        active: Option<&Bound<'_, PyAny>>,
        overload_exceptions: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let place = where_arg(shared, clock)?;
        let clock = clock_arg(clock)?;
        let cfg = limiter_config(
            algorithm,
            limit,
            levels,
            weights,
            min_window,
            max_window,
            window_rtt_multiple,
            min_samples,
            active,
        )?;
        let core = open(py, "Limiter", place, cfg)?;
        Ok(Self { core, overload: overload_arg(py, overload_exceptions)?, clock })
    }

    /// One limiter across worker processes (Linux): `Limiter.shared("name", limit=4)`
    /// creates or attaches to the shared-memory limiter of that name (`None`: anonymous,
    /// for processes forked afterwards): a `Limiter` with the same API. Takes the
    /// constructor's arguments except `clock` (every process reads the native clock).
    #[staticmethod]
    #[pyo3(signature = (name, *args, **kwargs))]
    fn shared<'py>(
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        shared_call::<Self>(py, name, args, kwargs)
    }

    /// Removes a shared limiter's name (attached processes keep their segment); whether
    /// it existed. A path is a `ValueError` (remove a segment at a path with `os.unlink`).
    #[cfg(target_os = "linux")]
    #[staticmethod]
    fn unlink(py: Python<'_>, name: &str) -> PyResult<bool> {
        unlink_name(py, "Limiter", name, Placed::<CoreLimiter>::unlink)
    }

    /// A context manager: `with limiter.acquire(priority="normal") as permit:` admits on
    /// entry (raising `Rejected` if refused) and releases on exit (success, dropped for
    /// overload exceptions, ignored for others).
    #[pyo3(signature = (priority=None, *, now_ns=None))]
    fn acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let py = slf.py();
        let p = priority_arg(py, priority, slf.get().core.limiter().levels())?;
        let now = match now_ns {
            Some(v) if !v.is_none() => Some(now_arg(v)?),
            _ => None,
        };
        Ok(Permit::pending(Owner::Limiter(slf.clone().unbind()), p, None, now, false))
    }

    /// Admits now or raises `Rejected`; returns a held permit. Release it with
    /// `permit.success()`, `permit.dropped()` or `permit.ignore()` (or use it in `with`).
    #[pyo3(signature = (priority=None, *, now_ns=None))]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        priority: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Permit> {
        let py = slf.py();
        let lim = slf.get();
        let p = priority_arg(py, priority, lim.core.limiter().levels())?;
        let injected = now_ns.is_some_and(|v| !v.is_none());
        let now = now_from(py, lim.clock.as_ref(), now_ns)?;
        match lim.core.try_acquire_raw(now, p) {
            Ok(raw) => Ok(Permit::admitted(Owner::Limiter(slf.clone().unbind()), p, raw, injected)),
            Err(e) => Err(place_err(py, "Limiter", e)),
        }
    }

    /// A shared limiter: releases the permits of worker processes proven dead (exactly
    /// once each) and returns how many; a local one: 0.
    fn reclaim(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.core.reclaim())
    }

    /// Whether the limiter lives in memory shared between processes.
    #[getter]
    fn is_shared(&self) -> bool {
        self.core.is_shared()
    }

    /// Whether this object made its limiter (a shared one: false if it attached to
    /// another process's segment).
    #[getter]
    fn created(&self) -> bool {
        self.core.created()
    }

    /// Processes using the limiter (1 for a local one).
    #[getter]
    fn attached_processes(&self) -> u32 {
        self.core.attached_processes()
    }

    /// Permits held by this process (a local limiter's: all of them).
    #[getter]
    fn held_by_this_process(&self) -> u32 {
        self.core.held_by_this_process()
    }

    /// The kill switch: pin the limit to `limit`, or `None` to hand control
    /// back to the algorithm.
    fn set_static_limit(&self, py: Python<'_>, limit: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        set_static_limit_arg(py, self.core.limiter(), limit)
    }

    /// The limit in force (may be fractional).
    #[getter]
    fn limit(&self) -> f64 {
        self.core.limiter().limit()
    }

    /// Requests in flight.
    #[getter]
    fn inflight(&self) -> u32 {
        self.core.limiter().inflight()
    }

    /// Priority levels in use.
    #[getter]
    fn levels(&self) -> u8 {
        self.core.limiter().levels()
    }

    /// Requests in flight at `priority`.
    fn inflight_of(&self, py: Python<'_>, priority: &Bound<'_, PyAny>) -> PyResult<u32> {
        let l = self.core.limiter();
        Ok(l.inflight_of(priority_arg(py, Some(priority), l.levels())?))
    }

    /// A snapshot of counters and gauges as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        limiter_metrics(py, &self.core.limiter().metrics())
    }

    fn __repr__(&self) -> String {
        let m = self.core.limiter().metrics();
        let shared = if self.core.is_shared() { ", shared=True" } else { "" };
        format!(
            "Limiter(algorithm={:?}, limit={}, inflight={}{shared})",
            m.algorithm, m.limit, m.inflight
        )
    }
}

/// `LimiterMetrics` as a dict (per-level arrays cut to the levels in use).
pub fn limiter_metrics<'py>(
    py: Python<'py>,
    m: &surgeguard_core::LimiterMetrics,
) -> PyResult<Bound<'py, PyDict>> {
    let n = m.levels as usize;
    let d = PyDict::new(py);
    d.set_item("algorithm", m.algorithm)?;
    d.set_item("limit", m.limit)?;
    d.set_item("static_limit", m.static_limit)?;
    d.set_item("inflight", m.inflight)?;
    d.set_item("levels", m.levels)?;
    d.set_item("inflight_by_level", m.inflight_by_level[..n].to_vec())?;
    d.set_item("share_by_level", m.share_by_level[..n].to_vec())?;
    d.set_item("demand_by_level", m.demand_by_level[..n].to_vec())?;
    d.set_item("admitted", m.admitted)?;
    d.set_item("rejected", m.rejected)?;
    d.set_item("rejected_by_level", m.rejected_by_level[..n].to_vec())?;
    d.set_item("successes", m.successes)?;
    d.set_item("drops", m.drops)?;
    d.set_item("ignored", m.ignored)?;
    d.set_item("windows", m.windows)?;
    d.set_item("folded_samples", m.folded_samples)?;
    d.set_item("min_rtt", secs(m.min_rtt_ns))?;
    d.set_item("avg_rtt", secs(m.avg_rtt_ns))?;
    d.set_item("p99_rtt", secs(m.p99_rtt_ns))?;
    Ok(d)
}
