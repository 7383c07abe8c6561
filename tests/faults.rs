#![cfg(not(floodgate_loom))]
//! End-to-end fault tests: the shared ticker panicking, stalling and being duplicated while
//! one thread observes and while four do; a process forked with a `Limiter` in use; and code that panics
//! while it holds permits, directly and behind the tower layer.
//!
//! What each fault must not break (docs/architecture.md, "Properties that must hold
//! everywhere"): windows resume (property 7), no window is cleared twice and no count of the
//! current window is lost (property 6), exactly one ticker is left running, and every permit
//! comes back (property 2).
//!
//! Each ticker fault is one body run twice, as two tests: with one observing thread and with
//! four. tests/clock.rs covers the fork with a bare `Rate` (here the fork carries a `Limiter`)
//! and the ticker's schedule.
//!
//! Every test takes [`serial`] first: the ticker tests share the process-wide ticker, and the
//! fork test must not fork while another test's thread holds a lock the child would need
//! (stdout, the allocator's, a limiter's). These tests run on real time by nature: they poll
//! with short sleeps, give up after a generous deadline (which fails the test), print how
//! long recovery took, and never assert a timing.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
mod common;

use common::fork::fork_child;
use common::serial::serial;
use common::ticker::{healthy_ticker, one_ticker_thread, poll, ticker_alive, DEADLINE, HOUR};
use floodgate::clock::{self, testing, ManualClock, TICK};
use floodgate::layer::{LimitLayer, LimitService};
use floodgate::{Limiter, OwnedPermit, Permit, Rate, Reason};
use floodgate_fuzz_harness::permits::AnyPermit;
use floodgate_test_support::panics::panic_message;
use http::header::HOST;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

// ---------------------------------------------------------------------------------------------
// Shared helpers.

/// The short interval whose windows must rotate again after a fault.
const SHORT: Duration = Duration::from_millis(50);

/// A Rate due at every tick (sub-windows of 10 ms): its slots are prepared by whichever
/// ticker's pass comes first.
const BUSY: Duration = Duration::from_millis(40);

/// Events counted on the hour-long Rate before the fault, which must all still be there after.
const COUNTED_BEFORE: isize = 7;

/// Marks the panics the tests cause on purpose; the panic hook keeps them off stderr.
const INJECTED: &str = "injected by tests/faults.rs";

// ---------------------------------------------------------------------------------------------
// Ticker faults while one thread or several observe.

/// Sets a flag when dropped: stops the observers even if the test body panics, so the scope
/// that joins them cannot hang.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One observer's key and its exact count on the hour-long `Rate`.
struct Observed {
    key: String,
    count: isize,
}

/// The Rates a ticker fault hits.
struct Rates {
    /// Hour-long: every test runs inside its first window, so its counts must stay exact.
    long: Rate,
    /// [`SHORT`]: its windows must rotate again after the fault.
    short: Rate,
    /// [`BUSY`]: due at every tick, so every ticker pass (duplicates' too) has work for it.
    busy: Rate,
}

impl Rates {
    fn new() -> Self {
        Rates {
            long: Rate::new(HOUR),
            short: Rate::new(SHORT),
            busy: Rate::builder(BUSY).sub_windows(4).build().unwrap(),
        }
    }

    /// Counts [`COUNTED_BEFORE`] events of a key on the long Rate, each observe returning
    /// exactly one more than the last: [`assert_observed_whole`] checks them after the fault.
    fn count_before(&self) -> Observed {
        let key = "before".to_string();
        let mut count = self.long.peek(key.as_str());
        for _ in 0..COUNTED_BEFORE {
            let got = self.long.observe(key.as_str(), 1);
            count += 1;
            assert_eq!(got, count, "{key}: observe before the fault");
        }
        Observed { key, count }
    }
}

/// Observes `key` on the long Rate until `stop`, checking that every observe returns exactly
/// the running count (the hour-long window never changes, so nothing may clear or lose any of
/// it); observes it on the short Rate through a [`WindowProbe`], which checks every window
/// change it sees; and on the busy Rate, whose count must include at least this observe.
/// Sleeps a millisecond every 256 observes: continued use, not a busy loop. Sets `failed` on
/// an error.
fn observe_until(
    rates: &Rates,
    key: String,
    stop: &AtomicBool,
    failed: &AtomicBool,
) -> Result<Observed, String> {
    let fail = |e: String| {
        failed.store(true, Ordering::Relaxed);
        Err(e)
    };
    let Rates { long, short, busy } = rates;
    let mut count = long.peek(key.as_str());
    if count != 0 {
        return fail(format!("{key}: fresh key starts at {count}"));
    }
    let mut probe = WindowProbe::new(short, &key);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            let got = long.observe(key.as_str(), 1);
            count += 1;
            if got != count {
                return fail(format!(
                    "{key}: observe returned {got}, expected exactly {count}: a count of the \
                     current window was {}",
                    if got < count { "lost" } else { "doubled" }
                ));
            }
            if let Err(e) = probe.step() {
                return fail(format!("{key} on the {SHORT:?} Rate: {e}"));
            }
            let on_busy = busy.observe(key.as_str(), 1);
            if on_busy < 1 {
                return fail(format!(
                    "{key}: observe on the {BUSY:?} Rate returned {on_busy}, not counting itself"
                ));
            }
        }
        thread::sleep(Duration::from_millis(1));
    }
    Ok(Observed { key, count })
}

