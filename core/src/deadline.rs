//! Deadline headers: the caller's remaining budget, read from a request and written on
//! the next hop's request, the same way in every language.
//!
//! A server that knows when its caller gives up can refuse work it cannot finish in time
//! and drop work nobody waits for any more (the Gate does both, given a deadline). A
//! client that knows its own remaining budget can pass it on, minus a margin, and fail
//! fast instead of sending doomed work (Google SRE book, "Handling Overload" and
//! "Addressing Cascading Failures": deadline propagation).
//!
//! # The headers
//!
//! | header | format | source |
//! |---|---|---|
//! | `grpc-timeout` | 1–8 ASCII digits then one unit: `H` hours, `M` minutes, `S` seconds, `m` ms, `u` µs, `n` ns | gRPC over HTTP/2 (grpc/grpc `doc/PROTOCOL-HTTP2.md`) |
//! | `x-envoy-expected-rq-timeout-ms` | a decimal integer, milliseconds | Envoy's router |
//! | `surgeguard-timeout-ms` | a decimal integer, milliseconds: the caller's remaining budget | this project's own |
//!
//! A header named `grpc-timeout` (any ASCII case) is read in gRPC's format; every other
//! deadline header (Envoy's, the project's own, one an application names) is read as
//! whole milliseconds ([`HeaderFormat::for_name`]). Leading and trailing spaces and tabs
//! (HTTP's optional whitespace) are ignored; nothing else is accepted: no sign, no
//! fraction, no exponent, no separators.
//!
//! # Bad headers are ignored, never fatal
//!
//! A value that does not parse is *ignored* with a [`HeaderError`] saying why (malformed,
//! negative, too large), so a binding can count ignored headers by reason. An ignored
//! header never fails the request, and never grants a deadline: the request is served as
//! if the header were absent. A budget above [`MAX_BUDGET`] (one hour) is absurd for a
//! request and ignored as [`HeaderError::TooLarge`] — never clamped, never unbounded.
//! A budget of 0 is valid: the caller has no time left, and the Gate refuses the arrival.
//!
//! When several deadline headers are present, the smallest valid budget wins
//! ([`Budgets`]): the strictest caller bounds the work. The same holds within one header
//! sent twice: its lines may arrive joined by a comma (RFC 9110, section 5.3), and
//! [`parse_header`] reads a value as such a list ([`parse_list`]), so every binding reads
//! the duplicate alike however its HTTP library delivers it.
//!
//! # Outgoing side
//!
//! [`format_deadline`] writes `deadline − now − margin` for the next hop, rounded *down*
//! (a hop never grants more time than it has) in the finest `grpc-timeout` unit whose
//! value fits in 8 digits, or in whole milliseconds. A remaining budget that would be
//! written as zero is [`FormatError::Exhausted`]: the client should fail fast and send
//! nothing. A remaining budget above [`MAX_BUDGET`] is written as [`MAX_BUDGET`], so the
//! receiver accepts it.
//!
//! Every function here is pure (no state, no clock), allocation-free, and never panics on
//! any input. Cost: one pass over the value's bytes.

use crate::time::{check_now, MAX_NOW, MS, SEC, US};
use core::fmt;

/// The gRPC timeout header.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";
/// Envoy's header: the router's timeout for this request, in milliseconds.
pub const ENVOY_EXPECTED_RQ_TIMEOUT_MS: &str = "x-envoy-expected-rq-timeout-ms";
/// The project's own header: the caller's remaining budget in whole milliseconds, a
/// decimal integer (`surgeguard-timeout-ms: 250`).
pub const SURGEGUARD_TIMEOUT_MS: &str = "surgeguard-timeout-ms";

/// The largest budget a header may carry: one hour. A longer request budget is absurd
/// (a misconfiguration, a unit mistake, a hostile client); the header is ignored
/// ([`HeaderError::TooLarge`]) and the request runs under the server's own limits.
pub const MAX_BUDGET: u64 = HOUR;

