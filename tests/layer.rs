//! The tower layer over real HTTP: a hyper server on 127.0.0.1 with [`floodgate::layer::LimitLayer`]
//! in front of a handler that plays several origins (chosen by the Host header), driven by
//! hyper clients over loopback TCP.
//!
//! Rate windows come from a [`ManualClock`], so no test waits for a window. Where the server
//! notices something asynchronously (a client that went away), the tests poll with short
//! sleeps up to a generous deadline: the deadline only bounds a failing run, nothing asserts a
//! duration.
#![cfg(all(feature = "tower", not(floodgate_loom)))]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::layer::{list, origin_form, parse_list, single, Bare, Item};
use floodgate::clock::ManualClock;
use floodgate::fields::client::ClientAddr;
use floodgate::fields::ratelimit::{Policies, PolicyNames};
use floodgate::layer::{
    BodyBytes, ChargeExceeded, ChargedBody, ClientKey, HostKey, KeyExtractor, LimitLayer,
    LimitService, RefusalResponse, Refused, RejectedKey, ShadowRejected, Uncharged, Unkeyed,
    UnknownLength,
};
use floodgate::{Limiter, Limits, Reason, Rejected};
use http::header::{HeaderMap, HeaderValue, HOST, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use proptest::prelude::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tower::{Layer, Service, ServiceExt};

// ---------------------------------------------------------------------------------------------
// The origins: a handler that behaves by Host header.

/// What the handler did, for the tests to check.
#[derive(Default)]
struct Origins {
    /// Calls of the handler per host: rejected requests must never reach it.
    calls: Mutex<HashMap<String, usize>>,
    /// `hang.*`: told when a request has started and when its future was dropped.
    hang_started: Option<mpsc::UnboundedSender<()>>,
    hang_dropped: Option<mpsc::UnboundedSender<()>>,
    /// `stream.*`: the sending end of each streaming body, handed to the test.
    stream_bodies: Option<mpsc::UnboundedSender<mpsc::Sender<Bytes>>>,
}

type TestBody = BoxBody<Bytes, Infallible>;

/// Tells the test, when dropped, that a hanging handler's future was dropped.
struct DropSignal(Option<mpsc::UnboundedSender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(());
        }
    }
}

/// A response body whose frames the test sends one at a time; it ends when the sender drops.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

async fn handle(
    origins: Arc<Origins>,
    req: Request<Incoming>,
) -> Result<Response<TestBody>, Infallible> {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    *origins
        .calls
        .lock()
        .unwrap()
        .entry(host.clone())
        .or_default() += 1;
    if host.starts_with("hang.") {
        let _signal = DropSignal(origins.hang_dropped.clone());
        if let Some(tx) = &origins.hang_started {
            let _ = tx.send(());
        }
        // Never answers: the client goes away first, and the server drops this future.
        std::future::pending::<()>().await;
    }
    if host.starts_with("stream.") {
        let (tx, rx) = mpsc::channel(1);
        if let Some(bodies) = &origins.stream_bodies {
            let _ = bodies.send(tx);
        }
        return Ok(Response::new(ChannelBody(rx).boxed()));
    }
    Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed()))
}

fn handler(
    origins: &Arc<Origins>,
) -> impl Service<
    Request<Incoming>,
    Response = Response<TestBody>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let origins = Arc::clone(origins);
    tower::service_fn(move |req| handle(Arc::clone(&origins), req))
}

fn calls(origins: &Origins, host: &str) -> usize {
    origins
        .calls
        .lock()
        .unwrap()
        .get(host)
        .copied()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Server and clients over loopback.

/// Serves `service` on 127.0.0.1 (an ephemeral port) until the test's runtime ends, with
/// each connection's peer address in its requests' extensions (as a server does for
/// [`ClientKey`]).
async fn serve<S, B>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let service = tower::ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .service(service.clone());
            let service = TowerToHyperService::new(service);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Serves `service` on 127.0.0.1 as [`serve`] does, but with no peer address in the
/// requests (as a server that does not put it there).
async fn serve_without_peer<S, B>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _peer)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

fn client() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn request(addr: SocketAddr, host: &str) -> Request<Empty<Bytes>> {
    Request::get(format!("http://{addr}/"))
        .header(HOST, host)
        .body(Empty::new())
        .unwrap()
}

/// Sends `req` and reads the whole response: its status and headers.
async fn fetch(
    client: &Client<HttpConnector, Empty<Bytes>>,
    req: Request<Empty<Bytes>>,
) -> (StatusCode, HeaderMap) {
    let (head, body) = client.request(req).await.unwrap().into_parts();
    body.collect().await.unwrap();
    (head.status, head.headers)
}

/// Sends one GET for `host` and reads the whole response: status and `Retry-After`.
async fn get(
    client: &Client<HttpConnector, Empty<Bytes>>,
    addr: SocketAddr,
    host: &str,
) -> (StatusCode, Option<u64>) {
    let (status, headers) = fetch(client, request(addr, host)).await;
    (status, retry_after(&headers))
}

/// `Retry-After`'s seconds, if there is one.
fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(RETRY_AFTER)
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap())
}

/// A connection of its own, so the test can drop it mid-request: the request's sender, and
/// the task driving the connection (aborting it closes the socket).
async fn connection(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, driver)
}

/// Waits until `condition` holds, failing the test if it does not within a generous deadline.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `key` has nothing in flight: all `limit` slots can be taken at once.
fn all_slots_free(limiter: &Limiter<String>, key: &str, limit: usize) -> bool {
    let permits: Result<Vec<_>, Rejected> = (0..limit).map(|_| limiter.try_acquire(key)).collect();
    permits.is_ok()
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn flooded_origin_gets_503_with_retry_after_and_healthy_origins_never_do() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(100)
        .max_rate(5, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;
    let client = client();

    let mut flooded = Vec::new();
    for i in 0..12 {
        flooded.push(get(&client, addr, "flooded.example").await);
        for j in 0..3 {
            let host = format!("healthy-{i}-{j}.example");
            assert_eq!(
                get(&client, addr, &host).await,
                (StatusCode::OK, None),
                "{host}"
            );
        }
    }
    for (i, &(status, retry_after)) in flooded.iter().enumerate() {
        if i < 5 {
            assert_eq!((status, retry_after), (StatusCode::OK, None), "request {i}");
        } else {
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "request {i}");
            assert!(
                retry_after.is_some_and(|s| s >= 1),
                "request {i}: {retry_after:?}"
            );
        }
    }
    assert_eq!(
        calls(&origins, "flooded.example"),
        5,
        "rejected requests reached the origin"
    );
    let hitters = limiter.heavy_hitters();
    assert_eq!(
        hitters.first().map(|h| h.key.as_str()),
        Some("flooded.example")
    );
    // The first rejection is decided on the exact counts; the six after it come from the
    // over-limit cache until the retry time, uncounted.
    assert_eq!(hitters[0].rejected, 1);

    // A client that waits as long as the last Retry-After said gets through.
    let wait = flooded.last().unwrap().1.unwrap();
    clock.advance(Duration::from_secs(wait));
    assert_eq!(
        get(&client, addr, "flooded.example").await,
        (StatusCode::OK, None)
    );
}

#[tokio::test]
async fn client_that_disconnects_mid_request_gives_its_permit_back() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(2).build().unwrap();
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel();
    let origins = Arc::new(Origins {
        hang_started: Some(started_tx),
        hang_dropped: Some(dropped_tx),
        ..Origins::default()
    });
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;

    // Two requests hang in the handler, each on its own connection.
    let mut hanging = Vec::new();
    for _ in 0..2 {
        let (mut sender, driver) = connection(addr).await;
        let req = origin_form("hang.example");
        let pending = tokio::spawn(async move { sender.send_request(req).await });
        started.recv().await.unwrap();
        hanging.push((pending, driver));
    }
    // The key is at its limit: a third request is refused, without Retry-After (in flight).
    assert_eq!(
        get(&client(), addr, "hang.example").await,
        (StatusCode::SERVICE_UNAVAILABLE, None)
    );
    let rejected = limiter.try_acquire("hang.example").unwrap_err();
    assert_eq!(rejected.reason, Reason::Inflight);

    // Both clients go away mid-request: the server drops the handlers' futures, and with
    // them the permits.
    for (pending, driver) in hanging {
        pending.abort();
        driver.abort();
    }
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(20), dropped.recv())
            .await
            .expect("the server never dropped the abandoned request")
            .unwrap();
    }
    eventually(
        "both in-flight slots of hang.example are free again",
        || all_slots_free(&limiter, "hang.example", 2),
    )
    .await;
    assert_eq!(
        calls(&origins, "hang.example"),
        2,
        "the refused request reached the origin"
    );
}