/// Runs `body` on this thread while `observers` threads run [`observe_until`]; returns what
/// `body` returned and each observer's key and count. `body` gets the flag the observers set
/// when one of them fails.
fn with_observers<R>(
    observers: usize,
    rates: &Rates,
    body: impl FnOnce(&AtomicBool) -> R,
) -> (R, Vec<Result<Observed, String>>) {
    let stop = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    thread::scope(|s| {
        let observers: Vec<_> = (0..observers)
            .map(|i| {
                let (stop, failed) = (&stop, &failed);
                s.spawn(move || observe_until(rates, format!("observer-{i}"), stop, failed))
            })
            .collect();
        let result = {
            let _stop = StopOnDrop(&stop);
            body(&failed)
        };
        let observed = observers
            .into_iter()
            .map(|o| {
                o.join()
                    .unwrap_or_else(|p| Err(format!("observer panicked: {}", panic_message(&*p))))
            })
            .collect();
        (result, observed)
    })
}

/// Checks each observer's result and that the hour-long `Rate` still holds every count whole
/// (peek, and `rate_with`: nothing in a previous window, everything in the current one).
/// Returns the total number of observes.
fn assert_observed_whole(long: &Rate, observed: Vec<Result<Observed, String>>) -> isize {
    let mut total = 0;
    for o in observed {
        let Observed { key, count } = o.unwrap_or_else(|e| panic!("observer failed: {e}"));
        assert!(count > 0, "{key} never observed");
        let parts = long.rate_with(key.as_str(), |c| c);
        assert_eq!(
            (
                long.peek(key.as_str()),
                parts.prev_samples,
                parts.curr_samples
            ),
            (count, 0, count),
            "{key}: the hour-long window lost or gained counts ({parts:?})"
        );
        assert_eq!(long.rate(key.as_str()), 0.0, "{key}: no window is complete");
        total += count;
    }
    total
}

/// Consecutive clean window changes that show the windows rotate again: one more than the
/// ring of k + 4 = 5 slots of a plain `Rate`, so every slot has been reused cleared.
const STREAK: u32 = 6;
/// Of the window changes, how many must have been checked against `rate()`.
const VERIFIED: u32 = 3;

/// Observes one key of the short `Rate` from one thread, and checks each window change it
/// sees: the new window starts from a cleared slot (observe returns exactly 1), and `rate()`
/// then reports exactly the count of the window just ended.
///
/// A ticker that has just come back after a silence catches up on the slots it missed, so
/// the first window changes after it may land in a slot not cleared yet (an over-count, never
/// an under-count): those are counted as stale and restart the streak of clean changes.
#[derive(Debug)]
struct WindowProbe<'a> {
    rate: &'a Rate,
    key: &'a str,
    /// What the last observe returned: the key's count in its window so far.
    last: isize,
    /// Whether the window of `last` started from a cleared slot.
    clean: bool,
    changes: u32,
    streak: u32,
    verified: u32,
    stale: u32,
}

impl<'a> WindowProbe<'a> {
    fn new(rate: &'a Rate, key: &'a str) -> Self {
        WindowProbe {
            rate,
            key,
            last: rate.observe(key, 1),
            clean: false,
            changes: 0,
            streak: 0,
            verified: 0,
            stale: 0,
        }
    }

    fn step(&mut self) -> Result<(), String> {
        let got = self.rate.observe(self.key, 1);
        if got == self.last + 1 {
            self.last = got;
            return Ok(());
        }
        self.changes += 1;
        if got != 1 {
            self.stale += 1;
            self.streak = 0;
            self.clean = false;
        } else {
            if self.clean {
                self.verify_rate()?;
            }
            self.streak += 1;
            self.clean = true;
        }
        self.last = got;
        Ok(())
    }

