//! `sg_shared_rate`, `sg_shared_budget`, `sg_shared_keyed`: the core's rate limiter, retry
//! budget and keyed limits in memory shared between processes (Linux), as
//! `sg_shared_limiter` does for the limiter: created by name (a file in `/dev/shm`,
//! race-free create-or-attach) or anonymously before `fork()`. The keyed table counts each
//! process's key permits, so those of a process that dies come back exactly once; a
//! one-at-a-time cell (the budget's slot ring, the keyed table's top-keys summary) that a
//! dying process held is freed once that process is proven dead. Every process must pass
//! `now` from `CLOCK_MONOTONIC` (`sg_clock_now_ns()`).
//!
//! Progress: as the in-process objects (lock-free), plus for the keyed table one atomic
//! add per acquire and one CAS per release on the process's count for the shard.

use core::cell::UnsafeCell;
use core::ffi::c_char;
use core::mem::MaybeUninit;

use surgeguard_core::keyed::{KeyedConfig, ShardRate};
use surgeguard_core::rate::RateLimiterConfig;
use surgeguard_core::retry::RetryBudgetConfig;
use surgeguard_std::shm::{
    SharedKeyPermit, SharedKeyedLimits, SharedRateLimiter, SharedRetryBudget, ShmError,
};

use crate::handle::{
    ffi, ffi_status, free_object, input, new_object, object, out, rejected, with, Res,
};
use crate::keyed::{keyed_metrics, sg_keyed_config, sg_keyed_metrics, SG_KEYED_TOP_KEYS};
use crate::rate::sg_rate_limiter_config;
use crate::retry::sg_retry_budget_config;
use crate::shared::{name_arg, status_of};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::storage::{self, Marks};

const TOP: usize = SG_KEYED_TOP_KEYS as usize;

// ---- the rate limiter -----------------------------------------------------------------

/// A GCRA rate limiter in memory shared between processes (opaque; heap only).
pub struct sg_shared_rate {
    _opaque: [u8; 0],
}
object!(sg_shared_rate, SharedRateLimiter, 0x5347_5348_5241_5400);

/// Creates the shared rate limiter `name` (the file `/dev/shm/surgeguard.<name>`; a name
/// with a `/` is a path) or attaches to it; NULL `name` makes an anonymous one, shared
/// with the processes this one forks afterwards. The config is `sg_rate_limiter_config`'s
/// with `emission_ns` 0 (a rate in `per_second`; `emission_ns` set is
/// `SG_CONFIG_OUT_OF_RANGE`). `SG_SHM_REFUSED` if the name holds another config, kind,
/// layout or version; `SG_INVALID_ARGUMENT` for a bad name; `SG_SHM_UNAVAILABLE` if a
/// system call failed. Free the handle with `sg_shared_rate_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_open(
    name: *const c_char,
    cfg: *const sg_rate_limiter_config,
    rate_out: *mut *mut sg_shared_rate,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `rate_out`.
    unsafe {
        new_object(rate_out, || {
            let c = input(cfg)?;
            crate::field::reserved(&c.reserved)?;
            if c.emission_ns != 0 {
                return Err(crate::field::out_of_range("emission_ns"));
            }
            let cfg = RateLimiterConfig { per_second: c.per_second, burst: c.burst };
            match name_arg(name)? {
                Some(n) => SharedRateLimiter::open(n, cfg),
                None => SharedRateLimiter::anonymous(cfg),
            }
            .map_err(status_of)
        })
    }
}

/// Frees the handle (the segment stays while any process maps it, and a named one until
/// `sg_shared_rate_unlink`). NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_free(rate: *mut sg_shared_rate) {
    // SAFETY: the crate's contract for `rate`.
    unsafe { free_object(rate) }
}

/// Removes the name (processes that have it mapped keep their segment).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_unlink(name: *const c_char) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `name`.
        let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
        SharedRateLimiter::unlink(name).map_err(status_of)
    })
}

/// Whether this handle created the segment (false: it attached to another process's).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_created(
    rate: *const sg_shared_rate,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `rate`.
        let v = unsafe { with(rate, |o| Ok(o.inner.created()))? };
        created_out.write(v);
        Ok(())
    })
}

