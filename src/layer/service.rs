//! [`LimitService`]: takes each request's key and limits, asks the limiter, and calls the inner
//! service or refuses (the `refusal` module builds that response: 503 with `Retry-After` and
//! the RateLimit fields, or 500 for limits the limiter does not count). In the [`WaitUpTo`]
//! mode a request over a limit waits for room in a [`WaitFuture`] (the `wait` module).

use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower_service::Service;

use super::refusal::tell_unkeyed;
use super::response::{Admission, ResponseFuture, State};
use super::settings::{RefusalResponse, ResponseSettings};
use super::wait::{WaitFuture, Waiting};
#[cfg(doc)]
use super::LimitLayer;
use super::{
    CostExtractor, HostKey, KeyExtractor, LimitBody, LimiterDefaults, LimitsExtractor, NoKey,
    RefuseAtOnce, UnitCost, Unkeyed, WaitUpTo,
};
use crate::fields::ratelimit::{Policies, PolicyNames};
use crate::{ConfigError, Limiter};

/// The service a [`LimitLayer`] makes: limits requests per key, refuses the rejected ones
/// (503, see [`LimitLayer`] for the headers), and holds each admitted request's permit until
/// its response body is done.
///
/// Clones share the limiter. The builder methods are the layer's, for a service built
/// without one.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use floodgate::{Limiter, layer::LimitService};
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
pub struct LimitService<S, F = HostKey, L = LimiterDefaults, W = RefuseAtOnce, C = UnitCost> {
    pub(super) inner: S,
    pub(super) limiter: Limiter<String>,
    pub(super) key: F,
    pub(super) limits: L,
    pub(super) fields: ResponseSettings,
    /// Whether a request over a limit is refused at once or waits (`wait.rs`).
    pub(super) mode: W,
    /// What each request counts.
    pub(super) cost: C,
}

impl<S> LimitService<S> {
    /// `inner`, limited per origin host ([`HostKey`]) by `limiter`, against its default
    /// limits.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, layer::LimitService};
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
            limits: LimiterDefaults,
            fields: ResponseSettings::default(),
            mode: RefuseAtOnce,
            cost: UnitCost,
        }
    }
}

impl<S, F, L, W, C> LimitService<S, F, L, W, C> {
    /// The same service, judging each request against the limits `limits` gives it (see
    /// [`LimitLayer::limits_fn`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, layer::LimitService, Limits};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder().max_rate(100, Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter)
    ///     .limits_fn(|_: &Request<()>| Limits::new().max_rate(1));
    /// let request = || Request::builder().uri("http://api.example/").body(()).unwrap();
    /// assert_eq!(service.clone().oneshot(request()).await.unwrap().status(), StatusCode::OK);
    /// let refused = service.oneshot(request()).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "its own limit: 1, not 100");
    /// # }
    /// ```
    pub fn limits_fn<M>(self, limits: M) -> LimitService<S, F, M, W, C> {
        LimitService {
            inner: self.inner,
            limiter: self.limiter,
            key: self.key,
            limits,
            fields: self.fields,
            mode: self.mode,
            cost: self.cost,
        }
    }

    /// The same service, counting each request as the units `cost` gives it (see
    /// [`LimitLayer::cost_fn`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::{Limiter, layer::LimitService};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter.clone()).cost_fn(|_: &Request<()>| 4);
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let response = service.oneshot(request).await.unwrap();
    /// assert_eq!(response.status(), StatusCode::OK);
    /// assert_eq!(limiter.estimate("api.example").inflight, Some(4), "held by its body");
    /// # }
    /// ```
    pub fn cost_fn<D>(self, cost: D) -> LimitService<S, F, L, W, D> {
        LimitService {
            inner: self.inner,
            limiter: self.limiter,
            key: self.key,
            limits: self.limits,
            fields: self.fields,
            mode: self.mode,
            cost,
        }
    }

    /// Lets a request over a limit wait up to `max_wait` for room (see
    /// [`LimitLayer::wait`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{Limiter, layer::LimitService};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter.clone()).wait(Duration::from_millis(50));
    /// let _busy = limiter.try_acquire_owned("api.example").unwrap();
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// // Nothing comes back within 50 ms: the same 503 as without waiting, only later.
    /// let refused = service.oneshot(request).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    /// # }
    /// ```
    pub fn wait(self, max_wait: Duration) -> LimitService<S, F, L, WaitUpTo, C> {
        LimitService {
            inner: self.inner,
            limiter: self.limiter,
            key: self.key,
            limits: self.limits,
            fields: self.fields,
            mode: WaitUpTo(max_wait),
            cost: self.cost,
        }
    }

