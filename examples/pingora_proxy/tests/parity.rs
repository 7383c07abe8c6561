//! This proxy and the crate's tower layer give the same answers on the same requests: the
//! same key for every spelling of a host, and for a refusal the same status, `Retry-After`,
//! `RateLimit-Policy` and `RateLimit`.

use std::convert::Infallible;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::fields::ratelimit::Policies;
use floodgate::layer::{HostKey, KeyExtractor, LimitService};
use floodgate::{Limiter, Reason, Rejected};
use floodgate_pingora_proxy::{refusal_header, request_key};
use http::{HeaderValue, Request, Response};
use pingora::http::{RequestHeader, ResponseHeader};
use tower::{service_fn, ServiceExt};

/// Requests as (the target's authority, the `Host` field's bytes).
const REQUESTS: &[(Option<&str>, Option<&[u8]>)] = &[
    (None, Some(b"api.example")),
    (None, Some(b"API.Example:8080")),
    (None, Some(b"api.example.")),
    (None, Some(b"api.example..:")),
    (None, Some(b" user@api.example:443\t")),
    (None, Some(b"%61pi.example%2E")),
    (None, Some(b"[0:0::1]:8080")),
    (None, Some(b"::1")),
    (None, Some(b"[::1")),
    (None, Some(b"\xffbad")),
    (None, Some(b"")),
    (None, None),
    (Some("A.example:8080"), Some(b"b.example")),
    (Some("u@[0::1]:80"), None),
    (Some("a.example"), None),
];

fn pingora_request(authority: Option<&str>, host: Option<&[u8]>) -> RequestHeader {
    let mut request = RequestHeader::build("GET", b"/", None).unwrap();
    if let Some(authority) = authority {
        request.set_uri(format!("http://{authority}/x").parse().unwrap());
    }
    if let Some(host) = host {
        request
            .insert_header("host", HeaderValue::from_bytes(host).unwrap())
            .unwrap();
    }
    request
}

fn tower_request(authority: Option<&str>, host: Option<&[u8]>) -> Request<()> {
    let uri = match authority {
        Some(authority) => format!("http://{authority}/x"),
        None => "/".to_owned(),
    };
    let mut request = Request::builder().uri(uri);
    if let Some(host) = host {
        request = request.header("host", HeaderValue::from_bytes(host).unwrap());
    }
    request.body(()).unwrap()
}

#[test]
fn both_key_every_spelling_of_a_host_alike() {
    let long = "A".repeat(1_000);
    let mut requests = REQUESTS.to_vec();
    requests.push((None, Some(long.as_bytes())));
    for (authority, host) in requests {
        let proxy = request_key(&pingora_request(authority, host));
        let request = tower_request(authority, host);
        let layer = HostKey.key(&request).expect("every request has a host key");
        assert_eq!(proxy, layer, "authority {authority:?}, host {host:?}");
    }
}

/// The refusal fields of a response head, as text: the ones both answers must agree on.
fn fields_of<'a>(get: impl Fn(&str) -> Option<&'a [u8]>) -> Vec<(&'static str, String)> {
    ["retry-after", "ratelimit-policy", "ratelimit"]
        .into_iter()
        .filter_map(|name| Some((name, String::from_utf8_lossy(get(name)?).into_owned())))
        .collect()
}

/// Refuses one request through the layer, then answers the layer's own decision (the
/// `Rejected` in its response) as the proxy does: the two heads must agree.
async fn refuse_alike(limiter: &Limiter<String>, expected: Reason) {
    let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let service = LimitService::new(origin, limiter.clone());
    let layer = service
        .oneshot(tower_request(None, Some(b"API.example:80")))
        .await
        .unwrap();
    let rejected = layer
        .extensions()
        .get::<Rejected>()
        .expect("refused")
        .clone();
    assert_eq!(rejected.reason, expected);

    let proxy: ResponseHeader = refusal_header(&rejected, &Policies::of(limiter, None)).unwrap();
    assert_eq!(proxy.status.as_u16(), layer.status().as_u16());
    let proxy_fields = fields_of(|name| proxy.headers.get(name).map(|v| v.as_bytes()));
    let layer_fields = fields_of(|name| layer.headers().get(name).map(|v| v.as_bytes()));
    assert_eq!(proxy_fields, layer_fields, "{expected:?}");
    assert!(
        proxy_fields.iter().any(|(name, _)| *name == "ratelimit"),
        "the fields compared are there: {proxy_fields:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn both_refuse_a_rate_and_an_inflight_refusal_alike() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(3, Duration::from_millis(1_500))
        .max_inflight(2)
        .clock(&clock)
        .build()
        .unwrap();

    // In flight: two held, the third refused (no Retry-After: the wait is unknown).
    let held: Vec<_> = (0..2)
        .map(|_| limiter.try_acquire_owned("api.example").unwrap())
        .collect();
    refuse_alike(&limiter, Reason::Inflight).await;
    drop(held);

    // Rate: the third request of the interval was admitted, the next is over the limit.
    clock.advance(Duration::from_millis(700));
    drop(limiter.try_acquire("api.example"));
    refuse_alike(&limiter, Reason::Rate).await;
}
