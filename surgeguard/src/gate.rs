//! The async [`Gate`]: the core gate (limiter + priority queue + CoDel + deadlines + shed
//! switch) with the waiter registry and pump every binding needs, and a cancel-safe
//! `acquire().await`.
//!
//! The core gate is an event pump: `arrive` answers `Admitted`, `Rejected` or
//! `Queued(ticket)`, and a later `poll` reports `Granted(ticket, permit)` or
//! `Expired(ticket, why)`. This module owns the rest:
//!
//! - **The registry** maps each ticket to its waiter (the task's [`Waker`]). A poll may
//!   deliver any ticket's event to whichever thread polled, so events are routed by ticket.
//! - **The pump** polls on every release (when anyone waits), after every queued arrival,
//!   and when the core's `next_wakeup` comes due (a timer: with the `tokio` feature a
//!   short sleep task is spawned on the current runtime; without it, or outside a runtime,
//!   call [`Gate::pump`] at [`Gate::next_wakeup`] yourself). Every event a poll writes is
//!   consumed before the buffer is used again.
//! - **Cancel safety.** Dropping an [`Acquire`] future withdraws its ticket; if the grant
//!   raced with the drop and won, the permit goes straight back (as `Ignored`) and the
//!   freed slot is pumped on to the next waiter. No slot leaks and no grant is lost.
//!
//! **Progress.** The core's `arrive`, `release` and `cancel` are lock-free; its `poll` is
//! single-consumer (a concurrent poll returns at once and its work is done by the thread
//! inside). The registry is a `Mutex<HashMap>` held only to insert, route or remove
//! entries (short critical sections: no await, no waker called, no user code): this layer
//! is *blocking*, not lock-free, on the queued path only. An arrival admitted at
//! once, and a release with nobody waiting, never touch it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use surgeguard_core::gate::{Arrival, Event, GateConfig, GateMetrics, GateState};
use surgeguard_core::queue::Ticket;
use surgeguard_core::rng::SplitMix64;
use surgeguard_core::time::MAX_NOW;
use surgeguard_core::{ConfigError, Outcome, Priority, RawPermit, Rejected};

use crate::clock::{Clock, MonotonicClock, after};
use crate::permit::{Issuer, Permit};

/// SplitMix64's increment (the golden ratio in 64 bits).
const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
/// Events taken per core poll.
const BATCH: usize = 16;
/// No timer armed.
const NO_TIMER: u64 = u64::MAX;
/// An armed timer this overdue is presumed lost (its runtime shut down): 1 s.
#[cfg(feature = "tokio")]
const STALE_TIMER_NS: u64 = 1_000_000_000;

/// What a ticket's entry holds.
enum Entry {
    /// Queued; wake this task when its event arrives.
    Waiting(Option<Waker>),
    /// The event arrived before the waiter looked (or before it registered).
    Ready(Result<RawPermit, Rejected>),
    /// The waiter is gone but its ticket had already left the queue: the event is in some
    /// poller's buffer; hand a granted permit straight back when it is routed.
    Abandoned,
}

pub(crate) struct GateInner<C, const CAP: usize> {
    core: surgeguard_core::gate::Gate<CAP>,
    clock: C,
    registry: Mutex<HashMap<u64, Entry>>,
    /// When the armed timer fires (`NO_TIMER`: none).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    timer_at: AtomicU64,
    /// This gate, for the timer task (which must not keep it alive).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    me: Weak<Self>,
    /// The state of a SplitMix64 stream shared by every caller of `serve_optional`.
    optional_rng: AtomicU64,
}

impl<C: Clock, const CAP: usize> Issuer for GateInner<C, CAP> {
    fn give_back(&self, raw: RawPermit, outcome: Outcome) {
        // Cannot fail: the permit came from this gate.
        let _ = self.core.release(raw, self.clock.now_ns(), outcome);
        if self.core.waiting_total() > 0 {
            pump(self);
        }
    }

    fn give_back_abandoned(&self, raw: RawPermit) {
        let now = self.clock.now_ns();
        let outcome = self.core.limiter().abandoned_outcome(&raw, now);
        let _ = self.core.release(raw, now, outcome);
        if self.core.waiting_total() > 0 {
            pump(self);
        }
    }
}

impl<C, const CAP: usize> Drop for GateInner<C, CAP> {
    fn drop(&mut self) {
        // A grant nobody collected (not expected: every waiter holds the gate) still goes
        // back to the core, so no raw permit is ever dropped unreleased.
        let reg = self.registry.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, e) in reg.drain() {
            if let Entry::Ready(Ok(raw)) = e {
                let _ = self.core.release(raw, 0, Outcome::Ignored);
            }
        }
    }
}

