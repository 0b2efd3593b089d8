//! Pipeline backpressure: `Credits` (Reactive Streams demand), `LagMeter` (consumer lag),
//! `Watermarks` (Kafka-style pause/resume).

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surgeguard_core::flow::{
    Credits, CreditsConfig, LagMeter, LagMeterConfig, Watermarks, WatermarksConfig,
};

use crate::clock::resolve_now;
use crate::convert::{config_err, int_in, ms_to_ns, ns_to_ms, u32_of, usage_err};
use crate::resilience::Refusal;

/// Largest count accepted from JS: 2^53 (exact in a number).
const MAX_COUNT: u64 = 1 << 53;

fn count(what: &str, x: f64) -> Result<u64> {
    int_in(what, x, 0, MAX_COUNT)
}

// ---------------------------------------------------------------------------------------
// Credits

#[napi(object)]
#[derive(Default)]
pub struct CreditsOptions {
    pub capacity: Option<f64>,
    pub low_water: Option<f64>,
}

#[napi(object)]
pub struct CreditsMetricsJs {
    pub granted: f64,
    pub taken: f64,
    pub completed: f64,
    pub refused: f64,
    pub available: f64,
    pub buffered: f64,
    pub stalled: f64,
    pub capacity: f64,
}

#[napi(js_name = "NativeCredits")]
pub struct NativeCredits {
    core: Credits,
}

#[napi]
impl NativeCredits {
    #[napi(constructor)]
    pub fn new(options: Option<CreditsOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = CreditsConfig::default();
        if let Some(x) = o.capacity {
            c.capacity = u32_of("capacity", x)?;
        }
        if let Some(x) = o.low_water {
            c.low_water = u32_of("lowWater", x)?;
        }
        let core = Credits::new(c).map_err(|e| config_err("Credits", e))?;
        Ok(Self { core })
    }

    /// Takes `k` credits: `null`, or the refusal (nothing taken).
    #[napi]
    pub fn try_take(&self, k: f64) -> Result<Option<Refusal>> {
        let k = u32_of("k", k)?;
        Ok(self.core.try_take(k).err().map(|r| Refusal {
            reason: r.reason.as_str().to_string(),
            retry_after_ms: ns_to_ms(r.retry_after),
        }))
    }

    /// Takes up to `k` credits; how many were taken.
    #[napi]
    pub fn take_up_to(&self, k: f64) -> Result<f64> {
        Ok(f64::from(self.core.take_up_to(u32_of("k", k)?)))
    }

    /// The consumer finished `k` buffered items.
    #[napi]
    pub fn complete(&self, k: f64) -> Result<()> {
        self.core.complete(u32_of("k", k)?).map_err(usage_err)
    }

    /// Grants up to `n` credits; how many were granted.
    #[napi]
    pub fn grant(&self, n: f64) -> Result<f64> {
        Ok(f64::from(self.core.grant(u32_of("n", n)?)))
    }

    #[napi]
    pub fn grant_due(&self) -> f64 {
        f64::from(self.core.grant_due())
    }

    #[napi]
    pub fn replenish(&self) -> f64 {
        f64::from(self.core.replenish())
    }

    #[napi]
    pub fn available(&self) -> f64 {
        f64::from(self.core.available())
    }

    #[napi]
    pub fn buffered(&self) -> f64 {
        f64::from(self.core.buffered())
    }

    #[napi]
    pub fn outstanding(&self) -> f64 {
        f64::from(self.core.outstanding())
    }

    #[napi]
    pub fn is_stalled(&self) -> bool {
        self.core.is_stalled()
    }

    #[napi]
    pub fn metrics(&self) -> CreditsMetricsJs {
        let m = self.core.metrics();
        CreditsMetricsJs {
            granted: m.granted as f64,
            taken: m.taken as f64,
            completed: m.completed as f64,
            refused: m.refused as f64,
            available: m.available as f64,
            buffered: m.buffered as f64,
            stalled: m.stalled as f64,
            capacity: m.capacity as f64,
        }
    }
}

// ---------------------------------------------------------------------------------------
// LagMeter: 61 snapshots, so with the default 1 s bucket the rates cover one minute
// (a 1-minute consume rate, like a Kafka lag exporter's).

/// Snapshots kept: 60 buckets of window.
const LAG_SNAPSHOTS: usize = 61;

#[napi(object)]
#[derive(Default)]
pub struct LagMeterOptions {
    pub bucket_ms: Option<f64>,
}

#[napi(object)]
pub struct LagMetricsJs {
    pub produced: f64,
    pub consumed: f64,
    pub lag: f64,
    pub rates_known: bool,
    pub produce_rate: f64,
    pub consume_rate: f64,
    pub lag_seconds: f64,
    pub time_to_drain_seconds: f64,
    pub oldest_age_ms: Option<f64>,
}

#[napi(js_name = "NativeLagMeter")]
pub struct NativeLagMeter {
    core: Box<LagMeter<LAG_SNAPSHOTS>>,
}

#[napi]
impl NativeLagMeter {
    #[napi(constructor)]
    pub fn new(options: Option<LagMeterOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = LagMeterConfig::default();
        if let Some(x) = o.bucket_ms {
            c.bucket = ms_to_ns("bucketMs", x)?;
        }
        let core = LagMeter::new(c).map_err(|e| config_err("LagMeter", e))?;
        Ok(Self { core: Box::new(core) })
    }

    #[napi]
    pub fn record_produced(&self, n: f64, now_ns: Option<BigInt>) -> Result<()> {
        let n = count("n", n)?;
        self.core.record_produced(resolve_now(now_ns)?, n);
        Ok(())
    }

