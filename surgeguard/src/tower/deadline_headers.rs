//! Deadline headers in the tower layers: read on the server ([`GateLayer`](super::GateLayer)),
//! written on the client ([`ClientLayer`](super::ClientLayer)). Parsing and formatting are
//! `surgeguard_core::deadline`'s, so every surgeguard binding reads and writes them alike.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use surgeguard_core::deadline::{
    self as core_deadline, Budgets, FormatError, HeaderError, HeaderFormat,
};
use surgeguard_core::time::MAX_NOW;
use surgeguard_core::{Reason, Rejected};

use crate::clock::monotonic_ns;
use crate::deadline::Deadline;

/// Counters of the deadline headers a [`GateLayer`](super::GateLayer) read. Every
/// ignored header is counted once by reason; the request went on as if it were absent.
///
/// ```
/// use surgeguard::tower::GateLayer;
/// let gate: surgeguard::Gate = surgeguard::Gate::fixed(4.0).unwrap();
/// let layer = GateLayer::new(gate);
/// let m = layer.deadline_metrics();
/// assert_eq!((m.with_deadline, m.malformed, m.negative, m.too_large), (0, 0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadlineMetrics {
    /// Requests served with a deadline from their headers.
    pub with_deadline: u64,
    /// Requests given the server's default budget (no valid header).
    pub defaulted: u64,
    /// Requests whose budget was cut to the server's maximum.
    pub capped: u64,
    /// Ignored headers: not the header's format.
    pub malformed: u64,
    /// Ignored headers: a negative number.
    pub negative: u64,
    /// Ignored headers: a budget above one hour (`surgeguard_core::deadline::MAX_BUDGET`).
    pub too_large: u64,
}

impl DeadlineMetrics {
    /// Ignored headers with `reason`.
    ///
    /// ```
    /// use surgeguard::core::deadline::HeaderError;
    /// let m = surgeguard::tower::DeadlineMetrics::default();
    /// assert_eq!(m.ignored(HeaderError::Malformed), 0);
    /// ```
    pub fn ignored(&self, reason: HeaderError) -> u64 {
        match reason {
            HeaderError::Malformed => self.malformed,
            HeaderError::Negative => self.negative,
            HeaderError::TooLarge => self.too_large,
            _ => 0,
        }
    }

    /// Every ignored header.
    pub fn ignored_total(&self) -> u64 {
        self.malformed + self.negative + self.too_large
    }
}

/// The counters behind [`DeadlineMetrics`] (Relaxed: independent counts, read as a
/// snapshot that may straddle a request).
#[derive(Debug, Default)]
pub(crate) struct DeadlineCounters {
    with_deadline: AtomicU64,
    defaulted: AtomicU64,
    capped: AtomicU64,
    ignored: [AtomicU64; 3],
}