/// The most bytes [`format_budget`] writes (`"3600000"` for the ms format, `"99999999n"`
/// at most for gRPC's): a buffer this long always suffices.
pub const MAX_FORMATTED_LEN: usize = 9;

/// Nanoseconds per hour.
const HOUR: u64 = 3_600 * SEC;

/// gRPC's limit on the digits of a `grpc-timeout` value.
const GRPC_MAX_DIGITS: usize = 8;
/// Largest value with [`GRPC_MAX_DIGITS`] digits.
const GRPC_MAX_VALUE: u64 = 99_999_999;

/// How a deadline header's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum HeaderFormat {
    /// gRPC's `TimeoutValue TimeoutUnit`: 1–8 digits, then `H`, `M`, `S`, `m`, `u` or `n`.
    GrpcTimeout = 0,
    /// A decimal integer of milliseconds (Envoy's header, the project's own).
    Millis = 1,
}

impl HeaderFormat {
    /// The format of the header `name`: [`GrpcTimeout`](Self::GrpcTimeout) for
    /// `grpc-timeout` in any ASCII case, [`Millis`](Self::Millis) for every other name.
    pub fn for_name(name: &[u8]) -> Self {
        if name.eq_ignore_ascii_case(GRPC_TIMEOUT.as_bytes()) {
            Self::GrpcTimeout
        } else {
            Self::Millis
        }
    }

    /// Decodes the wire value used by the bindings (0, 1).
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::GrpcTimeout),
            1 => Some(Self::Millis),
            _ => None,
        }
    }
}

/// Why a deadline header was ignored. The request goes on without a deadline from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum HeaderError {
    /// Not the header's format: empty, a stray byte, a fraction, no or an unknown unit,
    /// more than 8 digits in `grpc-timeout`.
    Malformed = 1,
    /// A minus sign followed by a number.
    Negative = 2,
    /// Above [`MAX_BUDGET`] (one hour).
    TooLarge = 3,
}

impl HeaderError {
    /// A stable, machine-readable name (snake case), the same in every binding and fit
    /// for a metric label: `"malformed"`, `"negative"`, `"too_large"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Negative => "negative",
            Self::TooLarge => "too_large",
        }
    }

    /// Every reason, in wire order.
    pub const ALL: [HeaderError; 3] = [Self::Malformed, Self::Negative, Self::TooLarge];

    /// Decodes the wire value (1, 2, 3).
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Malformed),
            2 => Some(Self::Negative),
            3 => Some(Self::TooLarge),
            _ => None,
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "deadline header is malformed",
            Self::Negative => "deadline header is negative",
            Self::TooLarge => "deadline header is above the one-hour cap",
        })
    }
}

impl core::error::Error for HeaderError {}

/// Why no outgoing deadline header was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum FormatError {
    /// Nothing (or less than the format's unit) remains after the margin: fail fast
    /// locally instead of sending work the callee cannot finish in time.
    Exhausted = 1,
    /// The deadline is above [`MAX_NOW`]: "no deadline". Send no header.
    NoDeadline = 2,
    /// The caller's buffer is shorter than the value ([`MAX_FORMATTED_LEN`] always
    /// suffices). Nothing was written.
    BufferTooSmall = 3,
    /// `now` is above [`MAX_NOW`]: bad input, not a time.
    TimeOutOfRange = 4,
}

impl FormatError {
    /// A stable, machine-readable name: `"exhausted"`, `"no_deadline"`,
    /// `"buffer_too_small"`, `"time_out_of_range"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Exhausted => "exhausted",
            Self::NoDeadline => "no_deadline",
            Self::BufferTooSmall => "buffer_too_small",
            Self::TimeOutOfRange => "time_out_of_range",
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exhausted => "the deadline budget is exhausted",
            Self::NoDeadline => "no deadline (above time::MAX_NOW)",
            Self::BufferTooSmall => "buffer too small for the header value",
            Self::TimeOutOfRange => "now is out of range (above time::MAX_NOW = 2^62 ns)",
        })
    }
}

