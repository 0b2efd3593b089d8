//! Pipeline backpressure: make "full" travel upstream as a signal.
//!
//! - [`Credits`] / [`CreditTable`]: demand-driven flow control. A consumer grants credit,
//!   a producer takes one credit per item and can never send more than was granted
//!   (Reactive Streams rule 1.1); credit is topped up in batches at a low-water mark, and a
//!   table of channels lets one slow channel stop alone (Flink network credits).
//! - [`LagMeter`]: consumer lag in seconds and time to drain, from windowed produce and
//!   consume rates, plus the age of the oldest unprocessed item: lag is measured in
//!   seconds, not messages, because a count means nothing without the rate that drains it.
//! - [`Watermarks`]: Kafka-style `pause()`/`resume()` with hysteresis on free capacity, so a
//!   consumer stops fetching instead of blocking, and never flaps.
//!
//! Everything here is `no_std`, allocation-free and lock-free; time is an argument
//! (`now`, nanoseconds on the caller's monotonic clock).

mod credits;
mod lag;
mod watermarks;

pub use credits::{CreditTable, Credits, CreditsConfig, CreditsMetrics};
pub use lag::{LagMeter, LagMeterConfig, LagMetrics};
pub use watermarks::{Transition, Watermarks, WatermarksConfig, WatermarksMetrics};
