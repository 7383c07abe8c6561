//! What a limiter counts of its own decisions for the operator's metrics (feature `metrics`):
//! requests admitted, refused and refused in shadow by reason, and admissions near their
//! limits; with the gauges its clock reads, published through the `metrics` facade.
//!
//! The request path only counts: each thread adds to counters of its own (one store, no
//! locked instruction, no line shared with another core), and the limiter's clock sums them
//! and publishes the totals once a sweep. Without the feature, [`Tally`] is of size zero and
//! counts nothing, so the request path has no `cfg` and no code for it.

#[cfg(feature = "metrics")]
mod counted;
#[cfg(not(feature = "metrics"))]
mod off;
#[cfg(feature = "metrics")]
mod slot;

#[cfg(feature = "metrics")]
pub(crate) use counted::Tally;
#[cfg(not(feature = "metrics"))]
pub(crate) use off::Tally;

mod gauges;
pub(crate) use gauges::{FleetGauges, Gauges, NEAR_LIMIT};
