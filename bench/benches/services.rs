//! The `surgeguard` std crate beside a floor and its tokio / tower peers, in one run.
//!
//! Workloads (per iteration, one thread, no contention):
//! - `atomic_pair`: an `AtomicUsize` fetch_add + fetch_sub (the floor).
//! - `owned_permit/limiter`: `Limiter::try_acquire` → an owned `Permit` → `success()` (one
//!   clock read on each side, an `Arc` clone and drop).
//! - `owned_permit/gate`: the same through `Gate::try_acquire` (the core gate's checks).
//! - `owned_permit/tokio_semaphore`: `Arc<Semaphore>::try_acquire_owned` + drop (the peer:
//!   RAII permits, no priorities, no adaptive limit).
//! - `async_acquire/gate`: `gate.acquire(NORMAL).await` + `success()` with a free slot,
//!   inside one `block_on` on a current-thread runtime.
//! - `async_acquire/tokio_semaphore`: `Semaphore::acquire_owned().await` + drop, same.
//! - `server/bare`: one request through an axum `Router` with a trivial handler (the floor
//!   of the row below).
//! - `server/gate_layer`: the same router behind `GateLayer` (adaptive-limit default
//!   config: priority header parse, gate admit, response classification, release).
//! - `server/tower_limit_shed`: the same router behind tower `LoadShed` +
//!   `ConcurrencyLimit(1024)` (the peer: a fixed limit that sheds when not ready).
//!
//! Report ratios within one run. Run:
//! `CARGO_TARGET_DIR=/work/target-bench cargo bench -p surgeguard-bench --bench services`

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use surgeguard::tower::GateLayer;
use surgeguard::{Gate, Limiter, Priority};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

const BIG: f64 = 1_000_000.0;

fn owned_permits(c: &mut Criterion) {
    let mut g = c.benchmark_group("owned_permit");
    let floor = AtomicUsize::new(0);
    g.bench_function("atomic_pair", |b| {
        b.iter(|| {
            floor.fetch_add(1, Ordering::AcqRel);
            black_box(floor.fetch_sub(1, Ordering::AcqRel));
        })
    });
    let limiter = Limiter::fixed(BIG).unwrap();
    g.bench_function("limiter", |b| {
        b.iter(|| limiter.try_acquire(black_box(Priority::NORMAL)).unwrap().success())
    });
    let gate: Gate = Gate::fixed(BIG).unwrap();
    g.bench_function("gate", |b| {
        b.iter(|| gate.try_acquire(black_box(Priority::NORMAL)).unwrap().success())
    });
    let sem = Arc::new(Semaphore::new(1 << 20));
    g.bench_function("tokio_semaphore", |b| {
        b.iter(|| drop(black_box(sem.clone().try_acquire_owned().unwrap())))
    });
    g.finish();
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Times `iters` runs of `f` inside one `block_on`.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, f: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    rt.block_on(async {
        let t = Instant::now();
        for _ in 0..iters {
            f().await;
        }
        t.elapsed()
    })
}

fn async_acquire(c: &mut Criterion) {
    let mut g = c.benchmark_group("async_acquire");
    let rt = rt();
    let gate: Gate = Gate::fixed(BIG).unwrap();
    g.bench_function("gate", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                gate.acquire(black_box(Priority::NORMAL)).await.unwrap().success()
            })
        })
    });
    let sem = Arc::new(Semaphore::new(1 << 20));
    g.bench_function("tokio_semaphore", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, || async {
                drop(black_box(sem.clone().acquire_owned().await.unwrap()))
            })
        })
    });
    g.finish();
}

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn request() -> http::Request<Body> {
    http::Request::builder()
        .uri("/")
        .header("x-request-priority", "normal")
        .body(Body::empty())
        .unwrap()
}

/// One request through `svc` per iteration: wait for readiness, call, await the answer.
fn one_request<S, RB>(rt: &tokio::runtime::Runtime, iters: u64, svc: S) -> Duration
where
    S: Service<http::Request<Body>, Response = http::Response<RB>> + Clone,
    S::Error: std::fmt::Debug,
{
    timed(rt, iters, || {
        let svc = svc.clone();
        async move {
            let res = svc.oneshot(request()).await.unwrap();
            assert_eq!(res.status(), 200);
            black_box(res);
        }
    })
}

fn server(c: &mut Criterion) {
    let mut g = c.benchmark_group("server");
    let rt = rt();
    g.bench_function("bare", |b| b.iter_custom(|iters| one_request(&rt, iters, router())));
    let gate: Gate = Gate::new(Default::default()).unwrap();
    let layered = GateLayer::new(gate).layer(router());
    g.bench_function("gate_layer", |b| {
        b.iter_custom(|iters| one_request(&rt, iters, layered.clone()))
    });
    let peer = tower::ServiceBuilder::new()
        .layer(tower::load_shed::LoadShedLayer::new())
        .layer(tower::limit::ConcurrencyLimitLayer::new(1024))
        .service(router());
    g.bench_function("tower_limit_shed", |b| {
        b.iter_custom(|iters| one_request(&rt, iters, peer.clone()))
    });
    g.finish();
}

criterion_group!(benches, owned_permits, async_acquire, server);
criterion_main!(benches);