fn lock(m: &Mutex<HashMap<u64, Entry>>) -> MutexGuard<'_, HashMap<u64, Entry>> {
    // A panic under the lock leaves the map consistent (every update is one insert or
    // remove), so a poisoned lock is used as is.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls the core until it has nothing more, routing every event by ticket, then re-arms
/// the timer. Safe to call from any thread at any time.
fn pump<C: Clock, const CAP: usize>(g: &GateInner<C, CAP>) {
    let mut wake: Vec<Waker> = Vec::new();
    loop {
        let mut buf: [Option<Event>; BATCH] = Default::default();
        let n = g.core.poll(g.clock.now_ns(), &mut buf);
        if n == 0 {
            break;
        }
        let mut give_back: Vec<RawPermit> = Vec::new();
        {
            let mut reg = lock(&g.registry);
            // Take every entry, not only the first n: nothing is left in the buffer.
            for ev in buf.iter_mut().filter_map(Option::take) {
                let (ticket, result) = match ev {
                    Event::Granted(t, p) => (t, Ok(p)),
                    Event::Expired(t, r) => (t, Err(r)),
                };
                match reg.remove(&ticket.to_bits()) {
                    Some(Entry::Waiting(w)) => {
                        reg.insert(ticket.to_bits(), Entry::Ready(result));
                        wake.extend(w);
                    }
                    Some(Entry::Abandoned) => {
                        if let Ok(p) = result {
                            give_back.push(p);
                        }
                    }
                    // Not registered yet (the arriving thread is about to), or a stale
                    // entry: keep the event for the waiter.
                    Some(Entry::Ready(_)) | None => {
                        reg.insert(ticket.to_bits(), Entry::Ready(result));
                    }
                }
            }
        }
        let more = n == BATCH || !give_back.is_empty();
        for p in give_back {
            let _ = g.core.release(p, g.clock.now_ns(), Outcome::Ignored);
        }
        if !more {
            break;
        }
    }
    for w in wake {
        w.wake();
    }
    arm_timer(g);
}

/// Arms one timer for the core's `next_wakeup` if none is armed at or before it: a task on
/// the current tokio runtime that sleeps until then and runs the pump (which re-arms).
/// Outside a runtime nothing is armed (call [`Gate::pump`] at [`Gate::next_wakeup`]).
#[cfg(feature = "tokio")]
fn arm_timer<C: Clock, const CAP: usize>(g: &GateInner<C, CAP>) {
    let now = g.clock.now_ns();
    let Some(t) = g.core.next_wakeup(now) else { return };
    // Relaxed: the value only deduplicates timers; a spare timer just pumps once more.
    let armed = g.timer_at.load(Ordering::Relaxed);
    // A timer due at or before `t` covers it — unless it is long overdue (its runtime may
    // have shut down), then arm a new one.
    if armed <= t && now < armed.saturating_add(STALE_TIMER_NS) {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
    g.timer_at.store(t, Ordering::Relaxed);
    let me = g.me.clone();
    rt.spawn(async move {
        tokio::time::sleep(Duration::from_nanos(t.saturating_sub(now))).await;
        if let Some(g) = me.upgrade() {
            let _ = g.timer_at.compare_exchange(t, NO_TIMER, Ordering::Relaxed, Ordering::Relaxed);
            pump(&g);
        }
    });
}

#[cfg(not(feature = "tokio"))]
fn arm_timer<C: Clock, const CAP: usize>(_g: &GateInner<C, CAP>) {}

/// A priority admission gate shared by `Arc` (cheap to clone): [`try_acquire`] never
/// waits; [`acquire`] returns a cancel-safe future that waits in the priority queue.
/// `CAP` is the queue's compile-time capacity (default 1024 waiters; set a smaller bound
/// with `GateConfig::queue_capacity`).
///
/// ```
/// use std::time::Duration;
/// use surgeguard::{Gate, Priority};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let gate: Gate = Gate::fixed(2.0).unwrap();
/// let permit = gate
///     .acquire(Priority::CRITICAL)
///     .timeout(Duration::from_millis(100))
///     .await
///     .unwrap();
/// // ... call the dependency ...
/// permit.success();
/// # }
/// ```
///
/// [`try_acquire`]: Gate::try_acquire
/// [`acquire`]: Gate::acquire
pub struct Gate<C: Clock = MonotonicClock, const CAP: usize = 1024> {
    inner: Arc<GateInner<C, CAP>>,
}

impl<C: Clock, const CAP: usize> Clone for Gate<C, CAP> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<C: Clock, const CAP: usize> fmt::Debug for Gate<C, CAP> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("limit", &self.inner.core.limiter().limit())
            .field("inflight", &self.inner.core.limiter().inflight())
            .field("waiting", &self.inner.core.waiting_total())
            .finish()
    }
}

