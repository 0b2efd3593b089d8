//! tower layers (feature `tower`): overload control for axum, hyper and tonic servers, and
//! a retry policy for clients.
//!
//! - [`GateLayer`]: every request passes a [`Gate`] — adaptive concurrency, the priority
//!   queue (CoDel, deadlines) and shedding. A refused request is answered at once, without
//!   calling the service: HTTP `503` with `Retry-After` and a small JSON body (the body
//!   every surgeguard binding writes), or for gRPC (`content-type: application/grpc*`) a
//!   trailers-only `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`. The priority comes
//!   from a [`Priority`] request extension, else the `x-request-priority` header
//!   (`critical`, `normal`, `background` or a level number), else the configured default.
//!   **Deadlines:** the caller's remaining budget comes from `grpc-timeout`,
//!   `x-envoy-expected-rq-timeout-ms`, `surgeguard-timeout-ms` (the project's own header:
//!   whole milliseconds) and a header you name; the smallest valid one wins, cut to the
//!   server's maximum, else the server's default. It becomes an absolute deadline at
//!   arrival: the gate refuses at once a deadline it cannot meet and drops a waiter whose
//!   time ran out, and the handler reads it with [`deadline::remaining`]. A malformed,
//!   negative or absurd (above one hour) header is ignored and counted by reason
//!   ([`GateLayer::deadline_metrics`]); it never fails the request.
//! - [`ClientLayer`] with [`ClientDeadlines`]: passes the deadline on to the next hop
//!   (minus a margin) and fails fast when too little of it is left.
//! - [`KeyedLayer`]: per-key (tenant, API key, agent) caps with a key extractor, answering
//!   `429` + `Retry-After` + the same JSON body.
//! - [`ClientLayer`]: for outbound calls, deadline propagation, an adaptive limiter, a
//!   circuit breaker and the adaptive client-side throttle, refusing locally with
//!   [`ClientError::Rejected`].
//! - [`RetryPolicy`]: a tower retry [`Policy`](::tower::retry::Policy) backed by a
//!   [`RetryBudget`] (retries are at most a share of traffic) and a [`Backoff`] that never
//!   retries sooner than the server's `Retry-After` / `grpc-retry-pushback-ms`, nor when
//!   the backoff would outlast the request's deadline.
//!
//! The response's status decides how the permit ends: `429`, `503` and `504` (and gRPC
//! `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, `DEADLINE_EXCEEDED` in the headers) and service
//! errors are `Dropped` (an overload signal from below), other `4xx` are `Ignored`,
//! everything else is `Success`, timed to the response head. A request whose future is
//! dropped (the client went away) ends as `Dropped` if it held its permit longer than the
//! p99 latency of the limiter's last window (its client most likely timed out), else as
//! `Ignored`.
//!
//! ```
//! use std::convert::Infallible;
//! use surgeguard::tower::GateLayer;
//! use surgeguard::Gate;
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let gate: Gate = Gate::new(Default::default()).unwrap();
//! let svc = GateLayer::new(gate).layer(service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::from("hello")))
//! }));
//! let res = svc.oneshot(http::Request::new(String::new())).await.unwrap();
//! assert_eq!(res.status(), 200);
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use surgeguard_core::backoff::{Backoff, BackoffConfig};
use surgeguard_core::keyed::{MAX_BODY_LEN, actionable};
use surgeguard_core::retry::{RetryBudget, RetryBudgetConfig};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::time::MS;
use surgeguard_core::{ConfigError, Outcome, Priority, Reason, Rejected};
use tower_layer::Layer;
use tower_service::Service;

use crate::Gate;
use crate::clock::{Clock, MonotonicClock};
use crate::deadline::{self, Deadline};

mod client;
mod deadline_headers;
mod keyed;

pub use client::{ClientError, ClientLayer, ClientService};
pub use deadline_headers::{ClientDeadlineMetrics, ClientDeadlines, DeadlineMetrics};
use deadline_headers::{DeadlineCounters, ServerDeadlines};
pub use keyed::{HeaderKey, KeyExtractor, KeyedLayer, KeyedService};