#[tokio::test]
async fn permit_is_held_until_the_response_body_is_fully_sent() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let (bodies_tx, mut bodies) = mpsc::unbounded_channel();
    let origins = Arc::new(Origins {
        stream_bodies: Some(bodies_tx),
        ..Origins::default()
    });
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;

    let (mut sender, _driver) = connection(addr).await;
    let response = sender
        .send_request(origin_form("stream.example"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body_tx = bodies.recv().await.unwrap();
    let mut body = response.into_body();

    // The handler has returned and the head is on the client, but the body is unfinished:
    // the request still counts as in flight.
    assert_eq!(
        limiter.try_acquire("stream.example").unwrap_err().reason,
        Reason::Inflight
    );
    assert_eq!(
        get(&client(), addr, "stream.example").await,
        (StatusCode::SERVICE_UNAVAILABLE, None)
    );
    body_tx.send(Bytes::from_static(b"first")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first");
    assert!(
        limiter.try_acquire("stream.example").is_err(),
        "released mid-body"
    );

    // The origin finishes the body: the permit is given back.
    drop(body_tx);
    assert!(body.frame().await.is_none(), "the body should end");
    eventually("stream.example's slot is free after its body ended", || {
        all_slots_free(&limiter, "stream.example", 1)
    })
    .await;
    assert_eq!(calls(&origins, "stream.example"), 1);
}

#[tokio::test]
async fn client_that_disconnects_mid_body_gives_its_permit_back() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let (bodies_tx, mut bodies) = mpsc::unbounded_channel();
    let origins = Arc::new(Origins {
        stream_bodies: Some(bodies_tx),
        ..Origins::default()
    });
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;

    let (mut sender, driver) = connection(addr).await;
    let response = sender
        .send_request(origin_form("stream.example"))
        .await
        .unwrap();
    let body_tx = bodies.recv().await.unwrap();
    let mut body = response.into_body();
    body_tx.send(Bytes::from_static(b"first")).await.unwrap();
    body.frame().await.unwrap().unwrap();
    assert!(limiter.try_acquire("stream.example").is_err());

    // The client goes away with the body unfinished; the origin would go on sending.
    drop(body);
    drop(sender);
    driver.abort();
    eventually(
        "stream.example's slot is free after its client left",
        || all_slots_free(&limiter, "stream.example", 1),
    )
    .await;
    drop(body_tx);
}

#[tokio::test]
async fn clones_of_one_layer_share_one_limit() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(4, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter);
    let origins = Arc::new(Origins::default());
    // Two servers, each with a service from its own clone of the layer.
    let a = serve(layer.clone().layer(handler(&origins))).await;
    let b = serve(layer.clone().layer(handler(&origins))).await;
    let client = client();

    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get(&client, a, "shared.example").await.0);
        statuses.push(get(&client, b, "shared.example").await.0);
    }
    let ok = StatusCode::OK;
    let no = StatusCode::SERVICE_UNAVAILABLE;
    // Separate limits would admit all six (three per server).
    assert_eq!(statuses, [ok, ok, ok, ok, no, no]);
    assert_eq!(calls(&origins, "shared.example"), 4);
    assert_eq!(layer.limiter().heavy_hitters()[0].key, "shared.example");
}

#[tokio::test]
async fn a_key_closure_limits_per_returned_key() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    // Key by tenant header, whatever the host.
    let layer = LimitLayer::new(limiter).key_fn(|req: &Request<Incoming>| {
        let tenant = req.headers().get("x-tenant").and_then(|v| v.to_str().ok());
        tenant.unwrap_or("anonymous").to_owned()
    });
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |tenant: &str, host: &str| {
        let mut req = request(addr, host);
        req.headers_mut()
            .insert("x-tenant", tenant.parse().unwrap());
        client.request(req)
    };

    let mut statuses = Vec::new();
    for (tenant, host) in [
        ("acme", "a.example"),
        ("acme", "b.example"),
        ("acme", "c.example"),
    ] {
        statuses.push(send(tenant, host).await.unwrap().status());
    }
    let other = send("globex", "a.example").await.unwrap().status();
    let ok = StatusCode::OK;
    assert_eq!(statuses, [ok, ok, StatusCode::SERVICE_UNAVAILABLE]);
    assert_eq!(
        other, ok,
        "another tenant on the same host has its own limit"
    );
}

// The RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11, Retry-After's jitter, and
// per-request limits. The fields are read with tests/common/layer.rs's strict Structured
// Field reader, so a malformed value fails even where its numbers would be right.

/// The `RateLimit-Policy` items the layer must send for these limits: `"rate"` with q and w,
/// then `"inflight"` with q and the concurrency unit; nothing else.
fn policies(rate: Option<(i64, i64)>, inflight: Option<i64>) -> Vec<Item> {
    let int = |k: &str, n: i64| (k.to_owned(), Bare::Integer(n));
    let mut items = Vec::new();
    if let Some((q, w)) = rate {
        items.push(Item {
            value: Bare::String("rate".into()),
            params: vec![int("q", q), int("w", w)],
        });
    }
    if let Some(q) = inflight {
        let unit = ("qu".to_owned(), Bare::String("concurrent-requests".into()));
        items.push(Item {
            value: Bare::String("inflight".into()),
            params: vec![int("q", q), unit],
        });
    }
    items
}

/// Neither field is there.
fn no_fields(headers: &HeaderMap) -> bool {
    headers.get("ratelimit-policy").is_none() && headers.get("ratelimit").is_none()
}

