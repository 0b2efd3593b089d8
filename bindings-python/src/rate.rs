//! `RateLimiter` (GCRA) and `PacedDrain`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use surgeguard_core::rate::{
    time_to_drain as core_time_to_drain, PacedDrain as CoreDrain, PacedDrainConfig,
    RateLimiter as CoreRate, RateLimiterConfig,
};

use crate::common::*;
use crate::placed::{open, shared_call, where_arg};
use pyo3::types::PyTuple;
use surgeguard::placement::Placed;

/// A GCRA rate limiter on one atomic word: `per_second` units per second, bursts of up to
/// `burst` units, weighted cost. A refusal says how long to wait instead of sleeping.
///
/// Lock-free (one compare-and-swap per admitted call).
#[pyclass(frozen, module = "surgeguard._native")]
pub struct RateLimiter {
    core: Placed<CoreRate>,
}

fn rate_config(
    per_second: &Bound<'_, PyAny>,
    burst: Option<&Bound<'_, PyAny>>,
) -> PyResult<RateLimiterConfig> {
    let per_second = real_arg("per_second", per_second)?;
    let burst = match burst.filter(|v| !v.is_none()) {
        None => 1,
        Some(b) => uint_arg("burst", b, 1_000_000_000)? as u32,
    };
    Ok(RateLimiterConfig { per_second, burst })
}

fn cost_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(1),
        Some(v) => Ok(uint_arg("cost", v, u32::MAX as u64)? as u32),
    }
}

#[pymethods]
impl RateLimiter {
    #[new]
    #[pyo3(signature = (per_second, burst=None, *, shared=None))]
    fn new(
        py: Python<'_>,
        per_second: &Bound<'_, PyAny>,
        burst: Option<&Bound<'_, PyAny>>,
        shared: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let place = where_arg(shared, None)?;
        Ok(Self { core: open(py, "RateLimiter", place, rate_config(per_second, burst)?)? })
    }

    /// One rate across worker processes (Linux): `RateLimiter.shared("name", 100, burst=10)`
    /// creates or attaches to the shared-memory rate limiter of that name (`None`:
    /// anonymous, for processes forked afterwards); same API. Another config under the
    /// same name raises `ValueError`.
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

    /// Takes `cost` units now; True if allowed.
    #[pyo3(signature = (cost=None, *, now_ns=None))]
    fn try_acquire(
        &self,
        cost: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let cost = cost_arg(cost)?;
        Ok(self.core.check(now_or_clock(now_ns)?, cost).is_ok())
    }

    /// Takes `cost` units now or raises `RateLimited` (with `retry_after`; `inf` when
    /// `cost` exceeds the burst).
    #[pyo3(signature = (cost=None, *, now_ns=None))]
    fn check(
        &self,
        py: Python<'_>,
        cost: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let cost = cost_arg(cost)?;
        self.core.check(now_or_clock(now_ns)?, cost).map_err(|r| rejected_err(py, r))
    }

    /// Takes as many of `max` units as conform now; returns how many.
    #[pyo3(signature = (max, *, now_ns=None))]
    fn take_up_to(
        &self,
        max: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let max = uint_arg("max", max, u32::MAX as u64)? as u32;
        Ok(self.core.take_up_to(now_or_clock(now_ns)?, max))
    }

    /// Units that would conform now.
    #[pyo3(signature = (*, now_ns=None))]
    fn available(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
        Ok(self.core.available(now_or_clock(now_ns)?))
    }

    /// Seconds until `cost` units conform (0 = now; `inf` = never).
    #[pyo3(signature = (cost=None, *, now_ns=None))]
    fn wait_time(
        &self,
        cost: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<f64> {
        let cost = cost_arg(cost)?;
        let w = self.core.wait_time(now_or_clock(now_ns)?, cost);
        Ok(if w == u64::MAX { f64::INFINITY } else { secs(w) })
    }

    /// The burst, units.
    #[getter]
    fn burst(&self) -> u32 {
        self.core.burst()
    }

    /// The sustained rate, units per second.
    #[getter]
    fn per_second(&self) -> f64 {
        SEC_F / self.core.emission_ns() as f64
    }

    /// A snapshot as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("allowed", m.allowed)?;
        d.set_item("denied", m.denied)?;
        d.set_item("per_second", SEC_F / m.emission_ns as f64)?;
        d.set_item("burst", m.burst)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("RateLimiter(per_second={}, burst={})", self.per_second(), self.core.burst())
    }
}

