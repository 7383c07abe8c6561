//! [`LimitLayer`]: the tower layer that wraps a service in a [`LimitService`].

use std::time::Duration;

use tower_layer::Layer;

use super::settings::{RefusalResponse, ResponseSettings};
#[cfg(doc)]
use super::{
    future::ResponseFuture, BodyBytes, CostExtractor, KeyExtractor, LimitBody, LimitsExtractor,
    RejectedKey,
};
use super::{HostKey, LimitService, LimiterDefaults, RefuseAtOnce, UnitCost, WaitUpTo};
use crate::fields::ratelimit::PolicyNames;
use crate::{ConfigError, Limiter};
#[cfg(doc)]
use crate::{Limits, OwnedPermit, Reason, Rejected};

/// A tower [`Layer`] that puts a [`Limiter`] in front of an HTTP service, for tower, hyper and
/// axum (feature `tower`, on by default).
///
/// # What it does with a request
///
/// 1. It takes the request's key: by default the origin host ([`HostKey`]), or whatever a
///    closure `Fn(&Request<B>) -> String` (or any [`KeyExtractor`], such as
///    [`ClientKey`](super::ClientKey)) returns. A request its extractor cannot key (a client
///    key's request without a peer address) is refused with an empty `500 Internal Server
///    Error` carrying the [`NoKey`](super::NoKey) in its extensions, or served unlimited, as
///    the extractor says ([`Unkeyed`](super::Unkeyed)); the layer logs why, once per cause.
/// 2. It takes the request's [`Limits`]: by default the limiter's ([`Limiter::limits`], read
///    per request, so a [`Limiter::set_limits`] applies from the next request on), or whatever
///    a closure `Fn(&Request<B>) -> Limits` given to [`limits_fn`](Self::limits_fn) (or any
///    [`LimitsExtractor`]) returns: a customer's plan, say, whose kinds left out are the
///    limiter's defaults of the moment (a kind is turned off by saying so,
///    [`Limits::no_rate`](crate::Limits::no_rate)); the `RateLimit-Policy` field describes
///    the limits so judged.
/// 3. It takes the request's cost: 1 by default ([`UnitCost`]), or what the
///    [`CostExtractor`] given to [`cost_fn`](Self::cost_fn) says: its body's bytes with
///    [`BodyBytes`] (a body without a length charged what the operator says, and held to
///    it), or the units a closure `Fn(&Request<B>) -> u32` returns. A request the extractor
///    will not charge ([`Uncharged`](super::Uncharged): with `BodyBytes`, a body without a
///    length when the operator requires one) is answered at once (`411 Length Required`),
///    the limiter not asked.
/// 4. It asks the limiter for an [`OwnedPermit`] for that key under those limits and for that
///    cost ([`Limiter::with_limits`], [`WithLimits::cost`](crate::WithLimits::cost)).
///    - **Admitted:** the inner service is called, and the permit travels with the request:
///      first in the [`ResponseFuture`], then in the response's [`LimitBody`]. It is given back
///      when the body ends (its last frame, or an error), when the body is dropped unfinished
///      (the client went away), or when the response future is dropped before it finished
///      (a cancelled request). A request in flight is therefore counted until its response is
///      completely sent, not just until the handler returns its head.
///    - **Rejected:** the inner service is **not** called. The answer is `503 Service
///      Unavailable` with an empty body and the headers below, or what the operator chose
///      with [`refusal`](Self::refusal) (`429`, a body, no RateLimit fields). A request whose
///      cost alone is over a limit ([`Reason::CostOverLimit`]) can never be admitted, and is
///      told so: `413 Content Too Large` (or the operator's status), no `Retry-After`, and a
///      body that says retrying will not help. The [`Rejected`]
///      and the key it was judged under ([`RejectedKey`]) are put in the response's
///      extensions, so an outer layer can log or count who was refused and why. With
///      [`wait`](Self::wait), a request over a limit first waits (up to its `max_wait`) for a
///      permit of its key to come back or its window to have room, and is refused only if
///      none comes in time.
///    - **Refused further in:** a response whose extensions carry a [`Rejected`] (the
///      refusal of an inner `LimitLayer`, keyed otherwise: a client's address inside a
///      host's layer) takes this layer's admission back, as
///      [`Limiter::try_acquire_and`] does: its permit is given back at once, and its count
///      leaves the exact counts that decide the key near its limit. Stacked layers are one
///      decision: what an inner refusal can still cost the outer key is what
///      [`WithLimits::try_acquire_and`](crate::WithLimits::try_acquire_and) says (its rate
///      sketch keeps the request as offered load). With [`wait`](Self::wait) on the inner
///      layer, the outer admission holds its unit in flight while the inner one waits. The
///      refusal passes through unchanged (this layer adds none of its fields to it).
///    - **Limits the limiter does not count** (an in-flight limit from a `limits_fn` in front
///      of a limiter built without `max_inflight`, say: [`Reason::InflightNotCounted`] or
///      [`Reason::RateNotCounted`]; or a limit above
///      [`Limits::MAX_LIMIT`]: [`Reason::LimitTooLarge`]): that is the server's configuration error, not the
///      client's doing, so the answer is `500 Internal Server Error`, with an empty body, no
///      rate-limit headers, and the [`Rejected`] in its extensions (its `Display` says what to
///      fix, and the layer logs it once, at error level, through the `log` facade). The inner
///      service is not called.
///
/// # Headers
///
/// A 503 says when to come back, with `Retry-After` (RFC 9110 §10.2.3), and what the limits
/// are, with the two fields of the IETF draft *RateLimit header fields for HTTP*,
/// draft-ietf-httpapi-ratelimit-headers-11
/// (<https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/>). With
/// [`ratelimit_headers_on_admitted(true)`](Self::ratelimit_headers_on_admitted), admitted
/// responses carry the two fields as well.
///
/// Both fields are Structured Field lists (RFC 9651) whose items are named by a policy, one
/// per kind of limit: `"rate"` for the rate limit and `"inflight"` for the in-flight limit,
/// or the names given to [`policy_names`](Self::policy_names). The names say which limit;
/// they do not name the key (a request's limits apply to its key alone, and the draft's
/// partition key `pk` is not sent: a key may be a tenant or an API key that should not be
/// echoed, draft §6.1). Layers whose fields can meet in one response (stacked layers with
/// admitted responses carrying them, or an origin with fields of its own) need names of their
/// own, or a client cannot tell which `RateLimit` item is whose.
///
/// - **`Retry-After`**, on a 503 for the rate limit: the seconds until the same request would
///   fit, rounded up, at least 1. With [`retry_after_jitter(max)`](Self::retry_after_jitter),
///   plus a random 0 to `max` whole seconds, so that clients refused together do not all
///   come back in the same second (draft §8.5); never earlier than the exact time (for a
///   key judged under the same limits from one request to the next: see
///   [`Rejected::retry_after`]). There is
///   none for an in-flight refusal (room comes when other requests finish, which no one can
///   foresee) nor under a rate limit of 0 (nothing ever fits).
/// - **`RateLimit-Policy`**: the limits the request was judged against (its own, or the
///   limiter's defaults at that moment), the rate first; a kind the request has no limit of
///   is left out, and so is the field when it has none.
///   - `"rate";q=100;w=1`: at most `q` requests per `w` seconds. `w` is the limiter's
///     interval in whole seconds, rounded up and at least 1 (the draft has no sub-second
///     windows), so an interval of 1.5 s shows as `w=2`: rounding only ever makes the
///     advertised rate lower than the real one.
///   - `"inflight";q=64;qu="concurrent-requests"`: at most `q` requests at once, in the
///     draft's quota unit for concurrency; no window.
/// - **`RateLimit`** on a 503: the policy that refused, with nothing left (`r=0`).
///   - `"rate";r=0;t=2`: `t` is the seconds until the request would fit, exactly as
///     `Retry-After` before any jitter, so `Retry-After` never points earlier than the end of
///     `t` (draft §6). No `t` under a rate limit of 0.
///   - `"inflight";r=0`: no `t` (the draft makes it optional): the wait is unknown.
/// - **`RateLimit`** on an admitted response (only when switched on): the policy closest to
///   its limit, i.e. with the smallest share of its quota left after this request.
///   - `"rate";r=41;t=2`: `r` requests would still fit now. `t` is two intervals in whole
///     seconds, rounded up: the sliding window forgets a request at most two intervals after
///     it was counted, so after `t` seconds without requests the whole quota is back (it
///     comes back gradually before that; spending `r` at any time within `t` stays within
///     the limit).
///   - `"inflight";r=3`: `r` more requests may start while this one is in flight; no `t`,
///     the quota comes back as requests finish.
///
///   `r` comes from the counts the limiter decides by ([`Limiter::estimate`]), read just
///   after admission with this request counted: what the limiter would still admit at that
///   moment. Those counts never count too few, so `r` is never more than is truly left; it
///   may be less, when the key shares sketch counters with busy keys, or when more of the
///   key's requests arrived meanwhile. Reading them is a second lookup of the key per
///   admitted request, which is why the switch is off by default. A 503's fields cost no
///   lookup, and nothing is formatted until the refusal is sent.
///
/// On an admitted response the two fields are appended, not inserted: fields the inner
/// service set for policies of its own stay, and the lists join (RFC 9651 §3.1). Their values
/// are built from integers (at most 15 digits, the most a Structured Field Integer carries)
/// and policy names checked when they were given ([`PolicyNames`]), so building them never
/// fails or panics.
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
/// limiter, the headers and the refusals have no panicking paths (key and limits closures of
/// yours must not panic either), and a [`ResponseFuture`] polled again after it finished
/// answers instead of panicking (a rejected one answers a bare 503 again; an admitted one
/// defers to the inner future).
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
/// use floodgate::{Limiter, layer::LimitLayer};
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
/// use floodgate::{clock::ManualClock, Limiter, layer::LimitLayer};
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
/// assert_eq!(response.headers()["ratelimit-policy"], r#""rate";q=2;w=1"#);
/// assert_eq!(response.headers()["ratelimit"], r#""rate";r=0;t=2"#);
///
/// let response = service.clone().oneshot(request("quiet.example")).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK, "other origins are not affected");
/// # }
/// ```
#[derive(Clone)]
pub struct LimitLayer<F = HostKey, L = LimiterDefaults, W = RefuseAtOnce, C = UnitCost> {
    limiter: Limiter<String>,
    key: F,
    limits: L,
    fields: ResponseSettings,
    /// Whether a request over a limit is refused at once or waits.
    mode: W,
    /// What each request counts.
    cost: C,
}

