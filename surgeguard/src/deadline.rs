//! The request's deadline, for the code that serves it (feature `tokio`).
//!
//! A server layer (the tower [`GateLayer`](crate::tower::GateLayer)) turns the caller's
//! remaining budget (`grpc-timeout`, `surgeguard-timeout-ms`, …) into an absolute
//! [`Deadline`] at arrival and runs the handler inside [`scope`]; the handler, and any
//! client call it makes (the tower [`ClientLayer`](crate::tower::ClientLayer) sets the
//! outgoing headers from it), reads it with [`current`] or [`remaining`]. This is deadline
//! propagation as gRPC does it (a deadline, not a timeout, crosses each hop: the callee
//! never works longer than its caller waits) and as the Google SRE book recommends
//! ("Addressing Cascading Failures": propagate deadlines, check them before starting work).
//!
//! The deadline lives in a tokio task-local: it follows the handler's future, including
//! across `.await`s, but not into tasks it spawns (pass the [`Deadline`] on, or wrap the
//! spawned future in [`scope`] again). A nested scope can only shorten it: the effective
//! deadline is the earlier of the two.
//!
//! Times are nanoseconds on the crate's monotonic clock ([`monotonic_ns`]), the clock every
//! surgeguard binding reads.
//!
//! ```
//! use std::time::Duration;
//! use surgeguard::deadline::{self, Deadline};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! assert_eq!(deadline::remaining(), None); // no deadline outside a scope
//! deadline::scope(Deadline::after(Duration::from_millis(250)), async {
//!     let left = deadline::remaining().unwrap();
//!     assert!(left <= Duration::from_millis(250));
//!     // A dependency call may use at most what is left:
//!     let r = deadline::enforce(async { 42 }).await;
//!     assert_eq!(r, Ok(42));
//! })
//! .await;
//! # }
//! ```
//!
//! **Cost.** Reading it is a task-local access (a thread-local lookup) and, for
//! [`remaining`], one clock read; no allocation, no lock.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use surgeguard_core::time::MAX_NOW;

use crate::clock::{after, monotonic_ns};

/// An absolute deadline: nanoseconds on the crate's monotonic clock
/// ([`monotonic_ns`]), at most `MAX_NOW`. `Copy`; also usable as a request extension.
///
/// ```
/// use std::time::Duration;
/// use surgeguard::deadline::Deadline;
///
/// let d = Deadline::at_ns(5_000);
/// assert_eq!(d.remaining_at(2_000), Duration::from_nanos(3_000));
/// assert_eq!(d.remaining_at(9_000), Duration::ZERO); // passed: zero, never negative
/// assert!(d.is_expired_at(5_000));
/// assert_eq!(Deadline::at_ns(u64::MAX).as_ns(), surgeguard::core::time::MAX_NOW);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(u64);

impl Deadline {
    /// The deadline at `ns` on the monotonic clock (clamped to `MAX_NOW`).
    pub const fn at_ns(ns: u64) -> Self {
        Self(if ns > MAX_NOW { MAX_NOW } else { ns })
    }

    /// `budget` from now (saturating at `MAX_NOW`).
    ///
    /// ```
    /// let d = surgeguard::deadline::Deadline::after(std::time::Duration::from_secs(1));
    /// assert!(d.remaining() <= std::time::Duration::from_secs(1));
    /// ```
    pub fn after(budget: Duration) -> Self {
        Self(after(monotonic_ns(), budget))
    }

    /// Nanoseconds on the monotonic clock.
    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// Time left at `now` (ns on the same clock); zero once passed.
    pub fn remaining_at(self, now: u64) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(now))
    }

    /// Time left now; zero once passed.
    pub fn remaining(self) -> Duration {
        self.remaining_at(monotonic_ns())
    }

    /// Whether the deadline has passed at `now` (a deadline at `now` has).
    pub fn is_expired_at(self, now: u64) -> bool {
        now >= self.0
    }

    /// Whether the deadline has passed.
    pub fn is_expired(self) -> bool {
        self.is_expired_at(monotonic_ns())
    }
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Deadline({} ns)", self.0)
    }
}

tokio::task_local! {
    static CURRENT: Deadline;
}

/// The deadline of the request being served, if any.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use surgeguard::deadline::{self, Deadline};
/// let d = Deadline::at_ns(u64::MAX);
/// assert_eq!(deadline::scope(d, async { deadline::current() }).await, Some(d));
/// # }
/// ```
pub fn current() -> Option<Deadline> {
    CURRENT.try_with(|d| *d).ok()
}

