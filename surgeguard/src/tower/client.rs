//! [`ClientLayer`]: overload control for outbound calls — deadline propagation, an
//! adaptive concurrency [`Limiter`], a [`CircuitBreaker`] and the SRE book's adaptive
//! client-side throttle, each optional, refusing locally (no request sent) with a
//! [`ClientError::Rejected`].

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{Request, Response};
use surgeguard_core::breaker::{CircuitBreaker, CircuitBreakerConfig};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig};
use surgeguard_core::{ConfigError, Outcome, Priority, Rejected};
use tower_layer::Layer;
use tower_service::Service;

use super::deadline_headers::{ClientDeadlineCounters, ClientDeadlineMetrics, ClientDeadlines};
use super::{ResponseFuture, outcome_of};
use crate::Limiter;
use crate::clock::{Clock, MonotonicClock};

/// A client call that failed: refused locally (nothing was sent), given up at the
/// caller's deadline, or the inner service's error.
///
/// ```
/// use surgeguard::tower::ClientError;
/// use surgeguard::{Reason, Rejected};
/// let e: ClientError<std::io::Error> = ClientError::Rejected(Rejected::new(Reason::BreakerOpen, 5));
/// assert!(e.to_string().contains("breaker_open"));
/// let _: &dyn std::error::Error = &e;
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError<E> {
    /// Refused before sending: `Expired` or `DeadlineUnmeetable` (too little of the
    /// caller's deadline left: see [`ClientDeadlines`]), `Throttled`, `BreakerOpen` or
    /// `LimitReached`.
    Rejected(Rejected),
    /// The caller's deadline passed before the answer came (the call was dropped; see
    /// [`ClientDeadlines`]).
    DeadlineExceeded,
    /// The inner service failed.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for ClientError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(r) => write!(f, "refused locally: {r}"),
            Self::DeadlineExceeded => f.write_str("deadline exceeded waiting for the answer"),
            Self::Inner(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ClientError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Rejected(r) => Some(r),
            Self::DeadlineExceeded => None,
            Self::Inner(e) => Some(e),
        }
    }
}

/// A layer for outbound HTTP / gRPC calls (each part lock-free in the core; no queue: a
/// call is refused at once, never parked). Each part is optional; in order: deadline
/// propagation ([`ClientDeadlines`]: fail fast when too little of the caller's deadline is
/// left, else pass it on in the headers), the adaptive throttle (SRE book ch. 21: refuse locally with probability
/// `max(0, (requests − K·accepts) / (requests + 1))`), the circuit breaker, the
/// concurrency limiter. The answer's status ends each: `429` / `503` / `504` / gRPC
/// overload codes and transport errors are failures (not accepted, `Dropped`), other `4xx`
/// are `Ignored`, the rest succeed. A dropped call ends as `Ignored`.
///
/// ```
/// use surgeguard::tower::ClientLayer;
/// use surgeguard::Limiter;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let layer = ClientLayer::new()
///     .limiter(Limiter::new(Default::default()).unwrap())
///     .breaker(Default::default()).unwrap()
///     .throttle(Default::default()).unwrap();
/// let client = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// }));
/// let res = client.oneshot(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(res.status(), 200);
/// # }
/// ```
pub struct ClientLayer<C: Clock = MonotonicClock> {
    deadlines: Option<Arc<(ClientDeadlines, ClientDeadlineCounters)>>,
    limiter: Option<Limiter<C>>,
    breaker: Option<Arc<CircuitBreaker>>,
    throttle: Option<Arc<AdaptiveThrottle>>,
    clock: C,
    level: Priority,
}

impl<C: Clock> Clone for ClientLayer<C> {
    fn clone(&self) -> Self {
        Self {
            deadlines: self.deadlines.clone(),
            limiter: self.limiter.clone(),
            breaker: self.breaker.clone(),
            throttle: self.throttle.clone(),
            clock: self.clock.clone(),
            level: self.level,
        }
    }
}

impl<C: Clock> fmt::Debug for ClientLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientLayer")
            .field("deadlines", &self.deadlines.as_deref().map(|d| &d.0))
            .field("limiter", &self.limiter.is_some())
            .field("breaker", &self.breaker.is_some())
            .field("throttle", &self.throttle.is_some())
            .finish()
    }
}

impl Default for ClientLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientLayer {
    /// A layer with nothing in it yet, on the monotonic clock.
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new();
    /// # drop(layer);
    /// ```
    pub fn new() -> Self {
        Self::with_clock(MonotonicClock)
    }
}

