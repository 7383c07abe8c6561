//! The tower layer (feature `tower`): [`LimitLayer`], [`LimitService`], [`ResponseFuture`],
//! [`LimitBody`], and the request keys [`HostKey`] and [`KeyExtractor`]. The behaviour is
//! documented on [`LimitLayer`], which is where users look.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::header::{HeaderValue, HOST, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::{Limiter, OwnedPermit, Rejected};

/// Where a [`LimitService`] takes a request's key from.
///
/// Implemented by [`HostKey`] (the default) and by every closure
/// `Fn(&Request<B>) -> String`. Implement it yourself to key without allocating, for example
/// on an origin id that an earlier layer put in the request's extensions.
///
/// # Examples
///
/// ```
/// use floodgate::{HostKey, KeyExtractor};
/// use http::Request;
///
/// let by_tenant = |req: &Request<()>| {
///     let tenant = req.headers().get("x-tenant").and_then(|v| v.to_str().ok());
///     format!("{}/{}", tenant.unwrap_or("-"), HostKey.key(req))
/// };
/// let req = Request::builder()
///     .uri("/")
///     .header("host", "api.example")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap();
/// assert_eq!(by_tenant.key(&req), "acme/api.example");
/// ```
pub trait KeyExtractor<B> {
    /// The limiter key of `req`.
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str>;
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> String,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        Cow::Owned(self(req))
    }
}

/// The default key: the host the request is for, in lower case, without port or trailing dot.
///
/// The host comes from the request target's authority when it has one (HTTP/2's
/// `:authority`, or an HTTP/1.1 request in absolute form, where RFC 9112 §3.2.2 says the
/// `Host` header must be ignored), and from the `Host` header otherwise. A request with
/// neither (or with a `Host` header that is not visible ASCII) gets the key
/// [`HostKey::FALLBACK`], `""`: all such requests share one limit.
///
/// The normalisation keeps one origin from getting many limits by spelling its name many
/// ways (`API.example`, `api.example.`, `api.example:0080`). It also means that one host on
/// two ports shares one limit; key with a closure if your origins are host *and* port. No
/// allocation unless the host has upper-case letters.
///
/// # Examples
///
/// ```
/// use floodgate::{HostKey, KeyExtractor};
/// use http::Request;
///
/// let req = |uri: &str, host: Option<&str>| {
///     let mut req = Request::builder().uri(uri);
///     if let Some(host) = host {
///         req = req.header("host", host);
///     }
///     req.body(()).unwrap()
/// };
/// assert_eq!(HostKey.key(&req("/", Some("API.Example:8080"))), "api.example");
/// assert_eq!(HostKey.key(&req("http://a.example/x", Some("b.example"))), "a.example");
/// assert_eq!(HostKey.key(&req("/", None)), HostKey::FALLBACK);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKey;

impl HostKey {
    /// The key of requests that name no host.
    pub const FALLBACK: &'static str = "";
}

impl<B> KeyExtractor<B> for HostKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        let host = match req.uri().authority() {
            Some(authority) => authority.host(),
            None => req
                .headers()
                .get(HOST)
                .and_then(|value| value.to_str().ok())
                .map_or(Self::FALLBACK, host_of),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        }
    }
}

/// The host part of a `Host` header value: without user info, port and surrounding spaces;
/// IPv6 literals keep their brackets, as in [`http::uri::Authority::host`].
fn host_of(value: &str) -> &str {
    let value = value.trim();
    let value = value.rsplit('@').next().unwrap_or(value);
    if value.starts_with('[') {
        // `]` is ASCII, so `i + 1` is a char boundary within the string.
        return match value.find(']') {
            Some(i) => &value[..i + 1],
            None => value,
        };
    }
    match value.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => value,
    }
}