    /// Just after an observe returned 1 in a new window: `rate()` must report the window
    /// before it, which held exactly `last` events. Conclusive only if the time is still in
    /// that new window (the current count is still 1) and the window before is the one
    /// `last` was counted in (not an empty one this thread slept through).
    fn verify_rate(&mut self) -> Result<(), String> {
        let rate = self.rate.rate(self.key);
        let parts = self.rate.rate_with(self.key, |c| c);
        if parts.curr_samples != 1 || parts.prev_samples == 0 {
            return Ok(());
        }
        let expected = self.last as f64 / self.rate.interval().as_secs_f64();
        if parts.prev_samples != self.last || rate != expected {
            return Err(format!(
                "observe of {:?} restarted at 1 after {} in the window it left, but the last \
                 complete window holds {} (rate() {rate}/s, expected {expected}/s; {parts:?}): \
                 the window it was in was cleared under it, or rate() misreports",
                self.key, self.last, parts.prev_samples
            ));
        }
        self.verified += 1;
        Ok(())
    }

    fn rotating_cleanly(&self) -> bool {
        self.streak >= STREAK && self.verified >= VERIFIED
    }
}

/// How the short Rate's windows came back, as [`windows_resume`] saw it.
struct Resumed {
    /// Since the probe started: until the coarse clock had advanced five ticks.
    coarse_advancing: Duration,
    /// Since the probe started: until the windows rotated cleanly.
    rotating: Duration,
    changes: u32,
    stale: u32,
}

/// Probes `short` every 2 ms until the coarse clock has advanced five ticks, the windows
/// rotate cleanly (see [`WindowProbe`]) and `until` holds; fails after [`DEADLINE`], at a
/// wrong count, or when an observer fails.
fn windows_resume(
    short: &Rate,
    failed: &AtomicBool,
    mut until: impl FnMut() -> bool,
) -> Result<Resumed, String> {
    let start = Instant::now();
    let coarse_from = clock::coarse_now();
    let mut coarse_advancing = None;
    let mut probe = WindowProbe::new(short, "probe");
    let mut error = None;
    let done = poll(DEADLINE, Duration::from_millis(2), || {
        if coarse_advancing.is_none() && clock::coarse_now() >= coarse_from + 5 * TICK {
            coarse_advancing = Some(start.elapsed());
        }
        if let Err(e) = probe.step() {
            error = Some(e);
        }
        error.is_some()
            || failed.load(Ordering::Relaxed)
            || (coarse_advancing.is_some() && probe.rotating_cleanly() && until())
    });
    if let Some(e) = error {
        return Err(format!("the probe on the {SHORT:?} Rate: {e}"));
    }
    match (done, coarse_advancing) {
        _ if failed.load(Ordering::Relaxed) => Err("an observer failed".into()),
        (Ok(rotating), Some(coarse_advancing)) => Ok(Resumed {
            coarse_advancing,
            rotating,
            changes: probe.changes,
            stale: probe.stale,
        }),
        (_, coarse) => Err(format!(
            "within {DEADLINE:?}: coarse clock advancing after {coarse:?} (from \
             {coarse_from:?}); windows of the {SHORT:?} Rate not rotating cleanly: {probe:?}"
        )),
    }
}

/// A fault that makes the ticker stop (`inject`), hit while `observers` threads observe:
/// the observers' continued use must replace it exactly once, the coarse clock must advance
/// again, the short Rate's windows must rotate cleanly again, the replaced ticker must exit,
/// and no count may be lost, of those made before the fault or during it.
fn stopped_ticker_is_replaced_while_threads_observe(
    observers: usize,
    fault: &str,
    inject: impl FnOnce(),
) {
    let _serial = serial();
    let rates = Rates::new();
    healthy_ticker();
    let before = rates.count_before();
    let old = testing::ticker_generation();

    let (recovery, observed) = with_observers(observers, &rates, |failed| {
        let injected = Instant::now();
        inject();
        let replaced = poll(DEADLINE, Duration::from_millis(1), || {
            failed.load(Ordering::Relaxed) || testing::ticker_generation() > old
        })
        .map_err(|waited| format!("generation still {old} after {waited:?} of continued use"))?;
        if failed.load(Ordering::Relaxed) {
            return Err("an observer failed".to_string());
        }
        let replaced = replaced.min(injected.elapsed());
        let resumed = windows_resume(&rates.short, failed, || true)?;
        Ok((replaced, resumed))
    });
    let total = assert_observed_whole(&rates.long, observed);
    assert_observed_whole(&rates.long, vec![Ok(before)]);
    let (replaced, resumed) = recovery.unwrap_or_else(|e| panic!("{fault}: {e}"));
    ticker_alive().unwrap_or_else(|e| panic!("{fault}: replacement ticker not working: {e}"));
    let exited = one_ticker_thread().unwrap_or_else(|e| panic!("{fault}: {e}"));
    assert_eq!(
        testing::ticker_generation(),
        old + 1,
        "{fault}: {observers} threads racing to replace the ticker started more than one"
    );
    let Resumed {
        coarse_advancing,
        rotating,
        changes,
        stale,
    } = resumed;
    println!(
        "{fault}: replaced after {replaced:?}; then coarse clock advancing after \
         {coarse_advancing:?}, windows rotating cleanly after {rotating:?} ({changes} changes, \
         {stale} stale); one ticker thread left {exited:?} after that; {total} observes by \
         {observers} threads all counted"
    );
}

