//! The Gate beside a floor and a peer, in one run.
//!
//! Workloads (per iteration):
//! - `admit_release`: a request that finds a free slot — `arrive` → `Admitted`, then
//!   `release` with a latency sample. The common, unloaded path.
//! - `queue_grant_release`: a request that must wait — the limit (1) is taken, `arrive` →
//!   `Queued`; the holder releases; `poll` → `Granted` (the new holder). Enqueue + grant,
//!   plus the release that makes the grant possible.
//! - `limiter_acquire_release`: the limiter alone on the same work, for the gate's share.
//! - `waitqueue_push_dispatch`: the queue storage alone — push, one dispatch round that
//!   links, finds and removes the waiter (no limiter, no CoDel).
//! - `arrayqueue_push_pop` (crossbeam `ArrayQueue`, lock-free MPMC) and
//!   `mutex_vecdeque_push_pop` (`Mutex<VecDeque>`): the floor and the usual peer for
//!   handing a waiter from one thread to another.
//! - `cycle_limit1` (2 threads only): both threads arrive at a limit of 1, releasing what
//!   they are admitted or granted and polling after every release or `Queued` — the
//!   contended pump.
//!
//! With two threads each thread runs the workload concurrently on the same structure;
//! the time reported is per iteration per thread.
//! Run: `CARGO_TARGET_DIR=/work/target-bench cargo bench -p surgeguard-bench --bench gate -- --quick`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use surgeguard_core::gate::{Arrival, Event, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::queue::{WaitQueue, NO_DEADLINE};
use surgeguard_core::{LimiterConfig, Outcome, Priority};

const CAP: usize = 64;

fn gate_limiter(limit: f64) -> LimiterConfig {
    LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: limit,
        min_limit: 1.0,
        max_limit: limit,
    }))
}

/// Default gate settings (three levels, folly CoDel) with a fixed limit.
fn gate(limit: f64) -> Gate<CAP> {
    Gate::new(GateConfig { limiter: gate_limiter(limit), ..GateConfig::default() }).unwrap()
}

/// Runs `body(thread, iters)` on `threads` threads at once; returns the slowest's time.
fn concurrently(
    threads: usize,
    iters: u64,
    body: impl Fn(usize, u64) + Send + Sync + 'static,
) -> Duration {
    let body = Arc::new(body);
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (body, start) = (body.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let t0 = Instant::now();
                body(t, iters);
                t0.elapsed()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).max().unwrap()
}

fn admit_release(g: &Gate<CAP>, iters: u64, t0: u64) {
    let mut now = t0;
    for _ in 0..iters {
        now += 1_000;
        let Arrival::Admitted(p) = g.arrive(now, Priority::NORMAL, None) else {
            panic!("limit is large: always admitted")
        };
        g.release(p, now + 500, Outcome::Success).unwrap();
    }
}

