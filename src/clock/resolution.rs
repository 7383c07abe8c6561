//! The clocks' resolution and unit: the shared ticker's period, [`TICK`], and the nanoseconds
//! that every clock, window and deadline of the crate counts in.

use std::time::Duration;

/// The period of the shared ticker: the resolution of the coarse clock.
pub const TICK: Duration = Duration::from_millis(10);
pub(crate) const TICK_NANOS: u64 = 10_000_000;

/// `duration` in nanoseconds, saturating at `u64::MAX` (584 years): the one conversion of
/// a `Duration` to the nanoseconds the clocks and windows count in.
#[inline]
pub(crate) fn saturating_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
