//! `sg_limiter`: the lock-free, exact, priority-aware concurrency limiter, and the
//! configs of its limit algorithms.

use core::ffi::{c_char, c_void};

use surgeguard_core::limit::{
    AimdConfig, AlgorithmConfig, AnyAlgorithm, FixedConfig, Gradient2Config, GradientConfig,
    HysteresisConfig, VegasConfig,
};
use surgeguard_core::{Limiter, LimiterConfig, LimiterMetrics, Priority};
use surgeguard_std::placement::{Placed, PlacedRawPermit};

use crate::field;
use crate::handle::release_with;
use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::permit::{sg_permit, take, SG_PERMIT_KIND_LIMITER};
use crate::placed::{admitted, released};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::vocab::level;

const _: () = assert!(Priority::MAX_LEVELS == 8); // the C arrays below have 8 entries

/// `sg_limiter_config.algorithm`: a fixed limit.
pub const SG_ALGORITHM_FIXED: u32 = 0;
/// AIMD (additive increase, multiplicative decrease; with a Netflix
/// concurrency-limits parity mode).
pub const SG_ALGORITHM_AIMD: u32 = 1;
/// The hysteresis AIMD (healthy / warning / critical zones on p99 against a target).
pub const SG_ALGORITHM_HYSTERESIS: u32 = 2;
/// Envoy's gradient controller (the default).
pub const SG_ALGORITHM_GRADIENT: u32 = 3;
/// Netflix concurrency-limits' Gradient2.
pub const SG_ALGORITHM_GRADIENT2: u32 = 4;
/// Netflix concurrency-limits' Vegas.
pub const SG_ALGORITHM_VEGAS: u32 = 5;

/// Settings of the fixed limit (`SG_ALGORITHM_FIXED`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_fixed_config {
    /// The limit (may be fractional: below 1 admits that fraction of the time).
    /// Default 20.
    pub initial_limit: f64,
    /// Floor.
    /// Default 1.
    pub min_limit: f64,
    /// Ceiling.
    /// Default 1000.
    pub max_limit: f64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Settings of AIMD (`SG_ALGORITHM_AIMD`): +1 per good window / ×`backoff_ratio` on overload, or Netflix
/// concurrency-limits' `AIMDLimit` exactly (`netflix_parity`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_aimd_config {
    /// The limit before any window.
    /// Default 10.
    pub initial_limit: f64,
    /// Floor.
    /// Default 1.
    pub min_limit: f64,
    /// Ceiling.
    /// Default 200.
    pub max_limit: f64,
    /// Seed mode: a window below this latency grows the limit by 1, one above backs off.
    /// ns, in `[1 ns, 1 day]`.
    /// Default 50 ms.
    pub target_latency_ns: u64,
    /// Which latency seed mode compares: 0 = the mean, or 0.5 / 0.9 / 0.99.
    /// Default 0.
    pub latency_percentile: f64,
    /// The factor on overload, in `[0.5, 1)` (0.9).
    /// Default 0.9.
    pub backoff_ratio: f64,
    /// A window slower than this counts as a drop, ns (NCL `timeout`, 5 s).
    /// Default 5 s.
    pub timeout_ns: u64,
    /// No growth while max in-flight < this × limit, in `[0, 1]` (0 = off).
    /// Default 0.5.
    pub app_limited_fraction: f64,
    /// Grow by `min(samples, limit)` per window until the first congestion signal.
    /// Default false.
    pub slow_start: bool,
    /// Reproduce NCL `AIMDLimit` exactly (whole-number limits).
    /// Default false.
    pub netflix_parity: bool,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Settings of the hysteresis AIMD (`SG_ALGORITHM_HYSTERESIS`): healthy / warning /