#[test]
fn the_reader_takes_the_drafts_examples_and_refuses_malformed_lists() {
    let items = parse_list(r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#);
    assert_eq!(items.len(), 2);
    assert_eq!((items[1].name(), items[1].int("q")), ("perhr", Some(1000)));
    let item = &parse_list(r#""peruser";q=65535;qu="content-bytes";w=10"#)[0];
    assert_eq!(item.string("qu"), Some("content-bytes"));
    assert_eq!(item.keys(), ["q", "qu", "w"]);
    for bad in [
        "",
        r#""a";q=1,"#,
        r#""a";Q=1"#,
        r#""a";q=1.5"#,
        r#""a";q=1234567890123456"#,
        r#""a""b""#,
        r#"("a" "b")"#,
        r#""a;q=1"#,
        r#""a" ;q=1"#,
    ] {
        let parsed = std::panic::catch_unwind(|| parse_list(bad));
        assert!(parsed.is_err(), "{bad:?} parsed as {parsed:?}");
    }
}

#[tokio::test]
async fn a_rate_refusal_carries_both_fields_and_t_is_retry_after() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(100)
        .max_rate(5, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let addr = serve(LimitLayer::new(limiter).layer(handler(&origins))).await;
    let client = client();

    for i in 0..5 {
        let (status, headers) = fetch(&client, request(addr, "busy.example")).await;
        assert_eq!(status, StatusCode::OK, "request {i}");
        assert!(
            no_fields(&headers),
            "admitted, and not switched on: {headers:?}"
        );
    }
    let (status, headers) = fetch(&client, request(addr, "busy.example")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        list(&headers, "ratelimit-policy"),
        policies(Some((5, 1)), Some(100))
    );
    let limit = single(&headers, "ratelimit");
    assert_eq!(limit.name(), "rate");
    assert_eq!(limit.keys(), ["r", "t"]);
    assert_eq!(limit.int("r"), Some(0));
    let t = limit.int("t").unwrap();
    assert!(t >= 1, "t={t}");
    assert_eq!(
        retry_after(&headers),
        Some(t as u64),
        "without jitter, Retry-After is t"
    );
    assert_eq!(calls(&origins, "busy.example"), 5);

    // t is not early: a client that waits t seconds gets through.
    clock.advance(Duration::from_secs(t as u64));
    assert_eq!(get(&client, addr, "busy.example").await.0, StatusCode::OK);
}

#[tokio::test]
async fn an_inflight_refusal_names_the_inflight_policy_without_t_or_retry_after() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let (bodies_tx, mut bodies) = mpsc::unbounded_channel();
    let origins = Arc::new(Origins {
        stream_bodies: Some(bodies_tx),
        ..Origins::default()
    });
    let addr = serve(LimitLayer::new(limiter).layer(handler(&origins))).await;

    // One request holds the only slot: its body is still streaming.
    let (mut sender, _driver) = connection(addr).await;
    let held = sender
        .send_request(origin_form("stream.example"))
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let body_tx = bodies.recv().await.unwrap();

    let (status, headers) = fetch(&client(), request(addr, "stream.example")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        retry_after(&headers),
        None,
        "no one knows when a slot frees"
    );
    assert_eq!(list(&headers, "ratelimit-policy"), policies(None, Some(1)));
    let limit = single(&headers, "ratelimit");
    assert_eq!(limit.name(), "inflight");
    assert_eq!(limit.keys(), ["r"]);
    assert_eq!(limit.int("r"), Some(0));
    drop(body_tx);
}

#[tokio::test]
async fn retry_after_with_jitter_is_never_earlier_than_t_and_varies() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(1, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter)
        .retry_after_jitter(Duration::from_secs(10))
        .unwrap();
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();

    assert_eq!(get(&client, addr, "busy.example").await.0, StatusCode::OK);
    let mut seen = BTreeSet::new();
    let mut shortest_t = u64::MAX;
    for _ in 0..40 {
        let (status, headers) = fetch(&client, request(addr, "busy.example")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let t = single(&headers, "ratelimit").int("t").unwrap() as u64;
        let secs = retry_after(&headers).unwrap();
        assert!(
            (t..=t + 10).contains(&secs),
            "Retry-After {secs} against t={t}"
        );
        seen.insert(secs);
        shortest_t = shortest_t.min(t);
    }
    // 40 draws of 11 values all alike: a chance of 11 in 11^40.
    assert!(seen.len() > 1, "the jitter never varied: {seen:?}");
    // t itself carries no jitter: waiting the shortest t is enough.
    clock.advance(Duration::from_secs(shortest_t));
    assert_eq!(get(&client, addr, "busy.example").await.0, StatusCode::OK);
}

#[tokio::test]
async fn admitted_responses_carry_the_fields_only_when_switched_on() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(100)
        .max_rate(5, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let quiet = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;
    let told = LimitLayer::new(limiter).ratelimit_headers_on_admitted(true);
    let told = serve(told.layer(handler(&origins))).await;
    let client = client();

    for _ in 0..3 {
        let (status, headers) = fetch(&client, request(quiet, "quiet.example")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(no_fields(&headers), "{headers:?}");
    }
    // Each admission leaves one request fewer of the 5; the rate (1 of 5 left, at best 4 of
    // 5) is always closer to its limit than the in-flight count (99 of 100 left).
    for left in (0..5).rev() {
        let (status, headers) = fetch(&client, request(told, "told.example")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            list(&headers, "ratelimit-policy"),
            policies(Some((5, 1)), Some(100))
        );
        let limit = single(&headers, "ratelimit");
        assert_eq!(limit.name(), "rate");
        assert_eq!(limit.keys(), ["r", "t"]);
        assert_eq!(limit.int("r"), Some(left));
        assert_eq!(limit.int("t"), Some(2), "two intervals of 1 s");
    }
    let (status, headers) = fetch(&client, request(told, "told.example")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(single(&headers, "ratelimit").int("r"), Some(0));
}

#[tokio::test]
async fn limits_fn_admits_each_customer_up_to_its_own_limit() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(50)
        .max_rate(100, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let customer = |req: &Request<Incoming>| {
        let name = req
            .headers()
            .get("x-customer")
            .and_then(|v| v.to_str().ok());
        name.unwrap_or("anonymous").to_owned()
    };
    let layer =
        LimitLayer::new(limiter)
            .key_fn(customer)
            .limits_fn(
                move |req: &Request<Incoming>| match customer(req).as_str() {
                    "gold" => Limits::new().max_rate(4).no_inflight(),
                    _ => Limits::new().max_rate(2).no_inflight(),
                },
            );
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |who: &str| {
        let mut req = request(addr, &format!("{who}.example"));
        req.headers_mut().insert("x-customer", who.parse().unwrap());
        fetch(&client, req)
    };

    for round in 0..2 {
        let mut admitted = HashMap::new();
        for _ in 0..6 {
            for (who, limit) in [("gold", 4), ("basic", 2)] {
                let (status, headers) = send(who).await;
                if status == StatusCode::OK {
                    *admitted.entry(who).or_insert(0) += 1;
                    continue;
                }
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                // The customer's own limit, and only the kinds it limits: its plan turns the
                // limiter's in-flight limit off (left out, it would be the default's).
                assert_eq!(
                    list(&headers, "ratelimit-policy"),
                    policies(Some((limit, 1)), None),
                    "{who}"
                );
                assert_eq!(single(&headers, "ratelimit").name(), "rate");
            }
        }
        assert_eq!(admitted["gold"], 4, "round {round}");
        assert_eq!(admitted["basic"], 2, "round {round}");
        // Two intervals later the windows have forgotten both.
        clock.advance(Duration::from_secs(2));
    }
    assert_eq!(calls(&origins, "gold.example"), 8);
    assert_eq!(calls(&origins, "basic.example"), 4);
}

#[tokio::test]
async fn limits_of_a_kind_the_limiter_does_not_count_answer_500() {
    record_logs();
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    // This limiter counts no requests in flight: an in-flight limit is a configuration error.
    let layer = LimitLayer::new(limiter)
        .ratelimit_headers_on_admitted(true)
        .limits_fn(|_: &Request<Incoming>| Limits::new().max_inflight(5));
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;

    let (status, headers) = fetch(&client(), request(addr, "any.example")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry_after(&headers), None);
    assert!(no_fields(&headers), "{headers:?}");
    assert_eq!(calls(&origins, "any.example"), 0, "it reached the origin");
}

#[tokio::test]
async fn the_operators_refusal_is_sent_over_the_wire_with_the_key_for_outer_layers() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(100)
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    // An outer layer that reads what the limit layer left in the refusal's extensions.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = LimitLayer::new(limiter)
        .refusal(
            RefusalResponse::too_many_requests()
                .body(HeaderValue::from_static("text/plain"), "over quota\n"),
        )
        .layer(handler(&origins));
    let outer = tower::service_fn({
        let seen = Arc::clone(&seen);
        move |req: Request<Incoming>| {
            let (seen, inner) = (Arc::clone(&seen), inner.clone());
            async move {
                let response = inner.oneshot(req).await?;
                if let (Some(key), Some(rejected)) = (
                    response.extensions().get::<RejectedKey>(),
                    response.extensions().get::<Rejected>(),
                ) {
                    seen.lock().unwrap().push((key.0.clone(), rejected.reason));
                }
                Ok::<_, Infallible>(response)
            }
        }
    });
    let addr = serve(outer).await;
    let client = client();
    for _ in 0..2 {
        assert_eq!(get(&client, addr, "quota.example").await.0, StatusCode::OK);
    }
    let response = client
        .request(request(addr, "quota.example"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/plain");
    assert!(retry_after(&headers).is_some(), "{headers:?}");
    assert_eq!(single(&headers, "ratelimit").name(), "rate");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"over quota\n");
    assert_eq!(
        *seen.lock().unwrap(),
        [("quota.example".to_owned(), Reason::Rate)],
        "the outer layer saw who was refused and why"
    );
    assert_eq!(calls(&origins, "quota.example"), 2);
}

#[tokio::test]
async fn a_refusal_without_the_ratelimit_fields_still_says_when_to_come_back() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(1, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter)
        .refusal(RefusalResponse::service_unavailable().ratelimit_fields(false));
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    assert_eq!(get(&client, addr, "quiet.example").await.0, StatusCode::OK);
    let (status, headers) = fetch(&client, request(addr, "quiet.example")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        no_fields(&headers),
        "the limits are not disclosed: {headers:?}"
    );
    assert!(retry_after(&headers).is_some(), "{headers:?}");
}

#[tokio::test]
async fn limits_the_limiter_cannot_judge_stay_a_bare_500_whatever_the_refusal_and_are_logged_once()
{
    record_logs();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter)
        .refusal(
            RefusalResponse::too_many_requests()
                .body(HeaderValue::from_static("text/plain"), "over quota\n"),
        )
        .limits_fn(|_: &Request<Incoming>| Limits::new().max_inflight(5));
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    for _ in 0..3 {
        let response = client.request(request(addr, "any.example")).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(no_fields(response.headers()), "{:?}", response.headers());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert!(
            body.is_empty(),
            "the operator's refusal body is for refusals over a limit"
        );
    }
    let told = LOGGED.lock().unwrap();
    let errors: Vec<_> = told
        .iter()
        .filter(|m| m.contains("answering 500"))
        .collect();
    assert_eq!(errors.len(), 1, "told once, not per request: {told:?}");
    assert!(
        errors[0].contains("counts no requests in flight"),
        "says what is wrong: {}",
        errors[0]
    );
}

/// A body function that writes what it was told of the refusal, one `name=value` a line.
fn told(refused: &Refused<'_>) -> Option<(HeaderValue, Bytes)> {
    let retry = refused
        .retry_after
        .map_or("none".to_owned(), |s| s.to_string());
    let text = format!(
        "reason={:?}\npolicy={:?}\nkey={}\nlimit={}\nrate={:?}\nstatus={}\nretry_after={retry}\n",
        refused.rejected.reason,
        refused.policy,
        refused.key,
        refused.rejected.limit,
        refused.limits.rate_limit(),
        refused.status.as_u16(),
    );
    Some((HeaderValue::from_static("text/plain"), text.into()))
}

/// The `name=value` lines of a body [`told`] made.
fn lines_of(body: &[u8]) -> HashMap<String, String> {
    std::str::from_utf8(body)
        .unwrap()
        .lines()
        .map(|line| {
            let (name, value) = line.split_once('=').unwrap();
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

/// Over loopback, a refusal body made from each refusal: it says the reason, the key, the
/// limit and the very `Retry-After` the response carries (the same draw of the jitter), and a
/// cost over the limit gets the function's body too, on its 413.
#[tokio::test]
async fn a_refusal_body_made_from_the_refusal_says_its_reason_limit_key_and_the_wait_sent() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let units = |req: &Request<Incoming>| {
        let value = req.headers().get("x-units").and_then(|v| v.to_str().ok());
        value.and_then(|v| v.parse().ok()).unwrap_or(1)
    };
    let layer = LimitLayer::new(limiter)
        .cost_fn(units)
        .retry_after_jitter(Duration::from_secs(30))
        .unwrap()
        .refusal(RefusalResponse::too_many_requests().body_fn(told));
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |units: &str| {
        let mut req = request(addr, "busy.example");
        req.headers_mut().insert("x-units", units.parse().unwrap());
        client.request(req)
    };
    assert_eq!(send("2").await.unwrap().status(), StatusCode::OK);
    let mut draws = BTreeSet::new();
    for _ in 0..20 {
        let response = send("1").await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let sent = retry_after(response.headers()).unwrap();
        assert_eq!(response.headers()["content-type"], "text/plain");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let told = lines_of(&body);
        assert_eq!(told["reason"], "Rate");
        assert_eq!(told["policy"], "Some(\"rate\")", "as RateLimit names it");
        assert_eq!(told["key"], "busy.example");
        assert_eq!(told["limit"], "2");
        assert_eq!(told["rate"], "Some(2)");
        assert_eq!(told["status"], "429");
        assert_eq!(
            told["retry_after"],
            sent.to_string(),
            "the wait the response says"
        );
        draws.insert(sent);
    }
    assert!(draws.len() > 1, "the jitter never varied: {draws:?}");

    let response = send("3").await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(retry_after(response.headers()), None);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let told = lines_of(&body);
    assert_eq!(told["reason"], "CostOverLimit");
    assert_eq!(told["policy"], "None");
    assert_eq!(told["status"], "413");
    assert_eq!(told["retry_after"], "none");
    assert_eq!(calls(&origins, "busy.example"), 1);
}

/// The body function runs when the refusal is sent, not when the request is decided: a
/// refusal whose future is dropped unpolled costs no formatting.
#[tokio::test]
async fn a_refusal_body_is_made_when_the_response_is_polled_and_never_before() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&made);
    let refusal = RefusalResponse::default().body_fn(move |refused| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        told(refused)
    });
    let origin = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let mut service = LimitService::new(origin, limiter.clone()).refusal(refusal);
    let _busy = limiter.try_acquire_owned("api.example").unwrap();
    let request = || {
        Request::builder()
            .uri("http://api.example/")
            .body(())
            .unwrap()
    };
    let dropped = service.ready().await.unwrap().call(request());
    drop(dropped);
    let refused = service.ready().await.unwrap().call(request());
    let made_now = || made.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(made_now(), 0, "decided, not yet polled");
    let refused = refused.await.unwrap();
    assert_eq!(made_now(), 1);
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(lines_of(&body)["reason"], "Inflight");
    assert_eq!(lines_of(&body)["retry_after"], "none");
}

