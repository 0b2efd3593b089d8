//! The native half of the `surgeguard` npm package: surgeguard-core under N-API (napi-rs 3).
//!
//! This crate only converts types, reads the clock and maps errors; Promises,
//! waiters, error classes, middleware and input-type checks live in the hand-written JS
//! facade (`index.js`, `lib/*.js`). It is not meant to be used from JS directly.
//!
//! Two kinds of entry point:
//! - **Cold paths** (constructors, metrics, configuration, polls) are ordinary napi-rs
//!   classes and functions (`#[napi]`): convenient, ~250 ns a call.
//! - **Hot paths** (acquire, release, budget check, rate check, keyed acquire) are raw
//!   N-API callbacks beside each family's class, built on the helpers in [`raw`] and
//!   registered by [`fast`] on the exports' `fast` object. They take a
//!   *handle* (an N-API external made by [`handle::new_handle`]) as the first argument
//!   instead of unwrapping `this` (~80 ns saved), return plain numbers (no BigInt, no
//!   objects), and read the clock natively. Measured on the development machine while
//!   designing this: a raw N-API free function costs ~30 ns, a napi-rs class method
//!   ~250 ns (`bench/bench.js` reports the raw-call floor, see `BENCHMARKS.md`).
//!
//! Time: every structure runs on one process-wide monotonic clock in nanoseconds
//! ([`clock::now_ns`]); each call also accepts an injected `nowNs` (a BigInt) for
//! deterministic tests. Durations cross the boundary as milliseconds (JS numbers).
//!
//! Threads: every object belongs to the JS thread (isolate) that made it; the handles are
//! `Rc`-based and checked by a type tag, never shared with worker threads. Threads (and
//! processes) share a limit by opening the same shared-memory object by name ([`shared`]).

#![deny(clippy::all)]

pub mod clock;
pub mod convert;
pub mod deadline;
pub mod fast;
pub mod fields;
pub mod flow;
pub mod gate;
pub mod handle;
pub mod keyed;
pub mod limiter;
pub mod raw;
pub mod resilience;
pub mod shared;
pub mod shared_gate;
pub mod slab;

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// The addon's version: the workspace version it was built from (the npm package's too).
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Called once per module load: hangs the raw hot-path functions on `exports.fast`.
#[napi(module_exports)]
pub fn init(mut exports: Object, env: Env) -> Result<()> {
    let fast = fast::create_fast_object(&env)?;
    exports.set("fast", fast)?;
    Ok(())
}
