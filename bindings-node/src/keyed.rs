//! Per-key isolation (shuffle sharding): `KeyedLimits`, `hashKey`, `actionable`, `isolation`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surgeguard_core::keyed::{
    self, hash_key, KeyPermit, KeyedConfig, KeyedLimits, ShardRate, MAX_BODY_LEN,
};
use surgeguard_core::{Reason, Rejected};

use crate::clock::resolve_now;
use crate::convert::{config_err, int_in, ms_to_ns, range, u32_of};
use crate::fast::{refuse, tags};
use crate::handle::{new_handle, Tagged};
use crate::slab::Slab;

/// Heavy hitters tracked per table (the core's default).
const TOP: usize = keyed::DEFAULT_TOP_KEYS;
/// Refused keys whose text is remembered for `metrics().topKeys` (bounded memory).
const KEY_NAMES: usize = 1024;

/// The table sizes offered (`shards` option). `N` is a compile-time constant in the core.
enum Table {
    S16(Box<KeyedLimits<16, TOP>>),
    S64(Box<KeyedLimits<64, TOP>>),
    S256(Box<KeyedLimits<256, TOP>>),
    S1024(Box<KeyedLimits<1024, TOP>>),
}

macro_rules! each {
    ($t:expr, $k:ident => $e:expr) => {
        match $t {
            Table::S16($k) => $e,
            Table::S64($k) => $e,
            Table::S256($k) => $e,
            Table::S1024($k) => $e,
        }
    };
}

/// What a `KeyedLimits` handle points at.
pub struct KeyedInner {
    table: Table,
    permits: Slab<KeyPermit>,
    /// Text of recently refused keys, by hash, for the top-keys report.
    names: RefCell<HashMap<u64, String>>,
}

impl Tagged for KeyedInner {
    const TAG: u64 = tags::KEYED;
}

impl KeyedInner {
    /// The hash seed of this table's keys.
    pub fn seed(&self) -> u64 {
        each!(&self.table, t => t.config().seed)
    }

    /// A permit id, or `-reason` (`key_limit`, `key_rate`).
    pub fn acquire(&self, hash: u64, now: u64, cost: u32) -> f64 {
        let r: std::result::Result<KeyPermit, Rejected> =
            each!(&self.table, t => t.try_acquire(hash, now, cost));
        match r {
            Ok(p) => match self.permits.insert(p) {
                Ok(id) => id,
                Err(p) => {
                    let _ = each!(&self.table, t => t.release(p));
                    -(Reason::KeyLimit as u8 as f64)
                }
            },
            Err(r) => refuse(r),
        }
    }

    /// `0`, or `-1` if `id` is not live.
    pub fn release(&self, id: f64) -> f64 {
        match self.permits.take(id) {
            Some(p) => {
                let _ = each!(&self.table, t => t.release(p));
                0.0
            }
            None => -1.0,
        }
    }
}

#[napi(object)]
#[derive(Default)]
pub struct KeyedOptions {
    /// Shards in the table: 16, 64 (default), 256 or 1024.
    pub shards: Option<f64>,
    /// Shards per key, 1..=8 (default 2).
    pub shards_per_key: Option<f64>,
    /// Concurrency cap of one shard (required).
    pub shard_limit: f64,
    /// `Retry-After` of a `key_limit` refusal, ms (default 1000).
    pub limit_retry_after_ms: Option<f64>,
    /// Seed of the key hash and the shard mapping (keep it private).
    pub seed: Option<f64>,
    /// Per-shard rate, units per second (optional).
    pub rate_per_second: Option<f64>,
    /// Per-shard burst (default 1 with a rate).
    pub rate_burst: Option<f64>,
}

#[napi(object)]
pub struct KeyCountJs {
    /// The key's text, if it was seen refused recently by this table.
    pub key: Option<String>,
    /// The key hash, as 16 hex digits.
    pub key_hash: String,
    pub count: f64,
    pub error: f64,
}

#[napi(object)]
pub struct KeyedMetricsJs {
    pub admitted: f64,
    pub rejected_key_limit: f64,
    pub rejected_key_rate: f64,
    pub foreign_releases: f64,
    pub in_flight: f64,
    pub full_shards: f64,
    pub shards: f64,
    pub top_keys: Vec<KeyCountJs>,
}

