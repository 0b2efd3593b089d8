//! Outcomes, priority levels and the library version.

use core::ffi::c_char;

use surgeguard_core::{Outcome, Priority};

use crate::handle::{ffi_value, Res};
use crate::status::sg_status::*;

/// Outcome of admitted work: completed; its latency is a sample for the limit.
pub const SG_OUTCOME_SUCCESS: u32 = 0;
/// Outcome: an overload signal (a timeout, a 429/503 from below). Limits back off.
pub const SG_OUTCOME_DROPPED: u32 = 1;
/// Outcome: not a capacity signal (caller cancelled, a 4xx); the slot just returns.
pub const SG_OUTCOME_IGNORED: u32 = 2;

/// Priority level 0, the most important (`X-Request-Priority: critical`).
pub const SG_LEVEL_CRITICAL: u32 = 0;
/// Priority level 1, the default (`normal`).
pub const SG_LEVEL_NORMAL: u32 = 1;
/// Priority level 2 (`background`): shed first.
pub const SG_LEVEL_BACKGROUND: u32 = 2;
/// Levels are `0 .. SG_MAX_LEVELS`; a larger value is `SG_INVALID_ARGUMENT`. A level
/// beyond an object's configured levels counts as its least important level.
pub const SG_MAX_LEVELS: u32 = 8;

pub(crate) fn outcome(v: u32) -> Res<Outcome> {
    Outcome::from_u32(v).ok_or(SG_INVALID_ARGUMENT)
}

pub(crate) fn level(v: u32) -> Res<Priority> {
    u8::try_from(v).ok().and_then(Priority::new).ok_or(SG_INVALID_ARGUMENT)
}

/// The library's version as a static string (`"0.1.0"`); compare with
/// `SURGEGUARD_VERSION_STRING` to catch a header/library mismatch.
#[no_mangle]
pub extern "C" fn sg_version() -> *const c_char {
    ffi_value(core::ptr::null(), || VERSION.as_ptr())
}

/// The library's version packed as `major << 16 | minor << 8 | patch`, the same packing
/// as the header's `SURGEGUARD_VERSION_NUMBER`.
#[no_mangle]
pub extern "C" fn sg_version_number() -> u32 {
    ffi_value(0, || {
        let part = |s: &str| s.parse::<u32>().unwrap_or(0);
        (part(env!("CARGO_PKG_VERSION_MAJOR")) << 16)
            | (part(env!("CARGO_PKG_VERSION_MINOR")) << 8)
            | part(env!("CARGO_PKG_VERSION_PATCH"))
    })
}

const VERSION: &core::ffi::CStr =
    match core::ffi::CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes())
    {
        Ok(s) => s,
        Err(_) => panic!("the version has no NUL"),
    };