/// critical zones on the rolling p99 against a target.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_hysteresis_config {
    /// The limit before any window.
    /// Default 20.
    pub initial_limit: f64,
    /// Floor.
    /// Default 1.
    pub min_limit: f64,
    /// Hard cap.
    /// Default 1000.
    pub max_limit: f64,
    /// The latency the zones are measured against, ns (default 50 ms).
    /// Default 50 ms.
    pub target_latency_ns: u64,
    /// Healthy while p99 < this × target (0.8).
    /// Default 0.8.
    pub healthy_below: f64,
    /// Critical once p99 > this × target (1.5).
    /// Default 1.5.
    pub critical_above: f64,
    /// The factor of a critical event, in `(0, 1)` (0.5).
    /// Default 0.5.
    pub critical_factor: f64,
    /// A jump: the average latency rises by more than this fraction within
    /// `jump_window_ns` (0.2).
    /// Default 0.2.
    pub jump_rise: f64,
    /// The look-back of jump detection, ns (2 s).
    /// Default 2 s.
    pub jump_window_ns: u64,
    /// The factor applied on a jump, in `(0, 1)` (0.8).
    /// Default 0.8.
    pub jump_factor: f64,
    /// EWMA weight of each completion in the average latency, in `(0, 1]` (0.1).
    /// Default 0.1.
    pub avg_alpha: f64,
    /// No additive increase for this long after a critical event, ns (5 s).
    /// Default 5 s.
    pub cool_off_ns: u64,
    /// The horizon of the rolling p99, ns (10 s).
    /// Default 10 s.
    pub p99_window_ns: u64,
    /// No growth while max in-flight < this × limit, in `[0, 1]`.
    /// Default 0.5.
    pub app_limited_fraction: f64,
    /// Slow start until the first window that is not healthy, a jump or a drop.
    /// Default false.
    pub slow_start: bool,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Settings of the gradient controller (`SG_ALGORITHM_GRADIENT`, the default): Envoy's