impl<const CAP: usize> Gate<MonotonicClock, CAP> {
    /// A gate on the monotonic clock; every number in `config` is checked first.
    ///
    /// ```
    /// let gate: surgeguard::Gate = surgeguard::Gate::new(Default::default()).unwrap();
    /// # drop(gate);
    /// ```
    pub fn new(config: GateConfig) -> Result<Self, ConfigError> {
        Self::with_clock(config, MonotonicClock)
    }

    /// A gate with a fixed concurrency limit shared by the three default levels (critical,
    /// normal, background) and the default queue settings (folly CoDel, adaptive LIFO).
    ///
    /// ```
    /// let gate: surgeguard::Gate = surgeguard::Gate::fixed(16.0).unwrap();
    /// assert_eq!(gate.core().limiter().limit(), 16.0);
    /// ```
    pub fn fixed(limit: f64) -> Result<Self, ConfigError> {
        let mut cfg = GateConfig::default();
        cfg.limiter.algorithm = crate::fixed_limiter_config(limit).algorithm;
        Self::new(cfg)
    }
}

impl<C: Clock, const CAP: usize> Gate<C, CAP> {
    /// A gate reading `clock` (e.g. a [`ManualClock`](crate::clock::ManualClock) in tests).
    ///
    /// ```
    /// use surgeguard::{clock::ManualClock, Gate};
    /// let gate: Gate<ManualClock, 64> = Gate::with_clock(Default::default(), ManualClock::new(1)).unwrap();
    /// # drop(gate);
    /// ```
    pub fn with_clock(config: GateConfig, clock: C) -> Result<Self, ConfigError> {
        let core = surgeguard_core::gate::Gate::<CAP>::new(config)?;
        Ok(Self {
            inner: Arc::new_cyclic(|me| GateInner {
                core,
                clock,
                registry: Mutex::new(HashMap::new()),
                timer_at: AtomicU64::new(NO_TIMER),
                me: me.clone(),
                optional_rng: AtomicU64::new(crate::clock::monotonic_ns()),
            }),
        })
    }

    fn permit(&self, raw: RawPermit) -> Permit {
        Permit::new(self.inner.clone() as Arc<dyn Issuer>, raw)
    }

    /// A permit now, or a refusal — never waits. Makes exactly the core's decision
    /// (`Gate::try_arrive`): `Shed`, `DeadlineUnmeetable`, or `LimitReached` where
    /// `acquire` would queue.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// let p = gate.try_acquire(surgeguard::Priority::NORMAL).unwrap();
    /// assert!(gate.try_acquire(surgeguard::Priority::NORMAL).is_err());
    /// p.success();
    /// ```
    pub fn try_acquire(&self, level: Priority) -> Result<Permit, Rejected> {
        let raw = self.inner.core.try_arrive(self.inner.clock.now_ns(), level, None)?;
        Ok(self.permit(raw))
    }

    /// A future that admits at `level` at once, or waits in the queue for a grant, or
    /// resolves to a refusal (`Rejected` with its reason and `retry_after`). Refine it
    /// with [`deadline`](Acquire::deadline) / [`timeout`](Acquire::timeout) before
    /// awaiting. Cancel-safe: see the module docs.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// let p = gate.acquire(surgeguard::Priority::NORMAL).await.unwrap();
    /// p.success();
    /// # }
    /// ```
    pub fn acquire(&self, level: Priority) -> Acquire<C, CAP> {
        Acquire { gate: self.clone(), level, deadline: None, timeout: None, state: State::Start }
    }

    /// Runs the pump now: grants freed slots, expires waiters whose time ran out, wakes
    /// their tasks. The crate calls it on every release and queued arrival, and (feature
    /// `tokio`) at every due [`next_wakeup`](Self::next_wakeup); call it yourself at
    /// `next_wakeup` when running without tokio.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// gate.pump();
    /// ```
    pub fn pump(&self) {
        pump(&self.inner);
    }

    /// When the pump must next run (ns on this gate's clock), if anything waits.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// assert_eq!(gate.next_wakeup(), None); // nothing waits
    /// ```
    pub fn next_wakeup(&self) -> Option<u64> {
        self.inner.core.next_wakeup(self.inner.clock.now_ns())
    }

