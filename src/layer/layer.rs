//! [`LimitLayer`]: the tower layer that wraps a service in a [`LimitService`].

use tower_layer::Layer;

use super::{HostKey, LimitService};
#[cfg(doc)]
use super::{KeyExtractor, LimitBody, ResponseFuture};
use crate::Limiter;
#[cfg(doc)]
use crate::{OwnedPermit, Rejected};

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
