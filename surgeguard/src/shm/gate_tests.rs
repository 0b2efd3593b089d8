//! The shared gate's protocol (grant routing, withdraw and reclaim of dead processes)
//! against a reference model, and its decisions against the in-process Gate.

use std::collections::{HashMap, VecDeque};

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard_core::codel::CodelConfig;
use surgeguard_core::gate::{Event, Gate, GateConfig, LifoTrigger};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{LimiterConfig, Outcome, Priority, Reason, Rejected};

use super::super::liveness::Seen;
use super::super::table::{self, Claim, Liveness};
use super::*;
use crate::shm::SharedLimiter;

/// Fails the property, saying where (quickcheck then prints the shrunk input).
macro_rules! fail {
    () => {{
        eprintln!("gate model: check at line {} failed", line!());
        return false;
    }};
}

/// Liveness the test controls: pid → start time (absent = gone).
#[derive(Default)]
struct Fake(HashMap<u32, u64>);

impl Liveness for Fake {
    fn seen(&self, pid: u32) -> Seen {
        self.0.get(&pid).map_or(Seen::Gone, |&s| Seen::Alive(s))
    }
}

fn fixed(limit: f64, levels: u8) -> LimiterConfig {
    LimiterConfig {
        levels,
        ..LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
            initial_limit: limit,
            ..Default::default()
        }))
    }
}

const L: u32 = 2;

fn fifo_config() -> GateConfig {
    GateConfig {
        limiter: fixed(L as f64, 1),
        codel: None,
        lifo: LifoTrigger::Never,
        ..Default::default()
    }
}

// ---- the protocol model ------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    /// Process `p` arrives.
    Arrive(u8),
    /// Process `p` releases its `i`-th permit.
    Release(u8, u8),
    /// Process `p` takes the outcomes of its tickets.
    Take(u8),
    /// Process `p` cancels its `i`-th waiting ticket.
    Cancel(u8, u8),
    /// Process `p` is killed (nothing released, nothing withdrawn).
    Kill(u8),
    /// Process `p` (or an outsider) reclaims.
    Reclaim(u8),
    /// Process `p` releases its `i`-th permit (if any) and is killed inside the dispatch
    /// after it, or is killed inside an arrival, holding the segment's lock; then an
    /// outsider reclaims (taking the lock over).
    Die(u8, u8, KillPoint),
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let p = u8::arbitrary(g) % 3;
        let i = u8::arbitrary(g);
        match u8::arbitrary(g) % 12 {
            0..=3 => Op::Arrive(p),
            4..=5 => Op::Release(p, i),
            6..=7 => Op::Take(p),
            8 => Op::Cancel(p, i),
            9 => Op::Kill(p),
            10 => Op::Reclaim(p),
            _ if bool::arbitrary(g) => Op::Reclaim(p),
            _ => Op::Die(
                p,
                i,
                *g.choose(&[
                    KillPoint::Journaled,
                    KillPoint::InRound,
                    KillPoint::InRoundGranted,
                    KillPoint::InArrival,
                ])
                .unwrap(),
            ),
        }
    }
}

/// A process of the model: its claim, its permits, its tickets still out.
struct Proc {
    pid: u32,
    start: u64,
    claim: Claim,
    permits: Vec<SharedGatePermit>,
    tickets: Vec<(SharedTicket, u32)>,
}

/// The rule: limit L, one FIFO queue; a release hands the freed slot to the oldest
/// waiter, whose process — and only it — receives the grant, exactly once; a killed
/// process's queued tickets are withdrawn and its permits (granted ones too) come back by
/// a reclaim, once; a live process is never reclaimed. A process killed holding the lock:
/// inside a dispatch whose events were recorded, they are delivered as if it had lived;
/// inside the gate's round, the waiter it had taken out is told `Expired` (and the permit
/// it had taken for it comes back); inside an
/// arrival, its queued ticket has no owner (granted later and given back at once).
fn run(ops: Vec<Op>) -> bool {
    run_on(ops, 1)
}

