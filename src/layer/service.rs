//! [`LimitService`]: takes each request's key, asks the limiter, and calls the inner service
//! or answers 503 (`service_unavailable`, with `Retry-After` from `retry_after_secs`).

use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::body::Inner;
use super::future::State;
#[cfg(doc)]
use super::LimitLayer;
use super::{HostKey, KeyExtractor, LimitBody, ResponseFuture};
use crate::{Limiter, Rejected};

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
    pub(super) inner: S,
    pub(super) limiter: Limiter<String>,
    pub(super) key: F,
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

/// The 503 for a rejected request: `Retry-After` where the wait is known, the [`Rejected`]
/// in the extensions.
pub(super) fn service_unavailable<B>(rejected: Option<Rejected>) -> Response<LimitBody<B>> {
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
}
