//! Simulated time for `Rate` and `Limiter`: a `ManualClock`, the model's copy of its time,
//! and the advances an operation can ask for.

use std::time::Duration;

use arbitrary::Arbitrary;
use floodgate::clock::ManualClock;

use super::TICK_NANOS;

/// Ticks of simulated time one input may advance by: each 10 ms boundary crossed may run a
/// tick, so this bounds the work of one input.
const TICK_BUDGET: u64 = 20_000;

/// How far one operation moves the clock, relative to windows of `bucket` ns: a little, to a
/// boundary (exactly, or a nanosecond either side), a fraction of a window, or several.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Advance {
    /// A whole tick: lands on window boundaries and simple fractions.
    Tick,
    Nanos(u16),
    Micros(u16),
    ToBoundary,
    BeforeBoundary,
    AfterBoundary,
    /// `x/256` of a window.
    Fraction(u8),
    /// `1 + w % max` windows plus `ns` nanoseconds.
    Windows(u8, u16),
    /// 1–250 ms.
    Millis(u8),
    /// 1–25 ticks.
    Ticks(u8),
    /// `whole % 3` windows plus `eighths % 8` eighths of one, nudged by −2..=2 ns.
    Eighths {
        whole: u8,
        eighths: u8,
        nudge: i8,
    },
    /// 3–42 windows: every slot of a ring reused.
    Many(u8),
    /// 1 ns to a whole window.
    WithinWindow(u32),
}

/// A `ManualClock` and the model's copy of its time.
pub struct Time {
    pub clock: ManualClock,
    /// Nanoseconds since the clock was made.
    pub now: u64,
    /// Simulated time left, in ticks.
    budget: u64,
}

impl Time {
    pub fn new() -> Self {
        Time {
            clock: ManualClock::new(),
            now: 0,
            budget: TICK_BUDGET,
        }
    }

    /// Advances by `nanos` and returns true, unless the input has used up its budget.
    pub fn advance(&mut self, nanos: u64) -> bool {
        let ticks = nanos / TICK_NANOS + 1;
        if ticks > self.budget {
            return false;
        }
        self.budget -= ticks;
        self.clock.advance(Duration::from_nanos(nanos));
        self.now += nanos;
        assert_eq!(
            self.clock.now(),
            Duration::from_nanos(self.now),
            "ManualClock::now"
        );
        true
    }

    /// Advances as `by` says, for windows of `bucket` ns anchored at `start`, at most
    /// `max_windows` windows for [`Advance::Windows`].
    pub fn advance_by(&mut self, by: Advance, start: u64, bucket: u64, max_windows: u64) {
        let to_boundary = bucket - (self.now - start) % bucket;
        let nanos = match by {
            Advance::Tick => TICK_NANOS,
            Advance::Nanos(n) => u64::from(n),
            Advance::Micros(n) => u64::from(n) * 1000,
            Advance::ToBoundary => to_boundary,
            Advance::BeforeBoundary => to_boundary - 1,
            Advance::AfterBoundary => to_boundary + 1,
            Advance::Fraction(x) => bucket * u64::from(x) / 256,
            Advance::Windows(w, ns) => bucket * (1 + u64::from(w) % max_windows) + u64::from(ns),
            Advance::Millis(ms) => (1 + u64::from(ms) % 250) * 1_000_000,
            Advance::Ticks(t) => (1 + u64::from(t) % 25) * TICK_NANOS,
            Advance::Eighths {
                whole,
                eighths,
                nudge,
            } => (u64::from(whole % 3) * bucket + u64::from(eighths % 8) * bucket / 8)
                .saturating_add_signed(i64::from(nudge % 3)),
            Advance::Many(w) => bucket * (3 + u64::from(w) % 40),
            Advance::WithinWindow(n) => 1 + u64::from(n) % bucket,
        };
        self.advance(nanos);
    }
}
