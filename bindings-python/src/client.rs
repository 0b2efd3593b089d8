//! Client-side controls: retry budgets, the gRPC token throttle, SRE adaptive throttling
//! and backoff.

use std::sync::Mutex;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use surgeguard_core::backoff::{Backoff as CoreBackoff, BackoffConfig, Jitter};
use surgeguard_core::retry::{
    RetryBudget as CoreBudget, RetryBudgetConfig, TokenRetryThrottle as CoreToken,
    TokenThrottleConfig,
};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{
    AdaptiveThrottle as CoreThrottle, AdaptiveThrottleConfig, ThrottleForm,
};

use crate::common::*;
use crate::placed::{open, shared_call, where_arg};
use surgeguard::placement::Placed;

/// A retry budget (Finagle / SRE): every request deposits, every retry withdraws,
/// deposits expire after `ttl` seconds, and `min_retries_per_sec × ttl` retries are always
/// available. Bounds retries to a share of traffic, so a dependency that is down sees
/// about `1 + percent_can_retry` times the traffic, not `attempts` times.
///
/// Lock-free; `deposit` is one atomic add, `try_withdraw` one compare-and-swap.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct RetryBudget {
    core: Placed<CoreBudget>,
}

#[pymethods]
impl RetryBudget {
    #[new]
    #[pyo3(signature = (*, ttl=None, min_retries_per_sec=None, percent_can_retry=None, retry_ratio=None, shared=None))]
    fn new(
        py: Python<'_>,
        ttl: Option<&Bound<'_, PyAny>>,
        min_retries_per_sec: Option<&Bound<'_, PyAny>>,
        percent_can_retry: Option<&Bound<'_, PyAny>>,
        retry_ratio: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let place = where_arg(shared, None)?;
        let mut cfg = RetryBudgetConfig::default();
        if let Some(v) = opt_secs_arg("ttl", ttl, 3600.0)? {
            cfg.ttl = v;
        }
        if let Some(v) = min_retries_per_sec.filter(|v| !v.is_none()) {
            cfg.min_retries_per_sec = uint_arg("min_retries_per_sec", v, 1_000_000)? as u32;
        }
        let percent = percent_can_retry.filter(|v| !v.is_none());
        let ratio = retry_ratio.filter(|v| !v.is_none());
        if percent.is_some() && ratio.is_some() {
            return Err(PyTypeError::new_err(
                "RetryBudget: give percent_can_retry or retry_ratio, not both",
            ));
        }
        // A fraction, as in Finagle's RetryBudget: 0.2 lets retries add 20% to traffic.
        // Above 1 is refused rather than guessed (10 could mean 10% or 1000%); the same
        // quantity without the percent-sounding name, up to 1000 as in Finagle, is
        // `retry_ratio` (as in the Node binding).
        if let Some(v) = percent {
            let p = ranged_arg("percent_can_retry", v, 0.0, 1000.0)?;
            if p > 1.0 {
                return Err(PyValueError::new_err(format!(
                    "percent_can_retry is a fraction in [0, 1] (0.2 = 20% of traffic; got {p}); \
                     for more retries than requests use retry_ratio"
                )));
            }
            cfg.percent_can_retry = p;
        }
        if let Some(v) = ratio {
            cfg.percent_can_retry = ranged_arg("retry_ratio", v, 0.0, 1000.0)?;
        }
        Ok(Self { core: open(py, "RetryBudget", place, cfg)? })
    }

    /// One retry budget across worker processes (Linux): `RetryBudget.shared("name", ...)`
    /// takes the constructor's arguments and creates or attaches to the shared-memory
    /// budget of that name (`None`: anonymous, for processes forked afterwards); same API.
    /// Another config under the same name raises `ValueError`.
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

    /// Records one request (a first attempt, not a retry).
    #[pyo3(signature = (*, now_ns=None))]
    fn deposit(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core.deposit(now_or_clock(now_ns)?);
        Ok(())
    }