/// [`run`] on a gate of `levels` levels (no reservations: every share is 0): process `p`
/// arrives at level `p % levels`, and the queue hands a freed slot to the oldest waiter of
/// the most important level. A process killed inside the gate's round with a grant in
/// hand: its permit comes back at its level (every level's in-flight count is checked).
fn run_on(ops: Vec<Op>, levels: u8) -> bool {
    let config = GateConfig {
        limiter: LimiterConfig { weights: [0.0; Priority::MAX_LEVELS], ..fixed(L as f64, levels) },
        ..fifo_config()
    };
    let gate = SharedGate::<16>::anonymous(config).unwrap();
    let level_of = |p: u8| p % levels;
    // The level the model's killed arrival queues at (`Priority::NORMAL`, clamped).
    let orphan_level = Priority::NORMAL.index().min(levels as usize - 1) as u8;
    // The level of each ticket id.
    let mut id_level: HashMap<u32, u8> = HashMap::new();
    // The next waiter served: the oldest of the most important level.
    let next_of = |queue: &VecDeque<(u32, u32, u8)>| {
        let best = queue.iter().map(|&(_, _, l)| l).min()?;
        queue.iter().position(|&(_, _, l)| l == best)
    };
    let mut live = Fake::default();
    let mut procs: HashMap<u8, Proc> = HashMap::new();
    let mut dead: Vec<Proc> = Vec::new();
    // Reference: in flight (held by anyone, or granted and not taken), the queue of
    // (process, ticket id), grants not yet taken per process.
    let mut inflight = 0u32;
    let mut queue: VecDeque<(u32, u32, u8)> = VecDeque::new();
    let mut pending: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut dead_pids: std::collections::HashSet<u32> = Default::default();
    let mut dead_pending = 0u32;
    let mut next_id = 0u32;
    // Tickets told `Expired` (taken out by a dispatcher killed inside its round).
    let mut expired: HashMap<u32, Vec<u32>> = HashMap::new();
    // The owner of a ticket queued by a process killed inside its arrival: nobody.
    const ORPHAN: u32 = 0;
    let mut now = 1_000_000u64;
    let mut start = 10u64;
    // A grant to a killed process not reclaimed yet is counted to it: the reclaim owes it.
    let grant_next = |inflight: &mut u32,
                      queue: &mut VecDeque<(u32, u32, u8)>,
                      pending: &mut HashMap<u32, Vec<u32>>,
                      dead_pids: &std::collections::HashSet<u32>,
                      dead_pending: &mut u32| {
        while *inflight < L {
            let Some((pid, id, _)) = next_of(queue).and_then(|i| queue.remove(i)) else { break };
            if pid == ORPHAN {
                // Granted to nobody: given back at once.
                continue;
            }
            *inflight += 1;
            if dead_pids.contains(&pid) {
                *dead_pending += 1;
            } else {
                pending.entry(pid).or_default().push(id);
            }
        }
    };
    for (k, op) in ops.into_iter().enumerate() {
        now += 1_000;
        let outsider = CLAIMLESS;
        match op {
            Op::Arrive(p) => {
                if levels > 1 && queue.len() >= 15 {
                    // A full queue evicts a less important waiter: not modelled here.
                    continue;
                }
                let me = procs.entry(p).or_insert_with(|| {
                    start += 1;
                    let pid = 5000 + p as u32 + 10 * k as u32;
                    live.0.insert(pid, start);
                    let claim = table::claim(gate.test_table(), pid, start).unwrap();
                    Proc { pid, start, claim, permits: vec![], tickets: vec![] }
                });
                let level = Priority::new(level_of(p)).unwrap();
                match gate.arrive_as(me.claim, &live, now, level, None) {
                    SharedArrival::Admitted(permit) => {
                        if !queue.is_empty() || inflight >= L {
                            fail!()
                        }
                        inflight += 1;
                        me.permits.push(permit);
                    }
                    SharedArrival::Queued(t) => {
                        if queue.is_empty() && inflight < L {
                            fail!()
                        }
                        queue.push_back((me.pid, next_id, level_of(p)));
                        id_level.insert(next_id, level_of(p));
                        me.tickets.push((t, next_id));
                        next_id += 1;
                    }
                    SharedArrival::Rejected(r) => {
                        // Only a full queue refuses here.
                        if r.reason != Reason::QueueFull || queue.len() < 16 {
                            fail!()
                        }
                    }
                }
            }
            Op::Release(p, i) => {
                let Some(me) = procs.get_mut(&p) else { continue };
                if me.permits.is_empty() {
                    continue;
                }
                let permit = me.permits.remove(i as usize % me.permits.len());
                if gate.release_as(&live, permit, now, Outcome::Success).is_err() {
                    fail!()
                }
                inflight -= 1;
                grant_next(&mut inflight, &mut queue, &mut pending, &dead_pids, &mut dead_pending);
            }
            Op::Take(p) => {
                let Some(me) = procs.get_mut(&p) else { continue };
                let mut still = vec![];
                for (t, id) in me.tickets.drain(..) {
                    match gate.outcome_as(me.claim, &t) {
                        Ok(None) => still.push((t, id)),
                        Ok(Some(SharedOutcome::Granted(permit))) => {
                            // Granted to this process, and this ticket is the one the
                            // reference granted (exactly once).
                            let mine = pending.entry(me.pid).or_default();
                            let Some(pos) = mine.iter().position(|&x| x == id) else { fail!() };
                            mine.remove(pos);
                            me.permits.push(permit);
                        }
                        Ok(Some(SharedOutcome::Expired(r))) => {
                            let mine = expired.entry(me.pid).or_default();
                            let Some(pos) = mine.iter().position(|&x| x == id) else { fail!() };
                            mine.remove(pos);
                            if r.reason != Reason::Expired {
                                fail!()
                            }
                        }
                        _ => fail!(),
                    }
                }
                // Every grant and expiry the reference made to this process was seen.
                if pending.get(&me.pid).is_some_and(|v| !v.is_empty())
                    || expired.get(&me.pid).is_some_and(|v| !v.is_empty())
                {
                    fail!()
                }
                me.tickets = still;
            }
            Op::Cancel(p, i) => {
                let Some(me) = procs.get_mut(&p) else { continue };
                if me.tickets.is_empty() {
                    continue;
                }
                let (t, id) = me.tickets.remove(i as usize % me.tickets.len());
                match gate.cancel_as(me.claim, &live, &t) {
                    Ok(None) => {
                        // It was still queued in the reference.
                        let Some(pos) = queue.iter().position(|&(_, x, _)| x == id) else {
                            fail!()
                        };
                        queue.remove(pos);
                    }
                    Ok(Some(SharedOutcome::Granted(permit))) => {
                        let mine = pending.entry(me.pid).or_default();
                        let Some(pos) = mine.iter().position(|&x| x == id) else { fail!() };
                        mine.remove(pos);
                        me.permits.push(permit);
                    }
                    Ok(Some(SharedOutcome::Expired(_))) => {
                        let mine = expired.entry(me.pid).or_default();
                        let Some(pos) = mine.iter().position(|&x| x == id) else { fail!() };
                        mine.remove(pos);
                    }
                    _ => fail!(),
                }
            }
            Op::Die(p, i, point) => {
                if levels > 1 && point == KillPoint::InArrival && queue.len() >= 15 {
                    continue;
                }
                let Some(mut me) = procs.remove(&p) else { continue };
                let permit = (point != KillPoint::InArrival && !me.permits.is_empty())
                    .then(|| me.permits.remove(i as usize % me.permits.len()));
                let released = permit.is_some();
                let left = gate.stop_inside_as(me.claim, &live, point, permit, now);
                // Killed: from here on what it holds is owed by the reclaim.
                live.0.remove(&me.pid);
                dead_pids.insert(me.pid);
                if released {
                    inflight -= 1;
                }
                match point {
                    KillPoint::Journaled => {
                        // Its dispatch granted (recorded, delivered by the next holder;
                        // a grant to nobody is given back then, and handed out again only
                        // by the reclaim's dispatch).
                        if left.is_some() {
                            fail!()
                        }
                        let mut to_nobody = 0;
                        while inflight < L {
                            let Some((pid, id, _)) = next_of(&queue).and_then(|i| queue.remove(i))
                            else {
                                break;
                            };
                            inflight += 1;
                            if pid == ORPHAN {
                                to_nobody += 1;
                            } else if dead_pids.contains(&pid) {
                                dead_pending += 1;
                            } else {
                                pending.entry(pid).or_default().push(id);
                            }
                        }
                        inflight -= to_nobody;
                    }
                    KillPoint::InRound | KillPoint::InRoundGranted => {
                        // The oldest waiter was taken out (granted: only if a slot was
                        // free, its permit then lost with the round and given back by the
                        // recovery), and told `Expired` later.
                        let oldest = if point == KillPoint::InRound || inflight < L {
                            next_of(&queue).and_then(|i| queue.remove(i))
                        } else {
                            None
                        };
                        if left.is_some() != oldest.is_some() {
                            fail!()
                        }
                        if let Some((pid, id, _)) = oldest {
                            if pid != me.pid && pid != ORPHAN {
                                expired.entry(pid).or_default().push(id);
                            }
                        }
                    }
                    KillPoint::InArrival => {
                        if queue.is_empty() && inflight < L {
                            // Admitted and counted to it.
                            if left.is_some() {
                                fail!()
                            }
                            inflight += 1;
                            dead_pending += 1;
                        } else if queue.len() < 16 {
                            if left.is_none() {
                                fail!()
                            }
                            queue.push_back((ORPHAN, next_id, orphan_level));
                            next_id += 1;
                        } else if left.is_some() {
                            fail!()
                        }
                    }
                }
                dead_pending += me.permits.len() as u32;
                dead_pending += pending.remove(&me.pid).map_or(0, |v| v.len() as u32);
                expired.remove(&me.pid);
                dead.push(me);
                // An outsider takes the lock over, recovers, and reclaims.
                let released = gate.reclaim_as(outsider, &live, table::reclaimer_word(4999, 1));
                if released != u64::from(dead_pending) {
                    fail!()
                }
                inflight -= dead_pending;
                dead_pending = 0;
                queue.retain(|(pid, _, _)| !dead_pids.contains(pid));
                dead_pids.clear();
                dead.clear();
                grant_next(&mut inflight, &mut queue, &mut pending, &dead_pids, &mut dead_pending);
                // The lock is free again.
                if gate.head().lock.load(Ordering::SeqCst) & !SLEEPERS != 0 {
                    fail!()
                }
            }
            Op::Kill(p) => {
                if let Some(me) = procs.remove(&p) {
                    live.0.remove(&me.pid);
                    // Its permits and untaken grants are now owed by a reclaim; its
                    // queued tickets leave the queue at the reclaim.
                    dead_pending += me.permits.len() as u32;
                    dead_pending += pending.remove(&me.pid).map_or(0, |v| v.len() as u32);
                    dead_pids.insert(me.pid);
                    dead.push(me);
                }
            }
            Op::Reclaim(p) => {
                let (claim, me) = match procs.get(&p) {
                    Some(r) => (r.claim, table::reclaimer_word(r.pid, r.start)),
                    None => (outsider, table::reclaimer_word(4999, 1)),
                };
                let released = gate.reclaim_as(claim, &live, me);
                // Exactly the dead processes' permits, once.
                if released != u64::from(dead_pending) {
                    fail!()
                }
                inflight -= dead_pending;
                dead_pending = 0;
                queue.retain(|(pid, _, _)| !dead_pids.contains(pid));
                dead_pids.clear();
                dead.clear();
                grant_next(&mut inflight, &mut queue, &mut pending, &dead_pids, &mut dead_pending);
            }
        }
        // The shared gate's in-flight count and queue length agree with the reference.
        if gate.gate().limiter().inflight() != inflight
            || gate.gate().waiting_total() as usize != queue.len()
        {
            fail!()
        }
        // Every live process's held count is its permits plus its untaken grants.
        for (p, me) in &procs {
            let held: u32 = gate.test_table()[me.claim.index as usize]
                .held
                .iter()
                .map(|h| h.load(Ordering::Relaxed))
                .sum();
            let _ = p;
            let owed = me.permits.len() as u32 + pending.get(&me.pid).map_or(0, |v| v.len() as u32);
            if held != owed {
                fail!()
            }
        }
        // With nothing owed by a reclaim, every level's in-flight count is the live
        // processes' permits and untaken grants at that level.
        if levels > 1 && dead_pending == 0 {
            for l in 0..levels {
                let mut want = 0u32;
                for me in procs.values() {
                    want += me.permits.iter().filter(|q| q.level == l).count() as u32;
                    let mine = pending.get(&me.pid).map_or(&[][..], |v| &v[..]);
                    want += mine.iter().filter(|id| id_level.get(id) == Some(&l)).count() as u32;
                }
                if gate.gate().limiter().inflight_of(Priority::new(l).unwrap()) != want {
                    fail!()
                }
            }
        }
    }
    true
}

