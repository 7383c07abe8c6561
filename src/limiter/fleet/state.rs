//! What one decision reads of the fleet.

/// What one decision reads of the fleet: relaxed loads, each free to be a sync older or newer
/// than the others, which only moves a threshold for one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FleetState {
    /// The fleet's size at the last sync that reached Redis (at least 1).
    pub(crate) nodes: usize,
    /// `1 ÷ nodes`.
    pub(crate) inverse: f64,
    /// Whether that sync is too old to trust its view: the node decides on its share alone.
    pub(crate) degraded: bool,
    /// The sync interval (nanoseconds): how long a refusal on the fleet's counts may be held.
    pub(crate) sync_nanos: u64,
}
