//! Client-side controls: `RetryBudget`, `TokenRetryThrottle`, `AdaptiveThrottle`, `Backoff`,
//! `CircuitBreaker`, `RateLimiter`, `PacedDrain`.

use std::cell::RefCell;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use surgeguard_core::backoff::{Backoff, BackoffConfig, Jitter};
use surgeguard_core::breaker::{
    BreakerPermit, BreakerState, BreakerWindow, CircuitBreaker, CircuitBreakerConfig,
};
use surgeguard_core::rate::{PacedDrain, PacedDrainConfig, RateLimiter, RateLimiterConfig};
use surgeguard_core::retry::{
    RetryBudget, RetryBudgetConfig, TokenRetryThrottle, TokenThrottleConfig,
};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig, ThrottleForm};
use surgeguard_core::Outcome;

use crate::clock::resolve_now;
use crate::convert::{config_err, finite, int_in, ms_to_ns, ns_to_ms, range, u32_of};
use crate::handle::{new_handle, tags, Tagged};
use crate::raw::{
    args, bad_type, count, handle_arg, handle_id_outcome_now, handle_now, now, refuse, ret,
    Callback,
};
use crate::shared::open;
use crate::slab::Slab;
use surgeguard::placement::Placed;

/// A seed: a whole number in `[0, 2^53]` (exact in a JS number).
fn seed_of(x: Option<f64>) -> Result<u64> {
    x.map_or(Ok(0), |s| int_in("seed", s, 0, 1 << 53))
}

/// A refusal as `{ reason, retryAfterMs }` or `null`.
#[napi(object)]
pub struct Refusal {
    pub reason: String,
    pub retry_after_ms: f64,
}

fn refusal(r: surgeguard_core::Rejected) -> Refusal {
    Refusal { reason: r.reason.as_str().to_string(), retry_after_ms: ns_to_ms(r.retry_after) }
}

// ---------------------------------------------------------------------------------------
// RetryBudget

fn budget_config(options: Option<RetryBudgetOptions>) -> Result<RetryBudgetConfig> {
    let o = options.unwrap_or_default();
    let mut c = RetryBudgetConfig::default();
    if let Some(x) = o.ttl_ms {
        c.ttl = ms_to_ns("ttlMs", x)?;
    }
    if let Some(x) = o.min_retries_per_sec {
        c.min_retries_per_sec = u32_of("minRetriesPerSec", x)?;
    }
    if let Some(x) = o.percent_can_retry {
        c.percent_can_retry = finite("percentCanRetry", x)?;
    }
    Ok(c)
}

#[napi(object)]
#[derive(Default)]
pub struct RetryBudgetOptions {
    /// How long a deposit funds retries, ms (1 000..=60 000; default 10 000).
    pub ttl_ms: Option<f64>,
    /// Retries per second always allowed (default 10).
    pub min_retries_per_sec: Option<f64>,
    /// Retries as a fraction of requests (default 0.1).
    pub percent_can_retry: Option<f64>,
}

/// What a `RetryBudget` handle points at.
pub struct BudgetInner {
    /// The core budget (in-process or shared).
    pub core: Placed<RetryBudget>,
}

impl Tagged for BudgetInner {
    const TAG: u64 = tags::BUDGET;
}

#[napi(object)]
pub struct RetryBudgetMetricsJs {
    pub requests: f64,
    pub retries_allowed: f64,
    pub retries_denied: f64,
    pub available: f64,
}

#[napi(js_name = "NativeRetryBudget")]
pub struct NativeRetryBudget {
    inner: Rc<BudgetInner>,
}

#[napi]
impl NativeRetryBudget {
    #[napi(constructor)]
    pub fn new(options: Option<RetryBudgetOptions>) -> Result<Self> {
        let core = open("RetryBudget", None, budget_config(options)?)?;
        Ok(Self { inner: Rc::new(BudgetInner { core }) })
    }