fn panic_ticker(observers: usize) {
    stopped_ticker_is_replaced_while_threads_observe(
        observers,
        "panicked ticker",
        testing::panic_ticker,
    );
}

fn stall_ticker(observers: usize) {
    stopped_ticker_is_replaced_while_threads_observe(observers, "stalled ticker", || {
        testing::stall_ticker(Duration::from_millis(1500))
    });
}

#[test]
fn a_ticker_that_panics_while_one_thread_observes_is_replaced_once_and_no_count_is_lost() {
    panic_ticker(1);
}

#[test]
fn a_ticker_that_panics_while_four_threads_observe_is_replaced_once_and_no_count_is_lost() {
    panic_ticker(4);
}

#[test]
fn a_ticker_that_stalls_while_one_thread_observes_is_replaced_once_and_no_count_is_lost() {
    stall_ticker(1);
}

#[test]
fn a_ticker_that_stalls_while_four_threads_observe_is_replaced_once_and_no_count_is_lost() {
    stall_ticker(4);
}

/// Three duplicate tickers run beside the real one while `observers` threads observe: none
/// clears a window twice (every count, before them and during them, stays exact), the short
/// Rate's windows keep rotating cleanly, and the real ticker is neither replaced nor joined by
/// another thread.
fn duplicate_tickers_while_threads_observe(observers: usize) {
    let _serial = serial();
    let rates = Rates::new();
    healthy_ticker();
    let before = rates.count_before();
    let generation = testing::ticker_generation();

    let (outcome, observed) = with_observers(observers, &rates, |failed| {
        let started = Instant::now();
        // Three extra tickers, each ticking every 5 ms for 300 ticks, beside the real one.
        let duplicates: Vec<_> = (0..3).map(|_| testing::run_duplicate_ticker(300)).collect();
        let resumed = windows_resume(&rates.short, failed, || {
            duplicates.iter().all(|d| d.is_finished())
        });
        let ran = started.elapsed();
        for duplicate in duplicates {
            if duplicate.join().is_err() {
                return Err("a duplicate ticker panicked".to_string());
            }
        }
        resumed.map(|r| (ran, r.changes, r.stale))
    });
    let total = assert_observed_whole(&rates.long, observed);
    assert_observed_whole(&rates.long, vec![Ok(before)]);
    let (ran, changes, stale) = outcome.unwrap_or_else(|e| panic!("duplicate tickers: {e}"));
    assert_eq!(
        testing::ticker_generation(),
        generation,
        "the real ticker was replaced"
    );
    one_ticker_thread().unwrap();
    ticker_alive().unwrap();
    println!(
        "3 duplicate tickers ran {ran:?}: {changes} window changes probed ({stale} stale), \
         {total} observes by {observers} threads all counted"
    );
}

#[test]
fn duplicate_tickers_while_one_thread_observes_clear_nothing_twice_and_windows_keep_rotating() {
    duplicate_tickers_while_threads_observe(1);
}

#[test]
fn duplicate_tickers_while_four_threads_observe_clear_nothing_twice_and_windows_keep_rotating() {
    duplicate_tickers_while_threads_observe(4);
}

/// Sub-windows of the victim Rate in the late-tick test: each one tick long.
const VICTIM_SUB_WINDOWS: u32 = 16;

/// Observes `key` on `rate` until `stop` or a lost count, and returns how many sub-window
/// changes it saw. `rate` has sub-windows of one tick, so it reads the precise clock on every
/// call (they are shorter than the two-tick margin within which the coarse clock is not
/// trusted) and `current_interval_fraction` is exact: of two readings less than a sub-window
/// apart, the later one is in the same sub-window if its fraction is not lower. Within one
/// sub-window counts only grow: the current count (its last k sub-windows) by at least this
/// thread's observe, and the count before it not at all.
fn counts_never_shrink(rate: &Rate, key: &str, stop: &AtomicBool) -> Result<u64, String> {
    let sub_window = rate.interval() / VICTIM_SUB_WINDOWS;
    let mut changes = 0;
    let mut before = (Instant::now(), rate.rate_with(key, |c| c));
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        rate.observe(key, 1);
        let parts = rate.rate_with(key, |c| c);
        let (then, last) = before;
        before = (start, parts);
        let same = parts.current_interval_fraction >= last.current_interval_fraction
            && start.elapsed() + start.duration_since(then) < sub_window;
        if !same {
            changes += 1;
        } else if parts.curr_samples < last.curr_samples + 1
            || parts.prev_samples < last.prev_samples
        {
            return Err(format!(
                "{key}: counts of windows in use shrank within one sub-window ({changes} \
                 sub-window changes before): {last:?} -> {parts:?}"
            ));
        }
    }
    Ok(changes)
}

