//! The stage's one view of what the limiter keeps for a key it holds, and of the limiter
//! itself as a key leaves.

use super::Units;
use crate::limiter::key_lines::KeyLine;

/// What the limiter keeps for a promoted key, as the stage sees it: the stage decides who
/// keeps a place by these. (Its units in flight, evidence for keeping its place beside its
/// requests, the stage keeps itself, in a word per place that releases write without the
/// lock.)
pub(crate) trait Tenant {
    /// Until when (nanoseconds on the limiter's clock) it keeps its place whatever the
    /// evidence: a key over its limit, whose requests something else refuses meanwhile
    /// without coming here.
    fn kept_until(&self) -> u64;
    /// Requests refused while it held the place: what the reports keep of it once it left.
    fn refused(&self) -> u64;
}

/// The limiter that keeps the stage, as the stage asks it under a set's lock when a key
/// leaves its place (demoted, or replaced by another key).
pub(crate) trait Keeper<V> {
    /// The time now, on the limiter's clock: when a key leaving is recorded lost (see
    /// `ExactStage::leave`).
    fn now(&self) -> u64;
    /// The key of hash `hash` leaves: the last chance to count what the stage will no longer
    /// hold of it, in `tenant`, in its lane (`units`, still as the key's requests left it)
    /// and on its key's `line`.
    fn leaving(&self, hash: u64, tenant: &mut V, units: Units<'_>, line: KeyLine<'_>);
}
