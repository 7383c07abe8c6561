//! Tests of the shared ticker on the real clock: a forked child gets a working ticker (with
//! the fork functions at once, without them through the liveness check) and keeps counting in
//! the right windows; and the ticker's schedule: a tick runs only the Rates that are due, and
//! dropped Rates leave it. And the `ManualClock`.
//!
//! The ticker's self-healing (a panicked ticker and a stalled one are replaced with continued
//! use, duplicate tickers never clear live counts), with one observing thread and with four,
//! is tested in tests/faults.rs.
//!
//! These tests share the process-wide ticker, so each takes [`serial`] first. They run on real
//! time by nature: they poll for a condition with short sleeps, give up after a generous
//! deadline (which fails the test), print how long recovery took, and never assert a timing.
//! Window arithmetic is tested on the `ManualClock` in tests/rate.rs.
#![cfg(not(floodgate_loom))]

use std::thread;
use std::time::{Duration, Instant};

mod common;

use common::fork::{fork_child, Child};
use common::serial::serial;
use common::ticker::{healthy_ticker, poll, ticker_alive, DEADLINE, HOUR};
use floodgate::clock::{self, testing, ManualClock, TICK};
use floodgate::{rate::RateComponents, Rate};

/// Observes `key` once per call and checks each result is exactly one more than the last:
/// used on an hour-long `Rate` whose first window outlasts the test.
struct ExactCounter<'a> {
    rate: &'a Rate,
    key: &'static str,
    count: isize,
}

impl<'a> ExactCounter<'a> {
    fn new(rate: &'a Rate, key: &'static str) -> Self {
        let count = rate.peek(key);
        ExactCounter { rate, key, count }
    }

    fn observe(&mut self) -> Result<(), String> {
        let got = self.rate.observe(self.key, 1);
        self.count += 1;
        if got == self.count {
            Ok(())
        } else {
            Err(format!(
                "{}: observe returned {got}, expected {}",
                self.key, self.count
            ))
        }
    }