#[napi(object)]
pub struct IsolationJs {
    pub shards: f64,
    pub shards_per_key: f64,
    pub combinations: f64,
    pub share_all: f64,
    pub share_any: f64,
    pub unaffected: f64,
}

fn isolation_js(i: keyed::Isolation) -> IsolationJs {
    IsolationJs {
        shards: f64::from(i.shards),
        shards_per_key: f64::from(i.shards_per_key),
        combinations: i.combinations,
        share_all: i.share_all,
        share_any: i.share_any,
        unaffected: i.unaffected(),
    }
}

#[napi(js_name = "NativeKeyedLimits")]
pub struct NativeKeyedLimits {
    inner: Rc<KeyedInner>,
}

#[napi]
impl NativeKeyedLimits {
    #[napi(constructor)]
    pub fn new(options: KeyedOptions) -> Result<Self> {
        let o = options;
        let mut c = KeyedConfig::new(u32_of("shardLimit", o.shard_limit)?);
        if let Some(x) = o.shards_per_key {
            c.shards_per_key = u32_of("shardsPerKey", x)?;
        }
        if let Some(x) = o.limit_retry_after_ms {
            c.limit_retry_after = ms_to_ns("limitRetryAfterMs", x)?;
        }
        if let Some(x) = o.seed {
            c.seed = int_in("seed", x, 0, 1 << 53)?;
        }
        match (o.rate_per_second, o.rate_burst) {
            (Some(r), b) => {
                let burst = b.map_or(Ok(1), |b| u32_of("rateBurst", b))?;
                c.shard_rate = Some(
                    ShardRate::per_second(r, burst).map_err(|e| config_err("KeyedLimits", e))?,
                );
            }
            (None, Some(_)) => return Err(range("rateBurst", "needs ratePerSecond")),
            (None, None) => {}
        }
        let err = |e| config_err("KeyedLimits", e);
        let table = match o.shards.unwrap_or(64.0) {
            16.0 => Table::S16(Box::new(KeyedLimits::new(c).map_err(err)?)),
            64.0 => Table::S64(Box::new(KeyedLimits::new(c).map_err(err)?)),
            256.0 => Table::S256(Box::new(KeyedLimits::new(c).map_err(err)?)),
            1024.0 => Table::S1024(Box::new(KeyedLimits::new(c).map_err(err)?)),
            _ => return Err(range("shards", "must be 16, 64, 256 or 1024")),
        };
        Ok(Self {
            inner: Rc::new(KeyedInner {
                table,
                permits: Slab::default(),
                names: RefCell::new(HashMap::new()),
            }),
        })
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// The most permits one key can hold.
    #[napi]
    pub fn key_limit(&self) -> f64 {
        each!(&self.inner.table, t => t.key_limit()) as f64
    }

    /// The shards `key` maps to.
    #[napi]
    pub fn shards_of(&self, key: String) -> Vec<f64> {
        let h = hash_key(self.inner.seed(), key.as_bytes());
        each!(&self.inner.table, t => t.shards_of(h).as_slice().iter().map(|&s| f64::from(s)).collect())
    }

    /// Remembers the text of a refused key for `metrics().topKeys` (cold path).
    #[napi]
    pub fn note_refused(&self, key: String) {
        let h = hash_key(self.inner.seed(), key.as_bytes());
        let mut names = self.inner.names.borrow_mut();
        if names.len() >= KEY_NAMES && !names.contains_key(&h) {
            names.clear();
        }
        names.insert(h, key);
    }

    /// Records a refusal made elsewhere (the global gate) against `key`.
    #[napi]
    pub fn record_rejection(&self, key: String) -> bool {
        let h = hash_key(self.inner.seed(), key.as_bytes());
        self.note_refused(key);
        each!(&self.inner.table, t => t.record_rejection(h))
    }

    #[napi]
    pub fn isolation(&self) -> IsolationJs {
        isolation_js(each!(&self.inner.table, t => t.isolation()))
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        self.inner.permits.live() as f64
    }

    #[napi]
    pub fn metrics(&self) -> KeyedMetricsJs {
        let names = self.inner.names.borrow();
        macro_rules! conv {
            ($m:expr, $n:expr) => {{
                let m = $m;
                KeyedMetricsJs {
                    admitted: m.admitted as f64,
                    rejected_key_limit: m.rejected_key_limit as f64,
                    rejected_key_rate: m.rejected_key_rate as f64,
                    foreign_releases: m.foreign_releases as f64,
                    in_flight: m.in_flight as f64,
                    full_shards: f64::from(m.full_shards),
                    shards: $n as f64,
                    top_keys: m
                        .top_keys
                        .entries()
                        .iter()
                        .map(|k| KeyCountJs {
                            key: names.get(&k.key_hash).cloned(),
                            key_hash: format!("{:016x}", k.key_hash),
                            count: k.count as f64,
                            error: k.error as f64,
                        })
                        .collect(),
                }
            }};
        }
        match &self.inner.table {
            Table::S16(t) => conv!(t.metrics(), 16),
            Table::S64(t) => conv!(t.metrics(), 64),
            Table::S256(t) => conv!(t.metrics(), 256),
            Table::S1024(t) => conv!(t.metrics(), 1024),
        }
    }
}

/// `hash_key(seed, utf8(key))` as a BigInt (the same value every binding computes).
#[napi(js_name = "hashKey")]
pub fn hash_key_js(seed: BigInt, key: String) -> Result<BigInt> {
    let seed =
        resolve_now(Some(seed)).map_err(|_| range("seed", "must be a BigInt in [0, 2^64)"))?;
    Ok(BigInt::from(hash_key(seed, key.as_bytes())))
}

/// What an HTTP edge answers for a refusal.
#[napi(object)]
pub struct ActionableJs {
    /// 429 (per key) or 503 (global).
    pub status: u32,
    /// `Retry-After` seconds (rounded up, ≥ 1).
    pub retry_after_s: f64,
    pub reason: String,
    pub error: String,
    /// The JSON body, byte-identical in every binding.
    pub body: String,
}

/// The status, `Retry-After` and JSON body for a refusal of `reason` (its name) with a
/// `retryAfterMs` hint.
#[napi(js_name = "actionable")]
pub fn actionable_js(reason: String, retry_after_ms: f64) -> Result<ActionableJs> {
    let r = Reason::ALL
        .iter()
        .copied()
        .find(|r| r.as_str() == reason)
        .ok_or_else(|| range("reason", &format!("is not a known reason ({reason:?})")))?;
    let a = keyed::actionable(&Rejected::new(r, ms_to_ns("retryAfterMs", retry_after_ms)?));
    let mut buf = [0u8; MAX_BODY_LEN];
    let n = a.write_json(&mut buf).map_err(|e| range("body", &e.to_string()))?;
    Ok(ActionableJs {
        status: u32::from(a.status),
        retry_after_s: a.retry_after_s as f64,
        reason: a.reason.as_str().to_string(),
        error: a.error().to_string(),
        body: String::from_utf8_lossy(&buf[..n]).into_owned(),
    })
}

/// The isolation math for `k` of `n` shards, or `null` unless `1 ≤ k ≤ n`.
#[napi(js_name = "isolation")]
pub fn isolation_fn(n: f64, k: f64) -> Result<Option<IsolationJs>> {
    let n = u32_of("n", n)?;
    let k = u32_of("k", k)?;
    Ok(keyed::isolation(n, k).map(isolation_js))
}

/// Every reason name in wire order (index + 1 is the wire value).
#[napi(js_name = "reasonNames")]
pub fn reason_names() -> Vec<&'static str> {
    Reason::ALL.iter().map(|r| r.as_str()).collect()
}

/// Milliseconds as the core's `Retry-After` seconds (rounded up, at least 1).
#[napi(js_name = "retryAfterSecs")]
pub fn retry_after_secs(retry_after_ms: f64) -> Result<f64> {
    Ok(keyed::retry_after_secs(ms_to_ns("retryAfterMs", retry_after_ms)?) as f64)
}