/// The header the priority is read from by default (`critical`, `normal`, `background`,
/// or a level number).
pub const PRIORITY_HEADER: &str = "x-request-priority";
/// gRPC status `RESOURCE_EXHAUSTED` (gRPC status codes).
pub const GRPC_RESOURCE_EXHAUSTED: u32 = 8;
/// The gRPC retry-pushback header (gRPC proposal A6, client retries).
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// How a [`GateLayer`] reads requests. Grows without breaking users: build it with
/// `ServerConfig::default()` and the setters.
///
/// The request's deadline is `arrival + budget`: on the gate's clock for the queue, and on
/// the monotonic clock for the handler's [`deadline::current`] (the two are the same
/// clock unless the gate runs on a test clock).
///
/// ```
/// use std::time::Duration;
/// use surgeguard::tower::ServerConfig;
/// use surgeguard::Priority;
///
/// let cfg = ServerConfig::default()
///     .default_priority(Priority::BACKGROUND)
///     .queue_timeout(Some(Duration::from_millis(200)))
///     .priority_header("x-priority");
/// # drop(cfg);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Header carrying the priority (default [`PRIORITY_HEADER`]); `None`: extensions only.
    pub priority_header: Option<HeaderName>,
    /// Priority of a request that names none (default `normal`).
    pub default_priority: Priority,
    /// Longest wait in the queue (the request's own deadline applies too, whichever is
    /// earlier); `None` (default): until granted, or dropped by the deadline, CoDel,
    /// eviction or the shed switch.
    pub queue_timeout: Option<Duration>,
    /// Read `grpc-timeout` as the request's budget (default true).
    pub grpc_timeout: bool,
    /// Read `x-envoy-expected-rq-timeout-ms` and `surgeguard-timeout-ms` (default true).
    pub deadline_headers: bool,
    /// One more header carrying the budget (whole milliseconds; gRPC's format if it is
    /// named `grpc-timeout`); default none.
    pub deadline_header: Option<HeaderName>,
    /// The budget of a request without a valid deadline header (default none: no
    /// deadline).
    pub default_budget: Option<Duration>,
    /// The most budget a caller may grant a request (default none: up to the headers' own
    /// cap of one hour). A longer one is cut to it (counted as `capped`); zero would
    /// refuse every request that carries a deadline header.
    pub max_budget: Option<Duration>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            priority_header: Some(HeaderName::from_static(PRIORITY_HEADER)),
            default_priority: Priority::NORMAL,
            queue_timeout: None,
            grpc_timeout: true,
            deadline_headers: true,
            deadline_header: None,
            default_budget: None,
            max_budget: None,
        }
    }
}

impl ServerConfig {
    /// Reads the priority from header `name` (panics on a name that is not a valid header
    /// name: a programming error, caught at startup).
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default().priority_header("x-prio");
    /// assert_eq!(cfg.priority_header.unwrap().as_str(), "x-prio");
    /// ```
    pub fn priority_header(mut self, name: &'static str) -> Self {
        self.priority_header = Some(HeaderName::from_static(name));
        self
    }

    /// Ignores priority headers (extensions only).
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default().no_priority_header();
    /// assert!(cfg.priority_header.is_none());
    /// ```
    pub fn no_priority_header(mut self) -> Self {
        self.priority_header = None;
        self
    }

    /// The priority of requests that name none.
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default()
    ///     .default_priority(surgeguard::Priority::CRITICAL);
    /// # drop(cfg);
    /// ```
    pub fn default_priority(mut self, p: Priority) -> Self {
        self.default_priority = p;
        self
    }

    /// The longest queue wait of a request without its own deadline.
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default()
    ///     .queue_timeout(Some(std::time::Duration::from_millis(100)));
    /// # drop(cfg);
    /// ```
    pub fn queue_timeout(mut self, t: Option<Duration>) -> Self {
        self.queue_timeout = t;
        self
    }