    /// The budget named `name` in shared memory: created, or attached to (same config).
    #[napi(factory)]
    pub fn open_shared(name: String, options: Option<RetryBudgetOptions>) -> Result<Self> {
        let core = open("RetryBudget", Some(&name), budget_config(options)?)?;
        Ok(Self { inner: Rc::new(BudgetInner { core }) })
    }

    /// Whether it lives in shared memory.
    #[napi]
    pub fn is_shared(&self) -> bool {
        self.inner.core.is_shared()
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// Retries the budget holds now.
    #[napi]
    pub fn available(&self, now_ns: Option<BigInt>) -> Result<f64> {
        Ok(self.inner.core.available(resolve_now(now_ns)?) as f64)
    }

    #[napi]
    pub fn metrics(&self) -> RetryBudgetMetricsJs {
        let m = self.inner.core.metrics();
        RetryBudgetMetricsJs {
            requests: m.requests as f64,
            retries_allowed: m.retries_allowed as f64,
            retries_denied: m.retries_denied as f64,
            available: m.available as f64,
        }
    }
}

// budgetDeposit(h[, nowNs]) -> 0; budgetTryWithdraw(h[, nowNs]) -> 0 | -reason

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn budget_deposit(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe {
        handle_now(env, info, |h: &BudgetInner, now| {
            h.core.deposit(now);
            0.0
        })
    }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn budget_try_withdraw(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe {
        handle_now(env, info, |h: &BudgetInner, now| match h.core.try_withdraw(now) {
            Ok(()) => 0.0,
            Err(r) => refuse(r),
        })
    }
}

// ---------------------------------------------------------------------------------------
// TokenRetryThrottle (gRPC A6)

#[napi(object)]
#[derive(Default)]
pub struct TokenThrottleOptions {
    pub max_tokens: Option<f64>,
    pub token_ratio: Option<f64>,
}

#[napi(object)]
pub struct TokenThrottleMetricsJs {
    pub tokens: f64,
    pub throttled: bool,
    pub retries_allowed: f64,
    pub retries_denied: f64,
    pub successes: f64,
    pub failures: f64,
}

#[napi(js_name = "NativeTokenRetryThrottle")]
pub struct NativeTokenRetryThrottle {
    core: TokenRetryThrottle,
}

#[napi]
impl NativeTokenRetryThrottle {
    #[napi(constructor)]
    pub fn new(options: Option<TokenThrottleOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = TokenThrottleConfig::default();
        if let Some(x) = o.max_tokens {
            c.max_tokens = finite("maxTokens", x)?;
        }
        if let Some(x) = o.token_ratio {
            c.token_ratio = finite("tokenRatio", x)?;
        }
        let core = TokenRetryThrottle::new(c).map_err(|e| config_err("TokenRetryThrottle", e))?;
        Ok(Self { core })
    }

    /// Records an RPC's result.
    #[napi]
    pub fn record(&self, success: bool) {
        self.core.record(success);
    }

    /// Takes a retry: `null` if allowed, else the refusal.
    #[napi]
    pub fn try_retry(&self) -> Option<Refusal> {
        self.core.try_retry().err().map(refusal)
    }

    #[napi]
    pub fn is_retry_allowed(&self) -> bool {
        self.core.is_retry_allowed()
    }

    #[napi]
    pub fn tokens(&self) -> f64 {
        self.core.tokens()
    }

    #[napi]
    pub fn metrics(&self) -> TokenThrottleMetricsJs {
        let m = self.core.metrics();
        TokenThrottleMetricsJs {
            tokens: m.tokens,
            throttled: m.throttled,
            retries_allowed: m.retries_allowed as f64,
            retries_denied: m.retries_denied as f64,
            successes: m.successes as f64,
            failures: m.failures as f64,
        }
    }
}

// ---------------------------------------------------------------------------------------
// AdaptiveThrottle (SRE client-side throttling)

#[napi(object)]
#[derive(Default)]
pub struct AdaptiveThrottleOptions {
    pub k: Option<f64>,
    pub window_ms: Option<f64>,
    pub max_drop_probability: Option<f64>,
    /// `ring` (default) or `ema`.
    pub form: Option<String>,
    pub seed: Option<f64>,
}

/// What an `AdaptiveThrottle` handle points at.
pub struct AdaptiveThrottleInner {
    /// The core throttle.
    pub core: AdaptiveThrottle,
    rng: RefCell<SplitMix64>,
}

impl Tagged for AdaptiveThrottleInner {
    const TAG: u64 = tags::THROTTLE;
}

impl AdaptiveThrottleInner {
    /// `0` to send, `-reason` to refuse locally.
    pub fn check(&self, now: u64) -> f64 {
        let rand = self.rng.borrow_mut().next_u64();
        match self.core.should_throttle(now, rand) {
            Ok(()) => 0.0,
            Err(r) => refuse(r),
        }
    }
}

#[napi(object)]
pub struct AdaptiveThrottleMetricsJs {
    pub requests: f64,
    pub accepts: f64,
    pub drop_probability: f64,
    pub throttled: f64,
}

#[napi(js_name = "NativeAdaptiveThrottle")]
pub struct NativeAdaptiveThrottle {
    inner: Rc<AdaptiveThrottleInner>,
}

#[napi]
impl NativeAdaptiveThrottle {
    #[napi(constructor)]
    pub fn new(options: Option<AdaptiveThrottleOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = AdaptiveThrottleConfig::default();
        if let Some(x) = o.k {
            c.k = finite("k", x)?;
        }
        if let Some(x) = o.window_ms {
            c.window = ms_to_ns("windowMs", x)?;
        }
        if let Some(x) = o.max_drop_probability {
            c.max_drop_probability = finite("maxDropProbability", x)?;
        }
        c.form = match o.form.as_deref() {
            None | Some("ring") => ThrottleForm::Ring,
            Some("ema") => ThrottleForm::Ema,
            Some(f) => return Err(range("form", &format!("must be 'ring' or 'ema' (got {f:?})"))),
        };
        let seed = seed_of(o.seed)?;
        let core = AdaptiveThrottle::new(c).map_err(|e| config_err("AdaptiveThrottle", e))?;
        Ok(Self {
            inner: Rc::new(AdaptiveThrottleInner {
                core,
                rng: RefCell::new(SplitMix64::new(seed)),
            }),
        })
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    #[napi]
    pub fn drop_probability(&self, now_ns: Option<BigInt>) -> Result<f64> {
        Ok(self.inner.core.drop_probability(resolve_now(now_ns)?))
    }

    #[napi]
    pub fn metrics(&self) -> AdaptiveThrottleMetricsJs {
        let m = self.inner.core.metrics();
        AdaptiveThrottleMetricsJs {
            requests: m.requests,
            accepts: m.accepts,
            drop_probability: m.drop_probability,
            throttled: m.throttled as f64,
        }
    }
}

// throttleCheck(h[, nowNs]) -> 0 | -reason; throttleRecord(h, accepted[, nowNs]) -> 0

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn throttle_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_now(env, info, AdaptiveThrottleInner::check) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn throttle_record(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, AdaptiveThrottleInner);
    let mut accepted = false;
    // SAFETY: env is this callback's and argv[1] one of its arguments (`undefined` if not
    // passed: `napi_boolean_expected`, `accepted` untouched); `accepted` is a valid out-pointer.
    if unsafe { sys::napi_get_value_bool(env, argv[1], &mut accepted) } != sys::Status::napi_ok {
        // SAFETY: env is this callback's.
        return unsafe { bad_type(env, "accepted must be a boolean") };
    }
    let now = now!(env, argv, argc, 2);
    h.core.record(now, accepted);
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, 0.0) }
}

