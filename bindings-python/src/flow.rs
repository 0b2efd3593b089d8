//! Pipeline backpressure: `Credits`, `LagMeter`, `Watermarks`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use surgeguard_core::flow::{
    Credits as CoreCredits, CreditsConfig, LagMeter as CoreLag, LagMeterConfig, Transition,
    Watermarks as CoreWatermarks, WatermarksConfig,
};

use crate::common::*;

/// Snapshots a `LagMeter` keeps: rates over the last 60 buckets (one minute at 1 s).
const LAG_SNAPSHOTS: usize = 61;

fn count_arg(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<u32> {
    Ok(count_arg_up_to(name, v, u32::MAX as u64)? as u32)
}

/// An optional count (default 1) up to `max`.
fn count_arg_up_to(name: &str, v: Option<&Bound<'_, PyAny>>, max: u64) -> PyResult<u64> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(1),
        Some(v) => uint_arg(name, v, max),
    }
}

/// Demand-driven flow control for one channel: the consumer grants credit, the producer
/// takes one credit per item and can never send more than was granted (Reactive Streams
/// rule 1.1); credit is topped up in batches at `low_water`. Lock-free.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct Credits {
    core: CoreCredits,
}

#[pymethods]
impl Credits {
    #[new]
    #[pyo3(signature = (*, capacity=None, low_water=None))]
    fn new(
        py: Python<'_>,
        capacity: Option<&Bound<'_, PyAny>>,
        low_water: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = CreditsConfig::default();
        if let Some(v) = capacity.filter(|v| !v.is_none()) {
            cfg.capacity = uint_arg("capacity", v, u32::MAX as u64)? as u32;
            if low_water.is_none() {
                cfg.low_water = cfg.capacity / 4;
            }
        }
        if let Some(v) = low_water.filter(|v| !v.is_none()) {
            cfg.low_water = uint_arg("low_water", v, u32::MAX as u64)? as u32;
        }
        let core = CoreCredits::new(cfg).map_err(|e| config_err(py, "Credits", e))?;
        Ok(Self { core })
    }

    /// Producer: takes `k` credits, all or nothing; True if taken.
    #[pyo3(signature = (k=None))]
    fn try_take(&self, k: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        Ok(self.core.try_take(count_arg("k", k)?).is_ok())
    }

    /// Producer: takes `k` credits or raises `NoCredit`.
    #[pyo3(signature = (k=None))]
    fn take(&self, py: Python<'_>, k: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core.try_take(count_arg("k", k)?).map_err(|r| rejected_err(py, r))
    }

    /// Producer: takes as many of `k` credits as are available; returns how many.
    fn take_up_to(&self, k: &Bound<'_, PyAny>) -> PyResult<u32> {
        Ok(self.core.take_up_to(uint_arg("k", k, u32::MAX as u64)? as u32))
    }

    /// Consumer: `k` taken items are done. Completing more than are buffered raises
    /// `UsageError` and changes nothing.
    #[pyo3(signature = (k=None))]
    fn complete(&self, py: Python<'_>, k: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.core.complete(count_arg("k", k)?).map_err(|e| usage_err(py, e))
    }

    /// Consumer: grants up to `n` more credits (clipped to capacity); returns the grant.
    fn grant(&self, n: &Bound<'_, PyAny>) -> PyResult<u32> {
        Ok(self.core.grant(uint_arg("n", n, u32::MAX as u64)? as u32))
    }

    /// Consumer: the credit `replenish()` would grant now (a query).
    fn grant_due(&self) -> u32 {
        self.core.grant_due()
    }

    /// Consumer: grants what is due and returns it (send it upstream as `request(n)`).
    fn replenish(&self) -> u32 {
        self.core.replenish()
    }

    /// Credit the producer may still use.
    #[getter]
    fn available(&self) -> u32 {
        self.core.available()
    }

    /// Items taken and not yet completed.
    #[getter]
    fn buffered(&self) -> u32 {
        self.core.buffered()
    }

    /// `available + buffered`, never above capacity.
    #[getter]
    fn outstanding(&self) -> u32 {
        self.core.outstanding()
    }

    /// True when the producer has no credit.
    #[getter]
    fn stalled(&self) -> bool {
        self.core.is_stalled()
    }

