//! # surgeguard
//!
//! Overload control for Rust services: adaptive concurrency limits, a priority admission
//! queue with CoDel and deadlines, load shedding, retry budgets, breakers and rate limits —
//! the engine the C, Python and Node bindings share, with what a Rust service needs on top:
//!
//! - [`clock`]: raw `CLOCK_MONOTONIC` nanoseconds (the same numbers in every process and
//!   binding), a [`Clock`](clock::Clock) trait and a [`ManualClock`](clock::ManualClock).
//! - [`Permit`]: owned, `Send + 'static`, ends on `Drop` (as `Ignored`, or as you choose).
//! - [`Limiter`]: an `Arc`-shared adaptive limiter with owned permits.
//! - [`Gate`]: limiter + priority queue + shed switch, with a cancel-safe
//!   `gate.acquire(priority).deadline(t).await` and no background task to spawn; its
//!   brownout dimmer ([`Gate::brownout`], [`Gate::serve_optional`]) dims optional work
//!   before the gate has to refuse requests.
//! - `tower` (feature `tower`): a server layer for axum, hyper and tonic (503 +
//!   `Retry-After`, or gRPC `RESOURCE_EXHAUSTED` + `grpc-retry-pushback-ms`) and a retry
//!   policy backed by a retry budget and backoff; deadline propagation in and out.
//! - [`deadline`] (feature `tokio`): the request's deadline for the handler (a task-local
//!   the server layer sets; the client layer propagates it).
//! - [`degrade`]: fallbacks that run on refusals, open breakers and deadlines (never on
//!   bugs), and a bounded stale-if-error cache.
//! - [`placement`]: one object, several placements: a core limiter, rate limiter, retry
//!   budget or keyed table in this process or (feature `shm`, Linux) in memory shared by
//!   worker processes, behind one type (`Placed<T>`) that the bindings wrap once.
//!
//! The whole engine is re-exported as [`surgeguard::core`](crate::core) (the
//! `surgeguard-core` crate: `no_std`, allocation-free, lock-free, time as an argument);
//! its common types are also at the crate root. This crate makes exactly the core's
//! decisions — the conformance vectors replay through its [`Gate`].
//!
//! ```
//! use surgeguard::{Gate, Priority};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let gate: Gate = Gate::new(Default::default()).unwrap(); // adaptive limit, 3 levels
//! match gate.acquire(Priority::NORMAL).await {
//!     Ok(permit) => {
//!         // ... do the work ...
//!         permit.success();
//!     }
//!     Err(rejected) => eprintln!("busy: {rejected}"),
//! }
//! # }
//! ```
//!
//! Features: `tokio` (default) arms the gate's timer on the current tokio runtime;
//! `tower` adds the `tower` module.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod clock;
#[cfg(feature = "tokio")]
pub mod deadline;
pub mod degrade;
#[cfg(feature = "fleet")]
pub mod fleet;
mod gate;
mod permit;
pub mod placement;
#[cfg(all(feature = "shm", target_os = "linux", target_has_atomic = "64"))]
pub mod shm;
#[cfg(feature = "tower")]
pub mod tower;

/// The engine: `surgeguard-core` (`no_std`, allocation-free, lock-free; time and
/// randomness are arguments). Everything not wrapped here is used from it directly.
///
/// ```
/// use surgeguard::core::limit::{AlgorithmConfig, AimdConfig};
/// let cfg = surgeguard::LimiterConfig::with_algorithm(AlgorithmConfig::Aimd(AimdConfig::default()));
/// assert!(cfg.validate().is_ok());
/// ```
pub use surgeguard_core as core;

pub use gate::{Acquire, Gate};
pub use permit::{Limiter, Permit};
pub use surgeguard_core::gate::{GateConfig, GateState};
pub use surgeguard_core::{
    ConfigError, LimiterConfig, Outcome, Priority, Reason, Rejected, UsageError,
};

/// A one-level-agnostic limiter config with a fixed `limit` (three levels, default shares).
pub(crate) fn fixed_limiter_config(limit: f64) -> LimiterConfig {
    use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
    LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: limit,
        min_limit: limit,
        max_limit: limit,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_std_errors() {
        fn boxed<E: std::error::Error + Send + Sync + 'static>(e: E) -> Box<dyn std::error::Error> {
            Box::new(e)
        }
        let r = boxed(Rejected::new(Reason::QueueFull, 5));
        assert!(r.to_string().contains("queue_full"));
        assert!(
            boxed(ConfigError::out_of_range("limiter.static_limit")).to_string().contains("limit")
        );
        assert!(boxed(UsageError::TimeOutOfRange).to_string().contains("out of range"));
        assert!(Limiter::fixed(f64::NAN).is_err());
        assert!(
            Gate::<clock::MonotonicClock, 8>::new(GateConfig {
                queue_capacity: Some(9),
                ..GateConfig::default()
            })
            .is_err()
        );
    }
}

/// The README's examples, compiled as doctests.
#[cfg(all(doctest, feature = "tower"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
