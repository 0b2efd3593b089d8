//! The conformance vectors' gate scenarios replayed through this crate's async `Gate`
//! (owned permits, the waiter registry and the pump) on a `ManualClock`: every decision and
//! every event must be the one the core recorded.
//!
//! Mapping: `arrive` = poll a new `acquire()` future once (queued or not is read from the
//! gate's `queued` counter); the events of a step are the pending futures that completed
//! during it; `release` = `Permit::release`; `cancel` = drop the pending future; `shed` and
//! `static` go to the core gate (the wrapper's `set_shed_level` also pumps at once, which
//! reports shed waiters one step earlier than the recorded core sequence); `brownout` =
//! `Gate::brownout` at the step's time.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use serde_json::{Map, Value, json};
use surgeguard::clock::ManualClock;
use surgeguard::core::time::MAX_NOW;
use surgeguard::{Acquire, Gate, GateState, Outcome, Permit, Priority, UsageError};
use surgeguard_vectors::{GATE_CAP, gate_config};

type G = Gate<ManualClock, GATE_CAP>;

fn u(m: &Map<String, Value>, k: &str) -> u64 {
    m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m:?}"))
}

fn poll_once(f: &mut Acquire<ManualClock, GATE_CAP>) -> Poll<Result<Permit, surgeguard::Rejected>> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

struct Replay {
    gate: G,
    clock: ManualClock,
    pending: BTreeMap<u64, Acquire<ManualClock, GATE_CAP>>,
    permits: BTreeMap<u64, Permit>,
}

impl Replay {
    /// Polls every pending future; those that completed are this step's events.
    fn events(&mut self) -> Value {
        let mut evs = Vec::new();
        let idxs: Vec<u64> = self.pending.keys().copied().collect();
        for i in idxs {
            let f = self.pending.get_mut(&i).unwrap();
            match poll_once(f) {
                Poll::Pending => {}
                Poll::Ready(Ok(p)) => {
                    self.pending.remove(&i);
                    self.permits.insert(i, p);
                    evs.push(json!({"ticket": i, "granted": true}));
                }
                Poll::Ready(Err(r)) => {
                    self.pending.remove(&i);
                    evs.push(json!({"ticket": i, "granted": false,
                        "reason": r.reason.as_str(), "retry_after": r.retry_after}));
                }
            }
        }
        Value::Array(evs)
    }

