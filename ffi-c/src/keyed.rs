//! Per-key isolation (shuffle sharding, as AWS describes it for Route 53): `sg_keyed` (per-tenant / per-agent concurrency
//! caps and rates in a shuffle-sharded table, heavy hitters) and actionable rejections
//! (`sg_actionable`: 429 vs 503, `Retry-After`, the JSON body, identical in every binding).

use core::ffi::c_void;

use core::ffi::c_char;

use surgeguard_core::keyed::{
    actionable, hash_key, is_per_key, isolation, Actionable, Isolation, KeyedConfig, KeyedLimits,
    KeyedMetrics, ShardRate, MAX_BODY_LEN, MAX_SHARDS_PER_KEY,
};
use surgeguard_core::time::SEC;

use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object_in_place, input,
    new_object_in_place, object, out, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::permit::{sg_permit, take, SG_PERMIT_KIND_KEYED};
use crate::placed::{admitted, released};
use crate::status::reason_of;
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use surgeguard_std::placement::{Placed, PlacedKeyPermit};

/// Heavy hitters an `sg_keyed` tracks (`sg_keyed_metrics.top_keys`).
pub const SG_KEYED_TOP_KEYS: u32 = 16;
/// The most shards a key maps to.
pub const SG_MAX_SHARDS_PER_KEY: u32 = 8;
/// Bytes that always hold the body `sg_actionable_write_json` writes, NUL included.
pub const SG_ACTIONABLE_BODY_MAX: u32 = 161;
const _: () = assert!(SG_MAX_SHARDS_PER_KEY as usize == MAX_SHARDS_PER_KEY);
const _: () = assert!(SG_ACTIONABLE_BODY_MAX as usize == MAX_BODY_LEN + 1);

const TOP: usize = SG_KEYED_TOP_KEYS as usize;

/// The table sizes C can pick (`sg_keyed_config.shards`): the core's table is sized at
/// compile time. Each is local (inline, so it can live in caller storage) or shared.
#[allow(clippy::large_enum_variant)] // one table per object, inline so it can live in caller storage
pub enum Table {
    /// 16 shards.
    S16(Placed<KeyedLimits<16, TOP>>),
    /// 64 shards.
    S64(Placed<KeyedLimits<64, TOP>>),
    /// 256 shards.
    S256(Placed<KeyedLimits<256, TOP>>),
    /// 1024 shards.
    S1024(Placed<KeyedLimits<1024, TOP>>),
}

/// Runs `$e` with `$t` bound to the placed table, whatever its size.
macro_rules! each_placed {
    ($table:expr, $t:ident => $e:expr) => {
        match $table {
            Table::S16($t) => $e,
            Table::S64($t) => $e,
            Table::S256($t) => $e,
            Table::S1024($t) => $e,
        }
    };
}

/// Runs `$e` with `$t` bound to the core table (reads; acquire through the placed one).
macro_rules! each {
    ($table:expr, $t:ident => $e:expr) => {
        each_placed!($table, placed => {
            let $t = placed.limits();
            $e
        })
    };
}

/// Settings of an `sg_keyed` table.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_keyed_config {
    /// Shards in the table: 16, 64, 256 or 1024 (default 64).
    pub shards: u32,
    /// Shards each key maps to, `1 ..= min(shards, 8)`; 2 or more is shuffle sharding
    /// (default 2).
    pub shards_per_key: u32,
    /// Concurrency cap of one shard, `1 ..= 2^30` (default 8); a key alone holds at most
    /// `shards_per_key × shard_limit`.
    pub shard_limit: u32,
    /// `retry_after_ns` of an `SG_REASON_KEY_LIMIT` refusal, ≤ 1 h (default 1 s).
    pub limit_retry_after_ns: u64,
    /// Seed of the key-to-shards mapping (default 0; choose one at random and keep it).
    pub seed: u64,
    /// Per-shard rate limit, units per second, in `[1e-6, 1e9]`; 0 = none (default).
    pub rate_per_second: f64,
    /// Burst of the per-shard rate, units, `1 ..= 1e9` (default 10; used with a rate).
    pub rate_burst: u32,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Per-key concurrency caps and rate limits in a fixed table of shards, shuffle-sharded,
/// with the 16 most refused keys. Thread-safe, lock-free.
pub struct sg_keyed {
    _opaque: [u8; 0],
}
object!(sg_keyed, Table, 0x5347_4B45_5945_4400);