/// Puts the shared ticker back on time when dropped, even if the test body panics.
struct OnTime;

impl Drop for OnTime {
    fn drop(&mut self) {
        testing::make_ticks_late(Duration::ZERO);
    }
}

#[test]
fn a_tick_that_runs_late_never_clears_a_window_in_use() {
    let _serial = serial();
    healthy_ticker();
    // Every pass of the shared ticker runs its users three and a half ticks after it read the
    // time, as a pass does whose thread was preempted, or that had many users due before this
    // one: each time the victim's work runs, the windows it would clear from that stale time
    // have already begun.
    let _on_time = OnTime;
    testing::make_ticks_late(TICK * 7 / 2);
    // Sub-windows of one tick: the window in use spans the last 17 of them, so a slot cleared
    // for a sub-window that began up to 16 sub-windows ago is one whose counts are still read.
    let victim = Rate::builder(VICTIM_SUB_WINDOWS * TICK)
        .sub_windows(VICTIM_SUB_WINDOWS as usize)
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let results: Vec<_> = thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (victim, stop) = (&victim, &stop);
                s.spawn(move || {
                    let result = counts_never_shrink(victim, &format!("victim-{i}"), stop);
                    stop.store(true, Ordering::Relaxed);
                    result
                })
            })
            .collect();
        let _ = poll(Duration::from_secs(2), Duration::from_millis(10), || {
            stop.load(Ordering::Relaxed)
        });
        stop.store(true, Ordering::Relaxed);
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for result in results {
        let changes = result.unwrap_or_else(|e| panic!("{e}"));
        println!("{changes} sub-window changes, no count lost");
    }
}

// ---------------------------------------------------------------------------------------------
// Fork with a Limiter.

/// The fork test's limits.
const MAX_INFLIGHT: u32 = 4;
const MAX_RATE: u32 = 20;
const RATE_INTERVAL: Duration = Duration::from_millis(100);
/// The key that holds permits across the fork, and how many.
const HELD: &str = "held.example";
const HELD_BEFORE_FORK: usize = 3;
/// The key whose rate windows must keep rotating.
const BURST: &str = "burst.example";

/// Permits taken before the fork, both kinds; each process releases its own copies.
type Inherited<'a> = Mutex<(Vec<Permit<'a, String>>, Vec<OwnedPermit<String>>)>;

/// The in-flight limit in a process that inherited [`HELD_BEFORE_FORK`] permits of [`HELD`]:
/// they still count, one more fits and the next is refused; once they are released (here, in
/// this process only) exactly the limit fits again.
fn inflight_limit_holds(limiter: &Limiter<String>, inherited: &Inherited) -> Result<(), String> {
    let inflight = |expected: isize, when: &str| match limiter.estimate(HELD).inflight {
        Some(n) if n == expected => Ok(()),
        other => Err(format!("{when}: in flight {other:?}, expected {expected}")),
    };
    inflight(HELD_BEFORE_FORK as isize, "permits held before the fork")?;
    let extra: Vec<_> = (HELD_BEFORE_FORK as u32..MAX_INFLIGHT)
        .map(|_| limiter.try_acquire(HELD))
        .collect::<Result<_, _>>()
        .map_err(|r| format!("refused below the limit after the fork: {r}"))?;
    inflight(MAX_INFLIGHT as isize, "at the limit")?;
    match limiter.try_acquire(HELD) {
        Err(r) if r.reason == Reason::Inflight && r.limit == MAX_INFLIGHT => {}
        Err(r) => {
            return Err(format!(
                "over the limit, refused for the wrong reason: {r:?}"
            ))
        }
        Ok(_) => return Err("admitted over the in-flight limit after the fork".into()),
    }
    drop(extra);
    {
        let mut held = inherited.lock().unwrap_or_else(|p| p.into_inner());
        held.0.clear();
        held.1.clear();
    }
    inflight(0, "after releasing the inherited permits")?;
    let mut permits = Vec::new();
    for i in 0..MAX_INFLIGHT {
        let permit = limiter
            .try_acquire_owned(HELD)
            .map_err(|r| format!("permit {i} refused with nothing else in flight: {r}"))?;
        permits.push(permit);
    }
    if limiter.try_acquire(HELD).is_ok() {
        return Err("admitted over the limit after the inherited permits were released".into());
    }
    drop(permits);
    inflight(0, "after releasing every permit")
}