// ---------------------------------------------------------------------------------------
// Backoff

#[napi(object)]
#[derive(Default)]
pub struct BackoffOptions {
    pub base_ms: Option<f64>,
    pub multiplier: Option<f64>,
    pub cap_ms: Option<f64>,
    /// `none`, `full` (default), `equal` or `decorrelated`.
    pub jitter: Option<String>,
    pub seed: Option<f64>,
}

#[napi(js_name = "NativeBackoff")]
pub struct NativeBackoff {
    core: RefCell<Backoff>,
    rng: RefCell<SplitMix64>,
}

#[napi]
impl NativeBackoff {
    #[napi(constructor)]
    pub fn new(options: Option<BackoffOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = BackoffConfig::default();
        if let Some(x) = o.base_ms {
            c.base = ms_to_ns("baseMs", x)?;
        }
        if let Some(x) = o.multiplier {
            c.multiplier = finite("multiplier", x)?;
        }
        if let Some(x) = o.cap_ms {
            c.cap = ms_to_ns("capMs", x)?;
        }
        c.jitter = match o.jitter.as_deref() {
            None | Some("full") => Jitter::Full,
            Some("none") => Jitter::None,
            Some("equal") => Jitter::Equal,
            Some("decorrelated") => Jitter::Decorrelated,
            Some(j) => {
                return Err(range(
                    "jitter",
                    &format!("must be 'none', 'full', 'equal' or 'decorrelated' (got {j:?})"),
                ))
            }
        };
        let seed = match o.seed {
            Some(s) => int_in("seed", s, 0, 1 << 53)?,
            // Unseeded: each backoff differs, so a fleet does not retry in step.
            None => crate::clock::now_ns() ^ (std::process::id() as u64).rotate_left(32),
        };
        let core = Backoff::new(c).map_err(|e| config_err("Backoff", e))?;
        Ok(Self { core: RefCell::new(core), rng: RefCell::new(SplitMix64::new(seed)) })
    }

