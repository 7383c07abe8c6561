//! Per-key limits on requests in flight and on request rate, decided in two stages.
//!
//! # The decision
//!
//! Every request hashes its key once and counts itself in the sketches: the in-flight
//! [`Estimator`](crate::Estimator) (given back when the [`Permit`] drops) and the [`Rate`](crate::Rate) window. Then:
//!
//! 1. **Sketch stage.** If every estimate is below its promotion threshold (a fraction of the
//!    limit, 1/2 by default) and the key is not promoted, the request is admitted: no map, no
//!    lock, no allocation. The estimates never under-count, so a key admitted here is truly
//!    under its limits.
//! 2. **Exact stage.** A key whose estimate reaches the threshold is promoted into a bounded
//!    exact stage (see the `exact` module): from then on its requests are also counted
//!    exactly, and each decision uses the smaller of the sketch's estimate and what the exact
//!    stage can prove, so a key that merely shares sketch columns with a heavy one is not
//!    rejected for it. A promoted key that cools down is demoted, on the request path for its
//!    own key and by a sweep on the clock's thread for the rest. A key whose place in the
//!    exact stage is taken by keys with more evidence is decided by the sketch alone, which
//!    can reject more but never admits more.
//!
//! Before either stage, a key already rejected for its rate is looked up in the over-limit
//! cache (the `overlimit` module) and rejected until its `retry_after` has passed, without a
//! lock and without counting: the flood path is the cheapest path.
//!
//! A request is admitted only if, counting itself, its key's in-flight count stays at or below
//! `max_inflight` and its sliding-window rate (`prev·(1−f) + curr`, see
//! [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`](crate::rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN)) at or
//! below `max_rate` per interval. Rejected requests give their in-flight count back at once;
//! they stay counted in the rate sketch, which measures offered load, while the exact stage
//! counts admitted requests only.
//!
//! # Volume
//!
//! Each sketch counter carries about (requests per window) ÷ (columns) of other keys'
//! requests: the noise every estimate starts from. The sketches are sized from one knob in the
//! user's terms, [`LimiterBuilder::peak_rate`] (requests per second, all keys together), so
//! that at that rate the noise stays well under the promotion threshold: light keys then never
//! reach the exact stage, and a flood of invented keys cannot fill it. Past that point (more
//! traffic than the peak, or a limit too low for the volume) [`Limiter::stats`] reports the
//! noise against the threshold and `saturated`; decisions stay one-sided (never more than the
//! limit), but healthy keys may be refused.
//!
//! # Concurrency
//!
//! Sketch estimates are read after the request's own increment (see
//! [`Estimator`](crate::Estimator)'s `incr`), so of any number of concurrent requests at most `limit` see a
//! count at or below the limit. The exact stage decides under its set's lock. The
//! promotion handshake is described in the `exact` module.

mod acquire;
mod adaptive;
mod builder;
mod counts;
mod decision;
mod defaults;
mod exact;
mod fleet;
mod handle;
mod inspect;
mod key_lines;
mod limits;
mod overlimit;
mod path;
mod permit;
mod promoted;
mod proof;
mod quiet;
mod report;
mod shared;
mod sketches;
mod sweep;
mod tally;
mod ticket;
mod wait;
mod with_limits;

pub use acquire::Acquire;
pub use adaptive::{AdaptiveInflight, Outcome};
pub use builder::LimiterBuilder;
pub use handle::Limiter;
pub use limits::{LimitKind, Limits};
pub use permit::{OwnedPermit, Permit};
pub use report::{Estimate, Figure, HeavyHitter, InflightLimit, LimiterStats, Reason, Rejected};
#[cfg(feature = "tower")]
pub(crate) use ticket::Receipt;
pub use with_limits::WithLimits;