impl core::error::Error for FormatError {}

/// Strips HTTP's optional whitespace (spaces and horizontal tabs) at both ends.
fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Parses a run of ASCII digits, saturating at `u64::MAX`. `None` if empty or if any
/// byte is not a digit.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Some(n)
}

/// A budget in ns, or [`HeaderError::TooLarge`] above [`MAX_BUDGET`].
fn capped(ns: u64) -> Result<u64, HeaderError> {
    if ns > MAX_BUDGET {
        Err(HeaderError::TooLarge)
    } else {
        Ok(ns)
    }
}

/// Nanoseconds per unit of a `grpc-timeout` unit byte.
const fn grpc_unit(b: u8) -> Option<u64> {
    match b {
        b'H' => Some(HOUR),
        b'M' => Some(60 * SEC),
        b'S' => Some(SEC),
        b'm' => Some(MS),
        b'u' => Some(US),
        b'n' => Some(1),
        _ => None,
    }
}

/// Parses a `grpc-timeout` value (`"250m"`, `"1S"`, `"100000u"`) to a budget in ns.
///
/// ```
/// use surgeguard_core::deadline::{parse_grpc_timeout, HeaderError};
/// assert_eq!(parse_grpc_timeout(b"250m"), Ok(250_000_000));
/// assert_eq!(parse_grpc_timeout(b"2H"), Err(HeaderError::TooLarge));
/// assert_eq!(parse_grpc_timeout(b"1.5S"), Err(HeaderError::Malformed));
/// ```
pub fn parse_grpc_timeout(value: &[u8]) -> Result<u64, HeaderError> {
    let v = trim_ows(value);
    let (negative, v) = match v {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, v),
    };
    let [number @ .., unit] = v else {
        return Err(HeaderError::Malformed);
    };
    let (Some(per), Some(n)) = (grpc_unit(*unit), digits(number)) else {
        return Err(HeaderError::Malformed);
    };
    if number.len() > GRPC_MAX_DIGITS {
        return Err(HeaderError::Malformed);
    }
    if negative {
        return Err(HeaderError::Negative);
    }
    capped(n.saturating_mul(per))
}

/// Parses a millisecond header value (`"250"`) to a budget in ns.
///
/// ```
/// use surgeguard_core::deadline::{parse_millis, HeaderError};
/// assert_eq!(parse_millis(b" 250 "), Ok(250_000_000));
/// assert_eq!(parse_millis(b"-5"), Err(HeaderError::Negative));
/// assert_eq!(parse_millis(b"3600001"), Err(HeaderError::TooLarge));
/// ```
pub fn parse_millis(value: &[u8]) -> Result<u64, HeaderError> {
    let v = trim_ows(value);
    let (negative, v) = match v {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, v),
    };
    let n = digits(v).ok_or(HeaderError::Malformed)?;
    if negative {
        return Err(HeaderError::Negative);
    }
    capped(n.saturating_mul(MS))
}

/// Parses a header value in `format` to a budget in ns.
pub fn parse(format: HeaderFormat, value: &[u8]) -> Result<u64, HeaderError> {
    match format {
        HeaderFormat::GrpcTimeout => parse_grpc_timeout(value),
        HeaderFormat::Millis => parse_millis(value),
    }
}