#[test]
fn routing_and_reclaim_follow_the_model() {
    QuickCheck::new().tests(300).quickcheck(run as fn(Vec<Op>) -> bool);
}

#[test]
fn routing_and_reclaim_follow_the_model_on_three_levels() {
    QuickCheck::new().tests(300).quickcheck((|ops| run_on(ops, 3)) as fn(Vec<Op>) -> bool);
}

/// A dispatcher killed inside the gate's round with a grant in hand, on three levels: the
/// permit it had taken for the level-1 waiter comes back at level 1, once.
#[test]
fn killed_inside_the_round_with_a_grant_in_hand_on_three_levels() {
    use KillPoint::*;
    use Op::*;
    let cases: Vec<Vec<Op>> = vec![
        vec![
            Arrive(0),
            Arrive(0),
            Arrive(2),
            Arrive(1),
            Die(0, 0, InRoundGranted),
            Take(1),
            Take(2),
        ],
        vec![
            Arrive(2),
            Arrive(2),
            Arrive(1),
            Arrive(0),
            Die(2, 1, InRoundGranted),
            Take(1),
            Take(0),
        ],
        vec![
            Arrive(1),
            Arrive(0),
            Arrive(2),
            Arrive(2),
            Die(0, 0, InRoundGranted),
            Die(1, 0, InRoundGranted),
            Take(2),
            Release(2, 0),
            Take(2),
        ],
    ];
    for ops in cases {
        assert!(run_on(ops.clone(), 3), "{ops:?}");
    }
}

