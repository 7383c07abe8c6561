//! The precise time of the shared clock: what a `Rate` reads near the end of a window (at
//! every request, for windows shorter than the coarse time's lag of two ticks), and what the
//! ticker publishes as the coarse time.
//!
//! It is the OS clock's monotonic time since a process-wide epoch, read through the CPU's
//! time-stamp counter: the `quanta` crate reads the counter and scales it to nanoseconds
//! (about 14 ns on the machines we measure on, against about 31 ns for `Instant::now`, a
//! system call's worth of work in the vDSO; on a CPU without an invariant counter `quanta`
//! reads the OS clock itself, and nothing is gained or lost).
//!
//! The counter's scale is calibrated once, at the first read, while the OS clock is
//! disciplined by NTP: left alone, the two drift apart by the calibration's error, a few parts
//! in a million, which over days of uptime would move a fleet's windows (aligned to the Unix
//! epoch when built, by the OS clock) by a good part of a second against the other nodes'. So
//! the ticker re-anchors the counter to the OS clock at every tick ([`anchor`]): the precise
//! time is the counter's nanoseconds plus the offset the last anchor measured. Between two
//! anchors it differs from the OS clock by one tick's drift (nanoseconds) and the anchor's
//! own error (at most half of [`MAX_BRACKET_NANOS`]); at an anchor it may step back by as
//! much, which no reader can tell from having been delayed as long between reading the time
//! and using it.
//!
//! A counter that goes back below its value at the epoch (a machine suspended on hardware
//! that resets it) reads as not moving ([`quanta::Clock::delta_as_nanos`] is 0 for a time
//! before its start): from the next anchor on, the precise time is the OS time of the last
//! anchor, a tick's resolution, until the counter passes its start again; until that anchor
//! (at most a tick, in which the machine has just woken), it reads as a time in the past, at
//! worst the epoch itself. It is never 0.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// How far apart two counter reads around an OS clock read may be for the pair to anchor
/// the counter: an OS read takes tens of nanoseconds, so a pair further apart had the thread
/// interrupted between them, and says only that the OS time fell somewhere in that span. The
/// anchor takes the span's middle, so its error is at most half of this: 0.5 µs, against the
/// windows' margin of two ticks (20 ms) near their ends.
const MAX_BRACKET_NANOS: u64 = 1_000;
/// Attempts an anchor makes at a pair that brackets the OS read closely enough; past them the
/// anchor keeps the last offset (a tick later it tries again).
const ANCHOR_ATTEMPTS: u32 = 4;

/// The counter, its value at the epoch, and the epoch on the OS clock.
struct Counter {
    clock: quanta::Clock,
    start: u64,
    epoch: Instant,
}

/// The OS time minus the counter's time, in nanoseconds since the epoch, as of the last
/// anchor. Written by the ticker at every tick, read by every precise read: `Relaxed`, since
/// it publishes nothing but itself, and any anchor's offset gives a good time. Cache-padded:
/// written every tick, it must not share a line with what requests write.
static OFFSET: crossbeam_utils::CachePadded<AtomicI64> =
    crossbeam_utils::CachePadded::new(AtomicI64::new(0));

/// The counter, calibrated and anchored at its first use (about 0.7 ms, once per process).
fn counter() -> &'static Counter {
    static COUNTER: OnceLock<Counter> = OnceLock::new();
    COUNTER.get_or_init(|| {
        let clock = quanta::Clock::new();
        let counter = Counter {
            start: clock.raw(),
            epoch: Instant::now(),
            clock,
        };
        // The first offset: the best bracket of a few, good enough even if none is close (the
        // offset is then off by up to the span, until the first tick's anchor).
        let offset = (0..ANCHOR_ATTEMPTS)
            .map(|_| counter.bracket())
            .min_by_key(|bracket| bracket.span)
            .map_or(0, |bracket| bracket.offset());
        // Stored before `get_or_init` returns: a thread that sees the counter sees it (the
        // cell's initialisation happens-before every `get` that returns it).
        OFFSET.store(offset, Ordering::Relaxed);
        counter
    })
}

impl Counter {
    /// The counter's nanoseconds since the epoch (0 if it went back).
    #[inline]
    fn nanos(&self) -> u64 {
        self.clock.delta_as_nanos(self.start, self.clock.raw())
    }

    /// The OS clock's nanoseconds since the epoch.
    fn os_nanos(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// An OS clock read between two counter reads.
    fn bracket(&self) -> Bracket {
        let before = self.nanos();
        let os = self.os_nanos();
        let after = self.nanos();
        Bracket {
            before,
            os,
            span: after.saturating_sub(before),
        }
    }
}

/// An OS clock read `os` taken while the counter moved from `before` over `span`.
#[derive(Clone, Copy, Debug)]
struct Bracket {
    before: u64,
    os: u64,
    span: u64,
}

impl Bracket {
    /// The offset this bracket measures, taking the OS read at the middle of its span.
    fn offset(self) -> i64 {
        let counter = self.before.saturating_add(self.span / 2);
        signed(self.os).saturating_sub(signed(counter))
    }