    /// Whether `grpc-timeout` sets the deadline.
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default().grpc_timeout(false);
    /// # drop(cfg);
    /// ```
    pub fn grpc_timeout(mut self, on: bool) -> Self {
        self.grpc_timeout = on;
        self
    }

    /// Whether `x-envoy-expected-rq-timeout-ms` and `surgeguard-timeout-ms` set the
    /// budget.
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default().deadline_headers(false);
    /// assert!(!cfg.deadline_headers);
    /// ```
    pub fn deadline_headers(mut self, on: bool) -> Self {
        self.deadline_headers = on;
        self
    }

    /// Reads the budget from header `name` as well (panics on an invalid header name: a
    /// programming error, caught at startup).
    ///
    /// ```
    /// let cfg = surgeguard::tower::ServerConfig::default().deadline_header("x-budget-ms");
    /// assert_eq!(cfg.deadline_header.unwrap(), "x-budget-ms");
    /// ```
    pub fn deadline_header(mut self, name: &'static str) -> Self {
        self.deadline_header = Some(HeaderName::from_static(name));
        self
    }

    /// The budget of requests without a valid deadline header.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = surgeguard::tower::ServerConfig::default().default_budget(Some(Duration::from_secs(2)));
    /// # drop(cfg);
    /// ```
    pub fn default_budget(mut self, budget: Option<Duration>) -> Self {
        self.default_budget = budget;
        self
    }

    /// The most budget a caller may grant.
    ///
    /// ```
    /// use std::time::Duration;
    /// let cfg = surgeguard::tower::ServerConfig::default().max_budget(Some(Duration::from_secs(10)));
    /// # drop(cfg);
    /// ```
    pub fn max_budget(mut self, budget: Option<Duration>) -> Self {
        self.max_budget = budget;
        self
    }

    fn deadlines(&self) -> ServerDeadlines {
        ServerDeadlines {
            grpc_timeout: self.grpc_timeout,
            standard_headers: self.deadline_headers,
            header: self.deadline_header.clone(),
            default_budget: self.default_budget,
            max_budget: self.max_budget,
        }
    }
}

/// Parses a `grpc-timeout` value (gRPC over HTTP/2: 1–8 digits and a unit `H`, `M`, `S`,
/// `m`, `u`, `n`) into nanoseconds; `None` if malformed, negative or above one hour
/// (`surgeguard_core::deadline::parse_grpc_timeout` says which).
///
/// ```
/// use surgeguard::tower::parse_grpc_timeout;
/// assert_eq!(parse_grpc_timeout("250m"), Some(250_000_000));
/// assert_eq!(parse_grpc_timeout("1H"), Some(3_600_000_000_000));
/// assert_eq!(parse_grpc_timeout("123456789S"), None); // more than 8 digits
/// assert_eq!(parse_grpc_timeout("-1S"), None);
/// assert_eq!(parse_grpc_timeout("2H"), None); // absurd: ignored, never unbounded
/// ```
pub fn parse_grpc_timeout(v: &str) -> Option<u64> {
    surgeguard_core::deadline::parse_grpc_timeout(v.as_bytes()).ok()
}

