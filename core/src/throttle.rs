//! (being written: see the issue that owns this module)
