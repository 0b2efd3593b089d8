//! Conformance vectors for surgeguard: one executor that runs a vector step through the
//! core's public API and says what the core answered. The generator (`src/bin/gen.rs`)
//! builds scenarios with it and records the answers; the Rust replayer
//! (`tests/replay.rs`) parses the committed files and compares every answer again. The
//! C, Python and Node replayers do the same through their bindings. The format is
//! documented in `tests/vectors/README.md`.
//!
//! Only operations that every binding exposes with injected time are used (see the README
//! for what is left out and why).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};
use surgeguard_core::backoff::{Backoff, BackoffConfig, Jitter};
use surgeguard_core::breaker::{
    BreakerPermit, BreakerState, BreakerWindow, CircuitBreaker, CircuitBreakerConfig,
};
use surgeguard_core::codel::{CodelConfig, CodelMode};
use surgeguard_core::flow::{
    Credits, CreditsConfig, LagMeter, LagMeterConfig, Watermarks, WatermarksConfig,
};
use surgeguard_core::gate::{Aging, Arrival, Event, Gate, GateConfig, GateState, LifoTrigger};
use surgeguard_core::keyed::{hash_key, KeyPermit, KeyedConfig, KeyedLimits, ShardRate};
use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, FixedConfig, Gradient2Config, GradientConfig, HysteresisConfig,
    VegasConfig,
};
use surgeguard_core::rate::{PacedDrain, PacedDrainConfig, RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{
    RetryBudget, RetryBudgetConfig, TokenRetryThrottle, TokenThrottleConfig,
};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig, ThrottleForm};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority, RawPermit, Rejected, UsageError};

pub mod scenarios;

/// The `format` field of `vectors.json`.
pub const FORMAT: &str = "surgeguard-vectors";
/// The `version` field: bump it when a field's meaning changes.
pub const VERSION: u64 = 1;

/// The gate's compile-time queue bound used here; scenarios stay below it.
pub const GATE_CAP: usize = 256;

/// The snapshot count of the lag meter: the one every binding instantiates
/// (`SG_LAG_METER_SNAPSHOTS` in C, `LAG_SNAPSHOTS` in the Python and Node bindings).
pub const LAG_SNAPSHOTS: usize = 61;

type R<T> = Result<T, String>;

fn get<'a>(m: &'a Map<String, Value>, k: &str) -> R<&'a Value> {
    m.get(k).ok_or_else(|| format!("missing field {k:?}"))
}
fn u(m: &Map<String, Value>, k: &str) -> R<u64> {
    get(m, k)?.as_u64().ok_or_else(|| format!("field {k:?} is not a u64"))
}
fn f(m: &Map<String, Value>, k: &str) -> R<f64> {
    get(m, k)?.as_f64().ok_or_else(|| format!("field {k:?} is not a number"))
}
fn b(m: &Map<String, Value>, k: &str) -> R<bool> {
    get(m, k)?.as_bool().ok_or_else(|| format!("field {k:?} is not a bool"))
}
fn s<'a>(m: &'a Map<String, Value>, k: &str) -> R<&'a str> {
    get(m, k)?.as_str().ok_or_else(|| format!("field {k:?} is not a string"))
}
fn obj<'a>(m: &'a Map<String, Value>, k: &str) -> R<&'a Map<String, Value>> {
    get(m, k)?.as_object().ok_or_else(|| format!("field {k:?} is not an object"))
}
fn level(m: &Map<String, Value>) -> R<Priority> {
    let l = u(m, "level")?;
    Priority::new(l as u8).ok_or_else(|| format!("bad level {l}"))
}
fn outcome(m: &Map<String, Value>) -> R<Outcome> {
    match s(m, "outcome")? {
        "success" => Ok(Outcome::Success),
        "dropped" => Ok(Outcome::Dropped),
        "ignored" => Ok(Outcome::Ignored),
        o => Err(format!("bad outcome {o:?}")),
    }
}

/// `{"ok": false, "reason", "retry_after"}`.
fn rejected(r: Rejected) -> Value {
    json!({"ok": false, "reason": r.reason.as_str(), "retry_after": r.retry_after})
}
/// A float as the vectors write it: infinities as `null` (JSON has no infinity). A NaN
/// is a bug in the scenario or the core: refused.
fn float(x: f64) -> R<Value> {
    if x.is_nan() {
        return Err("a NaN answer".into());
    }
    Ok(if x.is_finite() { json!(x) } else { Value::Null })
}
/// A duration in ns, or `null` for none (infinite). `Some(u64::MAX)` is refused: the C ABI
/// could not tell it from none (`SG_NEVER`).
fn opt_ns(x: Option<u64>) -> R<Value> {
    match x {
        Some(u64::MAX) => Err("a duration of u64::MAX (indistinguishable from none in C)".into()),
        Some(v) => Ok(json!(v)),
        None => Ok(Value::Null),
    }
}
/// The stable name of a usage error (the Python `UsageError.kind`, Node's `SG_*` code in
/// lower case without the prefix, the C status).
pub fn usage_name(e: UsageError) -> &'static str {
    match e {
        UsageError::AlreadyReleased => "already_released",
        UsageError::ForeignHandle => "foreign_handle",
        UsageError::UnknownTicket => "unknown_ticket",
        UsageError::BadLevel => "bad_level",
        _ => "usage",
    }
}
fn verdict(r: Result<(), Rejected>) -> Value {
    match r {
        Ok(()) => json!({"ok": true}),
        Err(r) => rejected(r),
    }
}