/// `L·clamp(baseline·(1+buffer)/sample, 0.5, 2) + headroom·sqrt(·)`, with a probe-free
/// baseline unless `probe_interval_ns` is set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_gradient_config {
    /// The limit before any window.
    /// Default 20.
    pub initial_limit: f64,
    /// Floor (may be below 1).
    /// Default 1.
    pub min_limit: f64,
    /// Ceiling.
    /// Default 1000.
    pub max_limit: f64,
    /// Latency allowance over the baseline, in `[0, 10]` (Envoy 0.25).
    /// Default 0.1.
    pub buffer: f64,
    /// Multiplier of the `sqrt(limit · gradient)` headroom, in `[0, 10]` (Envoy 1).
    /// Default 0.8.
    pub headroom: f64,
    /// Fraction of each step applied, in `[0.01, 1]`.
    /// Default 0.3.
    pub smoothing: f64,
    /// The window latency percentile used as the sample, in `[50, 99]`.
    /// Default 50.
    pub sample_percentile: f64,
    /// Envoy's min-RTT re-measurement interval, ns (≥ 1 ms); 0 = probe-free baseline.
    /// Default 0.
    pub probe_interval_ns: u64,
    /// Probe start jitter, in `[0, 1]`.
    /// Default 0.15.
    pub probe_jitter: f64,
    /// The limit pinned during a probe (Envoy `min_concurrency`).
    /// Default 3.
    pub probe_limit: f64,
    /// Samples that end a probe (Envoy `request_count`).
    /// Default 50.
    pub probe_samples: u32,
    /// A fixed baseline, ns (Envoy's pinned controller); 0 = off.
    /// Default 0.
    pub pinned_baseline_ns: u64,
    /// Back-off on a window whose drops exceed `drop_tolerance`, in `[0.1, 1]`; 1 = ignore.
    /// Default 0.9.
    pub backoff: f64,
    /// Share of a window's outcomes that may be drops without a back-off, in `[0, 0.999]`.
    /// Default 0.01.
    pub drop_tolerance: f64,
    /// Double the limit per uncongested window until the first congestion signal.
    /// Default true.
    pub slow_start: bool,
    /// No growth while max in-flight < this × limit, in `[0, 1]`; 0 = off.
    /// Default 0.6.
    pub app_limited_ratio: f64,
    /// Seed of the probe jitter.
    /// Default 0x5EED5EED5EED5EED.
    pub seed: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Settings of Gradient2 (`SG_ALGORITHM_GRADIENT2`, Netflix concurrency-limits parity,
/// or the fixed mode).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_gradient2_config {
    /// The limit before any window (NCL 20).
    /// Default 20.
    pub initial_limit: f64,
    /// Floor (NCL 20).
    /// Default 1.
    pub min_limit: f64,
    /// Ceiling (NCL 200).
    /// Default 1000.
    pub max_limit: f64,
    /// Weight of the new value, in `(0, 1]` (NCL 0.2).
    /// Default 0.2.
    pub smoothing: f64,
    /// The queue allowance added each window, in `[0, 1e6]` (NCL 4).
    /// Default 4.
    pub queue_size: f64,
    /// Windows in the long-term RTT average, in `[1, 1e6]` (NCL 600).
    /// Default 600.
    pub long_window: u32,
    /// How far the short RTT may exceed the long one, in `[1, 1000]` (NCL 1.5).
    /// Default 1.5.
    pub rtt_tolerance: f64,
    /// `true`: drops back off by `backoff_ratio` and the queue allowance is added only
    /// while the gradient is ≥ 0.9; `false`: NCL parity.
    /// Default true.
    pub fixed: bool,
    /// The factor on a drop in fixed mode, in `[0.5, 1)`.
    /// Default 0.9.
    pub backoff_ratio: f64,
    /// No growth while max in-flight < this × limit, in `[0, 1]` (NCL 0.5).
    /// Default 0.5.
    pub app_limited_fraction: f64,
    /// Slow start until the first drop (fixed mode) or gradient below 1.
    /// Default false.
    pub slow_start: bool,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Settings of Vegas (`SG_ALGORITHM_VEGAS`, Netflix concurrency-limits parity). The
/// optional thresholds use 0 for "NCL's default formula".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_vegas_config {
    /// The limit before any window (NCL 20).
    /// Default 20.
    pub initial_limit: f64,
    /// Floor (NCL 1).
    /// Default 1.
    pub min_limit: f64,
    /// Ceiling (NCL 1000).
    /// Default 1000.
    pub max_limit: f64,
    /// Weight of the new value, in `(0, 1]` (1 = no smoothing, NCL).
    /// Default 1.
    pub smoothing: f64,
    /// Queue size under which the limit grows; 0 = NCL's `3·log10(L)`.
    /// Default 0.
    pub alpha: u32,
    /// Queue size above which the limit shrinks; 0 = NCL's `6·log10(L)`.
    /// Default 0.
    pub beta: u32,
    /// Queue size at or under which the limit grows by `beta` at once; 0 = `log10(L)`.
    /// Default 0.
    pub threshold: u32,
    /// The decrease: 0 = NCL's `L − log10(L)`; otherwise `L × r`, `r` in `(0, 1)`.
    /// Default 0.
    pub decrease_ratio: f64,
    /// Re-measure the no-load RTT every `jitter × this × L` windows (NCL 30); 0 = never.
    /// Default 30.
    pub probe_multiplier: u32,
    /// Seed of the probe jitter.
    /// Default 0.
    pub seed: u64,
    /// No growth while max in-flight < this × limit, in `[0, 1]` (NCL 0.5).
    /// Default 0.5.
    pub app_limited_fraction: f64,
    /// Slow start until the first drop or queue estimate reaching `alpha`.
    /// Default false.
    pub slow_start: bool,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// `From<core config>` and `to_core` for a C algorithm config: plain fields copied, and
/// `Option` fields (`opt`) mapped to 0 = `None`.
macro_rules! algorithm_config {
    ($c:ident, $core:ident, [$($f:ident),*] $(, opt [$($o:ident: $zero:expr),*])?) => {
        impl From<$core> for $c {
            fn from(c: $core) -> Self {
                Self { reserved: [0; 4], $($f: c.$f,)* $($($o: c.$o.unwrap_or($zero),)*)? }
            }
        }
        impl $c {
            /// The core config: the core's defaults with every field C sets.
            pub(crate) fn to_core(self) -> $core {
                let mut c = $core::default();
                $(c.$f = self.$f;)*
                $($(c.$o = (self.$o != $zero).then_some(self.$o);)*)?
                c
            }
        }
    };
}
algorithm_config!(sg_fixed_config, FixedConfig, [initial_limit, min_limit, max_limit]);
algorithm_config!(
    sg_aimd_config,
    AimdConfig,
    [
        initial_limit,
        min_limit,
        max_limit,
        target_latency_ns,
        latency_percentile,
        backoff_ratio,
        timeout_ns,
        app_limited_fraction,
        slow_start,
        netflix_parity
    ]
);
algorithm_config!(
    sg_hysteresis_config,
    HysteresisConfig,
    [
        initial_limit,
        min_limit,
        max_limit,
        target_latency_ns,
        healthy_below,
        critical_above,
        critical_factor,
        jump_rise,
        jump_window_ns,
        jump_factor,
        avg_alpha,
        cool_off_ns,
        p99_window_ns,
        app_limited_fraction,
        slow_start
    ]
);
algorithm_config!(
    sg_gradient_config,
    GradientConfig,
    [
        initial_limit,
        min_limit,
        max_limit,
        buffer,
        headroom,
        smoothing,
        sample_percentile,
        probe_interval_ns,
        probe_jitter,
        probe_limit,
        probe_samples,
        pinned_baseline_ns,
        backoff,
        drop_tolerance,
        slow_start,
        app_limited_ratio,
        seed
    ]
);
algorithm_config!(
    sg_gradient2_config,
    Gradient2Config,
    [
        initial_limit,
        min_limit,
        max_limit,
        smoothing,
        queue_size,
        long_window,
        rtt_tolerance,
        fixed,
        backoff_ratio,
        app_limited_fraction,
        slow_start
    ]
);
algorithm_config!(
    sg_vegas_config,
    VegasConfig,
    [
        initial_limit,
        min_limit,
        max_limit,
        smoothing,
        probe_multiplier,
        seed,
        app_limited_fraction,
        slow_start
    ],
    opt [alpha: 0, beta: 0, threshold: 0, decrease_ratio: 0.0]
);

/// Fills `cfg` with the fixed limit's defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_fixed_config_default(cfg: *mut sg_fixed_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(FixedConfig::default().into())))
}
/// Fills `cfg` with AIMD's defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_aimd_config_default(cfg: *mut sg_aimd_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(AimdConfig::default().into())))
}
/// Fills `cfg` with the hysteresis AIMD's defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_hysteresis_config_default(cfg: *mut sg_hysteresis_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(HysteresisConfig::default().into())))
}
/// Fills `cfg` with the gradient controller's defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_gradient_config_default(cfg: *mut sg_gradient_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(GradientConfig::default().into())))
}
/// Fills `cfg` with Gradient2's defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_gradient2_config_default(cfg: *mut sg_gradient2_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(Gradient2Config::default().into())))
}
/// Fills `cfg` with Vegas' defaults.
#[no_mangle]
pub unsafe extern "C" fn sg_vegas_config_default(cfg: *mut sg_vegas_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(VegasConfig::default().into())))
}

