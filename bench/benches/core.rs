//! Limiter benchmarks, one run, beside a floor and the peers.
//!
//! Workload simulated: a service calling a dependency — each op is one admission and one
//! release with a latency sample (500 ns; `_5ms`: 5 ms), the caller passing `now` (a
//! counter advancing 1 µs per op, so windows fold as they would at ~1 M req/s; the clock
//! read itself is the caller's). The `_clock` rows read the monotonic clock
//! (`std::time::Instant`, `clock_gettime(CLOCK_MONOTONIC)` on Linux) at the admission and
//! again at the release, as the peers do: governor's `check` reads its clock once per
//! call, congestion-limiter reads `Instant::now()` when it admits and when it releases.
//! Those rows are the like-for-like comparison with the peers; the counter rows show the
//! limiter's own cost. Uncontended: one thread. Contended: two threads on one limiter,
//! ns/op = wall time / total ops.
//!
//! Floor: an `AtomicUsize` fetch_add + fetch_sub pair. Peers: tokio `Semaphore`
//! try_acquire + drop, governor's direct `check`, congestion-limiter's AIMD
//! try_acquire + release (async, polled on a current-thread runtime).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use surgeguard_core::limit::{AimdConfig, AlgorithmConfig, FixedConfig, GradientConfig};
use surgeguard_core::{Limiter, LimiterConfig, Outcome, Priority};

fn limiter(algorithm: AlgorithmConfig, levels: u8) -> Limiter {
    let cfg = LimiterConfig { levels, ..LimiterConfig::with_algorithm(algorithm) };
    Limiter::new(cfg).unwrap()
}

