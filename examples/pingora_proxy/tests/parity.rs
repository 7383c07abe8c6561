//! This proxy and the crate's tower layer give the same answers on the same requests: the
//! same key for every spelling of a host and for every client, and for every request the same
//! status, `Retry-After`, `RateLimit-Policy`, `RateLimit`, `Content-Type` and body, whatever
//! the settings (429 or 503, a body of the operator's, costs in body bytes, the fields on
//! admitted responses, policy names).
//!
//! Each side has a limiter of its own, built alike on one `ManualClock`, and is sent the same
//! requests in the same order: the same decisions follow.

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use floodgate::clock::ManualClock;
use floodgate::fields::client::{ClientAddr, Forwarding};
use floodgate::fields::cost::UnknownLength;
use floodgate::fields::ratelimit::{Policies, PolicyNames};
use floodgate::layer::{
    BodyBytes, ClientKey, HostKey, KeyExtractor, LimitLayer, LimitService, RefusalResponse,
    Refused as LayerRefused, Unkeyed,
};
use floodgate::{Limiter, Reason, Rejected};
use floodgate_pingora_proxy::{
    client_key, problem_json, refusal_answer, request_key, words, CostBy, Decision, KeyBy,
    LimitedProxy, RefusalBody, Refused, Settings, Unidentified, TEXT_PLAIN,
};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pingora::http::RequestHeader;
use tower::{service_fn, Layer, Service, ServiceExt};

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

#[test]
fn both_key_every_client_alike_spoofed_or_forwarded() {
    let addrs = ClientAddr::new()
        .trust("10.0.0.0/8".parse().unwrap())
        .trust("2001:db8:ffff::/48".parse().unwrap());
    let layer_key = ClientKey::new(addrs.clone());
    // (peer, X-Forwarded-For lines)
    let cases: &[(Option<&str>, &[&str])] = &[
        // Straight from a client: what it forwards is its own claim, never read.
        (Some("198.51.100.4:1"), &["10.1.1.1, 192.0.2.9"]),
        (Some("198.51.100.4:2"), &["203.0.113.7"]),
        (Some("[2001:db8:1:2::99]:3"), &[]),
        (Some("[::ffff:192.0.2.1]:4"), &[]),
        // Behind the balancer: the rightmost address it does not trust.
        (Some("10.0.0.1:5"), &["6.6.6.6, 192.0.2.7", "10.0.0.5"]),
        (Some("10.0.0.1:6"), &["10.0.0.9, 10.0.0.5"]),
        (Some("10.0.0.1:7"), &[]),
        (Some("[2001:db8:ffff::1]:8"), &["2001:db8:1:3::1"]),
        // Nobody to key: a forwarded entry that is no address, or no peer at all.
        (Some("10.0.0.1:9"), &["192.0.2.7, unknown"]),
        (None, &["192.0.2.7"]),
    ];
    for (peer, lines) in cases {
        let peer: Option<SocketAddr> = peer.map(|p| p.parse().unwrap());
        let mut pingora = RequestHeader::build("GET", b"/", None).unwrap();
        let mut tower = Request::builder().body(()).unwrap();
        for line in *lines {
            pingora.append_header("x-forwarded-for", *line).unwrap();
            let value = HeaderValue::from_str(line).unwrap();
            tower.headers_mut().append("x-forwarded-for", value);
        }
        if let Some(peer) = peer {
            tower.extensions_mut().insert(peer);
        }
        let proxy = client_key(&addrs, peer.map(|p| p.ip()), &pingora);
        let layer = layer_key.key(&tower);
        assert_eq!(
            proxy.as_deref().ok(),
            layer.as_deref().ok(),
            "{peer:?} {lines:?}"
        );
    }
}

/// A request body: none, of a declared length, or chunked (no length before it is read).
#[derive(Debug, Clone)]
enum Sent {
    Nothing,
    Sized(Bytes),
    Chunked(Bytes),
}

/// A request both sides are sent: its host, its peer, its `X-Forwarded-For` lines, its body.
#[derive(Debug, Clone)]
struct Req {
    host: &'static str,
    peer: Option<&'static str>,
    forwarded: &'static [&'static str],
    body: Sent,
}