/// A body function that panics does not take the request down: the refusal is answered as
/// without a body of the operator's (empty for a 503; the retrying-will-not-help text for a
/// 413), and the layer says so once.
#[tokio::test]
async fn a_refusal_body_function_that_panics_leaves_the_default_answer_and_is_logged_once() {
    record_logs();
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(1, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origin = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let refusal = RefusalResponse::default()
        .body_fn(|refused: &Refused<'_>| panic!("a bug in the body of {}", refused.key));
    let service = LimitService::new(origin, limiter)
        .cost_fn(|req: &Request<()>| if req.uri().path() == "/big" { 2 } else { 1 })
        .refusal(refusal);
    let request = |path: &str| {
        let uri = format!("http://api.example{path}");
        Request::builder().uri(uri).body(()).unwrap()
    };
    assert_eq!(
        service
            .clone()
            .oneshot(request("/"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    for _ in 0..3 {
        let refused = service.clone().oneshot(request("/")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(retry_after(refused.headers()).is_some());
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        assert!(body.is_empty(), "{body:?}");
    }
    let refused = service.clone().oneshot(request("/big")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert!(std::str::from_utf8(&body)
        .unwrap()
        .contains("will not help"));
    let logged = LOGGED.lock().unwrap();
    let panics = logged
        .iter()
        .filter(|m| m.contains("body function panicked"));
    assert_eq!(panics.count(), 1, "told once: {logged:?}");
}

/// Every record logged in this test binary (the layer logs a misconfiguration once).
static LOGGED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LOGGED.lock().unwrap().push(record.args().to_string());
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder;

/// Sends this binary's log records to [`LOGGED`]; before any request that could log, by every
/// test that can make the layer log (the layer tells once per process, whichever test is first).
fn record_logs() {
    // Err: installed already, by another test of this binary.
    if log::set_logger(&RECORDER).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

// The default key, HostKey: one key per host however it is spelled, never longer than
// HostKey::MAX_LEN, and no panic on any input.

/// HostKey's key of an origin-form request with this `Host` header (raw bytes).
// ---------------------------------------------------------------------------------------------
// Waiting instead of refusing (`LimitLayer::wait`).

#[tokio::test]
async fn a_waiting_layer_serves_a_request_once_a_permit_comes_back() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(1)
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter.clone()).wait(Duration::from_secs(10));
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();

    let busy = limiter.try_acquire_owned("busy.example").unwrap();
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { get(&client, addr, "busy.example").await }
    });
    eventually("the request waits", || limiter.stats().waiting == 1).await;
    assert_eq!(
        calls(&origins, "busy.example"),
        0,
        "not sent while it waits"
    );
    drop(busy);
    let (status, retry) = waiting.await.unwrap();
    assert_eq!((status, retry), (StatusCode::OK, None));
    assert_eq!(calls(&origins, "busy.example"), 1);
    assert!(all_slots_free(&limiter, "busy.example", 1));
}

#[tokio::test]
async fn a_waiting_layer_refuses_with_the_usual_503_once_the_wait_is_over() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(1)
        .max_rate(100, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter.clone()).wait(Duration::from_millis(200));
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();

    let _busy = limiter.try_acquire_owned("busy.example").unwrap();
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { fetch(&client, request(addr, "busy.example")).await }
    });
    eventually("the request waits", || limiter.stats().waiting == 1).await;
    clock.advance(Duration::from_millis(190));
    assert_eq!(limiter.stats().waiting, 1, "gave up before its deadline");
    clock.advance(Duration::from_millis(10));
    let (status, headers) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let limit = single(&headers, "ratelimit");
    assert_eq!((limit.name(), limit.int("r")), ("inflight", Some(0)));
    assert_eq!(calls(&origins, "busy.example"), 0);
    assert_eq!(limiter.stats().waiting, 0);
}

#[tokio::test]
async fn a_client_that_leaves_while_its_request_waits_leaves_nothing_behind() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(1)
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter.clone()).wait(Duration::from_secs(3600));
    let addr = serve(layer.layer(handler(&origins))).await;

    let busy = limiter.try_acquire_owned("busy.example").unwrap();
    let (mut sender, driver) = connection(addr).await;
    let pending = tokio::spawn(sender.send_request(origin_form("busy.example")));
    eventually("the request waits", || limiter.stats().waiting == 1).await;
    pending.abort();
    driver.abort(); // the client goes away: the server drops the waiting request
    eventually("the waiter is gone", || limiter.stats().waiting == 0).await;
    drop(busy);
    assert!(all_slots_free(&limiter, "busy.example", 1));
    assert_eq!(calls(&origins, "busy.example"), 0);
}

fn host_key(host: &[u8]) -> String {
    let req = Request::get("/")
        .header(HOST, HeaderValue::from_bytes(host).unwrap())
        .body(())
        .unwrap();
    HostKey.key(&req).unwrap().into_owned()
}

/// HostKey's key of a request with this target (absolute form: its authority counts).
fn target_key(uri: &str) -> String {
    let req = Request::get(uri).body(()).unwrap();
    HostKey.key(&req).unwrap().into_owned()
}

#[test]
fn a_10_kb_host_gets_a_key_within_the_bound() {
    let host = format!("{}.example", "x".repeat(10_240));
    let key = host_key(host.as_bytes());
    assert!(key.len() <= HostKey::MAX_LEN, "{} bytes", key.len());
    assert_eq!(key, host_key(host.as_bytes()), "one host, one key");
    // The same through the request target's authority.
    let key = target_key(&format!("http://{host}/"));
    assert!(key.len() <= HostKey::MAX_LEN, "{} bytes", key.len());
    // A real DNS name, at 253 bytes the longest, is its own key.
    let longest = format!("{}.example", "a".repeat(253 - ".example".len()));
    assert_eq!(host_key(longest.as_bytes()), longest);
}

#[test]
fn long_hosts_that_differ_only_at_the_end_get_different_keys() {
    let padding = "p".repeat(10_240);
    let a = host_key(format!("victim.example.{padding}a").as_bytes());
    let b = host_key(format!("victim.example.{padding}b").as_bytes());
    assert_ne!(a, b);
    // Nor does a long host share a short host's key: its key is longer than any.
    let prefix = &a[..253];
    assert_ne!(a, host_key(prefix.as_bytes()));
    assert!(a.len() > 253 && host_key(prefix.as_bytes()).len() <= 253);
}