mod keyed_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`) and
    /// writes it into `p`, or fails having written nothing (in place: a table is large).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_keyed_config` for the duration of the call
    /// (the crate's contract); `p` must be writable for one `Table`.
    pub(super) unsafe fn make_into(cfg: *const sg_keyed_config, p: *mut Table) -> Res {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_keyed_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        let config = keyed_config(c)?;
        // Each arm writes `p` only once the table is built.
        let table = match c.shards {
            16 => Table::S16(Placed::Local(KeyedLimits::new(config)?)),
            64 => Table::S64(Placed::Local(KeyedLimits::new(config)?)),
            256 => Table::S256(Placed::Local(KeyedLimits::new(config)?)),
            1024 => Table::S1024(Placed::Local(KeyedLimits::new(config)?)),
            _ => return Err(crate::field::out_of_range("shards")),
        };
        // SAFETY: this fn's contract: `p` is writable for one `Table`.
        unsafe { p.write(table) };
        Ok(())
    }
}

/// The core config of a C config (every field checked, used or not).
pub(crate) fn keyed_config(c: &sg_keyed_config) -> Res<KeyedConfig> {
    crate::field::reserved(&c.reserved)?;
    // With no rate (0), `rate_burst` is still checked on its own (at the fastest rate,
    // where no burst overflows), as every unused setting is.
    ShardRate::per_second(1e9, c.rate_burst)?;
    let shard_rate = if c.rate_per_second == 0.0 {
        None
    } else {
        Some(ShardRate::per_second(c.rate_per_second, c.rate_burst)?)
    };
    Ok(KeyedConfig {
        shards_per_key: c.shards_per_key,
        shard_limit: c.shard_limit,
        limit_retry_after: c.limit_retry_after_ns,
        seed: c.seed,
        shard_rate,
    })
}

/// Fills `cfg` with the defaults: 64 shards, 2 per key, 8 permits per shard, 1 s hint, seed 0,
/// no rate.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_config_default(cfg: *mut sg_keyed_config) -> sg_status {
    ffi(|| {
        out(cfg).map(|o| {
            o.write(sg_keyed_config {
                reserved: [0; 4],
                shards: 64,
                shards_per_key: 2,
                shard_limit: 8,
                limit_retry_after_ns: SEC,
                seed: 0,
                rate_per_second: 0.0,
                rate_burst: 10,
            })
        })
    })
}

/// Creates a keyed table on the heap; free it with `sg_keyed_free`. Stack: the table is
/// built by value by the core, which needs about 256 KiB of stack (measured; give such a
/// thread 1 MiB).
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_new(
    cfg: *const sg_keyed_config,
    keyed_out: *mut *mut sg_keyed,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `keyed_out`.
    unsafe { new_object_in_place(keyed_out, |p| keyed_make::make_into(cfg, p)) }
}

/// Frees a keyed table made by `sg_keyed_new`. NULL is fine; a handle made by `sg_keyed_init` is
/// left alone (use `sg_keyed_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_free(keyed: *mut sg_keyed) {
    // SAFETY: the crate's contract for `keyed`.
    unsafe { free_object(keyed) }
}

/// Bytes of caller storage `sg_keyed_init` needs.
#[no_mangle]
pub extern "C" fn sg_keyed_size() -> usize {
    ffi_value(0, obj_size::<sg_keyed>)
}

/// Alignment the storage given to `sg_keyed_init` needs.
#[no_mangle]
pub extern "C" fn sg_keyed_align() -> usize {
    ffi_value(0, obj_align::<sg_keyed>)
}

/// Creates a keyed table in caller storage (the stack need of `sg_keyed_new` applies) (`len` bytes at `mem`, aligned to
/// `sg_keyed_align()`); on `SG_OK`, `(sg_keyed *)mem` is the handle. End it with
/// `sg_keyed_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_keyed_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object_in_place::<sg_keyed>(mem, len, |p| keyed_make::make_into(cfg, p)) }
}

/// Ends a keyed table made by `sg_keyed_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_deinit(keyed: *mut sg_keyed) -> sg_status {
    // SAFETY: the crate's contract for `keyed`.
    unsafe { deinit_object(keyed) }
}

