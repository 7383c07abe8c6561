//! What a completed request tells the learner of its key, and what that changed.

/// What a completed request says of its origin, for an adaptive in-flight limit
/// ([`Permit::record`](crate::Permit::record)). A permit dropped without one is a
/// [`Success`](Outcome::Success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// The origin answered: its latency counts.
    #[default]
    Success,
    /// The origin failed under load or timed out (a 5xx, a timeout). Overloads slower than the
    /// tolerance allows over the origin's latency (timeouts, an origin failing under load)
    /// back the limit off, by half the share of a round's completions that were overloads;
    /// quick ones (a 5xx at the origin's own latency or faster, which a client's bad input can
    /// provoke) say nothing of load, and leave it alone.
    Overload,
}

/// A request that completed, as its permit tells the learner of its key: its units, what
/// its origin answered, whether its time says anything of the origin (not for an admission
/// another key's refusal took back), and when it was admitted if its key was learning then
/// (0 if not: its latency is not known, and it counts in no round).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) cost: u32,
    pub(crate) outcome: Outcome,
    pub(crate) measured: bool,
    pub(crate) admitted_at: u64,
}

/// What a completion changed: how many more requests the key may now have in flight (for
/// its waiters), and whether its learner is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completed {
    pub(crate) done: bool,
    pub(crate) rise: u32,
}
