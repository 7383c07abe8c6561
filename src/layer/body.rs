//! [`LimitBody`]: the response body that holds the request's permit until it ends, fails or is
//! dropped.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

#[cfg(doc)]
use super::LimitService;
use crate::OwnedPermit;

pin_project! {
    /// The response body of a [`LimitService`]: the inner body and the request's permit,
    /// which it gives back when the body ends, fails or is dropped. For a refusal, empty or
    /// the operator's body ([`RefusalResponse::body`](super::RefusalResponse::body) or
    /// [`body_fn`](super::RefusalResponse::body_fn)), or the text of a cost over a limit.
    pub struct LimitBody<B> {
        #[pin]
        pub(super) inner: Inner<B>,
        pub(super) permit: Option<OwnedPermit<String>>,
    }
}

pin_project! {
    #[project = InnerProj]
    pub(super) enum Inner<B> {
        Body {
            #[pin]
            body: B,
        },
        // A refusal: the operator's body, if any, sent once.
        Rejected {
            body: Option<Bytes>,
        },
    }
}

impl<B> LimitBody<B> {
    pub(super) fn new(body: B, permit: Option<OwnedPermit<String>>) -> Self {
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
    /// use floodgate::{Limiter, layer::LimitService};
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

/// A refusal's body is `Bytes`, which the inner body's data must be made from (hyper's and
/// axum's are `Bytes` already).
impl<B> Body for LimitBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
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
            InnerProj::Rejected { body } => {
                Poll::Ready(body.take().map(|bytes| Ok(Frame::data(bytes.into()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Body { body } => body.is_end_stream(),
            Inner::Rejected { body } => body.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Body { body } => body.size_hint(),
            Inner::Rejected { body } => {
                SizeHint::with_exact(body.as_ref().map_or(0, |bytes| bytes.len() as u64))
            }
        }
    }
}

impl<B> std::fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitBody")
            .field("rejected", &matches!(self.inner, Inner::Rejected { .. }))
            .field("holds_permit", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}
