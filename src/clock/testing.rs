//! Fault injection for tests of the ticker's self-healing. Not part of the stable API.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::ticker::{self, GENERATION};
use super::TICK;

/// Set: the running ticker panics at its next tick.
static PANIC_NEXT_TICK: AtomicBool = AtomicBool::new(false);
/// Non-zero: the running ticker sleeps this many milliseconds before its next tick.
static STALL_NEXT_TICK_MS: AtomicU64 = AtomicU64::new(0);
/// Non-zero: every pass sleeps this many microseconds between reading the time and running
/// the users due, as a pass does whose thread is preempted or whose users are many.
static LATE_BY_MICROS: AtomicU64 = AtomicU64::new(0);

/// Makes the running shared ticker panic at its next tick.
pub fn panic_ticker() {
    PANIC_NEXT_TICK.store(true, Ordering::Relaxed);
}

/// Makes the running shared ticker sleep for `stall` before its next tick.
pub fn stall_ticker(stall: Duration) {
    let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX).max(1);
    STALL_NEXT_TICK_MS.store(ms, Ordering::Relaxed);
}

/// Makes every pass of the shared ticker run its users `late` after it read the time, until
/// called again with `Duration::ZERO`: the users then work from a time that has passed.
pub fn make_ticks_late(late: Duration) {
    let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
    LATE_BY_MICROS.store(micros, Ordering::Relaxed);
}

/// Starts one more shared ticker thread that ticks alongside the current one (as a stalled
/// ticker and its replacement would), for `ticks` ticks, then exits.
pub fn run_duplicate_ticker(ticks: u32) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for _ in 0..ticks {
            ticker::tick_shared();
            std::thread::sleep(TICK / 2);
        }
    })
}

/// The generation of the current shared ticker (increases with every restart).
pub fn ticker_generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// How many users (`Rate`s) the shared ticker has scheduled, counting registrations and
/// cancellations it has not applied yet.
pub fn scheduled_users() -> usize {
    let scheduler = ticker::scheduler();
    let mut schedule = scheduler.lock();
    scheduler.apply_changes(&mut schedule);
    schedule.len()
}

/// How many times the shared ticker has run a user's work (a `Rate`'s window change) so far.
pub fn users_run() -> u64 {
    ticker::scheduler().runs()
}

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
