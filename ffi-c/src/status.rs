//! Status codes, rejection reasons and their static strings.

use core::ffi::c_char;

use surgeguard_core::{ConfigError, ConfigErrorKind, Reason, Rejected, UsageError};

/// What a call did. `SG_OK` is 0, so `if (sg_x(...) != SG_OK)` reads naturally; every
/// other code says why nothing (or only a rejection) was written. `sg_status_str` names
/// each one.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum sg_status {
    /// Done; every output was written.
    SG_OK = 0,
    /// Refused by policy (the limit, a queue, a budget, a breaker, ...). Only the
    /// `sg_rejection` output (if not NULL) was written: its `reason` and `retry_after_ns`.
    SG_REJECTED = 1,
    /// `sg_gate_arrive`: the arrival waits in the queue; only the ticket was written. A
    /// later `sg_gate_poll` reports it granted or expired.
    SG_QUEUED = 2,
    /// `sg_deadline_parse`: the header does not parse and is ignored; only the reason
    /// was written. Serve the request without a deadline from it (and count it).
    SG_IGNORED = 3,
    /// `sg_deadline_format`: nothing worth sending remains of the deadline after the
    /// margin: fail fast locally instead of sending work that cannot finish in time.
    SG_EXHAUSTED = 4,
    /// `sg_deadline_format`: the deadline is `SG_NO_DEADLINE` (or any value above
    /// `SG_MAX_NOW`): nothing bounds the call; send no header.
    SG_UNBOUNDED = 5,
    /// A required pointer argument was NULL.
    SG_NULL_ARGUMENT = 100,
    /// A number was out of range: an unknown enum value, a level ≥ 8, a NaN, negative or
    /// huge duration, a count too large.
    SG_INVALID_ARGUMENT = 101,
    /// A config number was NaN or infinite.
    SG_CONFIG_NOT_FINITE = 102,
    /// A config number was outside its allowed range.
    SG_CONFIG_OUT_OF_RANGE = 103,
    /// Two config settings contradict each other (e.g. min above max).
    SG_CONFIG_INCONSISTENT = 104,
    /// The caller's buffer or storage is smaller than needed.
    SG_BUFFER_TOO_SMALL = 105,
    /// The caller's storage is not aligned to `sg_<type>_align()`.
    SG_MISALIGNED = 106,
    /// Not a live object or permit of the expected type: never initialised, freed,
    /// deinitialised, or a handle of another type.
    SG_INVALID_HANDLE = 107,
    /// The permit was already released (or moved away).
    SG_ALREADY_RELEASED = 108,
    /// The permit or ticket belongs to another object (for a ticket: carries another
    /// gate's id, which a forged number usually does).
    SG_FOREIGN_HANDLE = 109,
    /// The ticket is unknown: already granted, expired, evicted or cancelled, or carries
    /// this gate's id but was never issued.
    SG_UNKNOWN_TICKET = 110,
    /// A panic was caught at the boundary (a bug: please report it). The object it was
    /// using is poisoned: later calls on it return `SG_PANIC`; free it.
    SG_PANIC = 111,
    /// `sg_<type>_new` could not allocate; nothing was created.
    SG_OUT_OF_MEMORY = 112,
    /// A `now` argument was above `SG_MAX_NOW` (2^62 ns, about 146 years of uptime): a
    /// clock bug or a corrupted value. Refused before anything is read or changed.
    SG_TIME_OUT_OF_RANGE = 113,
    /// `sg_<type>_open_shared`: the name holds something this build may not attach to:
    /// not a surgeguard segment, or one made by another version or layout, for another
    /// kind of object or another config, before the last reboot or in another pid
    /// namespace. Use the same config in every process, or another name (or unlink it).
    SG_SHM_REFUSED = 114,
    /// A shared segment could not be created, mapped or joined: a system call failed
    /// (`/dev/shm` missing or full, permissions), or every process slot of the segment is
    /// held by a live process.
    SG_SHM_UNAVAILABLE = 115,
}

use sg_status::*;

