//! Placeholder; filled by the issue that owns it.
fn main() {}