/// Settings of an `sg_limiter`. Start from `sg_limiter_config_default`, then change
/// fields. Every algorithm's settings are present; `algorithm` picks the one used.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_limiter_config {
    /// `SG_ALGORITHM_*` (default `SG_ALGORITHM_GRADIENT`).
    pub algorithm: u32,
    /// Used when `algorithm` is `SG_ALGORITHM_FIXED`.
    pub fixed: sg_fixed_config,
    /// Used when `algorithm` is `SG_ALGORITHM_AIMD`.
    pub aimd: sg_aimd_config,
    /// Used when `algorithm` is `SG_ALGORITHM_HYSTERESIS`.
    pub hysteresis: sg_hysteresis_config,
    /// Used when `algorithm` is `SG_ALGORITHM_GRADIENT`.
    pub gradient: sg_gradient_config,
    /// Used when `algorithm` is `SG_ALGORITHM_GRADIENT2`.
    pub gradient2: sg_gradient2_config,
    /// Used when `algorithm` is `SG_ALGORITHM_VEGAS`.
    pub vegas: sg_vegas_config,
    /// Priority levels in use, 1..=8 (default 3: critical, normal, background).
    pub levels: u32,
    /// Each level's share of the limit: the most it may hold back while active (its recent
    /// peak demand plus one slot, at most this); the sum must not exceed 1 (default
    /// 0.7 / 0.25 / 0.05). Entries past `levels` are ignored.
    pub weights: [f64; 8],
    /// A window is at least this long, ns (default 100 ms).
    pub min_window_ns: u64,
    /// ... and at most this long, ns (default 1 s).
    pub max_window_ns: u64,
    /// Window length = this × the previous window's smallest latency (default 2).
    pub window_rtt_multiple: f64,
    /// A window closes only with at least this many samples, or a drop (default 10).
    pub min_samples: u32,
    /// A level is active (its unused share reserved) for this long after an arrival, ns
    /// (default 1 s).
    pub active_ns: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<&LimiterConfig> for sg_limiter_config {
    fn from(c: &LimiterConfig) -> Self {
        let mut out = Self {
            reserved: [0; 4],
            algorithm: SG_ALGORITHM_GRADIENT,
            fixed: FixedConfig::default().into(),
            aimd: AimdConfig::default().into(),
            hysteresis: HysteresisConfig::default().into(),
            gradient: GradientConfig::default().into(),
            gradient2: Gradient2Config::default().into(),
            vegas: VegasConfig::default().into(),
            levels: u32::from(c.levels),
            weights: c.weights,
            min_window_ns: c.min_window_ns,
            max_window_ns: c.max_window_ns,
            window_rtt_multiple: c.window_rtt_multiple,
            min_samples: c.min_samples,
            active_ns: c.active_ns,
        };
        match c.algorithm {
            AlgorithmConfig::Fixed(a) => {
                (out.algorithm, out.fixed) = (SG_ALGORITHM_FIXED, a.into())
            }
            AlgorithmConfig::Aimd(a) => (out.algorithm, out.aimd) = (SG_ALGORITHM_AIMD, a.into()),
            AlgorithmConfig::Hysteresis(a) => {
                (out.algorithm, out.hysteresis) = (SG_ALGORITHM_HYSTERESIS, a.into())
            }
            AlgorithmConfig::Gradient(a) => {
                (out.algorithm, out.gradient) = (SG_ALGORITHM_GRADIENT, a.into())
            }
            AlgorithmConfig::Gradient2(a) => {
                (out.algorithm, out.gradient2) = (SG_ALGORITHM_GRADIENT2, a.into())
            }
            AlgorithmConfig::Vegas(a) => {
                (out.algorithm, out.vegas) = (SG_ALGORITHM_VEGAS, a.into())
            }
            _ => {}
        }
        out
    }
}