    /// Adds a random 0 to `max` whole seconds to `Retry-After` (see
    /// [`LimitLayer::retry_after_jitter`]).
    ///
    /// # Errors
    ///
    /// [`ConfigError::RetryAfterJitter`] for a `max` over
    /// [`LimitLayer::MAX_RETRY_AFTER_JITTER`] (an hour).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, layer::LimitService};
    /// use http::{header::RETRY_AFTER, Request, Response};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder().max_rate(1, Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter).retry_after_jitter(Duration::from_secs(3)).unwrap();
    /// let request = || Request::builder().uri("http://api.example/").body(()).unwrap();
    /// service.clone().oneshot(request()).await.unwrap();
    /// let refused = service.oneshot(request()).await.unwrap();
    /// let secs: u64 = refused.headers()[RETRY_AFTER].to_str().unwrap().parse().unwrap();
    /// assert!((2..=5).contains(&secs), "2 s exactly, plus 0 to 3 s: {secs}");
    /// # }
    /// ```
    pub fn retry_after_jitter(self, max: Duration) -> Result<Self, ConfigError> {
        Ok(LimitService {
            fields: self.fields.jitter(max)?,
            ..self
        })
    }

    /// Whether admitted responses carry `RateLimit-Policy` and `RateLimit` too (see
    /// [`LimitLayer::ratelimit_headers_on_admitted`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::{Limiter, layer::LimitService};
    /// use http::{Request, Response};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter).ratelimit_headers_on_admitted(true);
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let admitted = service.oneshot(request).await.unwrap();
    /// assert_eq!(admitted.headers()["ratelimit"], r#""inflight";r=3"#);
    /// # }
    /// ```
    pub fn ratelimit_headers_on_admitted(self, on: bool) -> Self {
        LimitService {
            fields: self.fields.on_admitted(on),
            ..self
        }
    }

    /// How a request over a limit is answered (see [`LimitLayer::refusal`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::layer::{LimitService, RefusalResponse};
    /// use floodgate::Limiter;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let _busy = limiter.try_acquire_owned("api.example").unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = LimitService::new(origin, limiter)
    ///     .refusal(RefusalResponse::too_many_requests().ratelimit_fields(false));
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let refused = service.oneshot(request).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert!(refused.headers().get("ratelimit").is_none());
    /// # }
    /// ```
    pub fn refusal(self, refusal: RefusalResponse) -> Self {
        LimitService {
            fields: self.fields.refusal(refusal),
            ..self
        }
    }

    /// Names the policies of the RateLimit fields (see [`LimitLayer::policy_names`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use floodgate::fields::ratelimit::PolicyNames;
    /// use floodgate::{Limiter, layer::LimitService};
    /// use http::{Request, Response};
    /// use tower::{service_fn, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let _busy = limiter.try_acquire_owned("api.example").unwrap();
    /// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let names = PolicyNames::new("api-rate", "api-concurrency").unwrap();
    /// let service = LimitService::new(origin, limiter).policy_names(names);
    /// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
    /// let refused = service.oneshot(request).await.unwrap();
    /// assert_eq!(refused.headers()["ratelimit"], r#""api-concurrency";r=0"#);
    /// # }
    /// ```
    pub fn policy_names(self, names: PolicyNames) -> Self {
        LimitService {
            fields: self.fields.names(names),
            ..self
        }
    }

