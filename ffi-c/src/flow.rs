//! Pipeline backpressure: `sg_credits` (demand-driven flow control),
//! `sg_lag_meter` (lag in seconds, time to drain), `sg_watermarks` (pause/resume with
//! hysteresis).

use core::ffi::c_void;

use surgeguard_core::flow::{
    Credits, CreditsConfig, CreditsMetrics, LagMeter, LagMeterConfig, LagMetrics, Transition,
    Watermarks, WatermarksConfig, WatermarksMetrics,
};

use crate::handle::{
    deinit_object, ffi, ffi_status, ffi_value, free_object, init_object, input, new_object, object,
    out, rejected, with, Res,
};
use crate::handle::{obj_align, obj_size};
use crate::status::sg_rejection;
use crate::status::sg_status::{self, *};
use crate::time::SG_NEVER;

// ---- credits -------------------------------------------------------------------------

/// Settings of an `sg_credits` channel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sg_credits_config {
    /// High water: the most credit outstanding at once (the consumer's buffer size),
    /// at least 1 (default 256).
    pub capacity: u32,
    /// Low water: `sg_credits_replenish` grants only once outstanding credit fell to this
    /// or below; below `capacity` (default 64).
    pub low_water: u32,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<CreditsConfig> for sg_credits_config {
    fn from(c: CreditsConfig) -> Self {
        Self { reserved: [0; 4], capacity: c.capacity, low_water: c.low_water }
    }
}

/// One channel of credit-based flow control: the consumer grants credit, the producer
/// takes one per item and never sends more than was granted (Reactive Streams rule 1.1).
/// Thread-safe, lock-free.
pub struct sg_credits {
    _opaque: [u8; 0],
}
object!(sg_credits, Credits, 0x5347_4352_4544_4900);

/// Builds the object's core structure from a C config (for `_new` and `_init`).
///
/// # Safety
/// `cfg` must be NULL or valid for reads of one `sg_credits_config` for the duration of the call
/// (the crate's contract).
unsafe fn make(cfg: *const sg_credits_config) -> Res<Credits> {
    // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
    // one `sg_credits_config` during the call; the borrow does not outlive it.
    let c = unsafe { input(cfg)? };
    crate::field::reserved(&c.reserved)?;
    Ok(Credits::new(CreditsConfig { capacity: c.capacity, low_water: c.low_water })?)
}

/// Fills `cfg` with the defaults: capacity 256, low water 64.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_config_default(cfg: *mut sg_credits_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(CreditsConfig::default().into())))
}

/// Creates a credit channel on the heap; free it with `sg_credits_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_new(
    cfg: *const sg_credits_config,
    credits_out: *mut *mut sg_credits,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `credits_out`.
    unsafe { new_object(credits_out, || make(cfg)) }
}

/// Frees a credit channel made by `sg_credits_new`. NULL is fine; a handle made by `sg_credits_init` is
/// left alone (use `sg_credits_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_credits_free(credits: *mut sg_credits) {
    // SAFETY: the crate's contract for `credits`.
    unsafe { free_object(credits) }
}

/// Bytes of caller storage `sg_credits_init` needs.
#[no_mangle]
pub extern "C" fn sg_credits_size() -> usize {
    ffi_value(0, obj_size::<sg_credits>)
}

/// Alignment the storage given to `sg_credits_init` needs.
#[no_mangle]
pub extern "C" fn sg_credits_align() -> usize {
    ffi_value(0, obj_align::<sg_credits>)
}

/// Creates a credit channel in caller storage (`len` bytes at `mem`, aligned to
/// `sg_credits_align()`); on `SG_OK`, `(sg_credits *)mem` is the handle. End it with
/// `sg_credits_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_credits_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_credits>(mem, len, || make(cfg)) }
}

/// Ends a credit channel made by `sg_credits_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_deinit(credits: *mut sg_credits) -> sg_status {
    // SAFETY: the crate's contract for `credits`.
    unsafe { deinit_object(credits) }
}

/// Producer: takes `k` credits for `k` items, all or nothing. `SG_REJECTED` with
/// `SG_REASON_NO_CREDIT` (and `retry_after_ns` 0: credit comes with the consumer's next
/// grant, not with time) when fewer are available.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_try_take(
    credits: *mut sg_credits,
    k: u32,
    rejection_out: *mut sg_rejection,
) -> sg_status {
    ffi_status(|| {
        // SAFETY: the crate's contract for `credits`.
        unsafe {
            with(credits, |c| {
                Ok(match c.inner.try_take(k) {
                    Ok(()) => SG_OK,
                    Err(r) => rejected(rejection_out, r),
                })
            })
        }
    })
}

