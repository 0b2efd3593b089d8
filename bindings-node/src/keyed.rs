//! Per-key isolation (shuffle sharding): `KeyedLimits`, `hashKey`, `actionable`, `isolation`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_char;
use std::ptr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use surgeguard_core::keyed::{self, hash_key, KeyedConfig, KeyedLimits, ShardRate, MAX_BODY_LEN};
use surgeguard_core::{Reason, Rejected};

use crate::clock::resolve_now;
use crate::convert::{config_err, int_in, ms_to_ns, range, u32_of};
use crate::handle::{new_handle, tags, Tagged};
use crate::raw::{args, bad_type, count, handle_arg, now, number, refuse, ret, Callback};
use crate::shared::open;
use crate::slab::Slab;
use surgeguard::placement::{PlaceError, Placed, PlacedKeyPermit};

/// Heavy hitters tracked per table (the core's default).
const TOP: usize = keyed::DEFAULT_TOP_KEYS;
/// Refused keys whose text is remembered for `metrics().topKeys` (bounded memory).
const KEY_NAMES: usize = 1024;

/// One table size, in this thread's heap or shared between processes (then permits are
/// counted to this process, so a dead worker's come back). Boxed: the sizes differ by
/// 64x and [`Table`] holds one of them.
type Tbl<const N: usize> = Box<Placed<KeyedLimits<N, TOP>>>;

/// A permit, `Err(Some(refusal))`, or `Err(None)` when the shared process table is full.
#[inline]
fn take<const N: usize>(
    t: &Tbl<N>,
    hash: u64,
    now: u64,
    cost: u32,
) -> std::result::Result<PlacedKeyPermit, Option<Rejected>> {
    t.try_acquire_key(hash, now, cost).map_err(|e| match e {
        PlaceError::Rejected(r) => Some(r),
        _ => None,
    })
}

/// Ends a permit: false if it was not live (its process reclaimed, or another table's).
#[inline]
fn give<const N: usize>(t: &Tbl<N>, p: PlacedKeyPermit) -> bool {
    t.release_key(p).is_ok()
}

/// Processes using the table: 1 in-process; for a shared one, the processes attached now.
fn attached<const N: usize>(t: &Tbl<N>) -> u32 {
    match &**t {
        Placed::Local(_) => 1,
        #[cfg(target_os = "linux")]
        Placed::Shared(s) => s.attached_processes(),
    }
}

/// The seed keys are hashed with: the config's in-process; the segment's (the same in
/// every process attached) when shared.
fn hash_seed<const N: usize>(t: &Tbl<N>) -> u64 {
    t.shared_key_seed().unwrap_or(t.limits().config().seed)
}

/// The table sizes offered (`shards` option). `N` is a compile-time constant in the core.
enum Table {
    S16(Tbl<16>),
    S64(Tbl<64>),
    S256(Tbl<256>),
    S1024(Tbl<1024>),
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

/// The [`Table`] of `$shards` shards (16, 64, 256 or 1024), its `Tbl` made by `$tbl` (an
/// expression whose table size is inferred from the variant), or a returned range error.
macro_rules! table_of {
    ($shards:expr, $tbl:expr) => {
        match $shards {
            16.0 => Table::S16($tbl),
            64.0 => Table::S64($tbl),
            256.0 => Table::S256($tbl),
            1024.0 => Table::S1024($tbl),
            _ => return Err(range("shards", "must be 16, 64, 256 or 1024")),
        }
    };
}

/// What a `KeyedLimits` handle points at.
pub struct KeyedInner {
    table: Table,
    permits: Slab<PlacedKeyPermit>,
    /// Text of recently refused keys, by hash, for the top-keys report.
    names: RefCell<HashMap<u64, String>>,
    seed: u64,
}

impl Drop for KeyedInner {
    /// Key permits still held when the table is collected (or its worker thread ends) go
    /// back: for a shared table they would otherwise count until this process exits.
    fn drop(&mut self) {
        for p in self.permits.drain() {
            let _ = each!(&self.table, t => give(t, p));
        }
    }
}

impl Tagged for KeyedInner {
    const TAG: u64 = tags::KEYED;
}

impl KeyedInner {
    /// The hash seed of this table's keys.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A permit id, `-reason` (`key_limit`, `key_rate`), or `SHM_TABLE_FULL`.
    pub fn acquire(&self, hash: u64, now: u64, cost: u32) -> f64 {
        match each!(&self.table, t => take(t, hash, now, cost)) {
            Ok(p) => match self.permits.insert(p) {
                Ok(id) => id,
                Err(p) => {
                    let _ = each!(&self.table, t => give(t, p));
                    -(Reason::KeyLimit as u8 as f64)
                }
            },
            Err(Some(r)) => refuse(r),
            Err(None) => crate::raw::SHM_TABLE_FULL,
        }
    }

