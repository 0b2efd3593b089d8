#![cfg(not(loom))]
//! A retry storm: three layers of clients (client → gateway → service), each
//! retrying up to 3 times (4 attempts), in front of a failing dependency. Without budgets
//! one user request becomes up to 4³ = 64 dependency calls ("3 layers each retrying 4
//! times can turn one user action into 64 database attempts"); with a retry budget at each
//! layer the dependency sees barely more than the users send.
//!
//! Amplification = dependency calls / user requests. Ranges, not exact numbers.

use surgeguard_core::retry::{
    RetryBudget, RetryBudgetConfig, TokenRetryThrottle, TokenThrottleConfig,
};
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::throttle::{AdaptiveThrottle, AdaptiveThrottleConfig};
use surgeguard_core::time::SEC;

const LAYERS: usize = 3;
const MAX_ATTEMPTS: u32 = 4;
/// Users send 1000 requests per second for 30 s.
const USERS_PER_SEC: u64 = 1000;
const SECONDS: u64 = 30;

/// One client per layer (all requests through a layer share its controls).
#[derive(Default)]
struct Layer {
    budget: Option<RetryBudget>,
    tokens: Option<TokenRetryThrottle>,
    throttle: Option<AdaptiveThrottle>,
}

struct World {
    layers: Vec<Layer>,
    failure_rate: f64,
    rng: SplitMix64,
    dependency_calls: u64,
}

impl World {
    fn new(failure_rate: f64, make: impl Fn() -> Layer) -> Self {
        Self {
            layers: (0..LAYERS).map(|_| make()).collect(),
            failure_rate,
            rng: SplitMix64::new(2024),
            dependency_calls: 0,
        }
    }

    /// One request into layer `depth` (or the dependency below the last layer).
    fn call(&mut self, depth: usize, now: u64) -> bool {
        if depth == LAYERS {
            self.dependency_calls += 1;
            return self.rng.next_f64() >= self.failure_rate;
        }
        if let Some(t) = &self.layers[depth].throttle {
            let rand = self.rng.next_u64();
            if t.should_throttle(now, rand).is_err() {
                return false;
            }
        }
        if let Some(b) = &self.layers[depth].budget {
            b.deposit(now);
        }
        for attempt in 0..MAX_ATTEMPTS {
            if attempt > 0 {
                let layer = &self.layers[depth];
                if let Some(b) = &layer.budget {
                    if b.try_withdraw(now).is_err() {
                        break;
                    }
                }
                if let Some(t) = &layer.tokens {
                    if t.try_retry().is_err() {
                        break;
                    }
                }
            }
            let ok = self.call(depth + 1, now);
            let layer = &self.layers[depth];
            if let Some(t) = &layer.tokens {
                t.record(ok);
            }
            if let Some(t) = &layer.throttle {
                t.record(now, ok);
            }
            if ok {
                return true;
            }
        }
        false
    }

    /// Runs the users' traffic and returns the amplification.
    fn amplification(mut self) -> f64 {
        let users = USERS_PER_SEC * SECONDS;
        let t0 = 1000 * SEC;
        for i in 0..users {
            self.call(0, t0 + i * (SEC / USERS_PER_SEC));
        }
        self.dependency_calls as f64 / users as f64
    }
}

fn budgeted() -> Layer {
    // The default budget: 10 % of traffic, 10 retries/s reserve, ttl 10 s.
    Layer {
        budget: Some(RetryBudget::new(RetryBudgetConfig::default()).unwrap()),
        ..Layer::default()
    }
}

#[test]
fn hard_down_dependency_64x_without_budgets_under_1_5x_with() {
    let unbounded = World::new(1.0, Layer::default).amplification();
    assert!((60.0..=64.0).contains(&unbounded), "without budgets: {unbounded}");
    let bounded = World::new(1.0, budgeted).amplification();
    eprintln!("hard down: {unbounded:.2}x without budgets, {bounded:.3}x with");
    assert!((1.0..=1.5).contains(&bounded), "with budgets: {bounded}");
    // ≈ 1.1³ plus the reserves: the amplification has a ceiling however bad things get.
    assert!(bounded < unbounded / 40.0);
}

#[test]
fn brownout_order_of_magnitude_without_budgets_under_1_5x_with() {
    // 90 % of dependency calls fail: retries still multiply load about tenfold
    // (an order-of-magnitude load increase that nobody designed for).
    let unbounded = World::new(0.9, Layer::default).amplification();
    assert!((8.0..=12.0).contains(&unbounded), "without budgets: {unbounded}");
    let bounded = World::new(0.9, budgeted).amplification();
    eprintln!("brownout: {unbounded:.2}x without budgets, {bounded:.3}x with");
    assert!((1.0..=1.5).contains(&bounded), "with budgets: {bounded}");
}

#[test]
fn grpc_token_throttle_stops_retries_once_failures_dominate() {
    let tokens = || Layer {
        tokens: Some(TokenRetryThrottle::new(TokenThrottleConfig::default()).unwrap()),
        ..Layer::default()
    };
    let a = World::new(1.0, tokens).amplification();
    eprintln!("gRPC token throttle: {a:.4}x");
    assert!((1.0..=1.01).contains(&a), "gRPC throttle: {a}");
}

#[test]
fn adaptive_throttling_sheds_before_the_dependency() {
    // SRE client-side throttling plus budgets at every layer: local refusals mean the
    // failing dependency sees less than the users send (the 0.75 cap keeps ~25 % of each
    // layer's traffic flowing so recovery stays visible).
    let both = || Layer {
        budget: Some(RetryBudget::new(RetryBudgetConfig::default()).unwrap()),
        throttle: Some(AdaptiveThrottle::new(AdaptiveThrottleConfig::default()).unwrap()),
        ..Layer::default()
    };
    let a = World::new(1.0, both).amplification();
    eprintln!("adaptive throttle + budget: {a:.3}x");
    assert!((0.01..=0.5).contains(&a), "throttle + budget: {a}");
}

#[test]
fn recovery_is_not_blocked_by_budgets() {
    // A healthy dependency: every first attempt succeeds, no retries, amplification 1.
    let a = World::new(0.0, budgeted).amplification();
    assert_eq!(a, 1.0);
}
