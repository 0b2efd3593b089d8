//! Two real hops on loopback: a front service (axum + `GateLayer`) serves callers with a
//! 200 ms budget (`surgeguard-timeout-ms`) by calling a dependency (axum + `GateLayer`)
//! through hyper and the `ClientLayer`. The dependency is slow: 2 calls at a time, 40 ms
//! each (50/s), while 40 callers arrive at once — most of them cannot be served in time.
//!
//! The front runs its dependency call in a spawned task and gives up waiting for it at its
//! own deadline (`deadline::enforce`), as many services do (a thread pool, a background
//! task): the call is not cancelled, so the dependency cannot learn from a closed
//! connection that nobody waits any more. With the deadline propagated it knows anyway: it
//! refuses at arrival what it cannot serve in time, drops waiters whose time ran out, and
//! never starts work whose caller has already given up. Without propagation it serves its
//! whole queue, most of it for callers that left long ago (the Google SRE book,
//! "Addressing Cascading Failures": deadline propagation; gRPC's deadlines work the same
//! way).
#![cfg(feature = "tower")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use surgeguard::Gate;
use surgeguard::deadline;
use surgeguard::tower::{ClientDeadlines, ClientError, ClientLayer, GateLayer};
use tower::ServiceExt;

const CALLERS: u64 = 40;
const BUDGET_MS: u64 = 200;
const WORK: Duration = Duration::from_millis(40);

#[derive(Default)]
struct Counts {
    /// Requests ids whose caller (the front) gave up on the dependency call.
    gave_up: Mutex<HashSet<u64>>,
    /// Work the dependency started, and how much of it for a caller that had given up.
    started: AtomicU64,
    wasted: AtomicU64,
    /// Front calls refused locally: too little time left to be worth sending.
    failed_fast: AtomicU64,
}

fn id_of(h: &HeaderMap) -> u64 {
    h.get("x-id").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(u64::MAX)
}

async fn dependency(State(c): State<Arc<Counts>>, h: HeaderMap) -> StatusCode {
    c.started.fetch_add(1, Ordering::Relaxed);
    if c.gave_up.lock().unwrap().contains(&id_of(&h)) {
        c.wasted.fetch_add(1, Ordering::Relaxed);
    }
    tokio::time::sleep(WORK).await;
    StatusCode::OK
}

type Http = ClientLayerService;
type ClientLayerService = surgeguard::tower::ClientService<
    Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
>;

#[derive(Clone)]
struct Front {
    client: Http,
    dep: hyper::Uri,
    counts: Arc<Counts>,
}