/// The request's priority: a [`Priority`] extension, else the header (a name or a level
/// number 0–7), else `default`.
fn priority_of<B>(req: &Request<B>, cfg: &ServerConfig) -> Priority {
    if let Some(p) = req.extensions().get::<Priority>() {
        return *p;
    }
    let from_header = cfg.priority_header.as_ref().and_then(|h| {
        let v = req.headers().get(h)?.to_str().ok()?.trim();
        Priority::from_name(v).or_else(|| Priority::new(v.parse::<u8>().ok()?))
    });
    from_header.unwrap_or(cfg.default_priority)
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers().get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

pin_project_lite::pin_project! {
    /// The response body of the layers: the inner service's body, or the small body of a
    /// refusal (the JSON of an HTTP refusal; empty for gRPC). An [`http_body::Body`]
    /// whenever the inner body is one, so axum, hyper and tonic take it as is.
    ///
    /// ```
    /// use surgeguard::tower::GuardBody;
    /// let b: GuardBody<String> = GuardBody::inner(String::from("hi"));
    /// assert!(b.rejection().is_none());
    /// ```
    pub struct GuardBody<B> {
        // The service's own body (None for a refusal).
        #[pin]
        body: Option<B>,
        // A refusal's bytes, until polled.
        rejection: Option<Bytes>,
    }
}

impl<B> GuardBody<B> {
    /// Wraps the service's body.
    ///
    /// ```
    /// let b = surgeguard::tower::GuardBody::inner(String::from("x"));
    /// # drop(b);
    /// ```
    pub fn inner(body: B) -> Self {
        Self { body: Some(body), rejection: None }
    }

    fn refusal(bytes: Option<Bytes>) -> Self {
        Self { body: None, rejection: bytes }
    }

    /// The refusal's body, if this is one with a body (and it was not polled yet).
    ///
    /// ```
    /// use surgeguard::{tower::rejection_response, Reason, Rejected};
    /// let res = rejection_response::<String>(&Rejected::new(Reason::Shed, 1), false);
    /// assert!(res.body().rejection().unwrap().starts_with(b"{\"error\""));
    /// ```
    pub fn rejection(&self) -> Option<&[u8]> {
        self.rejection.as_deref()
    }
}

impl<B: fmt::Debug> fmt::Debug for GuardBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardBody")
            .field("body", &self.body)
            .field("rejection", &self.rejection)
            .finish()
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for GuardBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        let this = self.project();
        match this.body.as_pin_mut() {
            Some(body) => body.poll_frame(cx),
            None => Poll::Ready(
                this.rejection
                    .take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(http_body::Frame::data(b))),
            ),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Some(body) => body.is_end_stream(),
            None => self.rejection.as_ref().is_none_or(|b| b.is_empty()),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.body {
            Some(body) => body.size_hint(),
            None => http_body::SizeHint::with_exact(
                self.rejection.as_ref().map_or(0, |b| b.len() as u64),
            ),
        }
    }
}

/// The answer to a refused request (see the module docs).
///
/// ```
/// use surgeguard::{Reason, Rejected};
/// use surgeguard::tower::rejection_response;
/// let res = rejection_response::<String>(&Rejected::new(Reason::QueueFull, 1_500_000_000), false);
/// assert_eq!(res.status(), 503);
/// assert_eq!(res.headers()["retry-after"], "2");
/// let body = std::str::from_utf8(res.body().rejection().unwrap()).unwrap();
/// assert!(body.contains("\"reason\": \"queue_full\""));
/// let grpc = rejection_response::<String>(&Rejected::new(Reason::Shed, 250_000_000), true);
/// assert_eq!(grpc.headers()["grpc-status"], "8");
/// assert_eq!(grpc.headers()["grpc-retry-pushback-ms"], "250");
/// ```
pub fn rejection_response<B>(r: &Rejected, grpc: bool) -> Response<GuardBody<B>> {
    let a = actionable(r);
    if grpc {
        let mut res = Response::new(GuardBody::refusal(None));
        let h = res.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from(GRPC_RESOURCE_EXHAUSTED));
        h.insert("grpc-message", HeaderValue::from_static(r.reason.as_str()));
        h.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(r.retry_after.div_ceil(MS)));
        return res;
    }
    let mut buf = [0u8; MAX_BODY_LEN];
    let n = a.write_json(&mut buf).unwrap_or(0);
    let body = Bytes::copy_from_slice(&buf[..n]);
    let mut res = Response::new(GuardBody::refusal(Some(body)));
    *res.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(RETRY_AFTER, HeaderValue::from(a.retry_after_s));
    res
}