/// A tower [`Layer`] that puts a [`Limiter`] in front of an HTTP service, for tower, hyper and
/// axum (feature `tower`, on by default).
///
/// # What it does with a request
///
/// 1. It takes the request's key: by default the origin host ([`HostKey`]), or whatever a
///    closure `Fn(&Request<B>) -> String` (or any [`KeyExtractor`]) returns.
/// 2. It asks the limiter for an [`OwnedPermit`] for that key.
///    - **Admitted:** the inner service is called, and the permit travels with the request:
///      first in the [`ResponseFuture`], then in the response's [`LimitBody`]. It is given back
///      when the body ends (its last frame, or an error), when the body is dropped unfinished
///      (the client went away), or when the response future is dropped before it finished
///      (a cancelled request). A request in flight is therefore counted until its response is
///      completely sent, not just until the handler returns its head.
///    - **Rejected:** the inner service is **not** called. The answer is `503 Service
///      Unavailable` with an empty body and, for rate rejections, a `Retry-After` header in
///      whole seconds (rounded up, at least 1). The [`Rejected`] itself is put in the
///      response's extensions, so an outer layer can log or count why.
///
/// # Sharing one limit
///
/// The layer holds a [`Limiter`], and [`Limiter`] clones share their counts; so every service
/// the layer makes, and every clone of those services (hyper clones the service for each
/// connection, and per request through `TowerToHyperService`), counts against the same limits.
/// Building a new `Limiter` per connection is the mistake this avoids by construction: build
/// the limiter once, at start-up.
///
/// # Readiness and panics
///
/// `poll_ready` is the inner service's. Nothing on the request path panics: [`HostKey`], the
/// limiter and the 503 builder have no panicking paths (a key closure of yours must not panic
/// either), and a [`ResponseFuture`]
/// polled again after it finished answers instead of panicking (a rejected one answers 503
/// again; an admitted one defers to the inner future).
///
/// # Examples
///
/// With hyper, the layer goes around the service that each connection serves; the limiter is
/// built once, outside the accept loop:
///
/// ```no_run
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use bytes::Bytes;
/// use floodgate::{Limiter, LimitLayer};
/// use http_body_util::Full;
/// use hyper::{body::Incoming, Request, Response};
/// use hyper_util::rt::TokioIo;
/// use hyper_util::service::TowerToHyperService;
/// use tower::{service_fn, Layer};
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder()
///     .max_inflight(64)
///     .max_rate(1000, Duration::from_secs(1))
///     .build()?;
/// let service = LimitLayer::new(limiter).layer(service_fn(|_req: Request<Incoming>| async {
///     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
/// }));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// loop {
///     let (stream, _) = listener.accept().await?;
///     let service = TowerToHyperService::new(service.clone()); // same limiter, same counts
///     tokio::spawn(async move {
///         let _ = hyper::server::conn::http1::Builder::new()
///             .serve_connection(TokioIo::new(stream), service)
///             .await;
///     });
/// }
/// # }
/// ```
///
/// With axum, `Router::new().route(…).layer(LimitLayer::new(limiter))`.
///
/// As a plain tower service, with a test clock so the rate window stays put:
///
/// ```
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Limiter, LimitLayer};
/// use http::{header::RETRY_AFTER, Request, Response, StatusCode};
/// use tower::{service_fn, Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = ManualClock::new(); // a real proxy leaves this out
/// let limiter = Limiter::builder()
///     .max_rate(2, Duration::from_secs(1))
///     .clock(&clock)
///     .build()
///     .unwrap();
/// let layer = LimitLayer::new(limiter);
/// let origin = service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new("hello".to_string()))
/// });
/// let service = layer.layer(origin);
/// let request = |host: &str| Request::builder().uri("/").header("host", host).body(String::new()).unwrap();
///
/// for _ in 0..2 {
///     let response = service.clone().oneshot(request("busy.example")).await.unwrap();
///     assert_eq!(response.status(), StatusCode::OK);
/// }
/// let response = service.clone().oneshot(request("busy.example")).await.unwrap();
/// assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(response.headers()[RETRY_AFTER], "2"); // 1.5 s, rounded up
///
/// let response = service.clone().oneshot(request("quiet.example")).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK, "other origins are not affected");
/// # }
/// ```
#[derive(Clone)]
pub struct LimitLayer<F = HostKey> {
    limiter: Limiter<String>,
    key: F,
}

