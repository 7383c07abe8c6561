//! The stage's one view of what the limiter keeps for a key it holds.

use crate::limiter::key_lines::KeyLine;

/// What the limiter keeps for a promoted key, as the stage sees it: the stage decides who
/// keeps a place by these, and tells the tenant when it leaves. (Its units in flight, evidence for keeping its place beside its requests, the stage keeps
/// itself, in a word per place that releases write without the lock.)
pub(crate) trait Tenant {
    /// Until when (nanoseconds on the limiter's clock) it keeps its place whatever the
    /// evidence: a key over its limit, whose requests something else refuses meanwhile
    /// without coming here.
    fn kept_until(&self) -> u64;
    /// Requests refused while it held the place: what the reports keep of it once it left.
    fn refused(&self) -> u64;
    /// Called under its set's lock as it leaves its place (demoted, or replaced), with its
    /// key's line: the last chance to count what it will no longer see.
    fn leaving(&mut self, line: KeyLine<'_>);
}
