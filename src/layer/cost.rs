//! Per-request costs: [`CostExtractor`]; [`UnitCost`], which counts every request as one; and
//! [`BodyBytes`], which counts a request's body bytes and holds the body to them
//! ([`ChargedBody`]), with what becomes of a body of unknown length ([`UnknownLength`]) and of
//! a request a cost will not charge ([`Uncharged`]).

use http::header::CONTENT_LENGTH;
use http::{Request, StatusCode};
use http_body::Body;

use super::ChargedBody;
#[cfg(doc)]
use super::{ChargeExceeded, LimitLayer, LimitService};
use crate::fields;
/// What a body of unknown length costs under [`BodyBytes`] (it lives in
/// [`fields::cost`](crate::fields::cost), which a proxy without tower uses too).
pub use crate::fields::cost::UnknownLength;
use crate::fields::cost::{BodyCharge, LENGTH_REQUIRED};
#[cfg(doc)]
use crate::{Limiter, Reason, WithLimits};

/// What a request counts in its limits, for a [`LimitService`]: its bytes, its tokens, its
/// weight ([`WithLimits::cost`] says what a cost does), and the body the inner service is
/// given, held to what was counted where the cost is the body's own size.
///
/// Implemented by [`UnitCost`] (the default: every request counts 1), by [`BodyBytes`] (its
/// body's bytes, the body stopped past them), and by every closure `Fn(&Request<B>) -> u32`,
/// which [`LimitLayer::cost_fn`] takes and which leaves the body alone. It runs on every
/// request, before the limiter: keep it cheap, and do not let it panic.
///
/// A closure's cost is whatever it says, so a closure must not count what it cannot know: a
/// body sent without a length (chunked) has no size before it is read, and a closure that
/// charges it 1 lets a client send as much as it likes for 1. Count bytes with [`BodyBytes`],
/// which charges such a body what it may carry and stops it there.
///
/// # Examples
///
/// ```
/// use floodgate::layer::{CostExtractor, UnitCost};
/// use http::Request;
///
/// // A model's tokens, as the client asks for them (at least 1: a cost of 0 counts nothing);
/// // past u32::MAX, u32::MAX, which is over any limit.
/// let tokens = |req: &Request<()>| {
///     let asked = req.headers().get("x-max-tokens").and_then(|v| v.to_str().ok()?.parse().ok());
///     u32::try_from(asked.unwrap_or(1u64)).unwrap_or(u32::MAX).max(1)
/// };
/// let req = Request::builder().header("x-max-tokens", "4096").body(()).unwrap();
/// assert_eq!(tokens.cost(&req), Ok(4096));
/// assert_eq!(UnitCost.cost(&req), Ok(1));
/// ```
pub trait CostExtractor<B> {
    /// The request body the inner service is given: `B` itself for a cost that leaves the
    /// body alone (closures, [`UnitCost`]), [`ChargedBody<B>`] for [`BodyBytes`].
    type Body;

    /// The units `req` counts in each limit it meets.
    ///
    /// # Errors
    ///
    /// [`Uncharged`] for a request this extractor will not charge (a body of unknown length
    /// under [`UnknownLength::Refuse`]): it is answered at once with the error's status,
    /// before any limit is asked, and the inner service is not called.
    fn cost(&self, req: &Request<B>) -> Result<u32, Uncharged>;

    /// A request about to be served, as the inner service is given it: the same request, or
    /// one whose body is held to what [`cost`](Self::cost) charged it. Called once for each
    /// request the inner service is called with: an admitted one, and one without a key
    /// served unlimited ([`Unkeyed::Serve`](super::Unkeyed::Serve)), whose cost is not asked.
    fn admit(&self, req: Request<B>) -> Request<Self::Body>;
}

impl<B, F> CostExtractor<B> for F
where
    F: Fn(&Request<B>) -> u32,
{
    type Body = B;

    fn cost(&self, req: &Request<B>) -> Result<u32, Uncharged> {
        Ok(self(req))
    }

    fn admit(&self, req: Request<B>) -> Request<B> {
        req
    }
}