impl Req {
    fn get(host: &'static str) -> Req {
        Req {
            host,
            peer: Some("192.0.2.1:4711"),
            forwarded: &[],
            body: Sent::Nothing,
        }
    }

    fn from(peer: Option<&'static str>, forwarded: &'static [&'static str]) -> Req {
        Req {
            peer,
            forwarded,
            ..Req::get("api.example")
        }
    }

    fn post(body: Sent) -> Req {
        Req {
            body,
            ..Req::get("api.example")
        }
    }

    fn peer(&self) -> Option<SocketAddr> {
        self.peer.map(|p| p.parse().unwrap())
    }

    fn pingora(&self) -> RequestHeader {
        let method = if matches!(self.body, Sent::Nothing) {
            "GET"
        } else {
            "POST"
        };
        let mut request = RequestHeader::build(method, b"/", None).unwrap();
        request.insert_header("host", self.host).unwrap();
        for line in self.forwarded {
            request.append_header("x-forwarded-for", *line).unwrap();
        }
        match &self.body {
            Sent::Nothing => {}
            Sent::Sized(bytes) => {
                let length = bytes.len().to_string();
                request.insert_header("content-length", length).unwrap();
            }
            Sent::Chunked(_) => {
                request
                    .insert_header("transfer-encoding", "chunked")
                    .unwrap();
            }
        }
        request
    }

    /// The same request as a server hands it to a tower service: the peer in its extensions,
    /// the body's length in its size hint.
    fn tower(&self) -> Request<TestBody> {
        let mut request = Request::builder()
            .method(if matches!(self.body, Sent::Nothing) {
                "GET"
            } else {
                "POST"
            })
            .uri("/")
            .header("host", self.host);
        for line in self.forwarded {
            request = request.header("x-forwarded-for", *line);
        }
        let body = match &self.body {
            Sent::Nothing => TestBody(Some(Bytes::new()), true),
            Sent::Sized(bytes) => {
                request = request.header("content-length", bytes.len());
                TestBody(Some(bytes.clone()), true)
            }
            Sent::Chunked(bytes) => {
                request = request.header("transfer-encoding", "chunked");
                TestBody(Some(bytes.clone()), false)
            }
        };
        let mut request = request.body(body).unwrap();
        if let Some(peer) = self.peer() {
            request.extensions_mut().insert(peer);
        }
        request
    }
}

/// A body of one frame, whose size is known (`.1`) or not (chunked).
struct TestBody(Option<Bytes>, bool);

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let data = self.0.take().filter(|b| !b.is_empty());
        Poll::Ready(data.map(|d| Ok(Frame::data(d))))
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.0, self.1) {
            (Some(bytes), true) => SizeHint::with_exact(bytes.len() as u64),
            (None, true) => SizeHint::with_exact(0),
            (_, false) => SizeHint::default(),
        }
    }
}

/// What a client sees of an answer: its status, the fields compared, its body. An admitted
/// request is the origin's `200 ok`.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: u16,
    fields: Vec<(&'static str, String)>,
    body: Option<(String, Bytes)>,
}

const COMPARED: [&str; 3] = ["retry-after", "ratelimit-policy", "ratelimit"];

/// The proxy's answer to `req`, as its `request_filter` and `response_filter` write it.
fn proxy_answer(proxy: &LimitedProxy, req: &Req) -> Seen {
    match proxy.decide(&req.pingora(), req.peer().map(|p| p.ip())) {
        Decision::Admit(admitted) => {
            let fields = admitted.fields.clone().map_or_else(Vec::new, |f| {
                let named = [("ratelimit-policy", f.policy), ("ratelimit", f.ratelimit)];
                named
                    .into_iter()
                    .filter_map(|(name, value)| Some((name, value?)))
                    .collect()
            });
            drop(admitted); // the request is over
            Seen {
                status: 200,
                fields,
                body: None,
            }
        }
        Decision::Unlimited => Seen {
            status: 200,
            fields: Vec::new(),
            body: None,
        },
        Decision::Answer(answer) => {
            let head = answer.header().unwrap();
            let fields = COMPARED
                .into_iter()
                .filter_map(|name| {
                    let value = head.headers.get(name)?;
                    Some((name, value.to_str().unwrap().to_owned()))
                })
                .collect();
            let length = head.headers.get("content-length").unwrap();
            let body = answer.body.map(|(ct, body)| (ct.to_owned(), body));
            let sent = body.as_ref().map_or(0, |(_, b)| b.len());
            assert_eq!(length.to_str().unwrap(), sent.to_string());
            Seen {
                status: answer.status,
                fields,
                body,
            }
        }
    }
}

