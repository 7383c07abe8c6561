#![cfg(feature = "tower")]
//! `LimitLayer` as an axum layer: `Router::new().route(…).layer(LimitLayer::new(limiter))`
//! compiles (the service's error is `Infallible`, its body `LimitBody<axum::body::Body>`, which
//! axum turns into a response), answers 503 + `Retry-After` over the limits, and holds the
//! request's permit until axum's response body has been read to the end.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use floodgate::clock::ManualClock;
use floodgate::{LimitLayer, Limiter, Reason, Rejected};
use http::header::RETRY_AFTER;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

fn app(limiter: Limiter<String>) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(LimitLayer::new(limiter))
}

fn request(host: &str) -> Request<Body> {
    Request::builder()
        .uri("/")
        .header("host", host)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn rate_limit_answers_503_with_retry_after_through_axum() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(2, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let app = app(limiter);
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
    let app = app(limiter.clone());

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