async fn front(State(f): State<Front>, h: HeaderMap) -> StatusCode {
    let id = id_of(&h);
    let req = http::Request::get(f.dep.clone())
        .header("x-id", id.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    // The call runs on in its own task (with the handler's deadline: task-locals do not
    // cross `spawn`) even after the handler gives up on it.
    let call = f.client.clone().oneshot(req);
    let call = match deadline::current() {
        Some(d) => tokio::spawn(deadline::scope(d, call)),
        None => tokio::spawn(call),
    };
    match deadline::enforce(call).await {
        Ok(Err(_join)) => StatusCode::INTERNAL_SERVER_ERROR,
        Ok(Ok(Ok(res))) => res.status(),
        Ok(Ok(Err(ClientError::Rejected(_)))) => {
            f.counts.failed_fast.fetch_add(1, Ordering::Relaxed);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Ok(Ok(Err(_))) => StatusCode::BAD_GATEWAY,
        Err(_) => {
            // The front's deadline passed: it gives up on the dependency call.
            f.counts.gave_up.lock().unwrap().insert(id);
            StatusCode::GATEWAY_TIMEOUT
        }
    }
}

async fn serve(app: Router) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (addr, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
}

struct Report {
    ok: u64,
    started: u64,
    wasted: u64,
    failed_fast: u64,
}

async fn run(propagate: bool) -> Report {
    let counts = Arc::new(Counts::default());
    // The dependency: a fixed limit of 2 (its capacity), a queue without CoDel, so that
    // only the deadlines decide what is dropped (CoDel would also cut a standing queue,
    // whatever the callers' deadlines).
    let mut cfg = surgeguard::GateConfig { codel: None, ..Default::default() };
    cfg.limiter.algorithm =
        surgeguard::core::limit::AlgorithmConfig::Fixed(surgeguard::core::limit::FixedConfig {
            initial_limit: 2.0,
            min_limit: 2.0,
            max_limit: 2.0,
        });
    let dep_gate: Gate = Gate::new(cfg).unwrap();
    let dep_app = Router::new()
        .route("/", get(dependency))
        .with_state(counts.clone())
        .layer(GateLayer::new(dep_gate.clone()));
    let (dep_addr, dep_server) = serve(dep_app).await;

    let http: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut layer = ClientLayer::new();
    if propagate {
        // The margin covers the trip to the dependency (here a new connection per
        // concurrent call, on a busy machine): the dependency's deadline is this much
        // before the front's.
        // The call is not dropped at the deadline either (`enforce(false)`; by default
        // it is, and the closed connection would tell the dependency too): only the
        // headers carry the news.
        let cfg = ClientDeadlines::default().margin(Duration::from_millis(50)).enforce(false);
        layer = layer.deadlines(cfg);
    }
    let front_state = Front {
        client: tower::Layer::layer(&layer, http.clone()),
        dep: format!("http://{dep_addr}/").parse().unwrap(),
        counts: counts.clone(),
    };
    let front_gate: Gate = Gate::fixed(1_000.0).unwrap();
    let front_app = Router::new()
        .route("/", get(front))
        .with_state(front_state)
        .layer(GateLayer::new(front_gate));
    let (front_addr, front_server) = serve(front_app).await;

    let uri: hyper::Uri = format!("http://{front_addr}/").parse().unwrap();
    let mut tasks = Vec::new();
    for id in 0..CALLERS {
        let (http, uri) = (http.clone(), uri.clone());
        tasks.push(tokio::spawn(async move {
            let req = http::Request::get(uri)
                .header("x-id", id.to_string())
                .header("surgeguard-timeout-ms", BUDGET_MS.to_string())
                .body(Empty::<Bytes>::new())
                .unwrap();
            let res = tokio::time::timeout(Duration::from_secs(5), http.request(req)).await;
            matches!(res, Ok(Ok(r)) if r.status() == 200)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += u64::from(t.await.unwrap());
    }
    // Let the dependency drain whatever it still holds (40 × 40 ms / 2 at most).
    let drained = tokio::time::Instant::now() + Duration::from_secs(3);
    while (dep_gate.metrics().waiting > 0 || dep_gate.core().limiter().inflight() > 0)
        && tokio::time::Instant::now() < drained
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    front_server.abort();
    dep_server.abort();
    let m = dep_gate.metrics();
    eprintln!(
        "  dependency gate: {} refused at arrival (unmeetable), {} dropped in the queue (expired)",
        m.deadline_unmeetable, m.expired
    );
    Report {
        ok,
        started: counts.started.load(Ordering::Relaxed),
        wasted: counts.wasted.load(Ordering::Relaxed),
        failed_fast: counts.failed_fast.load(Ordering::Relaxed),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dependency_never_starts_work_whose_caller_gave_up() {
    let off = run(false).await;
    let on = run(true).await;
    for (name, r) in [("propagation off", &off), ("propagation on", &on)] {
        eprintln!(
            "{name}: {}/{CALLERS} callers served, dependency started {} calls, {} for a caller that had given up, {} failed fast at the front",
            r.ok, r.started, r.wasted, r.failed_fast
        );
    }
    assert_eq!(
        on.wasted, 0,
        "with propagation the dependency started work for a caller that gave up"
    );
    assert!(off.wasted > 0, "without propagation the slow dependency serves callers that left");
    assert!(on.started < off.started);
    assert!(on.ok > 0, "some callers are served in time");
}