    /// Readiness (overloaded is not broken).
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// assert_eq!(gate.state(), surgeguard::core::gate::GateState::Healthy);
    /// ```
    pub fn state(&self) -> GateState {
        self.inner.core.state()
    }

    /// The on-call switch: refuse every arrival at level ≥ `level` (`None`: off); waiters
    /// at those levels are expired by the pump, which runs now.
    ///
    /// ```
    /// use surgeguard::Priority;
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(4.0).unwrap();
    /// gate.set_shed_level(Some(Priority::BACKGROUND));
    /// assert!(gate.try_acquire(Priority::BACKGROUND).is_err());
    /// assert!(gate.try_acquire(Priority::NORMAL).is_ok());
    /// ```
    pub fn set_shed_level(&self, level: Option<Priority>) {
        self.inner.core.set_shed_level(level);
        self.pump();
    }

    /// The brownout dimmer now: `d` in `[0, 1]` — how much *optional* work (recommendations,
    /// previews, personalisation) to skip: serve it with probability `1 − d`. It rises
    /// before the gate has to refuse requests — with the queue's occupancy, CoDel's
    /// queueing delay and the refusals of the last second — and falls back slowly (Klein
    /// et al., "Brownout: building more robust cloud applications", ICSE 2014; the rule is
    /// the core's, `surgeguard::core::dimmer`). Degradation order: optional features first
    /// (`d > 0`), then background work (the gate's priorities refuse it first), then normal
    /// work (the gate's own shedding).
    ///
    /// Reads the gate and never changes its decisions. Progress: wait-free.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(4.0).unwrap();
    /// assert_eq!(gate.brownout(), 0.0); // idle: serve everything
    /// gate.set_shed_level(Some(surgeguard::Priority::BACKGROUND));
    /// assert_eq!(gate.brownout(), 1.0); // the on-call switch dims fully
    /// ```
    pub fn brownout(&self) -> f64 {
        self.inner.core.brownout(self.inner.clock.now_ns())
    }

    /// Whether to serve this request's optional work: `true` with probability
    /// `1 − brownout()` (always when the dimmer is 0, never at 1), drawn from a SplitMix64
    /// stream the gate's callers share. Progress: wait-free (the dimmer, then one
    /// `fetch_add`).
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(4.0).unwrap();
    /// if gate.serve_optional() {
    ///     // ... add the recommendations ...
    /// }
    /// ```
    pub fn serve_optional(&self) -> bool {
        let d = self.brownout();
        if d <= 0.0 {
            return true;
        }
        if d >= 1.0 {
            return false;
        }
        // Relaxed: only the draws' independence matters, not their order.
        let state = self.inner.optional_rng.fetch_add(GOLDEN_GAMMA, Ordering::Relaxed);
        // The stream's next output: SplitMix64 from the state before the add.
        SplitMix64::new(state).next_f64() >= d
    }

    /// A snapshot of counters and gauges.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// assert_eq!(gate.metrics().waiting, 0);
    /// ```
    pub fn metrics(&self) -> GateMetrics {
        self.inner.core.metrics()
    }

    /// The core gate inside.
    ///
    /// ```
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(2.0).unwrap();
    /// assert_eq!(gate.core().limiter().inflight(), 0);
    /// ```
    pub fn core(&self) -> &surgeguard_core::gate::Gate<CAP> {
        &self.inner.core
    }

    /// The clock it reads.
    ///
    /// ```
    /// use surgeguard::clock::Clock;
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(2.0).unwrap();
    /// assert!(gate.clock().now_ns() > 0);
    /// ```
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Registry entries (waiters and undelivered events): for tests and leak checks.
    #[doc(hidden)]
    pub fn registry_len(&self) -> usize {
        lock(&self.inner.registry).len()
    }
}

enum State {
    Start,
    Queued(Ticket),
    Done,
}

/// The future of [`Gate::acquire`]: `Ok(Permit)` or `Err(Rejected)`. Dropping it before
/// it completes withdraws its place (or returns a grant that raced with the drop).
///
/// # Panics
///
/// If polled again after it completed (as most futures do).
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
/// let held = gate.try_acquire(surgeguard::Priority::NORMAL).unwrap();
/// let waiting = gate.acquire(surgeguard::Priority::NORMAL).timeout(Duration::from_secs(5));
/// drop(waiting); // cancelled before it was polled: nothing queued, nothing leaked
/// held.success();
/// # }
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Acquire<C: Clock = MonotonicClock, const CAP: usize = 1024> {
    gate: Gate<C, CAP>,
    level: Priority,
    deadline: Option<u64>,
    timeout: Option<Duration>,
    state: State,
}

