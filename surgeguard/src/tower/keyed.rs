//! [`KeyedLayer`]: per-key (tenant, API key, agent) concurrency and rate caps in front of a
//! service, answering `429` + `Retry-After` + the JSON body every surgeguard binding writes.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::HeaderName;
use http::{Request, Response};
use surgeguard_core::keyed::{KeyPermit, KeyedConfig, KeyedLimits, hash_key};
use surgeguard_core::{ConfigError, Outcome};
use tower_layer::Layer;
use tower_service::Service;

use super::{GuardBody, ResponseFuture, outcome_of, rejection_response};
use crate::clock::{Clock, MonotonicClock};

/// Finds the key of a request, hashed with [`hash_key`] (`None`: the request has no key
/// and passes without a per-key check). Implemented by [`HeaderKey`] and by any
/// `Fn(&Request<B>) -> Option<u64> + Clone + Send + Sync + 'static`.
///
/// ```
/// use surgeguard::tower::KeyExtractor;
/// let by_tenant = |req: &http::Request<String>| -> Option<u64> {
///     let t = req.headers().get("x-tenant")?.as_bytes();
///     Some(surgeguard::core::keyed::hash_key(7, t))
/// };
/// let req = http::Request::builder().header("x-tenant", "a").body(String::new()).unwrap();
/// assert!(by_tenant.key(&req).is_some());
/// ```
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The request's key hash.
    fn key(&self, req: &Request<B>) -> Option<u64>;
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<u64> + Clone + Send + Sync + 'static,
{
    fn key(&self, req: &Request<B>) -> Option<u64> {
        self(req)
    }
}

/// The key is a header's value (an API key, a tenant id), hashed with a seed.
/// (The table itself is lock-free: a bounded CAS per shard tried; release is wait-free.)
///
/// ```
/// use surgeguard::tower::{HeaderKey, KeyExtractor};
/// let k = HeaderKey::new("x-api-key", 42);
/// let req = http::Request::builder().header("x-api-key", "abc").body(()).unwrap();
/// assert_eq!(k.key(&req), Some(surgeguard::core::keyed::hash_key(42, b"abc")));
/// assert_eq!(k.key(&http::Request::new(())), None);
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: HeaderName,
    seed: u64,
}

impl HeaderKey {
    /// Reads header `name` (a static, valid header name) and hashes it with `seed` (choose
    /// it at random at startup and keep it private).
    pub fn new(name: &'static str, seed: u64) -> Self {
        Self { name: HeaderName::from_static(name), seed }
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    fn key(&self, req: &Request<B>) -> Option<u64> {
        Some(hash_key(self.seed, req.headers().get(&self.name)?.as_bytes()))
    }
}

/// A layer of per-key limits: `N` shards of a [`KeyedLimits`] table (shuffle sharding, so
/// one noisy key fills only its own shards). A key over its cap or rate gets `429` with
/// `Retry-After` and the JSON body; the key's slot is held until the response head (or
/// until the request is dropped). Stack it outside a [`GateLayer`](super::GateLayer) so a
/// request waiting in the gate's queue keeps its key slot (one key cannot fill the queue).
///
/// ```
/// use surgeguard::core::keyed::KeyedConfig;
/// use surgeguard::tower::{HeaderKey, KeyedLayer};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let cfg = KeyedConfig { shards_per_key: 1, ..KeyedConfig::new(1) };
/// let layer: KeyedLayer<HeaderKey, 64> = KeyedLayer::new(cfg, HeaderKey::new("x-api-key", 1)).unwrap();
/// let svc = layer.layer(service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// let req = http::Request::builder().header("x-api-key", "k").body(String::new()).unwrap();
/// assert_eq!(svc.oneshot(req).await.unwrap().status(), 200);
/// # }
/// ```
pub struct KeyedLayer<K, const N: usize = 256, C: Clock = MonotonicClock> {
    table: Arc<KeyedLimits<N>>,
    key: K,
    clock: C,
}

impl<K: Clone, const N: usize, C: Clock> Clone for KeyedLayer<K, N, C> {
    fn clone(&self) -> Self {
        Self { table: self.table.clone(), key: self.key.clone(), clock: self.clock.clone() }
    }
}

impl<K, const N: usize, C: Clock> fmt::Debug for KeyedLayer<K, N, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLayer").field("shards", &N).finish()
    }
}

