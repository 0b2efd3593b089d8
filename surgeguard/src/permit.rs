//! Owned permits and the `Arc`-shared [`Limiter`].
//!
//! A core [`RawPermit`] is move-only and must be handed back exactly once. A [`Permit`]
//! owns one together with a handle to whoever issued it, so it is `Send + 'static` (it can
//! live in a spawned task or a boxed future) and it always ends: explicitly with
//! [`success`](Permit::success), [`dropped`](Permit::dropped) or
//! [`ignored`](Permit::ignored), or on `Drop` with the outcome set by
//! [`on_drop`](Permit::on_drop) (default [`Outcome::Ignored`]: a cancelled request is not a
//! capacity signal).

use std::fmt;
use std::sync::Arc;

use surgeguard_core::{ConfigError, LimiterConfig, Outcome, Priority, RawPermit, Rejected};

use crate::clock::{Clock, MonotonicClock};

/// Whoever issued a raw permit and takes it back (a limiter or a gate).
pub(crate) trait Issuer: Send + Sync + 'static {
    /// Returns `raw` with `outcome` at the issuer's clock's now. Never fails for a permit
    /// the issuer made.
    fn give_back(&self, raw: RawPermit, outcome: Outcome);
    /// Returns `raw` abandoned by its caller: the core's
    /// [`abandoned_outcome`](surgeguard_core::Limiter::abandoned_outcome) at now.
    fn give_back_abandoned(&self, raw: RawPermit);
}

/// What a permit dropped without an explicit end is released as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnDrop {
    Outcome(Outcome),
    /// Abandoned by its caller: `Dropped` if held longer than the last window's p99.
    Abandoned,
}

/// An admission that ends exactly once: `success()`, `dropped()`, `ignored()`, or on
/// `Drop` with the configured outcome. `Send + 'static`; it holds one `Arc` to its issuer.
/// Ending it costs the issuer's release (lock-free; for a [`Gate`](crate::Gate) with
/// waiters, also a run of the pump) plus one clock read and one `Arc` drop.
///
/// ```
/// use surgeguard::{Limiter, Outcome, Priority};
///
/// let limiter = Limiter::fixed(1.0).unwrap();
/// let permit = limiter.try_acquire(Priority::NORMAL).unwrap();
/// assert!(limiter.try_acquire(Priority::NORMAL).is_err()); // the one slot is taken
/// let permit = permit.on_drop(Outcome::Dropped); // a timeout below us, say
/// drop(permit); // released as Dropped
/// assert_eq!(limiter.inflight(), 0);
/// ```
#[must_use = "a permit holds a slot until it ends"]
pub struct Permit {
    issuer: Arc<dyn Issuer>,
    raw: Option<RawPermit>,
    on_drop: OnDrop,
}

impl Permit {
    pub(crate) fn new(issuer: Arc<dyn Issuer>, raw: RawPermit) -> Self {
        Self { issuer, raw: Some(raw), on_drop: OnDrop::Outcome(Outcome::Ignored) }
    }

    /// The outcome used if the permit is dropped without an explicit end (default
    /// `Ignored`).
    ///
    /// ```
    /// # use surgeguard::{Limiter, Outcome, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// let p = limiter.try_acquire(Priority::CRITICAL).unwrap().on_drop(Outcome::Success);
    /// drop(p); // counted as a success, with its latency
    /// ```
    pub fn on_drop(mut self, outcome: Outcome) -> Self {
        self.on_drop = OnDrop::Outcome(outcome);
        self
    }

    /// A drop without an explicit end means the caller gave up (a request future dropped
    /// because its client went away): released as `Dropped` if it was held longer than
    /// the p99 latency of the limiter's last window (the caller most likely timed out: an
    /// overload signal), as `Ignored` otherwise. The tower layers set it.
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// let mut p = limiter.try_acquire(Priority::NORMAL).unwrap();
    /// p.set_on_drop_abandoned();
    /// drop(p); // no window yet: Ignored
    /// assert_eq!(limiter.core().metrics().ignored, 1);
    /// ```
    pub fn set_on_drop_abandoned(&mut self) {
        self.on_drop = OnDrop::Abandoned;
    }

    /// Changes the drop outcome in place (for a permit held in a struct).
    ///
    /// ```
    /// # use surgeguard::{Limiter, Outcome, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// let mut p = limiter.try_acquire(Priority::NORMAL).unwrap();
    /// p.set_on_drop(Outcome::Dropped);
    /// ```
    pub fn set_on_drop(&mut self, outcome: Outcome) {
        self.on_drop = OnDrop::Outcome(outcome);
    }