impl<C: Clock> ClientLayer<C> {
    /// The same on `clock`.
    ///
    /// ```
    /// use surgeguard::{clock::ManualClock, tower::ClientLayer};
    /// let layer = ClientLayer::with_clock(ManualClock::new(1));
    /// # drop(layer);
    /// ```
    pub fn with_clock(clock: C) -> Self {
        Self {
            deadlines: None,
            limiter: None,
            breaker: None,
            throttle: None,
            clock,
            level: Priority::NORMAL,
        }
    }

    /// Propagates the caller's deadline (the request's [`Deadline`](crate::deadline::Deadline)
    /// extension, else [`deadline::current`](crate::deadline::current)) to the next hop,
    /// and fails fast when too little of it is left (see [`ClientDeadlines`]). Deadlines are
    /// on the monotonic clock whatever this layer's clock.
    ///
    /// ```
    /// use surgeguard::deadline::{self, Deadline};
    /// use surgeguard::tower::{ClientDeadlines, ClientLayer};
    /// use std::time::Duration;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let client = ClientLayer::new().deadlines(ClientDeadlines::default()).layer(service_fn(
    ///     |req: http::Request<String>| async move {
    ///         let sent = req.headers()["surgeguard-timeout-ms"].to_str().unwrap().to_owned();
    ///         Ok::<_, std::io::Error>(http::Response::new(sent))
    ///     },
    /// ));
    /// let d = Deadline::after(Duration::from_millis(500));
    /// let res = deadline::scope(d, client.oneshot(http::Request::new(String::new()))).await;
    /// let sent: u64 = res.unwrap().into_body().parse().unwrap();
    /// assert!(sent <= 495); // what is left, minus the 5 ms margin, rounded down
    /// # }
    /// ```
    pub fn deadlines(mut self, config: ClientDeadlines) -> Self {
        self.deadlines = Some(Arc::new((config, ClientDeadlineCounters::default())));
        self
    }

    /// Counters of the deadline propagation (zero without it).
    pub fn deadline_metrics(&self) -> ClientDeadlineMetrics {
        self.deadlines.as_deref().map(|d| d.1.snapshot()).unwrap_or_default()
    }

    /// Adds a concurrency limiter (it reads its own clock).
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new().limiter(surgeguard::Limiter::fixed(8.0).unwrap());
    /// # drop(layer);
    /// ```
    pub fn limiter(mut self, limiter: Limiter<C>) -> Self {
        self.limiter = Some(limiter);
        self
    }

    /// Adds a circuit breaker.
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new().breaker(Default::default()).unwrap();
    /// # drop(layer);
    /// ```
    pub fn breaker(mut self, config: CircuitBreakerConfig) -> Result<Self, ConfigError> {
        self.breaker = Some(Arc::new(CircuitBreaker::new(config)?));
        Ok(self)
    }

    /// Adds the adaptive client-side throttle.
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new().throttle(Default::default()).unwrap();
    /// # drop(layer);
    /// ```
    pub fn throttle(mut self, config: AdaptiveThrottleConfig) -> Result<Self, ConfigError> {
        self.throttle = Some(Arc::new(AdaptiveThrottle::new(config)?));
        Ok(self)
    }

    /// The priority the limiter admits calls at (default `normal`).
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new().level(surgeguard::Priority::CRITICAL);
    /// # drop(layer);
    /// ```
    pub fn level(mut self, level: Priority) -> Self {
        self.level = level;
        self
    }

    /// The breaker, if any (state, metrics).
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new();
    /// assert!(layer.breaker_ref().is_none());
    /// ```
    pub fn breaker_ref(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_deref()
    }

    /// The throttle, if any (drop probability, metrics).
    ///
    /// ```
    /// let layer = surgeguard::tower::ClientLayer::new().throttle(Default::default()).unwrap();
    /// assert_eq!(layer.throttle_ref().unwrap().metrics().requests, 0.0);
    /// ```
    pub fn throttle_ref(&self) -> Option<&AdaptiveThrottle> {
        self.throttle.as_deref()
    }
}

/// Seeds of the per-service jitter generators: distinct in one process.
static SEEDS: AtomicU64 = AtomicU64::new(0);