#[test]
fn spellings_of_one_name_share_one_key() {
    for host in [
        "a.example",
        "a.example.",
        "A.Example..:80",
        "a.example...",
        "a.example:",
        "a.example:0080",
        "user@a.example",
        "user:pw@A.EXAMPLE.:8443",
        " a.example\t",
        "%61.ex%41mple",
        "a.example%2E",
        "a.example.%2e.",
    ] {
        assert_eq!(host_key(host.as_bytes()), "a.example", "Host: {host:?}");
    }
    for uri in [
        "http://a.example/",
        "http://A.Example..:80/",
        "http://user@a.example.:/x",
        "https://a.example...:8443/",
    ] {
        assert_eq!(target_key(uri), "a.example", "{uri}");
    }
}

#[test]
fn spellings_of_one_ipv6_address_share_one_key() {
    for host in [
        "[::1]:8080",
        "[::1]",
        "[0:0::1]",
        "[0:0:0:0:0:0:0:1]:80",
        "[::0001]:",
        "::1",
        "0:0:0:0:0:0:0:1",
    ] {
        assert_eq!(host_key(host.as_bytes()), "[::1]", "Host: {host:?}");
    }
    assert_ne!(host_key(b"::1"), ":", "an unbracketed literal has no port");
    // The last group of an unbracketed literal is part of the address, not a port.
    assert_eq!(host_key(b"2001:db8::8080"), "[2001:db8::8080]");
    assert_ne!(host_key(b"2001:db8::8080"), host_key(b"2001:db8::"));
    for uri in [
        "http://[::1]:8080/",
        "http://[0:0::1]/",
        "http://[0:0:0:0:0:0:0:1]:80/",
    ] {
        assert_eq!(target_key(uri), "[::1]", "{uri}");
    }
    assert_eq!(host_key(b"[2001:DB8:0:0::A]"), "[2001:db8::a]");
}

#[test]
fn no_host_input_panics() {
    let huge = vec![b'a'; 1 << 20];
    let huge_colons = vec![b':'; 100_000];
    let mut huge_ipv6 = b"[".to_vec();
    huge_ipv6.extend(b"0:".repeat(50_000));
    huge_ipv6.push(b']');
    for host in [
        &b""[..],
        b".",
        b"...",
        b"..:80",
        b"\xff\xfe",
        b"a.example\x80",
        b"%",
        b"%2",
        b"%%2e",
        b"[",
        b"]",
        b"[]",
        b"[]:",
        b":",
        b"@",
        b"@@:",
        b"\t",
        &huge,
        &huge_colons,
        &huge_ipv6,
    ] {
        let key = host_key(host);
        assert!(key.len() <= HostKey::MAX_LEN, "{} bytes", key.len());
    }
    assert_eq!(host_key(b"..."), HostKey::FALLBACK);
    assert_eq!(host_key(b"\xff\xfe"), HostKey::FALLBACK);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any respelling of a name (case, escapes of unreserved characters, trailing dots, port,
    /// user info, surrounding spaces) has the name's key, which is within the bound.
    #[test]
    fn respellings_of_a_name_share_its_key(
        name in "[a-z0-9_~-]([a-z0-9._~-]{0,400}[a-z0-9_~-])?",
        spelling in prop::collection::vec(0u8..4, 402),
        dots in prop::collection::vec(prop::sample::select(vec![".", "%2e", "%2E"]), 0..4),
        port in prop::sample::select(vec!["", ":", ":80", ":0080", ":65535"]),
        user in prop::sample::select(vec!["", "user@", "u:p@"]),
        space in prop::sample::select(vec!["", " ", "\t", " \t"]),
    ) {
        let mut host = String::from(space);
        host.push_str(user);
        for (c, how) in name.chars().zip(spelling) {
            match how {
                0 => host.push(c),
                1 => host.push(c.to_ascii_uppercase()),
                2 => host.push_str(&format!("%{:02x}", c as u32)),
                _ => host.push_str(&format!("%{:02X}", c as u32)),
            }
        }
        host.extend(dots);
        host.push_str(port);
        host.push_str(space);
        let key = host_key(host.as_bytes());
        prop_assert_eq!(&key, &host_key(name.as_bytes()), "Host: {:?}", host);
        prop_assert!(key.len() <= HostKey::MAX_LEN);
        if name.len() <= 253 {
            prop_assert_eq!(&key, &name);
        }
    }

    /// Any spelling of an IPv6 address, bracketed or not, with or without port, has the key
    /// `[` + its RFC 5952 form + `]`.
    #[test]
    fn spellings_of_an_ipv6_address_share_its_key(
        groups in any::<[u16; 8]>(),
        expanded in any::<bool>(),
        upper in any::<bool>(),
        bracket in prop::sample::select(vec!["", "[]", "[]:", "[]:8080"]),
    ) {
        let addr = std::net::Ipv6Addr::from(groups);
        let mut literal = if expanded {
            groups.map(|g| format!("{g:04x}")).join(":")
        } else {
            addr.to_string()
        };
        if upper {
            literal.make_ascii_uppercase();
        }
        let host = match bracket.split_once("[]") {
            Some((_, port)) => format!("[{literal}]{port}"),
            None => literal,
        };
        prop_assert_eq!(host_key(host.as_bytes()), format!("[{addr}]"), "Host: {:?}", host);
    }

    /// Whatever a client sends as its Host header, the key is within the bound.
    #[test]
    fn any_host_header_gets_a_key_within_the_bound(
        host in prop_oneof![
            "[\\[\\]:@.%a-fA-F0-9 \t]{0,1000}",
            "[a-zA-Z0-9.%-]{200,3000}(:[0-9]{0,5})?",
            prop::collection::vec(any::<u8>(), 0..1000).prop_map(|b| {
                String::from_utf8_lossy(&b).into_owned()
            }),
        ],
    ) {
        if let Ok(value) = HeaderValue::from_bytes(host.as_bytes()) {
            let req = Request::get("/").header(HOST, value).body(()).unwrap();
            prop_assert!(HostKey.key(&req).unwrap().len() <= HostKey::MAX_LEN);
        }
        if let Ok(req) = Request::get(format!("http://{host}/")).body(()) {
            prop_assert!(HostKey.key(&req).unwrap().len() <= HostKey::MAX_LEN);
        }
    }
}

#[tokio::test]
async fn a_flood_that_respells_its_host_is_still_limited() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(3, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;
    let client = client();

    let names = [
        "flood.example",
        "FLOOD.Example",
        "flood.example.",
        "flood.example..",
        "Flood.Example..:80",
        "flood.example:",
        "user@flood.example:8080",
        "%66lood.example",
        "flood.example%2E",
    ];
    let addresses = [
        "[::1]:8080",
        "[::1]",
        "[0:0::1]",
        "::1",
        "[0:0:0:0:0:0:0:1]:80",
    ];
    let mut name_statuses = Vec::new();
    for host in names {
        name_statuses.push(get(&client, addr, host).await.0);
    }
    let mut address_statuses = Vec::new();
    for host in addresses {
        address_statuses.push(get(&client, addr, host).await.0);
    }
    let ok = StatusCode::OK;
    let no = StatusCode::SERVICE_UNAVAILABLE;
    // Each spelling with a key of its own would have admitted them all.
    assert_eq!(name_statuses, [ok, ok, ok, no, no, no, no, no, no]);
    assert_eq!(address_statuses, [ok, ok, ok, no, no]);
    let calls: usize = origins.calls.lock().unwrap().values().sum();
    assert_eq!(calls, 6, "rejected requests reached the origin");
    let mut hitters: Vec<_> = limiter
        .heavy_hitters()
        .into_iter()
        .map(|h| (h.key, h.rejected))
        .collect();
    hitters.sort();
    // One rejection each on the exact counts; the rest from the over-limit cache, uncounted.
    assert_eq!(
        hitters,
        [("[::1]".to_owned(), 1), ("flood.example".to_owned(), 1)]
    );
}

#[tokio::test]
async fn a_flood_of_long_hosts_is_limited_and_keeps_keys_within_the_bound() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(3, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let origins = Arc::new(Origins::default());
    let addr = serve(LimitLayer::new(limiter.clone()).layer(handler(&origins))).await;
    let client = client();

    let long = format!("{}.example", "x".repeat(10_240));
    let respelled = format!("{}..:80", long.to_uppercase());
    let mut statuses = Vec::new();
    for i in 0..6 {
        let host = if i % 2 == 0 { &long } else { &respelled };
        statuses.push(get(&client, addr, host).await.0);
    }
    let ok = StatusCode::OK;
    let no = StatusCode::SERVICE_UNAVAILABLE;
    assert_eq!(statuses, [ok, ok, ok, no, no, no]);
    // Another long host, differing only in its last byte, has a limit of its own.
    let other = format!("{}.examplf", "x".repeat(10_240));
    assert_eq!(get(&client, addr, &other).await.0, ok);

    let hitters = limiter.heavy_hitters();
    assert!(!hitters.is_empty());
    for hitter in &hitters {
        assert!(
            hitter.key.len() <= HostKey::MAX_LEN,
            "{} bytes",
            hitter.key.len()
        );
    }
    // Rejected once on the exact counts, then by the over-limit cache (uncounted).
    assert!(hitters.iter().any(|h| h.rejected == 1));
}

// In-process: the future and readiness contract, without a socket.

/// An inner service whose response never comes.
#[derive(Clone)]
struct Never;

impl Service<Request<()>> for Never {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Pending<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::pending()
    }
}

