//! # surgeguard-sim
//!
//! A deterministic discrete-event simulator of overload, driving the real `surgeguard-core`
//! (never a copy of its algorithms): open-loop Poisson arrivals with a priority mix, clients
//! with timeouts and retry policies, tiers of hosts with worker pools and queues, a
//! dependency whose capacity or latency changes at given times, optional health-check
//! ejection with cold restarts. Virtual time in nanoseconds, one seeded SplitMix64 stream per
//! purpose, ties broken by insertion order: a run is a pure function of (scenario,
//! protection, seed).
//!
//! The presets reproduce the classic cascades (and a brownout); `cargo run -p
//! surgeguard-sim` (= `make demo`) compares protections on them, prints one table and writes
//! SVG plots to `docs/sim/`.

pub mod closed_loop;
pub mod engine;
pub mod healthy;
pub mod metrics;
pub mod plot;
pub mod protect;
pub mod report;
pub mod scenario;
pub mod sweep;
pub mod world;

pub use protect::Protection;
pub use scenario::Scenario;
pub use world::{run, RunResult};
