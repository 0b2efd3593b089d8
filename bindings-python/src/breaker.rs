//! `CircuitBreaker`, its per-call handle, and the native wrapper a decorated function
//! becomes (the hot path stays native: no Python frame between caller and callee).

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use surgeguard_core::breaker::{
    BreakerPermit, BreakerState, BreakerWindow, CircuitBreaker as CoreBreaker, CircuitBreakerConfig,
};
use surgeguard_core::{Outcome, UsageError};

use crate::common::*;

/// A circuit breaker (resilience4j semantics): count or time window, failure-rate and
/// slow-call thresholds, minimum calls, jittered open period (fleets do not probe in
/// unison), half-open probes through leased slots, then a 10 % → 25 % → 50 % → 100 %
/// traffic ramp (after Resilience4j's and Envoy's breakers). Wait-free on the closed path.
///
/// Use it as a decorator (`@breaker`), a context manager (`with breaker:`), or explicitly
/// (`call = breaker.try_acquire(); ...; call.success()`). Exceptions that are instances of
/// `failure_exceptions` (default `Exception`) count as failures, unless they are instances
/// of `ignore_exceptions`; others (`CancelledError`, `KeyboardInterrupt`) record nothing.
#[pyclass(frozen, subclass, module = "surgeguard._native", name = "CircuitBreaker")]
pub struct CircuitBreaker {
    core: CoreBreaker,
    failures: Py<PyTuple>,
    ignored: Py<PyTuple>,
    /// `clock=`: read instead of the native clock.
    clock: Option<Py<PyAny>>,
}

impl CircuitBreaker {
    /// The outcome for an exception instance.
    fn outcome_of_error(&self, py: Python<'_>, err: &PyErr) -> Outcome {
        let v = err.value(py);
        if v.is_instance(self.ignored.bind(py)).unwrap_or(false) {
            Outcome::Ignored
        } else if v.is_instance(self.failures.bind(py)).unwrap_or(false) {
            Outcome::Dropped
        } else {
            Outcome::Ignored
        }
    }

    /// The outcome for an exception class (or None).
    fn outcome_of_type(&self, exc_type: &Bound<'_, PyAny>) -> PyResult<Outcome> {
        if exc_type.is_none() {
            return Ok(Outcome::Success);
        }
        let py = exc_type.py();
        if is_overload(exc_type, self.ignored.bind(py))? {
            Ok(Outcome::Ignored)
        } else if is_overload(exc_type, self.failures.bind(py))? {
            Ok(Outcome::Dropped)
        } else {
            Ok(Outcome::Ignored)
        }
    }
}

fn exc_tuple(
    py: Python<'_>,
    name: &str,
    v: Option<&Bound<'_, PyAny>>,
    default: Vec<Bound<'_, PyAny>>,
) -> PyResult<Py<PyTuple>> {
    let items: Vec<Bound<'_, PyAny>> = match v.filter(|v| !v.is_none()) {
        None => default,
        Some(v) => match v.cast::<PyTuple>() {
            Ok(t) => t.iter().collect(),
            Err(_) => vec![v.clone()],
        },
    };
    let base = py.get_type::<pyo3::exceptions::PyBaseException>();
    for it in &items {
        let ok = it.cast::<pyo3::types::PyType>().map(|t| t.is_subclass(&base).unwrap_or(false));
        if !matches!(ok, Ok(true)) {
            return Err(PyTypeError::new_err(format!(
                "{name} must be an exception class or a tuple of them"
            )));
        }
    }
    Ok(PyTuple::new(py, items)?.unbind())
}