/// Producer: takes as many of `k` credits as are available; `*take_up_to_out` is how many
/// (0 when stalled).
#[no_mangle]
pub unsafe extern "C" fn sg_credits_take_up_to(
    credits: *mut sg_credits,
    k: u32,
    take_up_to_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let take_up_to_out = out(take_up_to_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.take_up_to(k)))? };
        take_up_to_out.write(v);
        Ok(())
    })
}

/// Consumer: `k` taken items are done, their buffer space is free. Completing more than
/// are buffered is `SG_ALREADY_RELEASED` and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_complete(credits: *mut sg_credits, k: u32) -> sg_status {
    ffi(|| {
        // SAFETY: the crate's contract for `credits`.
        unsafe { with(credits, |c| Ok(c.inner.complete(k)?)) }
    })
}

/// Consumer: grants up to `n` more credits (`request(n)`), clipped so outstanding credit
/// never exceeds capacity; `*grant_out` is the credit granted.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_grant(
    credits: *mut sg_credits,
    n: u32,
    grant_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let grant_out = out(grant_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.grant(n)))? };
        grant_out.write(v);
        Ok(())
    })
}

/// Consumer: grants what is due in one step (capacity − outstanding once outstanding fell
/// to low water, else 0); `*replenish_out` is the `n` to send upstream as `request(n)`.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_replenish(
    credits: *mut sg_credits,
    replenish_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let replenish_out = out(replenish_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.replenish()))? };
        replenish_out.write(v);
        Ok(())
    })
}

/// The credit `sg_credits_replenish` would grant now (a query).
#[no_mangle]
pub unsafe extern "C" fn sg_credits_grant_due(
    credits: *const sg_credits,
    grant_due_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let grant_due_out = out(grant_due_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.grant_due()))? };
        grant_due_out.write(v);
        Ok(())
    })
}

/// Credit the producer may still use.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_available(
    credits: *const sg_credits,
    available_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let available_out = out(available_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.available()))? };
        available_out.write(v);
        Ok(())
    })
}

/// Items taken and not yet completed.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_buffered(
    credits: *const sg_credits,
    buffered_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let buffered_out = out(buffered_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.buffered()))? };
        buffered_out.write(v);
        Ok(())
    })
}

/// Outstanding credit: available + buffered, never above capacity.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_outstanding(
    credits: *const sg_credits,
    outstanding_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let outstanding_out = out(outstanding_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.outstanding()))? };
        outstanding_out.write(v);
        Ok(())
    })
}

/// Whether the producer has no credit and must wait for a grant.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_is_stalled(
    credits: *const sg_credits,
    is_stalled_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let is_stalled_out = out(is_stalled_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.is_stalled()))? };
        is_stalled_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_credits` channel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_credits_metrics {
    /// Credit granted, in total.
    pub granted: u64,
    /// Items taken against credit, in total (never above `granted`).
    pub taken: u64,
    /// Items completed, in total (never above `taken`).
    pub completed: u64,
    /// Take calls refused for lack of credit.
    pub refused: u64,
    /// Gauge: credit the producer may still use.
    pub available: u64,
    /// Gauge: items taken and not completed.
    pub buffered: u64,
    /// Gauge: 1 if the producer has no credit, else 0.
    pub stalled: u64,
    /// Configured capacity.
    pub capacity: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<CreditsMetrics> for sg_credits_metrics {
    fn from(m: CreditsMetrics) -> Self {
        Self {
            reserved: [0; 4],
            granted: m.granted,
            taken: m.taken,
            completed: m.completed,
            refused: m.refused,
            available: m.available,
            buffered: m.buffered,
            stalled: m.stalled,
            capacity: m.capacity,
        }
    }
}

/// A snapshot of the channel's counters and gauges.
#[no_mangle]
pub unsafe extern "C" fn sg_credits_metrics_get(
    credits: *const sg_credits,
    metrics_out: *mut sg_credits_metrics,
) -> sg_status {
    ffi(|| {
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `credits`.
        let v = unsafe { with(credits, |o| Ok(o.inner.metrics().into()))? };
        metrics_out.write(v);
        Ok(())
    })
}

// ---- lag meter -----------------------------------------------------------------------

/// Snapshots the C `sg_lag_meter` keeps: rates are measured over the last 60 buckets (with
/// the default 1 s bucket: a one-minute consume rate).
pub const SG_LAG_METER_SNAPSHOTS: u32 = 61;
type Meter = LagMeter<61>;
const _: () = assert!(SG_LAG_METER_SNAPSHOTS == 61);

/// Settings of an `sg_lag_meter`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sg_lag_meter_config {
    /// Width of one rate bucket, ns, 1 µs to 1 day (default 1 s).
    pub bucket_ns: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

/// Consumer lag measured in time: produce and consume rates over a sliding
/// window of 60 buckets, lag, lag in seconds, time to drain. Thread-safe, lock-free.
pub struct sg_lag_meter {
    _opaque: [u8; 0],
}
object!(sg_lag_meter, Meter, 0x5347_4C41_474D_5400);

mod lag_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_lag_meter_config` for the duration of the
    /// call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_lag_meter_config) -> Res<Meter> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_lag_meter_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(Meter::new(LagMeterConfig { bucket: c.bucket_ns })?)
    }
}

