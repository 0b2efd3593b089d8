//! # surgeguard-ffi: the C ABI of surgeguard
//!
//! A thin, mechanical layer over `surgeguard-core` (its conventions follow
//! rustls-ffi's). Every exported function:
//!
//! - is named `sg_<type>_<verb>`, takes its inputs first and its outputs last;
//! - checks every pointer (NULL → `SG_NULL_ARGUMENT`) and every number (an enum value,
//!   a level, a duration → `SG_INVALID_ARGUMENT`; a config → `SG_CONFIG_*`) before it
//!   touches anything, and writes no output unless it succeeds (a rejection writes only
//!   its `sg_rejection`);
//! - takes enums from C as `uint32_t` (never a Rust enum: an invalid discriminant would
//!   be undefined behaviour) and returns an [`sg_status`];
//! - runs its body under `catch_unwind`: a panic never unwinds into C; it returns
//!   `SG_PANIC` and poisons the object it was using (later calls say `SG_PANIC` too;
//!   `_free`/`_deinit` still work).
//!
//! Objects are opaque handles, either on the heap (`sg_<type>_new` / `sg_<type>_free`) or
//! in caller storage (`sg_<type>_size` / `_align` / `_init` / `_deinit`) for programs
//! that allocate nothing. Permits are caller storage too ([`sg_permit`]): see
//! `permit.rs` for how double release, foreign permits and copies are caught.
//!
//! The header `include/surgeguard.h` is generated from this crate by cbindgen (pinned) and
//! committed; `tests/header.rs` fails if it is stale.
//!
//! ## Safety
//!
//! The exported functions that take pointers are `unsafe extern "C"`: their contract is
//! the same everywhere, so it is stated here once instead of on each function (hence the
//! `missing_safety_doc` allowance below). A pointer argument must be NULL or valid for
//! the access its type implies (an object handle: returned by `sg_<type>_new` or
//! initialised by `sg_<type>_init`, and not yet freed or deinitialised; an output: writable
//! for one value, or `len` values where a length is passed; an `sg_permit`: storage the
//! library wrote, or zeroed storage). Handles of thread-safe types may be shared between
//! threads; `sg_backoff` may not (as the core's `Backoff`). Every `unsafe` block below
//! says which part of this contract it relies on.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
// C names: `sg_limiter`, `SG_OK`, ... are what the header shows.
#![allow(non_camel_case_types)]
// One safety contract for every function, stated in the crate docs above.
#![allow(clippy::missing_safety_doc)]

mod handle;

pub mod backoff;
pub mod breaker;
pub mod deadline;
pub mod field;
pub mod flow;
pub mod gate;
pub mod keyed;
pub mod limiter;
pub mod permit;
pub mod placed;
pub mod rate;
pub mod retry;
#[cfg(target_os = "linux")]
pub mod shared_gate;
pub mod status;
#[cfg(target_os = "linux")]
mod storage;
pub mod throttle;
pub mod time;
pub mod vocab;

pub use permit::sg_permit;
pub use status::{sg_rejection, sg_status};