/// The layer's answer to `req`, its body read to the end (and its permit given back).
async fn layer_answer<S, B>(service: &mut S, req: &Req) -> Seen
where
    S: Service<Request<TestBody>, Response = Response<B>, Error = Infallible>,
    B: Body,
    B::Data: Buf,
    B::Error: std::fmt::Debug,
{
    let response = service
        .ready()
        .await
        .unwrap()
        .call(req.tower())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let fields = COMPARED
        .into_iter()
        .filter_map(|name| {
            let value = response.headers().get(name)?;
            Some((name, value.to_str().unwrap().to_owned()))
        })
        .collect();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut body = Box::pin(response.into_body());
    let mut bytes = Vec::new();
    while let Some(frame) = poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        if let Ok(mut data) = frame.unwrap().into_data() {
            while data.has_remaining() {
                let chunk = data.chunk().to_vec();
                data.advance(chunk.len());
                bytes.extend(chunk);
            }
        }
    }
    let body = match (status, content_type) {
        (200, _) => None, // the origin's
        (_, Some(ct)) => Some((ct, Bytes::from(bytes))),
        (_, None) => {
            assert!(bytes.is_empty(), "a body without a type");
            None
        }
    };
    Seen {
        status,
        fields,
        body,
    }
}

/// The origin: `200 ok` to every request.
fn origin<X>() -> impl Service<Request<X>, Response = Response<String>, Error = Infallible> + Clone
{
    service_fn(|_: Request<X>| async { Ok::<_, Infallible>(Response::new("ok".to_owned())) })
}

/// The layer's refusal for the proxy's settings.
fn layer_refusal(settings: &Settings) -> RefusalResponse {
    let refusal = match settings.status {
        429 => RefusalResponse::too_many_requests(),
        _ => RefusalResponse::service_unavailable(),
    };
    let code = StatusCode::from_u16(settings.cost_over_limit).unwrap();
    let refusal = refusal
        .cost_over_limit(code)
        .unwrap()
        .ratelimit_fields(settings.ratelimit_fields);
    match settings.body.clone() {
        RefusalBody::Empty => refusal,
        RefusalBody::Text(text) => refusal.body(HeaderValue::from_static(TEXT_PLAIN), text),
        RefusalBody::Made(make) => refusal.body_fn(move |r: &LayerRefused<'_>| {
            let refused = Refused {
                rejected: r.rejected,
                key: r.key,
                policy: r.policy,
                status: r.status.as_u16(),
                retry_after: r.retry_after,
            };
            let (ct, body) = make(&refused)?;
            Some((HeaderValue::from_static(ct), body))
        }),
    }
}

/// A limiter of 3 requests (or cost units) per 1.5 s and 2 in flight per key on `clock`.
fn limiter(clock: &ManualClock, rate: u32, inflight: u32) -> Limiter<String> {
    Limiter::builder()
        .max_rate(rate, Duration::from_millis(1_500))
        .max_inflight(inflight)
        .clock(clock)
        .build()
        .unwrap()
}