/// Fills `cfg` with the defaults: 1 s buckets.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_config_default(cfg: *mut sg_lag_meter_config) -> sg_status {
    ffi(|| {
        out(cfg).map(|o| {
            o.write(sg_lag_meter_config {
                reserved: [0; 4],
                bucket_ns: LagMeterConfig::default().bucket,
            })
        })
    })
}

/// Creates a lag meter on the heap; free it with `sg_lag_meter_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_new(
    cfg: *const sg_lag_meter_config,
    lag_meter_out: *mut *mut sg_lag_meter,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `lag_meter_out`.
    unsafe { new_object(lag_meter_out, || lag_make::make(cfg)) }
}

/// Frees a lag meter made by `sg_lag_meter_new`. NULL is fine; a handle made by `sg_lag_meter_init` is
/// left alone (use `sg_lag_meter_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_free(lag_meter: *mut sg_lag_meter) {
    // SAFETY: the crate's contract for `lag_meter`.
    unsafe { free_object(lag_meter) }
}

/// Bytes of caller storage `sg_lag_meter_init` needs.
#[no_mangle]
pub extern "C" fn sg_lag_meter_size() -> usize {
    ffi_value(0, obj_size::<sg_lag_meter>)
}

/// Alignment the storage given to `sg_lag_meter_init` needs.
#[no_mangle]
pub extern "C" fn sg_lag_meter_align() -> usize {
    ffi_value(0, obj_align::<sg_lag_meter>)
}

/// Creates a lag meter in caller storage (`len` bytes at `mem`, aligned to
/// `sg_lag_meter_align()`); on `SG_OK`, `(sg_lag_meter *)mem` is the handle. End it with
/// `sg_lag_meter_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_lag_meter_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_lag_meter>(mem, len, || lag_make::make(cfg)) }
}

/// Ends a lag meter made by `sg_lag_meter_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_deinit(lag_meter: *mut sg_lag_meter) -> sg_status {
    // SAFETY: the crate's contract for `lag_meter`.
    unsafe { deinit_object(lag_meter) }
}

/// `n` items entered the backlog at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_record_produced(
    lag_meter: *mut sg_lag_meter,
    now: u64,
    n: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `lag_meter`.
        unsafe {
            with(lag_meter, |m| {
                m.inner.record_produced(now, n);
                Ok(())
            })
        }
    })
}

/// `n` items left the backlog at `now` (processed, or dropped on purpose). Not refused
/// when it takes `consumed` above `produced` (with several threads, a consumption may be
/// recorded before its production): `sg_lag_metrics.over_consumed` reports the excess,
/// and the lag reads 0 meanwhile.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_record_consumed(
    lag_meter: *mut sg_lag_meter,
    now: u64,
    n: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `lag_meter`.
        unsafe {
            with(lag_meter, |m| {
                m.inner.record_consumed(now, n);
                Ok(())
            })
        }
    })
}

/// Cumulative totals (e.g. a Kafka partition's end offset and committed offset); each
/// only moves forward (a smaller total than one seen before is ignored). A
/// `consumed_total` above `produced_total` is accepted (the two offsets are often read at
/// different moments, so the end offset can be stale): `sg_lag_metrics.over_consumed`
/// reports the excess, and the lag reads 0 meanwhile.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_observe_totals(
    lag_meter: *mut sg_lag_meter,
    now: u64,
    produced_total: u64,
    consumed_total: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `lag_meter`.
        unsafe {
            with(lag_meter, |m| {
                m.inner.observe_totals(now, produced_total, consumed_total);
                Ok(())
            })
        }
    })
}

