#![cfg(feature = "tower")]
//! `LimitLayer` as an axum layer: `Router::new().route(…).layer(LimitLayer::new(limiter))`
//! compiles (the service's error is `Infallible`, its body `LimitBody<axum::body::Body>`, which
//! axum turns into a response), answers 503 + `Retry-After` + the RateLimit fields over the
//! limits, and holds the request's permit until axum's response body has been read to the
//! end. In process, so the tests also see the `Rejected` each refusal carries in its
//! extensions; client keys over loopback, served by `axum::serve` as a user serves them; and
//! `BodyBytes`, whose handler body is held to its charge.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use common::layer::{list, single};
use floodgate::clock::ManualClock;
use floodgate::fields::client::ClientAddr;
use floodgate::layer::{BodyBytes, ChargeExceeded, ClientKey, UnknownLength};
use floodgate::{
    layer::KeyExtractor, layer::LimitLayer, layer::LimitsExtractor, Limiter, Limits, Reason,
    Rejected,
};
use http::header::RETRY_AFTER;
use http::{Request, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tower::ServiceExt;

fn app<F, L>(layer: LimitLayer<F, L>) -> Router
where
    F: KeyExtractor<Body> + Clone + Send + Sync + 'static,
    L: LimitsExtractor<Body> + Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

fn request(host: &str) -> Request<Body> {
    common::layer::origin_form(host)
}

#[tokio::test]
async fn rate_limit_answers_503_with_retry_after_through_axum() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let app = app(LimitLayer::new(limiter));
    for _ in 0..2 {
        let response = app.clone().oneshot(request("busy.example")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
    }
    let response = app.clone().oneshot(request("busy.example")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()[RETRY_AFTER], "2"); // 1.5 s on the sliding window, rounded up
    let rejected = response.extensions().get::<Rejected>().unwrap();
    assert_eq!(rejected.reason, Reason::Rate);
    assert!(response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .is_empty());

    let response = app.oneshot(request("quiet.example")).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "other hosts are not limited"
    );
}

#[tokio::test]
async fn inflight_permit_is_held_until_axums_body_is_read() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let app = app(LimitLayer::new(limiter.clone()));

    let first = app
        .clone()
        .oneshot(request("origin.example"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(limiter.estimate("origin.example").inflight, Some(1));
    let second = app
        .clone()
        .oneshot(request("origin.example"))
        .await
        .unwrap();
    assert_eq!(
        second.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the first response's body is still unread"
    );
    assert_eq!(
        second.extensions().get::<Rejected>().unwrap().reason,
        Reason::Inflight
    );

    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"hello");
    assert_eq!(limiter.estimate("origin.example").inflight, Some(0));
    let third = app.oneshot(request("origin.example")).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);
    drop(third); // a body dropped unread gives the permit back too
    assert_eq!(limiter.estimate("origin.example").inflight, Some(0));
}

#[tokio::test]
async fn a_refusals_t_is_its_exact_wait_rounded_up() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(3, Duration::from_millis(2500))
        .clock(&clock)
        .build()
        .unwrap();
    let app = app(LimitLayer::new(limiter));
    for _ in 0..3 {
        let response = app.clone().oneshot(request("busy.example")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = app.oneshot(request("busy.example")).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let wait = response.extensions().get::<Rejected>().unwrap().retry_after;
    let wait = wait.expect("a rate refusal knows its wait");
    let exact = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let limit = single(response.headers(), "ratelimit");
    assert_eq!(limit.int("t"), Some(exact as i64), "wait {wait:?}");
    assert_eq!(response.headers()[RETRY_AFTER], exact.to_string().as_str());
    // A window of 2.5 s is advertised as 3 s: never a higher rate than the real one.
    let policy = single(response.headers(), "ratelimit-policy");
    assert_eq!((policy.int("q"), policy.int("w")), (Some(3), Some(3)));
}

#[tokio::test]
async fn admitted_responses_name_the_inflight_policy_when_it_is_closest_to_its_limit() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_inflight(2)
        .max_rate(100, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let app = app(LimitLayer::new(limiter).ratelimit_headers_on_admitted(true));

    // Bodies left unread hold their permits: 1 of 2 in flight, then 2 of 2.
    let first = app.clone().oneshot(request("api.example")).await.unwrap();
    let limit = single(first.headers(), "ratelimit");
    assert_eq!(
        (limit.name(), limit.int("r"), limit.keys()),
        ("inflight", Some(1), vec!["r"])
    );
    let second = app.clone().oneshot(request("api.example")).await.unwrap();
    let limit = single(second.headers(), "ratelimit");
    assert_eq!((limit.name(), limit.int("r")), ("inflight", Some(0)));
    let third = app.clone().oneshot(request("api.example")).await.unwrap();
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(single(third.headers(), "ratelimit").name(), "inflight");

    // Both slots free again (bodies dropped unread): one of 2 in flight leaves 1/2, still
    // closer than the rate's 96 of 100 left.
    drop((first, second));
    let fourth = app.oneshot(request("api.example")).await.unwrap();
    assert_eq!(single(fourth.headers(), "ratelimit").int("r"), Some(1));
}

#[tokio::test]
async fn limits_the_limiter_does_not_count_are_a_500_carrying_the_rejection() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let layer = LimitLayer::new(limiter).limits_fn(|_: &Request<Body>| Limits::new().max_rate(10));
    let response = app(layer).oneshot(request("api.example")).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(response.headers().get(RETRY_AFTER).is_none());
    assert!(list(response.headers(), "ratelimit").is_empty());
    assert!(list(response.headers(), "ratelimit-policy").is_empty());
    let rejected = response.extensions().get::<Rejected>().unwrap();
    assert_eq!(
        (rejected.reason, rejected.limit),
        (Reason::RateNotCounted, 10)
    );
    assert!(rejected.to_string().contains("max_rate"), "{rejected}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(body.is_empty(), "the body is axum's, not the handler's");
}

/// Requests with an `x-plan: pro` header get the pro plan's limits; the others the
/// limiter's defaults, whatever they are when the request arrives.
#[derive(Clone)]
struct Plans;

impl<B> LimitsExtractor<B> for Plans {
    fn limits(&self, req: &Request<B>) -> Option<Limits> {
        let pro = req.headers().get("x-plan").is_some_and(|v| v == "pro");
        pro.then(|| Limits::new().max_rate(3))
    }
}

#[tokio::test]
async fn requests_without_limits_of_their_own_follow_set_limits_from_the_next_one_on() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let app = app(LimitLayer::new(limiter.clone()).limits_fn(Plans));
    let pro = || {
        let mut req = request("pro.example");
        req.headers_mut().insert("x-plan", "pro".parse().unwrap());
        req
    };

    let response = app.clone().oneshot(request("plain.example")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    limiter.set_limits(Limits::new().max_rate(1)).unwrap();
    let response = app.clone().oneshot(request("plain.example")).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the new default of 1 applies at once"
    );
    let policy = single(response.headers(), "ratelimit-policy");
    assert_eq!(
        policy.int("q"),
        Some(1),
        "the fields show the limit it was judged by"
    );
    assert_eq!(response.extensions().get::<Rejected>().unwrap().limit, 1);

    // The pro plan ignores the defaults: 3 admitted, the 4th refused against 3.
    for _ in 0..3 {
        assert_eq!(
            app.clone().oneshot(pro()).await.unwrap().status(),
            StatusCode::OK
        );
    }
    let response = app.oneshot(pro()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        single(response.headers(), "ratelimit-policy").int("q"),
        Some(3)
    );
}