/// The default [`CostExtractor`]: every request counts 1.
///
/// # Examples
///
/// ```
/// use floodgate::layer::{CostExtractor, UnitCost};
///
/// assert_eq!(UnitCost.cost(&http::Request::new(())), Ok(1));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitCost;

impl<B> CostExtractor<B> for UnitCost {
    type Body = B;

    #[inline]
    fn cost(&self, _req: &Request<B>) -> Result<u32, Uncharged> {
        Ok(1)
    }

    #[inline]
    fn admit(&self, req: Request<B>) -> Request<B> {
        req
    }
}

/// A [`CostExtractor`] that counts a request's body bytes, and never lets a body carry more
/// than it was counted: limits in bytes (per interval, in flight) that a client cannot get
/// past by leaving its length out.
///
/// - **A body whose length is known** (its `Content-Length`, or no body at all) costs that
///   many bytes, at least 1 (so that requests without a body are still counted; a cost of 0
///   counts nothing). The length is the body's own exact size hint (a server derives it
///   from `Content-Length`, and an empty request has 0), else the request's `Content-Length`
///   field when it is one number. The body is held to it: bytes past the length declared end
///   the body with an error ([`ChargedBody`]).
/// - **A body of unknown length** (chunked in HTTP/1.1, or an HTTP/2 request without
///   `Content-Length`) cannot be measured before it is read: the operator says what it costs
///   ([`UnknownLength`]), and there is no default. Either it is charged a set number of bytes
///   and held to them ([`UnknownLength::Charge`]: the most such a body may carry), or it is
///   refused with `411 Length Required` before any limit is asked
///   ([`UnknownLength::Refuse`]).
///
/// A length past `u32::MAX` costs `u32::MAX`, which is over any limit: such a request (and any
/// whose length is over one of its limits) is answered `413` without `Retry-After`
/// ([`Reason::CostOverLimit`]). A charge for unknown lengths over the smallest limit refuses
/// every such body that way.
///
/// The inner service is given a [`ChargedBody`]: a body of the same frames whose error is a
/// boxed error, [`ChargeExceeded`] when the body went past its charge (the service can
/// downcast it to answer `413`). The bytes a body carries short of its charge are not given
/// back: a client that declares more than it sends pays for what it declared.
///
/// # Examples
///
/// ```
/// use floodgate::layer::{BodyBytes, ChargeExceeded, CostExtractor, UnknownLength};
/// use http::{header::CONTENT_LENGTH, Request, StatusCode};
/// use http_body_util::{BodyExt, Full};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // A body without a length is charged 16 bytes, and may carry no more.
/// let bytes = BodyBytes::new(UnknownLength::Charge(16));
/// let known = Request::post("/").body(Full::new(&b"hello"[..])).unwrap();
/// assert_eq!(bytes.cost(&known), Ok(5));
///
/// // A body whose length is not known before it is read, as a chunked upload's.
/// let chunked = || Full::new(&b"twenty bytes of body"[..]).map_frame(|frame| frame);
/// let upload = Request::post("/").body(chunked()).unwrap();
/// assert_eq!(bytes.cost(&upload), Ok(16));
/// let read = bytes.admit(upload).into_body().collect().await;
/// let error = read.unwrap_err();
/// assert!(error.downcast_ref::<ChargeExceeded>().is_some(), "cut past the 16 bytes charged");
///
/// // A Content-Length that says less than the body carries: held to what it said.
/// let lying = Request::post("/").header(CONTENT_LENGTH, "2").body(chunked()).unwrap();
/// assert_eq!(bytes.cost(&lying), Ok(2));
/// assert!(bytes.admit(lying).into_body().collect().await.is_err());
///
/// // Or refuse bodies without a length.
/// let strict = BodyBytes::new(UnknownLength::Refuse);
/// let upload = Request::post("/").body(chunked()).unwrap();
/// assert_eq!(strict.cost(&upload).unwrap_err().status, StatusCode::LENGTH_REQUIRED);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyBytes {
    unknown: UnknownLength,
}

