//! Coarse time for the request path, and the one shared ticker thread that keeps it.
//!
//! # The shared ticker
//!
//! One background thread per process, named `floodgate-ticker`, started lazily by the first
//! [`Rate`](crate::Rate) (or anything built on it). Every [`TICK`] (10 ms), on absolute
//! deadlines so a late tick does not push the later ones back, it
//!
//! 1. publishes the time (nanoseconds since a process-wide epoch) in one atomic, which the
//!    request path reads with a single relaxed load instead of calling `Instant::now()`, and
//!    anchors the precise time to the OS clock: what a request reads near a window's end,
//!    where the coarse time could be a tick late, is the CPU's time-stamp counter scaled to
//!    the OS clock's nanoseconds (about half the cost of `Instant::now()`; `precise.rs`);
//! 2. runs the periodic work that is due: each `Rate` clears the window slots it will use
//!    next as each of its windows begins, well before they are used, and each `Limiter`
//!    sweeps its exact stage, forgets the over-limit deadlines that have passed and wakes
//!    the waiters that are due.
//!
//! The work of a tick follows what is due, not how many `Rate`s exist: each `Rate` is one
//! entry in a hierarchical timing wheel keyed by the tick of its next window change (O(1) to
//! schedule and to cancel), so a process with a million `Rate`s of one-hour windows costs its
//! ticker nothing between their window changes. Creating or dropping a `Rate` never waits for
//! a tick: it hands its registration (or cancellation) to the ticker through a list that the
//! ticker takes whole at the start of its next tick. A dropped `Rate` is freed at once.
//!
//! # Self-healing
//!
//! - A ticker that panics marks the coarse time as unknown on its way out; the next request
//!   sees that and starts a replacement.
//! - A ticker that is alive but silent (stalled, or absent in a forked child) is noticed by a
//!   liveness check that each thread makes once every 1,024 reads of the coarse time: when the
//!   coarse time is more than one second behind the OS clock, a replacement is started (at most
//!   one per second). The stalled ticker exits when it wakes up, because it is no longer the
//!   current generation.
//! - Window preparation is idempotent per window (each slot records the window it was cleared
//!   for, and tickers take turns under one lock), so a late, duplicate or restarted ticker never
//!   clears a window twice, and it never clears the current or previous window.
//!
//! # Fork
//!
//! A forked child has no ticker thread. Call [`prepare_fork`] just before `fork()` (it waits
//! for a tick in progress and holds the ticker's locks, so no lock is held mid-update across
//! the fork), then [`after_fork_in_parent`] in the parent and [`after_fork_in_child`] in the
//! child; the child then gets its own ticker at once. Without these calls the child's liveness
//! check still starts a ticker after about a second of use, unless the fork landed while the
//! ticker held its lock.
//!
//! # Testing
//!
//! [`ManualClock`] is a clock that tests advance by hand; the work due on the way runs
//! synchronously inside [`ManualClock::advance`], so window tests are deterministic and never
//! sleep.

#[cfg(feature = "fault-injection")]
mod faults;
mod fork;
mod manual;
mod precise;
mod resolution;
mod schedule;
mod source;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod testing;
mod ticker;
pub(crate) mod wheel;

pub use fork::{after_fork_in_child, after_fork_in_parent, prepare_fork};
pub use manual::ManualClock;
pub use resolution::TICK;
pub(crate) use resolution::{saturating_nanos, TICK_NANOS};
pub(crate) use schedule::{Registration, Tick};
pub(crate) use source::TimeSource;
#[cfg(feature = "redis")]
pub(crate) use ticker::coarse_load;
pub use ticker::coarse_now;