#[test]
fn killed_holding_the_lock_cases() {
    use KillPoint::*;
    use Op::*;
    let cases: Vec<Vec<Op>> = vec![
        // A grant recorded for a ticket nobody owns (its arrival was killed) is given
        // back at the recovery; the killed dispatcher's own ticket is withdrawn.
        vec![
            Arrive(2),
            Arrive(1),
            Arrive(0),
            Die(1, 180, InArrival),
            Arrive(2),
            Die(2, 1, Journaled),
        ],
        // Each kill point with a waiter of another process queued.
        vec![Arrive(0), Arrive(0), Arrive(1), Die(0, 0, Journaled), Take(1), Release(1, 0)],
        vec![Arrive(0), Arrive(0), Arrive(1), Die(0, 0, InRound), Take(1), Arrive(1)],
        vec![Arrive(0), Arrive(0), Arrive(1), Die(0, 0, InRoundGranted), Take(1), Arrive(1)],
        vec![Arrive(0), Arrive(0), Arrive(1), Die(0, 0, InArrival), Take(1), Release(1, 0)],
        // Killed twice in a row, the second time by the process that recovered nothing.
        vec![
            Arrive(0),
            Arrive(1),
            Arrive(2),
            Die(0, 0, InRoundGranted),
            Die(1, 0, InRound),
            Take(2),
        ],
    ];
    for ops in cases {
        assert!(run(ops.clone()), "{ops:?}");
    }
}

#[test]
fn the_model_catches_a_grant_to_the_wrong_process() {
    // A grant seen by the owner is checked: a process taking another's ticket is refused.
    let gate = SharedGate::<16>::anonymous(fifo_config()).unwrap();
    let mut live = Fake::default();
    live.0.insert(7001, 1);
    live.0.insert(7002, 2);
    let a = table::claim(gate.test_table(), 7001, 1).unwrap();
    let b = table::claim(gate.test_table(), 7002, 2).unwrap();
    let mut permits = vec![];
    for _ in 0..L {
        match gate.arrive_as(a, &live, 10, Priority::NORMAL, None) {
            SharedArrival::Admitted(p) => permits.push(p),
            other => panic!("{other:?}"),
        }
    }
    let SharedArrival::Queued(t) = gate.arrive_as(b, &live, 11, Priority::NORMAL, None) else {
        panic!("queued")
    };
    assert_eq!(gate.outcome_as(a, &t), Err(ShmError::Usage(UsageError::ForeignHandle)));
    assert_eq!(gate.outcome_as(b, &t), Ok(None));
    gate.release_as(&live, permits.pop().unwrap(), 12, Outcome::Success).unwrap();
    let Ok(Some(SharedOutcome::Granted(g))) = gate.outcome_as(b, &t) else { panic!("granted") };
    // Exactly once.
    assert_eq!(gate.outcome_as(b, &t), Err(ShmError::Usage(UsageError::UnknownTicket)));
    gate.release_as(&live, g, 13, Outcome::Success).unwrap();
    // A permit released twice (rebuilt from its words) is refused, and changes nothing.
    let p = permits.pop().unwrap();
    let words = p.into_words();
    gate.release_as(&live, SharedGatePermit::from_words(words), 14, Outcome::Success).unwrap();
    assert_eq!(gate.gate().limiter().inflight(), 0);
    assert_eq!(
        gate.release_as(&live, SharedGatePermit::from_words(words), 15, Outcome::Success),
        Err(ShmError::Reclaimed)
    );
    assert_eq!(gate.gate().limiter().inflight(), 0);
}

#[test]
fn a_dead_processs_queued_ticket_is_withdrawn_and_its_grant_reclaimed() {
    let gate = SharedGate::<16>::anonymous(fifo_config()).unwrap();
    let mut live = Fake::default();
    for (pid, s) in [(8001, 1), (8002, 2), (8003, 3)] {
        live.0.insert(pid, s);
    }
    let a = table::claim(gate.test_table(), 8001, 1).unwrap();
    let b = table::claim(gate.test_table(), 8002, 2).unwrap();
    let c = table::claim(gate.test_table(), 8003, 3).unwrap();
    let SharedArrival::Admitted(pa) = gate.arrive_as(a, &live, 10, Priority::NORMAL, None) else {
        panic!()
    };
    let SharedArrival::Admitted(_pa2) = gate.arrive_as(a, &live, 10, Priority::NORMAL, None) else {
        panic!()
    };
    // B queues first, then C: B is granted at A's first release but never takes it;
    // A dies holding one permit and C waits.
    let SharedArrival::Queued(_tb) = gate.arrive_as(b, &live, 11, Priority::NORMAL, None) else {
        panic!()
    };
    let SharedArrival::Queued(tc) = gate.arrive_as(c, &live, 12, Priority::NORMAL, None) else {
        panic!()
    };
    gate.release_as(&live, pa, 13, Outcome::Success).unwrap();
    live.0.remove(&8001);
    live.0.remove(&8002);
    assert_eq!(gate.outcome_as(c, &tc), Ok(None));
    // A's permit and B's untaken grant: two, once.
    assert_eq!(gate.reclaim_as(c, &live, table::reclaimer_word(8003, 3)), 2);
    assert_eq!(gate.reclaim_as(c, &live, table::reclaimer_word(8003, 3)), 0);
    let Ok(Some(SharedOutcome::Granted(g))) = gate.outcome_as(c, &tc) else { panic!("granted") };
    assert_eq!(gate.gate().limiter().inflight(), 1);
    gate.release_as(&live, g, 20, Outcome::Success).unwrap();
    assert_eq!(gate.gate().limiter().inflight(), 0);
}