#[tokio::test]
async fn dropping_the_response_future_gives_the_permit_back() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let mut service = LimitService::new(Never, limiter.clone());
    let future = service
        .ready()
        .await
        .unwrap()
        .call(origin_form("a.example"));
    assert!(
        limiter.try_acquire("a.example").is_err(),
        "the future holds the permit"
    );
    let cancelled = tokio::time::timeout(Duration::from_millis(1), future).await;
    assert!(cancelled.is_err(), "the inner service never answers");
    // The timeout dropped the future.
    assert!(limiter.try_acquire("a.example").is_ok());
}

/// An inner service that is not ready until told, and then fails readiness once.
struct Gate {
    state: Arc<Mutex<Poll<Result<(), &'static str>>>>,
}

impl Service<Request<()>> for Gate {
    type Response = Response<Full<Bytes>>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<Full<Bytes>>, &'static str>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        *self.state.lock().unwrap()
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::default())))
    }
}

#[test]
fn poll_ready_is_the_inner_services() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let state = Arc::new(Mutex::new(Poll::Pending));
    let mut service = LimitService::new(
        Gate {
            state: Arc::clone(&state),
        },
        limiter,
    );
    let waker = floodgate_test_support::waker::noop();
    let mut cx = Context::from_waker(&waker);
    assert!(service.poll_ready(&mut cx).is_pending());
    *state.lock().unwrap() = Poll::Ready(Err("inner not available"));
    assert_eq!(
        service.poll_ready(&mut cx),
        Poll::Ready(Err("inner not available"))
    );
    *state.lock().unwrap() = Poll::Ready(Ok(()));
    assert_eq!(service.poll_ready(&mut cx), Poll::Ready(Ok(())));
}

/// Over loopback: a limit in shadow serves what it would refuse, the inner service is called
/// for every request, and an outer layer sees the refusal each would have had
/// (`ShadowRejected` in the response's extensions), here as a header.
#[tokio::test]
async fn a_limit_in_shadow_serves_every_request_and_says_which_it_would_refuse() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(3, Duration::from_secs(1))
        .shadow(true)
        .clock(&clock)
        .build()
        .unwrap();
    let would_refuse = |mut response: Response<_>| {
        let reason = response
            .extensions()
            .get::<ShadowRejected>()
            .map(|shadow| format!("{:?}", shadow.0.reason));
        if let Some(reason) = reason {
            let key = response
                .extensions()
                .get::<RejectedKey>()
                .unwrap()
                .0
                .clone();
            let value = HeaderValue::from_str(&format!("{reason} {key}")).unwrap();
            response.headers_mut().insert("x-would-refuse", value);
        }
        response
    };
    let origins = Arc::new(Origins::default());
    let service = tower::ServiceBuilder::new()
        .map_response(would_refuse)
        .layer(LimitLayer::new(limiter.clone()))
        .service(handler(&origins));
    let addr = serve(service).await;
    let client = client();

    let mut marked = Vec::new();
    for _ in 0..5 {
        let (status, headers) = fetch(&client, request(addr, "trial.example")).await;
        assert_eq!(status, StatusCode::OK, "in shadow: served");
        assert!(no_fields(&headers), "nor told of the limits");
        marked.push(
            headers
                .get("x-would-refuse")
                .map(|v| v.to_str().unwrap().to_owned()),
        );
    }
    let rate = Some("Rate trial.example".to_owned());
    assert_eq!(marked, [None, None, None, rate.clone(), rate]);
    assert_eq!(calls(&origins, "trial.example"), 5);

    // Enforcing from now on: the same traffic is refused.
    limiter.set_limits(Limits::new().max_rate(3)).unwrap();
    let (status, _) = fetch(&client, request(addr, "trial.example")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls(&origins, "trial.example"), 5);
}

/// Over loopback, behind a trusted proxy (the loopback client plays it): each client the
/// proxy forwards for has a limit of its own, whatever it claims left of the proxy's entry,
/// and the clients of one IPv6 /64 share one.
#[tokio::test]
async fn client_keys_limit_each_forwarded_client_and_each_ipv6_network() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let addrs = ClientAddr::new().trust("127.0.0.0/8".parse().unwrap());
    let layer = LimitLayer::new(limiter).key_fn(ClientKey::new(addrs));
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |forwarded: &str| {
        let mut req = request(addr, "origin.example");
        req.headers_mut()
            .insert("x-forwarded-for", forwarded.parse().unwrap());
        fetch(&client, req)
    };
    let mut statuses = Vec::new();
    // One client forging a different address left of what the proxy saw, each time.
    for forged in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        statuses.push(send(&format!("{forged}, 192.0.2.7")).await.0);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::SERVICE_UNAVAILABLE
        ],
        "the forged entries are not read"
    );
    // Another client: a limit of its own.
    assert_eq!(send("192.0.2.8").await.0, StatusCode::OK);
    // Three addresses of one /64: one limit.
    let mut statuses = Vec::new();
    for host in ["1", "2", "3"] {
        statuses.push(send(&format!("2001:db8:1:2::{host}")).await.0);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::SERVICE_UNAVAILABLE
        ]
    );
    assert_eq!(
        send("2001:db8:1:3::1").await.0,
        StatusCode::OK,
        "another /64"
    );
}

/// Over loopback, behind a trusted proxy that forwards something else than an address where
/// the client's should be (`unknown`, garbage): those clients were all keyed as the proxy, so
/// that two of them locked out every other client it forwarded so. Now no key at all: refused
/// (500) by default, nothing counted under the proxy's address.
#[tokio::test]
async fn forwarded_entries_that_are_not_addresses_never_share_the_proxys_key() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let addrs = ClientAddr::new().trust("127.0.0.0/8".parse().unwrap());
    let layer = LimitLayer::new(limiter.clone()).key_fn(ClientKey::new(addrs));
    let origins = Arc::new(Origins::default());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let mut statuses = Vec::new();
    for forwarded in ["unknown", "unknown", "garbage", "192.0.2.7, not-an-address"] {
        let mut req = request(addr, "origin.example");
        req.headers_mut()
            .insert("x-forwarded-for", forwarded.parse().unwrap());
        statuses.push(fetch(&client, req).await.0.as_u16());
    }
    assert_eq!(
        statuses, [500; 4],
        "no client to key: refused, none keyed as the proxy"
    );
    assert_eq!(calls(&origins, "origin.example"), 0);
    assert_eq!(limiter.estimate("127.0.0.1/32").rate, Some(0.0));
}

/// Over loopback, with no peer address in the requests (a server that does not put it there)
/// and `unidentified(Unkeyed::Serve)`: every request is served, refusing at once or in the
/// waiting mode, and none is counted under any key.
#[tokio::test]
async fn requests_without_a_client_are_served_unlimited_when_the_operator_says_so() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(1, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let keys = || ClientKey::new(ClientAddr::new()).unidentified(Unkeyed::Serve);
    let origins = Arc::new(Origins::default());
    let at_once = LimitLayer::new(limiter.clone()).key_fn(keys());
    let waiting = LimitLayer::new(limiter.clone())
        .key_fn(keys())
        .wait(Duration::from_millis(50));
    for addr in [
        serve_without_peer(at_once.layer(handler(&origins))).await,
        serve_without_peer(waiting.layer(handler(&origins))).await,
    ] {
        let client = client();
        for _ in 0..3 {
            let (status, _) = fetch(&client, request(addr, "origin.example")).await;
            assert_eq!(status, StatusCode::OK, "served unlimited");
        }
    }
    assert_eq!(calls(&origins, "origin.example"), 6);
    assert_eq!(
        limiter.estimate("unknown").rate,
        Some(0.0),
        "nothing counted, not under the key all of them had"
    );
}

/// Over loopback, two stacked layers are one decision: a host (5 a second) in front of its
/// clients (3 a second each, by their forwarded address). A client's 10 requests are served 3
/// times, and the host, charged only for those, serves another client twice more. Refusing at
/// once and waiting alike (the outer layer waits for room, and takes back an admission the
/// inner layer then refuses).
#[tokio::test]
async fn stacked_layers_charge_the_outer_key_only_for_what_the_inner_one_admits() {
    let clock = ManualClock::new();
    let per_second = |limit| {
        Limiter::builder()
            .max_rate(limit, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap()
    };
    let clients = || {
        let addrs = ClientAddr::new().trust("127.0.0.0/8".parse().unwrap());
        LimitLayer::new(per_second(3)).key_fn(ClientKey::new(addrs))
    };
    let origins = Arc::new(Origins::default());
    let at_once = tower::ServiceBuilder::new()
        .layer(LimitLayer::new(per_second(5)))
        .layer(clients())
        .service(handler(&origins));
    let waiting = tower::ServiceBuilder::new()
        .layer(LimitLayer::new(per_second(5)).wait(Duration::from_millis(50)))
        .layer(clients())
        .service(handler(&origins));
    for addr in [serve(at_once).await, serve(waiting).await] {
        let client = client();
        let send = |from: &str| {
            let mut req = request(addr, "origin.example");
            req.headers_mut()
                .insert("x-forwarded-for", from.parse().unwrap());
            fetch(&client, req)
        };
        let mut served = 0;
        for _ in 0..10 {
            let (status, headers) = send("192.0.2.7").await;
            match status {
                StatusCode::OK => served += 1,
                _ => assert_eq!(
                    headers["ratelimit-policy"], "\"rate\";q=3;w=1",
                    "the client's refusal, with its own fields alone"
                ),
            }
        }
        assert_eq!(served, 3, "the client's limit");
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(send("192.0.2.8").await.0);
        }
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::SERVICE_UNAVAILABLE
            ],
            "the host's 5: 3 for the first client, 2 for the second"
        );
    }
}