impl From<ConfigError> for sg_status {
    /// Also records the field for `sg_last_error_field()`.
    fn from(e: ConfigError) -> Self {
        crate::field::set_core(&e);
        match e.kind {
            ConfigErrorKind::NotFinite => SG_CONFIG_NOT_FINITE,
            ConfigErrorKind::Inconsistent => SG_CONFIG_INCONSISTENT,
            _ => SG_CONFIG_OUT_OF_RANGE,
        }
    }
}

impl From<UsageError> for sg_status {
    fn from(e: UsageError) -> Self {
        match e {
            UsageError::AlreadyReleased => SG_ALREADY_RELEASED,
            UsageError::ForeignHandle => SG_FOREIGN_HANDLE,
            UsageError::UnknownTicket => SG_UNKNOWN_TICKET,
            UsageError::TimeOutOfRange => SG_TIME_OUT_OF_RANGE,
            _ => SG_INVALID_ARGUMENT,
        }
    }
}

/// A static, NUL-terminated name for a status (`"ok"`, `"rejected"`, ...); `"unknown
/// status"` for a value that is not one. Never NULL.
#[no_mangle]
pub extern "C" fn sg_status_str(status: u32) -> *const c_char {
    let s: &'static core::ffi::CStr = match status {
        0 => c"ok",
        1 => c"rejected",
        2 => c"queued",
        3 => c"ignored",
        4 => c"deadline exhausted",
        5 => c"no deadline to pass on",
        100 => c"null argument",
        101 => c"invalid argument",
        102 => c"config: a number is NaN or infinite",
        103 => c"config: a number is out of range",
        104 => c"config: inconsistent settings",
        105 => c"buffer too small",
        106 => c"storage misaligned",
        107 => c"invalid handle",
        108 => c"permit already released",
        109 => c"handle belongs to another object",
        110 => c"unknown ticket",
        111 => c"panic caught at the C boundary",
        112 => c"out of memory",
        113 => c"now is above SG_MAX_NOW (2^62 ns)",
        114 => c"shared segment refused: another version, layout, kind or config",
        115 => c"shared segment unavailable: a system call failed or every process slot is taken",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// `SG_REASON_*` (the core's `Reason` wire values, stable): in-flight work is at the
/// concurrency limit (or the level's share of it).
pub const SG_REASON_LIMIT_REACHED: u32 = 1;
/// The admission queue is full and the arrival is not more important than any waiter.
pub const SG_REASON_QUEUE_FULL: u32 = 2;
/// A more important arrival took this waiter's place in a full queue.
pub const SG_REASON_EVICTED: u32 = 3;
/// The deadline cannot be met at the current drain rate.
pub const SG_REASON_DEADLINE_UNMEETABLE: u32 = 4;
/// The waiter's deadline (or maximum wait) ran out.
pub const SG_REASON_EXPIRED: u32 = 5;
/// CoDel sloughed the waiter (the queue stood above target for a whole interval).
pub const SG_REASON_CODEL_SLOUGH: u32 = 6;
/// The on-call shed switch refuses this level.
pub const SG_REASON_SHED: u32 = 7;
/// The circuit breaker is open (or half-open with no probe slot free).
pub const SG_REASON_BREAKER_OPEN: u32 = 8;
/// The retry budget has no tokens for another retry.
pub const SG_REASON_BUDGET_EXHAUSTED: u32 = 9;
/// Client-side adaptive throttling refused the request locally.
pub const SG_REASON_THROTTLED: u32 = 10;
/// The rate limiter has no capacity before the hint.
pub const SG_REASON_RATE_LIMITED: u32 = 11;
/// A per-key concurrency cap refused it.
pub const SG_REASON_KEY_LIMIT: u32 = 12;
/// A per-key rate limit refused it.
pub const SG_REASON_KEY_RATE: u32 = 13;
/// The waiter was cancelled by its owner.
pub const SG_REASON_CANCELLED: u32 = 14;
/// The consumer has granted no credit for another item.
pub const SG_REASON_NO_CREDIT: u32 = 15;

/// The reason of a wire value, if it is one.
pub(crate) fn reason_of(v: u32) -> Option<Reason> {
    Reason::ALL.iter().copied().find(|r| *r as u32 == v)
}

/// A static, NUL-terminated, machine-readable name for an `SG_REASON_*` value (the same
/// snake-case names every binding uses: `"limit_reached"`, ...); `"unknown"` otherwise.
/// Never NULL.
#[no_mangle]
pub extern "C" fn sg_reason_str(reason: u32) -> *const c_char {
    let s: &'static core::ffi::CStr = match reason_of(reason) {
        Some(Reason::LimitReached) => c"limit_reached",
        Some(Reason::QueueFull) => c"queue_full",
        Some(Reason::Evicted) => c"evicted",
        Some(Reason::DeadlineUnmeetable) => c"deadline_unmeetable",
        Some(Reason::Expired) => c"expired",
        Some(Reason::CodelSlough) => c"codel_slough",
        Some(Reason::Shed) => c"shed",
        Some(Reason::BreakerOpen) => c"breaker_open",
        Some(Reason::BudgetExhausted) => c"budget_exhausted",
        Some(Reason::Throttled) => c"throttled",
        Some(Reason::RateLimited) => c"rate_limited",
        Some(Reason::KeyLimit) => c"key_limit",
        Some(Reason::KeyRate) => c"key_rate",
        Some(Reason::Cancelled) => c"cancelled",
        Some(Reason::NoCredit) => c"no_credit",
        _ => c"unknown",
    };
    s.as_ptr()
}

