//! A fleet-wide rate limit on Redis (feature `fleet`): one limit shared by every instance of
//! a service, leased so the request path stays local.
//!
//! [`FleetRateLimiter`] spends tokens of a core [`TokenLease`] (one compare-and-swap, no
//! I/O). A tokio task refills it off the request path: when the lease asks (low water, a
//! third of its TTL left, or expired) it runs the shipped Lua script ([`TOKEN_LEASE_LUA`]:
//! a GCRA per limit on the server's `TIME`) through the connection the caller passed in,
//! already configured (TLS, auth, Sentinel: anything implementing
//! `redis::aio::ConnectionLike`). A refill times out after 20 ms by default and runs behind
//! a circuit breaker, so a slow or absent Redis never slows a decision: the lease runs out
//! and its fallback decides (safe by default: the local share `R/N` of the last known
//! fleet), counted in [`LeaseMetrics`].
//!
//! **The bound.** Over any window `W` the fleet admits at most `R·W + B + N·b_max` on
//! leased tokens (the core module `surgeguard_core::fleet` states why), plus one `B` if
//! Redis restarts without persistence, plus the grants made inside the replication lag of
//! a failover. Keys carry the limit's name as a hash tag (`sg:{name}:…`), so one limit's
//! keys share a Redis Cluster slot.
//!
//! ```no_run
//! # async fn run() -> redis::RedisResult<()> {
//! use surgeguard::fleet::{FleetRateConfig, FleetRateLimiter};
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let con = client.get_multiplexed_async_connection().await?;
//! let mut cfg = FleetRateConfig::default();
//! cfg.lease.rate_per_sec = 500.0; // for the whole fleet
//! cfg.lease.burst = 50;
//! let limit = FleetRateLimiter::new(con, "checkout", cfg).unwrap();
//! if limit.try_take(1).is_ok() {
//!     // ... at most 500/s across every instance, within the stated bound ...
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use surgeguard_core::breaker::{BreakerWindow, CircuitBreaker, CircuitBreakerConfig};
pub use surgeguard_core::fleet::{Fallback, LeaseMetrics, Mode, TokenLease, TokenLeaseConfig};
use surgeguard_core::time::{MS, SEC};
use surgeguard_core::{ConfigError, Outcome, Rejected};

use crate::clock::monotonic_ns;

/// The token lease's script, as shipped (also run by the Python and Node bindings).
pub const TOKEN_LEASE_LUA: &str = include_str!("../lua/token_lease.lua");
/// The slot lease's script (a fleet concurrency cap).
pub const SLOT_LEASE_LUA: &str = include_str!("../lua/slot_lease.lua");

/// Settings of a [`FleetRateLimiter`].
#[derive(Clone, Debug, PartialEq)]
pub struct FleetRateConfig {
    /// The limit and the local lease: `R`, `B`, `b_max`, the batch period, the fallback.
    pub lease: TokenLeaseConfig,
    /// How long a grant lasts (Redis's clock; default 3 s). Refills come at a third of it
    /// left at the latest.
    pub ttl: Duration,
    /// Instances that asked within this window make the fleet size the safe fallback
    /// divides by (default 10 s).
    pub membership_window: Duration,
    /// A refill that takes longer is abandoned and counted as failed (default 20 ms, as
    /// Envoy's global rate limit and Sentinel's token client).
    pub refill_timeout: Duration,
    /// This instance's name in the limit's membership (default: pid and a random part).
    pub instance: Option<String>,
}

impl Default for FleetRateConfig {
    fn default() -> Self {
        Self {
            lease: TokenLeaseConfig::default(),
            ttl: Duration::from_secs(3),
            membership_window: Duration::from_secs(10),
            refill_timeout: Duration::from_millis(20),
            instance: None,
        }
    }
}

/// What a [`FleetRateLimiter`] counted: the lease's decisions by mode, and its refills.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetMetrics {
    /// The lease (decisions by mode, grants, drops, the fleet size).
    pub lease: LeaseMetrics,
    /// Refills sent to Redis, and those that failed (error or timeout).
    pub refills: u64,
    /// See `refills`.
    pub refill_failures: u64,
    /// Refills skipped because the breaker was open.
    pub refills_skipped: u64,
}

struct Inner {
    lease: TokenLease,
    keys: [String; 3],
    instance: String,
    emission_us: u64,
    ttl_ms: u64,
    window_ms: u64,
    timeout: Duration,
    wake: tokio::sync::Notify,
    breaker: CircuitBreaker,
    refills: AtomicU64,
    failures: AtomicU64,
    skipped: AtomicU64,
}

/// A rate limit shared by every instance, leased from Redis. See the module docs.
pub struct FleetRateLimiter {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FleetRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetRateLimiter").field("keys", &self.inner.keys).finish()
    }
}

fn check_duration(
    d: Duration,
    min: Duration,
    max: Duration,
    what: &'static str,
) -> Result<u64, ConfigError> {
    if d < min || d > max {
        return Err(ConfigError::out_of_range(what));
    }
    Ok(d.as_millis() as u64)
}

