//! Per-request costs: [`CostExtractor`], and [`UnitCost`], which counts every request as one.

use http::Request;

#[cfg(doc)]
use super::{LimitLayer, LimitService};
#[cfg(doc)]
use crate::{Limiter, WithLimits};

/// What a request counts in its limits, for a [`LimitService`]: its bytes, its tokens, its
/// weight ([`WithLimits::cost`] says what a cost does).
///
/// Implemented by [`UnitCost`] (the default: every request counts 1) and by every closure
/// `Fn(&Request<B>) -> u32`, which [`LimitLayer::cost_fn`] takes. It runs on every request,
/// before the limiter: keep it cheap, and do not let it panic.
///
/// # Examples
///
/// ```
/// use floodgate::layer::{CostExtractor, UnitCost};
/// use http::{header::CONTENT_LENGTH, Request};
///
/// // A request's body bytes as its Content-Length says, at least 1 (a cost of 0 counts
/// // nothing); past u32::MAX, u32::MAX, which is over any limit, rather than 1. A body sent
/// // without a length (chunked) counts 1 here: its bytes are not known before it is read.
/// let bytes = |req: &Request<()>| {
///     let length = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
///     u32::try_from(length.unwrap_or(1u64)).unwrap_or(u32::MAX).max(1)
/// };
/// let req = Request::builder().header(CONTENT_LENGTH, "4096").body(()).unwrap();
/// assert_eq!(bytes.cost(&req), 4096);
/// assert_eq!(UnitCost.cost(&req), 1);
/// ```
pub trait CostExtractor<B> {
    /// The units `req` counts in each limit it meets.
    fn cost(&self, req: &Request<B>) -> u32;
}

impl<B, F> CostExtractor<B> for F
where
    F: Fn(&Request<B>) -> u32,
{
    fn cost(&self, req: &Request<B>) -> u32 {
        self(req)
    }
}

/// The default [`CostExtractor`]: every request counts 1.
///
/// # Examples
///
/// ```
/// use floodgate::layer::{CostExtractor, UnitCost};
///
/// assert_eq!(UnitCost.cost(&http::Request::new(())), 1);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UnitCost;

impl<B> CostExtractor<B> for UnitCost {
    #[inline]
    fn cost(&self, _req: &Request<B>) -> u32 {
        1
    }
}
