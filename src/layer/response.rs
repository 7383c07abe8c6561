//! [`ResponseFuture`]: the inner service's future carrying the request's permit, or a ready
//! refusal.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::headers::Admitted;
use super::refusal::{refuse, refuse_uncharged, refuse_unkeyed, Refusal, RejectedKey};
use super::settings::ResponseSettings;
#[cfg(doc)]
use super::LimitService;
use super::{LimitBody, NoKey, Uncharged};
use crate::fields::ratelimit::Policies;
use crate::limiter::Receipt;
use crate::{Outcome, OwnedPermit, Rejected};

pin_project! {
    /// The response future of a [`LimitService`]: the inner service's future and the
    /// request's permit, or a ready refusal (503, or 500 for limits the limiter does not
    /// count).
    ///
    /// Dropping it before it finishes (a cancelled request) gives the permit back.
    #[must_use = "futures do nothing unless polled; dropping this one gives its permit back"]
    pub struct ResponseFuture<Fut> {
        #[pin]
        pub(super) state: State<Fut>,
    }
}

pin_project! {
    #[project = StateProj]
    pub(super) enum State<Fut> {
        Admitted {
            #[pin]
            future: Fut,
            // `None` once the response (and the permit with it) has been handed out.
            admission: Option<Admission>,
            // What the RateLimit fields of the response say, when admitted responses carry
            // them.
            admitted: Option<Admitted>,
            // The key of a request admitted in shadow, for its response's extensions.
            shadow_key: Option<String>,
        },
        Rejected {
            // `None` once the refusal has been handed out.
            refusal: Option<Refusal>,
        },
        // A request its key extractor could not key, refused (500).
        Unkeyed {
            no_key: NoKey,
        },
        // A request its cost extractor would not charge (411 for a body without a length).
        Uncharged {
            uncharged: Uncharged,
        },
    }
}

/// In the extensions of a response admitted in shadow ([`Limits::shadow`](crate::Limits::shadow),
/// [`LimiterBuilder::shadow`](crate::LimiterBuilder::shadow)): the refusal the request would
/// have had, beside its key ([`RejectedKey`], as on a refusal). The client sees nothing of
/// either.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use floodgate::layer::{LimitService, ShadowRejected};
/// use floodgate::{Limiter, Reason};
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter: Limiter<String> =
///     Limiter::builder().max_inflight(1).shadow(true).build().unwrap();
/// let _busy = limiter.try_acquire_owned("api.example").unwrap();
/// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
/// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
/// let response = LimitService::new(origin, limiter).oneshot(request).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK, "served: the limit is in shadow");
/// let shadow = response.extensions().get::<ShadowRejected>().unwrap();
/// assert_eq!(shadow.0.reason, Reason::Inflight);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowRejected(pub Rejected);

/// An admitted request's permit, and where its admission was counted: what an inner layer's
/// refusal takes back.
pub(super) struct Admission {
    pub(super) permit: OwnedPermit<String>,
    pub(super) receipt: Receipt,
}

impl<Fut> State<Fut> {
    /// An admitted request: the inner service's `future`, the `admission` held until its
    /// response is handed out, and what the fields of an admitted response say.
    pub(super) fn admitted(
        future: Fut,
        admission: Admission,
        admitted: Option<Admitted>,
        shadow_key: Option<String>,
    ) -> Self {
        State::Admitted {
            future,
            admission: Some(admission),
            admitted,
            shadow_key,
        }
    }

    /// A request without a key, served unlimited: the inner service's `future`, no permit.
    pub(super) fn unlimited(future: Fut) -> Self {
        State::Admitted {
            future,
            admission: None,
            admitted: None,
            shadow_key: None,
        }
    }

    /// A request without a key, refused.
    pub(super) fn unkeyed(no_key: NoKey) -> Self {
        State::Unkeyed { no_key }
    }

    /// A request its cost extractor would not charge.
    pub(super) fn uncharged(uncharged: Uncharged) -> Self {
        State::Uncharged { uncharged }
    }

    /// A refused request for `key`, answered as `settings` say.
    pub(super) fn refused(
        rejected: Rejected,
        key: String,
        policies: Policies,
        settings: &ResponseSettings,
    ) -> Self {
        State::Rejected {
            refusal: Some(Refusal {
                rejected,
                key,
                policies,
                names: settings.names.clone(),
                jitter_secs: settings.jitter_secs,
                response: settings.refusal.clone(),
            }),
        }
    }
}