fn state_name(s: BreakerState) -> &'static str {
    match s {
        BreakerState::Closed => "closed",
        BreakerState::Ramping => "ramping",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

#[pymethods]
impl CircuitBreaker {
    #[new]
    #[pyo3(signature = (*, window_calls=None, window_time=None, failure_rate_threshold=None,
        slow_call_rate_threshold=None, slow_call_duration=None, minimum_calls=None,
        open_duration=None, open_jitter=None, half_open_probes=None, probe_lease=None,
        ramp_duration=None, seed=None, failure_exceptions=None, ignore_exceptions=None, clock=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        window_calls: Option<&Bound<'_, PyAny>>,
        window_time: Option<&Bound<'_, PyAny>>,
        failure_rate_threshold: Option<&Bound<'_, PyAny>>,
        slow_call_rate_threshold: Option<&Bound<'_, PyAny>>,
        slow_call_duration: Option<&Bound<'_, PyAny>>,
        minimum_calls: Option<&Bound<'_, PyAny>>,
        open_duration: Option<&Bound<'_, PyAny>>,
        open_jitter: Option<&Bound<'_, PyAny>>,
        half_open_probes: Option<&Bound<'_, PyAny>>,
        probe_lease: Option<&Bound<'_, PyAny>>,
        ramp_duration: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        failure_exceptions: Option<&Bound<'_, PyAny>>,
        ignore_exceptions: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let clock = clock_arg(clock)?;
        let seed = opt_uint_arg("seed", seed, u64::MAX)?.unwrap_or(0);
        let mut cfg = CircuitBreakerConfig { seed, ..CircuitBreakerConfig::default() };
        match (window_calls.filter(|v| !v.is_none()), window_time.filter(|v| !v.is_none())) {
            (Some(_), Some(_)) => {
                return Err(PyTypeError::new_err("give window_calls or window_time, not both"))
            }
            (Some(n), None) => {
                cfg.window =
                    BreakerWindow::Count(uint_arg("window_calls", n, u32::MAX as u64)? as u32);
                if minimum_calls.is_none() {
                    // resilience4j's default minimum (100) above a small window: use the window.
                    if let BreakerWindow::Count(n) = cfg.window {
                        cfg.minimum_calls = cfg.minimum_calls.min(n.max(1));
                    }
                }
            }
            (None, Some(t)) => {
                cfg.window = BreakerWindow::Time(secs_arg("window_time", t, 86_400.0)?)
            }
            (None, None) => {}
        }
        if let Some(v) = failure_rate_threshold.filter(|v| !v.is_none()) {
            cfg.failure_rate_threshold = real_arg("failure_rate_threshold", v)?;
        }
        if let Some(v) = slow_call_rate_threshold.filter(|v| !v.is_none()) {
            cfg.slow_call_rate_threshold = real_arg("slow_call_rate_threshold", v)?;
        }
        if let Some(v) = opt_secs_arg("slow_call_duration", slow_call_duration, 86_400.0)? {
            cfg.slow_call_duration = v;
        }
        if let Some(v) = minimum_calls.filter(|v| !v.is_none()) {
            cfg.minimum_calls = uint_arg("minimum_calls", v, u32::MAX as u64)? as u32;
        }
        if let Some(v) = opt_secs_arg("open_duration", open_duration, 86_400.0)? {
            cfg.open_duration = v;
        }
        if let Some(v) = open_jitter.filter(|v| !v.is_none()) {
            cfg.open_jitter = real_arg("open_jitter", v)?;
        }
        if let Some(v) = half_open_probes.filter(|v| !v.is_none()) {
            cfg.half_open_probes = uint_arg("half_open_probes", v, u32::MAX as u64)? as u32;
        }
        if let Some(v) = opt_secs_arg("probe_lease", probe_lease, 86_400.0)? {
            cfg.probe_lease = v;
        }
        if let Some(v) = opt_secs_arg("ramp_duration", ramp_duration, 86_400.0)? {
            cfg.ramp_duration = v;
        }
        let core = CoreBreaker::new(cfg).map_err(|e| config_err(py, "CircuitBreaker", e))?;
        let exception = py.get_type::<pyo3::exceptions::PyException>().into_any();
        Ok(Self {
            core,
            failures: exc_tuple(py, "failure_exceptions", failure_exceptions, vec![exception])?,
            ignored: exc_tuple(py, "ignore_exceptions", ignore_exceptions, vec![])?,
            clock,
        })
    }

    /// Asks to make a call: returns a `BreakerCall` to report on, or raises `BreakerOpen`
    /// (with `retry_after`).
    #[pyo3(signature = (*, now_ns=None))]
    fn try_acquire(
        slf: &Bound<'_, Self>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<BreakerCall> {
        let py = slf.py();
        let injected = now_ns.is_some_and(|v| !v.is_none());
        let now = now_from(py, slf.get().clock.as_ref(), now_ns)?;
        match slf.get().core.try_acquire(now) {
            Ok(p) => Ok(BreakerCall {
                breaker: slf.clone().unbind(),
                permit: std::sync::Mutex::new(Some(p)),
                started: now,
                injected,
                done: AtomicBool::new(false),
            }),
            Err(r) => Err(rejected_err(py, r)),
        }
    }

    /// Reports `call` (which must come from this breaker) with `outcome`.
    #[pyo3(signature = (call, outcome="success", *, now_ns=None))]
    fn record(
        slf: &Bound<'_, Self>,
        call: &Bound<'_, PyAny>,
        outcome: &str,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let call = call
            .cast::<BreakerCall>()
            .map_err(|_| PyTypeError::new_err("record() takes a BreakerCall"))?;
        if !call.get().breaker.bind(py).is(slf) {
            return Err(usage_err(py, UsageError::ForeignHandle));
        }
        let o = outcome_arg(&pyo3::types::PyString::new(py, outcome).into_any())?;
        call.get().finish(py, o, now_ns)
    }

    /// Wraps a sync callable natively (used by the `@breaker` decorator).
    fn _wrap(slf: &Bound<'_, Self>, func: Py<PyAny>) -> BreakerFunction {
        BreakerFunction { breaker: slf.clone().unbind(), func }
    }

    /// The outcome for leaving a block with `exc_type` (used by `with breaker:`).
    fn _outcome(&self, exc_type: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        Ok(outcome_name(self.outcome_of_type(exc_type)?))
    }

    /// `"closed"`, `"ramping"`, `"open"` or `"half_open"`.
    #[pyo3(signature = (*, now_ns=None))]
    fn state(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<&'static str> {
        Ok(state_name(self.core.state(now_from(py, self.clock.as_ref(), now_ns)?)))
    }

    /// Whether calls are refused outright now.
    #[pyo3(signature = (*, now_ns=None))]
    fn is_open(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.core.is_open(now_from(py, self.clock.as_ref(), now_ns)?))
    }

    /// A snapshot as a dict.
    #[pyo3(signature = (*, now_ns=None))]
    fn metrics<'py>(
        &self,
        py: Python<'py>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics(now_from(py, self.clock.as_ref(), now_ns)?);
        let d = PyDict::new(py);
        d.set_item("state", state_name(m.state))?;
        d.set_item("admit_fraction", m.admit_permille as f64 / 1000.0)?;
        d.set_item("open_remaining", secs(m.open_remaining))?;
        d.set_item("window_calls", m.window_calls)?;
        d.set_item("window_failures", m.window_failures)?;
        d.set_item("window_slow", m.window_slow)?;
        d.set_item("opened", m.opened)?;
        d.set_item("half_opened", m.half_opened)?;
        d.set_item("closed", m.closed)?;
        d.set_item("rejected", m.rejected)?;
        d.set_item("ramp_shed", m.ramp_shed)?;
        d.set_item("probes", m.probes)?;
        d.set_item("stale_records", m.stale_records)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        // With a `clock=`, at the latest time seen (no call into Python from repr).
        let now = if self.clock.is_some() { 0 } else { clock_ns() };
        format!("<surgeguard.CircuitBreaker {}>", state_name(self.core.state(now)))
    }
}