/// Parses a header value that may be a comma-separated list of values in `format`: the
/// smallest valid item, or, when no item is valid, the first item's reason.
///
/// HTTP lets a proxy or a server library combine the field lines of one name into one,
/// joined by commas (RFC 9110, section 5.3; Node's `http` and WSGI servers do), so a
/// deadline header sent twice may arrive as `"250, 100"`. Each item is read alone (spaces
/// and tabs around it ignored): an invalid item is ignored like an invalid header, and
/// the strictest valid one wins, as among several headers ([`Budgets`]). A header sent
/// on two lines and the same lines joined read alike. No valid single value contains a
/// comma, so a value without one reads as [`parse`] reads it. An empty item is malformed.
///
/// ```
/// use surgeguard_core::deadline::{parse_list, HeaderError, HeaderFormat};
/// assert_eq!(parse_list(HeaderFormat::Millis, b"250, 100"), Ok(100_000_000));
/// assert_eq!(parse_list(HeaderFormat::Millis, b"oops,100"), Ok(100_000_000));
/// assert_eq!(parse_list(HeaderFormat::Millis, b"-5, oops"), Err(HeaderError::Negative));
/// ```
pub fn parse_list(format: HeaderFormat, value: &[u8]) -> Result<u64, HeaderError> {
    let mut budgets = Budgets::new();
    let mut first_error = None;
    for item in value.split(|&b| b == b',') {
        if let Some(e) = budgets.add(parse(format, item)) {
            first_error.get_or_insert(e);
        }
    }
    // `split` yields at least one item, so one of the two is set.
    budgets.budget().ok_or(first_error.unwrap_or(HeaderError::Malformed))
}

/// Parses the deadline header `name: value`, in the format its name implies
/// ([`HeaderFormat::for_name`]), as a list ([`parse_list`]: a header sent twice and joined
/// by a comma reads as its smallest valid value).
///
/// ```
/// use surgeguard_core::deadline::parse_header;
/// assert_eq!(parse_header(b"Grpc-Timeout", b"5S"), Ok(5_000_000_000));
/// assert_eq!(parse_header(b"surgeguard-timeout-ms", b"250"), Ok(250_000_000));
/// assert_eq!(parse_header(b"surgeguard-timeout-ms", b"250, 100"), Ok(100_000_000));
/// ```
pub fn parse_header(name: &[u8], value: &[u8]) -> Result<u64, HeaderError> {
    parse_list(HeaderFormat::for_name(name), value)
}

/// [`parse_header`] over the field lines of one header kept apart (an `http::HeaderMap`'s
/// `get_all`, an ASGI header list): the answer [`parse_header`] gives for the lines joined
/// by commas. `None` when there is no line.
///
/// ```
/// use surgeguard_core::deadline::parse_header_lines;
/// let lines: [&[u8]; 2] = [b"250", b"oops, 100"];
/// assert_eq!(parse_header_lines(b"surgeguard-timeout-ms", lines), Some(Ok(100_000_000)));
/// ```
pub fn parse_header_lines<'a>(
    name: &[u8],
    lines: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Result<u64, HeaderError>> {
    let format = HeaderFormat::for_name(name);
    let mut answer: Option<Result<u64, HeaderError>> = None;
    for line in lines {
        let parsed = parse_list(format, line);
        answer = Some(match (answer, parsed) {
            (None, p) => p,
            (Some(Ok(a)), Ok(b)) => Ok(a.min(b)),
            (Some(Ok(a)), Err(_)) | (Some(Err(_)), Ok(a)) => Ok(a),
            (Some(Err(first)), Err(_)) => Err(first),
        });
    }
    answer
}

/// The smallest valid budget among several deadline headers.
///
/// ```
/// use surgeguard_core::deadline::{parse_header, Budgets};
/// let mut b = Budgets::new();
/// b.add(parse_header(b"grpc-timeout", b"2S"));
/// b.add(parse_header(b"x-envoy-expected-rq-timeout-ms", b"1500"));
/// b.add(parse_header(b"surgeguard-timeout-ms", b"oops"));
/// assert_eq!(b.budget(), Some(1_500_000_000));
/// ```
///
/// Progress: not shared (plain `&mut self`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    budget: Option<u64>,
}

impl Budgets {
    /// No header seen yet: no budget.
    pub const fn new() -> Self {
        Self { budget: None }
    }