impl<Fut, B, E> Future for ResponseFuture<Fut>
where
    Fut: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Admitted {
                future,
                admission,
                admitted,
                shadow_key,
            } => {
                let result = ready!(future.poll(cx));
                // On an error the permit drops here: there is no body to hold it. An error of
                // the inner service (a timeout layer's inside this one, a connection's) and a
                // 5xx are the origin's overload, for a key learning its in-flight limit
                // (`Permit::record`); an inner layer's refusal is not (its admission is taken
                // back, unmeasured). A timeout outside this layer drops the future: no answer,
                // no overload.
                let mut admission = admission.take();
                let overloaded = match &result {
                    Ok(response) => {
                        response.status().is_server_error() && !refused_further_in(response)
                    }
                    Err(_) => true,
                };
                if let (true, Some(admission)) = (overloaded, admission.as_mut()) {
                    admission.permit.record(Outcome::Overload);
                }
                let admitted = admitted.take();
                Poll::Ready(result.map(|mut response| {
                    // Refused by an inner layer (another key, one decision; or a request the
                    // inner layer could not key): this key takes its admission back, and its
                    // fields stay off the refusal.
                    if refused_further_in(&response) {
                        if let Some(Admission { permit, receipt }) = admission {
                            permit.take_back(receipt);
                        }
                        return response.map(|body| LimitBody::new(body, None));
                    }
                    let permit = admission.map(|a| a.permit);
                    if let Some(admitted) = admitted {
                        admitted.append_to(response.headers_mut());
                    }
                    // Admitted in shadow: the refusal it stands for and its key, for an outer
                    // layer.
                    if let Some(rejected) = permit.as_ref().and_then(|p| p.shadow_rejection()) {
                        let shadow = ShadowRejected(rejected.clone());
                        response.extensions_mut().insert(shadow);
                        if let Some(key) = shadow_key.take() {
                            response.extensions_mut().insert(RejectedKey(key));
                        }
                    }
                    response.map(|body| LimitBody::new(body, permit))
                }))
            }
            StateProj::Rejected { refusal } => Poll::Ready(Ok(refuse(refusal.take()))),
            StateProj::Unkeyed { no_key } => Poll::Ready(Ok(refuse_unkeyed(*no_key))),
            StateProj::Uncharged { uncharged } => Poll::Ready(Ok(refuse_uncharged(*uncharged))),
        }
    }
}

/// Whether `response` is an inner layer's refusal: over its limits, or of a request it could
/// not key or would not charge.
fn refused_further_in<B>(response: &Response<B>) -> bool {
    let extensions = response.extensions();
    extensions.get::<Rejected>().is_some()
        || extensions.get::<NoKey>().is_some()
        || extensions.get::<Uncharged>().is_some()
}

impl<Fut> std::fmt::Debug for ResponseFuture<Fut> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let admitted = matches!(self.state, State::Admitted { .. });
        f.debug_struct("ResponseFuture")
            .field("admitted", &admitted)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use http::header::RETRY_AFTER;
    use http::StatusCode;
    use http_body::Body;

    use super::*;
    use crate::fields::ratelimit::Policies;
    use crate::{Limits, Rejected};

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
                refusal: Some(Refusal {
                    rejected: rejected.clone(),
                    key: "api.example".to_owned(),
                    policies: Policies::new(
                        Limits::new().max_rate(2),
                        Some(Duration::from_secs(1))
                    ),
                    names: Default::default(),
                    jitter_secs: 0,
                    response: crate::layer::RefusalResponse::default(),
                }),
            },
        });
        let waker = std::task::Waker::from(std::sync::Arc::new(NoopWake));
        let mut cx = Context::from_waker(&waker);
        let Poll::Ready(Ok(first)) = future.as_mut().poll(&mut cx) else {
            panic!("a rejected request answers at once");
        };
        assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(first.headers()[RETRY_AFTER], "2");
        assert_eq!(first.headers()["ratelimit"], "\"rate\";r=0;t=2");
        assert_eq!(first.extensions().get::<Rejected>(), Some(&rejected));
        assert!(first.body().is_end_stream());
        assert_eq!(first.body().size_hint().exact(), Some(0));
        let Poll::Ready(Ok(again)) = future.as_mut().poll(&mut cx) else {
            panic!("polled again, it answers again");
        };
        assert_eq!(again.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(again.headers().is_empty());
    }
}
