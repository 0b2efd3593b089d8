//! Deadline propagation through the tower layers, in process: the server layer reads the
//! caller's budget from the headers (smallest valid wins; bad ones ignored and counted by
//! reason, never failing the request, never unbounded) and gives the gate and the handler
//! its deadline; the client layer passes what is left on, fails fast when too little is
//! left, and the retry policy keeps its retries inside the deadline.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quickcheck::{Arbitrary, Gen, QuickCheck};
use surgeguard::clock::ManualClock;
use surgeguard::core::backoff::{BackoffConfig, Jitter};
use surgeguard::core::retry::RetryBudgetConfig;
use surgeguard::deadline::{self, Deadline};
use surgeguard::tower::{
    ClientDeadlines, ClientError, ClientLayer, GateLayer, GuardBody, RetryPolicy, ServerConfig,
};
use surgeguard::{Gate, Priority, Reason};
use tower::{Layer, ServiceExt, service_fn};

type Req = http::Request<String>;
type Res = http::Response<GuardBody<String>>;

const MS: u64 = 1_000_000;
const HOUR: u64 = 3_600_000 * MS;

/// A handler that reports the deadline it saw (ns left), and counts its calls.
fn handler(
    seen: Arc<Mutex<Vec<Option<Duration>>>>,
) -> impl tower::Service<Req, Response = http::Response<String>, Error = Infallible, Future: Send> + Clone
{
    service_fn(move |_req: Req| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(deadline::remaining());
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }
    })
}

fn request(headers: &[(&str, &[u8])]) -> Req {
    let mut b = http::Request::builder();
    for (n, v) in headers {
        b = b.header(*n, http::HeaderValue::from_bytes(v).unwrap());
    }
    b.body(String::new()).unwrap()
}

async fn serve(layer: &GateLayer<ManualClock, 64>, req: Req) -> (Res, Option<Option<Duration>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let res = layer.layer(handler(seen.clone())).oneshot(req).await.unwrap();
    let s = seen.lock().unwrap().pop();
    (res, s)
}

fn manual_gate(limit: f64) -> Gate<ManualClock, 64> {
    let mut cfg = surgeguard::GateConfig::default();
    cfg.limiter.algorithm =
        surgeguard::core::limit::AlgorithmConfig::Fixed(surgeguard::core::limit::FixedConfig {
            initial_limit: limit,
            min_limit: limit,
            max_limit: limit,
        });
    Gate::with_clock(cfg, ManualClock::new(1_000_000_000)).unwrap()
}

// ---- A reference reading of the documented header rules ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    Malformed,
    Negative,
    TooLarge,
}

fn trim(v: &[u8]) -> &[u8] {
    let s = v.iter().position(|b| *b != b' ' && *b != b'\t').unwrap_or(v.len());
    let e = v.iter().rposition(|b| *b != b' ' && *b != b'\t').map_or(s, |e| e + 1);
    &v[s..e.max(s)]
}

/// `grpc-timeout`: 1–8 digits then one of H M S m u n; a leading `-` before an otherwise
/// valid value is negative; above one hour is too large.
fn ref_grpc(v: &[u8]) -> Result<u64, Why> {
    let v = trim(v);
    let (neg, v) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    let Some((unit, digits)) = v.split_last() else { return Err(Why::Malformed) };
    let per: u128 = match unit {
        b'H' => 3_600_000_000_000,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return Err(Why::Malformed),
    };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Why::Malformed);
    }
    if neg {
        return Err(Why::Negative);
    }
    let n: u128 = std::str::from_utf8(digits).unwrap().parse().unwrap();
    if n * per > u128::from(HOUR) { Err(Why::TooLarge) } else { Ok((n * per) as u64) }
}

/// Millisecond headers: digits only (any count), `-` before them is negative.
fn ref_ms(v: &[u8]) -> Result<u64, Why> {
    let v = trim(v);
    let (neg, v) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return Err(Why::Malformed);
    }
    if neg {
        return Err(Why::Negative);
    }
    let digits = std::str::from_utf8(v).unwrap().trim_start_matches('0');
    if digits.len() > 7 {
        return Err(Why::TooLarge);
    }
    let n: u64 = if digits.is_empty() { 0 } else { digits.parse().unwrap() };
    if n * MS > HOUR { Err(Why::TooLarge) } else { Ok(n * MS) }
}

