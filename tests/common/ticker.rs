//! Helpers for the tests that run on the real shared ticker (tests/clock.rs, tests/faults.rs):
//! polling with a deadline, checks that the ticker is alive and single, and a healthy ticker
//! to start from.

use std::thread;
use std::time::{Duration, Instant};

use floodgate::clock::{self, testing, TICK};
use floodgate::Rate;

/// How long any recovery may take before a test fails. Property 7 (docs/architecture.md) asks
/// for 2 s of continued use; the margin is for a loaded machine, not a tolerance of the
/// property.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Long enough that every test runs inside the first window of a `Rate` it creates.
pub const HOUR: Duration = Duration::from_secs(3600);

/// Polls `cond` every `every` until it holds (Ok: time taken) or `limit` passes (Err).
pub fn poll(
    limit: Duration,
    every: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<Duration, Duration> {
    let start = Instant::now();
    loop {
        if cond() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(start.elapsed());
        }
        thread::sleep(every);
    }
}

/// Whether the coarse clock holds a published ticker time rather than falling back to the OS
/// clock (which it does while the time is marked unknown): back-to-back reads of a published
/// time are equal, except across a tick.
pub fn coarse_is_published() -> bool {
    (0..1000).any(|_| clock::coarse_now() == clock::coarse_now())
}

/// Checks that the shared ticker is alive: the coarse time is a published one and it advances
/// by at least five ticks while this thread only glances at it, with no restart meanwhile.
/// Returns how long that took. Never panics (forked children use it too).
pub fn ticker_alive() -> Result<Duration, String> {
    let generation = testing::ticker_generation();
    if !coarse_is_published() {
        return Err("the coarse time is not a published ticker time".into());
    }
    let from = clock::coarse_now();
    let took = poll(DEADLINE, Duration::from_millis(5), || {
        clock::coarse_now() >= from + 5 * TICK
    })
    .map_err(|waited| format!("coarse clock stuck at {from:?} for {waited:?}"))?;
    if testing::ticker_generation() != generation {
        return Err(format!(
            "the ticker was replaced while being checked (generation {generation} -> {})",
            testing::ticker_generation()
        ));
    }
    Ok(took)
}

/// Number of live `floodgate-ticker` threads in this process (Linux truncates thread names to
/// 15 bytes), or `None` where /proc is not available.
pub fn ticker_threads() -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("floodgate-tick"))
            .count(),
    )
}

/// Waits until exactly one ticker thread is left (replaced ones have exited); returns how
/// long that took, or an error after [`DEADLINE`]. Never panics (forked children use it too).
pub fn one_ticker_thread() -> Result<Duration, String> {
    if ticker_threads().is_none() {
        return Ok(Duration::ZERO); // no /proc: nothing to count
    }
    poll(DEADLINE, Duration::from_millis(10), || {
        ticker_threads() == Some(1)
    })
    .map_err(|waited| {
        format!(
            "{:?} ticker threads still running after {waited:?}: a replaced ticker did not exit",
            ticker_threads()
        )
    })
}

/// Starts the shared ticker if needed and waits until it is demonstrably healthy and alone.
pub fn healthy_ticker() {
    drop(Rate::new(HOUR)); // registering a Rate starts the ticker if none runs
    if let Err(e) = ticker_alive().and_then(|_| one_ticker_thread()) {
        panic!("precondition: shared ticker not healthy: {e}");
    }
}
