//! Actionable rejections: the HTTP status, `Retry-After` and JSON body every binding's
//! middleware sends, built here once so they are byte-identical everywhere.
//!
//! A rejection a client — or an AI agent — can act on says who refused (429 for this key,
//! 503 for the whole service), when to come back (`Retry-After`), and not to retry sooner;
//! a user-facing edge turns backpressure into a fast 429/503 instead of a slow timeout.

use core::fmt::{self, Write};

use crate::time::SEC;
use crate::{Reason, Rejected};

/// A buffer of this many bytes always holds the body written by
/// [`Actionable::write_json`] (the longest reason and a 20-digit `retry_after_s`).
pub const MAX_BODY_LEN: usize = 160;

/// HTTP status for a per-key refusal (RFC 6585 Too Many Requests).
pub const STATUS_TOO_MANY_REQUESTS: u16 = 429;
/// HTTP status for global overload (RFC 9110 Service Unavailable).
pub const STATUS_SERVICE_UNAVAILABLE: u16 = 503;

/// True for the reasons that refuse one key ([`Reason::KeyLimit`], [`Reason::KeyRate`]):
/// the caller should slow down. False for global overload: everybody should.
pub const fn is_per_key(reason: Reason) -> bool {
    matches!(reason, Reason::KeyLimit | Reason::KeyRate)
}

/// `retry_after` (ns) as whole seconds for `Retry-After`: rounded up, and at least 1 so a
/// refusal never invites an immediate retry.
pub const fn retry_after_secs(retry_after_ns: u64) -> u64 {
    let s = retry_after_ns / SEC + (retry_after_ns % SEC != 0) as u64;
    if s == 0 {
        1
    } else {
        s
    }
}

/// What an HTTP edge answers for a [`Rejected`]: status, `Retry-After` and a small JSON body.
///
/// ```
/// use surgeguard_core::keyed::{actionable, MAX_BODY_LEN};
/// use surgeguard_core::{Reason, Rejected};
///
/// let a = actionable(&Rejected::new(Reason::KeyRate, 29_400_000_000)); // 29.4 s
/// assert_eq!((a.status, a.retry_after_s), (429, 30));
/// let mut buf = [0u8; MAX_BODY_LEN];
/// let n = a.write_json(&mut buf).unwrap();
/// assert_eq!(
///     &buf[..n],
///     br#"{"error": "too many requests", "reason": "key_rate", "retry_after_s": 30, "retry": "not before retry_after_s"}"#
/// );
/// assert_eq!(actionable(&Rejected::new(Reason::LimitReached, 0)).status, 503);
/// ```
///
/// Progress: not shared (a plain value). Cost: a few integer operations; `write_json`
/// formats about 100 bytes, twice when it succeeds (once to measure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Actionable {
    /// 429 for a per-key reason, 503 for global overload.
    pub status: u16,
    /// The `Retry-After` header value: seconds, rounded up, at least 1.
    pub retry_after_s: u64,
    /// Why, as [`Reason::as_str`] names it in the body.
    pub reason: Reason,
}

/// The actionable answer for `rejected`.
pub const fn actionable(rejected: &Rejected) -> Actionable {
    let per_key = is_per_key(rejected.reason);
    Actionable {
        status: if per_key { STATUS_TOO_MANY_REQUESTS } else { STATUS_SERVICE_UNAVAILABLE },
        retry_after_s: retry_after_secs(rejected.retry_after),
        reason: rejected.reason,
    }
}

/// The output buffer was too small; nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the body needs.
    pub needed: usize,
}

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "buffer too small: the body needs {} bytes", self.needed)
    }
}

impl Actionable {
    /// The body's `error` text: `"too many requests"` (429) or `"service overloaded"` (503).
    pub const fn error(&self) -> &'static str {
        if is_per_key(self.reason) {
            "too many requests"
        } else {
            "service overloaded"
        }
    }

    /// Writes the body
    /// `{"error": …, "reason": …, "retry_after_s": …, "retry": "not before retry_after_s"}`
    /// (UTF-8, no trailing newline) into `out` and returns its length; on
    /// [`BufferTooSmall`] nothing is written. [`MAX_BODY_LEN`] bytes always suffice.
    pub fn write_json(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut count = Sink { out: &mut [], len: 0 };
        let _ = self.format(&mut count);
        if count.len > out.len() {
            return Err(BufferTooSmall { needed: count.len });
        }
        let mut sink = Sink { out, len: 0 };
        let _ = self.format(&mut sink);
        Ok(sink.len)
    }

    fn format(&self, w: &mut Sink<'_>) -> fmt::Result {
        // Every string here is a fixed ASCII literal without quotes or backslashes, so no
        // JSON escaping is needed.
        write!(
            w,
            r#"{{"error": "{}", "reason": "{}", "retry_after_s": {}, "retry": "not before retry_after_s"}}"#,
            self.error(),
            self.reason.as_str(),
            self.retry_after_s
        )
    }
}

/// Writes what fits and counts everything.
struct Sink<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Write for Sink<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if let Some(dst) = self.out.get_mut(self.len..end) {
            dst.copy_from_slice(s.as_bytes());
        }
        self.len = end;
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::string::String;

    #[test]
    fn statuses_and_seconds() {
        for r in Reason::ALL {
            let a = actionable(&Rejected::new(r, 1));
            let per_key = matches!(r, Reason::KeyLimit | Reason::KeyRate);
            assert_eq!(a.status, if per_key { 429 } else { 503 }, "{r}");
            assert_eq!(a.retry_after_s, 1);
        }
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(SEC), 1);
        assert_eq!(retry_after_secs(SEC + 1), 2);
        assert_eq!(retry_after_secs(30 * SEC), 30);
        assert_eq!(retry_after_secs(u64::MAX), u64::MAX / SEC + 1);
    }

    #[test]
    #[cfg_attr(all(miri, not(sg_miri_full)), ignore = "slow under Miri; make miri-full runs it")]
    fn body_is_valid_json_and_fits_the_max() {
        for r in Reason::ALL {
            for ns in [0, 1, 1_500_000_000, u64::MAX] {
                let a = actionable(&Rejected::new(r, ns));
                let mut buf = [0xffu8; MAX_BODY_LEN];
                let n = a.write_json(&mut buf).unwrap();
                let body = core::str::from_utf8(&buf[..n]).unwrap();
                let expect = std::format!(
                    "{{\"error\": \"{}\", \"reason\": \"{}\", \"retry_after_s\": {}, \"retry\": \"not before retry_after_s\"}}",
                    a.error(),
                    r.as_str(),
                    a.retry_after_s
                );
                assert_eq!(body, expect);
                assert!(buf[n..].iter().all(|&b| b == 0xff));
                // Too small by one: an error naming the size, and nothing written.
                let mut small = std::vec![0u8; n - 1];
                assert_eq!(a.write_json(&mut small), Err(BufferTooSmall { needed: n }));
                assert!(small.iter().all(|&b| b == 0));
            }
        }
        let mut s = String::new();
        let _ = write!(s, "{}", BufferTooSmall { needed: 3 });
        assert!(s.contains('3'));
    }
}