impl LimitLayer {
    /// A layer that limits requests per origin host ([`HostKey`]) with `limiter`.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitLayer};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let layer = LimitLayer::new(limiter.clone());
    /// let _permit = limiter.try_acquire("api.example").unwrap();
    /// assert_eq!(layer.limiter().estimate("api.example").inflight, Some(1));
    /// ```
    pub fn new(limiter: Limiter<String>) -> Self {
        LimitLayer {
            limiter,
            key: HostKey,
        }
    }
}

impl<F> LimitLayer<F> {
    /// The same layer, keying requests with `key` instead: a closure
    /// `Fn(&Request<B>) -> String` or any [`KeyExtractor`].
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitLayer};
    /// use http::Request;
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let layer = LimitLayer::new(limiter).key_fn(|req: &Request<String>| {
    ///     req.uri().path().split('/').nth(1).unwrap_or("").to_owned()
    /// });
    /// # let _ = layer;
    /// ```
    pub fn key_fn<G>(self, key: G) -> LimitLayer<G> {
        LimitLayer {
            limiter: self.limiter,
            key,
        }
    }

    /// The limiter, for its [`heavy_hitters`](Limiter::heavy_hitters) and
    /// [`stats`](Limiter::stats).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitLayer};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let layer = LimitLayer::new(limiter);
    /// let _permit = layer.limiter().try_acquire("api.example").unwrap();
    /// assert_eq!(layer.limiter().stats().promoted, 0);
    /// ```
    pub fn limiter(&self) -> &Limiter<String> {
        &self.limiter
    }
}

impl<S, F: Clone> Layer<S> for LimitLayer<F> {
    type Service = LimitService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitService {
            inner,
            limiter: self.limiter.clone(),
            key: self.key.clone(),
        }
    }
}

impl<F> std::fmt::Debug for LimitLayer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitLayer")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

/// The service a [`LimitLayer`] makes: limits requests per key, answers 503 to the rejected
/// ones, and holds each admitted request's permit until its response body is done.
///
/// Clones share the limiter.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use floodgate::{Limiter, LimitService};
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter: Limiter<String> = Limiter::builder().max_inflight(8).build().unwrap();
/// let service = LimitService::new(
///     service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) }),
///     limiter.clone(),
/// );
/// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
/// let response = service.oneshot(request).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK);
/// // The body still holds the permit: api.example has one request in flight.
/// let _permits: Vec<_> = (0..7).map(|_| limiter.try_acquire("api.example").unwrap()).collect();
/// assert!(limiter.try_acquire("api.example").is_err());
/// drop(response);
/// assert!(limiter.try_acquire("api.example").is_ok());
/// # }
/// ```
#[derive(Clone)]
pub struct LimitService<S, F = HostKey> {
    inner: S,
    limiter: Limiter<String>,
    key: F,
}

impl<S> LimitService<S> {
    /// `inner`, limited per origin host ([`HostKey`]) by `limiter`.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let service = LimitService::new("inner", limiter);
    /// assert_eq!(*service.get_ref(), "inner");
    /// ```
    pub fn new(inner: S, limiter: Limiter<String>) -> Self {
        LimitService {
            inner,
            limiter,
            key: HostKey,
        }
    }
}

impl<S, F> LimitService<S, F> {
    /// The limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let service = LimitService::new((), limiter.clone());
    /// let _permit = limiter.try_acquire("api.example").unwrap();
    /// assert_eq!(service.limiter().estimate("api.example").inflight, Some(1));
    /// ```
    pub fn limiter(&self) -> &Limiter<String> {
        &self.limiter
    }