    /// Ends the work as `outcome`.
    ///
    /// ```
    /// # use surgeguard::{Limiter, Outcome, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// limiter.try_acquire(Priority::NORMAL).unwrap().release(Outcome::Success);
    /// ```
    pub fn release(mut self, outcome: Outcome) {
        if let Some(raw) = self.raw.take() {
            self.issuer.give_back(raw, outcome);
        }
    }

    /// Ends the work as a success: its latency is a sample for the limit.
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// limiter.try_acquire(Priority::NORMAL).unwrap().success();
    /// ```
    pub fn success(self) {
        self.release(Outcome::Success);
    }

    /// Ends the work as dropped: an overload signal (a timeout, a 503 from below).
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// limiter.try_acquire(Priority::NORMAL).unwrap().dropped();
    /// ```
    pub fn dropped(self) {
        self.release(Outcome::Dropped);
    }

    /// Ends the work without a capacity signal (cancelled by the caller, a 4xx).
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// limiter.try_acquire(Priority::NORMAL).unwrap().ignored();
    /// ```
    pub fn ignored(self) {
        self.release(Outcome::Ignored);
    }

    /// The level it was admitted at.
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// let p = limiter.try_acquire(Priority::BACKGROUND).unwrap();
    /// assert_eq!(p.level(), Priority::BACKGROUND);
    /// ```
    pub fn level(&self) -> Priority {
        self.raw.as_ref().map(RawPermit::level).unwrap_or_default()
    }

    /// When it was admitted, ns on the issuer's clock.
    ///
    /// ```
    /// # use surgeguard::{Limiter, Priority};
    /// # let limiter = Limiter::fixed(4.0).unwrap();
    /// let p = limiter.try_acquire(Priority::NORMAL).unwrap();
    /// assert!(p.started_at() > 0);
    /// ```
    pub fn started_at(&self) -> u64 {
        self.raw.as_ref().map_or(0, RawPermit::started_at)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            match self.on_drop {
                OnDrop::Outcome(outcome) => self.issuer.give_back(raw, outcome),
                OnDrop::Abandoned => self.issuer.give_back_abandoned(raw),
            }
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("level", &self.level())
            .field("started_at", &self.started_at())
            .field("on_drop", &self.on_drop)
            .finish()
    }
}

pub(crate) struct LimiterInner<C> {
    pub(crate) core: surgeguard_core::Limiter,
    pub(crate) clock: C,
}

impl<C: Clock> Issuer for LimiterInner<C> {
    #[inline]
    fn give_back(&self, raw: RawPermit, outcome: Outcome) {
        // Cannot fail: the permit came from this limiter.
        let _ = self.core.release_raw(raw, self.clock.now_ns(), outcome);
    }

    fn give_back_abandoned(&self, raw: RawPermit) {
        let now = self.clock.now_ns();
        let outcome = self.core.abandoned_outcome(&raw, now);
        let _ = self.core.release_raw(raw, now, outcome);
    }
}

/// An adaptive concurrency limiter shared by `Arc` (cheap to clone), reading its own
/// clock and handing out owned [`Permit`]s. No queue: a full limiter refuses at once
/// (use [`Gate`](crate::Gate) to wait).
///
/// ```
/// use surgeguard::{Limiter, LimiterConfig, Priority, Reason};
///
/// let limiter = Limiter::new(LimiterConfig::default()).unwrap(); // Gradient, 3 levels
/// let p = limiter.try_acquire(Priority::NORMAL).unwrap();
/// std::thread::spawn(move || p.success()).join().unwrap();
///
/// let tiny = Limiter::fixed(1.0).unwrap();
/// let _held = tiny.try_acquire(Priority::NORMAL).unwrap();
/// assert_eq!(tiny.try_acquire(Priority::NORMAL).unwrap_err().reason, Reason::LimitReached);
/// ```
///
/// **Progress.** `try_acquire` and the permit's release are the core limiter's: lock-free
/// (a bounded CAS loop that fails only when another thread made progress), plus one clock
/// read and one `Arc` clone/drop each.
pub struct Limiter<C: Clock = MonotonicClock> {
    inner: Arc<LimiterInner<C>>,
}

impl<C: Clock> Clone for Limiter<C> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<C: Clock> fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("limit", &self.limit())
            .field("inflight", &self.inflight())
            .finish()
    }
}

