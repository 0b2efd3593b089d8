//! Config refusals through the C API: each bad field gives its `SG_CONFIG_*` status and
//! `sg_last_error_field()` names that field as the C struct spells it; unused settings
//! are checked by the same rule as used ones (CoDel off, another algorithm, aging off,
//! no rate, the other breaker window).

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr;

use surgeguard::backoff::*;
use surgeguard::breaker::*;
use surgeguard::field::sg_last_error_field;
use surgeguard::flow::*;
use surgeguard::gate::*;
use surgeguard::keyed::*;
use surgeguard::limiter::*;
use surgeguard::rate::*;
use surgeguard::retry::*;
use surgeguard::status::sg_status::{self, *};
use surgeguard::throttle::*;

fn last_field() -> String {
    // SAFETY: `sg_last_error_field` returns a NUL-terminated string, never NULL.
    unsafe { CStr::from_ptr(sg_last_error_field()) }.to_str().unwrap().to_string()
}

/// A field the case expects named, how it breaks the default config, and the status.
type Case<C> = (&'static str, fn(&mut C), sg_status);

/// One type's constructor and destructor, as plain fns.
struct Api<C, T> {
    default: unsafe extern "C" fn(*mut C) -> sg_status,
    new: unsafe extern "C" fn(*const C, *mut *mut T) -> sg_status,
    free: unsafe extern "C" fn(*mut T),
}

impl<C: Copy, T> Api<C, T> {
    fn default_config(&self) -> C {
        let mut c = MaybeUninit::<C>::zeroed();
        // SAFETY: a valid output slot, filled before it is read.
        unsafe {
            assert_eq!((self.default)(c.as_mut_ptr()), SG_OK);
            c.assume_init()
        }
    }

    /// Builds from `c`; frees on success. Returns the status and the field named.
    fn try_new(&self, c: &C) -> (sg_status, String) {
        let mut h = ptr::null_mut();
        // SAFETY: `c` is a readable config, `h` a valid output slot.
        let st = unsafe { (self.new)(c, &mut h) };
        let field = last_field();
        if st == SG_OK {
            assert!(!h.is_null());
            // SAFETY: a live heap handle, freed once.
            unsafe { (self.free)(h) };
        } else {
            assert!(h.is_null(), "a refused _new wrote its handle");
        }
        (st, field)
    }

    /// Each case: mutate the default config, expect `status` naming `field`.
    fn check(&self, name: &str, cases: &[Case<C>]) {
        let d = self.default_config();
        assert_eq!(self.try_new(&d), (SG_OK, String::new()), "{name}: the defaults");
        for (field, mutate, status) in cases {
            let mut c = d;
            mutate(&mut c);
            let (st, got) = self.try_new(&c);
            assert_eq!((st, got.as_str()), (*status, *field), "{name}: case {field}");
            // A success afterwards clears the field.
            assert_eq!(self.try_new(&d), (SG_OK, String::new()));
        }
    }
}

const NF: sg_status = SG_CONFIG_NOT_FINITE;
const OOR: sg_status = SG_CONFIG_OUT_OF_RANGE;
const INC: sg_status = SG_CONFIG_INCONSISTENT;

#[test]
fn limiter_fields_are_named_and_unused_algorithms_checked() {
    let api =
        Api { default: sg_limiter_config_default, new: sg_limiter_new, free: sg_limiter_free };
    api.check(
        "limiter",
        &[
            ("algorithm", |c| c.algorithm = 9, OOR),
            ("reserved", |c| c.reserved[3] = 1, OOR),
            ("vegas.reserved", |c| c.vegas.reserved[0] = u64::MAX, OOR),
            ("levels", |c| c.levels = 0, OOR),
            ("levels", |c| c.levels = 300, OOR),
            ("weights", |c| c.weights[0] = f64::NAN, NF),
            ("weights", |c| c.weights = [0.9; 8], INC),
            ("max_window_ns", |c| c.max_window_ns = u64::MAX, OOR),
            ("min_window_ns", |c| c.min_window_ns = c.max_window_ns + 1, INC),
            // 0 is out of range, not "inconsistent".
            ("window_rtt_multiple", |c| c.window_rtt_multiple = 0.0, OOR),
            ("window_rtt_multiple", |c| c.window_rtt_multiple = -1.0, OOR),
            ("window_rtt_multiple", |c| c.window_rtt_multiple = f64::INFINITY, NF),
            ("active_ns", |c| c.active_ns = 0, OOR),
            // The chosen algorithm (gradient by default) ...
            ("gradient.buffer", |c| c.gradient.buffer = f64::NAN, NF),
            ("gradient.headroom", |c| c.gradient.headroom = 11.0, OOR),
            // ... and the unused ones, under the fixed algorithm: checked too.
            (
                "gradient.buffer",
                |c| {
                    c.algorithm = SG_ALGORITHM_FIXED;
                    c.gradient.buffer = f64::NAN;
                },
                NF,
            ),
            ("aimd.backoff_ratio", |c| c.aimd.backoff_ratio = 2.0, OOR),
            ("vegas.smoothing", |c| c.vegas.smoothing = f64::NAN, NF),
            ("gradient2.long_window", |c| c.gradient2.long_window = 0, OOR),
            (
                "hysteresis.min_limit",
                |c| c.hysteresis.min_limit = c.hysteresis.max_limit + 1.0,
                INC,
            ),
            ("fixed.initial_limit", |c| c.fixed.initial_limit = f64::NEG_INFINITY, NF),
        ],
    );
}

#[test]
fn gate_fields_are_named_and_unused_settings_checked() {
    // A gate is ~200 KiB and is built by value (several copies in a debug build): more
    // than a test thread's default 2 MiB stack.
    std::thread::Builder::new().stack_size(64 << 20).spawn(gate_cases).unwrap().join().unwrap();
}

fn gate_cases() {
    let api = Api { default: sg_gate_config_default, new: sg_gate_new, free: sg_gate_free };
    api.check(
        "gate",
        &[
            ("limiter.levels", |c| c.limiter.levels = 9, OOR),
            ("reserved", |c| c.reserved[0] = 1, OOR),
            ("limiter.gradient.reserved", |c| c.limiter.gradient.reserved[2] = 7, OOR),
            ("limiter.gradient.buffer", |c| c.limiter.gradient.buffer = f64::NAN, NF),
            ("queue_capacity", |c| c.queue_capacity = 0, OOR),
            ("queue_capacity", |c| c.queue_capacity = SG_GATE_MAX_QUEUE + 1, OOR),
            ("codel_mode", |c| c.codel_mode = 2, OOR),
            ("codel_interval_ns", |c| c.codel_interval_ns = 0, OOR),
            // With CoDel off: the same rule (codel_mode=2 and interval 0 are refused while unused too).
            (
                "codel_mode",
                |c| {
                    c.codel_enabled = false;
                    c.codel_mode = 2;
                },
                OOR,
            ),
            (
                "codel_interval_ns",
                |c| {
                    c.codel_enabled = false;
                    c.codel_interval_ns = 0;
                },
                OOR,
            ),
            (
                "codel_target_ns",
                |c| {
                    c.codel_enabled = false;
                    c.codel_target_ns = c.codel_interval_ns;
                },
                INC,
            ),
            ("lifo", |c| c.lifo = 3, OOR),
            // `lifo_occupancy` under the default lifo (CoDel-triggered), i.e. unused.
            ("lifo_occupancy", |c| c.lifo_occupancy = f64::NAN, NF),
            ("lifo_occupancy", |c| c.lifo_occupancy = 0.0, OOR),
            (
                "lifo_occupancy",
                |c| {
                    c.lifo = SG_LIFO_OCCUPANCY;
                    c.lifo_occupancy = 1.5;
                },
                OOR,
            ),
            // Aging off (the default): its settings are still checked.
            ("aging_from", |c| c.aging_from = 9, OOR),
            ("aging_to", |c| c.aging_to = 8, OOR),
            ("aging_to", |c| c.aging_to = c.aging_from, INC),
            ("aging_after_ns", |c| c.aging_after_ns = 0, OOR),
            (
                "aging_to",
                |c| {
                    c.aging_enabled = true;
                    c.limiter.levels = 2; // aging moves 1 -> 2: past the levels in use
                    c.limiter.weights = [0.5; 8];
                },
                INC,
            ),
            ("max_wait_ns", |c| c.max_wait_ns = u64::MAX, OOR),
            ("service_alpha", |c| c.service_alpha = f64::NAN, NF),
            ("service_alpha", |c| c.service_alpha = 0.0, OOR),
            ("fallback_retry_after_ns", |c| c.fallback_retry_after_ns = 0, OOR),
            ("initial_service_ns", |c| c.initial_service_ns = u64::MAX, OOR),
        ],
    );
}

#[test]
fn other_configs_name_their_fields() {
    Api { default: sg_breaker_config_default, new: sg_breaker_new, free: sg_breaker_free }.check(
        "breaker",
        &[
            ("window_kind", |c| c.window_kind = 7, OOR),
            ("window_count", |c| c.window_count = 0, OOR),
            // The unused window (count is the default kind).
            ("window_ns", |c| c.window_ns = 0, OOR),
            (
                "window_count",
                |c| {
                    c.window_kind = SG_BREAKER_WINDOW_TIME;
                    c.window_count = 0;
                },
                OOR,
            ),
            ("minimum_calls", |c| c.minimum_calls = c.window_count + 1, INC),
            ("failure_rate_threshold", |c| c.failure_rate_threshold = f64::NAN, NF),
            ("open_duration_ns", |c| c.open_duration_ns = 0, OOR),
            ("probe_lease_ns", |c| c.probe_lease_ns = 0, OOR),
            ("half_open_probes", |c| c.half_open_probes = 0, OOR),
        ],
    );
    Api { default: sg_backoff_config_default, new: sg_backoff_new, free: sg_backoff_free }.check(
        "backoff",
        &[
            ("jitter", |c| c.jitter = 9, OOR),
            ("reserved", |c| c.reserved[1] = 1, OOR),
            ("base_ns", |c| c.base_ns = 0, OOR),
            ("multiplier", |c| c.multiplier = f64::NAN, NF),
            ("cap_ns", |c| c.cap_ns = c.base_ns - 1, INC),
        ],
    );
    Api { default: sg_keyed_config_default, new: sg_keyed_new, free: sg_keyed_free }.check(
        "keyed",
        &[
            ("shards", |c| c.shards = 17, OOR),
            ("shards_per_key", |c| c.shards_per_key = 0, OOR),
            ("rate_per_second", |c| c.rate_per_second = f64::NAN, NF),
            ("rate_per_second", |c| c.rate_per_second = -1.0, OOR),
            // No rate (the default): the burst is still checked.
            ("rate_burst", |c| c.rate_burst = 0, OOR),
        ],
    );
    Api {
        default: sg_adaptive_throttle_config_default,
        new: sg_adaptive_throttle_new,
        free: sg_adaptive_throttle_free,
    }
    .check(
        "adaptive_throttle",
        &[
            ("form", |c| c.form = 5, OOR),
            ("k", |c| c.k = f64::NAN, NF),
            ("window_ns", |c| c.window_ns = 0, OOR),
            ("max_drop_probability", |c| c.max_drop_probability = 2.0, OOR),
        ],
    );
    Api {
        default: sg_rate_limiter_config_default,
        new: sg_rate_limiter_new,
        free: sg_rate_limiter_free,
    }
    .check(
        "rate_limiter",
        &[("burst", |c| c.burst = 0, OOR), ("reserved", |c| c.reserved[0] = 1, OOR)],
    );
    Api {
        default: sg_paced_drain_config_default,
        new: sg_paced_drain_new,
        free: sg_paced_drain_free,
    }
    .check("paced_drain", &[("target_per_sec", |c| c.target_per_sec = f64::NAN, NF)]);
    Api {
        default: sg_retry_budget_config_default,
        new: sg_retry_budget_new,
        free: sg_retry_budget_free,
    }
    .check(
        "retry_budget",
        &[
            ("ttl_ns", |c| c.ttl_ns = 0, OOR),
            ("percent_can_retry", |c| c.percent_can_retry = f64::NAN, NF),
        ],
    );
    Api {
        default: sg_token_throttle_config_default,
        new: sg_token_throttle_new,
        free: sg_token_throttle_free,
    }
    .check("token_throttle", &[("max_tokens", |c| c.max_tokens = f64::NAN, NF)]);
    Api { default: sg_credits_config_default, new: sg_credits_new, free: sg_credits_free }.check(
        "credits",
        &[("capacity", |c| c.capacity = 0, OOR), ("low_water", |c| c.low_water = c.capacity, INC)],
    );
    Api { default: sg_lag_meter_config_default, new: sg_lag_meter_new, free: sg_lag_meter_free }
        .check("lag_meter", &[("bucket_ns", |c| c.bucket_ns = 0, OOR)]);
    Api { default: sg_watermarks_config_default, new: sg_watermarks_new, free: sg_watermarks_free }
        .check("watermarks", &[("resume_above", |c| c.resume_above = c.pause_below, INC)]);
}

#[test]
fn a_refusal_for_another_reason_names_no_field() {
    let mut h: *mut sg_limiter = ptr::null_mut();
    let api =
        Api { default: sg_limiter_config_default, new: sg_limiter_new, free: sg_limiter_free };
    let mut c = api.default_config();
    c.levels = 0;
    assert_eq!(api.try_new(&c), (OOR, "levels".to_string()));
    // SAFETY: NULL config is refused before anything is read.
    assert_eq!(unsafe { sg_limiter_new(ptr::null(), &mut h) }, SG_NULL_ARGUMENT);
    assert_eq!(last_field(), "");
}

/// How the structs grow (libuv's pattern): every config and metrics struct ends with
/// `reserved[4]`, and a later version gives those words meanings where 0 keeps today's
/// behaviour. So the sizes below never change within ABI major version 0: a program built
/// against an older header passes a struct of the same size, its reserved words zero (as
/// `_config_default` wrote them), and is accepted (the defaults cases above). This test
/// fails if a field is added without taking it from `reserved`.
#[test]
fn struct_sizes_are_frozen() {
    use std::mem::size_of;
    let sizes = [
        ("sg_fixed_config", size_of::<sg_fixed_config>(), 56),
        ("sg_limiter_config", size_of::<sg_limiter_config>(), 872),
        ("sg_gate_config", size_of::<sg_gate_config>(), 1000),
        ("sg_limiter_metrics", size_of::<sg_limiter_metrics>(), 312),
        ("sg_gate_metrics", size_of::<sg_gate_metrics>(), 1016),
        ("sg_breaker_config", size_of::<sg_breaker_config>(), 128),
        ("sg_breaker_metrics", size_of::<sg_breaker_metrics>(), 128),
        ("sg_keyed_config", size_of::<sg_keyed_config>(), 80),
        ("sg_keyed_metrics", size_of::<sg_keyed_metrics>(), 488),
        ("sg_lag_metrics", size_of::<sg_lag_metrics>(), 120),
    ];
    let got: Vec<_> = sizes.iter().map(|(n, s, _)| format!("{n}={s}")).collect();
    let want: Vec<_> = sizes.iter().map(|(n, _, w)| format!("{n}={w}")).collect();
    assert_eq!(got, want);
}