impl sg_limiter_config {
    /// The core config, or the status of the first bad field (checked here: `algorithm`
    /// and `levels` as C integers; the numbers by the core).
    ///
    /// Every algorithm's settings are checked, not only the chosen one's: one rule for
    /// every config, so that a config accepted today stays valid when a setting it does
    /// not use yet is switched on (and a typo in an unused block is not silently kept).
    pub(crate) fn to_core(self) -> Res<LimiterConfig> {
        field::reserved(&self.reserved)?;
        let all = [
            ("fixed.", AlgorithmConfig::Fixed(self.fixed.to_core()), &self.fixed.reserved),
            ("aimd.", AlgorithmConfig::Aimd(self.aimd.to_core()), &self.aimd.reserved),
            (
                "hysteresis.",
                AlgorithmConfig::Hysteresis(self.hysteresis.to_core()),
                &self.hysteresis.reserved,
            ),
            (
                "gradient.",
                AlgorithmConfig::Gradient(self.gradient.to_core()),
                &self.gradient.reserved,
            ),
            (
                "gradient2.",
                AlgorithmConfig::Gradient2(self.gradient2.to_core()),
                &self.gradient2.reserved,
            ),
            ("vegas.", AlgorithmConfig::Vegas(self.vegas.to_core()), &self.vegas.reserved),
        ];
        let chosen = match self.algorithm {
            SG_ALGORITHM_FIXED => 0,
            SG_ALGORITHM_AIMD => 1,
            SG_ALGORITHM_HYSTERESIS => 2,
            SG_ALGORITHM_GRADIENT => 3,
            SG_ALGORITHM_GRADIENT2 => 4,
            SG_ALGORITHM_VEGAS => 5,
            _ => return Err(field::out_of_range("algorithm")),
        };
        for (path, a, reserved) in &all {
            field::under(path, field::reserved(reserved))?;
            // Building an algorithm allocates nothing and validates every number.
            // The core's paths name the algorithm (`limiter.gradient.buffer`): the table
            // gives `gradient.buffer`, no prefix to add.
            AnyAlgorithm::new(*a).map(drop)?;
        }
        let algorithm = all[chosen].1;
        let levels = u8::try_from(self.levels).map_err(|_| field::out_of_range("levels"))?;
        // The window is `clamp(window_rtt_multiple × min latency, min, max)`: 0 would make
        // every window as short as allowed regardless of latency, which is no setting.
        if self.window_rtt_multiple.is_finite() && self.window_rtt_multiple <= 0.0 {
            return Err(field::out_of_range("window_rtt_multiple"));
        }
        let mut c = LimiterConfig::with_algorithm(algorithm);
        c.levels = levels;
        c.weights = self.weights;
        c.min_window_ns = self.min_window_ns;
        c.max_window_ns = self.max_window_ns;
        c.window_rtt_multiple = self.window_rtt_multiple;
        c.min_samples = self.min_samples;
        c.active_ns = self.active_ns;
        c.validate()?;
        Ok(c)
    }
}

