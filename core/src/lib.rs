//! # surgeguard-core
//!
//! One overload-control engine for every runtime: adaptive concurrency limits, bounded
//! priority admission, client-side retry control, breakers and rate limits, written once
//! and shared by the C, Python and Node bindings.
//!
//! The core is `#![no_std]`, never allocates, and never reads a clock: every call takes
//! `now: u64`, nanoseconds on a monotonic clock the caller chooses. Randomness comes from
//! seeded generators owned by each structure. Same inputs, same outputs — which is what
//! makes cross-language conformance vectors and the simulator exact.
//!
//! **Time.** `now` must be at most [`time::MAX_NOW`] (2^62 ns, about 146 years of
//! `CLOCK_MONOTONIC`). A larger value is bad input, never a time: it moves no structure's
//! clock, and the call acts at the latest time the structure has seen (bindings refuse it
//! up front with [`UsageError::TimeOutOfRange`], see [`time::check_now`]). A deadline
//! above it means "no deadline". A `now` older than one already seen acts at the latest
//! time seen (or, where a structure says so, is taken as given without moving anything
//! back). What a forward jump does, per structure family, is in [`time`].
//!
//! Progress guarantees are stated on every public type. Hot paths (admit, release,
//! record a sample) are a bounded number of atomic steps; where a window must be folded,
//! whichever thread wins one compare-and-swap does it and everyone else moves on.
//!
//! Targets: anything with native 64-bit atomics is lock-free (the proof build is
//! `aarch64-unknown-none`). Microcontrollers without them take their atomics from
//! `portable-atomic` through one of two features, and there the guarantee is
//! *interrupt-free*, not lock-free: `unsafe-assume-single-core` on a single-core MCU with
//! 32-bit compare-and-swap (Cortex-M3/M4/M7, built as `thumbv7em-none-eabihf`: each 64-bit
//! operation runs with interrupts disabled), `critical-section` on one without any
//! compare-and-swap (Cortex-M0/M0+, built as `thumbv6m-none-eabi`: every atomic operation in
//! the application's critical section). Without either, such a target fails to build with a
//! message saying which to choose.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub(crate) mod sync;

pub mod backoff;
pub mod breaker;
pub mod codel;
pub mod deadline;
pub mod dimmer;
pub mod fields;
pub mod fleet;
pub mod flow;
pub mod gate;
pub mod keyed;
pub mod layout;
pub mod limit;
pub mod limiter;
pub mod queue;
pub mod rate;
pub mod retry;
pub mod rng;
pub mod stats;
pub mod throttle;
pub mod time;
mod types;

pub use limiter::{Limiter, LimiterConfig, LimiterMetrics, Permit, RawPermit};
pub use types::{ConfigError, ConfigErrorKind, Outcome, Priority, Reason, Rejected, UsageError};