/// The enqueue time of the oldest unprocessed item (same clock as `now`).
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_report_oldest(
    lag_meter: *mut sg_lag_meter,
    now: u64,
    enqueued_at: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `lag_meter`.
        unsafe {
            with(lag_meter, |m| {
                m.inner.report_oldest(now, Some(enqueued_at));
                Ok(())
            })
        }
    })
}

/// The backlog is empty: no oldest item.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_clear_oldest(
    lag_meter: *mut sg_lag_meter,
    now: u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        // SAFETY: the crate's contract for `lag_meter`.
        unsafe {
            with(lag_meter, |m| {
                m.inner.report_oldest(now, None);
                Ok(())
            })
        }
    })
}

/// Items produced and not yet consumed (0 while more were consumed than produced: see
/// `sg_lag_metrics.over_consumed`).
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_lag(
    lag_meter: *const sg_lag_meter,
    now: u64,
    lag_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let lag_out = out(lag_out)?;
        // SAFETY: the crate's contract for `lag_meter`.
        let v = unsafe { with(lag_meter, |o| Ok(o.inner.lag(now)))? };
        lag_out.write(v);
        Ok(())
    })
}

/// Lag in time, ns: lag / consume rate; 0 with no lag; `SG_NEVER` while nothing is
/// consumed or the rates are not measured yet.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_lag_time(
    lag_meter: *const sg_lag_meter,
    now: u64,
    lag_time_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let lag_time_out = out(lag_time_out)?;
        // SAFETY: the crate's contract for `lag_meter`.
        let v = unsafe { with(lag_meter, |o| Ok(o.inner.lag_time(now).unwrap_or(SG_NEVER)))? };
        lag_time_out.write(v);
        Ok(())
    })
}

/// Time to drain, ns: lag / (consume − produce rate); 0 with no lag; `SG_NEVER` while the
/// backlog is not shrinking or the rates are not known.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_time_to_drain(
    lag_meter: *const sg_lag_meter,
    now: u64,
    time_to_drain_out: *mut u64,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let time_to_drain_out = out(time_to_drain_out)?;
        // SAFETY: the crate's contract for `lag_meter`.
        let v = unsafe { with(lag_meter, |o| Ok(o.inner.time_to_drain(now).unwrap_or(SG_NEVER)))? };
        time_to_drain_out.write(v);
        Ok(())
    })
}

/// The alert predicate: the backlog takes longer than `limit_ns` to drain
/// (also when it is not draining, or the rates are unknown with a backlog).
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_time_to_drain_exceeds(
    lag_meter: *const sg_lag_meter,
    now: u64,
    limit_ns: u64,
    time_to_drain_exceeds_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let time_to_drain_exceeds_out = out(time_to_drain_exceeds_out)?;
        // SAFETY: the crate's contract for `lag_meter`.
        let v = unsafe { with(lag_meter, |o| Ok(o.inner.time_to_drain_exceeds(now, limit_ns)))? };
        time_to_drain_exceeds_out.write(v);
        Ok(())
    })
}

/// A snapshot of an `sg_lag_meter`: counters, rates and derived gauges.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct sg_lag_metrics {
    /// Items produced, in total.
    pub produced: u64,
    /// Items consumed, in total.
    pub consumed: u64,
    /// Produced and not yet consumed.
    pub lag: u64,
    /// Whether the rates are measured yet (two snapshots taken).
    pub rates_known: bool,
    /// Items per second produced over the window (0 until known).
    pub produce_rate: f64,
    /// Items per second consumed over the window (0 until known).
    pub consume_rate: f64,
    /// `lag / consume_rate`, s; 0 with no lag; `INFINITY` when nothing is consumed.
    pub lag_seconds: f64,
    /// `lag / (consume − produce)`, s; 0 with no lag; `INFINITY` when not shrinking.
    pub time_to_drain_seconds: f64,
    /// Whether the oldest item's age is known (`sg_lag_meter_report_oldest`).
    pub has_oldest_age: bool,
    /// Age of the oldest unprocessed item, ns (0 unless `has_oldest_age`).
    pub oldest_age_ns: u64,
    /// Items consumed beyond those produced (`consumed − produced`, else 0). Not 0 means
    /// the records disagree: a consumption recorded before its production (another
    /// thread's record still to come) or an accounting bug. `lag` reads 0 meanwhile.
    pub over_consumed: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<LagMetrics> for sg_lag_metrics {
    fn from(m: LagMetrics) -> Self {
        Self {
            reserved: [0; 4],
            produced: m.produced,
            consumed: m.consumed,
            lag: m.lag,
            rates_known: m.rates_known,
            produce_rate: m.produce_rate,
            consume_rate: m.consume_rate,
            lag_seconds: m.lag_seconds,
            time_to_drain_seconds: m.time_to_drain_seconds,
            has_oldest_age: m.oldest_age.is_some(),
            oldest_age_ns: m.oldest_age.unwrap_or(0),
            over_consumed: m.consumed.saturating_sub(m.produced),
        }
    }
}