impl<C: Clock, const CAP: usize> Acquire<C, CAP> {
    /// An absolute deadline, ns on the gate's clock: the gate refuses at once a deadline
    /// it cannot meet, and drops a waiter whose remaining time is shorter than the expected
    /// service time. A deadline above `MAX_NOW` means none.
    ///
    /// ```
    /// use surgeguard::clock::Clock;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// let t = gate.clock().now_ns() + 50_000_000;
    /// let p = gate.acquire(surgeguard::Priority::NORMAL).deadline(t).await.unwrap();
    /// # p.success(); }
    /// ```
    pub fn deadline(mut self, deadline_ns: u64) -> Self {
        self.deadline = (deadline_ns <= MAX_NOW).then_some(deadline_ns);
        self.timeout = None;
        self
    }

    /// A deadline `d` after the first poll of this future.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let gate: surgeguard::Gate = surgeguard::Gate::fixed(1.0).unwrap();
    /// let p = gate.acquire(surgeguard::Priority::NORMAL)
    ///     .timeout(std::time::Duration::from_millis(20)).await.unwrap();
    /// # p.success(); }
    /// ```
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self.deadline = None;
        self
    }
}

impl<C: Clock, const CAP: usize> Unpin for Acquire<C, CAP> {}

impl<C: Clock, const CAP: usize> Future for Acquire<C, CAP> {
    type Output = Result<Permit, Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let g = &this.gate.inner;
        match this.state {
            State::Done => panic!("`Acquire` polled after completion"),
            State::Start => {
                let now = g.clock.now_ns();
                let deadline = match this.timeout {
                    Some(d) => Some(after(now, d)),
                    None => this.deadline,
                };
                match g.core.arrive(now, this.level, deadline) {
                    Arrival::Admitted(raw) => {
                        this.state = State::Done;
                        Poll::Ready(Ok(this.gate.permit(raw)))
                    }
                    Arrival::Rejected(r) => {
                        this.state = State::Done;
                        Poll::Ready(Err(r))
                    }
                    Arrival::Queued(ticket) => {
                        {
                            let mut reg = lock(&g.registry);
                            // An event may already be here (another thread's poll).
                            if !matches!(reg.get(&ticket.to_bits()), Some(Entry::Ready(_))) {
                                reg.insert(
                                    ticket.to_bits(),
                                    Entry::Waiting(Some(cx.waker().clone())),
                                );
                            }
                        }
                        this.state = State::Queued(ticket);
                        // The core asks for a poll after Queued: a slot may have freed
                        // while the arrival was being queued.
                        pump(g);
                        this.take_ready(ticket, cx)
                    }
                }
            }
            State::Queued(ticket) => this.take_ready(ticket, cx),
        }
    }
}

impl<C: Clock, const CAP: usize> Acquire<C, CAP> {
    fn take_ready(
        &mut self,
        ticket: Ticket,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, Rejected>> {
        let key = ticket.to_bits();
        let mut reg = lock(&self.gate.inner.registry);
        match reg.get_mut(&key) {
            Some(Entry::Waiting(w)) => {
                match w {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Some(Entry::Ready(_)) => {
                let Some(Entry::Ready(result)) = reg.remove(&key) else { unreachable!() };
                drop(reg);
                self.state = State::Done;
                Poll::Ready(result.map(|raw| self.gate.permit(raw)))
            }
            // Abandoned or missing cannot happen while this future lives.
            _ => Poll::Pending,
        }
    }
}

impl<C: Clock, const CAP: usize> Drop for Acquire<C, CAP> {
    fn drop(&mut self) {
        let State::Queued(ticket) = self.state else { return };
        let g = &self.gate.inner;
        let key = ticket.to_bits();
        let granted = {
            let mut reg = lock(&g.registry);
            match reg.remove(&key) {
                Some(Entry::Ready(Ok(raw))) => Some(raw),
                Some(Entry::Ready(Err(_))) => None,
                _ => {
                    // Withdraw under the lock, so the ticket's event cannot be routed
                    // between the failed cancel and the tombstone below.
                    if g.core.cancel(ticket).is_err() {
                        // It left the queue already: its event is in a poller's buffer.
                        reg.insert(key, Entry::Abandoned);
                    }
                    None
                }
            }
        };
        if let Some(raw) = granted {
            // The grant raced with the drop and won: the slot goes on to the next waiter.
            g.give_back(raw, Outcome::Ignored);
        }
    }
}
