//! The tower layer (feature `tower`): [`LimitLayer`], [`LimitService`], [`ResponseFuture`],
//! [`LimitBody`], and the request keys [`HostKey`] and [`KeyExtractor`]. The behaviour is
//! documented on [`LimitLayer`], which is where users look.
//!
//! The default key, [`HostKey`], is the request's host in one canonical spelling (so a flooder
//! cannot respell its way to fresh limits) and never longer than [`HostKey::MAX_LEN`] bytes
//! (so a client cannot make the limiter keep big keys): hosts longer than a DNS name's 253
//! bytes are keyed by a prefix and a keyed hash of the whole host.

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv6Addr;
use std::pin::Pin;
use std::sync::OnceLock;
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

/// The default key: the host the request is for, in one canonical spelling, and at most
/// [`HostKey::MAX_LEN`] bytes long.
///
/// The host comes from the request target's authority when it has one (HTTP/2's
/// `:authority`, or an HTTP/1.1 request in absolute form, where RFC 9112 §3.2.2 says the
/// `Host` header must be ignored), and from the `Host` header otherwise. A request with
/// neither (or with a `Host` header that is not visible ASCII, or that names no host) gets the
/// key [`HostKey::FALLBACK`], `""`: all such requests share one limit.
///
/// # One host, one key
///
/// A client can spell one host many ways, and each spelling with a key of its own would be a
/// fresh limit for a flooder. So the key drops what does not change the host:
///
/// - surrounding spaces and tabs, user info (`user@`), and the port (`:443`, `:0080`, an
///   empty `:`): one host on two ports shares one limit (key with a closure if your origins
///   are host *and* port);
/// - all trailing dots (`api.example..`), including percent-encoded ones;
/// - case (`API.Example`), and the percent-encoding of unreserved characters (`%61pi.example`,
///   RFC 3986 §6.2.2.2); other escapes stay, with lower-case hex digits;
/// - for an IPv6 literal, bracketed or not (`[0:0::1]:8080`, `::1`): its spelling, which
///   becomes the RFC 5952 form in brackets (`[::1]`). An unbracketed literal has no port: its
///   last group is part of the address.
///
/// Merging spellings never helps an attacker, who can name any host anyway.
///
/// # Bounded size
///
/// The client chooses the host, so it must not choose the key's size (the limiter keeps up to
/// a fixed number of keys in its exact stage). A DNS name is at most 253 bytes: a host up to
/// that long is its own key. A longer host (no real name, so a probe or a flood) has the key
/// *its first 253 bytes*, `#`, and 32 hex digits of a 128-bit keyed hash of the whole host
/// (std's `RandomState`, with keys random per process). So every key is at most
/// [`MAX_LEN`](HostKey::MAX_LEN) (286) bytes, two long hosts that are not spellings of one
/// another get different keys even when they differ only in their last byte (but for a
/// 2⁻¹²⁸ chance no attacker can steer), and a long host's key, longer than 253 bytes, is
/// never a short host's.
///
/// Spaces, user info, port and trailing dots are cut off, not copied: the key allocates only
/// for a host with upper-case letters or a percent sign, an IPv6 literal not already in its
/// bracketed RFC 5952 form, or a host longer than 253 bytes.
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
/// assert_eq!(HostKey.key(&req("/", Some("api.example..:"))), "api.example");
/// assert_eq!(HostKey.key(&req("/", Some("[0:0::1]:8080"))), "[::1]");
/// assert_eq!(HostKey.key(&req("http://a.example/x", Some("b.example"))), "a.example");
/// assert_eq!(HostKey.key(&req("/", None)), HostKey::FALLBACK);
///
/// let long = "a".repeat(10_000);
/// let key = HostKey.key(&req("/", Some(&long))).into_owned();
/// assert_eq!(key.len(), HostKey::MAX_LEN);
/// assert!(key.starts_with(&long[..253]));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKey;

impl HostKey {
    /// The key of requests that name no host.
    pub const FALLBACK: &'static str = "";

    /// The longest key [`HostKey`] gives, in bytes: 253 (the longest DNS name), `#` and 32 hex
    /// digits of a hash, for hosts longer than 253 bytes.
    pub const MAX_LEN: usize = MAX_NAME_LEN + 1 + 32;
}

/// The longest DNS name (RFC 1035 §2.3.4, without the trailing dot): hosts up to this long are
/// their own keys.
const MAX_NAME_LEN: usize = 253;