    fn step(&mut self, idx: u64, st: &Map<String, Value>) -> Value {
        if let Some(now) = st.get("now").and_then(Value::as_u64) {
            if now > MAX_NOW {
                // No clock shows such a time: the manual clock refuses it and keeps the
                // latest, which is the time the core acts at for an out-of-range `now`.
                assert_eq!(self.clock.set(now), Err(UsageError::TimeOutOfRange));
            } else {
                self.clock.set(now).unwrap();
            }
        }
        let level = || Priority::new(u(st, "level") as u8).unwrap();
        match st["op"].as_str().unwrap() {
            "arrive" => {
                let now = u(st, "now");
                let mut fut = self.gate.acquire(level());
                if let Some(t) = st.get("timeout").and_then(Value::as_u64) {
                    fut = fut.deadline(now.saturating_add(t));
                }
                let queued_before = self.gate.metrics().queued;
                let first = poll_once(&mut fut);
                let queued = self.gate.metrics().queued > queued_before;
                if queued {
                    // Its own grant (or expiry) in the pump right after queueing is one of
                    // this step's events.
                    let ev = match first {
                        Poll::Pending => None,
                        Poll::Ready(Ok(p)) => {
                            self.permits.insert(idx, p);
                            Some(json!({"ticket": idx, "granted": true}))
                        }
                        Poll::Ready(Err(r)) => Some(json!({"ticket": idx, "granted": false,
                            "reason": r.reason.as_str(), "retry_after": r.retry_after})),
                    };
                    if ev.is_none() {
                        self.pending.insert(idx, fut);
                    }
                    let mut evs = self.events();
                    if let Some(ev) = ev {
                        evs.as_array_mut().unwrap().push(ev);
                        evs.as_array_mut().unwrap().sort_by_key(|e| e["ticket"].as_u64());
                    }
                    return json!({"result": "queued", "events": evs});
                }
                match first {
                    Poll::Ready(Ok(p)) => {
                        self.permits.insert(idx, p);
                        json!({"result": "admitted"})
                    }
                    Poll::Ready(Err(r)) => json!({"result": "rejected",
                        "reason": r.reason.as_str(), "retry_after": r.retry_after}),
                    Poll::Pending => panic!("pending without being queued"),
                }
            }
            "release" => {
                let p = self.permits.remove(&u(st, "permit")).expect("release of no permit");
                let outcome = match st["outcome"].as_str().unwrap() {
                    "success" => Outcome::Success,
                    "dropped" => Outcome::Dropped,
                    _ => Outcome::Ignored,
                };
                p.release(outcome);
                json!({"events": self.events()})
            }
            "cancel" => {
                let f = self.pending.remove(&u(st, "ticket")).expect("cancel of no ticket");
                drop(f);
                json!({})
            }
            "shed" => {
                let lv = st["level"].as_u64().map(|l| Priority::new(l as u8).unwrap());
                self.gate.core().set_shed_level(lv);
                json!({})
            }
            "static" => {
                self.gate.core().limiter().set_static_limit(st["limit"].as_f64()).unwrap();
                json!({})
            }
            "check" => {
                let m = self.gate.metrics();
                let n = self.gate.core().levels() as usize;
                json!({
                    "state": if m.state == GateState::Healthy { "healthy" } else { "overloaded" },
                    "waiting": m.waiting, "waiting_by_level": &m.waiting_by_level[..n],
                    "inflight": m.limiter.inflight, "limit": m.limiter.limit,
                    "shed_level": m.shed_level.map(|p| p.index()),
                    "queued": m.queued, "granted": m.granted, "expired": m.expired,
                    "sloughed": m.sloughed, "evicted": m.evicted,
                    "cancelled": m.cancelled, "shed": m.shed,
                    "queue_full": m.queue_full,
                    "deadline_unmeetable": m.deadline_unmeetable, "aged": m.aged,
                })
            }
            "brownout" => {
                let now = u(st, "now");
                let d = if now > MAX_NOW {
                    // No clock shows such a time (see above): the core is asked directly.
                    self.gate.core().brownout(now)
                } else {
                    self.gate.brownout()
                };
                assert!(!d.is_nan());
                json!({"dimmer": if d.is_finite() { json!(d) } else { Value::Null }})
            }
            op => panic!("unknown gate op {op}"),
        }
    }
}

#[test]
fn gate_vectors_replay_through_the_async_gate() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/vectors/vectors.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut scenarios = 0;
    let mut steps = 0;
    for sc in doc["scenarios"].as_array().unwrap() {
        if sc["kind"] != "gate" {
            continue;
        }
        let name = sc["name"].as_str().unwrap();
        let cfg = gate_config(sc["config"].as_object().unwrap()).unwrap();
        let clock = ManualClock::new(0);
        let gate = G::with_clock(cfg, clock.clone()).unwrap();
        let mut r = Replay { gate, clock, pending: BTreeMap::new(), permits: BTreeMap::new() };
        for (i, st) in sc["steps"].as_array().unwrap().iter().enumerate() {
            let st = st.as_object().unwrap();
            let actual = r.step(i as u64, st);
            assert_eq!(
                actual, st["expect"],
                "scenario {name} step {i} ({}): expected {} actual {actual}",
                st["op"], st["expect"]
            );
            steps += 1;
        }
        // Whatever is left ends cleanly: nothing stays in the registry.
        r.pending.clear();
        r.permits.clear();
        assert_eq!(r.gate.registry_len(), 0, "scenario {name}");
        assert_eq!(r.gate.core().limiter().inflight(), 0, "scenario {name}");
        scenarios += 1;
    }
    assert!(scenarios >= 5 && steps > 500, "{scenarios} scenarios, {steps} steps");
}
