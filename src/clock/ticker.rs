//! The one shared ticker thread: the coarse time it publishes, the work it runs, and how a
//! dead or silent ticker is replaced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

#[cfg(feature = "fault-injection")]
#[cfg(feature = "fault-injection")]
use super::faults::{before_pass, before_tick};
use super::precise;
use super::resolution::TICK;
use super::schedule::Scheduler;

/// A ticker silent for this long is presumed dead or stalled.
const STALE_AFTER_NANOS: u64 = 1_000_000_000;
/// Reads of the coarse time between two liveness checks on one thread.
const CHECK_EVERY: u32 = 1024;

/// The coarse time in nanoseconds since the process-wide epoch, or 0 while no ticker is known
/// to run (before the first start, and after a ticker panicked). Written by tickers with
/// `fetch_max` so a late duplicate never moves it backwards; read with `Relaxed` because it
/// publishes no other data (a `Rate` synchronises with the ticker's slot clearing through its
/// own per-slot tags). Cache-padded: it is written every tick and read by every request, so
/// it must not share a line with anything written more often.
static COARSE: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
/// The generation of the ticker that should run; a ticker whose generation is no longer
/// current exits at its next wake-up. 0: never started.
pub(super) static GENERATION: AtomicU64 = AtomicU64::new(0);
/// When (precise nanoseconds) a ticker was last started; limits restarts to one per second.
pub(super) static LAST_START: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// Coarse-time reads on this thread since its last liveness check.
    static READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The shared ticker's schedule: the users it runs and when each is next due.
pub(super) fn scheduler() -> &'static Scheduler {
    static SCHEDULER: OnceLock<Scheduler> = OnceLock::new();
    SCHEDULER.get_or_init(|| Scheduler::new(precise_nanos()))
}

/// The precise time (nanoseconds since the process-wide epoch, never 0): see [`precise`].
#[inline]
pub(super) fn precise_nanos() -> u64 {
    precise::now()
}

/// The coarse time: one relaxed load, plus a liveness check once every 1,024 calls per thread.
#[inline]
pub(super) fn coarse_nanos() -> u64 {
    let coarse = COARSE.load(Ordering::Relaxed);
    if coarse == 0 {
        return start_ticker_now();
    }
    let due = READS.with(|reads| {
        let n = reads.get().wrapping_add(1);
        reads.set(n);
        n % CHECK_EVERY == 0
    });
    if due {
        check_liveness(coarse);
    }
    coarse
}

/// The shared coarse clock's current time (since the process-wide epoch), as the request
/// path sees it: about one tick behind the OS clock at most while the ticker runs and gets a
/// CPU when its tick is due. A ticker kept waiting for a CPU lets it trail further (30 ms was
/// seen with four busy threads on two cores); it never goes back.
///
/// # Examples
///
/// ```
/// let a = floodgate::clock::coarse_now();
/// let b = floodgate::clock::coarse_now();
/// assert!(b >= a);
/// ```
pub fn coarse_now() -> Duration {
    Duration::from_nanos(coarse_nanos())
}

/// The coarse time as published: one relaxed load, without starting or watching the ticker.
/// For a reader on the request path beside a `Rate` on the shared clock, whose own reads start
/// the ticker and watch it (the fleet's staleness check).
#[cfg(feature = "redis")]
#[inline]
pub(crate) fn coarse_load() -> u64 {
    COARSE.load(Ordering::Relaxed)
}

/// Starts the ticker unless one is known to run (the first `Rate` on the shared clock).
pub(super) fn ensure_started() {
    if COARSE.load(Ordering::Relaxed) == 0 {
        start_ticker_now();
    }
}

/// Compares the coarse time with the OS clock and replaces a silent ticker.
#[cold]
fn check_liveness(coarse: u64) {
    let now = precise_nanos();
    if now.saturating_sub(coarse) > STALE_AFTER_NANOS {
        start_ticker(now);
    }
}

/// Starts a ticker because none is known to run, and returns the precise time meanwhile.
#[cold]
fn start_ticker_now() -> u64 {
    let now = precise_nanos();
    start_ticker(now);
    now
}

/// Starts a ticker of a new generation unless one was started less than a second ago
/// (a first start always goes ahead). The old generation, if alive, exits when it wakes.
pub(super) fn start_ticker(now: u64) {
    let last = LAST_START.load(Ordering::Relaxed);
    let first = GENERATION.load(Ordering::Relaxed) == 0;
    if !first && last != 0 && now.saturating_sub(last) < STALE_AFTER_NANOS {
        return;
    }
    // One thread wins the right to start this generation.
    if LAST_START
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // Publish the time at once so the request path has a fresh value before the first tick
    // (read again: requests that saw no coarse time meanwhile used the precise clock).
    COARSE.fetch_max(now.max(precise_nanos()), Ordering::Relaxed);
    let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
    let spawned = std::thread::Builder::new()
        .name("floodgate-ticker".into())
        .spawn(move || run_ticker(generation));
    if spawned.is_err() {
        // No thread could be had (resource limits): let the next liveness check try again.
        LAST_START.store(0, Ordering::Relaxed);
    }
}

/// The ticker thread's loop.
fn run_ticker(generation: u64) {
    /// Marks the coarse time unknown if this ticker unwinds, so requests start another.
    struct DeathNotice(u64);
    impl Drop for DeathNotice {
        fn drop(&mut self) {
            if std::thread::panicking() && GENERATION.load(Ordering::Acquire) == self.0 {
                COARSE.store(0, Ordering::Relaxed);
            }
        }
    }
    let _notice = DeathNotice(generation);
    let mut deadline = Instant::now();
    loop {
        deadline += TICK;
        let now = Instant::now();
        match deadline.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            // Far behind (the machine was suspended, or we were starved): skip the missed
            // ticks instead of running them in a burst.
            None if now.duration_since(deadline) > 5 * TICK => deadline = now,
            None => {}
        }
        before_tick();
        if GENERATION.load(Ordering::Acquire) != generation {
            return; // replaced while asleep
        }
        tick_shared();
    }
}

/// Without the test hooks, a tick has no faults to inject.
#[cfg(not(feature = "fault-injection"))]
fn before_tick() {}
#[cfg(not(feature = "fault-injection"))]
fn before_pass() {}

/// One tick of the shared clock: anchor the precise time to the OS clock and publish the
/// time, then run the users that are due.
pub(super) fn tick_shared() {
    COARSE.fetch_max(precise::anchor(), Ordering::Relaxed);
    let scheduler = scheduler();
    let mut schedule = scheduler.lock();
    // Read the time again under the lock: waiting for it (behind a fork or another ticker)
    // must not make us run work for a time that has already passed.
    let now = precise_nanos();
    before_pass();
    scheduler.run(&mut schedule, now);
}
