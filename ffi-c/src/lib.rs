//! Placeholder: the C ABI lands with its issue.