impl<K, const N: usize> KeyedLayer<K, N, MonotonicClock> {
    /// A table of `N` shards with `config`, on the monotonic clock.
    ///
    /// ```
    /// use surgeguard::{core::keyed::KeyedConfig, tower::{HeaderKey, KeyedLayer}};
    /// let l: Result<KeyedLayer<HeaderKey>, _> = KeyedLayer::new(KeyedConfig::new(0), HeaderKey::new("x-k", 1));
    /// assert!(l.is_err()); // a cap of 0
    /// ```
    pub fn new(config: KeyedConfig, key: K) -> Result<Self, ConfigError> {
        Self::with_clock(config, key, MonotonicClock)
    }
}

impl<K, const N: usize, C: Clock> KeyedLayer<K, N, C> {
    /// The same on `clock`.
    ///
    /// ```
    /// use surgeguard::{clock::ManualClock, core::keyed::KeyedConfig, tower::{HeaderKey, KeyedLayer}};
    /// let l: Result<KeyedLayer<HeaderKey, 16, ManualClock>, _> =
    ///     KeyedLayer::with_clock(KeyedConfig::new(4), HeaderKey::new("x-k", 1), ManualClock::new(1));
    /// assert!(l.is_ok());
    /// ```
    pub fn with_clock(config: KeyedConfig, key: K, clock: C) -> Result<Self, ConfigError> {
        Ok(Self { table: Arc::new(KeyedLimits::new(config)?), key, clock })
    }

    /// The table (metrics, the keys refused most).
    ///
    /// ```
    /// use surgeguard::{core::keyed::KeyedConfig, tower::{HeaderKey, KeyedLayer}};
    /// let l: KeyedLayer<HeaderKey, 16> = KeyedLayer::new(KeyedConfig::new(4), HeaderKey::new("x-k", 1)).unwrap();
    /// assert_eq!(l.table().key_limit(), 2 * l.table().config().shard_limit as u64);
    /// ```
    pub fn table(&self) -> &KeyedLimits<N> {
        &self.table
    }
}

impl<S, K: Clone, const N: usize, C: Clock> Layer<S> for KeyedLayer<K, N, C> {
    type Service = KeyedService<S, K, N, C>;
    fn layer(&self, inner: S) -> Self::Service {
        KeyedService { inner, layer: self.clone() }
    }
}

/// The service made by [`KeyedLayer`] (see there for an example).
///
/// ```
/// use surgeguard::{core::keyed::KeyedConfig, tower::{HeaderKey, KeyedLayer, KeyedService}};
/// use tower::Layer;
/// let layer: KeyedLayer<HeaderKey, 16> = KeyedLayer::new(KeyedConfig::new(4), HeaderKey::new("x-k", 1)).unwrap();
/// let svc: KeyedService<_, HeaderKey, 16> = layer.layer(tower::service_fn(|_: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// # drop(svc);
/// ```
pub struct KeyedService<S, K, const N: usize = 256, C: Clock = MonotonicClock> {
    inner: S,
    layer: KeyedLayer<K, N, C>,
}

impl<S: Clone, K: Clone, const N: usize, C: Clock> Clone for KeyedService<S, K, N, C> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), layer: self.layer.clone() }
    }
}

impl<S, K, const N: usize, C: Clock> fmt::Debug for KeyedService<S, K, N, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedService").field("shards", &N).finish()
    }
}

/// Returns the key's slot when the request ends, however it ends.
struct KeySlot<const N: usize> {
    table: Arc<KeyedLimits<N>>,
    permit: Option<KeyPermit>,
}

impl<const N: usize> Drop for KeySlot<N> {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            // Cannot fail: the permit came from this table.
            let _ = self.table.release(p);
        }
    }
}

impl<S, B, RB, K, const N: usize, C> Service<Request<B>> for KeyedService<S, K, N, C>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
    RB: Send + 'static,
    K: KeyExtractor<B>,
    C: Clock,
{
    type Response = Response<GuardBody<RB>>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<GuardBody<RB>>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let l = &self.layer;
        let slot = match l.key.key(&req) {
            None => None,
            Some(h) => match l.table.try_acquire(h, l.clock.now_ns(), 1) {
                Ok(p) => Some(KeySlot { table: l.table.clone(), permit: Some(p) }),
                Err(r) => {
                    let grpc = super::is_grpc(&req);
                    return Box::pin(async move { Ok(rejection_response(&r, grpc)) });
                }
            },
        };
        Box::pin(async move {
            let res = inner.call(req).await;
            if let Ok(r) = &res {
                // A refusal from below is recorded against the key (heavy hitters).
                if outcome_of(r) == Outcome::Dropped {
                    if let Some(s) = &slot {
                        if let Some(p) = &s.permit {
                            s.table.record_rejection(p.key_hash());
                        }
                    }
                }
            }
            drop(slot);
            res.map(|r| r.map(GuardBody::inner))
        })
    }
}