const NAMES: [&str; 4] =
    ["grpc-timeout", "x-envoy-expected-rq-timeout-ms", "surgeguard-timeout-ms", "x-budget-ms"];

#[derive(Clone, Debug)]
struct Headers(Vec<(usize, Vec<u8>)>);

impl Arbitrary for Headers {
    fn arbitrary(g: &mut Gen) -> Self {
        const ALPHA: &[u8] = b"0123456789HMSmun- \t.+xe,";
        let n = usize::arbitrary(g) % 5;
        let hs = (0..n)
            .map(|_| {
                let name = usize::arbitrary(g) % NAMES.len();
                let len = usize::arbitrary(g) % 12;
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        if u8::arbitrary(g) % 8 == 0 {
                            u8::arbitrary(g) // any byte (invalid header bytes are skipped)
                        } else {
                            *g.choose(ALPHA).unwrap()
                        }
                    })
                    .collect();
                (name, v)
            })
            .filter(|(_, v)| http::HeaderValue::from_bytes(v).is_ok())
            .collect();
        Headers(hs)
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        Box::new(self.0.shrink().map(Headers))
    }
}

fn headers_never_fail_the_request_nor_grant_unbounded_time(hs: Headers) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let layer = GateLayer::with_config(
        manual_gate(4.0),
        ServerConfig::default().deadline_header("x-budget-ms"),
    );
    let mut req = http::Request::builder();
    let mut want: Option<u64> = None;
    let mut ignored = [0u64; 3];
    for (i, v) in &hs.0 {
        req = req.header(NAMES[*i], http::HeaderValue::from_bytes(v).unwrap());
    }
    // One header is all its lines joined by commas: a list whose smallest valid item
    // wins; ignored (once, with the first item's reason) only if no item is valid.
    for (i, name) in NAMES.iter().enumerate() {
        let items: Vec<Result<u64, Why>> =
            hs.0.iter()
                .filter(|(j, _)| *j == i)
                .flat_map(|(_, v)| v.split(|b| *b == b','))
                .map(|item| if *name == "grpc-timeout" { ref_grpc(item) } else { ref_ms(item) })
                .collect();
        let Some(first) = items.first() else { continue };
        match items.iter().filter_map(|r| r.ok()).min() {
            Some(b) => want = Some(want.map_or(b, |w| w.min(b))),
            None => match first {
                Err(Why::Malformed) => ignored[0] += 1,
                Err(Why::Negative) => ignored[1] += 1,
                Err(Why::TooLarge) => ignored[2] += 1,
                Ok(_) => unreachable!(),
            },
        }
    }
    let (res, seen) = rt.block_on(serve(&layer, req.body(String::new()).unwrap()));
    let m = layer.deadline_metrics();
    assert_eq!([m.malformed, m.negative, m.too_large], ignored, "{hs:?}");
    assert_eq!(m.with_deadline, u64::from(want.is_some()));
    match want {
        // No time left: refused at arrival, the handler never runs.
        Some(0) => {
            assert_eq!(res.status(), 503, "{hs:?}");
            assert_eq!(seen, None);
        }
        // A budget that ran out before the handler's turn (µs, on a busy machine):
        // refused as expired, the handler never runs.
        Some(b) if res.status() == 503 => {
            assert!(b < 1_000 * MS, "a {b} ns budget refused: {hs:?}");
            assert_eq!(seen, None);
        }
        Some(b) => {
            assert_eq!(res.status(), 200, "{hs:?}");
            let left = seen.unwrap().expect("the handler sees the deadline");
            assert!(left <= Duration::from_nanos(b), "{left:?} > {b} ns: {hs:?}");
        }
        None => {
            assert_eq!(res.status(), 200, "{hs:?}");
            assert_eq!(seen, Some(None), "no valid header, no deadline: {hs:?}");
        }
    }
    true
}

