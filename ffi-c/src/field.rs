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

/// The C spelling of a core config path, relative to the C struct of the path's family
/// (`sg_limiter_config` for `limiter.*`, `sg_gate_config` for `gate.*`): the C structs
/// flatten some nested settings and spell durations with a unit. A Gate's limiter paths
/// get the `limiter.` prefix from the caller ([`under`]). `None`: a path this table does
/// not know (a test checks that every described field is here).
pub fn c_name(path: &str) -> Option<&'static str> {
    Some(match path {
        // sg_limiter_config
        "limiter.algorithm" => "algorithm",
        "limiter.levels" => "levels",
        "limiter.weights" => "weights",
        "limiter.min_window_ns" => "min_window_ns",
        "limiter.max_window_ns" => "max_window_ns",
        "limiter.window_rtt_multiple" => "window_rtt_multiple",
        "limiter.min_samples" => "min_samples",
        "limiter.active_ns" => "active_ns",
        "limiter.static_limit" => "limit",
        "limiter.fixed.initial_limit" => "fixed.initial_limit",
        "limiter.fixed.min_limit" => "fixed.min_limit",
        "limiter.fixed.max_limit" => "fixed.max_limit",
        "limiter.fixed.limit" => "limit",
        "limiter.aimd.initial_limit" => "aimd.initial_limit",
        "limiter.aimd.min_limit" => "aimd.min_limit",
        "limiter.aimd.max_limit" => "aimd.max_limit",
        "limiter.aimd.target_latency_ns" => "aimd.target_latency_ns",
        "limiter.aimd.latency_percentile" => "aimd.latency_percentile",
        "limiter.aimd.backoff_ratio" => "aimd.backoff_ratio",
        "limiter.aimd.timeout_ns" => "aimd.timeout_ns",
        "limiter.aimd.app_limited_fraction" => "aimd.app_limited_fraction",
        "limiter.aimd.slow_start" => "aimd.slow_start",
        "limiter.aimd.netflix_parity" => "aimd.netflix_parity",
        "limiter.hysteresis.initial_limit" => "hysteresis.initial_limit",
        "limiter.hysteresis.min_limit" => "hysteresis.min_limit",
        "limiter.hysteresis.max_limit" => "hysteresis.max_limit",
        "limiter.hysteresis.target_latency_ns" => "hysteresis.target_latency_ns",
        "limiter.hysteresis.healthy_below" => "hysteresis.healthy_below",
        "limiter.hysteresis.critical_above" => "hysteresis.critical_above",
        "limiter.hysteresis.critical_factor" => "hysteresis.critical_factor",
        "limiter.hysteresis.jump_rise" => "hysteresis.jump_rise",
        "limiter.hysteresis.jump_window_ns" => "hysteresis.jump_window_ns",
        "limiter.hysteresis.jump_factor" => "hysteresis.jump_factor",
        "limiter.hysteresis.avg_alpha" => "hysteresis.avg_alpha",
        "limiter.hysteresis.cool_off_ns" => "hysteresis.cool_off_ns",
        "limiter.hysteresis.p99_window_ns" => "hysteresis.p99_window_ns",
        "limiter.hysteresis.app_limited_fraction" => "hysteresis.app_limited_fraction",
        "limiter.hysteresis.slow_start" => "hysteresis.slow_start",
        "limiter.gradient.initial_limit" => "gradient.initial_limit",
        "limiter.gradient.min_limit" => "gradient.min_limit",
        "limiter.gradient.max_limit" => "gradient.max_limit",
        "limiter.gradient.buffer" => "gradient.buffer",
        "limiter.gradient.headroom" => "gradient.headroom",
        "limiter.gradient.smoothing" => "gradient.smoothing",
        "limiter.gradient.sample_percentile" => "gradient.sample_percentile",
        "limiter.gradient.probe_interval_ns" => "gradient.probe_interval_ns",
        "limiter.gradient.probe_jitter" => "gradient.probe_jitter",
        "limiter.gradient.probe_limit" => "gradient.probe_limit",
        "limiter.gradient.probe_samples" => "gradient.probe_samples",
        "limiter.gradient.pinned_baseline_ns" => "gradient.pinned_baseline_ns",
        "limiter.gradient.backoff" => "gradient.backoff",
        "limiter.gradient.drop_tolerance" => "gradient.drop_tolerance",
        "limiter.gradient.slow_start" => "gradient.slow_start",
        "limiter.gradient.app_limited_ratio" => "gradient.app_limited_ratio",
        "limiter.gradient.seed" => "gradient.seed",
        "limiter.gradient2.initial_limit" => "gradient2.initial_limit",
        "limiter.gradient2.min_limit" => "gradient2.min_limit",
        "limiter.gradient2.max_limit" => "gradient2.max_limit",
        "limiter.gradient2.smoothing" => "gradient2.smoothing",
        "limiter.gradient2.queue_size" => "gradient2.queue_size",
        "limiter.gradient2.long_window" => "gradient2.long_window",
        "limiter.gradient2.rtt_tolerance" => "gradient2.rtt_tolerance",
        "limiter.gradient2.fixed" => "gradient2.fixed",
        "limiter.gradient2.backoff_ratio" => "gradient2.backoff_ratio",
        "limiter.gradient2.app_limited_fraction" => "gradient2.app_limited_fraction",
        "limiter.gradient2.slow_start" => "gradient2.slow_start",
        "limiter.vegas.initial_limit" => "vegas.initial_limit",
        "limiter.vegas.min_limit" => "vegas.min_limit",
        "limiter.vegas.max_limit" => "vegas.max_limit",
        "limiter.vegas.smoothing" => "vegas.smoothing",
        "limiter.vegas.alpha" => "vegas.alpha",
        "limiter.vegas.beta" => "vegas.beta",
        "limiter.vegas.threshold" => "vegas.threshold",
        "limiter.vegas.decrease_ratio" => "vegas.decrease_ratio",
        "limiter.vegas.probe_multiplier" => "vegas.probe_multiplier",
        "limiter.vegas.seed" => "vegas.seed",
        "limiter.vegas.app_limited_fraction" => "vegas.app_limited_fraction",
        "limiter.vegas.slow_start" => "vegas.slow_start",
        // sg_gate_config (CoDel, LIFO and aging flattened)
        "gate.queue_capacity" => "queue_capacity",
        "gate.codel" => "codel_enabled",
        "gate.codel.target_ns" => "codel_target_ns",
        "gate.codel.interval_ns" => "codel_interval_ns",
        "gate.codel.mode" => "codel_mode",
        "gate.lifo" => "lifo",
        "gate.lifo.occupancy" => "lifo_occupancy",
        "gate.max_wait_ns" => "max_wait_ns",
        "gate.aging" => "aging_enabled",
        "gate.aging.from" => "aging_from",
        "gate.aging.to" => "aging_to",
        "gate.aging.after_ns" => "aging_after_ns",
        "gate.initial_service_ns" => "initial_service_ns",
        "gate.service_alpha" => "service_alpha",
        "gate.fallback_retry_after_ns" => "fallback_retry_after_ns",
        // the others
        "retry_budget.ttl" => "ttl_ns",
        "retry_budget.min_retries_per_sec" => "min_retries_per_sec",
        "retry_budget.percent_can_retry" => "percent_can_retry",
        "token_throttle.max_tokens" => "max_tokens",
        "token_throttle.token_ratio" => "token_ratio",
        "rate_limiter.per_second" => "per_second",
        "rate_limiter.emission_ns" => "emission_ns",
        "rate_limiter.burst" => "burst",
        "paced_drain.target_per_sec" => "target_per_sec",
        "paced_drain.headroom" => "headroom",
        "paced_drain.burst" => "burst",
        "breaker.window.count" => "window_count",
        "breaker.window.time" => "window_ns",
        "breaker.failure_rate_threshold" => "failure_rate_threshold",
        "breaker.slow_call_rate_threshold" => "slow_call_rate_threshold",
        "breaker.slow_call_duration" => "slow_call_duration_ns",
        "breaker.minimum_calls" => "minimum_calls",
        "breaker.open_duration" => "open_duration_ns",
        "breaker.open_jitter" => "open_jitter",
        "breaker.half_open_probes" => "half_open_probes",
        "breaker.probe_lease" => "probe_lease_ns",
        "breaker.seed" => "seed",
        "breaker.ramp_duration" => "ramp_duration_ns",
        "adaptive_throttle.k" => "k",
        "adaptive_throttle.window" => "window_ns",
        "adaptive_throttle.form" => "form",
        "adaptive_throttle.max_drop_probability" => "max_drop_probability",
        "backoff.base" => "base_ns",
        "backoff.cap" => "cap_ns",
        "backoff.multiplier" => "multiplier",
        "backoff.jitter" => "jitter",
        "keyed.shards" => "shards",
        "keyed.shards_per_key" => "shards_per_key",
        "keyed.shard_limit" => "shard_limit",
        "keyed.limit_retry_after" => "limit_retry_after_ns",
        "keyed.shard_rate.per_second" => "rate_per_second",
        "keyed.shard_rate.emission_ns" => "rate_per_second",
        "keyed.shard_rate.burst" => "rate_burst",
        "credits.capacity" => "capacity",
        "credits.low_water" => "low_water",
        "credits.channels" => "channels",
        "lag_meter.bucket" => "bucket_ns",
        "lag_meter.snapshots" => "snapshots",
        "watermarks.pause_below" => "pause_below",
        "watermarks.resume_above" => "resume_above",
        "watermarks.capacity" => "capacity",
        _ => return None,
    })
}

/// Records the C field of a core config error (its canonical path if the table lacks it).
pub(crate) fn set_core(e: &ConfigError) {
    set(c_name(e.field).unwrap_or(e.field));
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
    fn core_paths_name_c_fields() {
        assert_eq!(c_name("gate.lifo.occupancy"), Some("lifo_occupancy"));
        assert_eq!(c_name("limiter.gradient.buffer"), Some("gradient.buffer"));
        assert_eq!(c_name("retry_budget.ttl"), Some("ttl_ns"));
        assert_eq!(c_name("some.new.thing"), None);
        set_core(&ConfigError::out_of_range("some.new.thing"));
        assert_eq!(get(), "some.new.thing", "an unknown path is recorded as it is");
        clear();
    }
}