impl LimitLayer {
    /// A layer that limits requests per origin host ([`HostKey`]) with `limiter`, against its
    /// default limits, with the rate-limit headers on 503s only and no jitter.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, layer::LimitLayer};
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
            limits: LimiterDefaults,
            fields: ResponseSettings::default(),
            mode: RefuseAtOnce,
            cost: UnitCost,
        }
    }
}

impl<F, L, W, C> LimitLayer<F, L, W, C> {
    /// The longest [`retry_after_jitter`](Self::retry_after_jitter): an hour. Clients told to
    /// come back after a random wait of days would not, and a value past it is a mistake.
    pub const MAX_RETRY_AFTER_JITTER: Duration = super::settings::MAX_RETRY_AFTER_JITTER;

    /// The same layer, keying requests with `key` instead: a closure
    /// `Fn(&Request<B>) -> String` or any [`KeyExtractor`], such as
    /// [`ClientKey`](super::ClientKey) for the client's address. A request the extractor
    /// cannot key ([`NoKey`](super::NoKey)) is refused with `500` or served unlimited, as the
    /// extractor says, and logged once: never put under a key that others would share.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, layer::LimitLayer};
    /// use http::Request;
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let layer = LimitLayer::new(limiter).key_fn(|req: &Request<String>| {
    ///     req.uri().path().split('/').nth(1).unwrap_or("").to_owned()
    /// });
    /// # let _ = layer;
    /// ```
    pub fn key_fn<G>(self, key: G) -> LimitLayer<G, L, W, C> {
        LimitLayer {
            limiter: self.limiter,
            key,
            limits: self.limits,
            fields: self.fields,
            mode: self.mode,
            cost: self.cost,
        }
    }

    /// The same layer, judging each request against the limits `limits` gives it instead of
    /// the limiter's defaults: a closure `Fn(&Request<B>) -> Limits` (or any
    /// [`LimitsExtractor`]), from a customer's plan, say. The key is still the key: two
    /// requests with one key and different limits share one count, each judged against its
    /// own limit.
    ///
    /// The limits must be of kinds the limiter counts (see [`Limits`]); a request whose limits
    /// are not gets a `500` (see [What it does with a request](Self#what-it-does-with-a-request)).
    /// The closure runs on every request, before the limiter: keep it cheap, and do not let it
    /// panic.
    ///
    /// # Examples
    ///
    /// Two customers, keyed and limited by a header, each admitted up to its own plan's
    /// limit:
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, layer::LimitLayer, Limits};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new(); // a real proxy leaves this out
    /// let limiter = Limiter::builder()
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// let customer = |req: &Request<()>| {
    ///     let value = req.headers().get("x-customer").and_then(|v| v.to_str().ok());
    ///     value.unwrap_or("anonymous").to_owned()
    /// };
    /// let layer = LimitLayer::new(limiter)
    ///     .key_fn(customer)
    ///     .limits_fn(move |req: &Request<()>| match customer(req).as_str() {
    ///         "pro" => Limits::new().max_rate(3),
    ///         _ => Limits::new().max_rate(1),
    ///     });
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = layer.layer(origin);
    /// let request = |who: &str| Request::builder().uri("/").header("x-customer", who).body(()).unwrap();
    ///
    /// let mut admitted = Vec::new();
    /// for who in ["pro", "free"] {
    ///     let mut n = 0;
    ///     for _ in 0..5 {
    ///         let response = service.clone().oneshot(request(who)).await.unwrap();
    ///         n += usize::from(response.status() == StatusCode::OK);
    ///     }
    ///     admitted.push(n);
    /// }
    /// assert_eq!(admitted, [3, 1]);
    /// # }
    /// ```
    pub fn limits_fn<M>(self, limits: M) -> LimitLayer<F, M, W, C> {
        LimitLayer {
            limiter: self.limiter,
            key: self.key,
            limits,
            fields: self.fields,
            mode: self.mode,
            cost: self.cost,
        }
    }

    /// The same layer, counting each request as what `cost` says instead of 1: its body's
    /// bytes with [`BodyBytes`], or the units a closure `Fn(&Request<B>) -> u32` (or any
    /// [`CostExtractor`]) returns: its tokens, its weight. A request is admitted only if all
    /// its units fit in each of its limits (see [`WithLimits::cost`](crate::WithLimits::cost)
    /// for what a cost counts, and the limits and `peak_rate` to set in units); one whose cost
    /// is over a limit can never fit, and is answered `413` without `Retry-After`
    /// ([`Reason::CostOverLimit`], see [`RefusalResponse::cost_over_limit`]). The `RateLimit`
    /// fields count units too.
    ///
    /// The inner service is given the request as the extractor admits it
    /// ([`CostExtractor::admit`]): a closure's unchanged, [`BodyBytes`]' with its body held to
    /// the bytes charged ([`ChargedBody`](super::ChargedBody)), so a client never sends more
    /// than it paid for. Count bytes with `BodyBytes`, not with a closure reading
    /// `Content-Length`: a body sent without one (chunked) has no size before it is read, and
    /// whatever a closure charges it, the client can send more.
    ///
    /// # Examples
    ///
    /// Up to 100 KB of request bodies a second per origin host; a body without a length is
    /// charged 64 KiB, the most it may carry:
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use bytes::Bytes;
    /// use floodgate::layer::{BodyBytes, ChargedBody, LimitLayer, UnknownLength};
    /// use floodgate::{clock::ManualClock, Limiter};
    /// use http::{Request, Response, StatusCode};
    /// use http_body_util::{combinators::BoxBody, BodyExt, Full};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new(); // a real proxy leaves this out
    /// let limiter = Limiter::builder()
    ///     .max_rate(100_000, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// type Upload = BoxBody<Bytes, Infallible>;
    /// let origin = service_fn(|req: Request<ChargedBody<Upload>>| async move {
    ///     let _body = req.into_body(); // never more than was charged
    ///     Ok::<_, Infallible>(Response::new(String::new()))
    /// });
    /// let bytes = BodyBytes::new(UnknownLength::Charge(64 * 1024));
    /// let service = LimitLayer::new(limiter).cost_fn(bytes).layer(origin);
    /// let upload = |body: Upload| {
    ///     service.clone().oneshot(Request::post("http://api.example/").body(body).unwrap())
    /// };
    /// let sized = || Full::new(Bytes::from(vec![0; 60_000])).boxed(); // Content-Length: 60000
    /// let chunked = || Full::new(Bytes::from(vec![0; 60_000])).map_frame(|f| f).boxed(); // no length
    ///
    /// assert_eq!(upload(sized()).await.unwrap().status(), StatusCode::OK);
    /// let refused = upload(sized()).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "120,000 bytes");
    /// clock.advance(Duration::from_secs(2)); // the window forgets them
    /// assert_eq!(upload(chunked()).await.unwrap().status(), StatusCode::OK, "charged 65,536");
    /// let refused = upload(chunked()).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "131,072 bytes");
    /// # }
    /// ```
    pub fn cost_fn<D>(self, cost: D) -> LimitLayer<F, L, W, D> {
        LimitLayer {
            limiter: self.limiter,
            key: self.key,
            limits: self.limits,
            fields: self.fields,
            mode: self.mode,
            cost,
        }
    }

    /// Lets a request over a limit wait up to `max_wait` for room
    /// ([`Limiter::acquire`]) instead of being refused at once: nginx's `limit_req … delay`.
    /// It waits on the limiter's 10 ms clock (no timer per request), before the inner service
    /// is called; one that still finds no room (or cannot fit before `max_wait`, or finds the
    /// limiter's waiters full) gets the same 503 as without waiting. Under a flood of one
    /// key, its line holds at most
    /// [`max_waiters_per_key`](crate::LimiterBuilder::max_waiters_per_key) requests (64
    /// unless told otherwise), and the flood's other requests are refused at once: it holds
    /// neither thousands of connections nor their memory. A request over an in-flight limit
    /// waits until its key's permit comes back, or up to `max_wait`: never less, and at most
    /// one 10 ms tick more (while the clock's thread gets a CPU in time); one over a rate
    /// limit waits for its window's room, and is refused at once if the room comes after
    /// `max_wait`. The services this layer
    /// makes need an inner service that is `Clone` (the one made ready is kept for the
    /// waiting request, as tower's buffering layers do).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{Limiter, layer::LimitLayer};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let layer = LimitLayer::new(limiter.clone()).wait(Duration::from_secs(5));
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = layer.layer(origin);
    /// let request = || Request::builder().uri("http://api.example/").body(()).unwrap();
    ///
    /// let busy = limiter.try_acquire_owned("api.example").unwrap(); // the one slot, taken
    /// let waiting = tokio::spawn(service.oneshot(request()));
    /// tokio::task::yield_now().await; // the request is waiting now, not refused
    /// drop(busy);
    /// assert_eq!(waiting.await.unwrap().unwrap().status(), StatusCode::OK);
    /// # }
    /// ```
    pub fn wait(self, max_wait: Duration) -> LimitLayer<F, L, WaitUpTo, C> {
        LimitLayer {
            limiter: self.limiter,
            key: self.key,
            limits: self.limits,
            fields: self.fields,
            mode: WaitUpTo(max_wait),
            cost: self.cost,
        }
    }

    /// Adds a random 0 to `max` whole seconds to each `Retry-After`, so that clients refused
    /// together come back spread over that many seconds rather than all at once (the draft
    /// recommends it, §8.5). The value is never below the exact wait rounded up, nor below
    /// `RateLimit`'s `t`. `max` counts in whole seconds, rounded down, like `Retry-After`
    /// itself: under a second adds nothing. No jitter by default, so `Retry-After` equals `t`.
    ///
    /// The random numbers come from std's `RandomState` (fresh random keys each time, from a
    /// per-thread seed): no lock and no extra dependency, and only drawn for rate refusals.
    ///
    /// # Errors
    ///
    /// [`ConfigError::RetryAfterJitter`](crate::ConfigError::RetryAfterJitter) for a `max`
    /// over [`MAX_RETRY_AFTER_JITTER`](Self::MAX_RETRY_AFTER_JITTER) (an hour).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, layer::LimitLayer};
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
    /// let layer = LimitLayer::new(limiter).retry_after_jitter(Duration::from_secs(5)).unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = layer.layer(origin);
    /// let request = || Request::builder().uri("http://busy.example/").body(()).unwrap();
    /// for _ in 0..2 {
    ///     service.clone().oneshot(request()).await.unwrap();
    /// }
    /// let refused = service.oneshot(request()).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    /// assert_eq!(refused.headers()["ratelimit"], r#""rate";r=0;t=2"#); // 1.5 s, rounded up
    /// let secs: u64 = refused.headers()[RETRY_AFTER].to_str().unwrap().parse().unwrap();
    /// assert!((2..=7).contains(&secs), "2 s, plus 0 to 5 s: {secs}");
    /// # }
    /// ```
    pub fn retry_after_jitter(self, max: Duration) -> Result<Self, ConfigError> {
        Ok(LimitLayer {
            fields: self.fields.jitter(max)?,
            ..self
        })
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit` too (503s always
    /// do); off by default. See [Headers](Self#headers) for the values, and for the cost: a
    /// second lookup of the key per admitted request.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, layer::LimitLayer};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new(); // a real proxy leaves this out
    /// let limiter = Limiter::builder()
    ///     .max_inflight(8)
    ///     .max_rate(5, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// let layer = LimitLayer::new(limiter).ratelimit_headers_on_admitted(true);
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = layer.layer(origin);
    /// let request = || Request::builder().uri("http://api.example/").body(()).unwrap();
    ///
    /// let first = service.clone().oneshot(request()).await.unwrap();
    /// assert_eq!(first.status(), StatusCode::OK);
    /// assert_eq!(
    ///     first.headers()["ratelimit-policy"],
    ///     r#""rate";q=5;w=1, "inflight";q=8;qu="concurrent-requests""#
    /// );
    /// // 4 of 5 left for the rate, 7 of 8 in flight: the rate is closer to its limit.
    /// assert_eq!(first.headers()["ratelimit"], r#""rate";r=4;t=2"#);
    /// let second = service.oneshot(request()).await.unwrap();
    /// assert_eq!(second.headers()["ratelimit"], r#""rate";r=3;t=2"#);
    /// # }
    /// ```
    pub fn ratelimit_headers_on_admitted(self, on: bool) -> Self {
        LimitLayer {
            fields: self.fields.on_admitted(on),
            ..self
        }
    }

    /// How a request over a limit is answered: `503` with an empty body and every field by
    /// default; see [`RefusalResponse`] for `429`, a body of the operator's (the same bytes
    /// for every refusal, or made from each one by
    /// [`body_fn`](RefusalResponse::body_fn)), and leaving the RateLimit fields out.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::layer::{LimitLayer, RefusalResponse, RejectedKey};
    /// use floodgate::Limiter;
    /// use http::header::{HeaderValue, CONTENT_TYPE};
    /// use http::{Request, Response, StatusCode};
    /// use http_body_util::BodyExt;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let _busy = limiter.try_acquire_owned("api.example").unwrap();
    /// let layer = LimitLayer::new(limiter).refusal(
    ///     RefusalResponse::too_many_requests()
    ///         .body(HeaderValue::from_static("text/plain"), "slow down\n"),
    /// );
    /// let origin = service_fn(|_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let request = Request::builder().uri("http://api.example/").body(String::new()).unwrap();
    /// let refused = layer.layer(origin).oneshot(request).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(refused.headers()[CONTENT_TYPE], "text/plain");
    /// assert_eq!(refused.headers()["ratelimit"], r#""inflight";r=0"#);
    /// assert_eq!(refused.extensions().get::<RejectedKey>().unwrap().0, "api.example");
    /// let body = refused.into_body().collect().await.unwrap().to_bytes();
    /// assert_eq!(&body[..], b"slow down\n");
    /// # }
    /// ```
    pub fn refusal(self, refusal: RefusalResponse) -> Self {
        LimitLayer {
            fields: self.fields.refusal(refusal),
            ..self
        }
    }

    /// Names the policies of the `RateLimit-Policy` and `RateLimit` fields: `"rate"` and
    /// `"inflight"` unless told otherwise. Give each layer whose fields can meet others in one
    /// response names of its own: a host's layer around a client's, both telling admitted
    /// responses their fields, send two `RateLimit-Policy` lists on one response, and with
    /// the same names a client cannot tell whose `RateLimit` item is whose. The names are
    /// checked when they are made ([`PolicyNames::new`]): a name a client could not parse is a
    /// [`ConfigError`] then, never a broken field later. The limiter's
    /// [`name`](crate::LimiterBuilder::name), a label of its metrics, is not sent.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::fields::ratelimit::PolicyNames;
    /// use floodgate::layer::LimitLayer;
    /// use floodgate::{clock::ManualClock, Limiter};
    /// use http::{Request, Response};
    /// use tower::{service_fn, ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), floodgate::ConfigError> {
    /// let clock = ManualClock::new(); // a real proxy leaves this out
    /// let per_second = |n| Limiter::builder().max_rate(n, Duration::from_secs(1)).clock(&clock).build();
    /// let hosts = LimitLayer::new(per_second(100)?)
    ///     .ratelimit_headers_on_admitted(true)
    ///     .policy_names(PolicyNames::new("host", "host-inflight")?);
    /// let tenants = LimitLayer::new(per_second(10)?)
    ///     .key_fn(|_: &Request<()>| "acme".to_owned())
    ///     .ratelimit_headers_on_admitted(true)
    ///     .policy_names(PolicyNames::new("tenant", "tenant-inflight")?);
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = ServiceBuilder::new().layer(hosts).layer(tenants).service(origin);
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let response = service.oneshot(request).await.unwrap();
    /// let policies: Vec<_> = response.headers().get_all("ratelimit-policy").iter().collect();
    /// assert_eq!(policies, [r#""tenant";q=10;w=1"#, r#""host";q=100;w=1"#]);
    /// let left: Vec<_> = response.headers().get_all("ratelimit").iter().collect();
    /// assert_eq!(left, [r#""tenant";r=9;t=2"#, r#""host";r=99;t=2"#]);
    /// # Ok(()) }
    /// ```
    pub fn policy_names(self, names: PolicyNames) -> Self {
        LimitLayer {
            fields: self.fields.names(names),
            ..self
        }
    }

    /// The limiter, for its [`heavy_hitters`](Limiter::heavy_hitters) and
    /// [`stats`](Limiter::stats).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, layer::LimitLayer};
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

impl<S, F: Clone, L: Clone, W: Clone, C: Clone> Layer<S> for LimitLayer<F, L, W, C> {
    type Service = LimitService<S, F, L, W, C>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitService {
            inner,
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            limits: self.limits.clone(),
            fields: self.fields.clone(),
            mode: self.mode.clone(),
            cost: self.cost.clone(),
        }
    }
}

impl<F, L, W: std::fmt::Debug, C> std::fmt::Debug for LimitLayer<F, L, W, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitLayer")
            .field("limiter", &self.limiter)
            .field("ratelimit_headers_on_admitted", &self.fields.on_admitted)
            .field("retry_after_jitter_secs", &self.fields.jitter_secs)
            .field("refusal", &self.fields.refusal)
            .field("policy_names", &self.fields.names)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}