/// A concurrency limiter: admits work while in-flight is below an adaptive limit, learns
/// the limit from completions, splits it between priority levels. Thread-safe:
/// `try_acquire` is lock-free, `release` wait-free (plus one window fold per window by
/// whichever thread wins it). Exact: admissions never exceed the limit, even in a race.
pub struct sg_limiter {
    _opaque: [u8; 0],
}
object!(sg_limiter, Placed<Limiter>, 0x5347_4C49_4D49_5400);

/// Fills `cfg` with the defaults: the gradient algorithm, 3 levels weighted
/// 0.7 / 0.25 / 0.05, windows of 100 ms to 1 s.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_config_default(cfg: *mut sg_limiter_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write((&LimiterConfig::default()).into())))
}

/// Creates a limiter on the heap; free it with `sg_limiter_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_new(
    cfg: *const sg_limiter_config,
    limiter_out: *mut *mut sg_limiter,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `limiter_out`.
    unsafe { new_object(limiter_out, || make(cfg)) }
}

/// Builds the object's core structure from a C config (for `_new` and `_init`).
///
/// # Safety
/// `cfg` must be NULL or valid for reads of one `sg_limiter_config` for the duration of the call
/// (the crate's contract).
unsafe fn make(cfg: *const sg_limiter_config) -> Res<Placed<Limiter>> {
    // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
    // one `sg_limiter_config` during the call; the borrow does not outlive it.
    let cfg = unsafe { input(cfg)? }.to_core()?;
    Ok(Placed::Local(Limiter::new(cfg)?))
}

/// Frees a limiter made by `sg_limiter_new`. NULL is fine; a handle made by
/// `sg_limiter_init` is left alone (use `sg_limiter_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_free(limiter: *mut sg_limiter) {
    // SAFETY: the crate's contract for `limiter`.
    unsafe { free_object(limiter) }
}

/// Bytes of caller storage `sg_limiter_init` needs.
#[no_mangle]
pub extern "C" fn sg_limiter_size() -> usize {
    ffi_value(0, obj_size::<sg_limiter>)
}

/// Alignment the storage given to `sg_limiter_init` needs.
#[no_mangle]
pub extern "C" fn sg_limiter_align() -> usize {
    ffi_value(0, obj_align::<sg_limiter>)
}

/// Creates a limiter in caller storage (`len` bytes at `mem`, aligned to
/// `sg_limiter_align()`); on `SG_OK`, `(sg_limiter *)mem` is the handle. End it with
/// `sg_limiter_deinit`. Nothing is written on failure.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_limiter_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_limiter>(mem, len, || make(cfg)) }
}

/// Ends a limiter made by `sg_limiter_init` (NULL: nothing to do). The storage is the
/// caller's again; using the handle afterwards says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_deinit(limiter: *mut sg_limiter) -> sg_status {
    // SAFETY: the crate's contract for `limiter`.
    unsafe { deinit_object(limiter) }
}

/// Admits one unit of work at `level` (`SG_LEVEL_*`, < 8) at time `now` (ns): `SG_OK`
/// fills `*permit_out` (release it with `sg_limiter_release`); `SG_REJECTED` fills
/// `*rejection_out` (optional, may be NULL) with `SG_REASON_LIMIT_REACHED` and a
/// `retry_after_ns` hint.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_try_acquire(
    limiter: *mut sg_limiter,
    now: u64,
    level: u32,
    permit_out: *mut sg_permit,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        let now = crate::time::check_now(now)?;
        let permit_out = out(permit_out)?;
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                let p = l.inner.try_acquire_raw(now, level);
                admitted(p, permit_out, l.head.id, SG_PERMIT_KIND_LIMITER, rejection_out)
            })
        }
    })
}