// ---- decisions: the shared gate against the in-process Gate -------------------------------

#[derive(Clone, Debug)]
enum DOp {
    Arrive { level: u8, deadline_ms: Option<u8> },
    Release { i: u8, ok: bool },
    Cancel(u8),
    Poll,
    Advance(u16),
}

impl Arbitrary for DOp {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 10 {
            0..=3 => DOp::Arrive {
                level: u8::arbitrary(g) % 3,
                deadline_ms: Option::<u8>::arbitrary(g).map(|d| d % 100),
            },
            4..=5 => DOp::Release { i: u8::arbitrary(g), ok: bool::arbitrary(g) },
            6 => DOp::Cancel(u8::arbitrary(g)),
            7 => DOp::Poll,
            _ => DOp::Advance(u16::arbitrary(g) % 200),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Seen2 {
    Admitted(u8),
    Queued,
    Rejected(Reason),
}

fn decisions(ops: Vec<DOp>, config: GateConfig) -> bool {
    let shared = SharedGate::<16>::anonymous(config).unwrap();
    let local = Gate::<16>::new(config).unwrap();
    let live = Fake(HashMap::from([(9001, 1)]));
    let me = table::claim(shared.test_table(), 9001, 1).unwrap();
    let mut now = 1_000_000_000u64;
    let mut s_permits: Vec<SharedGatePermit> = vec![];
    let mut l_permits = vec![];
    // Tickets in arrival order: (shared, local, decided in local?)
    let mut tickets: Vec<(SharedTicket, surgeguard_core::queue::Ticket)> = vec![];
    let mut l_outcomes: HashMap<u64, Result<u8, Rejected>> = HashMap::new();
    let mut out: [Option<Event>; 64] = std::array::from_fn(|_| None);
    let mut drain = |local: &Gate<16>,
                     now: u64,
                     l_outcomes: &mut HashMap<u64, Result<u8, Rejected>>,
                     l_permits: &mut Vec<_>| {
        loop {
            let n = local.poll(now, &mut out);
            for ev in out[..n].iter_mut() {
                match ev.take() {
                    Some(Event::Granted(t, p)) => {
                        l_outcomes.insert(t.to_bits(), Ok(p.level().index() as u8));
                        l_permits.push(p);
                    }
                    Some(Event::Expired(t, r)) => {
                        l_outcomes.insert(t.to_bits(), Err(r));
                    }
                    None => {}
                }
            }
            if n < out.len() {
                break;
            }
        }
    };
    for op in ops {
        match op {
            DOp::Advance(ms) => now += u64::from(ms) * 1_000_000,
            DOp::Arrive { level, deadline_ms } => {
                let p = Priority::new(level).unwrap();
                let d = deadline_ms.map(|d| now + u64::from(d) * 1_000_000);
                let s = match shared.arrive_as(me, &live, now, p, d) {
                    SharedArrival::Admitted(x) => {
                        let l = x.level;
                        s_permits.push(x);
                        Seen2::Admitted(l)
                    }
                    SharedArrival::Queued(t) => {
                        tickets.push((t, surgeguard_core::queue::Ticket::from_bits(0)));
                        Seen2::Queued
                    }
                    SharedArrival::Rejected(r) => Seen2::Rejected(r.reason),
                };
                let l = match local.arrive(now, p, d) {
                    surgeguard_core::gate::Arrival::Admitted(x) => {
                        let l = x.level().index() as u8;
                        l_permits.push(x);
                        Seen2::Admitted(l)
                    }
                    surgeguard_core::gate::Arrival::Queued(t) => {
                        if let Some(last) = tickets.last_mut() {
                            last.1 = t;
                        }
                        drain(&local, now, &mut l_outcomes, &mut l_permits);
                        Seen2::Queued
                    }
                    surgeguard_core::gate::Arrival::Rejected(r) => Seen2::Rejected(r.reason),
                };
                if s != l {
                    fail!()
                }
            }
            DOp::Release { i, ok } => {
                if s_permits.is_empty() || l_permits.is_empty() {
                    continue;
                }
                let k = i as usize % s_permits.len().min(l_permits.len());
                let outcome = if ok { Outcome::Success } else { Outcome::Dropped };
                let sp = s_permits.remove(k);
                let lp = l_permits.remove(k);
                if sp.level != lp.level().index() as u8 || sp.started_at != lp.started_at() {
                    eprintln!("release mismatch {sp:?} {lp:?} {s_permits:?} {l_permits:?}");
                    fail!()
                }
                shared.release_as(&live, sp, now, outcome).unwrap();
                local.release(lp, now, outcome).unwrap();
                drain(&local, now, &mut l_outcomes, &mut l_permits);
            }
            DOp::Cancel(i) => {
                if tickets.is_empty() {
                    continue;
                }
                let (st, lt) = tickets[i as usize % tickets.len()];
                let s = shared.cancel_as(me, &live, &st);
                let l = local.cancel(lt);
                match (s, l) {
                    (Ok(None), Ok(())) => {
                        tickets.retain(|x| x.0 != st);
                    }
                    (Ok(Some(o)), Err(_)) => {
                        // Decided first on both sides: the same outcome.
                        let l = l_outcomes.remove(&lt.to_bits());
                        if !settle(o, l, &mut s_permits, &mut l_permits) {
                            fail!()
                        }
                        tickets.retain(|x| x.0 != st);
                    }
                    _ => fail!(),
                }
            }
            DOp::Poll => {
                let _held = shared.lock(me, &live);
                shared.dispatch_locked(now);
                drop(_held);
                drain(&local, now, &mut l_outcomes, &mut l_permits);
            }
        }
        // Every outcome: the same on both sides (granted at the same level, or dropped
        // for the same reason with the same hint).
        let mut keep = vec![];
        for (st, lt) in tickets.drain(..) {
            let s = shared.outcome_as(me, &st);
            let l = l_outcomes.remove(&lt.to_bits());
            match s {
                Ok(None) if l.is_none() => keep.push((st, lt)),
                Ok(Some(o)) => {
                    if !settle(o, l, &mut s_permits, &mut l_permits) {
                        fail!()
                    }
                }
                _ => fail!(),
            }
        }
        tickets = keep;
        if shared.gate().metrics() != local.metrics() {
            fail!()
        }
    }
    true
}

/// Whether a shared outcome is the in-process one; a grant's permits are moved to the end
/// of both lists (the same order on both sides).
fn settle(
    o: SharedOutcome,
    l: Option<Result<u8, Rejected>>,
    s_permits: &mut Vec<SharedGatePermit>,
    l_permits: &mut Vec<surgeguard_core::RawPermit>,
) -> bool {
    match (o, l) {
        (SharedOutcome::Granted(p), Some(Ok(level))) if p.level == level => {
            let pos = l_permits
                .iter()
                .rposition(|x| x.started_at() == p.started_at && x.level().index() as u8 == level);
            match pos {
                Some(pos) => {
                    let lp = l_permits.remove(pos);
                    l_permits.push(lp);
                    s_permits.push(p);
                    true
                }
                None => false,
            }
        }
        (SharedOutcome::Expired(a), Some(Err(b))) => a == b,
        (o, l) => {
            eprintln!("gate model: shared outcome {o:?}, in-process {l:?}");
            false
        }
    }
}

fn rich_config() -> GateConfig {
    GateConfig {
        limiter: fixed(3.0, 3),
        queue_capacity: Some(6),
        codel: Some(CodelConfig::default()),
        max_wait_ns: Some(150_000_000),
        ..Default::default()
    }
}

#[test]
fn the_shared_gate_decides_as_the_in_process_gate() {
    fn fifo(ops: Vec<DOp>) -> bool {
        decisions(ops, fifo_config())
    }
    fn rich(ops: Vec<DOp>) -> bool {
        decisions(ops, rich_config())
    }
    QuickCheck::new().tests(200).quickcheck(fifo as fn(Vec<DOp>) -> bool);
    QuickCheck::new().tests(200).quickcheck(rich as fn(Vec<DOp>) -> bool);
}

#[test]
fn mismatched_config_and_capacity_are_refused() {
    let name = format!("sg-test-gate-{}", std::process::id());
    let _ = SharedGate::<16>::unlink(&name);
    let a = SharedGate::<16>::open(&name, fifo_config()).unwrap();
    assert!(a.created());
    let b = SharedGate::<16>::open(&name, fifo_config()).unwrap();
    assert!(!b.created());
    assert_eq!(SharedGate::<16>::open(&name, rich_config()).err(), Some(ShmError::ConfigMismatch));
    // Another capacity is another layout.
    assert_eq!(SharedGate::<32>::open(&name, fifo_config()).err(), Some(ShmError::LayoutMismatch));
    // Another kind of object under the name.
    assert_eq!(SharedLimiter::open(&name, fixed(2.0, 1)).err(), Some(ShmError::KindMismatch));
    SharedGate::<16>::unlink(&name).unwrap();
}

/// Liveness with one pid (9101) alive until `kill`ed, everyone else alive.
struct Switch(std::sync::atomic::AtomicBool);

impl Liveness for Switch {
    fn seen(&self, pid: u32) -> Seen {
        if pid == 9101 && self.0.load(Ordering::SeqCst) {
            return Seen::Gone;
        }
        Seen::Alive(pid as u64 - 9100)
    }
}

#[test]
fn a_dead_lock_holder_is_taken_over_and_a_live_one_is_not() {
    let gate = SharedGate::<16>::anonymous(fifo_config()).unwrap();
    let live = Switch(std::sync::atomic::AtomicBool::new(false));
    let holder = table::claim(gate.test_table(), 9101, 1).unwrap();
    let other = table::claim(gate.test_table(), 9102, 2).unwrap();
    // `holder` takes the lock and "dies" inside it (the guard is never dropped).
    std::mem::forget(gate.lock(holder, &live));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| gate.arrive_as(other, &live, 10, Priority::NORMAL, None));
        std::thread::sleep(std::time::Duration::from_millis(60));
        // While the holder lives, the lock is not taken over.
        assert!(!waiter.is_finished(), "a live holder's lock was taken");
        live.0.store(true, Ordering::SeqCst);
        let killed = std::time::Instant::now();
        let SharedArrival::Admitted(p) = waiter.join().unwrap() else { panic!("admitted") };
        // Taken over after about one 10 ms wait.
        assert!(killed.elapsed() < std::time::Duration::from_secs(2));
        gate.release_as(&live, p, 20, Outcome::Success).unwrap();
    });
    // The lock works normally afterwards.
    let SharedArrival::Admitted(p) = gate.arrive_as(other, &live, 30, Priority::NORMAL, None)
    else {
        panic!("admitted")
    };
    gate.release_as(&live, p, 31, Outcome::Success).unwrap();
    assert_eq!(gate.head().lock.load(Ordering::SeqCst), 0);
}

