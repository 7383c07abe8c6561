//! The service of the [`WaitUpTo`] mode: a request over a limit waits up to a deadline for
//! room, through [`Limiter::acquire`](crate::Limiter::acquire), in the [`WaitFuture`] that
//! then calls the inner service.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::future::State;
use super::headers::Policies;
#[cfg(doc)]
use super::LimitLayer;
use super::{KeyExtractor, LimitBody, LimitService, LimitsExtractor, ResponseFuture, WaitUpTo};
use crate::Acquire;

impl<S, F, L, ReqBody, ResBody> Service<Request<ReqBody>> for LimitService<S, F, L, WaitUpTo>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    F: KeyExtractor<ReqBody>,
    L: LimitsExtractor<ReqBody>,
{
    type Response = Response<LimitBody<ResBody>>;
    type Error = S::Error;
    type Future = WaitFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // A request's own limits, or none: then each attempt while it waits is judged against
        // the defaults of that moment, so a `set_limits` that raises them frees the waiters.
        // The fields of its response describe the defaults as they were when it came.
        let own = self.limits.limits(&req);
        let policies = self.policies(own);
        let key = self.key.key(&req);
        let acquire = match own {
            Some(limits) => self.limiter.acquire_with(&*key, &limits, self.mode.0),
            None => self.limiter.acquire(&*key, self.mode.0),
        };
        let key = key.into_owned();
        // The service made ready for this request goes with it; this one keeps a clone (what
        // tower's buffering layers do), so that the request is sent where readiness was
        // promised, however long it waits.
        let ready = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, ready);
        let service = LimitService {
            inner: ready,
            limiter: self.limiter.clone(),
            key: (),
            limits: (),
            fields: self.fields,
            mode: self.mode,
        };
        WaitFuture {
            state: WaitState::Waiting {
                acquire,
                waiting: Some(Waiting {
                    service,
                    request: req,
                    key,
                    policies,
                }),
            },
        }
    }
}

/// What a waiting request keeps until it is admitted or refused.
struct Waiting<S, B> {
    /// The inner service made ready for it, with the layer's settings.
    service: LimitService<S, (), (), WaitUpTo>,
    request: Request<B>,
    key: String,
    policies: Policies,
}

pin_project! {
    /// The response future of a [`LimitService`] in waiting mode ([`LimitLayer::wait`]):
    /// waits for a permit on the limiter's clock, then calls the inner service and carries the
    /// permit as [`ResponseFuture`] does; or answers with the refusal once the wait is over.
    ///
    /// Dropping it while it waits takes the request out of its key's line at once.
    #[must_use = "futures do nothing unless polled; dropping this one cancels the request"]
    pub struct WaitFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: WaitState<S, B>,
    }
}

pin_project! {
    #[project = WaitStateProj]
    enum WaitState<S, B>
    where
        S: Service<Request<B>>,
    {
        Waiting {
            acquire: Acquire<String>,
            // `None` once it has been admitted or refused.
            waiting: Option<Waiting<S, B>>,
        },
        Decided {
            #[pin]
            response: ResponseFuture<S::Future>,
        },
    }
}

impl<S, B, ResBody> Future for WaitFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Output = Result<Response<LimitBody<ResBody>>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let state = match self.as_mut().project().state.project() {
                WaitStateProj::Decided { response } => return response.poll(cx),
                WaitStateProj::Waiting { acquire, waiting } => {
                    if waiting.is_none() {
                        // Polled again after a panic in the inner service's `call`: refuse
                        // rather than panic or hang.
                        return Poll::Ready(Ok(super::refusal::refuse(None)));
                    }
                    let decided = ready!(Pin::new(acquire).poll(cx));
                    let Some(mut w) = waiting.take() else {
                        return Poll::Ready(Ok(super::refusal::refuse(None)));
                    };
                    let state: State<S::Future> = match decided {
                        Ok(permit) => {
                            let admitted = w.service.admitted_fields(&w.key, w.policies);
                            w.service.admit(w.request, permit, admitted)
                        }
                        Err(rejected) => w.service.refuse(rejected, w.policies),
                    };
                    WaitState::Decided {
                        response: ResponseFuture { state },
                    }
                }
            };
            self.as_mut().project().state.set(state);
        }
    }
}

impl<S, B> std::fmt::Debug for WaitFuture<S, B>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = matches!(self.state, WaitState::Waiting { .. });
        f.debug_struct("WaitFuture")
            .field("waiting", &waiting)
            .finish_non_exhaustive()
    }
}