    /// Whether it is close enough to anchor the counter.
    fn is_close(self) -> bool {
        self.span <= MAX_BRACKET_NANOS
    }
}

fn signed(nanos: u64) -> i64 {
    i64::try_from(nanos).unwrap_or(i64::MAX)
}

/// The time a counter read `counter` gives under the offset `offset`: never 0 (0 means
/// "unknown" to the coarse time) and never before the epoch.
#[inline]
fn time_at(counter: u64, offset: i64) -> u64 {
    u64::try_from(signed(counter).saturating_add(offset))
        .unwrap_or(0)
        .max(1)
}

/// The precise time: nanoseconds since the process-wide epoch. Never 0, so 0 can mean
/// "unknown".
#[inline]
pub(super) fn now() -> u64 {
    time_at(counter().nanos(), OFFSET.load(Ordering::Relaxed))
}

/// Re-anchors the counter to the OS clock and returns the OS time (nanoseconds since the
/// epoch, never 0). The ticker calls it once a tick, before it publishes the coarse time.
pub(super) fn anchor() -> u64 {
    let counter = counter();
    for _ in 0..ANCHOR_ATTEMPTS {
        let bracket = counter.bracket();
        if bracket.is_close() {
            OFFSET.store(bracket.offset(), Ordering::Relaxed);
            return bracket.os.max(1);
        }
    }
    counter.os_nanos().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worst distance from the OS clock, over a day, of the time a counter running `ppm`
    /// parts per million fast gives, anchored (or not) once every [`STRIDE`] ticks, read at
    /// the anchor and at three points between it and the next.
    fn worst_error_over_a_day(ppm: u64, anchored: bool) -> u64 {
        let stride = STRIDE * super::super::TICK_NANOS;
        let counter_at = |os: u64| os + os / 1_000_000 * ppm;
        let mut offset = 0i64;
        let mut worst = 0u64;
        let day = 86_400 * 1_000_000_000u64;
        let mut os = 0;
        while os < day {
            if anchored {
                let bracket = Bracket {
                    before: counter_at(os),
                    os,
                    span: 0,
                };
                offset = bracket.offset();
            }
            for step in 0..4 {
                let t = os + step * stride / 4;
                worst = worst.max(time_at(counter_at(t), offset).abs_diff(t));
            }
            os += stride;
        }
        worst
    }

    /// Ticks between two anchors in the model: the ticker anchors at every tick, so a model
    /// that holds over this many holds there; a prime, so that the reads fall at every phase
    /// of the drift's integer steps.
    const STRIDE: u64 = 997;

    #[test]
    fn the_time_keeps_to_the_os_clock_when_the_counter_drifts() {
        // Calibration errors of a few parts per million, and one far worse.
        for ppm in [1, 5, 50] {
            let worst = worst_error_over_a_day(ppm, true);
            // The drift over the time between two anchors, however long the run.
            let bound = STRIDE * super::super::TICK_NANOS / 1_000_000 * ppm;
            assert!(worst <= bound, "{ppm} ppm: {worst} ns off, bound {bound}");
        }
        // Left unanchored, 5 ppm is 432 ms a day: what the anchor is for.
        assert!(worst_error_over_a_day(5, false) > 400_000_000);
    }

    #[test]
    fn a_bracket_the_thread_was_interrupted_in_does_not_anchor() {
        let close = Bracket {
            before: 1_000,
            os: 5_000,
            span: MAX_BRACKET_NANOS,
        };
        assert!(close.is_close());
        assert_eq!(close.offset(), 5_000 - 1_500);
        let interrupted = Bracket {
            span: MAX_BRACKET_NANOS + 1,
            ..close
        };
        assert!(!interrupted.is_close());
    }

    #[test]
    fn a_counter_that_went_back_gives_neither_zero_nor_a_time_before_the_epoch() {
        // Anchored when the counter was ahead of the OS clock, then reset to its start.
        let offset = Bracket {
            before: 9_000,
            os: 4_000,
            span: 0,
        }
        .offset();
        assert_eq!(time_at(0, offset), 1);
        assert_eq!(
            time_at(u64::MAX, i64::MAX),
            u64::try_from(i64::MAX).unwrap()
        );
        assert_eq!(time_at(u64::MAX, i64::MIN), 1);
    }

    #[test]
    fn the_precise_time_is_the_os_clock_within_an_anchor_s_error() {
        let counter = counter();
        for _ in 0..1_000 {
            anchor();
            let before = counter.os_nanos();
            let precise = now();
            let after = counter.os_nanos();
            // Between the two OS reads, give or take an anchor's error (and the ticker's
            // anchors meanwhile, each as good).
            let slack = MAX_BRACKET_NANOS;
            assert!(
                before.saturating_sub(slack) <= precise && precise <= after + slack,
                "{before} <= {precise} <= {after}"
            );
        }
    }
}
