//! Which config field a `SG_CONFIG_*` status is about: `sg_last_error_field()`.
//!
//! A per-thread buffer (like `errno`): every `sg_<type>_new` / `_init` clears it, and a
//! config refusal writes the C spelling of the field into it (`limiter.gradient.buffer`,
//! `codel_interval_ns`), as a path from the config struct passed to that call.

use core::cell::UnsafeCell;
use core::ffi::c_char;

use surgeguard_core::ConfigError;

use crate::status::sg_status::{self, *};

/// Bytes of the per-thread buffer (NUL included); longer paths are cut.
const CAP: usize = 96;

thread_local! {
    /// The field path, NUL-terminated. Only this thread touches it.
    static FIELD: UnsafeCell<[u8; CAP]> = const { UnsafeCell::new([0; CAP]) };
}

fn update(f: impl FnOnce(&mut [u8; CAP])) {
    // SAFETY: the buffer is this thread's own, and no reference to it outlives this call
    // (C receives a raw pointer, and reads it only between calls of this library on the
    // same thread, when no `&mut` exists).
    FIELD.with(|b| f(unsafe { &mut *b.get() }));
}

/// Forgets the last field (each constructor starts with it).
pub(crate) fn clear() {
    update(|b| b[0] = 0);
}

/// Records `name` as the field of the current refusal.
pub(crate) fn set(name: &str) {
    update(|b| {
        let n = name.len().min(CAP - 1);
        b[..n].copy_from_slice(&name.as_bytes()[..n]);
        b[n] = 0;
    });
}

/// Prefixes the recorded field with `prefix` (e.g. `"limiter."`), if one is recorded.
pub(crate) fn prefix(prefix: &str) {
    update(|b| {
        let len = b.iter().position(|&c| c == 0).unwrap_or(CAP - 1);
        if len == 0 {
            return;
        }
        let p = prefix.len().min(CAP - 1);
        let keep = len.min(CAP - 1 - p);
        b.copy_within(..keep, p);
        b[..p].copy_from_slice(&prefix.as_bytes()[..p]);
        b[p + keep] = 0;
    });
}

/// A refusal of the C-side check of `name` (an enum value, a size): records it.
pub(crate) fn out_of_range(name: &str) -> sg_status {
    set(name);
    SG_CONFIG_OUT_OF_RANGE
}

/// The `reserved` words of a config: all 0 (what `_config_default` writes, and what
/// every program built against this header sends), or `SG_CONFIG_OUT_OF_RANGE` naming
/// `reserved` — a setting this version does not know is refused, not ignored.
pub(crate) fn reserved(r: &[u64; 4]) -> Result<(), sg_status> {
    if r.iter().any(|&w| w != 0) {
        return Err(out_of_range("reserved"));
    }
    Ok(())
}

/// Runs a part of a config's validation whose fields sit under `path` (`"limiter."`):
/// a refusal's field gets the prefix.
pub(crate) fn under<T>(path: &str, r: Result<T, sg_status>) -> Result<T, sg_status> {
    r.inspect_err(|_| prefix(path))
}

/// The C field named by a core config error's text. The core names fields as its own
/// structs spell them, sometimes in a phrase; the C structs spell a few differently
/// (with a unit suffix, flattened). Unknown texts fall back to their first word.
pub(crate) fn c_name(e: &ConfigError) -> &'static str {
    let what = match *e {
        ConfigError::NotFinite(w) | ConfigError::OutOfRange(w) | ConfigError::Inconsistent(w) => w,
        _ => "",
    };
    match what {
        "codel.target_ns" | "codel.target_ns must be below interval_ns" => "codel_target_ns",
        "codel.interval_ns" => "codel_interval_ns",
        "lifo occupancy threshold" => "lifo_occupancy",
        "queue_capacity above CAP" | "queue capacity above CAP" => "queue_capacity",
        "aging.after_ns" => "aging_after_ns",
        "aging must move to a less important level" => "aging_to",
        "N (shards)" => "shards",
        "shards_per_key above N (shards)" => "shards_per_key",
        "shard_rate.per_second" | "shard_rate.emission_ns" => "rate_per_second",
        "shard_rate.burst" | "shard_rate: burst × emission_ns overflows" => "rate_burst",
        "limit_retry_after" => "limit_retry_after_ns",
        "emission interval" => "emission_ns",
        "burst × emission interval overflows" => "burst",
        "target_per_sec × (1 − headroom)" => "headroom",
        "ttl" => "ttl_ns",
        "token_ratio above max_tokens" => "token_ratio",
        "slow_call_duration" => "slow_call_duration_ns",
        "open_duration" => "open_duration_ns",
        "probe_lease" => "probe_lease_ns",
        "ramp_duration" => "ramp_duration_ns",
        "minimum_calls above the window" => "minimum_calls",
        "base" => "base_ns",
        "cap" | "cap below base" => "cap_ns",
        "bucket" => "bucket_ns",
        "low_water must be below capacity" => "low_water",
        "resume_above must be below capacity" | "resume_above must be above pause_below" => {
            "resume_above"
        }
        "min_limit > max_limit" => "min_limit",
        "initial_limit outside [min_limit, max_limit]" => "initial_limit",
        "netflix_parity needs a whole initial_limit" => "initial_limit",
        "netflix_parity needs a whole min_limit" => "min_limit",
        "netflix_parity needs a whole max_limit" => "max_limit",
        "healthy_below > critical_above" => "healthy_below",
        "alpha > beta" => "alpha",
        "weights sum above 1" => "weights",
        "min_window_ns > max_window_ns" => "min_window_ns",
        w => w.split([' ', ':']).next().unwrap_or(w),
    }
}

/// The config field (as the C struct spells it, a path from the struct passed:
/// `"limiter.gradient.buffer"`, `"codel_interval_ns"`) that made the last
/// `sg_<type>_new` or `sg_<type>_init` on this thread fail with `SG_CONFIG_*`; `""` if
/// that call succeeded or failed for another reason. Never NULL. The text stays valid
/// until the thread ends, and changes with this thread's next `_new` or `_init`.
#[no_mangle]
pub extern "C" fn sg_last_error_field() -> *const c_char {
    // The buffer lives as long as the thread; the pointer is only read by C.
    crate::handle::ffi_value(c"".as_ptr(), || FIELD.with(|b| b.get().cast::<c_char>().cast_const()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::CStr;

    fn get() -> String {
        // SAFETY: a NUL-terminated string in this thread's buffer.
        unsafe { CStr::from_ptr(sg_last_error_field()) }.to_str().unwrap().to_string()
    }

    #[test]
    fn set_prefix_clear() {
        clear();
        assert_eq!(get(), "");
        prefix("limiter.");
        assert_eq!(get(), "", "no prefix without a field");
        set("buffer");
        prefix("gradient.");
        prefix("limiter.");
        assert_eq!(get(), "limiter.gradient.buffer");
        set(&"x".repeat(200));
        assert_eq!(get().len(), CAP - 1);
        prefix("limiter.");
        assert_eq!(get().len(), CAP - 1);
        assert!(get().starts_with("limiter.x"));
        clear();
        assert_eq!(get(), "");
    }

    #[test]
    fn core_phrases_name_c_fields() {
        assert_eq!(c_name(&ConfigError::OutOfRange("lifo occupancy threshold")), "lifo_occupancy");
        assert_eq!(c_name(&ConfigError::Inconsistent("min_limit > max_limit")), "min_limit");
        assert_eq!(c_name(&ConfigError::NotFinite("buffer")), "buffer");
        assert_eq!(c_name(&ConfigError::OutOfRange("some new thing")), "some");
    }
}