/// How a response ends its permit (see the module docs).
///
/// ```
/// use surgeguard::{tower::outcome_of, Outcome};
/// let r = http::Response::builder().status(503).body(()).unwrap();
/// assert_eq!(outcome_of(&r), Outcome::Dropped);
/// let r = http::Response::builder().status(404).body(()).unwrap();
/// assert_eq!(outcome_of(&r), Outcome::Ignored);
/// ```
pub fn outcome_of<RB>(res: &Response<RB>) -> Outcome {
    let s = res.status().as_u16();
    if matches!(s, 429 | 503 | 504) {
        return Outcome::Dropped;
    }
    if let Some(g) = res.headers().get("grpc-status").and_then(|v| v.to_str().ok()) {
        // RESOURCE_EXHAUSTED, UNAVAILABLE, DEADLINE_EXCEEDED.
        if matches!(g, "8" | "14" | "4") {
            return Outcome::Dropped;
        }
    }
    if (400..500).contains(&s) { Outcome::Ignored } else { Outcome::Success }
}

/// A tower [`Layer`] putting a [`Gate`] in front of an HTTP or gRPC service (see the
/// module docs). Per request: the priority and deadline headers parsed (one pass over
/// their bytes; the deadline counters are wait-free atomic increments), the gate's
/// admission (lock-free when a slot is free; a queued request takes the gate's registry
/// mutex briefly), one boxed future, the handler run in the deadline's task-local scope,
/// and the release when the response head arrives.
///
/// ```
/// use surgeguard::tower::{GateLayer, ServerConfig};
/// let gate: surgeguard::Gate = surgeguard::Gate::new(Default::default()).unwrap();
/// let layer = GateLayer::with_config(gate, ServerConfig::default());
/// # drop(layer);
/// ```
pub struct GateLayer<C: Clock = MonotonicClock, const CAP: usize = 1024> {
    gate: Gate<C, CAP>,
    cfg: Arc<Shared>,
}

/// A layer's settings and counters, shared by the services it makes.
#[derive(Debug)]
struct Shared {
    cfg: ServerConfig,
    deadlines: ServerDeadlines,
    counters: DeadlineCounters,
}

impl Shared {
    fn new(cfg: ServerConfig) -> Arc<Self> {
        Arc::new(Self { deadlines: cfg.deadlines(), cfg, counters: DeadlineCounters::default() })
    }
}

impl<C: Clock, const CAP: usize> Clone for GateLayer<C, CAP> {
    fn clone(&self) -> Self {
        Self { gate: self.gate.clone(), cfg: self.cfg.clone() }
    }
}

impl<C: Clock, const CAP: usize> fmt::Debug for GateLayer<C, CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateLayer").field("gate", &self.gate).field("cfg", &self.cfg.cfg).finish()
    }
}

impl<C: Clock, const CAP: usize> GateLayer<C, CAP> {
    /// The layer with the default [`ServerConfig`].
    ///
    /// ```
    /// let gate: surgeguard::Gate = surgeguard::Gate::fixed(64.0).unwrap();
    /// let layer = surgeguard::tower::GateLayer::new(gate);
    /// # drop(layer);
    /// ```
    pub fn new(gate: Gate<C, CAP>) -> Self {
        Self::with_config(gate, ServerConfig::default())
    }

    /// The layer with `cfg`.
    ///
    /// ```
    /// use surgeguard::tower::{GateLayer, ServerConfig};
    /// let gate: surgeguard::Gate = surgeguard::Gate::fixed(64.0).unwrap();
    /// let layer = GateLayer::with_config(gate, ServerConfig::default().grpc_timeout(false));
    /// # drop(layer);
    /// ```
    pub fn with_config(gate: Gate<C, CAP>, cfg: ServerConfig) -> Self {
        Self { gate, cfg: Shared::new(cfg) }
    }

