//! Deadline headers: read the caller's remaining budget from a request, make the arrival
//! deadline, write the outgoing value for the next hop. Pure functions (no object, no
//! state), thread-safe.
//!
//! Headers: `grpc-timeout` (gRPC's format: 1–8 digits and a unit `H M S m u n`), and
//! whole milliseconds for every other name (`x-envoy-expected-rq-timeout-ms`, the
//! project's own `surgeguard-timeout-ms`, one the application names). A header that does
//! not parse is ignored (`SG_IGNORED` with a reason to count); it never fails the request
//! and never grants a deadline. Budgets above one hour are ignored as absurd.

use core::ffi::c_char;

use surgeguard_core::deadline::{self, FormatError, HeaderError};

use crate::handle::{ffi_status, ffi_value, out, Res};
use crate::status::sg_status::{self, *};

/// The largest budget a deadline header may carry (one hour, in ns); above it the header
/// is ignored (`SG_DEADLINE_TOO_LARGE`).
pub const SG_DEADLINE_MAX_BUDGET_NS: u64 = 3_600_000_000_000u64;
const _: () = assert!(SG_DEADLINE_MAX_BUDGET_NS == deadline::MAX_BUDGET);

/// A buffer of this many bytes always holds `sg_deadline_format`'s value and its NUL.
pub const SG_DEADLINE_BUF_LEN: usize = 16;
const _: () = assert!(SG_DEADLINE_BUF_LEN > deadline::MAX_FORMATTED_LEN);

/// Ignored-header reason: not the header's format (empty, a stray byte, a fraction, a
/// missing or unknown unit, more than 8 digits in `grpc-timeout`).
pub const SG_DEADLINE_MALFORMED: u32 = 1;
/// Ignored-header reason: a minus sign followed by a number.
pub const SG_DEADLINE_NEGATIVE: u32 = 2;
/// Ignored-header reason: above `SG_DEADLINE_MAX_BUDGET_NS` (one hour).
pub const SG_DEADLINE_TOO_LARGE: u32 = 3;
const _: () = assert!(
    SG_DEADLINE_MALFORMED == HeaderError::Malformed as u32
        && SG_DEADLINE_NEGATIVE == HeaderError::Negative as u32
        && SG_DEADLINE_TOO_LARGE == HeaderError::TooLarge as u32
);

/// Borrows `len` bytes at `p`; NULL is `SG_NULL_ARGUMENT` (even for `len` 0).
///
/// # Safety
/// `p` must be NULL or valid for reads of `len` bytes (the crate's contract).
unsafe fn bytes<'a>(p: *const u8, len: usize) -> Res<&'a [u8]> {
    if p.is_null() {
        return Err(SG_NULL_ARGUMENT);
    }
    if len > isize::MAX as usize {
        return Err(SG_INVALID_ARGUMENT);
    }
    // SAFETY: not NULL, and the crate's contract makes the caller promise `len` readable
    // bytes that nothing writes during the call; `len` fits a slice (checked above).
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}

/// Parses the deadline header `name: value` (`name_len` and `value_len` bytes, no NUL
/// needed). `SG_OK`: the budget (ns, at most one hour) is in `*budget_ns_out`.
/// `SG_IGNORED`: the header does not parse; only `*reason_out` (`SG_DEADLINE_*`) is
/// written: count it and serve the request without a deadline from this header.
/// `SG_NULL_ARGUMENT` for any NULL pointer. With several headers, the smallest budget
/// wins. The value is read as a comma-separated list (a header sent twice, its lines
/// joined by commas): its smallest valid item, or, if none is valid, the first item's
/// reason; pass a header's lines joined with ", " (or each line, taking the smallest).
#[no_mangle]
pub unsafe extern "C" fn sg_deadline_parse(
    name: *const u8,
    name_len: usize,
    value: *const u8,
    value_len: usize,
    budget_ns_out: *mut u64,
    reason_out: *mut u32,
) -> sg_status {
    ffi_status(|| {
        // SAFETY: the crate's contract: NULL or readable for the given lengths.
        let name = unsafe { bytes(name, name_len) }?;
        // SAFETY: as above.
        let value = unsafe { bytes(value, value_len) }?;
        let budget_ns_out = out(budget_ns_out)?;
        let reason_out = out(reason_out)?;
        Ok(match deadline::parse_header(name, value) {
            Ok(b) => {
                budget_ns_out.write(b);
                SG_OK
            }
            Err(e) => {
                reason_out.write(e as u32);
                SG_IGNORED
            }
        })
    })
}