/// Over loopback, a host's layer around a client's, both putting the fields on admitted
/// responses, each with policy names of its own: one response carries both lists, and a client
/// tells every item apart and finds each `RateLimit` item's policy. A refusal of the client's
/// layer names the client's policy.
#[tokio::test]
async fn stacked_layers_with_names_of_their_own_send_items_a_client_can_tell_apart() {
    let clock = ManualClock::new();
    let limiter = |rate| {
        Limiter::builder()
            .max_inflight(100)
            .max_rate(rate, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap()
    };
    let names = |rate: &str, inflight: &str| PolicyNames::new(rate, inflight).unwrap();
    let addrs = ClientAddr::new().trust("127.0.0.0/8".parse().unwrap());
    let clients = LimitLayer::new(limiter(3))
        .key_fn(ClientKey::new(addrs))
        .ratelimit_headers_on_admitted(true)
        .policy_names(names("client", "client-inflight"));
    let hosts = LimitLayer::new(limiter(5))
        .ratelimit_headers_on_admitted(true)
        .policy_names(names("host", "host-inflight"));
    let origins = Arc::new(Origins::default());
    let service = tower::ServiceBuilder::new()
        .layer(hosts)
        .layer(clients)
        .service(handler(&origins));
    let addr = serve(service).await;
    let client = client();
    let send = || {
        let mut req = request(addr, "origin.example");
        req.headers_mut()
            .insert("x-forwarded-for", "192.0.2.7".parse().unwrap());
        fetch(&client, req)
    };

    for sent in 1..=3i64 {
        let (status, headers) = send().await;
        assert_eq!(status, StatusCode::OK);
        let policies = list(&headers, "ratelimit-policy");
        let named: Vec<&str> = policies.iter().map(Item::name).collect();
        assert_eq!(
            named,
            ["client", "client-inflight", "host", "host-inflight"],
            "every policy once, in one list"
        );
        let limits = list(&headers, "ratelimit");
        let named: Vec<&str> = limits.iter().map(Item::name).collect();
        assert_eq!(named, ["client", "host"], "each layer's closest policy");
        assert_eq!(limits[0].int("r"), Some(3 - sent));
        assert_eq!(limits[1].int("r"), Some(5 - sent));
    }
    let (status, headers) = send().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let refused = single(&headers, "ratelimit");
    assert_eq!((refused.name(), refused.int("r")), ("client", Some(0)));
    let named: Vec<String> = list(&headers, "ratelimit-policy")
        .iter()
        .map(|item| item.name().to_owned())
        .collect();
    assert_eq!(
        named,
        ["client", "client-inflight"],
        "the client's refusal alone"
    );
}

/// A refusal for `reason` of a request under a limit of 1, as the limiter makes it.
fn refused_for(reason: Reason) -> Rejected {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(1)
        .max_rate(1, Duration::from_secs(1))
        .build()
        .unwrap();
    let _first = limiter.try_acquire("key").unwrap();
    let rejected = match reason {
        Reason::Inflight => limiter.try_acquire("key").unwrap_err(),
        _ => {
            let plan = Limits::new().max_rate(1).no_inflight();
            limiter.with_limits(plan).try_acquire("key").unwrap_err()
        }
    };
    assert_eq!(rejected.reason, reason);
    rejected
}

/// Over loopback, a layer whose requests cost their `x-units` header: 10 units a second per
/// host, so 4 + 4 are served, 4 more are refused (with the RateLimit fields in units), the 2
/// left are served, and 11 can never fit: a 413 without `Retry-After`.
#[tokio::test]
async fn a_layer_with_a_cost_fn_counts_each_requests_units() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let units = |req: &Request<Incoming>| {
        let value = req.headers().get("x-units").and_then(|v| v.to_str().ok());
        value.and_then(|v| v.parse().ok()).unwrap_or(1)
    };
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter.clone()).cost_fn(units);
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |units: &str| {
        let mut req = request(addr, "api.example");
        req.headers_mut().insert("x-units", units.parse().unwrap());
        fetch(&client, req)
    };
    assert_eq!(send("4").await.0, StatusCode::OK);
    assert_eq!(send("4").await.0, StatusCode::OK);
    let (status, headers) = send("4").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["ratelimit-policy"], "\"rate\";q=10;w=1");
    assert!(retry_after(&headers).is_some());
    assert_eq!(send("2").await.0, StatusCode::OK, "the 2 units left");
    let (status, headers) = send("11").await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(retry_after(&headers), None, "11 never fit under 10");
    assert_eq!(calls(&origins, "api.example"), 3);
    assert_eq!(limiter.estimate("api.example").rate, Some(10.0));
}

/// A request that costs more than its limit can never be admitted, however long it waits: it
/// is answered `413 Content Too Large` (not the 429 of a refusal a wait cures), with no
/// `Retry-After` and a body that says a retry will not help; the limits are still described.
#[tokio::test]
async fn a_request_over_its_limit_by_its_cost_alone_is_a_413_that_says_retrying_will_not_help() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let units = |req: &Request<Incoming>| {
        let value = req.headers().get("x-units").and_then(|v| v.to_str().ok());
        value.and_then(|v| v.parse().ok()).unwrap_or(1)
    };
    let origins = Arc::new(Origins::default());
    let layer = LimitLayer::new(limiter.clone())
        .cost_fn(units)
        .refusal(RefusalResponse::too_many_requests());
    let addr = serve(layer.layer(handler(&origins))).await;
    let client = client();
    let send = |units: &str| {
        let mut req = request(addr, "api.example");
        req.headers_mut().insert("x-units", units.parse().unwrap());
        client.request(req)
    };
    let response = send("11").await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let headers = response.headers().clone();
    assert_eq!(retry_after(&headers), None, "no wait ever admits it");
    assert_eq!(headers["ratelimit-policy"], "\"rate\";q=10;w=1");
    assert!(headers.get("ratelimit").is_none(), "{headers:?}");
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = std::str::from_utf8(&body).unwrap();
    assert!(body.contains("retrying it will not help"), "{body:?}");
    // A refusal a wait cures is still the operator's 429, and the 11 units counted nothing.
    assert_eq!(send("10").await.unwrap().status(), StatusCode::OK);
    let response = send("1").await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(retry_after(response.headers()).is_some());
    assert_eq!(calls(&origins, "api.example"), 1);
}

// ---------------------------------------------------------------------------------------------
// Costs in body bytes (`BodyBytes`): uploads with a length and without one (chunked).

type Upload = BoxBody<Bytes, Infallible>;

/// What the upload origin saw of one request body: the bytes it read, and whether the body
/// ended with `ChargeExceeded` (any other error fails the test).
type Read = (u64, bool);

/// An origin that reads each request body to its end and tells the test what it read.
fn reader(
    seen: mpsc::UnboundedSender<Read>,
) -> impl Service<
    Request<ChargedBody<Incoming>>,
    Response = Response<TestBody>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<ChargedBody<Incoming>>| {
        let seen = seen.clone();
        async move {
            let mut body = req.into_body();
            let (mut read, mut exceeded) = (0, false);
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => read += frame.data_ref().map_or(0, |d| d.len() as u64),
                    Err(error) => {
                        assert!(error.downcast_ref::<ChargeExceeded>().is_some(), "{error}");
                        exceeded = true;
                        break;
                    }
                }
            }
            let _ = seen.send((read, exceeded));
            Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed()))
        }
    })
}

fn upload_client() -> Client<HttpConnector, Upload> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// `n` bytes with a length (`Content-Length`).
fn sized(n: usize) -> Upload {
    Full::new(Bytes::from(vec![b'x'; n])).boxed()
}

/// `n` bytes without a length: the client sends them chunked.
fn chunked(n: usize) -> Upload {
    Full::new(Bytes::from(vec![b'x'; n]))
        .map_frame(|frame| frame)
        .boxed()
}

