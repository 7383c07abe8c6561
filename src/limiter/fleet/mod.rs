//! The limiter's one seam with a fleet (feature `redis`, `crate::fleet`): what the request
//! path reads of the fleet, what a promoted key keeps of it, and how a builder joins one.
//!
//! With the feature, these are the fleet's node and views ([`joined`](self) half); without it,
//! the same names are types of size zero whose answers are constants ("no fleet"), so that the
//! limiter's code reads the same either way and compiles to what it would be without a fleet.
//! The judgements on a fleet's counts are the `decision` module's, like every other.

#[cfg(feature = "redis")]
mod joined;
#[cfg(feature = "redis")]
mod member;
#[cfg(feature = "redis")]
pub(super) use joined::{Fleet, FleetRate, FleetSetup, FleetView};

#[cfg(not(feature = "redis"))]
mod alone;
#[cfg(not(feature = "redis"))]
pub(super) use alone::{Fleet, FleetRate, FleetSetup, FleetView};

/// What one decision reads of the fleet: relaxed loads, each free to be a sync older or newer
/// than the others, which only moves a threshold for one request.
#[derive(Debug, Clone, Copy)]
pub(super) struct FleetState {
    /// The fleet's size at the last sync that reached Redis (at least 1).
    pub(super) nodes: usize,
    /// `1 ÷ nodes`.
    pub(super) inverse: f64,
    /// Whether that sync is too old to trust its view: the node decides on its share alone.
    pub(super) degraded: bool,
    /// The sync interval (nanoseconds): how long a refusal on the fleet's counts may be held.
    pub(super) sync_nanos: u64,
}