/// Ends admitted work at `now` with `outcome` (`SG_OUTCOME_*`): a success's latency is a
/// sample, a drop an overload signal. `SG_ALREADY_RELEASED`, `SG_FOREIGN_HANDLE` (a permit
/// of another object) and `SG_INVALID_HANDLE` change nothing.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_release(
    limiter: *mut sg_limiter,
    permit: *mut sg_permit,
    now: u64,
    outcome: u32,
) -> sg_status {
    // SAFETY: the crate's contract for `limiter` and `permit` (`take`/`restore` write the
    // permit's state word through the shared borrow, which its `UnsafeCell`s allow).
    unsafe {
        release_with(limiter, permit, now, outcome, |l, permit, now, outcome| {
            let raw: PlacedRawPermit = take(permit, l.head.id, SG_PERMIT_KIND_LIMITER)?;
            released(permit, l.inner.release_raw(raw, now, outcome))
        })
    }
}

/// Marks `level` active at `now` without admitting anything (a queue of the caller's
/// holds an arrival), so the level's share is reserved while it waits.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_note_arrival(
    limiter: *mut sg_limiter,
    now: u64,
    level: u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                l.inner.limiter().note_arrival(now, level);
                Ok(())
            })
        }
    })
}

/// The kill switch (an operator's override of the adaptive limit): pins the limit to `limit` (in `[1e-6, 2^31)`, finite;
/// otherwise `SG_INVALID_ARGUMENT`). The algorithm keeps learning meanwhile.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_set_static_limit(
    limiter: *mut sg_limiter,
    limit: f64,
) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                l.inner.limiter().set_static_limit(Some(limit)).map_err(|_| SG_INVALID_ARGUMENT)
            })
        }
    })
}

/// Hands control back to the algorithm after `sg_limiter_set_static_limit`.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_clear_static_limit(limiter: *mut sg_limiter) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `limiter`.
        unsafe {
            with(limiter, |l| {
                l.inner.limiter().set_static_limit(None).map_err(|_| SG_INVALID_ARGUMENT)
            })
        }
    })
}

/// The limit in force (possibly fractional).
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_limit(
    limiter: *const sg_limiter,
    limit_out: *mut f64,
) -> sg_status {
    ffi(|| {
        let limit_out = out(limit_out)?;
        // SAFETY: the crate's contract for `limiter`.
        let limit = unsafe { with(limiter, |l| Ok(l.inner.limiter().limit()))? };
        limit_out.write(limit);
        Ok(())
    })
}

/// Requests in flight (all levels).
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_inflight(
    limiter: *const sg_limiter,
    inflight_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let inflight_out = out(inflight_out)?;
        // SAFETY: the crate's contract for `limiter`.
        let n = unsafe { with(limiter, |l| Ok(l.inner.limiter().inflight()))? };
        inflight_out.write(n);
        Ok(())
    })
}

/// Requests in flight at `level`.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_inflight_of(
    limiter: *const sg_limiter,
    level: u32,
    inflight_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let inflight_out = out(inflight_out)?;
        let level = self::level(level)?;
        // SAFETY: the crate's contract for `limiter`.
        let n = unsafe { with(limiter, |l| Ok(l.inner.limiter().inflight_of(level)))? };
        inflight_out.write(n);
        Ok(())
    })
}

