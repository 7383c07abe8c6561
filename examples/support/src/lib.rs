//! What floodgate's examples and its soak server share, so that each example's own file shows
//! floodgate (the limiter, the layer, the fleet) and the machinery around it lives here, once.
//!
//! - [`origins`]: the demo's origins behind the limiter, and how a Host header picks one.
//! - [`server`]: the limiter's settings, the runtime and the server loop.
//! - [`clients`]: the demo's load: every class of client, and its progress lines.
//! - [`tally`]: the requests per origin class and their outcomes.
//! - [`memory`]: the heap a limiter takes, and what exact per-key maps would take instead.
//! - [`report`]: the report's tables and number formats.
//! - [`fleet`]: the fleet example's redis-server, load, counts per node and second, and report.
//! - [`accuracy`]: the exact models the accuracy example holds each decision procedure to.
//! - [`capacity_sim`]: origins of a fixed capacity, one slowing down, behind adaptive or
//!   static in-flight limits in simulated time (the adaptive limit's test, bench and figure).
//!
//! Used by the examples demo, fleet and accuracy (a dev-dependency of floodgate) and by the
//! soak server (tools/soak), so that the demo and the soak server measure the same server.
//! The programs that read heap figures install
//! `floodgate_test_support::counting_alloc::CountingAlloc` as their global allocator: a
//! library does not choose one for them.

pub mod accuracy;
pub mod capacity_sim;
pub mod clients;
pub mod fleet;
pub mod memory;
pub mod origins;
pub mod report;
pub mod server;
mod splitmix;
pub mod tally;
