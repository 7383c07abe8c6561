//! The faults `clock::testing` injects into the shared ticker, as the ticker reads them:
//! switches that the tests set, and the two hooks the ticker calls. Apart from `testing` so
//! that the ticker depends on these and not on the tests' API, which depends on the ticker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Set: the running ticker panics at its next tick.
pub(super) static PANIC_NEXT_TICK: AtomicBool = AtomicBool::new(false);
/// Non-zero: the running ticker sleeps this many milliseconds before its next tick.
pub(super) static STALL_NEXT_TICK_MS: AtomicU64 = AtomicU64::new(0);
/// Non-zero: every pass sleeps this many microseconds between reading the time and running
/// the users due, as a pass does whose thread is preempted or whose users are many.
pub(super) static LATE_BY_MICROS: AtomicU64 = AtomicU64::new(0);

/// The ticker's own faults, checked once per tick before it works.
pub(super) fn before_tick() {
    if PANIC_NEXT_TICK.swap(false, Ordering::Relaxed) {
        panic!("floodgate-ticker: panic injected by clock::testing::panic_ticker");
    }
    let stall = STALL_NEXT_TICK_MS.swap(0, Ordering::Relaxed);
    if stall > 0 {
        std::thread::sleep(Duration::from_millis(stall));
    }
}

/// A late pass, checked between reading the time and running the users due.
pub(super) fn before_pass() {
    let late = LATE_BY_MICROS.load(Ordering::Relaxed);
    if late > 0 {
        std::thread::sleep(Duration::from_micros(late));
    }
}
