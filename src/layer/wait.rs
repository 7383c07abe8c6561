//! [`WaitFuture`], the response future of a [`LimitService`] in the [`WaitUpTo`] mode: a
//! request over a limit waits up to a deadline for room, through
//! [`Limiter::acquire`], then calls the inner service.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::response::ResponseFuture;
use super::response::{Admission, State};
use super::settings::ResponseSettings;
use super::LimitBody;
#[cfg(doc)]
use super::{LimitLayer, LimitService, WaitUpTo};
use crate::fields::ratelimit::Policies;
use crate::{Acquire, Limiter};

/// What a waiting request keeps until it is admitted or refused.
pub(super) struct Waiting<S, B> {
    /// The inner service made ready for it.
    pub(super) inner: S,
    pub(super) limiter: Limiter<String>,
    /// What its response says beyond the decision.
    pub(super) fields: ResponseSettings,
    pub(super) request: Request<B>,
    pub(super) policies: Policies,
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

impl<S, B> WaitFuture<S, B>
where
    S: Service<Request<B>>,
{
    /// A request decided at once, without waiting (one without a key).
    pub(super) fn decided(state: State<S::Future>) -> Self {
        WaitFuture {
            state: WaitState::Decided {
                response: ResponseFuture { state },
            },
        }
    }

    /// A request waiting on `acquire` for a permit.
    pub(super) fn new(acquire: Acquire<String>, waiting: Waiting<S, B>) -> Self {
        WaitFuture {
            state: WaitState::Waiting {
                acquire,
                waiting: Some(waiting),
            },
        }
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
                    let decided = ready!(Pin::new(&mut *acquire).poll(cx));
                    let Some(mut w) = waiting.take() else {
                        return Poll::Ready(Ok(super::refusal::refuse(None)));
                    };
                    // Given by value (`LimitService::call`): always there, once.
                    let key = acquire.take_key().unwrap_or_default();
                    let state: State<S::Future> = match decided {
                        Ok(permit) => {
                            let admitted = w.fields.admitted(&w.limiter, &key, w.policies);
                            let shadow_key = permit.shadow_rejection().map(|_| key);
                            let receipt = acquire.receipt();
                            let admission = Admission { permit, receipt };
                            let called = w.inner.call(w.request);
                            State::admitted(called, admission, admitted, shadow_key)
                        }
                        Err(rejected) => State::refused(rejected, key, w.policies, &w.fields),
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