/// The rate limit, three times over: a burst of [`BURST`] until it is refused for its rate
/// (the first burst after the whole limit); then, after the `retry_after` it was given,
/// polling until it is admitted again (the first time only after a window change); finally, idle until both windows have slid out and the
/// sliding count is 0. Returns how long the waits for admission and for the slide-out took.
fn rate_windows_rotate(limiter: &Limiter<String>) -> Result<String, String> {
    let mut waits = Vec::new();
    for cycle in 0..3 {
        let mut admitted = 0;
        let rejected = loop {
            match limiter.try_acquire(BURST) {
                Ok(_) if admitted > 3 * MAX_RATE => {
                    return Err(format!(
                        "cycle {cycle}: {admitted} admitted in a burst, never refused"
                    ))
                }
                Ok(_) => admitted += 1,
                Err(r) => break r,
            }
        };
        // A fresh key gets the whole limit (more if the burst straddles a window change);
        // later bursts start right after an admission that may have filled the window again.
        let least = if cycle == 0 { MAX_RATE } else { 0 };
        if rejected.reason != Reason::Rate || admitted < least {
            return Err(format!(
                "cycle {cycle}: refused after {admitted} admissions with {rejected:?}"
            ));
        }
        let sliding = limiter.estimate(BURST).rate;
        if !sliding.is_some_and(|r| r <= MAX_RATE as f64) {
            return Err(format!(
                "cycle {cycle}: sliding count {sliding:?} over the limit after the burst"
            ));
        }
        let retry = rejected
            .retry_after
            .ok_or_else(|| format!("cycle {cycle}: no retry_after in {rejected:?}"))?;
        let start = Instant::now();
        thread::sleep(retry.min(2 * RATE_INTERVAL));
        poll(DEADLINE, Duration::from_millis(5), || {
            limiter.try_acquire(BURST).is_ok()
        })
        .map_err(|waited| {
            format!("cycle {cycle}: not admitted again {waited:?} after its retry_after {retry:?}")
        })?;
        waits.push(start.elapsed());
    }
    let slid_out = poll(DEADLINE, Duration::from_millis(5), || {
        limiter.estimate(BURST).rate == Some(0.0)
    })
    .map_err(|waited| {
        format!(
            "sliding count still {:?} after {waited:?} idle",
            limiter.estimate(BURST).rate
        )
    })?;
    Ok(format!(
        "admitted again after {waits:?}, windows slid out after {slid_out:?} idle"
    ))
}

/// In the forked child: the fork functions gave it a ticker of its own, alone and ticking.
fn child_has_its_own_ticker(parent_generation: u64) -> Result<Duration, String> {
    let generation = testing::ticker_generation();
    if generation <= parent_generation {
        return Err(format!(
            "no new ticker generation in the child ({generation}, parent {parent_generation})"
        ));
    }
    // The parent's ticker thread does not exist here; the new one names itself once it runs.
    one_ticker_thread().map_err(|e| format!("in the child: {e}"))?;
    ticker_alive().map_err(|e| format!("the child's ticker: {e}"))
}

#[test]
fn a_forked_child_keeps_limiting_with_inherited_permits_and_rotating_rate_windows() {
    let _serial = serial();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(MAX_INFLIGHT)
        .max_rate(MAX_RATE, RATE_INTERVAL)
        .build()
        .unwrap();
    healthy_ticker();
    let inherited: Inherited = Mutex::new((Vec::new(), Vec::new()));
    {
        let mut held = inherited.lock().unwrap();
        for i in 0..HELD_BEFORE_FORK {
            if i % 2 == 0 {
                held.0.push(limiter.try_acquire(HELD).unwrap());
            } else {
                held.1.push(limiter.try_acquire_owned(HELD).unwrap());
            }
        }
    }
    let parent_generation = testing::ticker_generation();

    let child = fork_child(true, || {
        let ticking = child_has_its_own_ticker(parent_generation)?;
        inflight_limit_holds(&limiter, &inherited).map_err(|e| format!("in flight: {e}"))?;
        let rate = rate_windows_rotate(&limiter).map_err(|e| format!("rate: {e}"))?;
        Ok(format!("ticker advancing after {ticking:?}; {rate}"))
    });
    // The parent goes on limiting concurrently, on its own copy of everything.
    let parent = inflight_limit_holds(&limiter, &inherited)
        .map_err(|e| format!("in flight: {e}"))
        .and_then(|()| rate_windows_rotate(&limiter).map_err(|e| format!("rate: {e}")));
    let child = child.wait(3 * DEADLINE);

    println!("child: {child:?}");
    println!("parent: {parent:?}");
    child.unwrap_or_else(|e| panic!("forked child: {e}"));
    parent.unwrap_or_else(|e| panic!("parent after fork: {e}"));
    assert_eq!(
        testing::ticker_generation(),
        parent_generation,
        "the parent's ticker was replaced"
    );
    one_ticker_thread().unwrap();
    ticker_alive().unwrap_or_else(|e| panic!("parent ticker after fork: {e}"));
}

