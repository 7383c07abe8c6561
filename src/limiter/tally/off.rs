//! Without the `metrics` feature: nothing is counted or published.

use super::gauges::Gauges;
use crate::limiter::Rejected;

/// Counts nothing (size zero).
#[derive(Debug, Default)]
pub(crate) struct Tally;

impl Tally {
    /// Whether anything is counted: near-limit admissions are worked out only if so.
    pub(crate) const ON: bool = false;

    pub(crate) fn new(_name: &str) -> Self {
        Tally
    }

    #[inline(always)]
    pub(crate) fn admitted(&self) {}

    #[inline(always)]
    pub(crate) fn near(&self) {}

    #[inline(always)]
    pub(crate) fn refused(&self, _rejected: &Rejected, _shadow: bool) {}

    pub(crate) fn unkeyed(&self, _served: bool) {}

    pub(crate) fn publish(&self, _gauges: &Gauges) {}
}
