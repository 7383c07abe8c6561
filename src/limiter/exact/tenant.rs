//! The stage's one view of what the limiter keeps for a key it holds.

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