    /// `0`, `-1` if `id` is not live, `-2` if the permit was given back already (its
    /// process reclaimed).
    pub fn release(&self, id: f64) -> f64 {
        match self.permits.take(id) {
            Some(p) => {
                if each!(&self.table, t => give(t, p)) {
                    0.0
                } else {
                    -2.0
                }
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

/// The core config of `options` (all but `shards`).
fn keyed_config(o: KeyedOptions) -> Result<KeyedConfig> {
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
            c.shard_rate =
                Some(ShardRate::per_second(r, burst).map_err(|e| config_err("KeyedLimits", e))?);
        }
        (None, Some(_)) => return Err(range("rateBurst", "needs ratePerSecond")),
        (None, None) => {}
    }
    Ok(c)
}

#[napi(js_name = "NativeKeyedLimits")]
pub struct NativeKeyedLimits {
    inner: Rc<KeyedInner>,
}

#[napi]
impl NativeKeyedLimits {
    #[napi(constructor)]
    pub fn new(options: KeyedOptions) -> Result<Self> {
        Self::open(None, options)
    }

    /// The table named `name` in shared memory: created, or attached to if it exists (then
    /// `options` must describe the same config). Keys are hashed with a seed drawn when
    /// the segment was created (the same in every process).
    #[napi(factory)]
    pub fn open_shared(name: String, options: KeyedOptions) -> Result<Self> {
        Self::open(Some(&name), options)
    }

    /// In this thread's heap (`name` `None`) or in the segment `name`.
    fn open(name: Option<&str>, options: KeyedOptions) -> Result<Self> {
        let shards = options.shards.unwrap_or(64.0);
        let c = keyed_config(options)?;
        let table = table_of!(shards, Box::new(open("KeyedLimits", name, c)?));
        let seed = each!(&table, t => hash_seed(t));
        Ok(Self {
            inner: Rc::new(KeyedInner {
                table,
                permits: Slab::default(),
                names: RefCell::new(HashMap::new()),
                seed,
            }),
        })
    }

    /// Whether it lives in shared memory.
    #[napi]
    pub fn is_shared(&self) -> bool {
        each!(&self.inner.table, t => t.is_shared())
    }

    /// Shared: whether this call created the segment (false: attached).
    #[napi]
    pub fn created(&self) -> bool {
        each!(&self.inner.table, t => t.created())
    }

    /// Shared: releases the key permits of dead processes (each once); how many.
    #[napi]
    pub fn reclaim(&self) -> f64 {
        each!(&self.inner.table, t => t.reclaim()) as f64
    }

    /// Shared: process-table slots in use.
    #[napi]
    pub fn attached(&self) -> f64 {
        f64::from(each!(&self.inner.table, t => attached(t)))
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// The most permits one key can hold.
    #[napi]
    pub fn key_limit(&self) -> f64 {
        each!(&self.inner.table, t => t.limits().key_limit()) as f64
    }

    /// The shards `key` maps to.
    #[napi]
    pub fn shards_of(&self, key: String) -> Vec<f64> {
        let h = hash_key(self.inner.seed(), key.as_bytes());
        each!(&self.inner.table, t => t.limits().shards_of(h).as_slice().iter().map(|&s| f64::from(s)).collect())
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
        each!(&self.inner.table, t => t.limits().record_rejection(h))
    }

    #[napi]
    pub fn isolation(&self) -> IsolationJs {
        isolation_js(each!(&self.inner.table, t => t.limits().isolation()))
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
            Table::S16(t) => conv!(t.limits().metrics(), 16),
            Table::S64(t) => conv!(t.limits().metrics(), 64),
            Table::S256(t) => conv!(t.limits().metrics(), 256),
            Table::S1024(t) => conv!(t.limits().metrics(), 1024),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The hot path, as raw callbacks (see `fast`): keyedAcquire(h, key, cost[, nowNs]) -> id |
// -reason | SHM_TABLE_FULL; keyedRelease(h, id) -> 0 | -1 | -2.

/// Keys shorter than this many UTF-8 bytes are hashed from a stack buffer (their bytes and
/// N-API's NUL fit); longer ones allocate.
const KEY_STACK: usize = 256;

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn keyed_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<4>(env, info) };
    let h = handle_arg!(env, argv, KeyedInner);
    // SAFETY: env is this callback's and argv[1] one of its arguments.
    let Some(hash) = (unsafe { hash_string_arg(env, argv[1], h.seed()) }) else {
        // SAFETY: env is this callback's.
        return unsafe { bad_type(env, "key must be a string") };
    };
    let cost = count!(env, argv[2], u32::MAX, "cost must be a whole number in [0, 2^32)");
    let now = now!(env, argv, argc, 3);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.acquire(hash, now, cost as u32)) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn keyed_release(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, _argc) = unsafe { args::<2>(env, info) };
    let h = handle_arg!(env, argv, KeyedInner);
    // SAFETY: env is this callback's; argv[1] one of its arguments (`undefined` if absent).
    let id = unsafe { number(env, argv[1]) };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, h.release(id)) }
}

/// `hash_key(seed, utf8(v))`, or `None` if `v` is not a string (or N-API fails).
///
/// The exact UTF-8 length is asked first: N-API copies only whole characters, so a copy
/// into a buffer that is too small can come back a few bytes short without any sign of
/// truncation. The bytes are then read into a buffer of exactly that length plus the NUL.
///
/// # Safety
/// `env` must be the running callback's env and `v` NULL or a value of that callback.
unsafe fn hash_string_arg(env: sys::napi_env, v: sys::napi_value, seed: u64) -> Option<u64> {
    let mut len = 0usize;
    // SAFETY: env and `v` are the running callback's (this fn's contract; a non-string
    // returns `napi_string_expected`, a NULL `v` `napi_invalid_arg`); with a NULL buffer
    // N-API writes only the length in bytes, without the NUL, to `len`.
    let status = unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) };
    if status != sys::Status::napi_ok {
        return None;
    }
    let size = len.checked_add(1)?;
    let mut stack = [0u8; KEY_STACK];
    let mut heap = Vec::new();
    let buf: &mut [u8] = if size <= KEY_STACK {
        &mut stack[..size]
    } else {
        heap.resize(size, 0u8);
        &mut heap[..]
    };
    let mut copied = 0usize;
    // SAFETY: env and `v` as above (`v` is a string); `buf` is writable for the `buf.len()`
    // bytes passed as its size, and N-API writes at most `buf.len() - 1` of them plus a NUL.
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            env,
            v,
            buf.as_mut_ptr().cast::<c_char>(),
            buf.len(),
            &mut copied,
        )
    };
    // The whole string fits, so anything but all `len` bytes is a failure, not a key.
    if status != sys::Status::napi_ok || copied != len {
        return None;
    }
    Some(hash_key(seed, &buf[..len]))
}

/// The key table's raw callbacks (registered by `fast`).
pub const FAST: &[(&str, Callback)] =
    &[("keyedAcquire", keyed_acquire), ("keyedRelease", keyed_release)];

// ---------------------------------------------------------------------------------------
// Functions

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
