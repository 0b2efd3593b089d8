//! STUB: the lock-free Limiter (being written).