/// POSTs `body` to `addr` for `api.example`: the response's status, headers and body.
async fn upload(
    client: &Client<HttpConnector, Upload>,
    addr: SocketAddr,
    body: Upload,
) -> (StatusCode, HeaderMap, Bytes) {
    let req = Request::post(format!("http://{addr}/"))
        .header(HOST, "api.example")
        .body(body)
        .unwrap();
    let (head, body) = client.request(req).await.unwrap().into_parts();
    (
        head.status,
        head.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

/// Over loopback, 100,000 bytes a second per host, counted with `BodyBytes`: two uploads of
/// 60 KB with a length do not both pass, and neither do two sent chunked (each charged the
/// 64 KiB it may carry), where charging a body without a length 1 let both through.
#[tokio::test]
async fn chunked_uploads_do_not_pass_a_byte_limit_that_the_same_uploads_with_a_length_do_not() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(100_000, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter).cost_fn(BodyBytes::new(UnknownLength::Charge(65_536)));
    let (seen, mut read) = mpsc::unbounded_channel();
    let addr = serve(layer.layer(reader(seen))).await;
    let client = upload_client();

    for (how, body) in [
        ("sized", sized as fn(usize) -> Upload),
        ("chunked", chunked),
    ] {
        let (status, _, _) = upload(&client, addr, body(60_000)).await;
        assert_eq!(status, StatusCode::OK, "{how}");
        assert_eq!(read.recv().await, Some((60_000, false)), "{how}");
        let (status, headers, _) = upload(&client, addr, body(60_000)).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{how}: over 100,000 bytes"
        );
        assert_eq!(
            headers["ratelimit-policy"], "\"rate\";q=100000;w=1",
            "{how}"
        );
        assert!(retry_after(&headers).is_some(), "{how}");
        clock.advance(Duration::from_secs(2));
    }
    assert!(
        read.try_recv().is_err(),
        "the refused uploads never reached the origin"
    );
}

/// Over loopback, a chunked upload longer than the 64 KiB it was charged reaches the origin
/// cut: the origin reads at most the bytes charged, then the body's `ChargeExceeded`. One that
/// stays within its charge is read whole.
#[tokio::test]
async fn a_chunked_upload_never_passes_more_bytes_than_it_was_charged() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(1_000_000, Duration::from_secs(1))
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter).cost_fn(BodyBytes::new(UnknownLength::Charge(65_536)));
    let (seen, mut read) = mpsc::unbounded_channel();
    let addr = serve(layer.layer(reader(seen))).await;
    let client = upload_client();

    let (status, _, _) = upload(&client, addr, chunked(65_536)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read.recv().await, Some((65_536, false)));
    // The origin's answer may reach the client before the client has sent its whole body, or
    // the connection may close under it: what the origin read is what counts.
    let req = Request::post(format!("http://{addr}/"))
        .header(HOST, "api.example")
        .body(chunked(200_000))
        .unwrap();
    let _ = client.request(req).await;
    let (bytes, exceeded) = read.recv().await.unwrap();
    assert!(exceeded, "the body went on past its charge");
    assert!(
        bytes <= 65_536,
        "the origin read {bytes} bytes of a 65,536-byte charge"
    );
}

/// Over loopback, an operator that requires a length: a chunked upload is answered `411
/// Length Required` with a body that says so, before any limit is asked (nothing is counted,
/// the origin is not called); an upload with a length, and a request without a body, pass.
#[tokio::test]
async fn requests_without_a_length_are_answered_411_when_the_operator_requires_one() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(100_000, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let layer = LimitLayer::new(limiter.clone()).cost_fn(BodyBytes::new(UnknownLength::Refuse));
    let (seen, mut read) = mpsc::unbounded_channel();
    let addr = serve(layer.layer(reader(seen))).await;
    let client = upload_client();

    let (status, headers, body) = upload(&client, addr, chunked(10)).await;
    assert_eq!(status, StatusCode::LENGTH_REQUIRED);
    assert!(no_fields(&headers), "{headers:?}");
    assert!(
        std::str::from_utf8(&body)
            .unwrap()
            .contains("Content-Length"),
        "{body:?}"
    );
    assert!(read.try_recv().is_err(), "the origin was called");
    assert_eq!(
        limiter.estimate("api.example").rate,
        Some(0.0),
        "nothing counted"
    );

    let (status, _, _) = upload(&client, addr, sized(10)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read.recv().await, Some((10, false)));
    let (status, _, _) = upload(&client, addr, Empty::new().boxed()).await;
    assert_eq!(status, StatusCode::OK, "no body: a length of 0");
    assert_eq!(read.recv().await, Some((0, false)));
    assert_eq!(
        limiter.estimate("api.example").rate,
        Some(11.0),
        "10 bytes, then 1"
    );
}

/// A host's layer around a client's: a request the client's layer will not charge (its `411`)
/// is a refusal further in, and the host's layer takes its admission back, as for any other.
#[tokio::test]
async fn an_inner_layers_411_gives_the_outer_layers_admission_back() {
    let clock = ManualClock::new();
    let per_second = |limit| {
        Limiter::builder()
            .max_rate(limit, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap()
    };
    let inner = LimitLayer::new(per_second(1_000_000))
        .key_fn(|_: &Request<Upload>| "client".to_owned())
        .cost_fn(BodyBytes::new(UnknownLength::Refuse));
    let origin = tower::service_fn(|_: Request<ChargedBody<Upload>>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    });
    let service = tower::ServiceBuilder::new()
        .layer(LimitLayer::new(per_second(2)))
        .layer(inner)
        .service(origin);
    let send = |body: Upload| {
        let req = Request::post("http://api.example/").body(body).unwrap();
        service.clone().oneshot(req)
    };
    for _ in 0..3 {
        let refused = send(chunked(10)).await.unwrap();
        assert_eq!(refused.status(), StatusCode::LENGTH_REQUIRED);
        let uncharged = refused.extensions().get::<Uncharged>().unwrap();
        assert_eq!(uncharged.status, StatusCode::LENGTH_REQUIRED);
    }
    for _ in 0..2 {
        let admitted = send(sized(10)).await.unwrap();
        assert_eq!(
            admitted.status(),
            StatusCode::OK,
            "the host's 2 are all left"
        );
    }
    assert_eq!(
        send(sized(10)).await.unwrap().status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any two strings as policy names: refused when they are made (empty, a character a
    /// Structured Field String cannot carry, or both alike), or else every field built with
    /// them parses, with a strict reader, back to the very names.
    #[test]
    fn policy_names_are_refused_when_made_or_read_back_as_given(
        rate in prop_oneof![any::<String>(), "[ -~]{0,12}", Just(String::new()), Just("\"\\".to_owned())],
        inflight in prop_oneof![any::<String>(), "[ -~]{0,12}", Just("rate".to_owned())],
    ) {
        let carried = |name: &str| !name.is_empty() && name.bytes().all(|b| (0x20..=0x7e).contains(&b));
        match PolicyNames::new(&rate, &inflight) {
            Err(error) => {
                prop_assert!(!carried(&rate) || !carried(&inflight) || rate == inflight, "{error}");
                let said = error.to_string();
                prop_assert!(said.contains("policy name"), "{said}");
            }
            Ok(names) => {
                prop_assert!(carried(&rate) && carried(&inflight) && rate != inflight);
                prop_assert_eq!((names.rate(), names.inflight()), (rate.as_str(), inflight.as_str()));
                let policies = Policies::new(
                    Limits::new().max_rate(u32::MAX).max_inflight(0),
                    Some(Duration::MAX),
                );
                let items = parse_list(&policies.policy_named(&names).unwrap());
                let read: Vec<&str> = items.iter().map(Item::name).collect();
                prop_assert_eq!(read, [rate.as_str(), inflight.as_str()]);
                for reason in [Reason::Rate, Reason::Inflight] {
                    let rejected = refused_for(reason);
                    let field = policies.refused_named(&rejected, &names).unwrap();
                    let item = parse_list(&field).remove(0);
                    prop_assert_eq!(Some(item.name()), names.of(reason));
                }
                // Names a header value takes as they are.
                prop_assert!(HeaderValue::try_from(policies.policy_named(&names).unwrap()).is_ok());
            }
        }
    }

    /// A `Retry-After` jitter anywhere from 0 to `Duration::MAX`: refused past the layer's
    /// maximum with an error that says it, or else a refusal's `Retry-After` within the exact
    /// wait plus the jitter (`Duration::MAX` answered `Retry-After: 12625552535667681469`).
    #[test]
    fn a_retry_after_jitter_from_zero_to_the_maximum_is_refused_or_bounded(
        jitter in prop_oneof![
            Just(Duration::MAX),
            (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
            (0u64..7_200).prop_map(Duration::from_secs),
        ],
    ) {
        let clock = ManualClock::new();
        let limiter = Limiter::builder()
            .max_rate(1, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        let origin = tower::service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        });
        match LimitService::new(origin, limiter).retry_after_jitter(jitter) {
            Err(error) => {
                prop_assert!(jitter > LimitLayer::<HostKey>::MAX_RETRY_AFTER_JITTER, "{error}");
                prop_assert!(error.to_string().contains("at most 3600s"), "{error}");
            }
            Ok(service) => {
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let request = || Request::builder().uri("http://busy.example/").body(()).unwrap();
                let refused = runtime.block_on(async {
                    service.clone().oneshot(request()).await.unwrap();
                    service.oneshot(request()).await.unwrap()
                });
                let secs = retry_after(refused.headers()).unwrap();
                // The exact wait is 2 s (1.5 s on the sliding window, rounded up).
                prop_assert!((2..=2 + jitter.as_secs()).contains(&secs), "{secs} for {jitter:?}");
                prop_assert!(secs <= 2 + 3_600, "{secs}");
            }
        }
    }
}