    /// A snapshot as a dict.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics();
        let d = PyDict::new(py);
        d.set_item("granted", m.granted)?;
        d.set_item("taken", m.taken)?;
        d.set_item("completed", m.completed)?;
        d.set_item("refused", m.refused)?;
        d.set_item("available", m.available)?;
        d.set_item("buffered", m.buffered)?;
        d.set_item("stalled", m.stalled)?;
        d.set_item("capacity", m.capacity)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.core.config();
        format!(
            "Credits(capacity={}, low_water={}, available={})",
            c.capacity,
            c.low_water,
            self.core.available()
        )
    }
}

fn opt_secs(ns: Option<u64>) -> Option<f64> {
    ns.map(secs)
}

/// Consumer lag in seconds and time to drain, from windowed produce and consume rates
/// (lag is measured in seconds, not messages: a count means nothing without the rate). Rates are measured over the
/// last 60 buckets of `bucket` seconds. Lock-free.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct LagMeter {
    core: CoreLag<LAG_SNAPSHOTS>,
}

#[pymethods]
impl LagMeter {
    #[new]
    #[pyo3(signature = (*, bucket=None))]
    fn new(py: Python<'_>, bucket: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let mut cfg = LagMeterConfig::default();
        if let Some(v) = opt_secs_arg("bucket", bucket, 86_400.0)? {
            cfg.bucket = v;
        }
        let core = CoreLag::new(cfg).map_err(|e| config_err(py, "LagMeter", e))?;
        Ok(Self { core })
    }

    /// `n` items entered the backlog.
    #[pyo3(signature = (n=None, *, now_ns=None))]
    fn record_produced(
        &self,
        n: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        // Item counts are u64 in the core (C and Node take the same range).
        let n = count_arg_up_to("n", n, u64::MAX)?;
        self.core.record_produced(now_or_clock(now_ns)?, n);
        Ok(())
    }

    /// `n` items left the backlog.
    #[pyo3(signature = (n=None, *, now_ns=None))]
    fn record_consumed(
        &self,
        n: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let n = count_arg_up_to("n", n, u64::MAX)?;
        self.core.record_consumed(now_or_clock(now_ns)?, n);
        Ok(())
    }

    /// Cumulative totals (e.g. a partition's end offset and committed offset).
    #[pyo3(signature = (produced_total, consumed_total, *, now_ns=None))]
    fn observe_totals(
        &self,
        produced_total: &Bound<'_, PyAny>,
        consumed_total: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let p = uint_arg("produced_total", produced_total, u64::MAX)?;
        let c = uint_arg("consumed_total", consumed_total, u64::MAX)?;
        self.core.observe_totals(now_or_clock(now_ns)?, p, c);
        Ok(())
    }

    /// The enqueue time (the same clock's ns) of the oldest unprocessed item, or None.
    #[pyo3(signature = (enqueued_at_ns, *, now_ns=None))]
    fn report_oldest(
        &self,
        enqueued_at_ns: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let at = match enqueued_at_ns.filter(|v| !v.is_none()) {
            None => None,
            Some(v) => Some(now_arg(v)?),
        };
        self.core.report_oldest(now_or_clock(now_ns)?, at);
        Ok(())
    }

    /// Items produced and not yet consumed.
    #[pyo3(signature = (*, now_ns=None))]
    fn lag(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        Ok(self.core.lag(now_or_clock(now_ns)?))
    }

    /// Items per second produced (None until measured).
    #[pyo3(signature = (*, now_ns=None))]
    fn produce_rate(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(self.core.produce_rate(now_or_clock(now_ns)?))
    }

    /// Items per second consumed (None until measured).
    #[pyo3(signature = (*, now_ns=None))]
    fn consume_rate(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(self.core.consume_rate(now_or_clock(now_ns)?))
    }

    /// Lag in seconds (`lag / consume_rate`); None when nothing is consumed.
    #[pyo3(signature = (*, now_ns=None))]
    fn lag_seconds(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(opt_secs(self.core.lag_time(now_or_clock(now_ns)?)))
    }

    /// Seconds to drain the backlog; None when it is not shrinking.
    #[pyo3(signature = (*, now_ns=None))]
    fn time_to_drain(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(opt_secs(self.core.time_to_drain(now_or_clock(now_ns)?)))
    }

