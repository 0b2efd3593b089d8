//! A tonic server behind `GateLayer`, over HTTP/2 on loopback, with gRPC deadlines
//! (`grpc-timeout`): a call whose deadline cannot be met is answered at once with
//! `RESOURCE_EXHAUSTED` and `grpc-retry-pushback-ms`; a call with room waits in the queue
//! and is served. The service is written by hand (no protobuf codegen) to keep the build
//! small; tonic routes it by its `NamedService` name like a generated one.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use surgeguard::Gate;
use surgeguard::tower::GateLayer;

/// `demo.Slow/Call`: answers OK (trailers-only) after 200 ms.
#[derive(Clone)]
struct Slow;

impl tonic::server::NamedService for Slow {
    const NAME: &'static str = "demo.Slow";
}

impl tower::Service<http::Request<tonic::body::Body>> for Slow {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let res = http::Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "0")
                .body(tonic::body::Body::empty())
                .unwrap();
            Ok(res)
        })
    }
}

async fn call(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    addr: std::net::SocketAddr,
    timeout: Option<&str>,
) -> (http::HeaderMap, Duration) {
    let mut b = http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/demo.Slow/Call"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        b = b.header("grpc-timeout", t);
    }
    let t = Instant::now();
    let res = client.request(b.body(Empty::new()).unwrap()).await.unwrap();
    assert_eq!(res.status(), 200);
    (res.headers().clone(), t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_server_with_deadlines_behind_the_gate() {
    let gate: Gate = Gate::fixed(1.0).unwrap();
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .layer(GateLayer::new(gate.clone()))
            .add_service(Slow)
            .serve_with_shutdown(addr, async {
                let _ = stopped.await;
            }),
    );
    let client: Client<_, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).http2_only(true).build_http();
    // Wait for the server to listen.
    let mut ready = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready);

    // Learn the service time: one call alone.
    let (h, _) = call(&client, addr, None).await;
    assert_eq!(h["grpc-status"], "0");

    // One call holds the only slot for 200 ms.
    let holder = {
        let client = client.clone();
        tokio::spawn(async move { call(&client, addr, None).await })
    };
    while gate.core().limiter().inflight() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // A 50 ms deadline cannot be met (200 ms of service): refused at once.
    let (h, took) = call(&client, addr, Some("50m")).await;
    assert_eq!(h["grpc-status"], "8", "{h:?}");
    assert!(h.contains_key("grpc-retry-pushback-ms"));
    assert!(took < Duration::from_millis(150), "{took:?}");
    // A 5 s deadline waits for the slot and is served.
    let (h, took) = call(&client, addr, Some("5S")).await;
    assert_eq!(h["grpc-status"], "0", "{h:?}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert_eq!(holder.await.unwrap().0["grpc-status"], "0");

    let _ = stop.send(());
    server.await.unwrap().unwrap();
    assert_eq!(gate.core().limiter().inflight(), 0);
    assert_eq!(gate.registry_len(), 0);
}