    /// Adds one header's parse result: a valid budget lowers the minimum, an ignored
    /// header changes nothing. Returns the reason it was ignored, if it was, so the caller
    /// can count it.
    pub fn add(&mut self, parsed: Result<u64, HeaderError>) -> Option<HeaderError> {
        match parsed {
            Ok(b) => {
                self.budget = Some(self.budget.map_or(b, |m| m.min(b)));
                None
            }
            Err(e) => Some(e),
        }
    }

    /// The smallest valid budget seen, or `None` if no header gave one.
    pub const fn budget(&self) -> Option<u64> {
        self.budget
    }
}

/// The absolute deadline of a request that arrived at `arrival_now` with `budget` ns:
/// `arrival_now + budget`, saturating at [`MAX_NOW`]. A `arrival_now` above [`MAX_NOW`]
/// is bad input ([`crate::UsageError::TimeOutOfRange`]).
///
/// ```
/// use surgeguard_core::deadline::deadline_at;
/// assert_eq!(deadline_at(1_000, 500), Ok(1_500));
/// ```
pub fn deadline_at(arrival_now: u64, budget: u64) -> Result<u64, crate::UsageError> {
    let now = check_now(arrival_now)?;
    Ok(now.saturating_add(budget).min(MAX_NOW))
}

/// What remains for the next hop: `deadline − now − margin`, at most [`MAX_BUDGET`].
/// [`FormatError::Exhausted`] if nothing does; [`FormatError::NoDeadline`] if `deadline`
/// is above [`MAX_NOW`]; [`FormatError::TimeOutOfRange`] if `now` is.
pub fn remaining(deadline: u64, now: u64, margin: u64) -> Result<u64, FormatError> {
    if now > MAX_NOW {
        return Err(FormatError::TimeOutOfRange);
    }
    if deadline > MAX_NOW {
        return Err(FormatError::NoDeadline);
    }
    match deadline.saturating_sub(now).saturating_sub(margin) {
        0 => Err(FormatError::Exhausted),
        r => Ok(r.min(MAX_BUDGET)),
    }
}

/// Writes `n` in decimal at the start of `out`; returns the length, or `None` if `out` is
/// too short (nothing written then).
fn write_decimal(mut n: u64, out: &mut [u8]) -> Option<usize> {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let s = &tmp[i..];
    out.get_mut(..s.len())?.copy_from_slice(s);
    Some(s.len())
}

/// Writes a budget of `budget` ns in `format` into `out`, rounded down to the format's
/// unit; returns the number of bytes written (ASCII, no terminator).
///
/// - `grpc-timeout`: the finest unit (`n`, `u`, `m`, `S`, `M`, `H`) whose value fits in
///   8 digits, so the rounding loses less than one part in 10^7.
/// - milliseconds: `floor(budget / 1 ms)`.
///
/// A budget above [`MAX_BUDGET`] is written as [`MAX_BUDGET`]. A value that would be
/// written as 0 is [`FormatError::Exhausted`]; a short `out` is
/// [`FormatError::BufferTooSmall`]; nothing is written on failure.
///
/// ```
/// use surgeguard_core::deadline::{format_budget, HeaderFormat};
/// let mut buf = [0u8; 16];
/// let n = format_budget(HeaderFormat::GrpcTimeout, 1_500_000_000, &mut buf).unwrap();
/// assert_eq!(&buf[..n], b"1500000u");
/// let n = format_budget(HeaderFormat::Millis, 1_500_999_999, &mut buf).unwrap();
/// assert_eq!(&buf[..n], b"1500");
/// ```
pub fn format_budget(
    format: HeaderFormat,
    budget: u64,
    out: &mut [u8],
) -> Result<usize, FormatError> {
    let budget = budget.min(MAX_BUDGET);
    let (value, unit) = match format {
        HeaderFormat::Millis => (budget / MS, None),
        HeaderFormat::GrpcTimeout => {
            let mut pick = (budget / HOUR, b'H');
            for (per, u) in [(1, b'n'), (US, b'u'), (MS, b'm'), (SEC, b'S'), (60 * SEC, b'M')] {
                if budget / per <= GRPC_MAX_VALUE {
                    pick = (budget / per, u);
                    break;
                }
            }
            (pick.0, Some(pick.1))
        }
    };
    if value == 0 {
        return Err(FormatError::Exhausted);
    }
    let mut tmp = [0u8; MAX_FORMATTED_LEN];
    let mut len = write_decimal(value, &mut tmp).ok_or(FormatError::BufferTooSmall)?;
    if let Some(u) = unit {
        *tmp.get_mut(len).ok_or(FormatError::BufferTooSmall)? = u;
        len += 1;
    }
    out.get_mut(..len).ok_or(FormatError::BufferTooSmall)?.copy_from_slice(&tmp[..len]);
    Ok(len)
}