    /// The delay before retry number `attempt` (1 = first retry), ms; never less than
    /// `retryAfterMs` (the server's hint).
    #[napi]
    pub fn next_delay_ms(&self, attempt: f64, retry_after_ms: Option<f64>) -> Result<f64> {
        // 1 = the first retry; 0 is not a retry (refused, as in every binding).
        let attempt = int_in("attempt", attempt, 1, u32::MAX as u64)? as u32;
        let hint = retry_after_ms.map(|h| ms_to_ns("retryAfterMs", h)).transpose()?;
        let d = self.core.borrow_mut().next_delay(attempt, hint, &mut self.rng.borrow_mut());
        Ok(ns_to_ms(d))
    }

    /// The ceiling before jitter for retry `attempt`, ms.
    #[napi]
    pub fn ceiling_ms(&self, attempt: f64) -> Result<f64> {
        Ok(ns_to_ms(
            self.core.borrow().ceiling(int_in("attempt", attempt, 1, u32::MAX as u64)? as u32),
        ))
    }

    /// Forgets the previous delay (decorrelated jitter restarts from the base).
    #[napi]
    pub fn reset(&self) {
        self.core.borrow_mut().reset();
    }
}

// ---------------------------------------------------------------------------------------
// CircuitBreaker

#[napi(object)]
#[derive(Default)]
pub struct BreakerOptions {
    /// Count window: the last this many calls (default 100). Exclusive with `windowMs`.
    pub window_calls: Option<f64>,
    /// Time window, ms. Exclusive with `windowCalls`.
    pub window_ms: Option<f64>,
    pub failure_rate_threshold: Option<f64>,
    pub slow_call_rate_threshold: Option<f64>,
    pub slow_call_ms: Option<f64>,
    pub minimum_calls: Option<f64>,
    pub open_ms: Option<f64>,
    pub open_jitter: Option<f64>,
    pub half_open_probes: Option<f64>,
    pub probe_lease_ms: Option<f64>,
    pub ramp_ms: Option<f64>,
    pub seed: Option<f64>,
}

/// What a `CircuitBreaker` handle points at.
pub struct BreakerInner {
    core: CircuitBreaker,
    permits: Slab<(BreakerPermit, u64)>,
}

impl Tagged for BreakerInner {
    const TAG: u64 = tags::BREAKER;
}

impl BreakerInner {
    /// A permit id, or `-reason`.
    pub fn acquire(&self, now: u64) -> f64 {
        match self.core.try_acquire(now) {
            // A full slab drops the permit unreported: harmless (see `BreakerPermit`).
            Ok(p) => self.permits.insert((p, now)).unwrap_or(-1.0),
            Err(r) => refuse(r),
        }
    }