fn bench_gate(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate");

    // ---- one thread -------------------------------------------------------------------
    let g = gate(1_000_000.0);
    group.bench_function(BenchmarkId::new("admit_release", "1t"), |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            admit_release(&g, iters, 0);
            t.elapsed()
        })
    });

    // The limiter alone, same limit and sample: what `admit_release` adds is the gate.
    let l = surgeguard_core::Limiter::new(gate_limiter(1_000_000.0)).unwrap();
    group.bench_function(BenchmarkId::new("limiter_acquire_release", "1t"), |b| {
        let mut now = 0u64;
        b.iter(|| {
            now += 1_000;
            let p = l.try_acquire_raw(now, Priority::NORMAL).unwrap();
            l.release_raw(p, now + 500, Outcome::Success).unwrap();
        })
    });

    let g = gate(1.0);
    group.bench_function(BenchmarkId::new("queue_grant_release", "1t"), |b| {
        b.iter_custom(|iters| {
            let mut now = 1_000;
            let Arrival::Admitted(mut holder) = g.arrive(now, Priority::NORMAL, None) else {
                panic!("first arrival is admitted")
            };
            let mut out: [Option<Event>; 4] = Default::default();
            let t = Instant::now();
            for _ in 0..iters {
                now += 1_000;
                let Arrival::Queued(ticket) = g.arrive(now, Priority::NORMAL, None) else {
                    panic!("limit taken: queued")
                };
                g.release(holder, now, Outcome::Success).unwrap();
                assert_eq!(g.poll(now, &mut out), 1);
                let Some(Event::Granted(t, p)) = out[0].take() else { panic!("granted") };
                debug_assert_eq!(t, ticket);
                black_box(t);
                holder = p;
            }
            let elapsed = t.elapsed();
            g.release(holder, now, Outcome::Ignored).unwrap();
            elapsed
        })
    });

    let q: WaitQueue<CAP> = WaitQueue::new(3, CAP).unwrap();
    group.bench_function(BenchmarkId::new("waitqueue_push_dispatch", "1t"), |b| {
        b.iter(|| {
            let t = q.push(Priority::NORMAL, 0, NO_DEADLINE, false).unwrap();
            q.try_dispatch(|d| {
                d.refresh(|_| true);
                let w = d.oldest(Priority::NORMAL).unwrap();
                assert!(d.remove(&w));
                black_box(w.ticket() == t)
            });
        })
    });

    let aq = ArrayQueue::new(CAP);
    group.bench_function(BenchmarkId::new("arrayqueue_push_pop", "1t"), |b| {
        b.iter(|| {
            aq.push(black_box(7u64)).unwrap();
            black_box(aq.pop().unwrap());
        })
    });

    let mq = Mutex::new(VecDeque::with_capacity(CAP));
    group.bench_function(BenchmarkId::new("mutex_vecdeque_push_pop", "1t"), |b| {
        b.iter(|| {
            mq.lock().unwrap().push_back(black_box(7u64));
            black_box(mq.lock().unwrap().pop_front().unwrap());
        })
    });

    // ---- two threads ------------------------------------------------------------------
    let g = Arc::new(gate(1_000_000.0));
    group.bench_function(BenchmarkId::new("admit_release", "2t"), |b| {
        b.iter_custom(|iters| {
            let g = g.clone();
            concurrently(2, iters, move |t, n| admit_release(&g, n, t as u64))
        })
    });

    let g = Arc::new(gate(1.0));
    group.bench_function(BenchmarkId::new("cycle_limit1", "2t"), |b| {
        b.iter_custom(|iters| {
            let gc = g.clone();
            let d = concurrently(2, iters, move |t, n| {
                let g = &gc;
                let mut out: [Option<Event>; 8] = Default::default();
                let mut now = t as u64;
                let drain = |now: u64, out: &mut [Option<Event>; 8]| loop {
                    let k = g.poll(now, out);
                    for e in out.iter_mut().take(k) {
                        match e.take().unwrap() {
                            Event::Granted(_, p) => g.release(p, now, Outcome::Success).unwrap(),
                            Event::Expired(..) => {}
                        }
                    }
                    if k < out.len() {
                        break;
                    }
                };
                for _ in 0..n {
                    now += 1_000;
                    match g.arrive(now, Priority::NORMAL, None) {
                        Arrival::Admitted(p) => g.release(p, now, Outcome::Success).unwrap(),
                        Arrival::Queued(_) => {}
                        Arrival::Rejected(r) => {
                            black_box(r);
                        }
                    }
                    drain(now, &mut out);
                }
            });
            // Leave the gate empty for the next sample.
            let mut out: [Option<Event>; 8] = Default::default();
            let now = surgeguard_core::time::MAX_NOW; // the latest accepted time
            while g.waiting_total() > 0 {
                let k = g.poll(now, &mut out);
                for e in out.iter_mut().take(k) {
                    if let Some(Event::Granted(_, p)) = e.take() {
                        g.release(p, now, Outcome::Ignored).unwrap();
                    }
                }
            }
            d
        })
    });

    let aq = Arc::new(ArrayQueue::new(CAP));
    group.bench_function(BenchmarkId::new("arrayqueue_push_pop", "2t"), |b| {
        b.iter_custom(|iters| {
            let aq = aq.clone();
            concurrently(2, iters, move |_, n| {
                for _ in 0..n {
                    aq.push(black_box(7u64)).unwrap();
                    black_box(aq.pop());
                }
            })
        })
    });

    let mq = Arc::new(Mutex::new(VecDeque::with_capacity(CAP)));
    group.bench_function(BenchmarkId::new("mutex_vecdeque_push_pop", "2t"), |b| {
        b.iter_custom(|iters| {
            let mq = mq.clone();
            concurrently(2, iters, move |_, n| {
                for _ in 0..n {
                    mq.lock().unwrap().push_back(black_box(7u64));
                    black_box(mq.lock().unwrap().pop_front());
                }
            })
        })
    });

    group.finish();
}

criterion_group!(benches, bench_gate);
criterion_main!(benches);