/// Paces the drain of a backlog after an outage: at most `target_per_sec × (1 − headroom)`
/// items per second start (draining at full speed re-saturates the dependency
/// that just came back).
#[pyclass(frozen, module = "surgeguard._native")]
pub struct PacedDrain {
    core: CoreDrain,
}

#[pymethods]
impl PacedDrain {
    #[new]
    #[pyo3(signature = (target_per_sec, *, headroom=None, burst=None))]
    fn new(
        py: Python<'_>,
        target_per_sec: &Bound<'_, PyAny>,
        headroom: Option<&Bound<'_, PyAny>>,
        burst: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = PacedDrainConfig::new(real_arg("target_per_sec", target_per_sec)?);
        if let Some(h) = headroom.filter(|v| !v.is_none()) {
            cfg.headroom = real_arg("headroom", h)?;
        }
        if let Some(b) = burst.filter(|v| !v.is_none()) {
            cfg.burst = uint_arg("burst", b, 1_000_000_000)? as u32;
        }
        let core = CoreDrain::new(cfg).map_err(|e| config_err(py, "PacedDrain", e))?;
        Ok(Self { core })
    }

    /// How many of `backlog` waiting items may start now (counted as started).
    #[pyo3(signature = (backlog, *, now_ns=None))]
    fn permits(
        &self,
        backlog: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u32> {
        let backlog = uint_arg("backlog", backlog, u64::MAX)?;
        Ok(self.core.permits(now_or_clock(now_ns)?, backlog))
    }

    /// Seconds until the next item may start (0 = now): when to set the timer.
    #[pyo3(signature = (*, now_ns=None))]
    fn next_permit_in(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
        Ok(secs(self.core.next_permit_in(now_or_clock(now_ns)?)))
    }

    /// Seconds to drain `backlog` while new work arrives at `produce_per_sec`; `None` if it
    /// never drains.
    #[pyo3(signature = (backlog, produce_per_sec=None))]
    fn time_to_drain(
        &self,
        backlog: &Bound<'_, PyAny>,
        produce_per_sec: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<f64>> {
        let backlog = uint_arg("backlog", backlog, u64::MAX)?;
        let produce_per_sec = match produce_per_sec.filter(|v| !v.is_none()) {
            Some(v) => rate_arg("produce_per_sec", v)?,
            None => 0.0,
        };
        Ok(self.core.time_to_drain(backlog, produce_per_sec).map(secs))
    }

    /// The drain rate, items per second.
    #[getter]
    fn drain_per_sec(&self) -> f64 {
        self.core.drain_per_sec()
    }

    /// A snapshot as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("started", m.started)?;
        d.set_item("calls", m.calls)?;
        d.set_item("drain_per_sec", m.drain_per_sec)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("PacedDrain(drain_per_sec={})", self.core.drain_per_sec())
    }
}

/// The drain time: seconds to drain `backlog` consumed at `consume_per_sec` while
/// produced at `produce_per_sec`; `None` if it never drains.
#[pyfunction]
pub fn time_to_drain(
    backlog: &Bound<'_, PyAny>,
    consume_per_sec: &Bound<'_, PyAny>,
    produce_per_sec: &Bound<'_, PyAny>,
) -> PyResult<Option<f64>> {
    let backlog = uint_arg("backlog", backlog, u64::MAX)?;
    let consume_per_sec = rate_arg("consume_per_sec", consume_per_sec)?;
    let produce_per_sec = rate_arg("produce_per_sec", produce_per_sec)?;
    Ok(core_time_to_drain(backlog, consume_per_sec, produce_per_sec).map(secs))
}