/// One call the breaker allowed: report it once with `success()`, `failure()` or
/// `ignore()`, or use it as a context manager. Dropped unreported, it records nothing (a
/// probe's slot frees when its lease ends).
#[pyclass(frozen, module = "surgeguard._native")]
pub struct BreakerCall {
    breaker: Py<CircuitBreaker>,
    permit: std::sync::Mutex<Option<BreakerPermit>>,
    started: u64,
    injected: bool,
    done: AtomicBool,
}

impl BreakerCall {
    fn finish(
        &self,
        py: Python<'_>,
        outcome: Outcome,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let now = match now_ns {
            Some(v) if !v.is_none() => now_arg(v)?,
            _ if self.injected => self.started,
            _ => read_clock(py, self.breaker.get().clock.as_ref())?,
        };
        let permit = self.permit.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(permit) = permit else {
            return Err(usage_err(py, UsageError::AlreadyReleased));
        };
        self.done.store(true, Ordering::Relaxed);
        let latency = now.saturating_sub(self.started);
        self.breaker.get().core.record(permit, now, outcome, latency);
        Ok(())
    }
}

#[pymethods]
impl BreakerCall {
    /// The call succeeded (its latency still counts toward slow calls).
    #[pyo3(signature = (*, now_ns=None))]
    fn success(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.finish(py, Outcome::Success, now_ns)
    }