fn algorithms() -> [(&'static str, AlgorithmConfig); 3] {
    [
        (
            "fixed",
            AlgorithmConfig::Fixed(FixedConfig {
                initial_limit: 1000.0,
                min_limit: 1.0,
                max_limit: 1000.0,
            }),
        ),
        ("aimd", AlgorithmConfig::Aimd(AimdConfig::default())),
        ("gradient", AlgorithmConfig::Gradient(GradientConfig::default())),
    ]
}

/// One acquire + release(Success) with a 1 µs-advancing clock and a 500 ns latency.
#[inline]
fn cycle(l: &Limiter, now: &mut u64, level: Priority) {
    cycle_with_latency(l, now, level, 500);
}

/// [`cycle`] with another latency: samples of 2^21 ns (~2.1 ms) and more take one more
/// atomic step (a bucket counter and a sum instead of one packed word).
#[inline]
fn cycle_with_latency(l: &Limiter, now: &mut u64, level: Priority, latency: u64) {
    *now += 1_000;
    if let Ok(p) = l.try_acquire(*now, level) {
        p.release(*now + latency, Outcome::Success);
    }
}

/// Nanoseconds on the monotonic clock since the benchmark's epoch (read per call).
#[inline]
fn clock_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

/// [`cycle`] with `now` read from the monotonic clock at the admission and at the
/// release (no sleep in between: the latency is whatever the two reads measure).
#[inline]
fn cycle_clock(l: &Limiter, epoch: Instant, level: Priority) {
    if let Ok(p) = l.try_acquire(clock_ns(epoch), level) {
        p.release(clock_ns(epoch), Outcome::Success);
    }
}

/// One `Instant` epoch for every `_clock` row, so time never goes backwards for a limiter
/// reused across criterion's samples.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Runs `op` on two threads, `iters / 2` times each, and returns the wall time.
/// Where each two-thread sample's clock starts: after every `now` used before, so time
/// keeps moving forward across criterion's samples on the same limiter.
static CLOCK_BASE: AtomicU64 = AtomicU64::new(0);

fn two_threads<S: Send + Sync + 'static>(
    shared: Arc<S>,
    iters: u64,
    op: fn(&S, &mut u64),
) -> Duration {
    let base = CLOCK_BASE.fetch_add((iters / 2 + 1) * 1_000 + 1_000_000, Ordering::Relaxed);
    let start = Instant::now();
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut now = base + t * 500;
                for _ in 0..iters / 2 {
                    op(&shared, &mut now);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}

fn bench_limiter(c: &mut Criterion) {
    let mut g = c.benchmark_group("limiter");
    g.bench_function("floor_atomic_pair", |b| {
        let a = AtomicUsize::new(0);
        b.iter(|| {
            a.fetch_add(1, Ordering::AcqRel);
            black_box(a.fetch_sub(1, Ordering::AcqRel));
        })
    });
    for (name, alg) in algorithms() {
        g.bench_function(format!("surgeguard_{name}_1level"), |b| {
            let l = limiter(alg, 1);
            let mut now = 0;
            b.iter(|| cycle(&l, &mut now, Priority::NORMAL))
        });
    }
    for (name, alg) in algorithms() {
        g.bench_function(format!("surgeguard_{name}_1level_clock"), |b| {
            let l = limiter(alg, 1);
            b.iter(|| cycle_clock(&l, epoch(), Priority::NORMAL))
        });
    }
    g.bench_function("clock_read_pair", |b| {
        // The clock's own share of a `_clock` row: two reads.
        b.iter(|| black_box(clock_ns(epoch())) + black_box(clock_ns(epoch())))
    });
    g.bench_function("surgeguard_gradient_1level_5ms", |b| {
        let l = limiter(AlgorithmConfig::Gradient(GradientConfig::default()), 1);
        let mut now = 0;
        b.iter(|| cycle_with_latency(&l, &mut now, Priority::NORMAL, 5_000_000))
    });
    g.bench_function("surgeguard_gradient_3levels", |b| {
        let l = limiter(AlgorithmConfig::Gradient(GradientConfig::default()), 3);
        let mut now = 0;
        b.iter(|| cycle(&l, &mut now, Priority::NORMAL))
    });
    g.bench_function("tokio_semaphore", |b| {
        let s = tokio::sync::Semaphore::new(1000);
        b.iter(|| drop(black_box(s.try_acquire().unwrap())))
    });
    g.bench_function("governor_check", |b| {
        use governor::{Quota, RateLimiter};
        let q = Quota::per_second(std::num::NonZeroU32::new(u32::MAX).unwrap());
        let r = RateLimiter::direct(q);
        b.iter(|| black_box(r.check().is_ok()))
    });
    g.bench_function("congestion_limiter_aimd", |b| {
        use congestion_limiter::limiter::{DefaultLimiter, Limiter as _, Outcome as CO};
        use congestion_limiter::limits::Aimd;
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let l = DefaultLimiter::new(Aimd::new_with_initial_limit(1000));
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    if let Some(t) = l.try_acquire().await {
                        black_box(l.release(t, Some(CO::Success)).await);
                    }
                }
                start.elapsed()
            })
        })
    });

    // Two threads on one structure.
    g.bench_function("floor_atomic_pair_2threads", |b| {
        let a = Arc::new(AtomicUsize::new(0));
        b.iter_custom(|iters| {
            two_threads(a.clone(), iters, |a, _| {
                a.fetch_add(1, Ordering::AcqRel);
                black_box(a.fetch_sub(1, Ordering::AcqRel));
            })
        })
    });
    for (name, alg) in algorithms() {
        g.bench_function(format!("surgeguard_{name}_1level_2threads"), |b| {
            let l = Arc::new(limiter(alg, 1));
            b.iter_custom(|iters| {
                two_threads(l.clone(), iters, |l, now| cycle(l, now, Priority::NORMAL))
            })
        });
    }
    for (name, alg) in algorithms() {
        g.bench_function(format!("surgeguard_{name}_1level_clock_2threads"), |b| {
            let l = Arc::new(limiter(alg, 1));
            b.iter_custom(|iters| {
                two_threads(l.clone(), iters, |l, _| cycle_clock(l, epoch(), Priority::NORMAL))
            })
        });
    }
    g.bench_function("tokio_semaphore_2threads", |b| {
        let s = Arc::new(tokio::sync::Semaphore::new(1000));
        b.iter_custom(|iters| {
            two_threads(s.clone(), iters, |s, _| drop(black_box(s.try_acquire().unwrap())))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = bench_limiter
}
criterion_main!(benches);