    /// The alert predicate: the backlog takes longer than `limit` seconds to drain (or
    /// does not drain).
    #[pyo3(signature = (limit, *, now_ns=None))]
    fn time_to_drain_exceeds(
        &self,
        limit: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let limit = secs_arg("limit", limit, 1e9)?;
        Ok(self.core.time_to_drain_exceeds(now_or_clock(now_ns)?, limit))
    }

    /// Age in seconds of the oldest unprocessed item, if reported.
    #[pyo3(signature = (*, now_ns=None))]
    fn oldest_age(&self, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
        Ok(opt_secs(self.core.oldest_age(now_or_clock(now_ns)?)))
    }

    /// A snapshot as a dict.
    #[pyo3(signature = (*, now_ns=None))]
    fn metrics<'py>(
        &self,
        py: Python<'py>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics(now_or_clock(now_ns)?);
        let d = PyDict::new(py);
        d.set_item("produced", m.produced)?;
        d.set_item("consumed", m.consumed)?;
        d.set_item("lag", m.lag)?;
        d.set_item("rates_known", m.rates_known)?;
        d.set_item("produce_rate", m.produce_rate)?;
        d.set_item("consume_rate", m.consume_rate)?;
        d.set_item("lag_seconds", m.lag_seconds)?;
        d.set_item("time_to_drain_seconds", m.time_to_drain_seconds)?;
        d.set_item("oldest_age", opt_secs(m.oldest_age))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("LagMeter(bucket={})", secs(self.core.config().bucket))
    }
}

/// Kafka-style pause / resume with hysteresis on free capacity: pause when
/// `capacity − level` falls below `pause_below`, resume only above `resume_above`, so a
/// level sawing inside the band never flaps. Wait-free.
#[pyclass(frozen, module = "surgeguard._native")]
pub struct Watermarks {
    core: CoreWatermarks,
}

#[pymethods]
impl Watermarks {
    #[new]
    #[pyo3(signature = (*, capacity=None, pause_below=None, resume_above=None))]
    fn new(
        py: Python<'_>,
        capacity: Option<&Bound<'_, PyAny>>,
        pause_below: Option<&Bound<'_, PyAny>>,
        resume_above: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut cfg = WatermarksConfig::default();
        if let Some(v) = capacity.filter(|v| !v.is_none()) {
            cfg.capacity = uint_arg("capacity", v, u64::MAX)?;
            if pause_below.is_none() && resume_above.is_none() {
                cfg.pause_below = (cfg.capacity / 4).max(1);
                cfg.resume_above = cfg.capacity / 2;
            }
        }
        if let Some(v) = pause_below.filter(|v| !v.is_none()) {
            cfg.pause_below = uint_arg("pause_below", v, u64::MAX)?;
        }
        if let Some(v) = resume_above.filter(|v| !v.is_none()) {
            cfg.resume_above = uint_arg("resume_above", v, u64::MAX)?;
        }
        let core = CoreWatermarks::new(cfg).map_err(|e| config_err(py, "Watermarks", e))?;
        Ok(Self { core })
    }

    /// Reports the current level; returns `"pause"`, `"resume"` or None.
    #[pyo3(signature = (level, *, now_ns=None))]
    fn observe(
        &self,
        level: &Bound<'_, PyAny>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<&'static str>> {
        let level = uint_arg("level", level, u64::MAX)?;
        Ok(self.core.observe(now_or_clock(now_ns)?, level).map(Transition::as_str))
    }

    /// Whether the consumer should be paused now.
    #[getter]
    fn paused(&self) -> bool {
        self.core.is_paused()
    }

    /// A snapshot as a dict.
    #[pyo3(signature = (*, now_ns=None))]
    fn metrics<'py>(
        &self,
        py: Python<'py>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let m = self.core.metrics(now_or_clock(now_ns)?);
        let d = PyDict::new(py);
        d.set_item("paused", m.paused)?;
        d.set_item("pauses", m.pauses)?;
        d.set_item("resumes", m.resumes)?;
        d.set_item("time_paused", secs(m.time_paused))?;
        d.set_item("last_level", m.last_level)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let c = self.core.config();
        format!(
            "Watermarks(capacity={}, pause_below={}, resume_above={})",
            c.capacity, c.pause_below, c.resume_above
        )
    }
}
