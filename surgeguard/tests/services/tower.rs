//! The tower layers on in-process services: priority from a header or an extension, the
//! 503 / gRPC answers, how a response ends its permit, `grpc-timeout` deadlines, and the
//! retry policy bounded by its budget.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use surgeguard::core::backoff::{BackoffConfig, Jitter};
use surgeguard::core::retry::RetryBudgetConfig;
use surgeguard::tower::{GateLayer, GuardBody, RetryPolicy, ServerConfig};
use surgeguard::{Gate, Priority};
use tower::{Layer, ServiceExt, service_fn};

type Req = http::Request<String>;
type Res = http::Response<String>;

fn ok_service() -> impl tower::Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone
{
    service_fn(|_req: Req| async { Ok::<_, Infallible>(http::Response::new("ok".to_string())) })
}

async fn call(layer: &GateLayer, req: Req) -> http::Response<GuardBody<String>> {
    layer.layer(ok_service()).oneshot(req).await.unwrap()
}

/// The whole body, as text.
async fn text(res: http::Response<GuardBody<String>>) -> String {
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn priority_comes_from_extension_then_header_then_default() {
    let gate: Gate = Gate::fixed(8.0).unwrap();
    gate.set_shed_level(Some(Priority::BACKGROUND));
    let layer = GateLayer::new(gate.clone());
    let with = |h: Option<&str>| {
        let mut b = http::Request::builder();
        if let Some(h) = h {
            b = b.header("x-request-priority", h);
        }
        b.body(String::new()).unwrap()
    };
    assert_eq!(call(&layer, with(None)).await.status(), 200);
    assert_eq!(call(&layer, with(Some("critical"))).await.status(), 200);
    assert_eq!(call(&layer, with(Some("background"))).await.status(), 503);
    assert_eq!(call(&layer, with(Some("2"))).await.status(), 503);
    assert_eq!(call(&layer, with(Some("nonsense"))).await.status(), 200);
    let mut req = with(Some("critical"));
    req.extensions_mut().insert(Priority::BACKGROUND); // the extension wins
    let res = call(&layer, req).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(res.headers()["content-type"], "application/json");
    assert_eq!(
        text(res).await,
        r#"{"error": "service overloaded", "reason": "shed", "retry_after_s": 1, "retry": "not before retry_after_s"}"#
    );
    let bg_default = GateLayer::with_config(
        gate,
        ServerConfig::default().default_priority(Priority::BACKGROUND),
    );
    assert_eq!(call(&bg_default, with(None)).await.status(), 503);
}

#[tokio::test]
async fn grpc_refusal_is_resource_exhausted_with_pushback() {
    let gate: Gate = Gate::fixed(1.0).unwrap();
    let held = gate.try_acquire(Priority::CRITICAL).unwrap();
    let layer = GateLayer::new(gate.clone());
    let req = http::Request::builder()
        .header("content-type", "application/grpc")
        .header("grpc-timeout", "20m")
        .body(String::new())
        .unwrap();
    let res = call(&layer, req).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["grpc-status"], "8");
    assert!(res.body().rejection().is_none()); // trailers-only: no body
    let msg = res.headers()["grpc-message"].to_str().unwrap();
    assert!(msg == "expired" || msg == "deadline_unmeetable", "{msg}");
    let pushback: u64 = res.headers()["grpc-retry-pushback-ms"].to_str().unwrap().parse().unwrap();
    assert!(pushback >= 1);
    held.success();
    assert_eq!(gate.core().limiter().inflight(), 0);
    assert_eq!(gate.registry_len(), 0);
}

#[tokio::test]
async fn response_status_decides_the_outcome() {
    let gate: Gate = Gate::fixed(4.0).unwrap();
    let layer = GateLayer::new(gate.clone());
    for (status, _) in [(503u16, "dropped"), (404, "ignored"), (200, "success"), (429, "dropped")] {
        let svc = layer.layer(service_fn(move |_req: Req| async move {
            Ok::<_, Infallible>(
                http::Response::builder().status(status).body(String::new()).unwrap(),
            )
        }));
        svc.oneshot(http::Request::new(String::new())).await.unwrap();
    }
    let m = gate.core().limiter().metrics();
    assert_eq!((m.drops, m.ignored, m.successes, m.inflight), (2, 1, 1, 0));
}

#[tokio::test]
async fn a_cancelled_request_frees_its_slot() {
    let gate: Gate = Gate::fixed(1.0).unwrap();
    let layer = GateLayer::new(gate.clone());
    let slow = layer.layer(service_fn(|_req: Req| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, Infallible>(http::Response::new(String::new()))
    }));
    let r = tokio::time::timeout(
        Duration::from_millis(20),
        slow.clone().oneshot(http::Request::new(String::new())),
    )
    .await;
    assert!(r.is_err());
    assert_eq!(gate.core().limiter().inflight(), 0);
    assert_eq!(gate.core().limiter().metrics().ignored, 1);
}