#[test]
fn quickcheck_deadline_header_bytes() {
    QuickCheck::new()
        .tests(400)
        .quickcheck(headers_never_fail_the_request_nor_grant_unbounded_time as fn(Headers) -> bool);
}

#[tokio::test]
async fn a_header_sent_twice_reads_as_its_smallest_valid_value_on_lines_or_joined() {
    // The rule every binding follows (Python's middlewares, Node's http, which joins the
    // lines with ", "): the lines kept apart and the lines joined read alike.
    for headers in [
        &[("surgeguard-timeout-ms", &b"900"[..]), ("surgeguard-timeout-ms", b"300")][..],
        &[("surgeguard-timeout-ms", b"900, 300")],
        &[("surgeguard-timeout-ms", b"oops"), ("surgeguard-timeout-ms", b"300")],
        &[("grpc-timeout", b"2S,300m")],
    ] {
        let layer = GateLayer::with_config(manual_gate(4.0), ServerConfig::default());
        let (res, seen) = serve(&layer, request(headers)).await;
        assert_eq!(res.status(), 200);
        let left = seen.unwrap().expect("a deadline");
        assert!(
            left <= Duration::from_millis(300) && left > Duration::from_millis(200),
            "{left:?}"
        );
        let m = layer.deadline_metrics();
        assert_eq!((m.with_deadline, m.malformed, m.negative), (1, 0, 0), "{headers:?}");
    }
    let layer = GateLayer::with_config(manual_gate(4.0), ServerConfig::default());
    let req = request(&[("surgeguard-timeout-ms", b"-5"), ("surgeguard-timeout-ms", b"oops")]);
    let (_, seen) = serve(&layer, req).await;
    assert_eq!(seen, Some(None));
    let m = layer.deadline_metrics();
    assert_eq!((m.malformed, m.negative), (0, 1), "ignored once, with the first reason");
}

#[tokio::test]
async fn smallest_valid_header_wins_and_bad_ones_are_counted() {
    let layer = GateLayer::with_config(manual_gate(4.0), ServerConfig::default());
    let (res, seen) = serve(
        &layer,
        request(&[
            ("grpc-timeout", b"2S"),
            ("x-envoy-expected-rq-timeout-ms", b"1500"),
            ("surgeguard-timeout-ms", b"300"),
            ("surgeguard-timeout-ms", b"-5"),
            ("grpc-timeout", b"2H"),
            ("x-envoy-expected-rq-timeout-ms", b"1.5"),
        ]),
    )
    .await;
    assert_eq!(res.status(), 200);
    let left = seen.unwrap().unwrap();
    assert!(left <= Duration::from_millis(300) && left > Duration::from_millis(200), "{left:?}");
    // Each header had a valid line: a header sent twice is one list whose smallest valid
    // item wins, so nothing was ignored.
    let m = layer.deadline_metrics();
    assert_eq!((m.malformed, m.negative, m.too_large, m.with_deadline), (0, 0, 0, 1));
    let (_, seen) = serve(
        &layer,
        request(&[
            ("grpc-timeout", b"2H"),
            ("x-envoy-expected-rq-timeout-ms", b"1.5"),
            ("surgeguard-timeout-ms", b"-5"),
            ("surgeguard-timeout-ms", b"oops"),
        ]),
    )
    .await;
    assert_eq!(seen, Some(None));
    let m = layer.deadline_metrics();
    assert_eq!((m.malformed, m.negative, m.too_large, m.with_deadline), (1, 1, 1, 1));
    assert_eq!(m.ignored_total(), 3);

    // Only bad headers: served as if absent.
    let (res, seen) = serve(&layer, request(&[("surgeguard-timeout-ms", b"soon")])).await;
    assert_eq!((res.status().as_u16(), seen), (200, Some(None)));

    // The standard headers can be switched off; the named one is read.
    let custom = GateLayer::with_config(
        manual_gate(4.0),
        ServerConfig::default()
            .deadline_headers(false)
            .grpc_timeout(false)
            .deadline_header("x-budget-ms"),
    );
    let (_, seen) = serve(
        &custom,
        request(&[
            ("surgeguard-timeout-ms", b"10"),
            ("grpc-timeout", b"1m"),
            ("x-budget-ms", b"800"),
        ]),
    )
    .await;
    assert!(seen.unwrap().unwrap() > Duration::from_millis(700));
}