    fn check(&self) -> Result<(), String> {
        let c = self.rate.rate_with(self.key, |c: RateComponents| c);
        if (self.rate.peek(self.key), c.prev_samples, c.curr_samples) == (self.count, 0, self.count)
        {
            Ok(())
        } else {
            Err(format!(
                "{}: {c:?}, peek {}, expected {}",
                self.key,
                self.rate.peek(self.key),
                self.count
            ))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ticker's schedule.

/// Rates whose windows change once an hour: nothing of theirs is due while a test runs.
fn idle_rates(n: usize) -> Vec<Rate> {
    (0..n)
        .map(|_| Rate::builder(HOUR).estimator(1, 1).build().unwrap())
        .collect()
}

/// Waits until the coarse clock has moved `ticks` ticks on from now: at least `ticks − 1`
/// whole passes of the ticker have run meanwhile.
fn wait_ticks(ticks: u32) {
    let from = clock::coarse_now();
    poll(DEADLINE, Duration::from_millis(5), || {
        clock::coarse_now() >= from + ticks * TICK
    })
    .expect("the shared ticker stopped ticking");
}

#[test]
fn a_tick_of_the_shared_ticker_runs_only_the_rates_that_are_due() {
    let _serial = serial();
    healthy_ticker();
    let idle = idle_rates(100_000);
    wait_ticks(3); // each ran once, at the tick after it registered
    let before = testing::users_run();
    wait_ticks(20);
    let runs = testing::users_run() - before;
    println!(
        "{runs} users run in 20 ticks with {} idle Rates",
        idle.len()
    );
    assert!(
        runs < 1_000,
        "{runs} users run in 20 ticks with 100,000 idle one-hour Rates registered: the ticker \
         visits Rates that are not due"
    );
}

#[test]
fn dropped_rates_leave_the_shared_schedule() {
    let _serial = serial();
    healthy_ticker();
    let base = testing::scheduled_users();
    let rates = idle_rates(10_000);
    assert_eq!(testing::scheduled_users(), base + 10_000);
    drop(rates);
    assert_eq!(
        testing::scheduled_users(),
        base,
        "dropped Rates are still scheduled"
    );
}

// ---------------------------------------------------------------------------------------------
// Fork.

/// How the forked children fail.
const NO_NEW_GENERATION: &str = "no new ticker generation right after after_fork_in_child";
const LOST_COUNT: &str = "the Rate made before the fork lost its count in the child";
const INEXACT_COUNT: &str = "observe in the child did not continue the count exactly";
const NOT_ADVANCING: &str = "the child's ticker did not advance the coarse clock";
const NOT_ROTATING: &str =
    "windows of the 250 ms Rate did not rotate with cleared slots in the child";
const CHANGED_AFTER_ROTATION: &str =
    "the hour-long Rate's count changed in the child after rotation";
const GENERATION_CHANGED: &str =
    "the child without fork functions had a different generation at start";
const NEVER_REPLACED: &str = "the child without fork functions never replaced its ticker";

/// Waits for a forked child (killing it after six deadlines) and fails if it did.
fn assert_child_succeeded(child: Child) {
    if let Err(e) = child.wait(6 * DEADLINE) {
        panic!("forked child: {e}");
    }
}

/// Observes `key` on a 250 ms `Rate` every ~2 ms until it has seen windows rotate: within a
/// window each observe returns one more than the last; at a new window it returns exactly 1
/// (the slot was cleared before reuse). The first two window changes may show stale counts (a
/// ticker that just started catches up on slots missed before it); the next five, one more
/// than the ring of 4 slots, must not.
fn windows_rotate(rate: &Rate, key: &str) -> bool {
    const WARM_UP: u32 = 2;
    const STRICT: u32 = 5;
    let mut last = rate.observe(key, 1);
    let mut changes = 0;
    let rotated = poll(DEADLINE, Duration::from_millis(2), || {
        let got = rate.observe(key, 1);
        if got != last + 1 {
            changes += 1;
            if changes > WARM_UP && got != 1 {
                changes = u32::MAX; // stale count read as current: fail below
            }
        }
        last = got;
        changes >= WARM_UP + STRICT
    });
    rotated.is_ok() && changes != u32::MAX
}

#[test]
fn forked_child_with_fork_functions_gets_a_working_ticker_and_correct_windows() {
    let _serial = serial();
    let long = Rate::new(HOUR);
    let short = Rate::new(Duration::from_millis(250));
    healthy_ticker();
    for _ in 0..5 {
        long.observe("k", 1);
    }
    short.observe("k", 3);
    let parent_generation = testing::ticker_generation();

    let child = fork_child(true, || {
        if testing::ticker_generation() <= parent_generation {
            return Err(NO_NEW_GENERATION.into());
        }
        if long.peek("k") != 5 {
            return Err(LOST_COUNT.into());
        }
        let mut counter = ExactCounter::new(&long, "k");
        if (0..1000).any(|_| counter.observe().is_err()) {
            return Err(INEXACT_COUNT.into());
        }
        if ticker_alive().is_err() {
            return Err(NOT_ADVANCING.into());
        }
        if !windows_rotate(&short, "k") {
            return Err(NOT_ROTATING.into());
        }
        if counter.check().is_err() || long.peek("k") != 1005 {
            return Err(CHANGED_AFTER_ROTATION.into());
        }
        Ok(String::new())
    });
    assert_child_succeeded(child);

    // The parent's ticker carried on, unreplaced; the child's counts stayed in the child.
    assert_eq!(testing::ticker_generation(), parent_generation);
    ticker_alive().unwrap_or_else(|e| panic!("parent ticker after fork: {e}"));
    assert_eq!(long.peek("k"), 5);
}

#[test]
fn forked_child_without_fork_functions_recovers_through_the_liveness_check() {
    let _serial = serial();
    let long = Rate::new(HOUR);
    let short = Rate::new(Duration::from_millis(250));
    healthy_ticker();
    for _ in 0..5 {
        long.observe("k", 1);
    }
    let parent_generation = testing::ticker_generation();
    // Fork just after a tick was published, so the ticker is unlikely to hold its lock at the
    // fork (the documented case the fork functions exist for).
    let published = clock::coarse_now();
    let _ = poll(DEADLINE, Duration::from_micros(200), || {
        clock::coarse_now() > published
    });
    thread::sleep(Duration::from_millis(2));

    let child = fork_child(false, || {
        // The parent's ticker thread does not exist here, and nothing told the crate.
        if testing::ticker_generation() != parent_generation {
            return Err(GENERATION_CHANGED.into());
        }
        // Continued use: the liveness check notices the silent ticker and starts one.
        let mut counter = ExactCounter::new(&long, "k");
        let start = Instant::now();
        while testing::ticker_generation() == parent_generation {
            for _ in 0..256 {
                if counter.observe().is_err() {
                    return Err(INEXACT_COUNT.into());
                }
            }
            if start.elapsed() > DEADLINE {
                return Err(NEVER_REPLACED.into());
            }
            thread::sleep(Duration::from_millis(1));
        }
        if counter.count < 5 + 256 || long.peek("k") != counter.count {
            return Err(LOST_COUNT.into());
        }
        if ticker_alive().is_err() {
            return Err(NOT_ADVANCING.into());
        }
        if !windows_rotate(&short, "k") {
            return Err(NOT_ROTATING.into());
        }
        if counter.check().is_err() {
            return Err(CHANGED_AFTER_ROTATION.into());
        }
        Ok(String::new())
    });
    assert_child_succeeded(child);
    assert_eq!(testing::ticker_generation(), parent_generation);
    ticker_alive().unwrap_or_else(|e| panic!("parent ticker after fork: {e}"));
    assert_eq!(long.peek("k"), 5);
}

// ---------------------------------------------------------------------------------------------
// The manual clock.

#[test]
fn manual_clock_advances_exactly_and_clones_share_its_time() {
    let clock = ManualClock::new();
    assert_eq!(clock.now(), Duration::ZERO);
    clock.advance(Duration::from_nanos(1));
    clock.advance(Duration::from_millis(15));
    assert_eq!(clock.now(), Duration::from_nanos(15_000_001));
    let clone = clock.clone();
    clone.advance(Duration::from_secs(2));
    assert_eq!(clock.now(), Duration::from_nanos(2_015_000_001));
    assert_eq!(
        ManualClock::default().now(),
        Duration::ZERO,
        "a new clock is independent"
    );
    assert!(format!("{clock:?}").contains("2.015000001s"));
}
