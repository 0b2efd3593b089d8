//! Placeholder; the real benchmark lands with the limiter.
fn main() {}