#[tokio::test]
async fn server_default_and_maximum_budget() {
    let cfg = ServerConfig::default()
        .default_budget(Some(Duration::from_millis(100)))
        .max_budget(Some(Duration::from_secs(1)));
    let layer = GateLayer::with_config(manual_gate(4.0), cfg);
    let (_, seen) = serve(&layer, request(&[])).await;
    let left = seen.unwrap().unwrap();
    assert!(left <= Duration::from_millis(100) && left > Duration::from_millis(50), "{left:?}");
    let (_, seen) = serve(&layer, request(&[("surgeguard-timeout-ms", b"600000")])).await;
    let left = seen.unwrap().unwrap();
    assert!(left <= Duration::from_secs(1) && left > Duration::from_millis(900), "{left:?}");
    let m = layer.deadline_metrics();
    assert_eq!((m.defaulted, m.capped, m.with_deadline), (1, 1, 1));
}

#[tokio::test]
async fn unmeetable_refused_at_arrival_expired_dropped_at_dequeue() {
    let gate = manual_gate(1.0);
    let layer = GateLayer::new(gate.clone());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let svc = layer.layer(handler(calls.clone()));
    // A caller with no time left: refused at once, the handler never runs.
    let res = svc.clone().oneshot(request(&[("surgeguard-timeout-ms", b"0")])).await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(gate.metrics().deadline_unmeetable + gate.metrics().expired, 1);
    // The slot is taken; a caller with 50 ms queues, the clock passes its deadline, and
    // the pump drops it: its handler never runs.
    let held = gate.try_acquire(Priority::CRITICAL).unwrap();
    let waiting = tokio::spawn(svc.clone().oneshot(request(&[("surgeguard-timeout-ms", b"50")])));
    while gate.metrics().waiting == 0 {
        tokio::task::yield_now().await;
    }
    gate.clock().advance(Duration::from_millis(60)).unwrap();
    gate.pump();
    let res = waiting.await.unwrap().unwrap();
    assert_eq!(res.status(), 503);
    let body = String::from_utf8(
        http_body_util::BodyExt::collect(res.into_body()).await.unwrap().to_bytes().to_vec(),
    )
    .unwrap();
    assert!(body.contains("expired"), "{body}");
    held.success();
    assert!(calls.lock().unwrap().is_empty(), "no handler ran for a caller that gave up");
    assert_eq!(gate.core().limiter().inflight(), 0);
}

/// An echo dependency: answers with the deadline headers it received.
fn echo(
    calls: Arc<AtomicUsize>,
) -> impl tower::Service<Req, Response = http::Response<String>, Error = std::io::Error, Future: Send>
+ Clone {
    service_fn(move |req: Req| {
        calls.fetch_add(1, Ordering::Relaxed);
        async move {
            let h = |n: &str| req.headers().get(n).map(|v| v.to_str().unwrap().to_owned());
            let body = format!(
                "{}|{}",
                h("surgeguard-timeout-ms").unwrap_or_default(),
                h("grpc-timeout").unwrap_or_default()
            );
            Ok(http::Response::new(body))
        }
    })
}