/// Sends `requests` to the proxy and to the layer, each with its own limiter from `limiter`,
/// as `settings` say, and checks that every answer is the same. Returns the answers.
async fn compare(
    settings: Settings,
    limiter: impl Fn() -> Limiter<String>,
    requests: &[Req],
) -> Vec<Seen> {
    let proxy =
        LimitedProxy::with_settings(limiter(), "127.0.0.1:9".parse().unwrap(), settings.clone());
    let layer = LimitLayer::new(limiter())
        .refusal(layer_refusal(&settings))
        .ratelimit_headers_on_admitted(settings.ratelimit_on_admitted)
        .policy_names(settings.names.clone())
        .retry_after_jitter(Duration::from_secs(settings.jitter_secs))
        .unwrap();
    let mut seen = Vec::new();
    // The layer's key and cost are types: one service for each combination.
    macro_rules! each {
        ($layer:expr, $body:ty) => {{
            let mut service = $layer.layer(origin::<$body>());
            for req in requests {
                let proxy = proxy_answer(&proxy, req);
                let layer = layer_answer(&mut service, req).await;
                assert_eq!(proxy, layer, "{req:?} under {settings:?}");
                seen.push(proxy);
            }
        }};
    }
    match (&settings.key, settings.cost) {
        (KeyBy::Host, CostBy::Unit) => each!(layer, TestBody),
        (KeyBy::Host, CostBy::BodyBytes(unknown)) => each!(
            layer.cost_fn(BodyBytes::new(unknown)),
            floodgate::layer::ChargedBody<TestBody>
        ),
        (KeyBy::Client(addrs, unidentified), CostBy::Unit) => {
            let then = match unidentified {
                Unidentified::Refuse => Unkeyed::Refuse,
                Unidentified::Serve => Unkeyed::Serve,
            };
            each!(
                layer.key_fn(ClientKey::new(addrs.clone()).unidentified(then)),
                TestBody
            )
        }
        (KeyBy::Client(..), CostBy::BodyBytes(_)) => unimplemented!("not compared here"),
    }
    seen
}