impl Limiter {
    /// A limiter on the monotonic clock; every number in `config` is checked first.
    ///
    /// ```
    /// let l = surgeguard::Limiter::new(surgeguard::LimiterConfig::default()).unwrap();
    /// assert!(l.limit() >= 1.0);
    /// ```
    pub fn new(config: LimiterConfig) -> Result<Self, ConfigError> {
        Self::with_clock(config, MonotonicClock)
    }

    /// A limiter with a fixed limit (one level), on the monotonic clock.
    ///
    /// ```
    /// let l = surgeguard::Limiter::fixed(8.0).unwrap();
    /// assert_eq!(l.limit(), 8.0);
    /// assert!(surgeguard::Limiter::fixed(f64::NAN).is_err());
    /// ```
    pub fn fixed(limit: f64) -> Result<Self, ConfigError> {
        Self::new(crate::fixed_limiter_config(limit))
    }
}

impl<C: Clock> Limiter<C> {
    /// A limiter reading `clock` (e.g. a [`ManualClock`](crate::clock::ManualClock) in tests).
    ///
    /// ```
    /// use surgeguard::{clock::ManualClock, Limiter, LimiterConfig};
    /// let l = Limiter::with_clock(LimiterConfig::default(), ManualClock::new(1)).unwrap();
    /// # drop(l);
    /// ```
    pub fn with_clock(config: LimiterConfig, clock: C) -> Result<Self, ConfigError> {
        let core = surgeguard_core::Limiter::new(config)?;
        Ok(Self { inner: Arc::new(LimiterInner { core, clock }) })
    }

    /// A permit at once, or why not (`LimitReached` with a `retry_after` hint).
    ///
    /// ```
    /// # let l = surgeguard::Limiter::fixed(1.0).unwrap();
    /// let p = l.try_acquire(surgeguard::Priority::NORMAL).unwrap();
    /// p.success();
    /// ```
    #[inline]
    pub fn try_acquire(&self, level: Priority) -> Result<Permit, Rejected> {
        let now = self.inner.clock.now_ns();
        let raw = self.inner.core.try_acquire_raw(now, level)?;
        Ok(Permit::new(self.inner.clone() as Arc<dyn Issuer>, raw))
    }

    /// The current limit.
    ///
    /// ```
    /// assert_eq!(surgeguard::Limiter::fixed(3.0).unwrap().limit(), 3.0);
    /// ```
    pub fn limit(&self) -> f64 {
        self.inner.core.limit()
    }

    /// Permits out now.
    ///
    /// ```
    /// # let l = surgeguard::Limiter::fixed(3.0).unwrap();
    /// let _p = l.try_acquire(surgeguard::Priority::NORMAL).unwrap();
    /// assert_eq!(l.inflight(), 1);
    /// ```
    pub fn inflight(&self) -> u32 {
        self.inner.core.inflight()
    }

    /// The core limiter inside (metrics, `set_static_limit`, ...).
    ///
    /// ```
    /// # let l = surgeguard::Limiter::fixed(3.0).unwrap();
    /// let m = l.core().metrics();
    /// assert_eq!(m.inflight, 0);
    /// ```
    pub fn core(&self) -> &surgeguard_core::Limiter {
        &self.inner.core
    }

    /// The clock it reads.
    ///
    /// ```
    /// use surgeguard::clock::Clock;
    /// # let l = surgeguard::Limiter::fixed(3.0).unwrap();
    /// assert!(l.clock().now_ns() > 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn assert_send_static<T: Send + 'static>() {}

    #[test]
    fn permit_is_send_static() {
        assert_send_static::<Permit>();
        assert_send_static::<Limiter>();
        assert_send_static::<Limiter<ManualClock>>();
    }

    #[test]
    fn drop_outcome_is_what_was_configured() {
        let clock = ManualClock::new(1_000);
        let l = Limiter::with_clock(crate::fixed_limiter_config(4.0), clock.clone()).unwrap();
        drop(l.try_acquire(Priority::NORMAL).unwrap());
        drop(l.try_acquire(Priority::NORMAL).unwrap().on_drop(Outcome::Dropped));
        let mut p = l.try_acquire(Priority::NORMAL).unwrap();
        p.set_on_drop(Outcome::Success);
        drop(p);
        l.try_acquire(Priority::NORMAL).unwrap().dropped();
        l.try_acquire(Priority::NORMAL).unwrap().ignored();
        let m = l.core().metrics();
        assert_eq!(m.inflight, 0);
        assert_eq!(m.drops, 2);
        assert_eq!(m.ignored, 2);
    }
}