/// The limiter part of a config (`limiter` object of a limiter or gate scenario).
pub fn limiter_config(c: &Map<String, Value>) -> R<LimiterConfig> {
    let a = obj(c, "algo")?;
    let (ini, min, max) = (f(a, "initial_limit")?, f(a, "min_limit")?, f(a, "max_limit")?);
    let algorithm = match s(c, "algorithm")? {
        "fixed" => AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
        }),
        "aimd" => AlgorithmConfig::Aimd(AimdConfig {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
            target_latency_ns: u(a, "target_latency_ns")?,
            backoff_ratio: f(a, "backoff_ratio")?,
            timeout_ns: u(a, "timeout_ns")?,
            slow_start: b(a, "slow_start")?,
            netflix_parity: b(a, "netflix_parity")?,
            ..AimdConfig::default()
        }),
        "hysteresis" => AlgorithmConfig::Hysteresis(HysteresisConfig {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
            target_latency_ns: u(a, "target_latency_ns")?,
            slow_start: b(a, "slow_start")?,
            ..HysteresisConfig::default()
        }),
        "gradient" => AlgorithmConfig::Gradient(GradientConfig {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
            smoothing: f(a, "smoothing")?,
            buffer: f(a, "buffer")?,
            slow_start: b(a, "slow_start")?,
            ..GradientConfig::default()
        }),
        "gradient2" => AlgorithmConfig::Gradient2(Gradient2Config {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
            smoothing: f(a, "smoothing")?,
            queue_size: f(a, "queue_size")?,
            long_window: u(a, "long_window")? as u32,
            fixed: b(a, "fixed")?,
            slow_start: b(a, "slow_start")?,
            ..Gradient2Config::default()
        }),
        "vegas" => AlgorithmConfig::Vegas(VegasConfig {
            initial_limit: ini,
            min_limit: min,
            max_limit: max,
            smoothing: f(a, "smoothing")?,
            probe_multiplier: u(a, "probe_multiplier")? as u32,
            seed: u(a, "seed")?,
            slow_start: b(a, "slow_start")?,
            ..VegasConfig::default()
        }),
        x => return Err(format!("unknown algorithm {x:?}")),
    };
    let levels = u(c, "levels")? as u8;
    let mut weights = [0.0; 8];
    let ws = get(c, "weights")?.as_array().ok_or("weights is not an array")?;
    for (i, w) in ws.iter().enumerate() {
        weights[i] = w.as_f64().ok_or("weight is not a number")?;
    }
    Ok(LimiterConfig {
        algorithm,
        levels,
        weights,
        min_window_ns: u(c, "min_window_ns")?,
        max_window_ns: u(c, "max_window_ns")?,
        min_samples: u(c, "min_samples")? as u32,
        active_ns: u(c, "active_ns")?,
        ..LimiterConfig::default()
    })
}

/// A gate config (`config` of a gate scenario).
pub fn gate_config(c: &Map<String, Value>) -> R<GateConfig> {
    let codel = if b(c, "codel")? {
        Some(CodelConfig {
            target_ns: u(c, "codel_target_ns")?,
            interval_ns: u(c, "codel_interval_ns")?,
            mode: match s(c, "codel_mode")? {
                "folly" => CodelMode::Folly,
                "rfc8289" => CodelMode::Rfc8289,
                x => return Err(format!("bad codel_mode {x:?}")),
            },
        })
    } else {
        None
    };
    let lifo = match get(c, "lifo")? {
        Value::String(x) if x == "codel" => LifoTrigger::CodelOverloaded,
        Value::String(x) if x == "never" => LifoTrigger::Never,
        Value::Number(n) => LifoTrigger::Occupancy(n.as_f64().unwrap_or(0.8)),
        x => return Err(format!("bad lifo {x}")),
    };
    let aging = match get(c, "aging")? {
        Value::Null => None,
        Value::Object(a) => Some(Aging {
            from: Priority::new(u(a, "from")? as u8).ok_or("bad aging.from")?,
            to: Priority::new(u(a, "to")? as u8).ok_or("bad aging.to")?,
            after_ns: u(a, "after_ns")?,
        }),
        x => return Err(format!("bad aging {x}")),
    };
    let max_wait = u(c, "max_wait_ns")?;
    Ok(GateConfig {
        limiter: limiter_config(obj(c, "limiter")?)?,
        queue_capacity: Some(u(c, "queue_capacity")? as usize),
        codel,
        lifo,
        max_wait_ns: if max_wait == 0 { None } else { Some(max_wait) },
        aging,
        initial_service_ns: u(c, "initial_service_ns")?,
        service_alpha: f(c, "service_alpha")?,
        fallback_retry_after_ns: u(c, "fallback_retry_after_ns")?,
    })
}