// ---------------------------------------------------------------------------------------------
// Panics while holding permits.

#[test]
fn permits_held_on_several_threads_that_panic_at_once_are_all_given_back() {
    let _serial = serial();
    const LIMIT: u32 = 8;
    const KEY: &str = "origin.example";
    // Three threads hold a borrowed and an owned permit each; two more owned permits are sent
    // to a fourth thread: together the whole limit. Half the threads catch their panic, the
    // others die of it.
    const HOLDERS: usize = 3;
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(LIMIT)
        .max_rate(1_000_000, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();

    for round in 0..3 {
        let (held_tx, held) = mpsc::channel::<Result<(), String>>();
        let mut releases = Vec::new();
        thread::scope(|s| {
            let mut threads = Vec::new();
            for i in 0..HOLDERS {
                let (release_tx, release) = mpsc::channel::<()>();
                releases.push(release_tx);
                let (limiter, held_tx) = (&limiter, held_tx.clone());
                let work = move || {
                    let taken = limiter.try_acquire(KEY).and_then(|borrowed| {
                        Ok([
                            AnyPermit::Borrowed(borrowed),
                            AnyPermit::Owned(limiter.try_acquire_owned(KEY)?),
                        ])
                    });
                    let _permits = match taken {
                        Ok(permits) => {
                            let _ = held_tx.send(Ok(()));
                            permits
                        }
                        Err(r) => {
                            let _ = held_tx.send(Err(format!("holder {i} refused: {r}")));
                            return;
                        }
                    };
                    let _ = release.recv(); // also returns if the test body panicked
                    panic!("holder {i} panicked with its permits ({INJECTED})");
                };
                threads.push(s.spawn(move || {
                    if i % 2 == 0 {
                        catch_unwind(AssertUnwindSafe(work))
                            .map(|()| "returned without panicking".to_string())
                            .unwrap_or_else(|p| panic_message(&*p))
                    } else {
                        work();
                        "returned without panicking".to_string()
                    }
                }));
            }
            // Owned permits acquired here, moved to another thread, dropped in its panic.
            let moved: Vec<_> = (0..2)
                .map(|_| {
                    limiter
                        .try_acquire_owned(KEY)
                        .expect("owned permit refused")
                })
                .collect();
            let (release_tx, release) = mpsc::channel::<()>();
            releases.push(release_tx);
            threads.push(s.spawn(move || {
                let _moved = moved;
                let _ = release.recv();
                panic!("the thread the owned permits were sent to panicked ({INJECTED})");
            }));

            let all_held = (0..HOLDERS).try_for_each(|_| {
                held.recv_timeout(DEADLINE)
                    .map_err(|e| format!("a holder never reported: {e}"))?
            });
            let at_limit = all_held.and_then(|()| {
                let inflight = limiter.estimate(KEY).inflight;
                let over = limiter.try_acquire(KEY).map(drop);
                match (inflight, over) {
                    (Some(n), Err(r)) if n == LIMIT as isize && r.reason == Reason::Inflight => {
                        Ok(())
                    }
                    (inflight, over) => Err(format!(
                        "with the whole limit held: in flight {inflight:?}, one more: {over:?}"
                    )),
                }
            });
            releases.clear(); // every holder panics now, at about the same time
            let outcomes: Vec<_> = threads
                .into_iter()
                .map(|t| match t.join() {
                    Ok(caught) => caught,
                    Err(uncaught) => panic_message(&*uncaught),
                })
                .collect();
            at_limit.unwrap_or_else(|e| panic!("round {round}: {e}"));
            for outcome in outcomes {
                assert!(outcome.contains(INJECTED), "round {round}: {outcome}");
            }
        });

        assert_eq!(
            limiter.estimate(KEY).inflight,
            Some(0),
            "round {round}: permits dropped in the panics were not given back"
        );
        let again: Vec<_> = (0..LIMIT)
            .map(|i| {
                if i % 2 == 0 {
                    limiter.try_acquire(KEY).map(AnyPermit::Borrowed)
                } else {
                    limiter.try_acquire_owned(KEY).map(AnyPermit::Owned)
                }
                .unwrap_or_else(|r| {
                    panic!("round {round}: permit {i} refused after the panics: {r}")
                })
            })
            .collect();
        let over = limiter.try_acquire(KEY).map(drop).unwrap_err();
        assert_eq!(over.reason, Reason::Inflight, "round {round}");
        drop(again);
        assert_eq!(limiter.estimate(KEY).inflight, Some(0), "round {round}");
    }
}

// ---------------------------------------------------------------------------------------------
// Panics behind the tower layer.

type TestBody = BoxBody<Bytes, Infallible>;

/// A response body that panics when the server polls it for its first frame.
struct PanickingBody;

impl Body for PanickingBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        panic!("the response body panicked ({INJECTED})");
    }
}