    /// Takes one retry from the budget; True if allowed.
    #[pyo3(signature = (*, now_ns=None))]
    fn try_withdraw(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.core.try_withdraw(now_or_clock(now_ns)?).is_ok())
    }

    /// Takes one retry or raises `RetryBudgetExhausted` (with `retry_after`).
    #[pyo3(signature = (*, now_ns=None))]
    fn withdraw(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core.try_withdraw(now_or_clock(now_ns)?).map_err(|r| rejected_err(py, r))
    }

    /// Retries that would be allowed now, without taking any.
    #[pyo3(signature = (*, now_ns=None))]
    fn available(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        Ok(self.core.available(now_or_clock(now_ns)?))
    }

    /// A snapshot of the counters as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("requests", m.requests)?;
        d.set_item("retries_allowed", m.retries_allowed)?;
        d.set_item("retries_denied", m.retries_denied)?;
        d.set_item("available", m.available)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.core.config();
        format!(
            "RetryBudget(ttl={}, min_retries_per_sec={}, percent_can_retry={})",
            secs(c.ttl),
            c.min_retries_per_sec,
            c.percent_can_retry
        )
    }
}

/// The gRPC A6 retry throttle: tokens start at `max_tokens`, a failure takes one, a
/// success adds `token_ratio`; retries only while tokens are above half.
///
/// Lock-free (one atomic word).
#[pyclass(frozen, module = "surgeguard._native")]
pub struct TokenRetryThrottle {
    core: CoreToken,
}

#[pymethods]
impl TokenRetryThrottle {
    #[new]
    #[pyo3(signature = (*, max_tokens=None, token_ratio=None))]
    fn new(
        py: Python<'_>,
        max_tokens: Option<&Bound<'_, PyAny>>,
        token_ratio: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = TokenThrottleConfig::default();
        if let Some(v) = max_tokens.filter(|v| !v.is_none()) {
            cfg.max_tokens = real_arg("max_tokens", v)?;
        }
        if let Some(v) = token_ratio.filter(|v| !v.is_none()) {
            cfg.token_ratio = real_arg("token_ratio", v)?;
        }
        let core = CoreToken::new(cfg).map_err(|e| config_err(py, "TokenRetryThrottle", e))?;
        Ok(Self { core })
    }

    /// Records an RPC's result (`success=False` for retryable failures and pushback).
    fn record(&self, success: &Bound<'_, PyAny>) -> PyResult<()> {
        self.core.record(bool_arg("success", success)?);
        Ok(())
    }

    /// Whether a retry may be sent now (counted); True if allowed.
    fn try_retry(&self) -> bool {
        self.core.try_retry().is_ok()
    }

    /// Whether retries are allowed now (not counted).
    #[getter]
    fn retry_allowed(&self) -> bool {
        self.core.is_retry_allowed()
    }

    /// The current token count.
    #[getter]
    fn tokens(&self) -> f64 {
        self.core.tokens()
    }

    /// A snapshot as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("tokens", m.tokens)?;
        d.set_item("throttled", m.throttled)?;
        d.set_item("retries_allowed", m.retries_allowed)?;
        d.set_item("retries_denied", m.retries_denied)?;
        d.set_item("successes", m.successes)?;
        d.set_item("failures", m.failures)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.core.config();
        format!("TokenRetryThrottle(max_tokens={}, token_ratio={})", c.max_tokens, c.token_ratio)
    }
}

/// SRE client-side adaptive throttling: refuses locally with probability
/// `max(0, (requests − k·accepts) / (requests + 1))` (capped), so requests the backend
/// would reject cost it nothing.
///
/// Wait-free. Randomness: a SplitMix64 seeded by `seed`, one draw per decision.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct AdaptiveThrottle {
    core: CoreThrottle,
    rng: std::sync::atomic::AtomicU64,
}

/// SplitMix64's increment (Steele, Lea, Flood 2014): one shared, wait-free sequence.
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