    /// The inner service.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let service = LimitService::new(vec![1, 2], limiter);
    /// assert_eq!(service.get_ref().len(), 2);
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let mut service = LimitService::new(vec![1, 2], limiter);
    /// service.get_mut().push(3);
    /// assert_eq!(service.get_ref(), &[1, 2, 3]);
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let service = LimitService::new(vec![1, 2], limiter);
    /// assert_eq!(service.into_inner(), vec![1, 2]);
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, F> std::fmt::Debug for LimitService<S, F>
where
    S: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitService")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

impl<S, F, ReqBody, ResBody> Service<Request<ReqBody>> for LimitService<S, F>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    F: KeyExtractor<ReqBody>,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let acquired = {
            let key = self.key.key(&req);
            self.limiter.try_acquire_owned(&*key)
        };
        let state = match acquired {
            Ok(permit) => State::Admitted {
                future: self.inner.call(req),
                permit: Some(permit),
            },
            Err(rejected) => State::Rejected {
                rejected: Some(rejected),
            },
        };
        ResponseFuture { state }
    }
}

pin_project! {
    /// The response future of a [`LimitService`]: the inner service's future and the
    /// request's permit, or a ready 503.
    ///
    /// Dropping it before it finishes (a cancelled request) gives the permit back.
    #[must_use = "futures do nothing unless polled; dropping this one gives its permit back"]
    pub struct ResponseFuture<Fut> {
        #[pin]
        state: State<Fut>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Fut> {
        Admitted {
            #[pin]
            future: Fut,
            // `None` once the response (and the permit with it) has been handed out.
            permit: Option<OwnedPermit<String>>,
        },
        Rejected {
            // `None` once the 503 has been handed out.
            rejected: Option<Rejected>,
        },
    }
}

impl<Fut, B, E> Future for ResponseFuture<Fut>
where
    Fut: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Admitted { future, permit } => {
                let result = ready!(future.poll(cx));
                // On an error the permit drops here: there is no body to hold it.
                let permit = permit.take();
                Poll::Ready(
                    result.map(|response| response.map(|body| LimitBody::new(body, permit))),
                )
            }
            StateProj::Rejected { rejected } => {
                Poll::Ready(Ok(service_unavailable(rejected.take())))
            }
        }
    }
}

impl<Fut> std::fmt::Debug for ResponseFuture<Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let admitted = matches!(self.state, State::Admitted { .. });
        f.debug_struct("ResponseFuture")
            .field("admitted", &admitted)
            .finish_non_exhaustive()
    }
}

/// The 503 for a rejected request: `Retry-After` where the wait is known, the [`Rejected`]
/// in the extensions.
fn service_unavailable<B>(rejected: Option<Rejected>) -> Response<LimitBody<B>> {
    let mut response = Response::new(LimitBody {
        inner: Inner::Rejected,
        permit: None,
    });
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    if let Some(rejected) = rejected {
        if let Some(wait) = rejected.retry_after {
            let seconds = HeaderValue::from(retry_after_secs(wait));
            response.headers_mut().insert(RETRY_AFTER, seconds);
        }
        response.extensions_mut().insert(rejected);
    }
    response
}

/// `Retry-After` is in whole seconds: round up, so a client that waits that long finds room,
/// and never say 0, which some clients take as "retry at once, in a loop".
fn retry_after_secs(wait: Duration) -> u64 {
    let seconds = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    seconds.max(1)
}

pin_project! {
    /// The response body of a [`LimitService`]: the inner body and the request's permit,
    /// which it gives back when the body ends, fails or is dropped. Empty for a 503.
    pub struct LimitBody<B> {
        #[pin]
        inner: Inner<B>,
        permit: Option<OwnedPermit<String>>,
    }
}

pin_project! {
    #[project = InnerProj]
    enum Inner<B> {
        Body {
            #[pin]
            body: B,
        },
        Rejected,
    }
}

impl<B> LimitBody<B> {
    fn new(body: B, permit: Option<OwnedPermit<String>>) -> Self {
        LimitBody {
            inner: Inner::Body { body },
            permit,
        }
    }

    /// Whether this body still holds its request's permit (the request still counts as in
    /// flight).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::{Limiter, LimitService};
    /// use http::{Request, Response};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new("hi".to_string())) });
    /// let service = LimitService::new(origin, limiter);
    /// let request = || Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let admitted = service.clone().oneshot(request()).await.unwrap();
    /// assert!(admitted.body().holds_permit());
    /// let rejected = service.oneshot(request()).await.unwrap();
    /// assert!(!rejected.body().holds_permit());
    /// # }
    /// ```
    pub fn holds_permit(&self) -> bool {
        self.permit.is_some()
    }
}