// ---- try_arrive ----------------------------------------------------------------------------

/// `try_arrive` admits as `arrive` does while there is room, refuses `LimitReached` where
/// `arrive` would queue (nothing queued), and counts its permits to this process.
#[test]
fn try_arrive_never_queues_and_counts_to_this_process() {
    let gate = SharedGate::<16>::anonymous(fifo_config()).expect("gate");
    let lvl = Priority::new(0).expect("level");
    let now = 1_000_000;
    let held: Vec<_> =
        (0..L).map(|_| gate.try_arrive(now, lvl, None).expect("room for L")).collect();
    assert_eq!(gate.held_by_this_process(), L);
    match gate.try_arrive(now, lvl, None) {
        Err(ShmError::Rejected(r)) => assert_eq!(r.reason, Reason::LimitReached),
        other => panic!("expected a LimitReached refusal, got {other:?}"),
    }
    assert_eq!(gate.gate().waiting_total(), 0, "never queued");
    assert_eq!(gate.gate().metrics().queued, 0);
    for p in held {
        gate.release(p, now + 1, Outcome::Success).expect("release");
    }
    assert_eq!(gate.held_by_this_process(), 0);
    assert_eq!(gate.gate().limiter().inflight(), 0);
    // A waiter ahead of it: refused, not admitted past the queue.
    let p = gate.try_arrive(now + 2, lvl, None).expect("room");
    let q = gate.try_arrive(now + 2, lvl, None).expect("room");
    let SharedArrival::Queued(t) = gate.arrive(now + 2, lvl, None).expect("arrive") else {
        panic!("full: queued")
    };
    gate.release(p, now + 3, Outcome::Success).expect("release");
    // The freed slot went to the waiter, so a try_arrive is refused.
    assert!(matches!(gate.try_arrive(now + 3, lvl, None), Err(ShmError::Rejected(_))));
    let Some(SharedOutcome::Granted(g)) = gate.outcome(&t).expect("outcome") else {
        panic!("granted")
    };
    gate.release(g, now + 4, Outcome::Success).expect("release");
    gate.release(q, now + 4, Outcome::Success).expect("release");
    assert_eq!(gate.gate().limiter().inflight(), 0);
}