/// Creates the shared keyed table `name` or attaches to it; NULL `name` makes an anonymous
/// one (as `sg_limiter_open_shared`). The config is `sg_keyed_config`'s; the segment is the
/// table plus `4 × shards × 256` bytes of per-process counts, and a key's permits are
/// counted to their process (those of a process that dies come back exactly once). Hash
/// keys with the same seed in every process. Free the handle with `sg_keyed_free`.
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_open_shared(
    name: *const c_char,
    cfg: *const sg_keyed_config,
    keyed_out: *mut *mut sg_keyed,
) -> sg_status {
    use crate::placed::open;
    // SAFETY: the crate's contract for `name`, `cfg` and `keyed_out`.
    unsafe {
        new_object_in_place(keyed_out, |p| {
            let c = input(cfg)?;
            let config = keyed_config(c)?;
            let table = match c.shards {
                16 => Table::S16(open(name, config)?),
                64 => Table::S64(open(name, config)?),
                256 => Table::S256(open(name, config)?),
                1024 => Table::S1024(open(name, config)?),
                _ => return Err(crate::field::out_of_range("shards")),
            };
            // SAFETY: `new_object_in_place` hands a pointer writable for one `Table`.
            p.write(table);
            Ok(())
        })
    }
}

/// Removes the name of a shared keyed table (as `sg_limiter_unlink_shared`).
#[cfg(target_os = "linux")]
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_unlink_shared(name: *const c_char) -> sg_status {
    // The size is not part of the name: any table type removes it.
    // SAFETY: the crate's contract for `name`.
    ffi(|| unsafe { crate::placed::unlink::<KeyedLimits<16, TOP>>(name) })
}

/// Whether this handle made its table (as `sg_limiter_created`).
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_created(
    keyed: *const sg_keyed,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each_placed!(&o.inner, t => t.created())))? };
        created_out.write(v);
        Ok(())
    })
}

/// A shared table: gives back the key permits of every attached process proven dead
/// (exactly once each), frees the top-keys cell if a dead process held it, and writes how
/// many permits; a local one writes 0.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_reclaim(
    keyed: *mut sg_keyed,
    reclaimed_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let reclaimed_out = out(reclaimed_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each_placed!(&o.inner, t => t.reclaim())))? };
        reclaimed_out.write(v);
        Ok(())
    })
}

/// Hashes a key (tenant id, API key, agent id; `len` bytes, `bytes` may be NULL only when
/// `len` is 0) to the 64-bit key hash the table takes: seeded, the same on every platform
/// and in every binding. Not cryptographic.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_hash_key(
    seed: u64,
    bytes: *const u8,
    len: usize,
    key_hash_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let key_hash_out = out(key_hash_out)?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if bytes.is_null() {
            return Err(SG_NULL_ARGUMENT);
        } else {
            // SAFETY: non-NULL, and the crate's contract: readable for `len` bytes.
            unsafe { core::slice::from_raw_parts(bytes, len) }
        };
        key_hash_out.write(hash_key(seed, bytes));
        Ok(())
    })
}

/// Takes a slot for `key_hash` (and `cost` units of its rate, if rate-limited) in the
/// least occupied of its shards: `SG_OK` fills `*permit_out` (release it with
/// `sg_keyed_release`); `SG_REJECTED` says `SG_REASON_KEY_LIMIT` or `SG_REASON_KEY_RATE`.
/// Check the key first, then the global admission (`sg_gate_arrive`); if that refuses,
/// release the key's permit and call `sg_keyed_record_rejection`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_try_acquire(
    keyed: *mut sg_keyed,
    key_hash: u64,
    now: u64,
    cost: u32,
    permit_out: *mut sg_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        let permit_out = out(permit_out)?;
        // SAFETY: the crate's contract for `keyed`.
        unsafe {
            with(keyed, |k| {
                let p = each_placed!(&k.inner, t => t.try_acquire_key(key_hash, now, cost));
                admitted(p, permit_out, k.head.id, SG_PERMIT_KIND_KEYED, rejection_out)
            })
        }
    })
}