/// One object under test and the handles its steps refer to (by step index).
#[allow(clippy::large_enum_variant)] // one per scenario
pub enum Runner {
    /// A `Limiter`; permits by the index of the step that acquired them.
    Limiter(Box<Limiter>, BTreeMap<u64, RawPermit>),
    /// A `Gate`; permits by the index of the arrive step; tickets (bits) → arrive step.
    Gate(Box<Gate<GATE_CAP>>, BTreeMap<u64, RawPermit>, BTreeMap<u64, u64>),
    /// A `RetryBudget`.
    Budget(RetryBudget),
    /// A `TokenRetryThrottle`.
    Token(TokenRetryThrottle),
    /// An `AdaptiveThrottle`.
    Adaptive(AdaptiveThrottle),
    /// A `Backoff` and its generator.
    Backoff(Backoff, SplitMix64),
    /// A `CircuitBreaker`; permits (and the `now` they were taken at) by step index.
    Breaker(Box<CircuitBreaker>, BTreeMap<u64, (BreakerPermit, u64)>),
    /// A GCRA `RateLimiter`.
    Rate(RateLimiter),
    /// A `Credits` channel.
    Credits(Credits),
    /// A `LagMeter` with the bindings' snapshot count.
    Lag(Box<LagMeter<LAG_SNAPSHOTS>>),
    /// A `Watermarks` pair.
    Watermarks(Watermarks),
    /// A `PacedDrain`.
    Drain(PacedDrain),
    /// A `KeyedLimits` table, its key-hash seed, and permits by step index.
    Keyed(KeyedTable, u64, BTreeMap<u64, KeyPermit>),
    /// Deadline headers: pure functions, no state.
    Deadline,
}

/// A keyed table of one of the shard counts every binding compiles (16 and 64 here; all
/// three also have 256 and 1024), with the default 16 top keys.
pub enum KeyedTable {
    /// 16 shards.
    S16(Box<KeyedLimits<16>>),
    /// 64 shards.
    S64(Box<KeyedLimits<64>>),
}

macro_rules! on_table {
    ($t:expr, $x:ident => $e:expr) => {
        match $t {
            KeyedTable::S16($x) => $e,
            KeyedTable::S64($x) => $e,
        }
    };
}