impl DeadlineCounters {
    fn ignore(&self, e: HeaderError) {
        let i = match e {
            HeaderError::Malformed => 0,
            HeaderError::Negative => 1,
            _ => 2,
        };
        self.ignored[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DeadlineMetrics {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DeadlineMetrics {
            with_deadline: r(&self.with_deadline),
            defaulted: r(&self.defaulted),
            capped: r(&self.capped),
            malformed: r(&self.ignored[0]),
            negative: r(&self.ignored[1]),
            too_large: r(&self.ignored[2]),
        }
    }
}

/// What the server reads a request's budget from.
#[derive(Clone, Debug)]
pub(crate) struct ServerDeadlines {
    pub(crate) grpc_timeout: bool,
    pub(crate) standard_headers: bool,
    pub(crate) header: Option<HeaderName>,
    pub(crate) default_budget: Option<Duration>,
    pub(crate) max_budget: Option<Duration>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ServerDeadlines {
    /// The request's budget in ns: the smallest valid deadline header, cut to the maximum,
    /// else the default; every ignored header counted by reason. A header sent on several
    /// lines reads as its lines joined by commas, a list whose smallest valid item wins
    /// (`surgeguard_core::deadline::parse_header_lines`), as in every binding.
    pub(crate) fn budget(&self, headers: &HeaderMap, counters: &DeadlineCounters) -> Option<u64> {
        let mut budgets = Budgets::new();
        let mut read = |name: &str| {
            let lines = headers.get_all(name).into_iter().map(|v| v.as_bytes());
            if let Some(parsed) = core_deadline::parse_header_lines(name.as_bytes(), lines) {
                if let Some(e) = budgets.add(parsed) {
                    counters.ignore(e);
                }
            }
        };
        if self.grpc_timeout {
            read(core_deadline::GRPC_TIMEOUT);
        }
        if self.standard_headers {
            read(core_deadline::ENVOY_EXPECTED_RQ_TIMEOUT_MS);
            read(core_deadline::SURGEGUARD_TIMEOUT_MS);
        }
        if let Some(h) = &self.header {
            read(h.as_str());
        }
        match budgets.budget() {
            Some(b) => {
                counters.with_deadline.fetch_add(1, Ordering::Relaxed);
                match self.max_budget.map(ns) {
                    Some(max) if b > max => {
                        counters.capped.fetch_add(1, Ordering::Relaxed);
                        Some(max)
                    }
                    _ => Some(b),
                }
            }
            None => {
                let d = self.default_budget.map(ns)?;
                counters.defaulted.fetch_add(1, Ordering::Relaxed);
                Some(d)
            }
        }
    }
}

/// How a [`ClientLayer`](super::ClientLayer) propagates the caller's deadline to the
/// next hop. The deadline is the request's [`Deadline`] extension if it has one, else the
/// current one ([`deadline::current`](crate::deadline::current), set by the server layer
/// for the handler); without either nothing is done.
///
/// Per call: `remaining = deadline − now − margin`. If it is below the dependency's
/// `expected_latency` — or nothing is left to write (less than 1 ms for the millisecond
/// header) — the call fails fast with [`ClientError::Rejected`](super::ClientError)
/// (`Expired` once the deadline has passed, else `DeadlineUnmeetable`) and nothing is sent.
/// Otherwise the headers carry `remaining`, rounded down: `surgeguard-timeout-ms` (or the
/// configured name), `grpc-timeout` on gRPC requests, and the extra header if set. A
/// request that already carries a smaller valid value keeps it. The caller waits for the
/// answer until the deadline, no longer ([`enforce`](Self::enforce), on by default, as
/// gRPC clients do): past it the call is dropped and ends as
/// [`ClientError::DeadlineExceeded`](super::ClientError) (an overload signal, `Dropped`).
///
/// Cost per call: a task-local read, one clock read, each value formatted on the stack
/// and copied into the header map, a wait-free counter.
///
/// ```
/// use std::time::Duration;
/// use surgeguard::tower::{ClientDeadlines, ClientLayer};
/// let layer = ClientLayer::new().deadlines(
///     ClientDeadlines::default()
///         .margin(Duration::from_millis(5))
///         .expected_latency(Duration::from_millis(20)),
/// );
/// # drop(layer);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientDeadlines {
    /// Kept back for the trip to the callee and the answer's way back (default 5 ms).
    pub margin: Duration,
    /// The least the dependency needs: a call with less remaining fails fast (default 0).
    pub expected_latency: Duration,
    /// The millisecond header written (default `surgeguard-timeout-ms`); `None`: none.
    pub header: Option<HeaderName>,
    /// Write `grpc-timeout` on gRPC requests (`content-type: application/grpc*`; default
    /// true).
    pub grpc_timeout: bool,
    /// Another millisecond header to write (e.g. `x-envoy-upstream-rq-timeout-ms` toward
    /// an Envoy sidecar; default none).
    pub extra_header: Option<HeaderName>,
    /// Stop waiting for the answer at the deadline (default true). Uses tokio's timer:
    /// the runtime must have it enabled (`#[tokio::main]` does).
    pub enforce: bool,
}

impl Default for ClientDeadlines {
    fn default() -> Self {
        Self {
            margin: Duration::from_millis(5),
            expected_latency: Duration::ZERO,
            header: Some(HeaderName::from_static(core_deadline::SURGEGUARD_TIMEOUT_MS)),
            grpc_timeout: true,
            extra_header: None,
            enforce: true,
        }
    }
}

impl ClientDeadlines {
    /// The margin kept back.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// The dependency's expected latency.
    pub fn expected_latency(mut self, d: Duration) -> Self {
        self.expected_latency = d;
        self
    }

    /// The millisecond header written (`None`: none). Panics on an invalid name (a
    /// programming error, caught at startup).
    ///
    /// ```
    /// let c = surgeguard::tower::ClientDeadlines::default().header(Some("x-timeout-ms"));
    /// assert_eq!(c.header.unwrap(), "x-timeout-ms");
    /// ```
    pub fn header(mut self, name: Option<&'static str>) -> Self {
        self.header = name.map(HeaderName::from_static);
        self
    }

    /// Whether `grpc-timeout` is written on gRPC requests.
    pub fn grpc_timeout(mut self, on: bool) -> Self {
        self.grpc_timeout = on;
        self
    }

    /// Whether the caller stops waiting at the deadline.
    ///
    /// ```
    /// let c = surgeguard::tower::ClientDeadlines::default().enforce(false);
    /// assert!(!c.enforce);
    /// ```
    pub fn enforce(mut self, on: bool) -> Self {
        self.enforce = on;
        self
    }

    /// Another millisecond header to write. Panics on an invalid name.
    pub fn extra_header(mut self, name: &'static str) -> Self {
        self.extra_header = Some(HeaderName::from_static(name));
        self
    }

    /// Checks the budget of an outgoing request and writes its headers, or says why it
    /// must not be sent. `Ok(Some(deadline))`: wait for the answer until then.
    pub(crate) fn apply<B>(
        &self,
        req: &mut http::Request<B>,
        counters: &ClientDeadlineCounters,
    ) -> Result<Option<Deadline>, Rejected> {
        let Some(d) = req.extensions().get::<Deadline>().copied().or_else(crate::deadline::current)
        else {
            return Ok(None);
        };
        if d.as_ns() >= MAX_NOW {
            return Ok(None); // "never": no header
        }
        let now = monotonic_ns();
        let refuse = |reason| {
            counters.failed_fast.fetch_add(1, Ordering::Relaxed);
            Err(Rejected::new(reason, 0))
        };
        if d.is_expired_at(now) {
            return refuse(Reason::Expired);
        }
        let left = match core_deadline::remaining(d.as_ns(), now, ns(self.margin)) {
            Ok(left) => left,
            Err(FormatError::Exhausted) => return refuse(Reason::DeadlineUnmeetable),
            Err(_) => return Ok(None), // no deadline
        };
        if left < ns(self.expected_latency) {
            return refuse(Reason::DeadlineUnmeetable);
        }
        let grpc = self.grpc_timeout
            && req
                .headers()
                .get(CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
        let mut names: [Option<HeaderName>; 3] = [
            self.header.clone(),
            self.extra_header.clone(),
            grpc.then(|| HeaderName::from_static(core_deadline::GRPC_TIMEOUT)),
        ];
        let headers = req.headers_mut();
        // Format every value before writing any: a refusal changes nothing.
        let mut values: [Option<HeaderValue>; 3] = [None, None, None];
        for (name, value) in names.iter().zip(values.iter_mut()) {
            let Some(name) = name else { continue };
            // A smaller valid budget already on the request stands.
            let lines = headers.get_all(name).into_iter().map(|v| v.as_bytes());
            let kept = core_deadline::parse_header_lines(name.as_str().as_bytes(), lines)
                .and_then(Result::ok);
            let budget = kept.map_or(left, |k| k.min(left));
            let format = HeaderFormat::for_name(name.as_str().as_bytes());
            match core_deadline::HeaderValue::of_budget(format, budget) {
                Ok(v) => *value = HeaderValue::from_bytes(v.as_bytes()).ok(),
                Err(_) => return refuse(Reason::DeadlineUnmeetable), // under 1 ms
            }
        }
        for (name, value) in names.iter_mut().zip(values) {
            if let (Some(name), Some(value)) = (name.take(), value) {
                headers.insert(name, value);
            }
        }
        counters.propagated.fetch_add(1, Ordering::Relaxed);
        Ok(self.enforce.then_some(d))
    }
}

/// Counters of a [`ClientLayer`](super::ClientLayer)'s deadline propagation.
///
/// ```
/// let layer = surgeguard::tower::ClientLayer::new().deadlines(Default::default());
/// assert_eq!(layer.deadline_metrics().failed_fast, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientDeadlineMetrics {
    /// Calls sent with the deadline headers.
    pub propagated: u64,
    /// Calls refused locally: too little of the caller's budget was left.
    pub failed_fast: u64,
    /// Calls given up at the deadline, the answer not in yet.
    pub timed_out: u64,
}

#[derive(Default)]
pub(crate) struct ClientDeadlineCounters {
    propagated: AtomicU64,
    failed_fast: AtomicU64,
    pub(crate) timed_out: AtomicU64,
}

impl ClientDeadlineCounters {
    pub(crate) fn snapshot(&self) -> ClientDeadlineMetrics {
        ClientDeadlineMetrics {
            propagated: self.propagated.load(Ordering::Relaxed),
            failed_fast: self.failed_fast.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for ClientDeadlineCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.snapshot().fmt(f)
    }
}
