//! A driver for instruction counts (`valgrind --tool=callgrind`, repeatable on a loaded
//! machine, unlike wall-clock time): runs one hot path `N` times on one thread.
//!
//! Usage: `paths admit|queue|limiter|shared N` (`shared`: the limiter in anonymous shared
//! memory, `surgeguard::shm::SharedLimiter`, with its per-process permit count). The cost of one iteration is
//! `(Ir(N2) − Ir(N1)) / (N2 − N1)`; `bench/callgrind.sh` does that subtraction.

use std::hint::black_box;
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

fn cfg(limit: f64) -> LimiterConfig {
    LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: limit,
        min_limit: 1.0,
        max_limit: limit,
    }))
}

fn gate(limit: f64) -> Box<Gate<64>> {
    Box::new(Gate::new(GateConfig { limiter: cfg(limit), ..GateConfig::default() }).unwrap())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut now = 1_000u64;
    match path.as_str() {
        "admit" => {
            let g = gate(1_000_000.0);
            for _ in 0..n {
                now += 1_000;
                let Arrival::Admitted(p) = g.arrive(now, Priority::NORMAL, None) else {
                    panic!("admitted")
                };
                g.release(p, now + 500, Outcome::Success).unwrap();
            }
        }
        "limiter" => {
            let l = Limiter::new(cfg(1_000_000.0)).unwrap();
            for _ in 0..n {
                now += 1_000;
                let p = l.try_acquire_raw(now, Priority::NORMAL).unwrap();
                l.release_raw(p, now + 500, Outcome::Success).unwrap();
            }
        }
        "shared" => {
            let l = surgeguard::shm::SharedLimiter::anonymous(cfg(1_000_000.0)).unwrap();
            for _ in 0..n {
                now += 1_000;
                let p = l.try_acquire_raw(now, Priority::NORMAL).unwrap();
                l.release_raw(p, now + 500, Outcome::Success).unwrap();
            }
        }
        "queue" => {
            let g = gate(1.0);
            let Arrival::Admitted(mut holder) = g.arrive(now, Priority::NORMAL, None) else {
                panic!("first arrival is admitted")
            };
            let mut out: [Option<Event>; 4] = Default::default();
            for _ in 0..n {
                now += 1_000;
                let Arrival::Queued(t) = g.arrive(now, Priority::NORMAL, None) else {
                    panic!("queued")
                };
                g.release(holder, now, Outcome::Success).unwrap();
                assert_eq!(g.poll(now, &mut out), 1);
                let Some(Event::Granted(_, p)) = out[0].take() else { panic!("granted") };
                black_box(t);
                holder = p;
            }
        }
        other => panic!("unknown path {other:?}: admit, queue, limiter or shared"),
    }
}