/// Admits `cost` units at `now` across all processes: `SG_OK`, or `SG_REJECTED` with
/// `SG_REASON_RATE_LIMITED` and the wait (as `sg_rate_limiter_check`).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_check(
    rate: *mut sg_shared_rate,
    now: u64,
    cost: u32,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `rate`.
        unsafe {
            with(rate, |o| {
                Ok(match o.inner.check(now, cost) {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Units that would conform now, without taking them.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_rate_available(
    rate: *const sg_shared_rate,
    now: u64,
    available_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let available_out = out(available_out)?;
        // SAFETY: the crate's contract for `rate`.
        let v = unsafe { with(rate, |o| Ok(o.inner.available(now)))? };
        available_out.write(v);
        Ok(())
    })
}

// ---- the retry budget -----------------------------------------------------------------

/// A retry budget in memory shared between processes (opaque; heap only).
pub struct sg_shared_budget {
    _opaque: [u8; 0],
}
object!(sg_shared_budget, SharedRetryBudget, 0x5347_5348_4255_4400);

/// Creates the shared retry budget `name` or attaches to it; NULL `name` makes an
/// anonymous one (as `sg_shared_rate_open`). Free it with `sg_shared_budget_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_open(
    name: *const c_char,
    cfg: *const sg_retry_budget_config,
    budget_out: *mut *mut sg_shared_budget,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `budget_out`.
    unsafe {
        new_object(budget_out, || {
            let c = input(cfg)?;
            crate::field::reserved(&c.reserved)?;
            let cfg = RetryBudgetConfig {
                ttl: c.ttl_ns,
                min_retries_per_sec: c.min_retries_per_sec,
                percent_can_retry: c.percent_can_retry,
            };
            match name_arg(name)? {
                Some(n) => SharedRetryBudget::open(n, cfg),
                None => SharedRetryBudget::anonymous(cfg),
            }
            .map_err(status_of)
        })
    }
}

/// Frees the handle. NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_free(budget: *mut sg_shared_budget) {
    // SAFETY: the crate's contract for `budget`.
    unsafe { free_object(budget) }
}

/// Removes the name (processes that have it mapped keep their segment).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_unlink(name: *const c_char) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `name`.
        let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
        SharedRetryBudget::unlink(name).map_err(status_of)
    })
}

/// Whether this handle created the segment.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_created(
    budget: *const sg_shared_budget,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `budget`.
        let v = unsafe { with(budget, |o| Ok(o.inner.created()))? };
        created_out.write(v);
        Ok(())
    })
}

/// Records one request (a first attempt, not a retry) at `now`, in every process's budget.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_deposit(
    budget: *mut sg_shared_budget,
    now: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `budget`.
        unsafe {
            with(budget, |o| {
                o.inner.deposit(now);
                Ok(())
            })
        }
    })
}

/// Takes one retry: `SG_OK`, or `SG_REJECTED` with `SG_REASON_BUDGET_EXHAUSTED` and a
/// hint (as `sg_retry_budget_try_withdraw`).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_try_withdraw(
    budget: *mut sg_shared_budget,
    now: u64,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `budget`.
        unsafe {
            with(budget, |o| {
                Ok(match o.inner.try_withdraw(now) {
                    Ok(_) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Retries that would be allowed now (reserve included), without taking any.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_available(
    budget: *const sg_shared_budget,
    now: u64,
    available_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let available_out = out(available_out)?;
        // SAFETY: the crate's contract for `budget`.
        let v = unsafe { with(budget, |o| Ok(o.inner.available(now)))? };
        available_out.write(v);
        Ok(())
    })
}

/// Frees the budget's slot ring if a process proven dead held it (killed in the middle of
/// a fold); writes how many cells were freed (0 or 1). Operations do this by themselves
/// when they meet such a cell (at most every 10 ms per process); this does it at once.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_budget_reclaim(
    budget: *mut sg_shared_budget,
    freed_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let freed_out = out(freed_out)?;
        // SAFETY: the crate's contract for `budget`.
        let v = unsafe { with(budget, |o| Ok(o.inner.reclaim()))? };
        freed_out.write(v);
        Ok(())
    })
}

// ---- keyed limits ---------------------------------------------------------------------

/// The table sizes C can pick (`sg_keyed_config.shards`).
#[derive(Debug)]
pub enum SharedTable {
    /// 16 shards.
    S16(SharedKeyedLimits<16, TOP>),
    /// 64 shards.
    S64(SharedKeyedLimits<64, TOP>),
    /// 256 shards.
    S256(SharedKeyedLimits<256, TOP>),
    /// 1024 shards.
    S1024(SharedKeyedLimits<1024, TOP>),
}

macro_rules! each {
    ($table:expr, $t:ident => $e:expr) => {
        match $table {
            SharedTable::S16($t) => $e,
            SharedTable::S64($t) => $e,
            SharedTable::S256($t) => $e,
            SharedTable::S1024($t) => $e,
        }
    };
}

/// Per-key caps (`sg_keyed`) in memory shared between processes (opaque; heap only).
pub struct sg_shared_keyed {
    _opaque: [u8; 0],
}
object!(sg_shared_keyed, SharedTable, 0x5347_5348_4B45_5900);

/// Caller storage for one admission of an `sg_shared_keyed`. Opaque: fill it only through
/// the library. Released once (a second release says `SG_ALREADY_RELEASED`, a release to
/// another table `SG_FOREIGN_HANDLE`, zeroed or garbage storage `SG_INVALID_HANDLE`); do
/// not copy a live one.
// (Not in the doc comment.) The words are a state word, the issuing handle's id and the
// shared key permit (32 bytes) by value.
#[repr(C)]
#[derive(Debug)]
pub struct sg_shared_key_permit {
    /// Opaque.
    pub opaque: [UnsafeCell<MaybeUninit<u64>>; 6],
}

/// The state words of an `sg_shared_key_permit` ("SGSKPLIV", "SGSKPREL"): see `storage`.
const MARKS: Marks = Marks { live: 0x5347_534B_504C_4956, released: 0x5347_534B_5052_454C };

