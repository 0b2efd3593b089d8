//! `Placed<T>`: a core object owned by this Python object, or one in memory shared between
//! processes (`RateLimiter.shared`, `RetryBudget.shared`); either way the methods call the
//! same core type through `Deref`, so a shared object has exactly the in-process API.

use std::ops::Deref;

pub enum Placed<T: 'static> {
    Local(T),
    #[cfg(target_os = "linux")]
    Shared(Box<dyn Deref<Target = T> + Send + Sync>),
}

impl<T> Deref for Placed<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            Placed::Local(t) => t,
            #[cfg(target_os = "linux")]
            Placed::Shared(s) => s,
        }
    }
}