impl<B> KeyExtractor<B> for HostKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        let host = match req.uri().authority() {
            Some(authority) => authority.host(),
            None => match req.headers().get(HOST).and_then(|v| v.to_str().ok()) {
                Some(value) => host_of(value),
                None => return Cow::Borrowed(Self::FALLBACK),
            },
        };
        key_of_host(host)
    }
}

/// The host part of a `Host` header value: without surrounding spaces, user info and port.
/// IPv6 literals keep their brackets, as in [`http::uri::Authority::host`]; an unbracketed one
/// (two colons or more) has no port to strip.
fn host_of(value: &str) -> &str {
    let value = value.trim_matches(is_space);
    let value = value.rsplit('@').next().unwrap_or(value);
    if value.starts_with('[') {
        // `]` is ASCII, so `i + 1` is a char boundary within the string.
        return match value.find(']') {
            Some(i) => value.get(..i + 1).unwrap_or(value),
            None => value,
        };
    }
    match value.split_once(':') {
        // Whatever follows the only colon is a port, valid or not: `h:x` is no other host.
        Some((host, port)) if !port.contains(':') => host,
        _ => value,
    }
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// The key of a host (user info and port already gone): see [`HostKey`].
fn key_of_host(host: &str) -> Cow<'_, str> {
    // Both sources are ASCII (`HeaderValue::to_str` and `Authority` ensure it); the code
    // below relies on it to push bytes as chars, so anything else shares the fallback.
    if !host.is_ascii() {
        return Cow::Borrowed(HostKey::FALLBACK);
    }
    let host = trim_host(host);
    if let Some(key) = ipv6_key(host) {
        return key;
    }
    let plain = !host.bytes().any(|b| b.is_ascii_uppercase() || b == b'%');
    if plain && host.len() <= MAX_NAME_LEN {
        return Cow::Borrowed(host);
    }
    let mut canonical = Canonical::new(host);
    let mut key = String::with_capacity(host.len().min(HostKey::MAX_LEN));
    key.extend(canonical.by_ref().take(MAX_NAME_LEN).map(char::from));
    if canonical.next().is_some() {
        let [a, b] = long_name_hash(host);
        // Writing to a String cannot fail.
        let _ = write!(key, "#{a:016x}{b:016x}");
    }
    Cow::Owned(key)
}

/// `host` without surrounding spaces and trailing dots, plain or percent-encoded (`%2e`): a
/// fully qualified name and its relative spelling are one host.
fn trim_host(host: &str) -> &str {
    let mut host = host.trim_matches(is_space);
    loop {
        host = host.trim_end_matches(|c| c == '.' || is_space(c));
        let Some(cut) = host.len().checked_sub(3) else {
            return host;
        };
        match (host.get(..cut), host.get(cut..)) {
            (Some(rest), Some(tail)) if tail.eq_ignore_ascii_case("%2e") => host = rest,
            _ => return host,
        }
    }
}

/// The key of an IPv6 literal, bracketed or (with two colons or more) not: the address in
/// RFC 5952 form, bracketed, as `Authority::host` spells it. `None` if `host` is no IPv6
/// literal.
fn ipv6_key(host: &str) -> Option<Cow<'_, str>> {
    let literal = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if host.bytes().filter(|&b| b == b':').nth(1).is_some() => host,
        None => return None,
    };
    let addr: Ipv6Addr = literal.parse().ok()?;
    if spelled_as(host, &addr) {
        Some(Cow::Borrowed(host))
    } else {
        Some(Cow::Owned(format!("[{addr}]")))
    }
}

/// Whether `host` is exactly `[addr]` in canonical form: a formatter that compares instead of
/// writing, so a canonical literal costs no allocation.
fn spelled_as(host: &str, addr: &Ipv6Addr) -> bool {
    struct Compare<'a>(&'a str);
    impl fmt::Write for Compare<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Compare(host);
    write!(rest, "[{addr}]").is_ok() && rest.0.is_empty()
}

/// The bytes of a host name as its key spells them: lower case, with percent-encoded
/// unreserved characters decoded (`%41` is `a`); other escapes stay, their hex digits in
/// lower case.
#[derive(Clone)]
struct Canonical<'a> {
    rest: &'a [u8],
}

impl<'a> Canonical<'a> {
    fn new(host: &'a str) -> Self {
        Canonical {
            rest: host.as_bytes(),
        }
    }
}