/// The time left to serve the request being served (zero once passed), if it has a
/// deadline.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use surgeguard::deadline::{self, Deadline};
/// let left = deadline::scope(Deadline::after(Duration::from_secs(1)), async {
///     deadline::remaining()
/// })
/// .await;
/// assert!(left.unwrap() <= Duration::from_secs(1));
/// # }
/// ```
pub fn remaining() -> Option<Duration> {
    current().map(Deadline::remaining)
}

/// Runs `fut` with `deadline` as its [`current`] deadline — or the current one, if that is
/// earlier (a scope only shortens the deadline).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use surgeguard::deadline::{self, Deadline};
/// let (early, late) = (Deadline::at_ns(1_000), Deadline::at_ns(2_000));
/// let inner = deadline::scope(early, deadline::scope(late, async { deadline::current() })).await;
/// assert_eq!(inner, Some(early));
/// # }
/// ```
pub async fn scope<F: Future>(deadline: Deadline, fut: F) -> F::Output {
    // Read at the first poll (not when the future is built): inside any outer scope.
    let d = current().map_or(deadline, |outer| outer.min(deadline));
    CURRENT.scope(d, fut).await
}

/// Runs `f` synchronously with `deadline` as its [`current`] deadline (or the current one,
/// if earlier): for the synchronous part of a service's `call`.
///
/// ```
/// use surgeguard::deadline::{self, Deadline};
/// let seen = deadline::sync_scope(Deadline::at_ns(7), deadline::current);
/// assert_eq!(seen, Some(Deadline::at_ns(7)));
/// ```
pub fn sync_scope<R>(deadline: Deadline, f: impl FnOnce() -> R) -> R {
    let d = current().map_or(deadline, |outer| outer.min(deadline));
    CURRENT.sync_scope(d, f)
}

/// The current deadline passed before the work finished (or had already passed).
///
/// ```
/// let e = surgeguard::deadline::DeadlineExceeded;
/// assert_eq!(e.to_string(), "deadline exceeded");
/// let _: &dyn std::error::Error = &e;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlineExceeded;

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

/// Runs `fut` until the [`current`] deadline: `Err(DeadlineExceeded)` at once if it has
/// passed (`fut` is not polled: no work starts for a caller that gave up), or when it
/// passes (`fut` is dropped). Without a deadline, runs `fut` to the end. Uses tokio's
/// timer (the runtime must have it enabled, as `#[tokio::main]` does).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use surgeguard::deadline::{self, Deadline, DeadlineExceeded};
/// let slow = async { tokio::time::sleep(Duration::from_secs(3600)).await; 1 };
/// let r = deadline::scope(Deadline::after(Duration::from_millis(5)), deadline::enforce(slow)).await;
/// assert_eq!(r, Err(DeadlineExceeded));
/// # }
/// ```
pub async fn enforce<F: Future>(fut: F) -> Result<F::Output, DeadlineExceeded> {
    let Some(d) = current() else { return Ok(fut.await) };
    let left = d.remaining();
    if left.is_zero() {
        return Err(DeadlineExceeded);
    }
    tokio::time::timeout(left, fut).await.map_err(|_| DeadlineExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_and_saturates() {
        assert_eq!(Deadline::at_ns(MAX_NOW + 1).as_ns(), MAX_NOW);
        assert_eq!(Deadline::after(Duration::MAX).as_ns(), MAX_NOW);
        assert_eq!(Deadline::at_ns(0).remaining_at(u64::MAX), Duration::ZERO);
        assert!(!Deadline::at_ns(10).is_expired_at(9));
        assert!(Deadline::at_ns(10).is_expired_at(10));
    }

    #[tokio::test]
    async fn scope_is_per_task_and_only_shortens() {
        assert_eq!(current(), None);
        let (a, b) = (Deadline::at_ns(100), Deadline::at_ns(50));
        scope(a, async move {
            assert_eq!(current(), Some(a));
            assert_eq!(scope(b, async { current() }).await, Some(b));
            assert_eq!(scope(Deadline::at_ns(200), async { current() }).await, Some(a));
            // A spawned task does not inherit it.
            assert_eq!(tokio::spawn(async { current() }).await.unwrap(), None);
            assert_eq!(sync_scope(b, current), Some(b));
            assert_eq!(current(), Some(a));
        })
        .await;
        assert_eq!(current(), None);
    }

    #[tokio::test]
    async fn enforce_does_not_start_work_past_the_deadline() {
        let started = std::sync::atomic::AtomicBool::new(false);
        let r = scope(
            Deadline::at_ns(1),
            enforce(async { started.store(true, std::sync::atomic::Ordering::Relaxed) }),
        )
        .await;
        assert_eq!(r, Err(DeadlineExceeded));
        assert!(!started.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(enforce(async { 3 }).await, Ok(3)); // no deadline
    }
}
