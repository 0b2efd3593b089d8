//! The async Gate: cancel safety (a grant that races with a drop is returned, a withdrawn
//! ticket leaves nothing behind), exactness across tasks on a multi-threaded runtime, the
//! tokio timer, and a many-iteration stress test that drops futures at every await point.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use surgeguard::clock::{Clock, ManualClock};
use surgeguard::core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard::{Gate, GateConfig, LimiterConfig, Outcome, Priority, Reason};

fn fixed_cfg(limit: f64) -> GateConfig {
    GateConfig {
        limiter: LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: limit,
            min_limit: limit,
            max_limit: limit,
        })),
        // No CoDel: the stress tests check counting, not sloughing.
        codel: None,
        ..GateConfig::default()
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

fn manual_gate(limit: f64) -> (Gate<ManualClock, 64>, ManualClock) {
    let clock = ManualClock::new(1_000_000_000);
    (Gate::with_clock(fixed_cfg(limit), clock.clone()).unwrap(), clock)
}

#[test]
fn a_grant_that_raced_with_the_drop_goes_back_and_on_to_the_next_waiter() {
    let (gate, _clock) = manual_gate(1.0);
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut a = gate.acquire(Priority::NORMAL);
    let mut b = gate.acquire(Priority::NORMAL);
    assert!(poll_once(&mut a).is_pending());
    assert!(poll_once(&mut b).is_pending());
    held.success(); // the pump grants `a`; `a` has not looked yet
    assert_eq!(gate.core().limiter().inflight(), 1);
    drop(a); // the grant is handed back and pumped on to `b`
    let Poll::Ready(Ok(p)) = poll_once(&mut b) else { panic!("b was not granted") };
    assert_eq!(gate.core().limiter().inflight(), 1);
    p.success();
    assert_eq!(gate.core().limiter().inflight(), 0);
    assert_eq!(gate.registry_len(), 0);
    assert_eq!(gate.core().limiter().metrics().ignored, 1);
}

#[test]
fn dropping_a_queued_future_withdraws_its_ticket() {
    let (gate, _clock) = manual_gate(1.0);
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut a = gate.acquire(Priority::NORMAL);
    assert!(poll_once(&mut a).is_pending());
    assert_eq!(gate.core().waiting_total(), 1);
    drop(a);
    assert_eq!(gate.core().waiting_total(), 0);
    assert_eq!(gate.registry_len(), 0);
    assert_eq!(gate.metrics().cancelled, 1);
    held.success();
    assert_eq!(gate.core().limiter().inflight(), 0);
}

#[test]
fn an_expired_waiter_resolves_to_its_reason() {
    let (gate, clock) = manual_gate(1.0);
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut a = gate.acquire(Priority::NORMAL).timeout(Duration::from_millis(10));
    assert!(poll_once(&mut a).is_pending());
    let due = gate.next_wakeup().expect("a deadline is pending");
    assert!(due <= clock.now_ns() + 10_000_001, "{due}");
    clock.set(due + 1).unwrap();
    gate.pump();
    let Poll::Ready(Err(r)) = poll_once(&mut a) else { panic!("not expired") };
    assert_eq!(r.reason, Reason::Expired);
    held.success();
    assert_eq!(gate.registry_len(), 0);
}

#[test]
fn shed_switch_expires_waiters_at_once() {
    let (gate, _clock) = manual_gate(1.0);
    let held = gate.try_acquire(Priority::CRITICAL).unwrap();
    let mut bg = gate.acquire(Priority::BACKGROUND);
    assert!(poll_once(&mut bg).is_pending());
    gate.set_shed_level(Some(Priority::BACKGROUND));
    let Poll::Ready(Err(r)) = poll_once(&mut bg) else { panic!("not shed") };
    assert_eq!(r.reason, Reason::Shed);
    assert_eq!(gate.try_acquire(Priority::BACKGROUND).unwrap_err().reason, Reason::Shed);
    held.release(Outcome::Success);
}