impl Iterator for Canonical<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if let [b'%', hi, lo, rest @ ..] = self.rest {
            if let (Some(hi), Some(lo)) = (hex_digit(*hi), hex_digit(*lo)) {
                let byte = (hi << 4) | lo;
                if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                    self.rest = rest;
                    return Some(byte.to_ascii_lowercase());
                }
            }
        }
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first.to_ascii_lowercase())
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    // `to_digit(16)` is below 16, so it fits a u8.
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// A 128-bit keyed hash of a host's canonical bytes: two 64-bit SipHash (std `RandomState`)
/// passes under one random per-process key, told apart by a leading tag.
fn long_name_hash(host: &str) -> [u64; 2] {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    let state = STATE.get_or_init(RandomState::new);
    let mut hashers = [state.build_hasher(), state.build_hasher()];
    for (hasher, tag) in hashers.iter_mut().zip([0u8, 1]) {
        hasher.write_u8(tag);
    }
    // Hash in chunks, without copying the host: the hash stays cheap for huge hosts.
    let mut chunk = [0u8; 64];
    let mut len = 0;
    for byte in Canonical::new(host) {
        chunk[len] = byte;
        len += 1;
        if len == chunk.len() {
            hashers.iter_mut().for_each(|h| h.write(&chunk));
            len = 0;
        }
    }
    hashers.iter_mut().for_each(|h| h.write(&chunk[..len]));
    hashers.map(|h| h.finish())
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
        for host in [
            &b"api.example.."[..],
            b"api.example:",
            b" api.example\t",
            b"%61pi.example",
            b"api.example%2E",
            b"u:p@API.example.:8080",
        ] {
            assert_eq!(key("/", Some(host)), "api.example", "{host:?}");
        }
        assert_eq!(key("/", Some(b"::1")), "[::1]");
        assert_eq!(key("http://[0:0::1]:8080/", None), "[::1]");
    }

    #[test]
    fn host_of_strips_spaces_user_info_and_any_port_but_no_ipv6_group() {
        assert_eq!(host_of(" \tuser:pw@A.example:8080 \t"), "A.example");
        assert_eq!(host_of("a@b@c.example"), "c.example");
        assert_eq!(host_of("a.example:"), "a.example");
        assert_eq!(host_of("a.example:http"), "a.example");
        assert_eq!(host_of("[::1]:8080"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("[::1"), "[::1");
        // Two colons or more: an unbracketed IPv6 literal, whose last group is no port.
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("1:2:3:4:5:6:7:8"), "1:2:3:4:5:6:7:8");
        assert_eq!(host_of(""), "");
        assert_eq!(host_of(":"), "");
        assert_eq!(host_of("@"), "");
    }

    #[test]
    fn trim_host_removes_every_trailing_dot_plain_or_encoded() {
        assert_eq!(trim_host("a.example"), "a.example");
        assert_eq!(trim_host("a.example."), "a.example");
        assert_eq!(trim_host("a.example..."), "a.example");
        assert_eq!(trim_host(" a.example%2E.%2e \t"), "a.example");
        assert_eq!(trim_host("a.example%2"), "a.example%2");
        assert_eq!(trim_host("...%2e"), "");
        assert_eq!(trim_host("%2"), "%2");
        assert_eq!(trim_host(""), "");
    }

    #[test]
    fn canonical_bytes_decode_unreserved_escapes_only_and_lower_case() {
        let canonical = |host| String::from_utf8(Canonical::new(host).collect()).unwrap();
        assert_eq!(canonical("%41Pi.Ex%61mple"), "api.example");
        assert_eq!(canonical("a%2D%2e%5F%7eb"), "a-._~b");
        // Reserved and non-ASCII escapes stay escaped, in one case.
        assert_eq!(canonical("a%2Fb%3A%40%C3%A9"), "a%2fb%3a%40%c3%a9");
        // Not escapes: kept as they are.
        assert_eq!(canonical("%"), "%");
        assert_eq!(canonical("%4"), "%4");
        assert_eq!(canonical("%zz%%41"), "%zz%a");
    }

    #[test]
    fn ipv6_literals_get_their_rfc_5952_form_in_brackets() {
        for host in [
            "[::1]",
            "[0:0::1]",
            "[0:0:0:0:0:0:0:1]",
            "::1",
            "0::0:1",
            "[::0001]",
        ] {
            assert_eq!(key_of_host(host), "[::1]", "{host}");
        }
        assert_eq!(key_of_host("[2001:DB8::A]"), "[2001:db8::a]");
        assert_eq!(key_of_host("2001:db8:0:0:0:0:0:a"), "[2001:db8::a]");
        // Already canonical: borrowed, no allocation.
        assert!(matches!(key_of_host("[2001:db8::a]"), Cow::Borrowed(_)));
        // Not IPv6: a name like any other.
        assert_eq!(key_of_host("[V1.Future]"), "[v1.future]");
        assert_eq!(key_of_host("[::1"), "[::1");
        assert_eq!(key_of_host("A:B:C"), "a:b:c");
        assert_eq!(ipv6_key("a.example"), None);
    }

    #[test]
    fn canonical_hosts_are_borrowed() {
        for host in [
            "api.example",
            "127.0.0.1",
            "[::1]",
            &"a".repeat(MAX_NAME_LEN),
        ] {
            assert!(
                matches!(key_of_host(host), Cow::Borrowed(k) if k == host),
                "{host}"
            );
        }
        assert!(matches!(key_of_host("API.example"), Cow::Owned(_)));
    }

    #[test]
    fn a_long_host_is_keyed_by_its_prefix_and_a_hash_of_all_of_it() {
        assert_eq!(HostKey::MAX_LEN, 286, "the docs say 286");
        let host = "a".repeat(10_000);
        let key = key_of_host(&host);
        assert_eq!(key.len(), HostKey::MAX_LEN);
        let (prefix, hash) = key.split_at(MAX_NAME_LEN);
        assert_eq!(prefix, &host[..MAX_NAME_LEN]);
        let hex = hash.strip_prefix('#').unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // The same host, respelled, has the same key; a host one byte longer does not.
        assert_eq!(key_of_host(&format!("{}..", host.to_uppercase())), key);
        assert_eq!(key_of_host(&format!("%61{}", &host[1..])), key);
        assert_ne!(key_of_host(&format!("{host}a")), key);
        // Exactly at the bound: its own key; one byte over: hashed.
        assert_eq!(key_of_host(&host[..MAX_NAME_LEN]), &host[..MAX_NAME_LEN]);
        assert_eq!(
            key_of_host(&host[..MAX_NAME_LEN + 1]).len(),
            HostKey::MAX_LEN
        );
        // Long only before decoding: short once decoded, so its own key.
        let encoded = "%61".repeat(MAX_NAME_LEN);
        assert_eq!(key_of_host(&encoded), host[..MAX_NAME_LEN]);
    }

    #[test]
    fn the_long_host_hash_covers_every_byte() {
        let base = "b".repeat(1_000);
        let key = key_of_host(&base);
        for i in [0, MAX_NAME_LEN, 500, 999] {
            let mut other = base.clone().into_bytes();
            other[i] = b'c';
            let other = String::from_utf8(other).unwrap();
            assert_ne!(key_of_host(&other), key, "changed byte {i}");
        }
        // Chunking does not matter: hosts around the 64-byte chunk size hash apart.
        let keys: std::collections::HashSet<_> = (MAX_NAME_LEN + 1..MAX_NAME_LEN + 200)
            .map(|len| key_of_host(&base[..len]).into_owned())
            .collect();
        assert_eq!(keys.len(), 199);
    }

    #[test]
    fn odd_hosts_neither_panic_nor_exceed_the_bound() {
        let long_colons = ":".repeat(5_000);
        let long_brackets = format!("[{}]", "1:".repeat(5_000));
        let long_escapes = "%".repeat(5_000);
        for host in [
            "",
            ".",
            "..",
            "%",
            "%2",
            "%2e",
            "%2E%2e",
            "[",
            "]",
            "[]",
            "[.]",
            ":",
            "::",
            "@",
            "[::1]:",
            "[::1]]",
            "[[::1]]",
            ":::",
            "\t",
            " ",
            "é.example",
            "a\u{0}b",
            &long_colons,
            &long_brackets,
            &long_escapes,
        ] {
            let key = key_of_host(host);
            assert!(key.len() <= HostKey::MAX_LEN, "{host:?}");
            let key = key_of_host(host_of(host));
            assert!(key.len() <= HostKey::MAX_LEN, "{host:?}");
        }
        assert_eq!(key_of_host("é.example"), HostKey::FALLBACK);
        assert_eq!(key_of_host("...%2e"), HostKey::FALLBACK);
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
