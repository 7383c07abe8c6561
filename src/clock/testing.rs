//! Fault injection for tests of the ticker's self-healing. Not part of the stable API.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::faults::{LATE_BY_MICROS, PANIC_NEXT_TICK, STALL_NEXT_TICK_MS};
use super::resolution::TICK;
use super::ticker::{self, GENERATION};

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