    /// Reports a call; `0`, or `-1` if `id` is not live.
    pub fn record(&self, id: f64, now: u64, outcome: Outcome) -> f64 {
        match self.permits.take(id) {
            Some((p, start)) => {
                self.core.record(p, now, outcome, now.saturating_sub(start));
                0.0
            }
            None => -1.0,
        }
    }
}

fn state_name(s: BreakerState) -> &'static str {
    match s {
        BreakerState::Closed => "closed",
        BreakerState::Ramping => "ramping",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

#[napi(object)]
pub struct BreakerMetricsJs {
    pub state: String,
    pub admit_permille: f64,
    pub open_remaining_ms: f64,
    pub window_calls: f64,
    pub window_failures: f64,
    pub window_slow: f64,
    pub opened: f64,
    pub half_opened: f64,
    pub closed: f64,
    pub rejected: f64,
    pub ramp_shed: f64,
    pub probes: f64,
    pub stale_records: f64,
}

#[napi(js_name = "NativeCircuitBreaker")]
pub struct NativeCircuitBreaker {
    inner: Rc<BreakerInner>,
}

#[napi]
impl NativeCircuitBreaker {
    #[napi(constructor)]
    pub fn new(options: Option<BreakerOptions>) -> Result<Self> {
        let o = options.unwrap_or_default();
        let mut c = CircuitBreakerConfig::default();
        match (o.window_calls, o.window_ms) {
            (Some(_), Some(_)) => {
                return Err(range("windowCalls", "and windowMs are exclusive: give one"))
            }
            (Some(n), None) => {
                c.window = BreakerWindow::Count(u32_of("windowCalls", n)?);
                if o.minimum_calls.is_none() {
                    // resilience4j's minimum (100) cannot exceed a smaller window.
                    if let BreakerWindow::Count(n) = c.window {
                        c.minimum_calls = c.minimum_calls.min(n.max(1));
                    }
                }
            }
            (None, Some(ms)) => c.window = BreakerWindow::Time(ms_to_ns("windowMs", ms)?),
            (None, None) => {}
        }
        if let Some(x) = o.failure_rate_threshold {
            c.failure_rate_threshold = finite("failureRateThreshold", x)?;
        }
        if let Some(x) = o.slow_call_rate_threshold {
            c.slow_call_rate_threshold = finite("slowCallRateThreshold", x)?;
        }
        if let Some(x) = o.slow_call_ms {
            c.slow_call_duration = ms_to_ns("slowCallMs", x)?;
        }
        if let Some(x) = o.minimum_calls {
            c.minimum_calls = u32_of("minimumCalls", x)?;
        }
        if let Some(x) = o.open_ms {
            c.open_duration = ms_to_ns("openMs", x)?;
        }
        if let Some(x) = o.open_jitter {
            c.open_jitter = finite("openJitter", x)?;
        }
        if let Some(x) = o.half_open_probes {
            c.half_open_probes = u32_of("halfOpenProbes", x)?;
        }
        if let Some(x) = o.probe_lease_ms {
            c.probe_lease = ms_to_ns("probeLeaseMs", x)?;
        }
        if let Some(x) = o.ramp_ms {
            c.ramp_duration = ms_to_ns("rampMs", x)?;
        }
        c.seed = seed_of(o.seed)?;
        let core = CircuitBreaker::new(c).map_err(|e| config_err("CircuitBreaker", e))?;
        Ok(Self { inner: Rc::new(BreakerInner { core, permits: Slab::default() }) })
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// `closed`, `ramping`, `open` or `half_open`.
    #[napi]
    pub fn state(&self, now_ns: Option<BigInt>) -> Result<&'static str> {
        Ok(state_name(self.inner.core.state(resolve_now(now_ns)?)))
    }

    #[napi]
    pub fn is_open(&self, now_ns: Option<BigInt>) -> Result<bool> {
        Ok(self.inner.core.is_open(resolve_now(now_ns)?))
    }

    #[napi]
    pub fn live_permits(&self) -> f64 {
        self.inner.permits.live() as f64
    }

    #[napi]
    pub fn metrics(&self, now_ns: Option<BigInt>) -> Result<BreakerMetricsJs> {
        let m = self.inner.core.metrics(resolve_now(now_ns)?);
        Ok(BreakerMetricsJs {
            state: state_name(m.state).to_string(),
            admit_permille: f64::from(m.admit_permille),
            open_remaining_ms: ns_to_ms(m.open_remaining),
            window_calls: m.window_calls as f64,
            window_failures: m.window_failures as f64,
            window_slow: m.window_slow as f64,
            opened: m.opened as f64,
            half_opened: m.half_opened as f64,
            closed: m.closed as f64,
            rejected: m.rejected as f64,
            ramp_shed: m.ramp_shed as f64,
            probes: m.probes as f64,
            stale_records: m.stale_records as f64,
        })
    }
}

// breakerAcquire(h[, nowNs]) -> id | -reason; breakerRecord(h, id, outcome[, nowNs]) -> 0 | -1

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn breaker_acquire(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_now(env, info, BreakerInner::acquire) }
}

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn breaker_record(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    unsafe { handle_id_outcome_now(env, info, BreakerInner::record) }
}