    /// The limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, layer::LimitService};
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
    /// use floodgate::{Limiter, layer::LimitService};
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
    /// use floodgate::{Limiter, layer::LimitService};
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
    /// use floodgate::{Limiter, layer::LimitService};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let service = LimitService::new(vec![1, 2], limiter);
    /// assert_eq!(service.into_inner(), vec![1, 2]);
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, F, L, W, C> std::fmt::Debug for LimitService<S, F, L, W, C>
where
    S: std::fmt::Debug,
    W: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitService")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("ratelimit_headers_on_admitted", &self.fields.on_admitted)
            .field("retry_after_jitter_secs", &self.fields.jitter_secs)
            .field("refusal", &self.fields.refusal)
            .field("policy_names", &self.fields.names)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// The inner service is given the request as the cost extractor admits it
/// ([`CostExtractor::admit`]): the same request, or one whose body is held to its charge.
impl<S, F, L, C, ReqBody, ResBody> Service<Request<ReqBody>>
    for LimitService<S, F, L, RefuseAtOnce, C>
where
    S: Service<Request<<C as CostExtractor<ReqBody>>::Body>, Response = Response<ResBody>>,
    F: KeyExtractor<ReqBody>,
    L: LimitsExtractor<ReqBody>,
    C: CostExtractor<ReqBody>,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let key = match self.key.key(&req) {
            Ok(key) => key,
            Err(no_key) => {
                let (inner, cost) = (&mut self.inner, &self.cost);
                let state = unkeyed(&self.limiter, no_key, || inner.call(cost.admit(req)));
                return ResponseFuture { state };
            }
        };
        let cost = match self.cost.cost(&req) {
            Ok(cost) => cost,
            Err(uncharged) => {
                let state = State::uncharged(uncharged);
                return ResponseFuture { state };
            }
        };
        // The limits this request is judged against, read once so that the decision and the
        // fields that describe it agree: its own, or the defaults as the decision read them
        // (no thresholds worked out again per request).
        // Its own: the kinds they leave out, the defaults' now (read once here too).
        let own = self.limits.limits(&req).map(|l| self.limiter.plan_of(l));
        let (result, limits) = match own {
            Some(limits) => (
                self.limiter
                    .with_limits(limits)
                    .cost(cost)
                    .try_acquire_owned_receipted(&*key),
                limits,
            ),
            None => self.limiter.try_acquire_owned_judged(&*key, cost),
        };
        let policies = Policies::of(&self.limiter, Some(limits));
        let state = match result {
            Ok((permit, receipt)) => {
                let admitted = self.fields.admitted(&self.limiter, &key, policies);
                // Admitted in shadow: its key goes with its would-be refusal (a copy, only
                // for these).
                let shadow_key = permit.shadow_rejection().map(|_| key.clone().into_owned());
                drop(key); // it may borrow the request
                let admission = Admission { permit, receipt };
                let called = self.inner.call(self.cost.admit(req));
                State::admitted(called, admission, admitted, shadow_key)
            }
            Err(rejected) => State::refused(rejected, key.into_owned(), policies, &self.fields),
        };
        ResponseFuture { state }
    }
}

/// The inner service is given the request as the cost extractor admits it
/// ([`CostExtractor::admit`]), when it is called.
impl<S, F, L, C, ReqBody, ResBody> Service<Request<ReqBody>> for LimitService<S, F, L, WaitUpTo, C>
where
    S: Service<Request<<C as CostExtractor<ReqBody>>::Body>, Response = Response<ResBody>> + Clone,
    F: KeyExtractor<ReqBody>,
    L: LimitsExtractor<ReqBody>,
    C: CostExtractor<ReqBody>,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = WaitFuture<S, <C as CostExtractor<ReqBody>>::Body>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let key = match self.key.key(&req) {
            Ok(key) => key,
            Err(no_key) => {
                let (inner, cost) = (&mut self.inner, &self.cost);
                let state = unkeyed(&self.limiter, no_key, || inner.call(cost.admit(req)));
                return WaitFuture::decided(state);
            }
        };
        let cost = match self.cost.cost(&req) {
            Ok(cost) => cost,
            Err(uncharged) => return WaitFuture::decided(State::uncharged(uncharged)),
        };
        // A request's own limits, or none: then each attempt while it waits is judged against
        // the defaults of that moment, so a `set_limits` that raises them frees the waiters.
        // The fields of its response describe the defaults as they were when it came.
        let own = self.limits.limits(&req);
        let policies = Policies::of(&self.limiter, own);
        let acquire = match own {
            Some(limits) => self.limiter.with_limits(limits).cost(cost),
            None => self.limiter.with_cost(cost),
        };
        // The key by value: the future keeps it while the request waits, and gives it back for
        // the response (`WaitFuture`).
        let acquire = acquire.acquire_owned_key(key.into_owned(), self.mode.0);
        // Held to its charge now: the inner service is given it as it is when it is called.
        let request = self.cost.admit(req);
        // The service made ready for this request goes with it; this one keeps a clone (what
        // tower's buffering layers do), so that the request is sent where readiness was
        // promised, however long it waits.
        let ready = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, ready);
        WaitFuture::new(
            acquire,
            Waiting {
                inner: ready,
                limiter: self.limiter.clone(),
                fields: self.fields.clone(),
                request,
                policies,
            },
        )
    }
}

/// A request its key extractor could not key: told in the log (once per cause) and the
/// metrics, then refused or served unlimited through `call`, as the extractor says. Never
/// under a key of its own, which every such request would share.
#[cold]
fn unkeyed<Fut>(
    limiter: &Limiter<String>,
    no_key: NoKey,
    call: impl FnOnce() -> Fut,
) -> State<Fut> {
    tell_unkeyed(&no_key);
    let served = no_key.then == Unkeyed::Serve;
    limiter.count_unkeyed(served);
    if served {
        State::unlimited(call())
    } else {
        State::unkeyed(no_key)
    }
}
