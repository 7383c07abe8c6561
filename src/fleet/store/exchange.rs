//! What a sync pushes of each key and what it learns back.

/// The largest count a push carries, 2^53 − 1: the scripts compare and add counts as Lua
/// numbers (doubles), which hold every integer up to it exactly. Larger counts are pushed as
/// this one; no window of a rate limit counts that far.
pub(crate) const MAX_COUNT: u64 = (1 << 53) - 1;

/// One key's push: this node's count of `key` in `window` so far.
///
/// The count is absolute (every request of the window this node counted), not what it counted
/// since its last push: Redis keeps each node's count apart and keeps the larger of what it has
/// and what is pushed, so a push sent twice (a sync retried after a timeout that Redis did
/// run) or overtaken by a later one counts once, and a push that never arrived is made good by
/// the next. A count of 0 only reads the totals, and writes nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Push<'a> {
    /// The user key, any bytes.
    pub(crate) key: &'a [u8],
    /// The window number: Unix time in ms divided by the window's length, the same on every node.
    pub(crate) window: u64,
    /// This node's count of `key` in `window` (capped at [`MAX_COUNT`]).
    pub(crate) count: u64,
    /// This node's count of `key` in the window before: final, since that window is over
    /// (pushed again so that the end of the window, which the last sync of it missed, is
    /// counted, and so that a Redis that restarted empty has it back).
    pub(crate) previous: u64,
    /// The requests of `key` this node refused in `window`, and in the window before: the
    /// other nodes learn from them that this node takes any room the limit leaves.
    pub(crate) refused: u64,
    pub(crate) refused_previous: u64,
}

/// The fleet's counts of one pushed key, as Redis had them once the push was applied.
///
/// The other nodes that refused the key tell the fleet limiter which nodes will take any room
/// the limit leaves (`FleetView`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeyTotals {
    /// The sum of every node's count of the key in the push's window, this node's included.
    pub(crate) current: u64,
    /// The same in the window before (0 for window 0).
    pub(crate) previous: u64,
    /// The other nodes (this one not included) that refused the key in the push's window or
    /// the window before, each once.
    pub(crate) refusers: u32,
}

/// What a sync learnt: the fleet's counts of each pushed key, in push order, and the number of
/// nodes seen recently (this one included).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Synced<'a> {
    /// The counts of each push's key, `totals[i]` for `pushes[i]`.
    pub(crate) totals: &'a [KeyTotals],
    /// Nodes whose last sync is within the nodes' time to live.
    pub(crate) nodes: usize,
}