impl FleetRateLimiter {
    /// A limit named `name` (any bytes but `{` and `}`, 1–200 of them: the name is the
    /// keys' hash tag), refilled through `con` by a task on the current tokio runtime.
    /// Nothing is asked of Redis until the first refill; until a grant arrives, decisions
    /// are the fallback's. Panics outside a tokio runtime.
    pub fn new<C>(con: C, name: &str, cfg: FleetRateConfig) -> Result<Self, ConfigError>
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    {
        if name.is_empty() || name.len() > 200 || name.contains(['{', '}']) {
            return Err(ConfigError::out_of_range("fleet_rate.name"));
        }
        let lease = TokenLease::new(cfg.lease)?;
        let ttl_ms = check_duration(
            cfg.ttl,
            Duration::from_millis(10),
            Duration::from_secs(3600),
            "fleet_rate.ttl",
        )?;
        let window_ms = check_duration(
            cfg.membership_window,
            Duration::from_millis(10),
            Duration::from_secs(3600),
            "fleet_rate.membership_window",
        )?;
        check_duration(
            cfg.refill_timeout,
            Duration::from_millis(1),
            cfg.ttl,
            "fleet_rate.refill_timeout",
        )?;
        let instance = cfg
            .instance
            .clone()
            .unwrap_or_else(|| format!("{}-{:x}", std::process::id(), monotonic_ns() ^ 0x5eed));
        // Five failed refills in a row open the breaker for a second; one probe then.
        let breaker = CircuitBreaker::new(CircuitBreakerConfig {
            window: BreakerWindow::Count(5),
            failure_rate_threshold: 1.0,
            minimum_calls: 5,
            open_duration: SEC,
            half_open_probes: 1,
            ..CircuitBreakerConfig::default()
        })?;
        let inner = Arc::new(Inner {
            lease,
            keys: [
                format!("sg:{{{name}}}:tat"),
                format!("sg:{{{name}}}:members"),
                format!("sg:{{{name}}}:log"),
            ],
            instance,
            emission_us: ((1e6 / cfg.lease.rate_per_sec).round() as u64).max(1),
            ttl_ms,
            window_ms,
            timeout: cfg.refill_timeout,
            wake: tokio::sync::Notify::new(),
            breaker,
            refills: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        });
        let task = tokio::spawn(refill(inner.clone(), con, cfg.lease.batch_period_ns));
        Ok(Self { inner, task })
    }

    /// Spends `cost` tokens now: `Ok(mode)`, or `Err` with `RateLimited` and a retry hint.
    /// No I/O, whatever Redis is doing. A refusal on a spent lease wakes the refiller.
    pub fn try_take(&self, cost: u32) -> Result<Mode, Rejected> {
        let r = self.inner.lease.try_take(monotonic_ns(), cost);
        if r.is_err() {
            self.inner.wake.notify_one();
        }
        r
    }

    /// The counters.
    pub fn metrics(&self) -> FleetMetrics {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FleetMetrics {
            lease: self.inner.lease.metrics(monotonic_ns()),
            refills: l(&self.inner.refills),
            refill_failures: l(&self.inner.failures),
            refills_skipped: l(&self.inner.skipped),
        }
    }

    /// The lease itself (its `want`, `available`, ...).
    pub fn lease(&self) -> &TokenLease {
        &self.inner.lease
    }
}

impl Drop for FleetRateLimiter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The refiller: every half batch period, or when woken by a refusal, asks the lease what
/// it wants and, with the breaker closed, asks Redis with a timeout.
async fn refill<C>(inner: Arc<Inner>, mut con: C, period_ns: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let script = redis::Script::new(TOKEN_LEASE_LUA);
    let tick = Duration::from_nanos((period_ns / 2).max(MS));
    loop {
        let now = monotonic_ns();
        if let Some(want) = inner.lease.want(now) {
            match inner.breaker.try_acquire(now) {
                Err(_) => {
                    inner.skipped.fetch_add(1, Ordering::Relaxed);
                }
                Ok(permit) => {
                    inner.refills.fetch_add(1, Ordering::Relaxed);
                    let mut call = script.prepare_invoke();
                    call.key(&inner.keys[0]).key(&inner.keys[1]).key(&inner.keys[2]);
                    call.arg(&inner.instance)
                        .arg(want)
                        .arg(inner.emission_us)
                        .arg(inner.lease.config().burst)
                        .arg(inner.ttl_ms)
                        .arg(inner.window_ms)
                        .arg("0");
                    let answer = tokio::time::timeout(
                        inner.timeout,
                        call.invoke_async::<Vec<i64>>(&mut con),
                    )
                    .await;
                    let done = monotonic_ns();
                    match answer {
                        Ok(Ok(v)) if v.len() >= 3 && v.iter().take(3).all(|x| *x >= 0) => {
                            let g = v[0].min(i64::from(u32::MAX)) as u32;
                            let ttl = (v[1] as u64).saturating_mul(MS);
                            let fleet = v[2].min(i64::from(u32::MAX)) as u32;
                            inner.lease.grant(now, g, ttl, fleet);
                            inner.breaker.record(permit, done, Outcome::Success, done - now);
                        }
                        _ => {
                            // An error, a timeout or a garbled answer: nothing granted.
                            inner.failures.fetch_add(1, Ordering::Relaxed);
                            inner.breaker.record(permit, done, Outcome::Dropped, done - now);
                        }
                    }
                }
            }
            // Refills are spaced by at least a quarter tick, however often refusals wake
            // the task (a saturated fleet grants 0 and is refused on every request).
            tokio::time::sleep(tick / 4).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = inner.wake.notified() => {}
        }
    }
}