fn state_name(s: BreakerState) -> &'static str {
    match s {
        BreakerState::Closed => "closed",
        BreakerState::Ramping => "ramping",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

impl Runner {
    /// Builds the object of a scenario from its `kind` and `config`.
    pub fn new(kind: &str, c: &Map<String, Value>) -> R<Self> {
        let ce = |e: surgeguard_core::ConfigError| format!("config refused: {e}");
        Ok(match kind {
            "limiter" => Runner::Limiter(
                Box::new(Limiter::new(limiter_config(c)?).map_err(ce)?),
                BTreeMap::new(),
            ),
            "gate" => Runner::Gate(
                Box::new(Gate::new(gate_config(c)?).map_err(ce)?),
                BTreeMap::new(),
                BTreeMap::new(),
            ),
            "retry_budget" => Runner::Budget(
                RetryBudget::new(RetryBudgetConfig {
                    ttl: u(c, "ttl_ns")?,
                    min_retries_per_sec: u(c, "min_retries_per_sec")? as u32,
                    percent_can_retry: f(c, "percent_can_retry")?,
                })
                .map_err(ce)?,
            ),
            "token_throttle" => Runner::Token(
                TokenRetryThrottle::new(TokenThrottleConfig {
                    max_tokens: f(c, "max_tokens")?,
                    token_ratio: f(c, "token_ratio")?,
                })
                .map_err(ce)?,
            ),
            "adaptive_throttle" => Runner::Adaptive(
                AdaptiveThrottle::new(AdaptiveThrottleConfig {
                    k: f(c, "k")?,
                    window: u(c, "window_ns")?,
                    max_drop_probability: f(c, "max_drop_probability")?,
                    form: match s(c, "form")? {
                        "ring" => ThrottleForm::Ring,
                        "ema" => ThrottleForm::Ema,
                        x => return Err(format!("bad form {x:?}")),
                    },
                })
                .map_err(ce)?,
            ),
            "backoff" => Runner::Backoff(
                Backoff::new(BackoffConfig {
                    base: u(c, "base_ns")?,
                    multiplier: f(c, "multiplier")?,
                    cap: u(c, "cap_ns")?,
                    jitter: match s(c, "jitter")? {
                        "none" => Jitter::None,
                        "full" => Jitter::Full,
                        "equal" => Jitter::Equal,
                        "decorrelated" => Jitter::Decorrelated,
                        x => return Err(format!("bad jitter {x:?}")),
                    },
                })
                .map_err(ce)?,
                SplitMix64::new(u(c, "seed")?),
            ),
            "breaker" => Runner::Breaker(
                Box::new(
                    CircuitBreaker::new(CircuitBreakerConfig {
                        window: match s(c, "window")? {
                            "count" => BreakerWindow::Count(u(c, "window_calls")? as u32),
                            "time" => BreakerWindow::Time(u(c, "window_ns")?),
                            x => return Err(format!("bad window {x:?}")),
                        },
                        failure_rate_threshold: f(c, "failure_rate_threshold")?,
                        slow_call_rate_threshold: f(c, "slow_call_rate_threshold")?,
                        slow_call_duration: u(c, "slow_call_ns")?,
                        minimum_calls: u(c, "minimum_calls")? as u32,
                        open_duration: u(c, "open_ns")?,
                        open_jitter: f(c, "open_jitter")?,
                        half_open_probes: u(c, "half_open_probes")? as u32,
                        probe_lease: u(c, "probe_lease_ns")?,
                        ramp_duration: u(c, "ramp_ns")?,
                        seed: u(c, "seed")?,
                    })
                    .map_err(ce)?,
                ),
                BTreeMap::new(),
            ),
            "rate_limiter" => Runner::Rate(
                RateLimiter::new(RateLimiterConfig {
                    per_second: f(c, "per_second")?,
                    burst: u(c, "burst")? as u32,
                })
                .map_err(ce)?,
            ),
            "credits" => Runner::Credits(
                Credits::new(CreditsConfig {
                    capacity: u32::try_from(u(c, "capacity")?).map_err(|e| e.to_string())?,
                    low_water: u32::try_from(u(c, "low_water")?).map_err(|e| e.to_string())?,
                })
                .map_err(ce)?,
            ),
            "lag_meter" => {
                // Every binding instantiates the core's `LagMeter<61>`; the vectors say so.
                if u(c, "snapshots")? != LAG_SNAPSHOTS as u64 {
                    return Err(format!("snapshots must be {LAG_SNAPSHOTS}"));
                }
                Runner::Lag(Box::new(
                    LagMeter::new(LagMeterConfig { bucket: u(c, "bucket_ns")? }).map_err(ce)?,
                ))
            }
            "watermarks" => Runner::Watermarks(
                Watermarks::new(WatermarksConfig {
                    capacity: u(c, "capacity")?,
                    pause_below: u(c, "pause_below")?,
                    resume_above: u(c, "resume_above")?,
                })
                .map_err(ce)?,
            ),
            "paced_drain" => Runner::Drain(
                PacedDrain::new(PacedDrainConfig {
                    target_per_sec: f(c, "target_per_sec")?,
                    headroom: f(c, "headroom")?,
                    burst: u32::try_from(u(c, "burst")?).map_err(|e| e.to_string())?,
                })
                .map_err(ce)?,
            ),
            "keyed" => {
                let seed = u(c, "seed")?;
                let shard_rate = match get(c, "rate_per_second")? {
                    Value::Null => None,
                    r => Some(
                        ShardRate::per_second(
                            r.as_f64().ok_or("bad rate_per_second")?,
                            u32::try_from(u(c, "rate_burst")?).map_err(|e| e.to_string())?,
                        )
                        .map_err(ce)?,
                    ),
                };
                let cfg = KeyedConfig {
                    shards_per_key: u(c, "shards_per_key")? as u32,
                    shard_limit: u(c, "shard_limit")? as u32,
                    limit_retry_after: u(c, "limit_retry_after_ns")?,
                    seed,
                    shard_rate,
                };
                let table = match u(c, "shards")? {
                    16 => KeyedTable::S16(Box::new(KeyedLimits::new(cfg).map_err(ce)?)),
                    64 => KeyedTable::S64(Box::new(KeyedLimits::new(cfg).map_err(ce)?)),
                    x => return Err(format!("shards {x}: the vectors use 16 or 64")),
                };
                Runner::Keyed(table, seed, BTreeMap::new())
            }
            "deadline" => Runner::Deadline,
            k => return Err(format!("unknown kind {k:?}")),
        })
    }

    /// Runs step `idx` (its op and arguments) and returns what the core answered: the
    /// `expect` object of the step.
    pub fn step(&mut self, idx: u64, st: &Map<String, Value>) -> R<Value> {
        let op = s(st, "op")?;
        match self {
            Runner::Limiter(l, permits) => match op {
                "acquire" => match l.try_acquire_raw(u(st, "now")?, level(st)?) {
                    Ok(p) => {
                        permits.insert(idx, p);
                        Ok(json!({"ok": true}))
                    }
                    Err(r) => Ok(rejected(r)),
                },
                "release" => {
                    let p = permits.remove(&u(st, "permit")?).ok_or("release of no permit")?;
                    l.release_raw(p, u(st, "now")?, outcome(st)?).map_err(|e| e.to_string())?;
                    Ok(json!({}))
                }
                "static" => {
                    let v = get(st, "limit")?.as_f64();
                    l.set_static_limit(v).map_err(|e| e.to_string())?;
                    Ok(json!({}))
                }
                "check" => {
                    let m = l.metrics();
                    let n = m.levels as usize;
                    Ok(json!({
                        "limit": m.limit, "inflight": m.inflight,
                        "inflight_by_level": &m.inflight_by_level[..n],
                        "admitted": m.admitted, "rejected": m.rejected,
                        "successes": m.successes, "drops": m.drops, "ignored": m.ignored,
                        "windows": m.windows,
                    }))
                }
                _ => Err(format!("unknown limiter op {op:?}")),
            },
            Runner::Gate(g, permits, tickets) => {
                let poll = |g: &Gate<GATE_CAP>,
                            permits: &mut BTreeMap<u64, RawPermit>,
                            tickets: &mut BTreeMap<u64, u64>,
                            now: u64|
                 -> R<Value> {
                    let mut evs: Vec<(u64, Value)> = Vec::new();
                    let mut buf: [Option<Event>; 16] = Default::default();
                    loop {
                        let n = g.poll(now, &mut buf);
                        for e in buf[..n].iter_mut() {
                            match e.take() {
                                Some(Event::Granted(t, p)) => {
                                    let i = tickets.remove(&t.to_bits()).ok_or("unknown ticket")?;
                                    permits.insert(i, p);
                                    evs.push((i, json!({"ticket": i, "granted": true})));
                                }
                                Some(Event::Expired(t, r)) => {
                                    let i = tickets.remove(&t.to_bits()).ok_or("unknown ticket")?;
                                    evs.push((
                                        i,
                                        json!({"ticket": i, "granted": false,
                                               "reason": r.reason.as_str(),
                                               "retry_after": r.retry_after}),
                                    ));
                                }
                                None => {}
                            }
                        }
                        if n < buf.len() {
                            break;
                        }
                    }
                    evs.sort_by_key(|e| e.0);
                    Ok(Value::Array(evs.into_iter().map(|e| e.1).collect()))
                };
                match op {
                    "arrive" => {
                        let now = u(st, "now")?;
                        let deadline = match st.get("timeout") {
                            None | Some(Value::Null) => None,
                            Some(t) => Some(now.saturating_add(t.as_u64().ok_or("bad timeout")?)),
                        };
                        Ok(match g.arrive(now, level(st)?, deadline) {
                            Arrival::Admitted(p) => {
                                permits.insert(idx, p);
                                json!({"result": "admitted"})
                            }
                            Arrival::Rejected(r) => json!({"result": "rejected",
                                "reason": r.reason.as_str(), "retry_after": r.retry_after}),
                            Arrival::Queued(t) => {
                                tickets.insert(t.to_bits(), idx);
                                let events = poll(g, permits, tickets, now)?;
                                json!({"result": "queued", "events": events})
                            }
                        })
                    }
                    "release" => {
                        let now = u(st, "now")?;
                        let p = permits.remove(&u(st, "permit")?).ok_or("release of no permit")?;
                        g.release(p, now, outcome(st)?).map_err(|e| e.to_string())?;
                        let events = if g.waiting_total() > 0 {
                            poll(g, permits, tickets, now)?
                        } else {
                            json!([])
                        };
                        Ok(json!({"events": events}))
                    }
                    "cancel" => {
                        let i = u(st, "ticket")?;
                        let bits = tickets
                            .iter()
                            .find(|(_, &v)| v == i)
                            .map(|(&k, _)| k)
                            .ok_or("cancel of no ticket")?;
                        tickets.remove(&bits);
                        g.cancel(surgeguard_core::queue::Ticket::from_bits(bits))
                            .map_err(|e| e.to_string())?;
                        Ok(json!({}))
                    }
                    "shed" => {
                        let lv = match get(st, "level")? {
                            Value::Null => None,
                            v => Some(
                                Priority::new(v.as_u64().ok_or("bad level")? as u8)
                                    .ok_or("bad level")?,
                            ),
                        };
                        g.set_shed_level(lv);
                        Ok(json!({}))
                    }
                    "static" => {
                        let v = get(st, "limit")?.as_f64();
                        g.limiter().set_static_limit(v).map_err(|e| e.to_string())?;
                        Ok(json!({}))
                    }
                    "check" => {
                        let m = g.metrics();
                        let n = g.levels() as usize;
                        Ok(json!({
                            "state": if m.state == GateState::Healthy { "healthy" } else { "overloaded" },
                            "waiting": m.waiting, "waiting_by_level": &m.waiting_by_level[..n],
                            "inflight": m.limiter.inflight, "limit": m.limiter.limit,
                            "shed_level": m.shed_level.map(|p| p.index()),
                            "queued": m.queued, "granted": m.granted, "expired": m.expired,
                            "sloughed": m.sloughed, "evicted": m.evicted,
                            "cancelled": m.cancelled, "shed": m.shed,
                            "queue_full": m.queue_full,
                            "deadline_unmeetable": m.deadline_unmeetable, "aged": m.aged,
                        }))
                    }
                    "brownout" => Ok(json!({"dimmer": float(g.brownout(u(st, "now")?))?})),
                    _ => Err(format!("unknown gate op {op:?}")),
                }
            }
            Runner::Budget(rb) => match op {
                "deposit" => {
                    rb.deposit(u(st, "now")?);
                    Ok(json!({}))
                }
                "withdraw" => Ok(verdict(rb.try_withdraw(u(st, "now")?))),
                "available" => Ok(json!({"available": rb.available(u(st, "now")?)})),
                "check" => {
                    let m = rb.metrics();
                    Ok(json!({"requests": m.requests, "retries_allowed": m.retries_allowed,
                              "retries_denied": m.retries_denied}))
                }
                _ => Err(format!("unknown retry_budget op {op:?}")),
            },
            Runner::Token(t) => match op {
                "record" => {
                    t.record(b(st, "success")?);
                    Ok(json!({}))
                }
                "retry" => Ok(verdict(t.try_retry())),
                "check" => {
                    let m = t.metrics();
                    Ok(json!({"tokens": m.tokens, "allowed": t.is_retry_allowed(),
                              "retries_allowed": m.retries_allowed,
                              "retries_denied": m.retries_denied,
                              "successes": m.successes, "failures": m.failures}))
                }
                _ => Err(format!("unknown token_throttle op {op:?}")),
            },
            Runner::Adaptive(a) => match op {
                "record" => {
                    a.record(u(st, "now")?, b(st, "accepted")?);
                    Ok(json!({}))
                }
                "throttle" => Ok(verdict(a.should_throttle(u(st, "now")?, u(st, "rand")?))),
                "probability" => Ok(json!({"p": a.drop_probability(u(st, "now")?)})),
                "check" => {
                    let m = a.metrics();
                    Ok(json!({"requests": m.requests, "accepts": m.accepts,
                              "throttled": m.throttled}))
                }
                _ => Err(format!("unknown adaptive_throttle op {op:?}")),
            },
            Runner::Backoff(bo, rng) => match op {
                "delay" => {
                    let hint = match st.get("hint") {
                        None | Some(Value::Null) => None,
                        Some(h) => Some(h.as_u64().ok_or("bad hint")?),
                    };
                    Ok(json!({"delay": bo.next_delay(u(st, "attempt")? as u32, hint, rng)}))
                }
                "ceiling" => Ok(json!({"ceiling": bo.ceiling(u(st, "attempt")? as u32)})),
                "reset" => {
                    bo.reset();
                    Ok(json!({}))
                }
                _ => Err(format!("unknown backoff op {op:?}")),
            },
            Runner::Breaker(br, permits) => match op {
                "acquire" => {
                    let now = u(st, "now")?;
                    match br.try_acquire(now) {
                        Ok(p) => {
                            let probe = p.is_probe();
                            permits.insert(idx, (p, now));
                            Ok(json!({"ok": true, "probe": probe}))
                        }
                        Err(r) => Ok(rejected(r)),
                    }
                }
                "record" => {
                    let now = u(st, "now")?;
                    let (p, at) = permits.remove(&u(st, "permit")?).ok_or("record of no permit")?;
                    // Every binding measures the latency from the acquire's `now`.
                    let latency = now.saturating_sub(at);
                    if u(st, "latency")? != latency {
                        return Err(format!(
                            "latency field {} != now - acquired {latency}",
                            u(st, "latency")?
                        ));
                    }
                    br.record(p, now, outcome(st)?, latency);
                    Ok(json!({}))
                }
                "state" => Ok(json!({"state": state_name(br.state(u(st, "now")?))})),
                "check" => {
                    let m = br.metrics(u(st, "now")?);
                    Ok(json!({"state": state_name(m.state), "admit_permille": m.admit_permille,
                              "window_calls": m.window_calls,
                              "window_failures": m.window_failures, "window_slow": m.window_slow,
                              "opened": m.opened, "half_opened": m.half_opened,
                              "closed": m.closed, "rejected": m.rejected,
                              "ramp_shed": m.ramp_shed, "probes": m.probes}))
                }
                _ => Err(format!("unknown breaker op {op:?}")),
            },
            Runner::Rate(rl) => match op {
                "check" => Ok(verdict(rl.check(u(st, "now")?, u(st, "cost")? as u32))),
                "take_up_to" => {
                    Ok(json!({"n": rl.take_up_to(u(st, "now")?, u(st, "max")? as u32)}))
                }
                "available" => Ok(json!({"n": rl.available(u(st, "now")?)})),
                "wait" => Ok(json!({"wait": rl.wait_time(u(st, "now")?, u(st, "cost")? as u32)})),
                "metrics" => {
                    let m = rl.metrics();
                    Ok(json!({"allowed": m.allowed, "denied": m.denied}))
                }
                _ => Err(format!("unknown rate_limiter op {op:?}")),
            },
            Runner::Credits(cr) => {
                let k = |name: &str| -> R<u32> {
                    u32::try_from(u(st, name)?).map_err(|e| format!("{name}: {e}"))
                };
                match op {
                    "try_take" => Ok(verdict(cr.try_take(k("k")?))),
                    "take_up_to" => Ok(json!({"n": cr.take_up_to(k("k")?)})),
                    "complete" => {
                        let before = cr.metrics();
                        match cr.complete(k("k")?) {
                            Ok(()) => Ok(json!({"ok": true})),
                            Err(e) => {
                                // A refused call changes nothing: checked here
                                // in the core; the bindings see it in the next `check`.
                                if cr.metrics() != before {
                                    return Err("a refused complete changed the state".into());
                                }
                                Ok(json!({"ok": false, "error": usage_name(e)}))
                            }
                        }
                    }
                    "grant" => Ok(json!({"n": cr.grant(k("n")?)})),
                    "grant_due" => Ok(json!({"n": cr.grant_due()})),
                    "replenish" => Ok(json!({"n": cr.replenish()})),
                    "check" => Ok(json!({
                        "available": cr.available(), "buffered": cr.buffered(),
                        "outstanding": cr.outstanding(), "stalled": cr.is_stalled(),
                    })),
                    "metrics" => {
                        let m = cr.metrics();
                        Ok(json!({"granted": m.granted, "taken": m.taken,
                                  "completed": m.completed, "refused": m.refused,
                                  "available": m.available, "buffered": m.buffered,
                                  "stalled": m.stalled, "capacity": m.capacity}))
                    }
                    _ => Err(format!("unknown credits op {op:?}")),
                }
            }
            Runner::Lag(lm) => {
                let now = u(st, "now")?;
                match op {
                    "record_produced" => {
                        lm.record_produced(now, u(st, "n")?);
                        Ok(json!({}))
                    }
                    "record_consumed" => {
                        lm.record_consumed(now, u(st, "n")?);
                        Ok(json!({}))
                    }
                    "observe_totals" => {
                        lm.observe_totals(now, u(st, "produced")?, u(st, "consumed")?);
                        Ok(json!({}))
                    }
                    "report_oldest" => {
                        let at = match get(st, "enqueued_at")? {
                            Value::Null => None,
                            v => Some(v.as_u64().ok_or("bad enqueued_at")?),
                        };
                        lm.report_oldest(now, at);
                        Ok(json!({}))
                    }
                    "lag" => Ok(json!({"lag": lm.lag(now)})),
                    "produce_rate" => {
                        Ok(json!({"rate": lm.produce_rate(now).map(float).transpose()?}))
                    }
                    "consume_rate" => {
                        Ok(json!({"rate": lm.consume_rate(now).map(float).transpose()?}))
                    }
                    "lag_time" => Ok(json!({"lag_time": opt_ns(lm.lag_time(now))?})),
                    "time_to_drain" => Ok(json!({"time_to_drain": opt_ns(lm.time_to_drain(now))?})),
                    "time_to_drain_exceeds" => {
                        Ok(json!({"exceeds": lm.time_to_drain_exceeds(now, u(st, "limit")?)}))
                    }
                    "oldest_age" => Ok(json!({"oldest_age": opt_ns(lm.oldest_age(now))?})),
                    "metrics" => {
                        let m = lm.metrics(now);
                        Ok(json!({"produced": m.produced, "consumed": m.consumed, "lag": m.lag,
                                  "rates_known": m.rates_known,
                                  "produce_rate": float(m.produce_rate)?,
                                  "consume_rate": float(m.consume_rate)?,
                                  "lag_seconds": float(m.lag_seconds)?,
                                  "time_to_drain_seconds": float(m.time_to_drain_seconds)?,
                                  "oldest_age": opt_ns(m.oldest_age)?}))
                    }
                    _ => Err(format!("unknown lag_meter op {op:?}")),
                }
            }
            Runner::Watermarks(w) => match op {
                "observe" => {
                    let t = w.observe(u(st, "now")?, u(st, "level")?);
                    Ok(json!({"transition": t.map(|t| t.as_str())}))
                }
                "is_paused" => Ok(json!({"paused": w.is_paused()})),
                "metrics" => {
                    let m = w.metrics(u(st, "now")?);
                    Ok(json!({"paused": m.paused, "pauses": m.pauses, "resumes": m.resumes,
                              "time_paused": m.time_paused, "last_level": m.last_level}))
                }
                _ => Err(format!("unknown watermarks op {op:?}")),
            },
            Runner::Drain(d) => match op {
                "permits" => Ok(json!({"n": d.permits(u(st, "now")?, u(st, "backlog")?)})),
                "next_permit_in" => Ok(json!({"wait": d.next_permit_in(u(st, "now")?)})),
                "time_to_drain" => {
                    let t = d.time_to_drain(u(st, "backlog")?, f(st, "produce_per_sec")?);
                    Ok(json!({"time_to_drain": opt_ns(t)?}))
                }
                "metrics" => {
                    let m = d.metrics();
                    Ok(json!({"started": m.started, "calls": m.calls,
                              "drain_per_sec": float(m.drain_per_sec)?}))
                }
                _ => Err(format!("unknown paced_drain op {op:?}")),
            },
            Runner::Keyed(t, seed, permits) => {
                let key = || -> R<u64> { Ok(hash_key(*seed, s(st, "key")?.as_bytes())) };
                match op {
                    "acquire" => {
                        let cost = u32::try_from(u(st, "cost")?).map_err(|e| e.to_string())?;
                        let (h, now) = (key()?, u(st, "now")?);
                        match on_table!(t, k => k.try_acquire(h, now, cost)) {
                            Ok(p) => {
                                permits.insert(idx, p);
                                Ok(json!({"ok": true}))
                            }
                            Err(r) => Ok(rejected(r)),
                        }
                    }
                    "release" => {
                        let p = permits.remove(&u(st, "permit")?).ok_or("release of no permit")?;
                        on_table!(t, k => k.release(p)).map_err(|e| e.to_string())?;
                        Ok(json!({}))
                    }
                    "hash" => Ok(json!({"hash": key()?})),
                    "shards_of" => {
                        let h = key()?;
                        Ok(json!({"shards": on_table!(t, k => k.shards_of(h).as_slice().to_vec())}))
                    }
                    "record_rejection" => {
                        let h = key()?;
                        Ok(json!({"recorded": on_table!(t, k => k.record_rejection(h))}))
                    }
                    "metrics" => on_table!(t, k => {
                        let m = k.metrics();
                        // Top keys as one token: `hash:count:error` (hash in 16 hex digits,
                        // Node's form), heaviest first, `;`-separated; `-` when none.
                        let top: Vec<String> = m
                            .top_keys
                            .entries()
                            .iter()
                            .map(|e| format!("{:016x}:{}:{}", e.key_hash, e.count, e.error))
                            .collect();
                        let top = if top.is_empty() { "-".to_string() } else { top.join(";") };
                        Ok(json!({"admitted": m.admitted,
                                  "rejected_key_limit": m.rejected_key_limit,
                                  "rejected_key_rate": m.rejected_key_rate,
                                  "foreign_releases": m.foreign_releases,
                                  "in_flight": m.in_flight, "full_shards": m.full_shards,
                                  "key_limit": k.key_limit(), "top_keys": top}))
                    }),
                    _ => Err(format!("unknown keyed op {op:?}")),
                }
            }
            Runner::Deadline => deadline_step(op, st),
        }
    }
}

/// Bytes from lower-case hex (the vectors carry header values as hex, so any byte and
/// spaces survive the line format).
pub fn unhex(h: &str) -> R<Vec<u8>> {
    if h.len() % 2 != 0 {
        return Err(format!("odd hex {h:?}"));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|e| format!("hex {h:?}: {e}")))
        .collect()
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A `deadline` step: `parse` (name, value_hex → budget or ignored), `at` (now, budget →
/// deadline), `format` (name, deadline, now, margin → value, null when exhausted).
fn deadline_step(op: &str, st: &Map<String, Value>) -> R<Value> {
    use surgeguard_core::deadline::{self, FormatError, HeaderFormat, HeaderValue};
    match op {
        "parse" => {
            let value = unhex(s(st, "value_hex")?)?;
            Ok(match deadline::parse_header(s(st, "name")?.as_bytes(), &value) {
                Ok(b) => json!({"budget": b}),
                Err(e) => json!({"ignored": e.as_str()}),
            })
        }
        "at" => {
            let d = deadline::deadline_at(u(st, "now")?, u(st, "budget")?)
                .map_err(|e| e.to_string())?;
            Ok(json!({"deadline": d}))
        }
        "format" => {
            let format = HeaderFormat::for_name(s(st, "name")?.as_bytes());
            match HeaderValue::of_deadline(
                format,
                u(st, "deadline")?,
                u(st, "now")?,
                u(st, "margin")?,
            ) {
                Ok(v) => Ok(json!({"value": v.as_str()})),
                Err(FormatError::Exhausted) => Ok(json!({"value": null})),
                Err(e) => Err(e.to_string()),
            }
        }
        _ => Err(format!("unknown deadline op {op:?}")),
    }
}

/// Replays every scenario of a parsed `vectors.json`; the number of steps, or the first
/// difference (scenario, step, expected, actual).
pub fn replay(doc: &Value) -> R<usize> {
    let d = doc.as_object().ok_or("not an object")?;
    if s(d, "format")? != FORMAT || u(d, "version")? != VERSION {
        return Err("unknown format or version".into());
    }
    let mut total = 0;
    for sc in get(d, "scenarios")?.as_array().ok_or("scenarios is not an array")? {
        let sc = sc.as_object().ok_or("scenario is not an object")?;
        let name = s(sc, "name")?;
        let mut r = Runner::new(s(sc, "kind")?, obj(sc, "config")?)
            .map_err(|e| format!("scenario {name}: {e}"))?;
        for (i, st) in get(sc, "steps")?.as_array().ok_or("steps")?.iter().enumerate() {
            let st = st.as_object().ok_or("step is not an object")?;
            let actual =
                r.step(i as u64, st).map_err(|e| format!("scenario {name} step {i}: {e}"))?;
            let expected = get(st, "expect")?;
            if &actual != expected {
                return Err(format!(
                    "scenario {name} step {i} ({}): expected {expected} actual {actual}",
                    s(st, "op")?
                ));
            }
            total += 1;
        }
    }
    Ok(total)
}

/// `vectors.json`: the header, then one scenario after another, one step per line.
pub fn to_json(scenarios: &[Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{{\"format\": \"{FORMAT}\", \"version\": {VERSION}, \"scenarios\": [");
    for (si, sc) in scenarios.iter().enumerate() {
        let o = sc.as_object().expect("scenario object");
        let _ = writeln!(
            out,
            "{{\"name\": {}, \"kind\": {}, \"config\": {},\n \"steps\": [",
            o["name"], o["kind"], o["config"]
        );
        let steps = o["steps"].as_array().expect("steps");
        for (i, st) in steps.iter().enumerate() {
            let comma = if i + 1 < steps.len() { "," } else { "" };
            let _ = writeln!(out, "  {st}{comma}");
        }
        let comma = if si + 1 < scenarios.len() { "," } else { "" };
        let _ = writeln!(out, " ]}}{comma}");
    }
    out.push_str("]}\n");
    out
}

/// One token value of the line format: numbers as in JSON (shortest round-trip floats),
/// `null`, `true`/`false`, bare strings, arrays as comma lists.
fn tok(v: &Value) -> String {
    match v {
        Value::String(x) => x.clone(),
        Value::Array(a) => a.iter().map(tok).collect::<Vec<_>>().join(","),
        v => v.to_string(),
    }
}

fn flatten(prefix: &str, m: &Map<String, Value>, out: &mut Vec<String>) {
    for (k, v) in m {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            Value::Object(o) => flatten(&key, o, out),
            Value::Array(a) if a.iter().any(Value::is_object) => {
                // Gate events: `events=T:granted;T:reason:retry_after;...` ("-" for none).
                let parts: Vec<String> = a
                    .iter()
                    .map(|e| {
                        let e = e.as_object().expect("event object");
                        if e["granted"].as_bool() == Some(true) {
                            format!("{}:granted", e["ticket"])
                        } else {
                            format!("{}:{}:{}", e["ticket"], tok(&e["reason"]), e["retry_after"])
                        }
                    })
                    .collect();
                out.push(format!("{key}={}", parts.join(";")));
            }
            Value::Array(a) if a.is_empty() && k == "events" => out.push(format!("{key}=-")),
            v => out.push(format!("{key}={}", tok(v))),
        }
    }
}

/// `vectors.txt`: the same data, one line per scenario header, config and step.
pub fn to_text(scenarios: &[Value]) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "# surgeguard conformance vectors (generated: see tests/vectors/README.md)");
    let _ = writeln!(out, "format {FORMAT} {VERSION}");
    for sc in scenarios {
        let o = sc.as_object().expect("scenario object");
        let steps = o["steps"].as_array().expect("steps");
        let _ = writeln!(out, "scenario {} {} {}", tok(&o["name"]), tok(&o["kind"]), steps.len());
        let mut cfg = Vec::new();
        flatten("", o["config"].as_object().expect("config"), &mut cfg);
        let _ = writeln!(out, "config {}", cfg.join(" "));
        for (i, st) in steps.iter().enumerate() {
            let st = st.as_object().expect("step");
            let mut args = Vec::new();
            let mut m = st.clone();
            let expect = m.remove("expect").expect("expect");
            let op = m.remove("op").expect("op");
            flatten("", &m, &mut args);
            let mut exp = Vec::new();
            flatten("", expect.as_object().expect("expect object"), &mut exp);
            let _ = writeln!(out, "step {i} {} {} | {}", tok(&op), args.join(" "), exp.join(" "));
        }
        let _ = writeln!(out, "end");
    }
    out
}