#[tokio::test]
async fn client_passes_on_what_is_left_minus_the_margin() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer =
        ClientLayer::new().deadlines(ClientDeadlines::default().margin(Duration::from_millis(20)));
    let client = layer.layer(echo(calls.clone()));
    // No deadline: no headers.
    let res = client.clone().oneshot(request(&[])).await.unwrap();
    assert_eq!(res.body(), "|");
    // The task-local deadline (set by a server layer for its handler).
    let res = deadline::scope(
        Deadline::after(Duration::from_millis(300)),
        client.clone().oneshot(request(&[("content-type", b"application/grpc")])),
    )
    .await
    .unwrap();
    let (ms, grpc) = res.body().split_once('|').unwrap();
    let ms: u64 = ms.parse().unwrap();
    assert!((200..=280).contains(&ms), "{ms}");
    let grpc_ns = surgeguard::tower::parse_grpc_timeout(grpc).unwrap();
    assert!((200 * MS..=280 * MS).contains(&grpc_ns), "{grpc}");
    // A request extension wins over the task-local; a smaller header already set stands.
    let mut req = request(&[("surgeguard-timeout-ms", b"40")]);
    req.extensions_mut().insert(Deadline::after(Duration::from_secs(10)));
    let res = client.clone().oneshot(req).await.unwrap();
    assert_eq!(res.body(), "40|");
    assert_eq!(layer.deadline_metrics().propagated, 2);
}

#[tokio::test]
async fn client_fails_fast_when_too_little_is_left() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = ClientLayer::new().deadlines(
        ClientDeadlines::default()
            .margin(Duration::from_millis(5))
            .expected_latency(Duration::from_millis(100)),
    );
    let client = layer.layer(echo(calls.clone()));
    let refused = |r: Result<http::Response<String>, ClientError<std::io::Error>>| match r {
        Err(ClientError::Rejected(r)) => r.reason,
        other => panic!("{other:?}"),
    };
    let r = deadline::scope(
        Deadline::after(Duration::from_millis(50)),
        client.clone().oneshot(request(&[])),
    )
    .await;
    assert_eq!(refused(r), Reason::DeadlineUnmeetable);
    let r = deadline::scope(Deadline::at_ns(1), client.clone().oneshot(request(&[]))).await;
    assert_eq!(refused(r), Reason::Expired);
    // Under 1 ms after the margin: nothing worth sending.
    let tight = ClientLayer::new().deadlines(ClientDeadlines::default().margin(Duration::ZERO));
    let r = deadline::scope(
        Deadline::after(Duration::from_micros(500)),
        tight.layer(echo(calls.clone())).oneshot(request(&[])),
    )
    .await;
    assert_eq!(refused(r), Reason::DeadlineUnmeetable);
    assert_eq!(calls.load(Ordering::Relaxed), 0, "no doomed request was sent");
    assert_eq!(layer.deadline_metrics().failed_fast, 2);
    // Enough left: sent.
    let r = deadline::scope(Deadline::after(Duration::from_secs(1)), client.oneshot(request(&[])))
        .await;
    assert!(r.is_ok());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn client_stops_waiting_at_the_deadline() {
    let slow = service_fn(|_req: Req| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, Infallible>(http::Response::new(String::new()))
    });
    let lim = surgeguard::Limiter::fixed(4.0).unwrap();
    let layer = ClientLayer::new().deadlines(ClientDeadlines::default()).limiter(lim.clone());
    let client = layer.layer(slow);
    let t = std::time::Instant::now();
    let r =
        deadline::scope(Deadline::after(Duration::from_millis(30)), client.oneshot(request(&[])))
            .await;
    assert!(matches!(r, Err(ClientError::DeadlineExceeded)), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(layer.deadline_metrics().timed_out, 1);
    // The slot came back as an overload signal.
    assert_eq!((lim.inflight(), lim.core().metrics().drops), (0, 1));
    // Without enforcement the caller waits for the answer (here: cut by the test).
    let patient = ClientLayer::new().deadlines(ClientDeadlines::default().enforce(false)).layer(
        service_fn(|_req: Req| async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }),
    );
    let r =
        deadline::scope(Deadline::after(Duration::from_millis(30)), patient.oneshot(request(&[])))
            .await;
    assert!(r.is_ok());
}