/// Writes the outgoing header value for a request whose deadline is `deadline`:
/// [`remaining`]`(deadline, now, margin)` formatted by [`format_budget`].
///
/// ```
/// use surgeguard_core::deadline::{format_deadline, FormatError, HeaderFormat};
/// let mut buf = [0u8; 16];
/// let n = format_deadline(HeaderFormat::Millis, 1_000_000_000, 200_000_000, 50_000_000, &mut buf);
/// assert_eq!(&buf[..n.unwrap()], b"750");
/// assert_eq!(
///     format_deadline(HeaderFormat::Millis, 100, 200, 0, &mut buf),
///     Err(FormatError::Exhausted)
/// );
/// ```
pub fn format_deadline(
    format: HeaderFormat,
    deadline: u64,
    now: u64,
    margin: u64,
    out: &mut [u8],
) -> Result<usize, FormatError> {
    format_budget(format, remaining(deadline, now, margin)?, out)
}

/// A formatted header value held inline (no allocation), for callers without a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderValue {
    buf: [u8; MAX_FORMATTED_LEN],
    len: u8,
}

impl HeaderValue {
    /// [`format_budget`] into an inline buffer.
    pub fn of_budget(format: HeaderFormat, budget: u64) -> Result<Self, FormatError> {
        let mut buf = [0u8; MAX_FORMATTED_LEN];
        let len = format_budget(format, budget, &mut buf)?;
        Ok(Self { buf, len: len as u8 })
    }

    /// [`format_deadline`] into an inline buffer.
    pub fn of_deadline(
        format: HeaderFormat,
        deadline: u64,
        now: u64,
        margin: u64,
    ) -> Result<Self, FormatError> {
        Self::of_budget(format, remaining(deadline, now, margin)?)
    }