/// A snapshot at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_lag_meter_metrics_get(
    lag_meter: *const sg_lag_meter,
    now: u64,
    metrics_out: *mut sg_lag_metrics,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `lag_meter`.
        let v = unsafe { with(lag_meter, |o| Ok(o.inner.metrics(now).into()))? };
        metrics_out.write(v);
        Ok(())
    })
}

// ---- watermarks ----------------------------------------------------------------------

/// `sg_watermarks_observe`: nothing to do.
pub const SG_TRANSITION_NONE: u32 = 0;
/// `sg_watermarks_observe`: stop fetching (free capacity fell below the low mark).
pub const SG_TRANSITION_PAUSE: u32 = 1;
/// `sg_watermarks_observe`: fetch again (free capacity rose above the high mark).
pub const SG_TRANSITION_RESUME: u32 = 2;
const _: () = assert!(Transition::Pause as u32 == SG_TRANSITION_PAUSE);
const _: () = assert!(Transition::Resume as u32 == SG_TRANSITION_RESUME);

/// Settings of `sg_watermarks`, in units of the level observed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sg_watermarks_config {
    /// Total capacity (default 400).
    pub capacity: u64,
    /// Pause when free capacity falls below this; at least 1 (default 100).
    pub pause_below: u64,
    /// Resume when free capacity rises above this; above `pause_below`, below `capacity`
    /// (default 200).
    pub resume_above: u64,
    /// Reserved for settings added later (each will give 0 today's behaviour); must be
    /// 0, as `_config_default` sets it (else `SG_CONFIG_OUT_OF_RANGE`, field `reserved`).
    pub reserved: [u64; 4],
}

impl From<WatermarksConfig> for sg_watermarks_config {
    fn from(c: WatermarksConfig) -> Self {
        Self {
            reserved: [0; 4],
            capacity: c.capacity,
            pause_below: c.pause_below,
            resume_above: c.resume_above,
        }
    }
}

/// Pause/resume with hysteresis on a level (Kafka's `pause()`/`resume()`).
/// Thread-safe, wait-free; exactly one caller reports each transition.
pub struct sg_watermarks {
    _opaque: [u8; 0],
}
object!(sg_watermarks, Watermarks, 0x5347_574D_524B_5300);

mod wm_make {
    use super::*;
    /// Builds the object's core structure from a C config (for `_new` and `_init`).
    ///
    /// # Safety
    /// `cfg` must be NULL or valid for reads of one `sg_watermarks_config` for the duration of the
    /// call (the crate's contract).
    pub(super) unsafe fn make(cfg: *const sg_watermarks_config) -> Res<Watermarks> {
        // SAFETY: this fn's contract: `cfg` is NULL (`input` refuses it) or readable for
        // one `sg_watermarks_config` during the call; the borrow does not outlive it.
        let c = unsafe { input(cfg)? };
        crate::field::reserved(&c.reserved)?;
        Ok(Watermarks::new(WatermarksConfig {
            capacity: c.capacity,
            pause_below: c.pause_below,
            resume_above: c.resume_above,
        })?)
    }
}

/// Fills `cfg` with the defaults: capacity 400, pause below 100 free, resume above 200 free.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_config_default(cfg: *mut sg_watermarks_config) -> sg_status {
    ffi(|| out(cfg).map(|o| o.write(WatermarksConfig::default().into())))
}

