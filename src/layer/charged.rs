//! [`ChargedBody`]: a request body held to the bytes its request was charged, and the error
//! that ends one that goes past them ([`ChargeExceeded`]).

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

#[cfg(doc)]
use super::BodyBytes;

/// The error of a [`ChargedBody`], boxed as an HTTP body's errors usually are: the inner
/// body's own, or [`ChargeExceeded`].
type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// A request body held to the bytes its request was charged ([`BodyBytes`]): the inner
    /// service's request body, passed on frame by frame while their bytes stay within the
    /// charge. The frame that would go past it is not passed: the body ends with
    /// [`ChargeExceeded`] instead, so that the inner service never reads more than was paid
    /// for. Its errors are boxed (`Box<dyn Error + Send + Sync>`), as axum's and hyper's
    /// bodies take them.
    pub struct ChargedBody<B> {
        #[pin]
        inner: B,
        // The bytes it may still carry; `None`: not held (a request served without a key).
        left: Option<u64>,
        // What it was held to, for the error.
        charged: u64,
        // Ended with ChargeExceeded: nothing more is read.
        exceeded: bool,
    }
}

impl<B> ChargedBody<B> {
    /// `inner`, held to at most `most` bytes (`None`: not held).
    pub(super) fn new(inner: B, most: Option<u64>) -> Self {
        ChargedBody {
            inner,
            left: most,
            charged: most.unwrap_or(u64::MAX),
            exceeded: false,
        }
    }

    /// The bytes it may still carry (`None`: not held).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::layer::{BodyBytes, CostExtractor, UnknownLength};
    /// use http_body_util::Full;
    ///
    /// let cost = BodyBytes::new(UnknownLength::Refuse);
    /// let req = http::Request::post("/").body(Full::new(&b"hello"[..])).unwrap();
    /// assert_eq!(cost.admit(req).body().left(), Some(5));
    /// ```
    pub fn left(&self) -> Option<u64> {
        self.left
    }
}

impl<B> Body for ChargedBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if *this.exceeded {
            return Poll::Ready(None);
        }
        let frame = match ready!(this.inner.poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            Some(Err(error)) => return Poll::Ready(Some(Err(error.into()))),
            None => return Poll::Ready(None),
        };
        if let (Some(left), Some(data)) = (this.left.as_mut(), frame.data_ref()) {
            let bytes = u64::try_from(data.remaining()).unwrap_or(u64::MAX);
            match left.checked_sub(bytes) {
                Some(rest) => *left = rest,
                None => {
                    *this.exceeded = true;
                    let charged = *this.charged;
                    return Poll::Ready(Some(Err(Box::new(ChargeExceeded { charged }))));
                }
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.exceeded || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let hint = self.inner.size_hint();
        let Some(left) = self.left else {
            return hint;
        };
        // Never more than it may still carry. The upper bound stays at or above the lower:
        // min(upper, left) >= min(lower, left) since upper >= lower.
        let mut held = SizeHint::new();
        held.set_lower(hint.lower().min(left));
        held.set_upper(hint.upper().map_or(left, |upper| upper.min(left)));
        held
    }
}

impl<B> std::fmt::Debug for ChargedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChargedBody")
            .field("left", &self.left)
            .field("exceeded", &self.exceeded)
            .finish_non_exhaustive()
    }
}

/// A request body went past the bytes its request was charged ([`ChargedBody`]): the error
/// that ends it, for the inner service to answer `413 Content Too Large` (or drop the
/// request) rather than read on.
///
/// # Examples
///
/// ```
/// use floodgate::layer::ChargeExceeded;
///
/// let error: Box<dyn std::error::Error + Send + Sync> = Box::new(ChargeExceeded { charged: 16 });
/// assert_eq!(error.downcast_ref::<ChargeExceeded>().unwrap().charged, 16);
/// assert!(error.to_string().contains("16 bytes"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChargeExceeded {
    /// The bytes the request was charged, which its body went past.
    pub charged: u64,
}

impl std::fmt::Display for ChargeExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body went past the {} bytes its request was charged",
            self.charged
        )
    }
}

impl std::error::Error for ChargeExceeded {}