#[tokio::test]
async fn retries_are_bounded_by_the_budget_and_wait_for_retry_after() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let failing = service_fn(move |_req: Req| {
        c.fetch_add(1, Ordering::Relaxed);
        async {
            Ok::<_, Infallible>(http::Response::builder().status(503).body(String::new()).unwrap())
        }
    });
    let budget =
        RetryBudgetConfig { ttl: 10_000_000_000, min_retries_per_sec: 1, percent_can_retry: 0.1 };
    let backoff = BackoffConfig { base: 1_000, multiplier: 2.0, cap: 10_000, jitter: Jitter::Full };
    let policy = RetryPolicy::new(budget, backoff, 3).unwrap();
    let svc = tower::retry::RetryLayer::new(policy.clone()).layer(failing);
    const N: usize = 200;
    for _ in 0..N {
        let res = svc.clone().oneshot(http::Request::new(String::new())).await.unwrap();
        assert_eq!(res.status(), 503);
    }
    let n = calls.load(Ordering::Relaxed);
    // Without the budget: N × 4 calls. With it: N, plus 10 % of N, plus the reserve
    // (1 retry/s × 10 s).
    assert!((N..=N + N / 10 + 10 + 1).contains(&n), "{n} calls");
    let m = policy.budget().metrics();
    assert!(m.retries_denied > 0);

    // A Retry-After of 1 s is honoured even though the backoff caps at 10 µs.
    let c2 = Arc::new(AtomicUsize::new(0));
    let c = c2.clone();
    let once = service_fn(move |_req: Req| {
        let first = c.fetch_add(1, Ordering::Relaxed) == 0;
        async move {
            let status = if first { 503 } else { 200 };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("retry-after", "1")
                    .body(String::new())
                    .unwrap(),
            )
        }
    });
    let policy = RetryPolicy::new(RetryBudgetConfig::default(), backoff, 3).unwrap();
    let svc = tower::retry::RetryLayer::new(policy).layer(once);
    tokio::time::pause();
    let t = tokio::time::Instant::now();
    let res = svc.oneshot(http::Request::new(String::new())).await.unwrap();
    assert_eq!(res.status(), 200);
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
}

#[tokio::test]
async fn keyed_layer_answers_429_per_key_and_frees_the_slot() {
    use surgeguard::core::keyed::KeyedConfig;
    use surgeguard::tower::{HeaderKey, KeyedLayer};
    let cfg = KeyedConfig { shards_per_key: 1, ..KeyedConfig::new(1) };
    let layer: KeyedLayer<HeaderKey, 16> =
        KeyedLayer::new(cfg, HeaderKey::new("x-api-key", 9)).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rx = Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let svc = layer.layer(service_fn(move |req: Req| {
        let rx = rx.clone();
        async move {
            if req.headers().contains_key("hold") {
                let rx = rx.lock().await.take().unwrap();
                let _ = rx.await;
            }
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }
    }));
    let req = |key: &str, hold: bool| {
        let mut b = http::Request::builder().header("x-api-key", key);
        if hold {
            b = b.header("hold", "1");
        }
        b.body(String::new()).unwrap()
    };
    let held = tokio::spawn(svc.clone().oneshot(req("noisy", true)));
    tokio::task::yield_now().await;
    while layer.table().metrics().admitted == 0 {
        tokio::task::yield_now().await;
    }
    let res = svc.clone().oneshot(req("noisy", false)).await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "1");
    let body = text(res).await;
    assert!(body.contains("\"reason\": \"key_limit\""), "{body}");
    // No key: no per-key check.
    assert_eq!(svc.clone().oneshot(http::Request::new(String::new())).await.unwrap().status(), 200);
    tx.send(()).unwrap();
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
    assert_eq!(svc.clone().oneshot(req("noisy", false)).await.unwrap().status(), 200);
}

#[tokio::test]
async fn client_layer_opens_its_breaker_and_refuses_locally() {
    use surgeguard::Reason;
    use surgeguard::core::breaker::{BreakerWindow, CircuitBreakerConfig};
    use surgeguard::tower::{ClientError, ClientLayer};
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let down = service_fn(move |_req: Req| {
        c.fetch_add(1, Ordering::Relaxed);
        async {
            Ok::<_, Infallible>(http::Response::builder().status(503).body(String::new()).unwrap())
        }
    });
    let breaker = CircuitBreakerConfig {
        window: BreakerWindow::Count(10),
        minimum_calls: 10,
        ..CircuitBreakerConfig::default()
    };
    let layer = ClientLayer::new()
        .breaker(breaker)
        .unwrap()
        .limiter(surgeguard::Limiter::fixed(4.0).unwrap());
    let client = layer.layer(down);
    let mut refused = 0;
    for _ in 0..50 {
        match client.clone().oneshot(http::Request::new(String::new())).await {
            Ok(res) => assert_eq!(res.status(), 503),
            Err(ClientError::Rejected(r)) => {
                assert_eq!(r.reason, Reason::BreakerOpen);
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(calls.load(Ordering::Relaxed), 10, "the breaker opened after its window");
    assert_eq!(refused, 40);
}