impl BodyBytes {
    /// Bytes of request bodies, a body of unknown length charged or refused as `unknown`
    /// says.
    pub const fn new(unknown: UnknownLength) -> Self {
        BodyBytes { unknown }
    }

    /// What a request's body is charged and held to: its length when it is known, else the
    /// charge for an unknown length, or refused (such a body served anyway, without a key, is
    /// not held). The rules are [`fields::cost`](crate::fields::cost)'s.
    fn charge<B: Body>(&self, req: &Request<B>) -> BodyCharge {
        BodyCharge::of(declared_length(req), self.unknown)
    }
}

impl<B: Body> CostExtractor<B> for BodyBytes {
    type Body = ChargedBody<B>;

    fn cost(&self, req: &Request<B>) -> Result<u32, Uncharged> {
        self.charge(req).cost().ok_or(Uncharged {
            status: StatusCode::LENGTH_REQUIRED,
            why: LENGTH_REQUIRED,
        })
    }

    fn admit(&self, req: Request<B>) -> Request<ChargedBody<B>> {
        let most = self.charge(&req).most();
        req.map(|body| ChargedBody::new(body, most))
    }
}

/// The length a request's body declares: its exact size hint (a server's, from
/// `Content-Length`; 0 for a request without a body), else its `Content-Length` field when
/// every line of it is the same number ([`fields::cost::declared_length`]).
fn declared_length<B: Body>(req: &Request<B>) -> Option<u64> {
    if let Some(exact) = req.body().size_hint().exact() {
        return Some(exact);
    }
    let lines = req.headers().get_all(CONTENT_LENGTH).iter();
    fields::cost::declared_length(lines.map(|line| line.as_bytes()))
}