#[tokio::test]
async fn retries_stay_within_the_deadline() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let failing = service_fn(move |_req: Req| {
        c.fetch_add(1, Ordering::Relaxed);
        async {
            Ok::<_, Infallible>(http::Response::builder().status(503).body(String::new()).unwrap())
        }
    });
    // Backoff of 40 ms a retry (no jitter), a budget that would allow every retry.
    let backoff =
        BackoffConfig { base: 40 * MS, multiplier: 1.0, cap: 40 * MS, jitter: Jitter::None };
    let budget =
        RetryBudgetConfig { ttl: 10_000 * MS, min_retries_per_sec: 1_000, percent_can_retry: 1.0 };
    let policy =
        RetryPolicy::new(budget, backoff, 10).unwrap().expected_latency(Duration::from_millis(10));
    let svc = tower::retry::RetryLayer::new(policy.clone()).layer(failing);
    let t = std::time::Instant::now();
    let res = deadline::scope(
        Deadline::after(Duration::from_millis(150)),
        svc.clone().oneshot(http::Request::new(String::new())),
    )
    .await
    .unwrap();
    assert_eq!(res.status(), 503);
    let n = calls.load(Ordering::Relaxed);
    // Attempts at 0, 40, 80 and 120 ms: a fifth would start at 160 ms, past the deadline
    // (fewer if the machine is slow). Scheduling delays aside, no backoff outlasts it.
    assert!((2..=4).contains(&n), "{n} calls within a 150 ms deadline");
    assert!(t.elapsed() < Duration::from_millis(250), "{:?}", t.elapsed());
    assert_eq!(policy.denied_by_deadline(), 1);
    assert_eq!(policy.budget().metrics().retries_allowed, n as u64 - 1, "no token spent on it");
    // Without a deadline the same policy makes all 10 retries.
    calls.store(0, Ordering::Relaxed);
    tokio::time::pause();
    svc.oneshot(http::Request::new(String::new())).await.unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 11);
}

/// What a client does with a caller's deadline `left_ms` away, for any margin and expected
/// latency: it sends at most what is left minus the margin (both headers), and refuses
/// exactly when less than the expected latency (or under 1 ms) would be left.
fn client_sends_what_is_left_or_refuses(left_us: u32, margin_us: u16, expected_us: u16) -> bool {
    let (left, margin, expected) = (
        u64::from(left_us % 3_000_000) * 1_000,
        u64::from(margin_us % 50_000) * 1_000,
        u64::from(expected_us % 50_000) * 1_000,
    );
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = ClientLayer::new().deadlines(
        ClientDeadlines::default()
            .margin(Duration::from_nanos(margin))
            .expected_latency(Duration::from_nanos(expected)),
    );
    let client = layer.layer(echo(calls.clone()));
    let t0 = surgeguard::clock::monotonic_ns();
    let d = Deadline::at_ns(t0 + left);
    let mut req = request(&[("content-type", b"application/grpc")]);
    req.extensions_mut().insert(d);
    let r = rt.block_on(client.oneshot(req));
    let t1 = surgeguard::clock::monotonic_ns();
    // What was left for the callee at the earliest (t1) and latest (t0) moment of the call.
    let least = (t0 + left).saturating_sub(t1).saturating_sub(margin);
    let most = left.saturating_sub(margin);
    match r {
        Ok(res) => {
            assert_eq!(calls.load(Ordering::Relaxed), 1);
            assert!(most >= expected.max(MS), "sent with {most} ns left, expected {expected}");
            let (ms, grpc) = res.body().split_once('|').unwrap();
            let ms: u64 = ms.parse().unwrap();
            let grpc = surgeguard::tower::parse_grpc_timeout(grpc).unwrap();
            assert!(ms * MS <= most && grpc <= most, "sent {ms} ms / {grpc} ns > {most} ns");
            assert!(ms >= 1 && grpc > 0);
        }
        Err(ClientError::Rejected(r)) => {
            assert_eq!(calls.load(Ordering::Relaxed), 0, "a refused call is not sent");
            assert!(matches!(r.reason, Reason::DeadlineUnmeetable | Reason::Expired));
            assert!(least < expected.max(MS), "refused with {least} ns left, expected {expected}");
        }
        Err(e) => panic!("{e}"),
    }
    true
}

#[test]
fn quickcheck_client_deadline_budget() {
    QuickCheck::new()
        .tests(300)
        .quickcheck(client_sends_what_is_left_or_refuses as fn(u32, u16, u16) -> bool);
}