    /// The deadline headers read so far by this layer's services: requests with a
    /// deadline, defaulted or capped budgets, and ignored headers by reason.
    ///
    /// ```
    /// let gate: surgeguard::Gate = surgeguard::Gate::fixed(4.0).unwrap();
    /// let layer = surgeguard::tower::GateLayer::new(gate);
    /// assert_eq!(layer.deadline_metrics().ignored_total(), 0);
    /// ```
    pub fn deadline_metrics(&self) -> DeadlineMetrics {
        self.cfg.counters.snapshot()
    }
}

impl<S, C: Clock, const CAP: usize> Layer<S> for GateLayer<C, CAP> {
    type Service = GateService<S, C, CAP>;
    fn layer(&self, inner: S) -> Self::Service {
        GateService { inner, gate: self.gate.clone(), cfg: self.cfg.clone() }
    }
}

/// The service made by [`GateLayer`].
///
/// ```
/// use surgeguard::tower::GateService;
/// let gate: surgeguard::Gate = surgeguard::Gate::fixed(8.0).unwrap();
/// let svc = GateService::new(tower::service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }), gate);
/// # drop(svc);
/// ```
pub struct GateService<S, C: Clock = MonotonicClock, const CAP: usize = 1024> {
    inner: S,
    gate: Gate<C, CAP>,
    cfg: Arc<Shared>,
}

impl<S, C: Clock> GateService<S, C, 1024> {
    /// Wraps `inner` with the default [`ServerConfig`] (same as `GateLayer::new(gate).layer(inner)`).
    ///
    /// ```
    /// let gate: surgeguard::Gate = surgeguard::Gate::fixed(8.0).unwrap();
    /// let svc = surgeguard::tower::GateService::new(tower::service_fn(|_: http::Request<String>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// }), gate);
    /// # drop(svc);
    /// ```
    pub fn new(inner: S, gate: Gate<C, 1024>) -> Self {
        Self { inner, gate, cfg: Shared::new(ServerConfig::default()) }
    }
}

impl<S: Clone, C: Clock, const CAP: usize> Clone for GateService<S, C, CAP> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), gate: self.gate.clone(), cfg: self.cfg.clone() }
    }
}

impl<S, C: Clock, const CAP: usize> fmt::Debug for GateService<S, C, CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateService").field("gate", &self.gate).finish()
    }
}

/// The future of a layer's call (boxed; `Send`).
///
/// ```
/// use surgeguard::tower::ResponseFuture;
/// let f: ResponseFuture<u8, ()> = Box::pin(async { Ok(1) });
/// # drop(f);
/// ```
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, RB, C, const CAP: usize> Service<Request<B>> for GateService<S, C, CAP>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
    C: Clock,
{
    type Response = Response<GuardBody<RB>>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<GuardBody<RB>>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Backpressure is the gate's job (it answers at once); readiness is the inner
        // service's.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone is the one to drive later; `self.inner` (already ready) is used now,
        // as tower's own middleware does.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let level = priority_of(&req, &self.cfg.cfg);
        let grpc = is_grpc(&req);
        let now = self.gate.clock().now_ns();
        // The caller's budget → an absolute deadline at arrival, on the gate's clock (for
        // the queue) and on the monotonic clock (for the handler).
        let budget = self.cfg.deadlines.budget(req.headers(), &self.cfg.counters);
        let request_deadline = budget.map(|b| {
            let b = Duration::from_nanos(b);
            (crate::clock::after(now, b), Deadline::after(b))
        });
        let queue_deadline = self.cfg.cfg.queue_timeout.map(|t| crate::clock::after(now, t));
        let gate_deadline = match (request_deadline, queue_deadline) {
            (Some((r, _)), Some(q)) => Some(r.min(q)),
            (r, q) => r.map(|r| r.0).or(q),
        };
        let mut acquire = self.gate.acquire(level);
        if let Some(t) = gate_deadline {
            acquire = acquire.deadline(t);
        }
        Box::pin(async move {
            let mut permit = match acquire.await {
                Ok(p) => p,
                Err(r) => return Ok(rejection_response(&r, grpc)),
            };
            // If this future is dropped (the client went away) the permit ends as the
            // core's abandoned outcome: a drop when held past the last window's p99.
            permit.set_on_drop_abandoned();
            if let Some((_, d)) = request_deadline {
                // The grant and this task's turn may be apart on a busy machine: the work
                // starts only if its caller still waits.
                if d.is_expired() {
                    permit.ignored();
                    return Ok(rejection_response(&Rejected::new(Reason::Expired, 0), grpc));
                }
            }
            let served = match request_deadline {
                // The handler (and its client calls) see the deadline.
                // (`call` runs inside the scope too: some services work there.)
                Some((_, d)) => deadline::scope(d, async move { inner.call(req).await }).await,
                None => inner.call(req).await,
            };
            match served {
                Ok(res) => {
                    permit.release(outcome_of(&res));
                    Ok(res.map(GuardBody::inner))
                }
                Err(e) => {
                    permit.dropped();
                    Err(e)
                }
            }
        })
    }
}