/// Returns a permit's slot. Twice is `SG_ALREADY_RELEASED`, another table's permit
/// `SG_FOREIGN_HANDLE`; neither changes anything.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_release(
    keyed: *mut sg_keyed,
    permit: *mut sg_permit,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `permit`: NULL or an `sg_permit` readable for the
        // call. `take`/`restore` then write its state word through this shared borrow, which
        // `sg_permit`'s `UnsafeCell`s allow (see `sg_permit::cell` in permit.rs).
        let permit = unsafe { input(permit.cast_const())? };
        // SAFETY: the crate's contract for `keyed`.
        unsafe {
            with(keyed, |k| {
                let p: PlacedKeyPermit = take(permit, k.head.id, SG_PERMIT_KIND_KEYED)?;
                released(permit, each_placed!(&k.inner, t => t.release_key(p)))
            })
        }
    })
}

/// Records a refusal of `key_hash` made elsewhere (the global admission) in the
/// heavy-hitters summary. `*recorded_out` (optional, may be NULL) is false if the update
/// was skipped because another thread was updating.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_record_rejection(
    keyed: *mut sg_keyed,
    key_hash: u64,
    recorded_out: *mut bool,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `keyed`.
        let recorded =
            unsafe { with(keyed, |k| Ok(each!(&k.inner, t => t.record_rejection(key_hash))))? };
        if let Some(o) = crate::handle::out_opt(recorded_out) {
            o.write(recorded);
        }
        Ok(())
    })
}

/// The most permits one key can hold: `shards_per_key × shard_limit`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_key_limit(
    keyed: *const sg_keyed,
    key_limit_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let key_limit_out = out(key_limit_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each!(&o.inner, t => t.key_limit())))? };
        key_limit_out.write(v);
        Ok(())
    })
}

/// The shards `key_hash` maps to: writes them to `shards_out[0 .. n]` and `n` to `*n_out`
/// (`cap` must be at least `shards_per_key`, else `SG_BUFFER_TOO_SMALL`).
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_shards_of(
    keyed: *const sg_keyed,
    key_hash: u64,
    shards_out: *mut u32,
    cap: usize,
    n_out: *mut usize,
) -> sg_status {
    ffi(|| {
        let n_out = out(n_out)?;
        if shards_out.is_null() {
            return Err(SG_NULL_ARGUMENT);
        }
        // SAFETY: the crate's contract for `keyed`.
        let set = unsafe { with(keyed, |k| Ok(each!(&k.inner, t => t.shards_of(key_hash))))? };
        let shards = set.as_slice();
        if shards.len() > cap {
            return Err(SG_BUFFER_TOO_SMALL);
        }
        // SAFETY: non-NULL and (the crate's contract) writable for `cap ≥ shards.len()` values.
        unsafe { core::ptr::copy_nonoverlapping(shards.as_ptr(), shards_out, shards.len()) };
        n_out.write(shards.len());
        Ok(())
    })
}

/// Occupancy of every shard: writes `shards` values to `in_flight_out` (`cap` must be at
/// least the table's `shards`, else `SG_BUFFER_TOO_SMALL`) and the count to `*n_out`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_shard_in_flight(
    keyed: *const sg_keyed,
    in_flight_out: *mut u32,
    cap: usize,
    n_out: *mut usize,
) -> sg_status {
    ffi(|| {
        let n_out = out(n_out)?;
        if in_flight_out.is_null() {
            return Err(SG_NULL_ARGUMENT);
        }
        // SAFETY: the crate's contract for `keyed`.
        unsafe {
            with(keyed, |k| {
                each!(&k.inner, t => {
                    let m = t.metrics();
                    let v = &m.shard_in_flight[..];
                    if v.len() > cap {
                        return Err(SG_BUFFER_TOO_SMALL);
                    }
                    // SAFETY: non-NULL and writable for `cap ≥ v.len()` values (the contract).
                    core::ptr::copy_nonoverlapping(v.as_ptr(), in_flight_out, v.len());
                    n_out.write(v.len());
                    Ok(())
                })
            })
        }
    })
}

/// The isolation math of shuffle sharding for `k` of `n` shards.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct sg_isolation {
    /// `n`, the table's shards.
    pub shards: u32,
    /// `k`, the shards per key.
    pub shards_per_key: u32,
    /// `C(n, k)`, the number of distinct shard sets.
    pub combinations: f64,
    /// Fraction of other keys sharing all `k` shards with a noisy key: `1 / C(n, k)`.
    pub share_all: f64,
    /// Fraction of other keys sharing at least one shard.
    pub share_any: f64,
}