fn statuses(seen: &[Seen]) -> Vec<u16> {
    seen.iter().map(|s| s.status).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn both_answer_429_with_the_same_body_static_or_made_from_the_refusal() {
    let bodies = [
        RefusalBody::Empty,
        RefusalBody::Text(Bytes::from_static(b"slow down\n")),
        RefusalBody::Made(words),
        RefusalBody::Made(problem_json),
    ];
    for body in bodies {
        for (status, ratelimit_fields) in [(429, true), (503, false)] {
            let settings = Settings {
                status,
                body: body.clone(),
                ratelimit_fields,
                ..Settings::default()
            };
            let clock = ManualClock::new();
            let requests = vec![Req::get("api.example"); 5];
            let seen = compare(settings, || limiter(&clock, 3, 10), &requests).await;
            assert_eq!(statuses(&seen), [200, 200, 200, status, status], "{body:?}");
            let refused = &seen[4];
            let has = |name| refused.fields.iter().any(|(n, _)| *n == name);
            assert!(has("retry-after"));
            assert_eq!(has("ratelimit"), ratelimit_fields);
            assert_eq!(
                refused.body.is_some(),
                !matches!(body, RefusalBody::Empty),
                "{refused:?}"
            );
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn both_key_clients_alike_spoofed_forwarded_or_unidentified() {
    let addrs = ClientAddr::new().trust("10.0.0.0/8".parse().unwrap());
    let requests = [
        // One client spoofing three X-Forwarded-For: one key, its second request refused.
        Req::from(Some("198.51.100.4:1"), &["192.0.2.1"]),
        Req::from(Some("198.51.100.4:2"), &["192.0.2.2"]),
        Req::from(Some("198.51.100.4:3"), &["192.0.2.3"]),
        // Three clients behind the trusted balancer: one key each.
        Req::from(Some("10.0.0.1:1"), &["6.6.6.6, 192.0.2.1"]),
        Req::from(Some("10.0.0.1:2"), &["6.6.6.6, 192.0.2.2"]),
        Req::from(Some("10.0.0.1:3"), &["192.0.2.1", "10.0.0.7"]),
        // Nobody to key.
        Req::from(None, &[]),
        Req::from(Some("10.0.0.1:4"), &["unknown"]),
    ];
    for (then, unkeyed) in [(Unidentified::Refuse, 500), (Unidentified::Serve, 200)] {
        let settings = Settings {
            key: KeyBy::Client(addrs.clone(), then),
            status: 429,
            ..Settings::default()
        };
        let clock = ManualClock::new();
        let seen = compare(settings, || limiter(&clock, 1, 10), &requests).await;
        assert_eq!(
            statuses(&seen),
            [200, 429, 429, 200, 200, 429, unkeyed, unkeyed]
        );
        assert_eq!(seen[6].body, None, "an unkeyed 500 is bare");
    }
    let forwarded = ClientAddr::new()
        .trust("10.0.0.0/8".parse().unwrap())
        .forwarding(Forwarding::Forwarded);
    let settings = Settings {
        key: KeyBy::Client(forwarded, Unidentified::Refuse),
        ..Settings::default()
    };
    let clock = ManualClock::new();
    let requests = [
        Req::from(Some("10.0.0.1:1"), &["for=192.0.2.1"]),
        Req::from(Some("10.0.0.1:1"), &["for=\"192.0.2.1:80\""]),
    ];
    let seen = compare(settings, || limiter(&clock, 1, 10), &requests).await;
    assert_eq!(statuses(&seen), [200, 503]);
}

#[tokio::test(flavor = "current_thread")]
async fn both_charge_body_bytes_alike_with_413_and_411() {
    let body = |n: usize| Bytes::from(vec![b'x'; n]);
    let requests = [
        Req::post(Sent::Sized(body(60))),
        // 60 + 60 over the 100 bytes per interval.
        Req::post(Sent::Sized(body(60))),
        // Alone over any limit: never admitted, 413 without Retry-After.
        Req::post(Sent::Sized(body(500))),
        // No body: 1.
        Req::get("api.example"),
        // No length: refused with 411, or charged.
        Req::post(Sent::Chunked(body(10))),
    ];
    for (unknown, chunked) in [
        (UnknownLength::Refuse, 411),
        (UnknownLength::Charge(30), 200),
        (UnknownLength::Charge(50), 503),
    ] {
        for (body, cost_over_limit) in [(RefusalBody::Made(words), 413), (RefusalBody::Empty, 422)]
        {
            let settings = Settings {
                cost: CostBy::BodyBytes(unknown),
                cost_over_limit,
                body,
                ..Settings::default()
            };
            let clock = ManualClock::new();
            let seen = compare(settings, || limiter(&clock, 100, 1_000), &requests).await;
            assert_eq!(
                statuses(&seen),
                [200, 503, cost_over_limit, 200, chunked],
                "{unknown:?}"
            );
            let never = &seen[2];
            assert!(
                never
                    .fields
                    .iter()
                    .all(|(name, _)| *name == "ratelimit-policy"),
                "{never:?}"
            );
            assert!(never.body.is_some(), "{never:?}");
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn both_send_the_fields_on_admitted_responses_under_the_policies_names() {
    for names in [
        PolicyNames::DEFAULT,
        PolicyNames::new("host-rate", "host \"inflight\"").unwrap(),
    ] {
        let settings = Settings {
            ratelimit_on_admitted: true,
            names: names.clone(),
            body: RefusalBody::Made(problem_json),
            ..Settings::default()
        };
        let clock = ManualClock::new();
        let requests = vec![Req::get("api.example"); 4];
        let seen = compare(settings, || limiter(&clock, 3, 10), &requests).await;
        assert_eq!(statuses(&seen), [200, 200, 200, 503]);
        let first = &seen[0].fields;
        assert_eq!(first.len(), 2, "{first:?}");
        assert!(first[0]
            .1
            .contains(&format!("{};q=3", quoted(names.rate()))));
        let refused = seen[3].body.as_ref().unwrap();
        let body = std::str::from_utf8(&refused.1).unwrap();
        assert!(body.contains(&names.rate().replace('"', "\\\"")), "{body}");
    }
    let off = Settings::default();
    let clock = ManualClock::new();
    let seen = compare(off, || limiter(&clock, 3, 10), &[Req::get("a.example")]).await;
    assert!(seen[0].fields.is_empty(), "off by default");
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\\\""))
}

/// The refusal fields of a response head, as text: the ones both answers must agree on.
fn fields_of<'a>(get: impl Fn(&str) -> Option<&'a [u8]>) -> Vec<(&'static str, String)> {
    COMPARED
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

    let settings = Settings::default();
    let answer = refusal_answer(
        &rejected,
        "api.example",
        &Policies::of(limiter, None),
        &settings,
    );
    let proxy = answer.header().unwrap();
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
