//! Latency statistics without allocation: EWMA, a fixed log-linear histogram (plain and
//! atomic), and a windowed minimum.
