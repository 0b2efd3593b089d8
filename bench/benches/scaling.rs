//! How each hot path scales with threads, in one run: every thread runs the same
//! operation on one shared structure; the time reported is per operation per thread (flat
//! = scales; rising = the threads contend on shared cache lines).
//!
//! Thread counts: 1, 2, 4, 8 and 16, but never more than the machine's cores (on a
//! 2-core machine only 1 and 2 run; more threads than cores would measure the scheduler).
//!
//! Workloads (one iteration):
//! - `floor_atomic_pair`: `fetch_add` + `fetch_sub` on one shared word — the least any
//!   shared counter of admissions can cost;
//! - `gate_admit_release`: `Gate::arrive` → `Admitted`, then `release` with a sample (a
//!   limit of 1,000,000: nothing queues);
//! - `limiter_acquire_release`: the `Limiter` alone on the same work;
//! - `tokio_semaphore`: tokio `Semaphore::try_acquire` and dropping the permit;
//! - `mutex_vecdeque`: `Mutex<VecDeque>` push + pop;
//! - `arrayqueue`: crossbeam `ArrayQueue` push + pop.
//!
//! Run: `cargo bench -p surgeguard-bench --bench scaling`; `bench/report.py` prints the
//! scaling table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};
use surgeguard_core::gate::{Arrival, Gate, GateConfig};
use surgeguard_core::limit::{AlgorithmConfig, FixedConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

const CAP: usize = 64;
const LIMIT: f64 = 1_000_000.0;

fn limiter_cfg() -> LimiterConfig {
    LimiterConfig::with_algorithm(AlgorithmConfig::Fixed(FixedConfig {
        initial_limit: LIMIT,
        min_limit: 1.0,
        max_limit: LIMIT,
    }))
}

/// Thread counts that fit the machine's cores.
fn thread_counts() -> Vec<usize> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    [1, 2, 4, 8, 16].into_iter().filter(|&t| t <= cores).collect()
}

/// Runs `body(thread, iters)` on `threads` threads at once; returns the slowest's time.
fn concurrently<S: Send + Sync + 'static>(
    shared: &Arc<S>,
    threads: usize,
    iters: u64,
    body: fn(&S, usize, u64),
) -> Duration {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (s, start) = (shared.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let t0 = Instant::now();
                body(&s, t, iters);
                t0.elapsed()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).max().unwrap()
}

fn bench_one<S: Send + Sync + 'static>(
    c: &mut Criterion,
    name: &str,
    make: impl Fn() -> S,
    body: fn(&S, usize, u64),
) {
    let mut group = c.benchmark_group("scaling");
    for threads in thread_counts() {
        let shared = Arc::new(make());
        group.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
            b.iter_custom(|iters| concurrently(&shared, threads, iters, body))
        });
    }
    group.finish();
}

fn floor(w: &AtomicU64, _t: usize, n: u64) {
    for _ in 0..n {
        w.fetch_add(1, Ordering::Relaxed);
        black_box(w.fetch_sub(1, Ordering::Relaxed));
    }
}

fn gate_admit_release(g: &Gate<CAP>, t: usize, n: u64) {
    // Each thread's clock advances 1 µs per iteration (offset by the thread index), as
    // busy threads' clocks do: most calls advance the gate's clock.
    let mut now = t as u64;
    for _ in 0..n {
        now += 1_000;
        let Arrival::Admitted(p) = g.arrive(now, Priority::NORMAL, None) else {
            panic!("the limit is large: always admitted")
        };
        g.release(p, now + 500, Outcome::Success).unwrap();
    }
}

fn limiter_acquire_release(l: &Limiter, t: usize, n: u64) {
    let mut now = t as u64;
    for _ in 0..n {
        now += 1_000;
        let p = l.try_acquire_raw(now, Priority::NORMAL).unwrap();
        l.release_raw(p, now + 500, Outcome::Success).unwrap();
    }
}

fn tokio_semaphore(s: &tokio::sync::Semaphore, _t: usize, n: u64) {
    for _ in 0..n {
        drop(black_box(s.try_acquire().unwrap()));
    }
}

fn mutex_vecdeque(q: &Mutex<VecDeque<u64>>, _t: usize, n: u64) {
    for _ in 0..n {
        q.lock().unwrap().push_back(black_box(7));
        black_box(q.lock().unwrap().pop_front().unwrap());
    }
}

fn arrayqueue(q: &ArrayQueue<u64>, _t: usize, n: u64) {
    for _ in 0..n {
        q.push(black_box(7)).unwrap();
        black_box(q.pop().unwrap());
    }
}

fn bench_scaling(c: &mut Criterion) {
    bench_one(c, "floor_atomic_pair", || AtomicU64::new(0), floor);
    bench_one(
        c,
        "gate_admit_release",
        || -> Gate<CAP> {
            Gate::new(GateConfig { limiter: limiter_cfg(), ..GateConfig::default() }).unwrap()
        },
        gate_admit_release,
    );
    bench_one(
        c,
        "limiter_acquire_release",
        || Limiter::new(limiter_cfg()).unwrap(),
        limiter_acquire_release,
    );
    bench_one(c, "tokio_semaphore", || tokio::sync::Semaphore::new(1 << 20), tokio_semaphore);
    bench_one(c, "mutex_vecdeque", || Mutex::new(VecDeque::with_capacity(CAP)), mutex_vecdeque);
    // Room for every thread's one item.
    bench_one(c, "arrayqueue", || ArrayQueue::new(CAP), arrayqueue);
}

criterion_group!(benches, bench_scaling);
criterion_main!(benches);