fn keyed_config(c: &sg_keyed_config) -> Res<KeyedConfig> {
    crate::field::reserved(&c.reserved)?;
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

/// Creates the shared keyed table `name` or attaches to it; NULL `name` makes an anonymous
/// one (as `sg_shared_rate_open`). The config is `sg_keyed_config`'s (16, 64, 256 or 1024
/// shards); the segment is the table plus `4 × shards × 256` bytes of per-process counts.
/// Free it with `sg_shared_keyed_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_open(
    name: *const c_char,
    cfg: *const sg_keyed_config,
    keyed_out: *mut *mut sg_shared_keyed,
) -> sg_status {
    // SAFETY: the crate's contract for `name`, `cfg` and `keyed_out`.
    unsafe {
        new_object(keyed_out, || {
            let c = input(cfg)?;
            let config = keyed_config(c)?;
            let name = name_arg(name)?;
            fn open<const N: usize>(
                name: Option<&str>,
                config: KeyedConfig,
            ) -> Result<SharedKeyedLimits<N, TOP>, ShmError> {
                match name {
                    Some(n) => SharedKeyedLimits::open(n, config),
                    None => SharedKeyedLimits::anonymous(config),
                }
            }
            match c.shards {
                16 => open(name, config).map(SharedTable::S16),
                64 => open(name, config).map(SharedTable::S64),
                256 => open(name, config).map(SharedTable::S256),
                1024 => open(name, config).map(SharedTable::S1024),
                _ => return Err(crate::field::out_of_range("shards")),
            }
            .map_err(status_of)
        })
    }
}

/// Detaches this process and frees the handle (release its permits first: one still held
/// stays counted until the process exits and is reclaimed). NULL is a no-op.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_free(keyed: *mut sg_shared_keyed) {
    // SAFETY: the crate's contract for `keyed`.
    unsafe { free_object(keyed) }
}

/// Removes the name (processes that have it mapped keep their segment).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_unlink(name: *const c_char) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `name`.
        let name = unsafe { name_arg(name)? }.ok_or(SG_NULL_ARGUMENT)?;
        // The size is not part of the name: any table type removes it.
        SharedKeyedLimits::<16, TOP>::unlink(name).map_err(status_of)
    })
}

/// Whether this handle created the segment.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_created(
    keyed: *const sg_shared_keyed,
    created_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let created_out = out(created_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each!(&o.inner, t => t.created())))? };
        created_out.write(v);
        Ok(())
    })
}

/// Takes a slot for `key_hash` (and `cost` units of its rate) across all processes, counted
/// to this process, into `permit_out`; or `SG_REJECTED` with `SG_REASON_KEY_LIMIT` /
/// `SG_REASON_KEY_RATE` (as `sg_keyed_try_acquire`). A key-limit refusal may first give
/// back dead processes' permits (at most once per 100 ms across processes) and retry.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_try_acquire(
    keyed: *mut sg_shared_keyed,
    key_hash: u64,
    now: u64,
    cost: u32,
    permit_out: *mut sg_shared_key_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        let permit_out = out(permit_out)?;
        // SAFETY: the crate's contract for `keyed`.
        unsafe {
            with(keyed, |k| match each!(&k.inner, t => t.try_acquire(key_hash, now, cost)) {
                Ok(p) => {
                    storage::issue(permit_out, &MARKS, k.head.id, p);
                    Ok(SG_OK)
                }
                Err(ShmError::Rejected(r)) => Ok(rejected(rejection_out, r)),
                Err(e) => Err(status_of(e)),
            })
        }
    })
}

/// Returns a permit's slot. Twice is `SG_ALREADY_RELEASED`, another table's permit
/// `SG_FOREIGN_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_release(
    keyed: *mut sg_shared_keyed,
    permit: *mut sg_shared_key_permit,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `permit` (the state word is updated through
        // this shared borrow, which the `UnsafeCell`s allow).
        let permit = unsafe { input(permit.cast_const())? };
        // SAFETY: the crate's contract for `keyed`.
        unsafe {
            with(keyed, |k| {
                let p = storage::take::<SharedKeyPermit>(&permit.opaque, &MARKS, k.head.id)?;
                each!(&k.inner, t => t.release(p)).map_err(status_of)
            })
        }
    })
}

/// Gives back the key permits of every attached process proven dead (exactly once each)
/// and frees the top-keys cell if a dead process held it; writes how many permits.
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_reclaim(
    keyed: *mut sg_shared_keyed,
    reclaimed_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let reclaimed_out = out(reclaimed_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe { with(keyed, |o| Ok(each!(&o.inner, t => t.reclaim())))? };
        reclaimed_out.write(v);
        Ok(())
    })
}

/// A snapshot of the shared table (all processes' permits).
#[no_mangle]
pub unsafe extern "C" fn sg_shared_keyed_metrics_get(
    keyed: *const sg_shared_keyed,
    metrics_out: *mut sg_keyed_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `keyed`.
        let v = unsafe {
            with(keyed, |o| Ok(each!(&o.inner, t => keyed_metrics(&t.limits().metrics()))))?
        };
        metrics_out.write(v);
        Ok(())
    })
}