impl From<Isolation> for sg_isolation {
    fn from(i: Isolation) -> Self {
        Self {
            shards: i.shards,
            shards_per_key: i.shards_per_key,
            combinations: i.combinations,
            share_all: i.share_all,
            share_any: i.share_any,
        }
    }
}

/// The largest `n` `sg_isolation_compute` takes (far above any table's shard count).
pub const SG_ISOLATION_MAX_SHARDS: u32 = 65_536;

/// The isolation math for `k` of `n` shards; `SG_INVALID_ARGUMENT` unless
/// `1 ≤ k ≤ n ≤ SG_ISOLATION_MAX_SHARDS` (the computation takes `k` steps: an unbounded
/// `k` would make this call take seconds).
#[no_mangle]
pub unsafe extern "C" fn sg_isolation_compute(
    n: u32,
    k: u32,
    isolation_out: *mut sg_isolation,
) -> sg_status {
    ffi(|| {
        let isolation_out = out(isolation_out)?;
        if n > SG_ISOLATION_MAX_SHARDS {
            return Err(SG_INVALID_ARGUMENT);
        }
        let iso = isolation(n, k).ok_or(SG_INVALID_ARGUMENT)?;
        isolation_out.write(iso.into());
        Ok(())
    })
}

/// The isolation math for this table's `shards` and `shards_per_key`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_isolation(
    keyed: *const sg_keyed,
    isolation_out: *mut sg_isolation,
) -> sg_status {
    ffi(|| {
        let isolation_out = out(isolation_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each!(&o.inner, t => t.isolation()).into()))? };
        isolation_out.write(v);
        Ok(())
    })
}

/// One heavy hitter: the key's true refusal count lies in `[count − error, count]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_key_count {
    /// The key hash.
    pub key_hash: u64,
    /// Estimated refusals (an overestimate; 0 = unused entry).
    pub count: u64,
    /// Most by which `count` overestimates.
    pub error: u64,
}

/// A snapshot of an `sg_keyed` table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_keyed_metrics {
    /// Permits granted.
    pub admitted: u64,
    /// Refusals with `SG_REASON_KEY_LIMIT`.
    pub rejected_key_limit: u64,
    /// Refusals with `SG_REASON_KEY_RATE`.
    pub rejected_key_rate: u64,
    /// Releases refused as foreign (by the core).
    pub foreign_releases: u64,
    /// Permits held now, all shards.
    pub in_flight: u64,
    /// Shards at their cap.
    pub full_shards: u32,
    /// The table's shards (`sg_keyed_shard_in_flight` gives each one's occupancy).
    pub shards: u32,
    /// The most refused keys, heaviest first; unused entries have `count` 0.
    pub top_keys: [sg_key_count; 16],
    /// Total weight recorded in the summary.
    pub top_weight: u64,
    /// Summary updates recorded.
    pub top_recorded: u64,
    /// Summary updates skipped (another thread was updating).
    pub top_skipped: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}
const _: () = assert!(TOP == 16); // `top_keys` above

pub(crate) fn keyed_metrics<const N: usize>(m: &KeyedMetrics<N, TOP>) -> sg_keyed_metrics {
    let t = &m.top_keys;
    sg_keyed_metrics {
        reserved: [0; 4],
        admitted: m.admitted,
        rejected_key_limit: m.rejected_key_limit,
        rejected_key_rate: m.rejected_key_rate,
        foreign_releases: m.foreign_releases,
        in_flight: m.in_flight,
        full_shards: m.full_shards,
        shards: N as u32,
        top_keys: core::array::from_fn(|i| sg_key_count {
            key_hash: t.top[i].key_hash,
            count: t.top[i].count,
            error: t.top[i].error,
        }),
        top_weight: t.weight,
        top_recorded: t.recorded,
        top_skipped: t.skipped,
    }
}

/// A snapshot of the table.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_metrics_get(
    keyed: *const sg_keyed,
    metrics_out: *mut sg_keyed_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each!(&o.inner, t => keyed_metrics(&t.metrics()))))? };
        metrics_out.write(v);
        Ok(())
    })
}

// ---- actionable rejections -----------------------------------------------------------