/// A tower retry [`Policy`](::tower::retry::Policy): retries a failed request (an error,
/// or a `429` / `502` / `503` / `504` / gRPC `UNAVAILABLE` / `RESOURCE_EXHAUSTED` answer)
/// while the shared [`RetryBudget`] allows it (Finagle / SRE book: retries are at most a
/// share of requests), waiting a [`Backoff`] delay that is never shorter than the answer's
/// `Retry-After` (seconds) or `grpc-retry-pushback-ms`. Each first attempt deposits into
/// the budget. **Within the deadline:** when the request has one (its
/// [`Deadline`] extension, else [`deadline::current`]), a retry is made only if the
/// backoff ends at least [`expected_latency`](RetryPolicy::expected_latency) before it —
/// a retry that cannot finish in time is not worth a budget token. Put the retry layer
/// outside a [`ClientLayer`] with [`ClientDeadlines`], so every attempt carries what is
/// left of the deadline. Requests are cloned only when their body type is `Clone`; a policy per call
/// (`Clone`) holds its attempt count and jitter generator, and shares the budget. It
/// retries whatever it is given: put it on idempotent calls only.
///
/// ```
/// use surgeguard::tower::RetryPolicy;
/// use tower::retry::RetryLayer;
///
/// let policy = RetryPolicy::new(Default::default(), Default::default(), 3).unwrap();
/// let layer = RetryLayer::new(policy);
/// # drop(layer);
/// ```
#[derive(Clone)]
pub struct RetryPolicy<C: Clock = MonotonicClock> {
    budget: Arc<RetryBudget>,
    backoff: Backoff,
    rng: SplitMix64,
    clock: C,
    attempt: u32,
    max_retries: u32,
    expected_latency: Duration,
    /// Retries not made because they could not finish before the deadline (shared).
    past_deadline: Arc<std::sync::atomic::AtomicU64>,
}

impl<C: Clock> fmt::Debug for RetryPolicy<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("attempt", &self.attempt)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

impl RetryPolicy {
    /// A policy on the monotonic clock: the budget and backoff settings, and at most
    /// `max_retries` retries of one request.
    ///
    /// ```
    /// let p = surgeguard::tower::RetryPolicy::new(Default::default(), Default::default(), 2);
    /// assert!(p.is_ok());
    /// ```
    pub fn new(
        budget: RetryBudgetConfig,
        backoff: BackoffConfig,
        max_retries: u32,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(budget, backoff, max_retries, MonotonicClock)
    }
}

impl<C: Clock> RetryPolicy<C> {
    /// The same on `clock`.
    ///
    /// ```
    /// use surgeguard::{clock::ManualClock, tower::RetryPolicy};
    /// let p = RetryPolicy::with_clock(Default::default(), Default::default(), 2, ManualClock::new(1));
    /// assert!(p.is_ok());
    /// ```
    pub fn with_clock(
        budget: RetryBudgetConfig,
        backoff: BackoffConfig,
        max_retries: u32,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let seed = crate::clock::monotonic_ns();
        Ok(Self {
            budget: Arc::new(RetryBudget::new(budget)?),
            backoff: Backoff::new(backoff)?,
            rng: SplitMix64::new(seed),
            clock,
            attempt: 0,
            max_retries,
            expected_latency: Duration::ZERO,
            past_deadline: Arc::default(),
        })
    }