/// Creates watermarks on the heap; free it with `sg_watermarks_free`.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_new(
    cfg: *const sg_watermarks_config,
    watermarks_out: *mut *mut sg_watermarks,
) -> sg_status {
    // SAFETY: the crate's contract for `cfg` and `watermarks_out`.
    unsafe { new_object(watermarks_out, || wm_make::make(cfg)) }
}

/// Frees watermarks made by `sg_watermarks_new`. NULL is fine; a handle made by `sg_watermarks_init` is
/// left alone (use `sg_watermarks_deinit`).
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_free(watermarks: *mut sg_watermarks) {
    // SAFETY: the crate's contract for `watermarks`.
    unsafe { free_object(watermarks) }
}

/// Bytes of caller storage `sg_watermarks_init` needs.
#[no_mangle]
pub extern "C" fn sg_watermarks_size() -> usize {
    ffi_value(0, obj_size::<sg_watermarks>)
}

/// Alignment the storage given to `sg_watermarks_init` needs.
#[no_mangle]
pub extern "C" fn sg_watermarks_align() -> usize {
    ffi_value(0, obj_align::<sg_watermarks>)
}

/// Creates watermarks in caller storage (`len` bytes at `mem`, aligned to
/// `sg_watermarks_align()`); on `SG_OK`, `(sg_watermarks *)mem` is the handle. End it with
/// `sg_watermarks_deinit`.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_init(
    mem: *mut c_void,
    len: usize,
    cfg: *const sg_watermarks_config,
) -> sg_status {
    // SAFETY: the crate's contract for `mem`, `len` and `cfg`.
    unsafe { init_object::<sg_watermarks>(mem, len, || wm_make::make(cfg)) }
}

/// Ends watermarks made by `sg_watermarks_init` (NULL: nothing to do); later use of the handle
/// says `SG_INVALID_HANDLE`.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_deinit(watermarks: *mut sg_watermarks) -> sg_status {
    // SAFETY: the crate's contract for `watermarks`.
    unsafe { deinit_object(watermarks) }
}

/// Reports the current level; `*observe_out` is the transition to make now
/// (`SG_TRANSITION_*`).
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_observe(
    watermarks: *mut sg_watermarks,
    now: u64,
    level: u64,
    observe_out: *mut u32,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let observe_out = out(observe_out)?;
        // SAFETY: the crate's contract for `watermarks`.
        let v = unsafe {
            with(watermarks, |o| {
                Ok(o.inner.observe(now, level).map_or(SG_TRANSITION_NONE, |t| t as u32))
            })?
        };
        observe_out.write(v);
        Ok(())
    })
}

/// Whether the consumer should be paused now.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_is_paused(
    watermarks: *const sg_watermarks,
    is_paused_out: *mut bool,
) -> sg_status {
    ffi(|| {
        let is_paused_out = out(is_paused_out)?;
        // SAFETY: the crate's contract for `watermarks`.
        let v = unsafe { with(watermarks, |o| Ok(o.inner.is_paused()))? };
        is_paused_out.write(v);
        Ok(())
    })
}

/// A snapshot of `sg_watermarks`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_watermarks_metrics {
    /// Whether paused now.
    pub paused: bool,
    /// Pauses, in total.
    pub pauses: u64,
    /// Resumes, in total.
    pub resumes: u64,
    /// Nanoseconds spent paused, including the current pause up to `now`.
    pub time_paused_ns: u64,
    /// The level passed to the latest observe.
    pub last_level: u64,
    /// Reserved for values added later; 0 in this version.
    pub reserved: [u64; 4],
}

impl From<WatermarksMetrics> for sg_watermarks_metrics {
    fn from(m: WatermarksMetrics) -> Self {
        Self {
            reserved: [0; 4],
            paused: m.paused,
            pauses: m.pauses,
            resumes: m.resumes,
            time_paused_ns: m.time_paused,
            last_level: m.last_level,
        }
    }
}

/// A snapshot at `now`.
#[no_mangle]
pub unsafe extern "C" fn sg_watermarks_metrics_get(
    watermarks: *const sg_watermarks,
    now: u64,
    metrics_out: *mut sg_watermarks_metrics,
) -> sg_status {
    ffi(|| {
        let now = crate::time::check_now(now)?;
        let metrics_out = out(metrics_out)?;
        // SAFETY: the crate's contract for `watermarks`.
        let v = unsafe { with(watermarks, |o| Ok(o.inner.metrics(now).into()))? };
        metrics_out.write(v);
        Ok(())
    })
}