    /// The call failed (counts toward the failure rate).
    #[pyo3(signature = (*, now_ns=None))]
    fn failure(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.finish(py, Outcome::Dropped, now_ns)
    }

    /// The call says nothing about the dependency (cancelled, a 4xx).
    #[pyo3(signature = (*, now_ns=None))]
    fn ignore(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.finish(py, Outcome::Ignored, now_ns)
    }

    /// Whether this call is a half-open probe.
    #[getter]
    fn is_probe(&self) -> bool {
        self.permit.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|p| p.is_probe())
    }

    /// Whether it was reported.
    #[getter]
    fn reported(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        _exc_value: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        if !self.done.load(Ordering::Relaxed) {
            let outcome = self.breaker.get().outcome_of_type(exc_type)?;
            // Reported inside the block already (a race with another thread) is fine.
            let _ = self.finish(py, outcome, None);
        }
        Ok(false)
    }
}

/// A sync callable guarded by a breaker (what `@breaker` returns for a sync function).
#[pyclass(frozen, dict, module = "surgeguard._native")]
pub struct BreakerFunction {
    breaker: Py<CircuitBreaker>,
    func: Py<PyAny>,
}

#[pymethods]
impl BreakerFunction {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let b = self.breaker.get();
        let start = read_clock(py, b.clock.as_ref())?;
        let permit = b.core.try_acquire(start).map_err(|r| rejected_err(py, r))?;
        let result = self.func.bind(py).call(args, kwargs);
        let end = match read_clock(py, b.clock.as_ref()) {
            Ok(t) => t,
            Err(e) => {
                // The clock failed after the call: report nothing, raise its error.
                b.core.record(permit, start, Outcome::Ignored, 0);
                return Err(e);
            }
        };
        let outcome = match &result {
            Ok(_) => Outcome::Success,
            Err(e) => b.outcome_of_error(py, e),
        };
        b.core.record(permit, end, outcome, end.saturating_sub(start));
        result.map(Bound::unbind)
    }

    /// Binds as a method when the decorated function is a class attribute.
    fn __get__(
        slf: Bound<'_, Self>,
        instance: Option<&Bound<'_, PyAny>>,
        _owner: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match instance.filter(|i| !i.is_none()) {
            None => Ok(slf.into_any().unbind()),
            Some(inst) => {
                let method = py.import("types")?.getattr("MethodType")?;
                Ok(method.call1((slf, inst))?.unbind())
            }
        }
    }

    /// The breaker guarding this function.
    #[getter]
    fn breaker(&self, py: Python<'_>) -> Py<CircuitBreaker> {
        self.breaker.clone_ref(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("<breaker-guarded {}>", self.func.bind(py).repr()?))
    }
}