#[test]
fn priority_order_is_kept_for_waiters() {
    let (gate, _clock) = manual_gate(1.0);
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut bg = gate.acquire(Priority::BACKGROUND);
    let mut crit = gate.acquire(Priority::CRITICAL);
    assert!(poll_once(&mut bg).is_pending());
    assert!(poll_once(&mut crit).is_pending());
    held.success();
    assert!(poll_once(&mut bg).is_pending());
    let Poll::Ready(Ok(p)) = poll_once(&mut crit) else { panic!("critical first") };
    p.success();
    let Poll::Ready(Ok(p)) = poll_once(&mut bg) else { panic!("then background") };
    p.success();
}

#[test]
fn permits_and_futures_are_send_static() {
    fn check<T: Send + 'static>(_: &T) {}
    let gate: Gate = Gate::fixed(1.0).unwrap();
    check(&gate.acquire(Priority::NORMAL));
    check(&gate.try_acquire(Priority::NORMAL).unwrap());
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn the_tokio_timer_expires_a_waiter_without_any_release() {
    let gate: Gate = Gate::new(fixed_cfg(1.0)).unwrap();
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    // Nothing is ever released while it waits: only the timer can end the wait.
    let r = gate.acquire(Priority::NORMAL).timeout(Duration::from_millis(50)).await;
    assert_eq!(r.unwrap_err().reason, Reason::Expired);
    held.success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inflight_never_exceeds_the_limit_across_tasks() {
    const LIMIT: usize = 3;
    let gate: Gate = Gate::new(fixed_cfg(LIMIT as f64)).unwrap();
    let inflight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (gate, inflight, peak) = (gate.clone(), inflight.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..300 {
                let level = Priority::new(((t + i) % 3) as u8).unwrap();
                let p = gate.acquire(level).await.expect("no deadline, no CoDel: granted");
                let now = inflight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(now <= LIMIT, "{now} in flight, limit {LIMIT}");
                tokio::task::yield_now().await;
                inflight.fetch_sub(1, Ordering::SeqCst);
                p.success();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(peak.load(Ordering::SeqCst), LIMIT, "the limit was reached");
    assert_eq!(gate.core().limiter().inflight(), 0);
    assert_eq!(gate.registry_len(), 0);
}

/// Many tasks; each iteration races `acquire()` against a short timer (so futures are
/// dropped at every await point: before the first poll, queued, and granted but not yet
/// observed), and sometimes holds a permit across a yield. At the end no slot is leaked,
/// nothing is left in the queue or the registry, and the full limit can be taken again.
/// A lost grant would leak a slot (or hang a waiter: the whole test has a timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stress_dropping_futures_at_every_await_point_never_leaks() {
    const LIMIT: usize = 4;
    let iters = if cfg!(debug_assertions) { 1_500 } else { 10_000 };
    let gate: Gate = Gate::new(fixed_cfg(LIMIT as f64)).unwrap();
    let inflight = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(AtomicUsize::new(0));
    let run = async {
        let mut tasks = Vec::new();
        for t in 0..12u64 {
            let (gate, inflight, got) = (gate.clone(), inflight.clone(), got.clone());
            tasks.push(tokio::spawn(async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..iters {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let level = Priority::new((x % 3) as u8).unwrap();
                    let fut = gate.acquire(level);
                    match x % 4 {
                        0 => drop(fut), // never polled
                        1 => {
                            // Polled once, then dropped wherever it stands.
                            let mut fut = fut;
                            let r = poll_once(&mut fut);
                            drop(fut);
                            if let Poll::Ready(Ok(p)) = r {
                                p.success();
                            }
                        }
                        _ => {
                            let r = tokio::select! {
                                r = fut => Some(r),
                                _ = tokio::task::yield_now() => None,
                            };
                            if let Some(r) = r {
                                let p = r.expect("no deadline, no CoDel: granted");
                                let n = inflight.fetch_add(1, Ordering::SeqCst) + 1;
                                assert!(n <= LIMIT);
                                got.fetch_add(1, Ordering::Relaxed);
                                if x % 8 == 3 {
                                    tokio::task::yield_now().await;
                                }
                                inflight.fetch_sub(1, Ordering::SeqCst);
                                if x % 16 == 7 {
                                    drop(p); // ends as Ignored
                                } else {
                                    p.release(Outcome::Success);
                                }
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), run).await.expect("a waiter hung");
    assert!(got.load(Ordering::Relaxed) > 0);
    assert_eq!(gate.core().limiter().inflight(), 0, "a slot leaked");
    assert_eq!(gate.core().waiting_total(), 0, "a ticket stayed queued");
    assert_eq!(gate.registry_len(), 0, "a registry entry leaked");
    let all: Vec<_> = (0..LIMIT).map(|_| gate.try_acquire(Priority::CRITICAL).unwrap()).collect();
    assert_eq!(gate.core().limiter().inflight() as usize, LIMIT);
    drop(all);
    let m = gate.metrics();
    assert_eq!(m.queued, m.granted + m.cancelled, "{m:?}");
}

#[test]
fn clock_out_of_range_is_refused_by_the_manual_clock() {
    let (gate, clock) = manual_gate(1.0);
    assert!(clock.set(u64::MAX).is_err());
    assert!(clock.now_ns() < u64::MAX);
    gate.try_acquire(Priority::NORMAL).unwrap().success();
}

/// A random walk of operations on one thread (manual clock, fixed limit, one level — so
/// no slot is held back for a more important level —, no deadlines, no CoDel) against the
/// rules of the gate. Futures are polled only by an explicit `Poll` step, so a grant can
/// sit unobserved when its future is dropped. After every step: in-flight ≤ limit; a
/// waiter is still queued only while every slot is taken (no lost grant); the registry
/// holds one entry per live queued future. At the end, with everything dropped, no slot
/// is held and the limit can be taken in full.
mod model {
    use super::*;
    use quickcheck::{Arbitrary, Gen, QuickCheck};
    use surgeguard::{Acquire, Permit};

    #[derive(Clone, Debug)]
    enum Op {
        /// Start an acquire at this level and poll it once.
        Acquire(u8),
        /// Start an acquire and drop it without polling.
        AcquireDrop(u8),
        /// Poll the i-th pending future.
        Poll(usize),
        /// Drop the i-th pending future.
        DropPending(usize),
        /// End the i-th held permit (0 success, 1 dropped, 2 ignored, 3 by Drop).
        Release(usize, u8),
        /// Move the clock.
        Advance(u16),
        /// Run the pump.
        Pump,
    }

    impl Arbitrary for Op {
        fn arbitrary(g: &mut Gen) -> Self {
            match u8::arbitrary(g) % 12 {
                0..=2 => Op::Acquire(u8::arbitrary(g) % 4),
                3 => Op::AcquireDrop(u8::arbitrary(g) % 4),
                4 | 5 => Op::Poll(usize::arbitrary(g)),
                6 => Op::DropPending(usize::arbitrary(g)),
                7..=9 => Op::Release(usize::arbitrary(g), u8::arbitrary(g) % 4),
                10 => Op::Advance(u16::arbitrary(g)),
                _ => Op::Pump,
            }
        }
    }

    fn run(limit: u8, ops: Vec<Op>) -> bool {
        let limit = (limit % 4 + 1) as usize;
        let clock = ManualClock::new(1_000_000_000);
        let mut cfg = fixed_cfg(limit as f64);
        cfg.limiter.levels = 1;
        let gate: Gate<ManualClock, 64> = Gate::with_clock(cfg, clock.clone()).unwrap();
        let mut pending: Vec<Acquire<ManualClock, 64>> = Vec::new();
        let mut held: Vec<Permit> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire(l) => {
                    let mut f = gate.acquire(Priority::new(l).unwrap());
                    match poll_once(&mut f) {
                        Poll::Pending => pending.push(f),
                        Poll::Ready(r) => {
                            held.push(r.expect("no deadline, no CoDel: never refused"))
                        }
                    }
                }
                Op::AcquireDrop(l) => drop(gate.acquire(Priority::new(l).unwrap())),
                Op::Poll(i) if !pending.is_empty() => {
                    let i = i % pending.len();
                    if let Poll::Ready(r) = poll_once(&mut pending[i]) {
                        held.push(r.expect("no deadline, no CoDel, no shedding: granted"));
                        drop(pending.swap_remove(i));
                    }
                }
                Op::DropPending(i) if !pending.is_empty() => {
                    drop(pending.swap_remove(i % pending.len()));
                }
                Op::Release(i, how) if !held.is_empty() => {
                    let p = held.swap_remove(i % held.len());
                    match how {
                        0 => p.success(),
                        1 => p.dropped(),
                        2 => p.ignored(),
                        _ => drop(p),
                    }
                }
                Op::Advance(us) => clock.advance(Duration::from_micros(u64::from(us))).unwrap(),
                Op::Pump => gate.pump(),
                _ => {}
            }
            let inflight = gate.core().limiter().inflight() as usize;
            if inflight > limit || inflight < held.len() {
                return false;
            }
            if gate.core().waiting_total() > 0 && inflight < limit {
                return false; // a free slot and a queued waiter: a grant was lost
            }
            if gate.registry_len() != pending.len() {
                return false;
            }
        }
        pending.clear();
        held.clear();
        if gate.core().limiter().inflight() != 0 {
            return false; // a slot leaked
        }
        let all: Vec<_> =
            (0..limit).filter_map(|_| gate.try_acquire(Priority::CRITICAL).ok()).collect();
        all.len() == limit && gate.registry_len() == 0 && gate.core().waiting_total() == 0
    }

    #[test]
    fn random_walks_keep_the_gate_rules() {
        QuickCheck::new().tests(500).quickcheck(run as fn(u8, Vec<Op>) -> bool);
    }
}

/// The documented rule's occupancy term: `ramp(waiting / capacity, 0.2, 0.8)`.
fn occupancy_term(waiting: usize, capacity: usize) -> f64 {
    ((waiting as f64 / capacity as f64 - 0.2) / 0.6).clamp(0.0, 1.0)
}

#[test]
fn the_dimmer_rises_with_the_queue_before_any_refusal_and_gates_optional_work() {
    // One slot, a queue of 10, no CoDel and a still clock: the dimmer is the occupancy
    // term alone while nothing is refused.
    let cfg = GateConfig { queue_capacity: Some(10), ..fixed_cfg(1.0) };
    let clock = ManualClock::new(1_000_000_000);
    let gate: Gate<ManualClock, 64> = Gate::with_clock(cfg, clock).unwrap();
    assert_eq!(gate.brownout(), 0.0);
    assert!((0..100).all(|_| gate.serve_optional()), "an idle gate serves everything");
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut waiters = Vec::new();
    let mut last = 0.0;
    for k in 1..=10 {
        let mut f = gate.acquire(Priority::NORMAL);
        assert!(poll_once(&mut f).is_pending());
        waiters.push(f);
        let d = gate.brownout();
        assert!((0.0..=1.0).contains(&d) && d >= last, "{d} after {k} waiters");
        assert!((d - occupancy_term(k, 10)).abs() < 1e-9, "{d} vs the rule at {k}/10");
        last = d;
    }
    // Full dimming while the gate has refused nothing yet.
    assert_eq!(last, 1.0);
    let m = gate.metrics();
    assert_eq!((m.queue_full, m.shed, m.expired, m.deadline_unmeetable), (0, 0, 0, 0));
    assert!((0..100).all(|_| !gate.serve_optional()), "a dimmed gate serves no optional work");

    // Back to half the queue: the dimmer falls only with time (here: none passes).
    waiters.truncate(5);
    assert_eq!(gate.brownout(), 1.0);
    drop(waiters);
    drop(held);
}

#[test]
fn serve_optional_draws_with_probability_one_minus_the_dimmer() {
    let cfg = GateConfig { queue_capacity: Some(10), ..fixed_cfg(1.0) };
    let gate: Gate<ManualClock, 64> =
        Gate::with_clock(cfg, ManualClock::new(1_000_000_000)).unwrap();
    let held = gate.try_acquire(Priority::NORMAL).unwrap();
    let mut waiters: Vec<_> = (0..5).map(|_| gate.acquire(Priority::NORMAL)).collect();
    for f in &mut waiters {
        assert!(poll_once(f).is_pending());
    }
    let d = gate.brownout();
    assert!((d - 0.5).abs() < 1e-9, "{d}");
    const N: usize = 20_000;
    let served = (0..N).filter(|_| gate.serve_optional()).count();
    // Binomial(20 000, 0.5): sd ≈ 71; 5 sd either way.
    assert!((N / 2 - 355..=N / 2 + 355).contains(&served), "{served} of {N}");
    drop(waiters);
    held.success();
}
