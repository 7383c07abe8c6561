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
#[cfg(feature = "redis")]
pub(super) use member::spawn_sync;

#[cfg(not(feature = "redis"))]
mod alone;
#[cfg(not(feature = "redis"))]
pub(super) use alone::{Fleet, FleetRate, FleetSetup, FleetView};

mod state;
pub(super) use state::FleetState;