// ---------------------------------------------------------------------------------------
// RateLimiter (GCRA)

#[napi(object)]
pub struct RateLimiterOptions {
    pub per_second: f64,
    pub burst: Option<f64>,
}

fn rate_config(o: &RateLimiterOptions) -> Result<RateLimiterConfig> {
    let burst = o.burst.map_or(Ok(1), |b| u32_of("burst", b))?;
    Ok(RateLimiterConfig { per_second: finite("perSecond", o.per_second)?, burst })
}

/// What a `RateLimiter` handle points at.
pub struct RateInner {
    /// The core limiter (in-process or shared).
    pub core: Placed<RateLimiter>,
}

impl Tagged for RateInner {
    const TAG: u64 = tags::RATE;
}

#[napi(object)]
pub struct RateLimiterMetricsJs {
    pub allowed: f64,
    pub denied: f64,
    pub emission_ms: f64,
    pub burst: f64,
}

#[napi(js_name = "NativeRateLimiter")]
pub struct NativeRateLimiter {
    inner: Rc<RateInner>,
}

#[napi]
impl NativeRateLimiter {
    #[napi(constructor)]
    pub fn new(options: RateLimiterOptions) -> Result<Self> {
        let core = open("RateLimiter", None, rate_config(&options)?)?;
        Ok(Self { inner: Rc::new(RateInner { core }) })
    }

    /// The rate limiter named `name` in shared memory: created, or attached to (same
    /// config).
    #[napi(factory)]
    pub fn open_shared(name: String, options: RateLimiterOptions) -> Result<Self> {
        let core = open("RateLimiter", Some(&name), rate_config(&options)?)?;
        Ok(Self { inner: Rc::new(RateInner { core }) })
    }

    /// Whether it lives in shared memory.
    #[napi]
    pub fn is_shared(&self) -> bool {
        self.inner.core.is_shared()
    }

    #[napi]
    pub fn handle<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        new_handle(env, &self.inner)
    }

    /// Takes up to `max` units now; how many were taken.
    #[napi]
    pub fn take_up_to(&self, max: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let max = u32_of("max", max)?;
        Ok(f64::from(self.inner.core.take_up_to(resolve_now(now_ns)?, max)))
    }

    /// Units available now.
    #[napi]
    pub fn available(&self, now_ns: Option<BigInt>) -> Result<f64> {
        Ok(f64::from(self.inner.core.available(resolve_now(now_ns)?)))
    }

    /// How long until `cost` units conform, ms (0 = now).
    #[napi]
    pub fn wait_time_ms(&self, cost: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let cost = u32_of("cost", cost)?;
        Ok(ns_to_ms(self.inner.core.wait_time(resolve_now(now_ns)?, cost)))
    }

    #[napi]
    pub fn metrics(&self) -> RateLimiterMetricsJs {
        let m = self.inner.core.metrics();
        RateLimiterMetricsJs {
            allowed: m.allowed as f64,
            denied: m.denied as f64,
            emission_ms: ns_to_ms(m.emission_ns),
            burst: f64::from(m.burst),
        }
    }
}