#[pymethods]
impl AdaptiveThrottle {
    #[new]
    #[pyo3(signature = (*, k=None, window=None, max_drop_probability=None, form=None, seed=None))]
    fn new(
        py: Python<'_>,
        k: Option<&Bound<'_, PyAny>>,
        window: Option<&Bound<'_, PyAny>>,
        max_drop_probability: Option<&Bound<'_, PyAny>>,
        form: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let seed = opt_uint_arg("seed", seed, u64::MAX)?.unwrap_or(0);
        let mut cfg = AdaptiveThrottleConfig::default();
        if let Some(v) = k.filter(|v| !v.is_none()) {
            cfg.k = real_arg("k", v)?;
        }
        if let Some(v) = opt_secs_arg("window", window, 86_400.0)? {
            cfg.window = v;
        }
        if let Some(v) = max_drop_probability.filter(|v| !v.is_none()) {
            cfg.max_drop_probability = real_arg("max_drop_probability", v)?;
        }
        let form = match form.filter(|v| !v.is_none()) {
            None => None,
            Some(v) => Some(
                v.cast::<pyo3::types::PyString>()
                    .map_err(|_| {
                        pyo3::exceptions::PyTypeError::new_err(format!(
                            "form must be 'ring' or 'ema', got {}",
                            type_name(v)
                        ))
                    })?
                    .to_cow()?
                    .into_owned(),
            ),
        };
        cfg.form = match form.as_deref() {
            None | Some("ring") => ThrottleForm::Ring,
            Some("ema") => ThrottleForm::Ema,
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "form must be 'ring' or 'ema', got {other:?}"
                )))
            }
        };
        let core = CoreThrottle::new(cfg).map_err(|e| config_err(py, "AdaptiveThrottle", e))?;
        Ok(Self { core, rng: std::sync::atomic::AtomicU64::new(seed) })
    }

    /// Records a request that was sent: `accepted` is whether the backend took it.
    #[pyo3(signature = (accepted, *, now_ns=None))]
    fn record(
        &self,
        accepted: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.core.record(now_or_clock(now_ns)?, bool_arg("accepted", accepted)?);
        Ok(())
    }

    /// Decides whether to refuse a request locally; True means "do not send it"
    /// (the refusal is counted as a request).
    #[pyo3(signature = (*, now_ns=None))]
    fn should_throttle(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let now = now_or_clock(now_ns)?;
        Ok(self.core.should_throttle(now, self.draw()).is_err())
    }

    /// Raises `Throttled` (with `retry_after`) if the request should be refused locally.
    #[pyo3(signature = (*, now_ns=None))]
    fn check(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let now = now_or_clock(now_ns)?;
        self.core.should_throttle(now, self.draw()).map_err(|r| rejected_err(py, r))
    }

    /// The current local drop probability.
    #[pyo3(signature = (*, now_ns=None))]
    fn drop_probability(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        Ok(self.core.drop_probability(now_or_clock(now_ns)?))
    }

    /// A snapshot as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("requests", m.requests)?;
        d.set_item("accepts", m.accepts)?;
        d.set_item("drop_probability", m.drop_probability)?;
        d.set_item("throttled", m.throttled)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.core.config();
        format!("AdaptiveThrottle(k={}, window={})", c.k, secs(c.window))
    }
}

impl AdaptiveThrottle {
    fn draw(&self) -> u64 {
        let x = self
            .rng
            .fetch_add(GOLDEN_GAMMA, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        surgeguard_core::rng::mix(x)
    }
}

/// Delays between the attempts of a retried call: exponential (`base · multiplier^(n−1)`,
/// capped) with full / equal / decorrelated jitter, never shorter than a server's
/// `Retry-After`. Seeded, so a run replays. Not shared: one per retried call (it remembers
/// the previous delay for decorrelated jitter); `copy()` makes a fresh one.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct Backoff {
    cfg: BackoffConfig,
    seed: u64,
    state: Mutex<(CoreBackoff, SplitMix64)>,
}

fn jitter_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Jitter> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Jitter::Full);
    };
    let s = v.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err("jitter must be 'full', 'equal', 'decorrelated' or 'none'")
    })?;
    match &*s.to_cow()? {
        "full" => Ok(Jitter::Full),
        "equal" => Ok(Jitter::Equal),
        "decorrelated" => Ok(Jitter::Decorrelated),
        "none" => Ok(Jitter::None),
        other => Err(PyValueError::new_err(format!(
            "jitter must be 'full', 'equal', 'decorrelated' or 'none', got {other:?}"
        ))),
    }
}