// ---- the queue rebuilt after a lost dispatcher ---------------------------------------------

#[derive(Clone, Debug)]
enum QOp {
    /// An arrival at level 0..3 (a full queue evicts a less important waiter).
    Arrive(u8),
    /// Cancel the `i`-th ticket out.
    Cancel(u8),
    /// Release the `i`-th permit, then poll until nothing is left to report.
    Release(u8),
    /// Poll until nothing is left to report.
    Poll,
    /// A dispatcher stops for good inside a round (having taken the oldest waiter out,
    /// with its grant counted and its permit in hand if `true`); the queue is rebuilt.
    Die(bool),
}

impl Arbitrary for QOp {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 10 {
            0..=3 => QOp::Arrive(u8::arbitrary(g) % 3),
            4 => QOp::Cancel(u8::arbitrary(g)),
            5..=6 => QOp::Release(u8::arbitrary(g)),
            7 => QOp::Poll,
            _ => QOp::Die(bool::arbitrary(g)),
        }
    }
}

/// The rule: whatever a lost dispatcher left (its dispatch flag, the arrivals and
/// cancels it had taken, half-linked lists, evictions not reported), after the rebuild
/// every ticket is reported exactly once (granted, expired or evicted) or cancelled, or
/// was the one the lost dispatcher took out; the queue's counts match the tickets out;
/// the limiter's count is the permits held plus the lost grants; and in the end every
/// waiter is served.
fn rebuilt(ops: Vec<QOp>) -> bool {
    let config = GateConfig {
        limiter: fixed(2.0, 3),
        codel: None,
        lifo: LifoTrigger::Never,
        ..Default::default()
    };
    let gate = Gate::<4>::new(config).unwrap();
    let now = 1_000_000u64;
    let mut out: Vec<u64> = vec![];
    let mut permits = vec![];
    let mut reported = std::collections::HashSet::new();
    let mut lost = 0u32;
    let mut buf: [Option<Event>; 3] = Default::default();
    // Polls until empty; every event is for a ticket out, reported once.
    let drain = |out: &mut Vec<u64>,
                 permits: &mut Vec<surgeguard_core::RawPermit>,
                 reported: &mut std::collections::HashSet<u64>,
                 buf: &mut [Option<Event>; 3]| {
        for _ in 0..100 {
            let n = gate.poll(now, buf);
            for ev in buf[..n].iter_mut() {
                let t = match ev.take() {
                    Some(Event::Granted(t, p)) => {
                        permits.push(p);
                        t
                    }
                    Some(Event::Expired(t, _)) => t,
                    None => continue,
                };
                let Some(pos) = out.iter().position(|&x| x == t.to_bits()) else { return false };
                out.remove(pos);
                if !reported.insert(t.to_bits()) {
                    return false;
                }
            }
            if n < buf.len() && gate.next_wakeup(now) != Some(now) {
                return true;
            }
        }
        false
    };
    for op in ops {
        match op {
            QOp::Arrive(l) => match gate.arrive(now, Priority::new(l).unwrap(), None) {
                Arrival::Admitted(p) => permits.push(p),
                Arrival::Queued(t) => out.push(t.to_bits()),
                Arrival::Rejected(_) => {}
            },
            QOp::Cancel(i) => {
                if out.is_empty() {
                    continue;
                }
                let t = out[i as usize % out.len()];
                if gate.cancel(Ticket::from_bits(t)).is_ok() {
                    out.retain(|&x| x != t);
                    if !reported.insert(t) {
                        fail!()
                    }
                }
            }
            QOp::Release(i) => {
                if !permits.is_empty() {
                    let p = permits.remove(i as usize % permits.len());
                    gate.release(p, now, Outcome::Success).unwrap();
                }
                if !drain(&mut out, &mut permits, &mut reported, &mut buf) {
                    fail!()
                }
            }
            QOp::Poll => {
                if !drain(&mut out, &mut permits, &mut reported, &mut buf) {
                    fail!()
                }
            }
            QOp::Die(grant) => {
                let before = gate.granted_total();
                if let Some(t) = gate.abandon_dispatch_round(now, grant) {
                    let Some(pos) = out.iter().position(|&x| x == t.to_bits()) else { fail!() };
                    out.remove(pos);
                    reported.insert(t.to_bits());
                }
                lost += (gate.granted_total() - before) as u32;
                // SAFETY: this thread is the only one using the gate; the "lost" round
                // never runs again.
                #[allow(unsafe_code)]
                unsafe {
                    gate.rebuild_after_lost_thread()
                };
                // A dispatch is owed: the next poll runs at once.
                if gate.next_wakeup(now) != Some(now) {
                    fail!()
                }
            }
        }
        if matches!(op, QOp::Release(_) | QOp::Poll) && gate.waiting_total() as usize != out.len() {
            fail!()
        }
        if gate.limiter().inflight() != permits.len() as u32 + lost {
            fail!()
        }
    }
    // Serve everyone: release what is held, poll, until nobody waits.
    for _ in 0..64 {
        for p in permits.drain(..) {
            gate.release(p, now, Outcome::Success).unwrap();
        }
        if !drain(&mut out, &mut permits, &mut reported, &mut buf) {
            fail!()
        }
        if out.is_empty() {
            return gate.waiting_total() == 0;
        }
        if lost >= 2 {
            // Both slots lost for good (the test's "dispatcher" never gives them back):
            // nothing can be served; the queue still holds exactly the tickets out.
            return gate.waiting_total() as usize == out.len();
        }
    }
    fail!()
}