// rateCheck(h, cost[, nowNs]) -> 0 | -reason

/// # Safety
/// Called only by N-API, as a [`Callback`].
unsafe extern "C" fn rate_check(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: env and info are what N-API passed to this callback (the `Callback` contract).
    let (argv, argc) = unsafe { args::<3>(env, info) };
    let h = handle_arg!(env, argv, RateInner);
    let cost = count!(env, argv[1], u32::MAX, "cost must be a whole number in [0, 2^32)");
    let now = now!(env, argv, argc, 2);
    let r = match h.core.check(now, cost as u32) {
        Ok(()) => 0.0,
        Err(r) => refuse(r),
    };
    // SAFETY: env is this callback's, open until it returns.
    unsafe { ret(env, r) }
}

// ---------------------------------------------------------------------------------------
// PacedDrain

#[napi(object)]
pub struct PacedDrainOptions {
    pub target_per_sec: f64,
    pub headroom: Option<f64>,
    pub burst: Option<f64>,
}

#[napi(object)]
pub struct PacedDrainMetricsJs {
    pub started: f64,
    pub calls: f64,
    pub drain_per_sec: f64,
}

#[napi(js_name = "NativePacedDrain")]
pub struct NativePacedDrain {
    core: PacedDrain,
}

#[napi]
impl NativePacedDrain {
    #[napi(constructor)]
    pub fn new(options: PacedDrainOptions) -> Result<Self> {
        let mut c = PacedDrainConfig::new(finite("targetPerSec", options.target_per_sec)?);
        if let Some(x) = options.headroom {
            c.headroom = finite("headroom", x)?;
        }
        if let Some(x) = options.burst {
            c.burst = u32_of("burst", x)?;
        }
        let core = PacedDrain::new(c).map_err(|e| config_err("PacedDrain", e))?;
        Ok(Self { core })
    }

    /// How many backlog items may start now.
    #[napi]
    pub fn permits(&self, backlog: f64, now_ns: Option<BigInt>) -> Result<f64> {
        let backlog = int_in("backlog", backlog, 0, 1 << 53)?;
        Ok(f64::from(self.core.permits(resolve_now(now_ns)?, backlog)))
    }

    /// Time until the next item may start, ms.
    #[napi]
    pub fn next_permit_in_ms(&self, now_ns: Option<BigInt>) -> Result<f64> {
        Ok(ns_to_ms(self.core.next_permit_in(resolve_now(now_ns)?)))
    }

    /// Time to drain `backlog` while `producePerSec` keeps arriving, ms; `null` if never.
    #[napi]
    pub fn time_to_drain_ms(&self, backlog: f64, produce_per_sec: f64) -> Result<Option<f64>> {
        let backlog = int_in("backlog", backlog, 0, 1 << 53)?;
        let p = finite("producePerSec", produce_per_sec)?;
        Ok(self.core.time_to_drain(backlog, p).map(ns_to_ms))
    }

    #[napi]
    pub fn drain_per_sec(&self) -> f64 {
        self.core.drain_per_sec()
    }

    #[napi]
    pub fn metrics(&self) -> PacedDrainMetricsJs {
        let m = self.core.metrics();
        PacedDrainMetricsJs {
            started: m.started as f64,
            calls: m.calls as f64,
            drain_per_sec: m.drain_per_sec,
        }
    }
}

/// The raw callbacks of this module's classes (registered by `fast`).
pub const FAST: &[(&str, Callback)] = &[
    ("breakerAcquire", breaker_acquire),
    ("breakerRecord", breaker_record),
    ("budgetDeposit", budget_deposit),
    ("budgetTryWithdraw", budget_try_withdraw),
    ("throttleCheck", throttle_check),
    ("throttleRecord", throttle_record),
    ("rateCheck", rate_check),
];