/// What an HTTP edge answers for a rejection: status, `Retry-After`, the JSON body.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_actionable {
    /// 429 for a per-key reason, 503 for global overload (`sg_actionable_write_json`
    /// refuses any other status).
    pub status: u16,
    /// The `Retry-After` header value: seconds, rounded up, at least 1; or 0 when waiting
    /// will not help (the hint was `SG_NEVER`, or above `SG_MAX_NOW`, e.g. a cost above a
    /// rate limiter's burst): send no `Retry-After` then. The JSON body omits
    /// `retry_after_s` in that case and says `"retry": "not by waiting"`.
    pub retry_after_s: u64,
    /// `SG_REASON_*`.
    pub reason: u32,
}

/// The actionable answer for `rejection` (an unknown reason is `SG_INVALID_ARGUMENT`).
#[no_mangle]
pub unsafe extern "C" fn sg_actionable_from(
    rejection: *const sg_rejection,
    actionable_out: *mut sg_actionable,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `rejection`.
        let rejection = unsafe { input(rejection)? };
        let actionable_out = out(actionable_out)?;
        let r = rejection.to_core().ok_or(SG_INVALID_ARGUMENT)?;
        let a = actionable(&r);
        let never = r.retry_after > crate::time::SG_MAX_NOW;
        actionable_out.write(sg_actionable {
            status: a.status,
            retry_after_s: if never { 0 } else { a.retry_after_s },
            reason: a.reason as u32,
        });
        Ok(())
    })
}

/// Writes the JSON body (`{"error": ..., "reason": ..., "retry_after_s": ..., "retry":
/// ...}`, NUL-terminated) into `buf` and its length without the NUL to `*written_out`.
/// `retry_after_s` 0 (waiting will not help) omits that key and writes `"retry": "not by
/// waiting"`. `SG_ACTIONABLE_BODY_MAX` bytes always suffice; a smaller `len` that does not
/// fit is `SG_BUFFER_TOO_SMALL` and nothing is written. A `status` other than 429 or 503,
/// or an unknown `reason`, is `SG_INVALID_ARGUMENT`: this body describes a refusal.
#[no_mangle]
pub unsafe extern "C" fn sg_actionable_write_json(
    actionable: *const sg_actionable,
    buf: *mut c_char,
    len: usize,
    written_out: *mut usize,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `actionable`.
        let a = unsafe { input(actionable)? };
        let written_out = out(written_out)?;
        if buf.is_null() {
            return Err(SG_NULL_ARGUMENT);
        }
        let reason = reason_of(a.reason).ok_or(SG_INVALID_ARGUMENT)?;
        if a.status != 429 && a.status != 503 {
            return Err(SG_INVALID_ARGUMENT);
        }
        let core = Actionable { status: a.status, retry_after_s: a.retry_after_s, reason };
        let mut tmp = [0u8; MAX_BODY_LEN];
        let n = if a.retry_after_s == 0 {
            never_body(&core, &mut tmp)?
        } else {
            core.write_json(&mut tmp).map_err(|_| SG_BUFFER_TOO_SMALL)?
        };
        if n + 1 > len {
            return Err(SG_BUFFER_TOO_SMALL);
        }
        // SAFETY: non-NULL and (the crate's contract) writable for `len ≥ n + 1` bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(tmp.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
        written_out.write(n);
        Ok(())
    })
}

/// The body of a refusal that waiting will not lift: as the core's, without
/// `retry_after_s`.
fn never_body(a: &Actionable, tmp: &mut [u8; MAX_BODY_LEN]) -> Res<usize> {
    let parts = [
        r#"{"error": ""#,
        a.error(),
        r#"", "reason": ""#,
        a.reason.as_str(),
        r#"", "retry": "not by waiting"}"#,
    ];
    let mut n = 0;
    for p in parts {
        let dst = tmp.get_mut(n..n + p.len()).ok_or(SG_BUFFER_TOO_SMALL)?;
        dst.copy_from_slice(p.as_bytes());
        n += p.len();
    }
    Ok(n)
}

/// Whether `reason` refuses one key (`SG_REASON_KEY_LIMIT`, `SG_REASON_KEY_RATE`: that
/// caller should slow down) rather than everybody. Unknown reasons: `SG_INVALID_ARGUMENT`.
#[no_mangle]
pub unsafe extern "C" fn sg_reason_is_per_key(reason: u32, per_key_out: *mut bool) -> sg_status {
    ffi(|| {
        let per_key_out = out(per_key_out)?;
        let r = reason_of(reason).ok_or(SG_INVALID_ARGUMENT)?;
        per_key_out.write(is_per_key(r));
        Ok(())
    })
}
