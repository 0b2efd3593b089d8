//! `sg_backoff`: exponential backoff with full / equal / decorrelated jitter that never
//! retries sooner than the server said. Not thread-safe (one per retried call), as the
//! core's `Backoff`.

use core::ffi::c_void;

use surgeguard_core::backoff::{Backoff, BackoffConfig, Jitter};
use surgeguard_core::rng::SplitMix64;

use crate::handle::{
    deinit_object, ffi, ffi_value, free_object, init_object, input, new_object, object, out, with,
    with_mut, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::status::sg_status::{self, *};

/// `sg_backoff_config.jitter`: exactly `min(cap, base·multiplier^(n−1))` (tests only:
/// synchronises a fleet).
pub const SG_JITTER_NONE: u32 = 0;
/// Uniform in `[0, ceiling]` (gRPC A6): the widest spread (default).
pub const SG_JITTER_FULL: u32 = 1;
/// `ceiling/2` plus uniform in `[0, ceiling/2]`.
pub const SG_JITTER_EQUAL: u32 = 2;
/// `min(cap, uniform[base, 3 × previous delay])`.
pub const SG_JITTER_DECORRELATED: u32 = 3;

/// Settings of an `sg_backoff`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_backoff_config {
    /// First delay ceiling, ns, in `[1 µs, 1 day]` (default 100 ms, gRPC A6).
    pub base_ns: u64,
    /// Growth per attempt, in `[1, 100]` (default 2).
    pub multiplier: f64,
    /// Largest delay chosen by the backoff itself, ns; at least `base_ns`, at most 1 day
    /// (default 1 s). A server's hint can exceed it.
    pub cap_ns: u64,
    /// `SG_JITTER_*` (default full).
    pub jitter: u32,
    /// Seed of the jitter generator (SplitMix64), so a run replays (default 0).
    pub seed: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<BackoffConfig> for sg_backoff_config {
    fn from(c: BackoffConfig) -> Self {
        Self {
            reserved: [0; 4],
            base_ns: c.base,
            multiplier: c.multiplier,
            cap_ns: c.cap,
            jitter: match c.jitter {
                Jitter::None => SG_JITTER_NONE,
                Jitter::Equal => SG_JITTER_EQUAL,
                Jitter::Decorrelated => SG_JITTER_DECORRELATED,
                _ => SG_JITTER_FULL,
            },
            seed: 0,
        }
    }
}

/// The backoff and its own jitter generator.
pub struct BackoffState {
    backoff: Backoff,
    rng: SplitMix64,
}

/// Delays between the attempts of one retried call. NOT thread-safe: keep one per call
/// (it remembers the previous delay), or guard it.
pub struct sg_backoff {
    _opaque: [u8; 0],
}
object!(sg_backoff, BackoffState, 0x5347_424B_4F46_4600);

mod backoff_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_backoff_config` for the duration of the
    /// call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_backoff_config) -> Res<BackoffState> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_backoff_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        let jitter = match c.jitter {
            SG_JITTER_NONE => Jitter::None,
            SG_JITTER_FULL => Jitter::Full,
            SG_JITTER_EQUAL => Jitter::Equal,
            SG_JITTER_DECORRELATED => Jitter::Decorrelated,
            _ => return Err(crate::field::out_of_range("jitter")),
        };
        let backoff = Backoff::new(BackoffConfig {
            base: c.base_ns,
            multiplier: c.multiplier,
            cap: c.cap_ns,
            jitter,
        })?;
        Ok(BackoffState { backoff, rng: SplitMix64::new(c.seed) })
    }
}

/// Fills `cfg` with the defaults: base 100 ms, ×2, cap 1 s, full jitter (gRPC A6), seed 0.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_config_default(cfg: *mut sg_backoff_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(BackoffConfig::default().into())))
}

/// Creates a backoff on the heap; free it with `sg_backoff_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_new(
    cfg: *const sg_backoff_config,
    backoff_out: *mut *mut sg_backoff,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `backoff_out`.
    unsafe { new_object(backoff_out, || backoff_make::make(cfg)) }
}

/// Frees a backoff made by `sg_backoff_new`. NULL is fine; a handle made by `sg_backoff_init` is
/// left alone (use `sg_backoff_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_free(backoff: *mut sg_backoff) {
    // SAFETY: the crate's contract for `backoff`.
    unsafe { free_object(backoff) }
}

/// Bytes of caller storage `sg_backoff_init` needs.
#[no_mangle]
pub extern "C" fn sg_backoff_size() -> usize {
    ffi_value(0, obj_size::<sg_backoff>)
}

/// Alignment the storage given to `sg_backoff_init` needs.
#[no_mangle]
pub extern "C" fn sg_backoff_align() -> usize {
    ffi_value(0, obj_align::<sg_backoff>)
}

/// Creates a backoff in caller storage (`len` bytes at `mem`, aligned to
/// `sg_backoff_align()`); on `SG_OK`, `(sg_backoff *)mem` is the handle. End it with
/// `sg_backoff_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_backoff_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_backoff>(mem, len, || backoff_make::make(cfg)) }
}

/// Ends a backoff made by `sg_backoff_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_deinit(backoff: *mut sg_backoff) -> sg_status {
    // SAFETY: the crate's contract for `backoff`.
    unsafe { deinit_object(backoff) }
}

/// The delay before retry number `attempt` (1 = first retry; 0 is `SG_INVALID_ARGUMENT`),
/// ns, never less than `retry_after_hint_ns` (the server's `Retry-After` or pushback;
/// 0 = none).
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_next_delay(
    backoff: *mut sg_backoff,
    attempt: u32,
    retry_after_hint_ns: u64,
    delay_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let delay_out = out(delay_out)?;
        if attempt == 0 {
            return Err(SG_INVALID_ARGUMENT);
        }
        let hint = (retry_after_hint_ns != 0).then_some(retry_after_hint_ns);
        // SAFETY: the crate's contract for `backoff`; exclusive use is this type's documented
        // condition.
        let d = unsafe {
            with_mut(backoff, |b| {
                let s = &mut b.inner;
                Ok(s.backoff.next_delay(attempt, hint, &mut s.rng))
            })?
        };
        delay_out.write(d);
        Ok(())
    })
}

/// The ceiling before jitter for retry number `attempt` (1 = first retry; 0 is
/// `SG_INVALID_ARGUMENT`): `min(cap, base·multiplier^(attempt−1))`.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_ceiling(
    backoff: *const sg_backoff,
    attempt: u32,
    ceiling_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let ceiling_out = out(ceiling_out)?;
        // SAFETY: as in `sg_backoff_next_delay`.
        if attempt == 0 {
            return Err(SG_INVALID_ARGUMENT);
        }
        // (A shared borrow: `ceiling` only reads the settings, so this query takes a const
        // handle; the type is still not to be used from two threads at once.)
        let c = unsafe { with(backoff, |b| Ok(b.inner.backoff.ceiling(attempt)))? };
        ceiling_out.write(c);
        Ok(())
    })
}

/// Forgets the previous delay (decorrelated jitter starts again from `base_ns`), for a
/// new call. The generator keeps its place.
#[no_mangle]
pub unsafe extern "C" fn sg_backoff_reset(backoff: *mut sg_backoff) -> sg_status {
    ffi(|| {
        // SAFETY: as in `sg_backoff_next_delay`.
        unsafe {
            with_mut(backoff, |b| {
                b.inner.backoff.reset();
                Ok(())
            })
        }
    })
}
