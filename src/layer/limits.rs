//! Per-request limits: [`LimitsExtractor`], and [`LimiterDefaults`], which leaves every
//! request to the limiter's defaults.

use http::Request;

#[cfg(doc)]
use super::{LimitLayer, LimitService};
#[cfg(doc)]
use crate::Limiter;
use crate::Limits;

/// Where a [`LimitService`] takes a request's [`Limits`] from: a customer's plan, say.
///
/// Implemented by [`LimiterDefaults`] (the default: the limiter's own limits, read per
/// request) and by every closure `Fn(&Request<B>) -> Limits`, which
/// [`LimitLayer::limits_fn`] takes. Implement it yourself to give some requests their own
/// limits and leave the rest to the limiter's defaults (return `None` for those).
///
/// The limiter decides with [`Limiter::with_limits`], so the request's limits must
/// be of kinds the limiter counts; see [`LimitLayer`] for the `500` a request gets otherwise.
///
/// # Examples
///
/// ```
/// use floodgate::{layer::LimiterDefaults, Limits, layer::LimitsExtractor};
/// use http::Request;
///
/// /// Customers with a plan header get its limits; everyone else the limiter's defaults.
/// struct Plans;
///
/// impl<B> LimitsExtractor<B> for Plans {
///     fn limits(&self, req: &Request<B>) -> Option<Limits> {
///         match req.headers().get("x-plan")?.to_str().ok()? {
///             "pro" => Some(Limits::new().max_rate(1000)),
///             _ => Some(Limits::new().max_rate(10)),
///         }
///     }
/// }
///
/// let req = |plan: Option<&str>| {
///     let mut req = Request::builder().uri("/");
///     if let Some(plan) = plan {
///         req = req.header("x-plan", plan);
///     }
///     req.body(()).unwrap()
/// };
/// assert_eq!(Plans.limits(&req(Some("pro"))), Some(Limits::new().max_rate(1000)));
/// assert_eq!(Plans.limits(&req(Some("free"))), Some(Limits::new().max_rate(10)));
/// assert_eq!(Plans.limits(&req(None)), None);
///
/// let by_closure = |_: &Request<()>| Limits::new().max_inflight(4);
/// assert_eq!(by_closure.limits(&req(None)), Some(Limits::new().max_inflight(4)));
/// assert_eq!(LimiterDefaults.limits(&req(Some("pro"))), None);
/// ```
pub trait LimitsExtractor<B> {
    /// The limits `req` is judged against, or `None` for the limiter's defaults.
    fn limits(&self, req: &Request<B>) -> Option<Limits>;
}

impl<B, F> LimitsExtractor<B> for F
where
    F: Fn(&Request<B>) -> Limits,
{
    fn limits(&self, req: &Request<B>) -> Option<Limits> {
        Some(self(req))
    }
}

/// The default [`LimitsExtractor`]: every request is judged against the limiter's defaults
/// ([`Limiter::limits`]) as they are when it arrives, so a
/// [`set_limits`](Limiter::set_limits) applies from the next request on.
///
/// # Examples
///
/// ```
/// use floodgate::{layer::LimiterDefaults, layer::LimitsExtractor};
///
/// let req = http::Request::new(());
/// assert_eq!(LimiterDefaults.limits(&req), None);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct LimiterDefaults;

impl<B> LimitsExtractor<B> for LimiterDefaults {
    fn limits(&self, _req: &Request<B>) -> Option<Limits> {
        None
    }
}