/// A refusal: why (`SG_REASON_*`) and when trying again could succeed, in nanoseconds
/// from the call's `now` (`SG_NEVER` = never, e.g. a cost above a rate limiter's burst).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_rejection {
    /// `SG_REASON_*`.
    pub reason: u32,
    /// Do not try again sooner than this many nanoseconds from `now`.
    pub retry_after_ns: u64,
}

impl From<Rejected> for sg_rejection {
    fn from(r: Rejected) -> Self {
        Self { reason: r.reason as u32, retry_after_ns: r.retry_after }
    }
}

impl sg_rejection {
    pub(crate) fn to_core(self) -> Option<Rejected> {
        reason_of(self.reason).map(|r| Rejected::new(r, self.retry_after_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::CStr;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: both functions return pointers to static NUL-terminated literals.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn reasons_match_the_core() {
        let consts = [
            SG_REASON_LIMIT_REACHED,
            SG_REASON_QUEUE_FULL,
            SG_REASON_EVICTED,
            SG_REASON_DEADLINE_UNMEETABLE,
            SG_REASON_EXPIRED,
            SG_REASON_CODEL_SLOUGH,
            SG_REASON_SHED,
            SG_REASON_BREAKER_OPEN,
            SG_REASON_BUDGET_EXHAUSTED,
            SG_REASON_THROTTLED,
            SG_REASON_RATE_LIMITED,
            SG_REASON_KEY_LIMIT,
            SG_REASON_KEY_RATE,
            SG_REASON_CANCELLED,
            SG_REASON_NO_CREDIT,
        ];
        assert_eq!(consts.len(), Reason::ALL.len());
        for (c, r) in consts.iter().zip(Reason::ALL) {
            assert_eq!(*c, r as u32);
            assert_eq!(s(sg_reason_str(*c)), r.as_str());
        }
        assert_eq!(s(sg_reason_str(0)), "unknown");
        assert_eq!(s(sg_reason_str(99)), "unknown");
    }

    #[test]
    fn every_status_has_a_name() {
        for st in [
            SG_OK,
            SG_REJECTED,
            SG_QUEUED,
            SG_IGNORED,
            SG_EXHAUSTED,
            SG_UNBOUNDED,
            SG_NULL_ARGUMENT,
            SG_INVALID_ARGUMENT,
            SG_CONFIG_NOT_FINITE,
            SG_CONFIG_OUT_OF_RANGE,
            SG_CONFIG_INCONSISTENT,
            SG_BUFFER_TOO_SMALL,
            SG_MISALIGNED,
            SG_INVALID_HANDLE,
            SG_ALREADY_RELEASED,
            SG_FOREIGN_HANDLE,
            SG_UNKNOWN_TICKET,
            SG_PANIC,
            SG_OUT_OF_MEMORY,
            SG_TIME_OUT_OF_RANGE,
        ] {
            assert_ne!(s(sg_status_str(st as u32)), "unknown status", "{st:?}");
        }
        assert_eq!(s(sg_status_str(6)), "unknown status");
    }
}