    /// The value's bytes (ASCII).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The value as text.
    pub fn as_str(&self) -> &str {
        // The formatter writes only ASCII digits and unit letters.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl fmt::Display for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::borrow::ToOwned;

    #[test]
    fn grpc_timeout_follows_the_wire_format() {
        assert_eq!(parse_grpc_timeout(b"1H"), Ok(HOUR));
        assert_eq!(parse_grpc_timeout(b"60M"), Ok(HOUR));
        assert_eq!(parse_grpc_timeout(b"3S"), Ok(3 * SEC));
        assert_eq!(parse_grpc_timeout(b"250m"), Ok(250 * MS));
        assert_eq!(parse_grpc_timeout(b"7u"), Ok(7 * US));
        assert_eq!(parse_grpc_timeout(b"99999999n"), Ok(99_999_999));
        assert_eq!(parse_grpc_timeout(b"0n"), Ok(0));
        assert_eq!(parse_grpc_timeout(b"00000001S"), Ok(SEC));
        assert_eq!(parse_grpc_timeout(b" 1S\t"), Ok(SEC));
        for bad in [
            &b""[..],
            b"S",
            b"1",
            b"1s",
            b"1 S",
            b"1.5S",
            b"+1S",
            b"1SS",
            b"123456789n",
            b"1e3m",
            b"-",
            b"-S",
            b"\xff\xfeS",
        ] {
            assert_eq!(parse_grpc_timeout(bad), Err(HeaderError::Malformed), "{bad:?}");
        }
        assert_eq!(parse_grpc_timeout(b"-1S"), Err(HeaderError::Negative));
        assert_eq!(parse_grpc_timeout(b"2H"), Err(HeaderError::TooLarge));
        assert_eq!(parse_grpc_timeout(b"3601S"), Err(HeaderError::TooLarge));
        assert_eq!(parse_grpc_timeout(b"99999999H"), Err(HeaderError::TooLarge));
    }

    #[test]
    fn millis_are_whole_milliseconds() {
        assert_eq!(parse_millis(b"0"), Ok(0));
        assert_eq!(parse_millis(b"250"), Ok(250 * MS));
        assert_eq!(parse_millis(b"3600000"), Ok(HOUR));
        assert_eq!(parse_millis(b"3600001"), Err(HeaderError::TooLarge));
        assert_eq!(parse_millis(b"99999999999999999999999999"), Err(HeaderError::TooLarge));
        assert_eq!(parse_millis(b"-1"), Err(HeaderError::Negative));
        for bad in [&b""[..], b" ", b"1.5", b"+1", b"1ms", b"0x10", b"1,000", b"-", b"--1"] {
            assert_eq!(parse_millis(bad), Err(HeaderError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn the_name_picks_the_format() {
        assert_eq!(HeaderFormat::for_name(b"GRPC-TIMEOUT"), HeaderFormat::GrpcTimeout);
        assert_eq!(HeaderFormat::for_name(b"x-envoy-expected-rq-timeout-ms"), HeaderFormat::Millis);
        assert_eq!(HeaderFormat::for_name(b"my-deadline"), HeaderFormat::Millis);
        assert_eq!(parse_header(b"grpc-timeout", b"250"), Err(HeaderError::Malformed));
        assert_eq!(parse_header(b"surgeguard-timeout-ms", b"250m"), Err(HeaderError::Malformed));
    }

    #[test]
    fn the_smallest_valid_budget_wins() {
        let mut b = Budgets::new();
        assert_eq!(b.budget(), None);
        assert_eq!(b.add(Err(HeaderError::Negative)), Some(HeaderError::Negative));
        assert_eq!(b.budget(), None);
        b.add(Ok(5));
        b.add(Ok(9));
        b.add(Err(HeaderError::TooLarge));
        assert_eq!(b.budget(), Some(5));
        b.add(Ok(0));
        assert_eq!(b.budget(), Some(0));
    }

    #[test]
    fn a_header_sent_twice_reads_as_its_smallest_valid_value() {
        let ms = |v: &[u8]| parse_header(b"surgeguard-timeout-ms", v);
        assert_eq!(ms(b"250, 100"), Ok(100 * MS));
        assert_eq!(ms(b"100,250"), Ok(100 * MS));
        assert_eq!(ms(b" 7 ,\t9\t"), Ok(7 * MS));
        assert_eq!(ms(b"oops, 100"), Ok(100 * MS));
        assert_eq!(ms(b"3600001,5"), Ok(5 * MS));
        assert_eq!(ms(b"100,"), Ok(100 * MS));
        assert_eq!(ms(b"0,100"), Ok(0));
        // No valid item: the first item's reason.
        assert_eq!(ms(b"-5, oops"), Err(HeaderError::Negative));
        assert_eq!(ms(b"oops,-5"), Err(HeaderError::Malformed));
        assert_eq!(ms(b"3600001, 3600002"), Err(HeaderError::TooLarge));
        assert_eq!(ms(b","), Err(HeaderError::Malformed));
        assert_eq!(ms(b""), Err(HeaderError::Malformed));
        let grpc = |v: &[u8]| parse_header(b"grpc-timeout", v);
        assert_eq!(grpc(b"2S, 250m"), Ok(250 * MS));
        assert_eq!(grpc(b"1.5S,1S"), Ok(SEC));
        // A value without a comma reads as one value.
        for v in [&b"250"[..], b" 1S ", b"-1S", b"1e3", b"3600001"] {
            assert_eq!(parse_list(HeaderFormat::Millis, v), parse(HeaderFormat::Millis, v));
            assert_eq!(
                parse_list(HeaderFormat::GrpcTimeout, v),
                parse(HeaderFormat::GrpcTimeout, v)
            );
        }
    }

    #[test]
    fn lines_kept_apart_read_as_the_lines_joined() {
        let name = b"x-envoy-expected-rq-timeout-ms";
        let cases: [&[&[u8]]; 7] = [
            &[],
            &[b"250"],
            &[b"250", b"100"],
            &[b"oops", b"100"],
            &[b"-5", b"oops"],
            &[b"oops, -5", b"7"],
            &[b"", b""],
        ];
        for lines in cases {
            let joined: std::vec::Vec<u8> = lines.join(&b", "[..]);
            let expect = (!lines.is_empty()).then(|| parse_header(name, &joined));
            assert_eq!(parse_header_lines(name, lines.iter().copied()), expect, "{lines:?}");
        }
    }

    #[test]
    fn deadlines_saturate_at_max_now() {
        assert_eq!(deadline_at(10, 5), Ok(15));
        assert_eq!(deadline_at(MAX_NOW - 1, HOUR), Ok(MAX_NOW));
        assert_eq!(deadline_at(MAX_NOW, u64::MAX), Ok(MAX_NOW));
        assert_eq!(deadline_at(MAX_NOW + 1, 0), Err(crate::UsageError::TimeOutOfRange));
    }

    #[test]
    fn outgoing_values_round_down() {
        let f = |fmt, b| HeaderValue::of_budget(fmt, b).map(|v| v.as_str().to_owned());
        let g = HeaderFormat::GrpcTimeout;
        assert_eq!(f(g, 1).as_deref(), Ok("1n"));
        assert_eq!(f(g, 99_999_999).as_deref(), Ok("99999999n"));
        assert_eq!(f(g, 100_000_000).as_deref(), Ok("100000u"));
        assert_eq!(f(g, 100_000_999).as_deref(), Ok("100000u"));
        assert_eq!(f(g, 99_999_999 * US + 999).as_deref(), Ok("99999999u"));
        assert_eq!(f(g, 100 * SEC).as_deref(), Ok("100000m"));
        assert_eq!(f(g, HOUR).as_deref(), Ok("3600000m"));
        assert_eq!(f(g, u64::MAX).as_deref(), Ok("3600000m"));
        assert_eq!(f(g, 0), Err(FormatError::Exhausted));
        let m = HeaderFormat::Millis;
        assert_eq!(f(m, MS - 1), Err(FormatError::Exhausted));
        assert_eq!(f(m, MS).as_deref(), Ok("1"));
        assert_eq!(f(m, 2 * HOUR).as_deref(), Ok("3600000"));
        let mut small = [0u8; 3];
        assert_eq!(format_budget(m, 1234 * MS, &mut small), Err(FormatError::BufferTooSmall));
        assert_eq!(small, [0; 3]);
        assert_eq!(format_budget(m, 123 * MS, &mut small), Ok(3));
        assert_eq!(&small, b"123");
    }

    #[test]
    fn remaining_subtracts_now_and_margin() {
        assert_eq!(remaining(100, 40, 10), Ok(50));
        assert_eq!(remaining(100, 40, 60), Err(FormatError::Exhausted));
        assert_eq!(remaining(100, 200, 0), Err(FormatError::Exhausted));
        assert_eq!(remaining(MAX_NOW, 0, 0), Ok(MAX_BUDGET));
        assert_eq!(remaining(MAX_NOW + 1, 0, 0), Err(FormatError::NoDeadline));
        assert_eq!(remaining(u64::MAX, 0, 0), Err(FormatError::NoDeadline));
        assert_eq!(remaining(100, MAX_NOW + 1, 0), Err(FormatError::TimeOutOfRange));
    }
}