/// The origin: `/panic` panics in the handler, `/panic-body` returns a body that panics, and
/// anything else answers 200.
async fn origin<B>(req: Request<B>) -> Result<Response<TestBody>, Infallible> {
    match req.uri().path() {
        "/panic" => panic!("the handler panicked ({INJECTED})"),
        "/panic-body" => Ok(Response::new(PanickingBody.boxed())),
        _ => Ok(Response::new(Full::new(Bytes::from_static(b"ok")).boxed())),
    }
}

/// Serves `service` on 127.0.0.1 (an ephemeral port), one task per connection, until the
/// runtime ends; a connection whose service panics unwinds its task, as in any hyper server.
async fn serve<S>(service: S) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<floodgate::layer::LimitBody<TestBody>>>
        + Clone
        + Send
        + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Polls until `host` has nothing in flight; returns how long that took.
async fn permit_comes_back(limiter: &Limiter<String>, host: &str, what: &str) -> Duration {
    let start = Instant::now();
    while limiter.estimate(host).inflight != Some(0) {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: the permit never came back (in flight {:?} after {DEADLINE:?})",
            limiter.estimate(host).inflight
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

#[test]
fn a_handler_or_body_that_panics_behind_a_real_server_gives_its_permit_back() {
    let _serial = serial();
    const HOSTNAME: &str = "panicky.example";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter: Limiter<String> = Limiter::builder().max_inflight(2).build().unwrap();
        let service = LimitLayer::new(limiter.clone()).layer(tower::service_fn(origin));
        let addr = serve(service).await;
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let get = |path: &str| {
            let req = Request::get(format!("http://{addr}{path}"))
                .header(HOST, HOSTNAME)
                .body(Empty::new())
                .unwrap();
            let response = client.request(req);
            async move {
                let response = response.await.map_err(|e| format!("request: {e}"))?;
                let status = response.status();
                let body = response.into_body().collect().await;
                body.map(|_| status).map_err(|e| format!("body: {e}"))
            }
        };

        // More panics than the limit: had a single permit leaked, the last ones would be 503s.
        for path in ["/panic", "/panic-body"] {
            for i in 0..3 {
                let outcome = get(path).await;
                assert!(
                    outcome.is_err(),
                    "{path} #{i}: the server answered {outcome:?}"
                );
                let took = permit_comes_back(&limiter, HOSTNAME, path).await;
                println!("{path} #{i}: {outcome:?}; permit back after {took:?}");
            }
        }
        assert_eq!(get("/").await, Ok(StatusCode::OK));
        let both: Vec<_> = (0..2).map(|_| limiter.try_acquire(HOSTNAME)).collect();
        assert!(both.iter().all(Result::is_ok), "both slots free: {both:?}");
    });
}

#[test]
fn a_limit_service_whose_inner_future_panics_gives_its_permit_back() {
    let _serial = serial();
    const HOSTNAME: &str = "in-process.example";
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let service = LimitService::new(tower::service_fn(origin::<()>), limiter.clone());
    let request = |path: &str| Request::get(path).header(HOST, HOSTNAME).body(()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // A spawned task: the runtime catches the panic and drops the future.
    for i in 0..2 {
        let task = runtime.spawn(service.clone().oneshot(request("/panic")));
        let joined = runtime.block_on(task).map(|_| ());
        assert!(
            joined.as_ref().is_err_and(|e| e.is_panic()),
            "spawned request #{i}: {joined:?}"
        );
        assert_eq!(limiter.estimate(HOSTNAME).inflight, Some(0), "task #{i}");
    }
    // Polled on this thread: the panic unwinds out of block_on, dropping the future.
    for i in 0..2 {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(service.clone().oneshot(request("/panic")))
        }));
        assert!(caught.is_err(), "request #{i} did not panic");
        assert_eq!(
            limiter.estimate(HOSTNAME).inflight,
            Some(0),
            "block_on #{i}"
        );
    }
    // The panicking body holds the permit until it panics, then drops it.
    let response = runtime
        .block_on(service.clone().oneshot(request("/panic-body")))
        .unwrap();
    assert!(response.body().holds_permit());
    assert!(limiter.try_acquire(HOSTNAME).is_err(), "the body holds it");
    let collected = runtime.spawn(response.into_body().collect());
    let joined = runtime.block_on(collected).map(|_| ());
    assert!(joined.as_ref().is_err_and(|e| e.is_panic()), "{joined:?}");
    assert_eq!(limiter.estimate(HOSTNAME).inflight, Some(0), "body");

    // Admitted as usual afterwards.
    let ok = runtime
        .block_on(service.clone().oneshot(request("/")))
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}