    #[napi]
    pub fn record_consumed(&self, n: f64, now_ns: Option<BigInt>) -> Result<()> {
        let n = count("n", n)?;
        self.core.record_consumed(resolve_now(now_ns)?, n);
        Ok(())
    }

    /// Reports absolute totals (e.g. a log-end offset and a committed offset).
    #[napi]
    pub fn observe_totals(
        &self,
        produced: f64,
        consumed: f64,
        now_ns: Option<BigInt>,
    ) -> Result<()> {
        let (p, c) = (count("produced", produced)?, count("consumed", consumed)?);
        self.core.observe_totals(resolve_now(now_ns)?, p, c);
        Ok(())
    }

    /// Reports the enqueue time (binding clock, ns) of the oldest unprocessed item, or
    /// `null` when none waits.
    #[napi]
    pub fn report_oldest(
        &self,
        enqueued_at_ns: Option<BigInt>,
        now_ns: Option<BigInt>,
    ) -> Result<()> {
        let at = match enqueued_at_ns {
            Some(b) => Some(resolve_now(Some(b))?),
            None => None,
        };
        self.core.report_oldest(resolve_now(now_ns)?, at);
        Ok(())
    }

    #[napi]
    pub fn lag(&self, now_ns: Option<BigInt>) -> Result<f64> {
        Ok(self.core.lag(resolve_now(now_ns)?) as f64)
    }

    #[napi]
    pub fn produce_rate(&self, now_ns: Option<BigInt>) -> Result<Option<f64>> {
        Ok(self.core.produce_rate(resolve_now(now_ns)?))
    }

    #[napi]
    pub fn consume_rate(&self, now_ns: Option<BigInt>) -> Result<Option<f64>> {
        Ok(self.core.consume_rate(resolve_now(now_ns)?))
    }

    /// Lag in time (lag / consume rate), ms; `null` while unknown.
    #[napi]
    pub fn lag_time_ms(&self, now_ns: Option<BigInt>) -> Result<Option<f64>> {
        Ok(self.core.lag_time(resolve_now(now_ns)?).map(ns_to_ms))
    }

    /// Time to drain at the current rates, ms; `null` if it never drains or is unknown.
    #[napi]
    pub fn time_to_drain_ms(&self, now_ns: Option<BigInt>) -> Result<Option<f64>> {
        Ok(self.core.time_to_drain(resolve_now(now_ns)?).map(ns_to_ms))
    }

    #[napi]
    pub fn time_to_drain_exceeds(&self, limit_ms: f64, now_ns: Option<BigInt>) -> Result<bool> {
        let limit = ms_to_ns("limitMs", limit_ms)?;
        Ok(self.core.time_to_drain_exceeds(resolve_now(now_ns)?, limit))
    }

    #[napi]
    pub fn oldest_age_ms(&self, now_ns: Option<BigInt>) -> Result<Option<f64>> {
        Ok(self.core.oldest_age(resolve_now(now_ns)?).map(ns_to_ms))
    }

    #[napi]
    pub fn metrics(&self, now_ns: Option<BigInt>) -> Result<LagMetricsJs> {
        let m = self.core.metrics(resolve_now(now_ns)?);
        Ok(LagMetricsJs {
            produced: m.produced as f64,
            consumed: m.consumed as f64,
            lag: m.lag as f64,
            rates_known: m.rates_known,
            produce_rate: m.produce_rate,
            consume_rate: m.consume_rate,
            lag_seconds: m.lag_seconds,
            time_to_drain_seconds: m.time_to_drain_seconds,
            oldest_age_ms: m.oldest_age.map(ns_to_ms),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Watermarks

#[napi(object)]
#[derive(Default)]
pub struct WatermarksOptions {
    pub capacity: Option<f64>,
    pub pause_below: Option<f64>,
    pub resume_above: Option<f64>,
}

#[napi(object)]
pub struct WatermarksMetricsJs {
    pub paused: bool,
    pub pauses: f64,
    pub resumes: f64,
    pub time_paused_ms: f64,
    pub last_level: f64,
}

#[napi(js_name = "NativeWatermarks")]
pub struct NativeWatermarks {
    core: Watermarks,
}

#[napi]
impl NativeWatermarks {
    #[napi(constructor)]
    pub fn new(options: Option<WatermarksOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = WatermarksConfig::default();
        if let Some(x) = o.capacity {
            c.capacity = count("capacity", x)?;
        }
        if let Some(x) = o.pause_below {
            c.pause_below = count("pauseBelow", x)?;
        }
        if let Some(x) = o.resume_above {
            c.resume_above = count("resumeAbove", x)?;
        }
        let core = Watermarks::new(c).map_err(|e| config_err("Watermarks", e))?;
        Ok(Self { core })
    }

    /// Observes the level; `'pause'`, `'resume'` or `null` (no change).
    #[napi]
    pub fn observe(&self, level: f64, now_ns: Option<BigInt>) -> Result<Option<&'static str>> {
        let level = count("level", level)?;
        Ok(self.core.observe(resolve_now(now_ns)?, level).map(|t| t.as_str()))
    }

    #[napi]
    pub fn is_paused(&self) -> bool {
        self.core.is_paused()
    }

    #[napi]
    pub fn metrics(&self, now_ns: Option<BigInt>) -> Result<WatermarksMetricsJs> {
        let m = self.core.metrics(resolve_now(now_ns)?);
        Ok(WatermarksMetricsJs {
            paused: m.paused,
            pauses: m.pauses as f64,
            resumes: m.resumes as f64,
            time_paused_ms: ns_to_ms(m.time_paused),
            last_level: m.last_level as f64,
        })
    }
}