/// The absolute deadline of a request that arrived at `now` with `budget_ns`:
/// their sum, saturating at `SG_MAX_NOW`. `SG_TIME_OUT_OF_RANGE` if `now` is
/// above `SG_MAX_NOW`.
#[no_mangle]
pub unsafe extern "C" fn sg_deadline_at(
    now: u64,
    budget_ns: u64,
    deadline_ns_out: *mut u64,
) -> sg_status {
    ffi_status(|| {
        let deadline_ns_out = out(deadline_ns_out)?;
        deadline_ns_out.write(deadline::deadline_at(now, budget_ns)?);
        Ok(SG_OK)
    })
}

/// Writes the outgoing value of header `name` for `deadline_ns − now − margin_ns`
/// (at most one hour), rounded down, and a NUL into `buf` (`buf_len` bytes;
/// `SG_DEADLINE_BUF_LEN` always suffices); `*written_out` is its length without the NUL.
/// `SG_EXHAUSTED`: nothing worth sending remains (zero in the header's unit): fail fast
/// locally. `SG_UNBOUNDED`: `deadline_ns` is `SG_NO_DEADLINE` (or above `SG_MAX_NOW`):
/// send no header. `SG_BUFFER_TOO_SMALL`, `SG_TIME_OUT_OF_RANGE` (`now`), `SG_NULL_ARGUMENT`.
/// Nothing is written unless `SG_OK`.
#[no_mangle]
pub unsafe extern "C" fn sg_deadline_format(
    name: *const u8,
    name_len: usize,
    deadline_ns: u64,
    now: u64,
    margin_ns: u64,
    buf: *mut c_char,
    buf_len: usize,
    written_out: *mut usize,
) -> sg_status {
    ffi_status(|| {
        // SAFETY: the crate's contract: NULL or readable for `name_len` bytes.
        let name = unsafe { bytes(name, name_len) }?;
        let buf = out(buf)?;
        let written_out = out(written_out)?;
        let format = deadline::HeaderFormat::for_name(name);
        let mut tmp = [0u8; SG_DEADLINE_BUF_LEN];
        let n = match deadline::format_deadline(format, deadline_ns, now, margin_ns, &mut tmp) {
            Ok(n) => n,
            Err(FormatError::Exhausted) => return Ok(SG_EXHAUSTED),
            Err(FormatError::NoDeadline) => return Ok(SG_UNBOUNDED),
            Err(FormatError::TimeOutOfRange) => return Err(SG_TIME_OUT_OF_RANGE),
            Err(_) => return Err(SG_BUFFER_TOO_SMALL),
        };
        if buf_len <= n {
            return Err(SG_BUFFER_TOO_SMALL);
        }
        // SAFETY: `buf` is not NULL (checked), and the crate's contract makes the caller
        // promise `buf_len` writable bytes; `n + 1 <= buf_len` (checked above), and `tmp`
        // is a distinct local array.
        unsafe { core::ptr::copy_nonoverlapping(tmp.as_ptr(), buf.as_ptr().cast::<u8>(), n + 1) };
        written_out.write(n);
        Ok(SG_OK)
    })
}

/// A static, NUL-terminated name for an ignored-header reason (`"malformed"`,
/// `"negative"`, `"too_large"`, the same in every binding); `"unknown"` otherwise.
/// Never NULL.
#[no_mangle]
pub extern "C" fn sg_deadline_reason_str(reason: u32) -> *const c_char {
    ffi_value(c"unknown".as_ptr(), || {
        let s: &'static core::ffi::CStr = match HeaderError::from_u32(reason) {
            Some(HeaderError::Malformed) => c"malformed",
            Some(HeaderError::Negative) => c"negative",
            Some(HeaderError::TooLarge) => c"too_large",
            _ => c"unknown",
        };
        s.as_ptr()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_match_the_core() {
        for e in HeaderError::ALL {
            // SAFETY: a static NUL-terminated string.
            let s = unsafe { core::ffi::CStr::from_ptr(sg_deadline_reason_str(e as u32)) };
            assert_eq!(s.to_str().unwrap(), e.as_str());
        }
    }
}