/// A snapshot of an `sg_limiter`'s counters and gauges.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct sg_limiter_metrics {
    /// The algorithm's name (static string: `"fixed"`, `"aimd"`, `"gradient"`, ...).
    pub algorithm: *const c_char,
    /// The limit in force.
    pub limit: f64,
    /// Whether the kill switch pins the limit; `static_limit` is the pinned value.
    pub has_static_limit: bool,
    /// The pinned limit (0 unless `has_static_limit`).
    pub static_limit: f64,
    /// Requests in flight.
    pub inflight: u32,
    /// Levels in use.
    pub levels: u32,
    /// In flight per level.
    pub inflight_by_level: [u32; 8],
    /// Share per level (`floor(limit × weight)`): the most a level may hold back.
    pub share_by_level: [u32; 8],
    /// Recent demand per level (the most held or refused lately; decays each window).
    pub demand_by_level: [u32; 8],
    /// Admissions ever (= successes + drops + ignored + in flight).
    pub admitted: u64,
    /// Rejections ever.
    pub rejected: u64,
    /// Rejections per level.
    pub rejected_by_level: [u64; 8],
    /// `SG_OUTCOME_SUCCESS` releases.
    pub successes: u64,
    /// `SG_OUTCOME_DROPPED` releases.
    pub drops: u64,
    /// `SG_OUTCOME_IGNORED` releases.
    pub ignored: u64,
    /// Windows folded into the algorithm.
    pub windows: u64,
    /// Latency samples those windows held.
    pub folded_samples: u64,
    /// The last window's smallest latency as the latency histogram records it, ns: the
    /// lower edge of the bucket that holds it, so at most the true smallest latency and
    /// within 1/32 (3.1 %) below it.
    pub min_rtt_ns: u64,
    /// Mean latency of the last window, ns.
    pub avg_rtt_ns: u64,
    /// p99 latency of the last window, ns (a histogram estimate, within 3.1 %).
    pub p99_rtt_ns: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

/// A static C string for an algorithm name.
pub(crate) fn algorithm_name(name: &str) -> *const c_char {
    let s: &'static core::ffi::CStr = match name {
        "fixed" => c"fixed",
        "aimd" => c"aimd",
        "hysteresis_aimd" => c"hysteresis_aimd",
        "gradient" => c"gradient",
        "gradient2" => c"gradient2",
        "vegas" => c"vegas",
        _ => c"unknown",
    };
    s.as_ptr()
}

impl From<&LimiterMetrics> for sg_limiter_metrics {
    fn from(m: &LimiterMetrics) -> Self {
        Self {
            reserved: [0; 4],
            algorithm: algorithm_name(m.algorithm),
            limit: m.limit,
            has_static_limit: m.static_limit.is_some(),
            static_limit: m.static_limit.unwrap_or(0.0),
            inflight: m.inflight,
            levels: u32::from(m.levels),
            inflight_by_level: m.inflight_by_level,
            share_by_level: m.share_by_level,
            demand_by_level: m.demand_by_level,
            admitted: m.admitted,
            rejected: m.rejected,
            rejected_by_level: m.rejected_by_level,
            successes: m.successes,
            drops: m.drops,
            ignored: m.ignored,
            windows: m.windows,
            folded_samples: m.folded_samples,
            min_rtt_ns: m.min_rtt_ns,
            avg_rtt_ns: m.avg_rtt_ns,
            p99_rtt_ns: m.p99_rtt_ns,
        }
    }
}

/// A snapshot of the limiter's counters and gauges.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_metrics_get(
    limiter: *const sg_limiter,
    metrics_out: *mut sg_limiter_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `limiter`.
        let m = unsafe { with(limiter, |l| Ok(l.inner.limiter().metrics()))? };
        metrics_out.write((&m).into());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C defaults are the core defaults, and a C config converts back to the core
    /// config it came from, for every algorithm (no field lost or mixed up).
    #[test]
    fn configs_round_trip() {
        let algorithms = [
            AlgorithmConfig::Fixed(FixedConfig::default()),
            AlgorithmConfig::Aimd(AimdConfig { netflix_parity: true, ..AimdConfig::default() }),
            AlgorithmConfig::Hysteresis(HysteresisConfig::default()),
            AlgorithmConfig::Gradient(GradientConfig { seed: 7, ..GradientConfig::default() }),
            AlgorithmConfig::Gradient2(Gradient2Config::default()),
            AlgorithmConfig::Vegas(VegasConfig {
                alpha: Some(3),
                decrease_ratio: Some(0.5),
                ..VegasConfig::default()
            }),
            AlgorithmConfig::Vegas(VegasConfig::default()),
        ];
        for a in algorithms {
            let mut core = LimiterConfig::with_algorithm(a);
            core.levels = 2;
            core.min_samples = 3;
            let c: sg_limiter_config = (&core).into();
            assert_eq!(c.to_core(), Ok(core), "{a:?}");
        }
        let c: sg_limiter_config = (&LimiterConfig::default()).into();
        assert_eq!(c.to_core(), Ok(LimiterConfig::default()));
    }
}