impl<B: Body> Body for LimitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        match this.inner.project() {
            InnerProj::Body { mut body } => {
                let frame = ready!(body.as_mut().poll_frame(cx));
                // Give the permit back at the end of the stream, on an error, and after the
                // last frame of a body that knows it is the last (servers then stop polling).
                let done = match &frame {
                    Some(Ok(_)) => body.is_end_stream(),
                    Some(Err(_)) | None => true,
                };
                if done {
                    *this.permit = None;
                }
                Poll::Ready(frame)
            }
            InnerProj::Rejected => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Body { body } => body.is_end_stream(),
            Inner::Rejected => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Body { body } => body.size_hint(),
            Inner::Rejected => SizeHint::with_exact(0),
        }
    }
}

impl<B> std::fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitBody")
            .field("rejected", &matches!(self.inner, Inner::Rejected))
            .field("holds_permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_never_zero() {
        let secs = |ms| retry_after_secs(Duration::from_millis(ms));
        assert_eq!(secs(0), 1);
        assert_eq!(secs(1), 1);
        assert_eq!(secs(1000), 1);
        assert_eq!(secs(1001), 2);
        assert_eq!(secs(1500), 2);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    fn key(uri: &str, host: Option<&[u8]>) -> String {
        let mut req = Request::builder().uri(uri);
        if let Some(host) = host {
            req = req.header(HOST, HeaderValue::from_bytes(host).unwrap());
        }
        HostKey.key(&req.body(()).unwrap()).into_owned()
    }

    #[test]
    fn host_key_normalises_spellings_of_one_host() {
        for host in [
            &b"api.example"[..],
            b"API.Example",
            b"api.example.",
            b"api.example:80",
            b"api.example:0080",
            b"user@api.example:443",
        ] {
            assert_eq!(key("/", Some(host)), "api.example", "{host:?}");
        }
        assert_eq!(key("/", Some(b"[::1]:8080")), "[::1]");
        assert_eq!(key("/", Some(b"[::1")), "[::1");
    }

    #[test]
    fn host_key_prefers_the_request_target_authority_to_the_host_header() {
        assert_eq!(
            key("http://A.example:8080/x", Some(b"b.example")),
            "a.example"
        );
        assert_eq!(key("http://a.example/x", None), "a.example");
    }

    #[test]
    fn host_key_falls_back_without_a_usable_host() {
        assert_eq!(key("/", None), HostKey::FALLBACK);
        assert_eq!(key("/", Some(b"\xffbad")), HostKey::FALLBACK);
        assert_eq!(key("/", Some(b"")), HostKey::FALLBACK);
    }

    struct NoopWake;
    impl std::task::Wake for NoopWake {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    #[test]
    fn a_rejected_future_polled_again_answers_503_again_instead_of_panicking() {
        let rejected = Rejected {
            reason: crate::Reason::Rate,
            estimate: 3,
            limit: 2,
            retry_after: Some(Duration::from_millis(1500)),
        };
        let mut future = std::pin::pin!(ResponseFuture::<
            std::future::Ready<Result<Response<http_body_util::Empty<bytes::Bytes>>, ()>>,
        > {
            state: State::Rejected {
                rejected: Some(rejected.clone()),
            },
        });
        let waker = std::task::Waker::from(std::sync::Arc::new(NoopWake));
        let mut cx = Context::from_waker(&waker);
        let Poll::Ready(Ok(first)) = future.as_mut().poll(&mut cx) else {
            panic!("a rejected request answers at once");
        };
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(first.headers()[RETRY_AFTER], "2");
        assert_eq!(first.extensions().get::<Rejected>(), Some(&rejected));
        assert!(first.body().is_end_stream());
        assert_eq!(first.body().size_hint().exact(), Some(0));
        let Poll::Ready(Ok(again)) = future.as_mut().poll(&mut cx) else {
            panic!("polled again, it answers again");
        };
        assert_eq!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(again.headers().get(RETRY_AFTER).is_none());
    }
}