impl<S, C: Clock> Layer<S> for ClientLayer<C> {
    type Service = ClientService<S, C>;
    fn layer(&self, inner: S) -> Self::Service {
        let n = SEEDS.fetch_add(1, Ordering::Relaxed);
        let seed = crate::clock::monotonic_ns() ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ClientService { inner, layer: self.clone(), rng: SplitMix64::new(seed) }
    }
}

/// The service made by [`ClientLayer`]; its error is [`ClientError`].
///
/// ```
/// use surgeguard::tower::{ClientLayer, ClientService};
/// use tower::Layer;
/// let svc: ClientService<_> = ClientLayer::new().layer(tower::service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::new(String::new()))
/// }));
/// # drop(svc);
/// ```
pub struct ClientService<S, C: Clock = MonotonicClock> {
    inner: S,
    layer: ClientLayer<C>,
    rng: SplitMix64,
}

impl<S: Clone, C: Clock> Clone for ClientService<S, C> {
    fn clone(&self) -> Self {
        let mut rng = self.rng;
        let seed = rng.next_u64();
        Self { inner: self.inner.clone(), layer: self.layer.clone(), rng: SplitMix64::new(seed) }
    }
}

impl<S, C: Clock> fmt::Debug for ClientService<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientService").field("layer", &self.layer).finish()
    }
}

/// Ends the breaker permit as `Ignored` if the call is dropped.
struct BreakerSlot<C: Clock> {
    breaker: Arc<CircuitBreaker>,
    permit: Option<surgeguard_core::breaker::BreakerPermit>,
    clock: C,
    start: u64,
}

impl<C: Clock> BreakerSlot<C> {
    fn record(mut self, outcome: Outcome) {
        if let Some(p) = self.permit.take() {
            let now = self.clock.now_ns();
            self.breaker.record(p, now, outcome, now.saturating_sub(self.start));
        }
    }
}

impl<C: Clock> Drop for BreakerSlot<C> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            let now = self.clock.now_ns();
            self.breaker.record(p, now, Outcome::Ignored, now.saturating_sub(self.start));
        }
    }
}

impl<S, B, RB, C> Service<Request<B>> for ClientService<S, C>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
    C: Clock,
{
    type Response = Response<RB>;
    type Error = ClientError<S::Error>;
    type Future = ResponseFuture<Response<RB>, ClientError<S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(ClientError::Inner)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let l = &self.layer;
        let now = l.clock.now_ns();
        let refuse = |r: Rejected| -> Self::Future {
            Box::pin(async move { Err(ClientError::Rejected(r)) })
        };
        let mut wait_until = None;
        if let Some(d) = &l.deadlines {
            // First: a doomed call takes no throttle, breaker or limiter turn.
            match d.0.apply(&mut req, &d.1) {
                Ok(until) => wait_until = until.map(|t| (t, d.clone())),
                Err(r) => return refuse(r),
            }
        }
        if let Some(t) = &l.throttle {
            if let Err(r) = t.should_throttle(now, self.rng.next_u64()) {
                return refuse(r);
            }
        }
        let breaker = match &l.breaker {
            None => None,
            Some(b) => match b.try_acquire(now) {
                Ok(p) => Some(BreakerSlot {
                    breaker: b.clone(),
                    permit: Some(p),
                    clock: l.clock.clone(),
                    start: now,
                }),
                Err(r) => return refuse(r),
            },
        };
        let permit = match &l.limiter {
            None => None,
            Some(lim) => match lim.try_acquire(l.level) {
                Ok(p) => Some(p),
                Err(r) => return refuse(r), // drops the breaker slot as Ignored
            },
        };
        let throttle = l.throttle.clone();
        let clock = l.clock.clone();
        Box::pin(async move {
            let res = match wait_until {
                None => inner.call(req).await.map_err(ClientError::Inner),
                Some((until, d)) => {
                    match tokio::time::timeout(until.remaining(), inner.call(req)).await {
                        Ok(r) => r.map_err(ClientError::Inner),
                        Err(_) => {
                            d.1.timed_out.fetch_add(1, Ordering::Relaxed);
                            Err(ClientError::DeadlineExceeded)
                        }
                    }
                }
            };
            let outcome = match &res {
                Ok(r) => outcome_of(r),
                Err(_) => Outcome::Dropped,
            };
            if let Some(t) = throttle {
                t.record(clock.now_ns(), outcome != Outcome::Dropped);
            }
            if let Some(b) = breaker {
                b.record(outcome);
            }
            if let Some(p) = permit {
                p.release(outcome);
            }
            res
        })
    }
}