/// A request a [`CostExtractor`] will not charge (a body of unknown length, for [`BodyBytes`]
/// told to refuse those): answered at once with `status` and `why` as a plain-text body, with
/// the `Uncharged` in the response's extensions. No limit is asked and nothing is counted;
/// an outer `LimitLayer` takes its own admission back, as for any refusal further in.
///
/// # Examples
///
/// ```
/// use floodgate::layer::Uncharged;
/// use http::StatusCode;
///
/// let refused = Uncharged { status: StatusCode::LENGTH_REQUIRED, why: "send a Content-Length\n" };
/// assert!(refused.status.is_client_error());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uncharged {
    /// The status of the answer: a client error.
    pub status: StatusCode,
    /// What the client is to do, sent as the answer's body.
    pub why: &'static str,
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use http_body::{Frame, SizeHint};
    use proptest::prelude::*;

    use super::*;
    use crate::layer::ChargeExceeded;

    /// A body of frames of these sizes whose length is not known before it is read (chunked),
    /// or whose size hint is exact when `exact`.
    struct Frames {
        sizes: VecDeque<usize>,
        exact: bool,
    }

    impl Frames {
        fn chunked(sizes: &[usize]) -> Self {
            Frames {
                sizes: sizes.iter().copied().collect(),
                exact: false,
            }
        }
    }

    impl Body for Frames {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let size = self.sizes.pop_front();
            Poll::Ready(size.map(|n| Ok(Frame::data(Bytes::from(vec![7u8; n])))))
        }

        fn size_hint(&self) -> SizeHint {
            if self.exact {
                SizeHint::with_exact(self.sizes.iter().sum::<usize>() as u64)
            } else {
                SizeHint::default()
            }
        }
    }

    /// The bytes the inner service reads of `req`'s body as `cost` admits it, and whether it
    /// ended with [`ChargeExceeded`].
    fn read(cost: BodyBytes, req: Request<Frames>) -> (u64, bool) {
        let mut body = cost.admit(req).into_body();
        let waker = floodgate_test_support::waker::noop();
        let mut cx = Context::from_waker(&waker);
        let mut read = 0;
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    read += frame.into_data().map_or(0, |d| d.len() as u64);
                }
                Poll::Ready(Some(Err(error))) => {
                    let exceeded = error.downcast_ref::<ChargeExceeded>().is_some();
                    assert!(exceeded, "{error}");
                    return (read, true);
                }
                Poll::Ready(None) => return (read, false),
                Poll::Pending => unreachable!("the test bodies are always ready"),
            }
        }
    }

    fn post(body: Frames, content_length: Option<&str>) -> Request<Frames> {
        let mut req = Request::post("/");
        if let Some(length) = content_length {
            req = req.header(CONTENT_LENGTH, length);
        }
        req.body(body).unwrap()
    }

    #[test]
    fn a_body_without_a_length_is_charged_what_the_operator_says_and_cut_past_it() {
        let cost = BodyBytes::new(UnknownLength::Charge(100));
        let req = || post(Frames::chunked(&[60, 60]), None);
        assert_eq!(cost.cost(&req()), Ok(100));
        assert_eq!(
            read(cost, req()),
            (60, true),
            "the frame past 100 bytes is not passed"
        );
        let fits = || post(Frames::chunked(&[60, 40]), None);
        assert_eq!(read(cost, fits()), (100, false));
        let strict = BodyBytes::new(UnknownLength::Refuse);
        let refused = strict.cost(&req()).unwrap_err();
        assert_eq!(refused.status, StatusCode::LENGTH_REQUIRED);
        // Served without a key, it is not charged, and not held.
        assert_eq!(read(strict, req()), (120, false));
    }

    #[test]
    fn a_body_is_held_to_the_length_it_declared() {
        let cost = BodyBytes::new(UnknownLength::Refuse);
        let lying = || post(Frames::chunked(&[3, 3]), Some("4"));
        assert_eq!(cost.cost(&lying()), Ok(4));
        assert_eq!(read(cost, lying()), (3, true));
        // Lines that disagree, or a value that is not a number, declare nothing.
        for bad in ["4, 5", "+4", "-4", "4 ", "", "0x4"] {
            let req = post(Frames::chunked(&[3]), Some(bad));
            assert!(cost.cost(&req).is_err(), "{bad:?}");
        }
        let mut twice = post(Frames::chunked(&[3]), Some("4"));
        twice
            .headers_mut()
            .append(CONTENT_LENGTH, http::HeaderValue::from_static("5"));
        assert!(cost.cost(&twice).is_err());
        twice
            .headers_mut()
            .insert(CONTENT_LENGTH, http::HeaderValue::from_static("4"));
        assert_eq!(cost.cost(&twice), Ok(4), "one line again");
        // A request without a body (an exact size of 0) costs 1 and may carry nothing.
        let empty = post(
            Frames {
                sizes: VecDeque::new(),
                exact: true,
            },
            None,
        );
        assert_eq!(cost.cost(&empty), Ok(1));
        assert_eq!(read(cost, empty), (0, false));
    }

    proptest! {
        /// Whatever the charge for unknown lengths, the declared length and the body's frames,
        /// the inner service reads at most what the request was held to, and all of it when the
        /// body stays within it; and the cost is that length, at least 1 and at most u32::MAX.
        #[test]
        fn no_body_passes_more_bytes_than_it_was_charged(
            charge in prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>(), 0u32..300],
            declared in prop_oneof![
                Just(None),
                Just(Some(u64::MAX)),
                Just(Some(0u64)),
                any::<u64>().prop_map(Some),
                (0u64..300).prop_map(Some),
            ],
            sizes in prop::collection::vec(0usize..120, 0..6),
        ) {
            let cost = BodyBytes::new(UnknownLength::Charge(charge));
            let length = declared.map(|n| n.to_string());
            let req = || post(Frames::chunked(&sizes), length.as_deref());
            let held = declared.unwrap_or(u64::from(charge));
            let expected = u32::try_from(held).unwrap_or(u32::MAX).max(1);
            prop_assert_eq!(cost.cost(&req()), Ok(expected));
            let (passed, cut) = read(cost, req());
            let sent: u64 = sizes.iter().map(|&n| n as u64).sum();
            prop_assert!(passed <= held, "{passed} bytes passed, held to {held}");
            prop_assert_eq!(cut, sent > held);
            if !cut {
                prop_assert_eq!(passed, sent);
            }
        }
    }
}