/// Serves `app` on loopback with `axum::serve`: as axum serves by default, or with each
/// connection's address (`into_make_service_with_connect_info`). Until the test's runtime ends.
async fn serve_axum(app: Router, connect_info: bool) -> SocketAddr {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            let app = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, app).await.unwrap();
        } else {
            axum::serve(listener, app).await.unwrap();
        }
    });
    addr
}

/// Served as axum serves by default (`axum::serve(listener, app)`), no request carries its
/// peer's address, and a client key keyed every client behind the trusted proxy `"unknown"`:
/// one client over its limit refused the next one too. Refused by default instead (500), so
/// that no client can lock out another; served with `into_make_service_with_connect_info`, as
/// the README shows, each client has a limit of its own.
#[tokio::test]
async fn client_keys_without_a_peer_address_never_share_one_limit() {
    let clock = ManualClock::new();
    let app = || {
        let limiter = Limiter::builder()
            .max_rate(2, Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        let proxies = "127.0.0.0/8".parse().unwrap();
        let clients = ClientKey::new(ClientAddr::new().trust(proxies))
            .peer_from(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()));
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(LimitLayer::new(limiter).key_fn(clients))
    };
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    // Four requests of one client (as the proxy on loopback forwards it), then one of another.
    let statuses = |addr: SocketAddr| {
        let client = client.clone();
        async move {
            let mut statuses = Vec::new();
            for from in [
                "192.0.2.7",
                "192.0.2.7",
                "192.0.2.7",
                "192.0.2.7",
                "192.0.2.8",
            ] {
                let req = Request::get(format!("http://{addr}/"))
                    .header("x-forwarded-for", from)
                    .body(Empty::new())
                    .unwrap();
                statuses.push(client.request(req).await.unwrap().status().as_u16());
            }
            statuses
        }
    };
    let plain = serve_axum(app(), false).await;
    assert_eq!(
        statuses(plain).await,
        [500; 5],
        "no peer address: every request refused as the server's error, none under a shared key"
    );
    let with_peers = serve_axum(app(), true).await;
    assert_eq!(
        statuses(with_peers).await,
        [200, 200, 503, 503, 200],
        "each client its own limit of 2"
    );
}

/// `BodyBytes` as an axum layer: the handler's body is held to the bytes charged, and a handler
/// that reads past them finds `ChargeExceeded` under axum's error (here answered 413); a body
/// within its charge is read whole.
#[tokio::test]
async fn body_bytes_hold_an_axum_handlers_body_to_its_charge() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(1_000, Duration::from_secs(1))
        .build()
        .unwrap();
    let read = |request: Request<Body>| async move {
        match request.into_body().collect().await {
            Ok(body) => (StatusCode::OK, body.to_bytes().len().to_string()),
            Err(error) => {
                let error = error.into_inner();
                assert!(error.downcast_ref::<ChargeExceeded>().is_some(), "{error}");
                (StatusCode::PAYLOAD_TOO_LARGE, error.to_string())
            }
        }
    };
    let app = Router::new()
        .route("/", post(read))
        .layer(LimitLayer::new(limiter).cost_fn(BodyBytes::new(UnknownLength::Charge(16))));
    // Bodies whose length is not known before they are read, as chunked uploads'.
    let chunked = |bytes: &'static [u8]| {
        let body = Body::new(Full::new(Bytes::from_static(bytes)).map_frame(|frame| frame));
        assert_eq!(body.size_hint().exact(), None);
        Request::post("/")
            .header("host", "api.example")
            .body(body)
            .unwrap()
    };
    let response = app
        .clone()
        .oneshot(chunked(b"sixteen bytes..!"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"16");
    let response = app.oneshot(chunked(b"seventeen bytes..")).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(
        std::str::from_utf8(&body).unwrap().contains("16 bytes"),
        "{body:?}"
    );
}
