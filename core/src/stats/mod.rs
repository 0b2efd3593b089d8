//! Latency statistics without allocation: EWMA, a fixed log-linear histogram (plain and
//! atomic), a windowed minimum, and a sample window closed by time and sample count.

mod ewma;
mod histogram;
mod window;

pub use ewma::Ewma;
pub use histogram::{
    bucket_index, bucket_value, AtomicHistogram, AtomicLatencyHistogram, Histogram, LatencyCursor,
    BUCKETS,
};
pub(crate) use window::summarize as summarize_window;
pub use window::{SampleWindow, WindowedMin};