#[test]
fn the_queue_rebuilt_after_a_lost_dispatcher_loses_nothing() {
    QuickCheck::new().tests(500).quickcheck(rebuilt as fn(Vec<QOp>) -> bool);
}

/// A holder killed inside the gate's round with a grant in hand, and four processes
/// racing to lock (each sweeping): one takes the lock over and recovers, once — the
/// grant's permit is given back once, the waiter it had taken out is told `Expired` once,
/// the freed slots go to the next two waiters, and the dead holder's permit is reclaimed
/// once across the racers.
#[test]
fn racing_lockers_take_a_dead_holder_over_once() {
    let gate = SharedGate::<16>::anonymous(fifo_config()).unwrap();
    let live = Switch(std::sync::atomic::AtomicBool::new(false));
    let holder = table::claim(gate.test_table(), 9101, 1).unwrap();
    let others: Vec<Claim> = (9102..9106)
        .map(|pid| table::claim(gate.test_table(), pid, pid as u64 - 9100).unwrap())
        .collect();
    let mut held = vec![];
    for _ in 0..2 {
        let SharedArrival::Admitted(p) = gate.arrive_as(holder, &live, 10, Priority::NORMAL, None)
        else {
            panic!("admitted")
        };
        held.push(p);
    }
    let tickets: Vec<SharedTicket> = others
        .iter()
        .map(|&c| match gate.arrive_as(c, &live, 11, Priority::NORMAL, None) {
            SharedArrival::Queued(t) => t,
            other => panic!("queued: {other:?}"),
        })
        .collect();
    let taken = gate.stop_inside_as(holder, &live, KillPoint::InRoundGranted, held.pop(), 12);
    assert_eq!(taken, Some(tickets[0].ticket()));
    assert_eq!(gate.gate().limiter().inflight(), 2, "one held by the dead, one in hand");
    live.0.store(true, Ordering::SeqCst);
    let released: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = others
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let (gate, live) = (&gate, &live);
                s.spawn(move || {
                    gate.reclaim_as(c, live, table::reclaimer_word(9102 + k as u32, k as u64 + 2))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(released, 1, "the dead holder's permit, once");
    drop(held); // the dead holder's: reclaimed, never released
    let outcome = |k: usize| gate.outcome_as(others[k], &tickets[k]).unwrap();
    assert!(
        matches!(outcome(0), Some(SharedOutcome::Expired(r)) if r.reason == Reason::Expired),
        "the waiter taken out is told Expired"
    );
    let mut granted = 0;
    for k in 1..4 {
        if let Some(SharedOutcome::Granted(_held)) = outcome(k) {
            granted += 1;
        }
    }
    assert_eq!(granted, 2, "exactly the two freed slots are handed out");
    assert_eq!(gate.gate().limiter().inflight(), 2);
    assert_eq!(gate.gate().waiting_total(), 1);
    assert_eq!(gate.head().lock.load(Ordering::SeqCst), 0);
}

/// The journal records each level's grant count modulo 128 (the gate keeps it modulo
/// 256): after 255 grants at level 2, a holder killed inside the round with the 256th
/// in hand (both counters wrap between the journal's record and the gate's count) has
/// exactly that one permit given back, at level 2.
#[test]
fn a_grant_in_hand_is_found_after_the_level_counts_wrap() {
    let config = GateConfig {
        limiter: LimiterConfig { weights: [0.0; Priority::MAX_LEVELS], ..fixed(2.0, 3) },
        ..fifo_config()
    };
    let gate = SharedGate::<16>::anonymous(config).unwrap();
    let live = Switch(std::sync::atomic::AtomicBool::new(false));
    let holder = table::claim(gate.test_table(), 9101, 1).unwrap();
    let other = table::claim(gate.test_table(), 9102, 2).unwrap();
    let (top, low) = (Priority::new(0).unwrap(), Priority::new(2).unwrap());
    let arrive = |c, l| gate.arrive_as(c, &live, 10, l, None);
    let SharedArrival::Admitted(held) = arrive(holder, top) else { panic!("admitted") };
    let SharedArrival::Admitted(mut mine) = arrive(other, low) else { panic!("admitted") };
    for _ in 0..255 {
        let SharedArrival::Queued(t) = arrive(other, low) else { panic!("queued") };
        gate.release_as(&live, mine, 11, Outcome::Success).unwrap();
        let Ok(Some(SharedOutcome::Granted(p))) = gate.outcome_as(other, &t) else {
            panic!("granted")
        };
        mine = p;
    }
    assert_eq!(gate.gate().granted_total(), 255);
    let SharedArrival::Queued(t) = arrive(other, low) else { panic!("queued") };
    let taken = gate.stop_inside_as(holder, &live, KillPoint::InRoundGranted, Some(held), 12);
    assert_eq!(taken, Some(t.ticket()));
    assert_eq!(gate.gate().limiter().inflight_of(low), 2, "one held, one in hand");
    live.0.store(true, Ordering::SeqCst);
    assert_eq!(gate.reclaim_as(other, &live, table::reclaimer_word(9102, 2)), 0);
    assert!(matches!(gate.outcome_as(other, &t), Ok(Some(SharedOutcome::Expired(_)))));
    assert_eq!(gate.gate().limiter().inflight_of(low), 1, "the permit in hand given back");
    assert_eq!(gate.gate().limiter().inflight_of(top), 0);
    assert_eq!(gate.gate().limiter().inflight(), 1);
    gate.release_as(&live, mine, 13, Outcome::Success).unwrap();
    assert_eq!(gate.gate().limiter().inflight(), 0);
}