fn jitter_name(j: Jitter) -> &'static str {
    match j {
        Jitter::None => "none",
        Jitter::Full => "full",
        Jitter::Equal => "equal",
        Jitter::Decorrelated => "decorrelated",
    }
}

#[pymethods]
impl Backoff {
    #[new]
    #[pyo3(signature = (*, base=None, multiplier=None, cap=None, jitter=None, seed=None))]
    fn new(
        py: Python<'_>,
        base: Option<&Bound<'_, PyAny>>,
        multiplier: Option<&Bound<'_, PyAny>>,
        cap: Option<&Bound<'_, PyAny>>,
        jitter: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let seed = opt_uint_arg("seed", seed, u64::MAX)?;
        let mut cfg = BackoffConfig::default();
        if let Some(v) = opt_secs_arg("base", base, 86_400.0)? {
            cfg.base = v;
        }
        if let Some(v) = multiplier.filter(|v| !v.is_none()) {
            cfg.multiplier = real_arg("multiplier", v)?;
        }
        if let Some(v) = opt_secs_arg("cap", cap, 86_400.0)? {
            cfg.cap = v;
        }
        cfg.jitter = jitter_arg(jitter)?;
        let seed = seed.unwrap_or_else(clock_ns);
        Self::build(py, cfg, seed)
    }

    /// The delay (seconds) before retry number `attempt` (1 = first retry); never less than
    /// `retry_after` (the server's hint, seconds).
    #[pyo3(signature = (attempt, retry_after=None))]
    fn next_delay(
        &self,
        attempt: &Bound<'_, PyAny>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        let attempt = attempt_arg(attempt)?;
        let hint = opt_secs_arg("retry_after", retry_after, 86_400.0 * 365.0)?;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (b, rng) = &mut *st;
        Ok(secs(b.next_delay(attempt, hint, rng)))
    }

    /// The ceiling (seconds) before jitter for retry number `attempt`.
    fn ceiling(&self, attempt: &Bound<'_, PyAny>) -> PyResult<f64> {
        let attempt = attempt_arg(attempt)?;
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Ok(secs(st.0.ceiling(attempt)))
    }

    /// Forgets the previous delay (decorrelated jitter starts again from `base`).
    fn reset(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0.reset();
    }

    /// A fresh backoff with the same settings (and a new seed derived from this one's).
    fn copy(&self, py: Python<'_>) -> PyResult<Self> {
        let seed = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.1.next_u64()
        };
        Self::build(py, self.cfg, seed)
    }

    /// The settings as a dict (seconds).
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("base", secs(self.cfg.base))?;
        d.set_item("multiplier", self.cfg.multiplier)?;
        d.set_item("cap", secs(self.cfg.cap))?;
        d.set_item("jitter", jitter_name(self.cfg.jitter))?;
        d.set_item("seed", self.seed)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Backoff(base={}, multiplier={}, cap={}, jitter={:?})",
            secs(self.cfg.base),
            self.cfg.multiplier,
            secs(self.cfg.cap),
            jitter_name(self.cfg.jitter)
        )
    }
}

impl Backoff {
    fn build(py: Python<'_>, cfg: BackoffConfig, seed: u64) -> PyResult<Self> {
        let b = CoreBackoff::new(cfg).map_err(|e| config_err(py, "Backoff", e))?;
        Ok(Self { cfg, seed, state: Mutex::new((b, SplitMix64::new(seed))) })
    }
}

/// A retry number: 1 = the first retry; 0 is not a retry (refused, as in every binding).
fn attempt_arg(attempt: &Bound<'_, PyAny>) -> PyResult<u32> {
    match uint_arg("attempt", attempt, u32::MAX as u64)? {
        0 => Err(pyo3::exceptions::PyValueError::new_err(
            "attempt must be an int in [1, 2**32 - 1] (1 = the first retry), got 0",
        )),
        n => Ok(n as u32),
    }
}