    /// The least time an attempt needs (default 0): no retry whose backoff would leave
    /// less than this before the request's deadline.
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = surgeguard::tower::RetryPolicy::new(Default::default(), Default::default(), 2)
    ///     .unwrap()
    ///     .expected_latency(Duration::from_millis(20));
    /// # drop(p);
    /// ```
    pub fn expected_latency(mut self, d: Duration) -> Self {
        self.expected_latency = d;
        self
    }

    /// The shared budget (metrics: retries allowed and denied).
    ///
    /// ```
    /// let p = surgeguard::tower::RetryPolicy::new(Default::default(), Default::default(), 2).unwrap();
    /// assert_eq!(p.budget().metrics().retries_allowed, 0);
    /// ```
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// Retries not made because the backoff would have outlasted the request's deadline
    /// (shared by the policy's clones).
    ///
    /// ```
    /// let p = surgeguard::tower::RetryPolicy::new(Default::default(), Default::default(), 2).unwrap();
    /// assert_eq!(p.denied_by_deadline(), 0);
    /// ```
    pub fn denied_by_deadline(&self) -> u64 {
        self.past_deadline.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Some(hint)` (ns; 0 = none) if `res` is worth retrying.
    fn retryable<RB>(res: &Response<RB>) -> Option<u64> {
        let s = res.status().as_u16();
        let grpc = res.headers().get("grpc-status").and_then(|v| v.to_str().ok());
        let retry = matches!(s, 429 | 502 | 503 | 504) || matches!(grpc, Some("8" | "14"));
        if !retry {
            return None;
        }
        let h = res.headers();
        let secs = h
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(|s| s.saturating_mul(1_000_000_000));
        let ms = h
            .get(GRPC_RETRY_PUSHBACK_MS)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(|m| m.saturating_mul(MS));
        Some(secs.or(ms).unwrap_or(0))
    }
}

impl<C, B, RB, E> ::tower::retry::Policy<Request<B>, Response<RB>, E> for RetryPolicy<C>
where
    C: Clock,
    B: Clone,
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<RB>, E>,
    ) -> Option<Self::Future> {
        let hint = match result {
            Ok(res) => Self::retryable(res)?,
            Err(_) => 0,
        };
        if self.attempt >= self.max_retries {
            return None;
        }
        let hint = (hint > 0).then_some(hint);
        // The delay is drawn on a copy: a retry refused below leaves the jitter untouched.
        let mut rng = self.rng;
        let delay = self.backoff.next_delay(self.attempt + 1, hint, &mut rng);
        let deadline = req.extensions().get::<Deadline>().copied().or_else(deadline::current);
        if let Some(d) = deadline {
            let ready = crate::clock::monotonic_ns().saturating_add(delay).saturating_add(
                u64::try_from(self.expected_latency.as_nanos()).unwrap_or(u64::MAX),
            );
            if ready >= d.as_ns() {
                // It could not finish in time: no retry, no token spent. (Relaxed: a
                // count read on its own.)
                self.past_deadline.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return None;
            }
        }
        self.budget.try_withdraw(self.clock.now_ns()).ok()?;
        self.attempt += 1;
        self.rng = rng;
        Some(tokio::time::sleep(Duration::from_nanos(delay)))
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        if self.attempt == 0 {
            // A first attempt: it earns retries for everyone.
            self.budget.deposit(self.clock.now_ns());
        }
        let mut r = Request::new(req.body().clone());
        *r.method_mut() = req.method().clone();
        *r.uri_mut() = req.uri().clone();
        *r.version_mut() = req.version();
        *r.headers_mut() = req.headers().clone();
        Some(r)
    }
}
