//! loom models of a `Rate`'s window change: an `observe` racing `ManualClock::advance`, whose
//! tick clears the slots of the buckets one and two ahead, never loses a count from the current
//! window and never reads a stale count (left in a slot from a bucket a ring ago) as current;
//! and of a `Rate` registering with its clock while another thread advances it.
//!
//! Run with (a separate target dir keeps the normal build cache intact):
//!
//! ```sh
//! RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_rate
//! ```
//!
//! The Rates have 10 ms buckets (one tick), so each `advance(10 ms)` runs a Rate's work once, and
//! a one-row, one-column sketch: its hash seeds are random per instance, so only a one-column
//! sketch gives every loom iteration the same accesses to the same counters. One key is used,
//! so every count is exact. Each model builds its clock and Rate inside `loom::model`, as loom
//! requires of the crate's atomics and locks.
//!
//! Every model runs twice: on the flat layout of a public `Rate`, and on the blocked layout a
//! `Limiter` counts in, whose clearing zeroes only the blocks marked as written (a mark set by
//! the increment that takes a counter up from zero): there the models also check that a mark
//! racing a window change is not lost, so that no count from a ring ago is read as current.

#![cfg(floodgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use floodgate::clock::ManualClock;
use floodgate::{rate::RateComponents, Rate};

const TICK: Duration = Duration::from_millis(10);

/// Checks `model` with test-support's `check` on the flat layout (`false`), then on the
/// blocked one (`true`).
fn check(model: impl Fn(bool) + Sync + Send + 'static) {
    let model = std::sync::Arc::new(model);
    for blocked in [false, true] {
        let model = std::sync::Arc::clone(&model);
        floodgate_test_support::loom::check(move || model(blocked));
    }
}

/// A Rate of `k` 10 ms buckets per window, with a 1 × 1 sketch, on `clock`, in the blocked
/// layout if `blocked`.
fn rate_on(clock: &ManualClock, k: usize, blocked: bool) -> Arc<Rate> {
    let mut builder = Rate::builder(TICK * k as u32)
        .sub_windows(k)
        .estimator(1, 1)
        .clock(clock);
    if blocked {
        builder = builder.blocked_for_tests();
    }
    Arc::new(builder.build().unwrap())
}

/// `(prev_samples, curr_samples)`.
fn counts(rate: &Rate) -> (isize, isize) {
    rate.rate_with("k", |c: RateComponents| (c.prev_samples, c.curr_samples))
}

/// Buckets 4 and 6 hold 100 and `then`, and the clock is in bucket 6: the next advance, to
/// bucket 7, clears the slots of buckets 8 and 9, and bucket 9's is bucket 4's (a plain Rate
/// keeps a ring of k + 4 = 5 slots), which still holds its 100. What the models call stale.
fn stale_then(clock: &ManualClock, rate: &Rate, then: isize) {
    clock.advance(4 * TICK);
    rate.observe("k", 100);
    clock.advance(2 * TICK);
    rate.observe("k", then);
}

/// The bucket (10 ms) the clock is in.
fn bucket(clock: &ManualClock) -> u128 {
    clock.now().as_nanos() / TICK.as_nanos()
}

/// One observe racing one window change. Buckets 4, 6 hold 100 and 5; the clock is in bucket
/// 6, and the advance to bucket 7 clears the slot of bucket 9, which still holds bucket 4's
/// 100 (see `stale_then`). The observe counts in bucket 6 or in bucket 7, exactly once.
#[test]
fn observe_racing_a_window_change_counts_once_and_reads_nothing_stale() {
    check(|blocked| {
        let clock = ManualClock::new();
        let rate = rate_on(&clock, 1, blocked);
        stale_then(&clock, &rate, 5);

        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(TICK))
        };
        let got = rate.observe("k", 1);
        advancer.join().unwrap();

        // Bucket 6 (5 + 1) or bucket 7 (a fresh slot): never bucket 4's stale 100.
        assert!(got == 6 || got == 1, "observe returned {got}");
        let in_new = isize::from(got == 1);
        assert_eq!(
            counts(&rate),
            (6 - in_new, in_new),
            "observe returned {got}"
        );
        clock.advance(2 * TICK); // bucket 9: bucket 4's slot again
        assert_eq!(rate.peek("k"), 0, "bucket 4's count read as current");
        assert_eq!(counts(&rate), (0, 0));
    });
}

/// Two observes racing one window change (bucket 6 → 7, which clears bucket 4's stale 100
/// from the slot of bucket 9): each counts once, in bucket 6 or 7, and between them the two
/// windows hold exactly bucket 6's 5 plus both events.
#[test]
fn two_observes_racing_a_window_change_lose_nothing() {
    check(|blocked| {
        let clock = ManualClock::new();
        let rate = rate_on(&clock, 1, blocked);
        stale_then(&clock, &rate, 5);

        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(TICK))
        };
        let other = {
            let rate = Arc::clone(&rate);
            thread::spawn(move || rate.observe("k", 1))
        };
        let mine = rate.observe("k", 1);
        let theirs = other.join().unwrap();
        advancer.join().unwrap();

        let (prev, curr) = counts(&rate);
        assert_eq!(
            prev + curr,
            7,
            "({prev}, {curr}) after observes returning {mine}, {theirs}"
        );
        assert!(prev >= 5 && curr <= 2, "({prev}, {curr})");
        for got in [mine, theirs] {
            // In bucket 6: 6 or 7. In bucket 7: 1 or 2. Never bucket 4's 100.
            assert!(matches!(got, 1 | 2 | 6 | 7), "observe returned {got}");
        }
        // Each result counts at least the observes known to be in its bucket: its own.
        let in_new = [mine, theirs].iter().filter(|&&g| g <= 2).count() as isize;
        assert_eq!(curr, in_new, "({prev}, {curr}) after {mine}, {theirs}");
    });
}

/// One observe racing three window changes (buckets 6 → 9), each clearing slots: the first
/// clears bucket 4's 100 from the slot bucket 9 will use. The observing thread reads the clock
/// first: the observe counts in that bucket or a later one. Once the clock is in bucket 8 or 9
/// no slot it can count in is cleared any more, so its count must be exact and must survive;
/// in no case may it read bucket 4's stale 100.
#[test]
fn observe_racing_several_window_changes_sees_each_slot_cleared() {
    check(|blocked| {
        let (clock, rate) = several_changes_setup(blocked);
        let advancer = several_changes_advancer(&clock);
        let before = bucket(&clock);
        let got = rate.observe("k", 1);
        advancer.join().unwrap();

        // Bucket 6 holds 5 (6 with this event); every other slot it can reach was cleared
        // before it counted. An observe that read the clock in bucket 6 or 7 may count in a
        // slot that a later tick clears (its bucket is then two or more behind): see
        // `observe_in_flight_across_window_changes_returns_at_least_its_own_events`.
        assert!(
            matches!(got, 0 | 1 | 6),
            "observe from bucket {before} returned {got}"
        );
        let (prev, curr) = counts(&rate); // buckets 8 and 9
        assert!(prev <= 1 && curr <= 1, "stale count: ({prev}, {curr})");
        if before >= 8 {
            assert_eq!(got, 1, "observe from bucket {before}");
            assert_eq!(prev + curr, 1, "an observe in bucket 8 or 9 was lost");
        }
        if before == 9 {
            assert_eq!((prev, curr), (0, 1));
        }
    });
}

/// An `observe` returns the count so far in the window it counted in, its own events
/// included, even when it is in flight while the clock moves two windows on.
#[test]
fn observe_in_flight_across_window_changes_returns_at_least_its_own_events() {
    check(|blocked| {
        let (clock, rate) = several_changes_setup(blocked);
        let advancer = several_changes_advancer(&clock);
        let got = rate.observe("k", 1);
        advancer.join().unwrap();
        assert!(got >= 1, "observe(k, 1) returned {got}");
    });
}

/// Bucket 4 holds 100, bucket 6 holds 5, and the clock is in bucket 6 (`stale_then`;
/// `blocked`: the layout).
fn several_changes_setup(blocked: bool) -> (ManualClock, Arc<Rate>) {
    let clock = ManualClock::new();
    let rate = rate_on(&clock, 1, blocked);
    stale_then(&clock, &rate, 5);
    (clock, rate)
}

/// Advances the clock from bucket 6 to bucket 9, one tick at a time, on another thread.
fn several_changes_advancer(clock: &ManualClock) -> thread::JoinHandle<()> {
    let clock = clock.clone();
    thread::spawn(move || {
        for _ in 0..3 {
            clock.advance(TICK);
        }
    })
}

/// With 2 sub-windows (a ring of k + 4 = 6 slots): buckets 5, 7, 8 hold 100, 20, 3 and the
/// clock is in bucket 8; the advance to bucket 9 clears the slot of bucket 11, which is
/// bucket 5's and still holds its 100. The observe sees the window of buckets 7..=8 or
/// 8..=9, with its own event counted once.
#[test]
fn sub_window_observe_racing_a_change_counts_once_and_reads_nothing_stale() {
    check(|blocked| {
        let clock = ManualClock::new();
        let rate = rate_on(&clock, 2, blocked);
        clock.advance(5 * TICK);
        rate.observe("k", 100);
        clock.advance(2 * TICK);
        rate.observe("k", 20);
        clock.advance(TICK);
        rate.observe("k", 3);

        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(TICK))
        };
        let got = rate.observe("k", 1);
        advancer.join().unwrap();

        // Window 7..=8: 20 + 3 + 1; window 8..=9: 3 + 1.
        assert!(got == 24 || got == 4, "observe returned {got}");
        assert_eq!(
            counts(&rate),
            (20, 4),
            "bucket 9: prev is bucket 7, curr buckets 8..=9"
        );
        let in_bucket_9 = isize::from(got == 4);
        clock.advance(TICK); // bucket 10
        assert_eq!(counts(&rate), (4 - in_bucket_9, in_bucket_9));
        clock.advance(TICK); // bucket 11: bucket 5's slot again
        assert_eq!(
            counts(&rate),
            (in_bucket_9, 0),
            "bucket 5's count read as current"
        );
    });
}

/// A reader racing a window change reads the last complete window as it stands either before
/// the change (bucket 0: 100) or after it (bucket 1: 5). The advance to bucket 2 clears the
/// slot of bucket 4 = bucket 0's slot, so a reader that read the time in bucket 1 and the
/// slot after the clearing sees 0: a count below both true answers.
#[test]
fn rate_racing_a_window_change_reads_the_window_before_or_after_it() {
    check(|blocked| {
        let clock = ManualClock::new();
        let rate = rate_on(&clock, 1, blocked);
        rate.observe("k", 100);
        clock.advance(TICK);
        rate.observe("k", 5);

        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(TICK))
        };
        let last_window = rate.rate("k") * TICK.as_secs_f64();
        let prev = rate.rate_with("k", |c: RateComponents| c.prev_samples);
        advancer.join().unwrap();

        let last_window = last_window.round() as isize;
        assert!(
            last_window == 100 || last_window == 5,
            "rate() × interval = {last_window}, the true last window is 100 or 5"
        );
        assert!(
            prev == 100 || prev == 5,
            "prev_samples = {prev}, expected 100 or 5"
        );
    });
}

/// A Rate built while another thread advances its clock is not lost by the clock's schedule:
/// its registration, racing the advance's pass, is applied by that pass or the next, and the
/// slot holding its first count is cleared before the ring comes round to it again. Ten ticks
/// later the current and previous buckets (one of which reuses that slot) read 0.
#[test]
fn a_rate_registered_during_an_advance_gets_its_windows_cleared() {
    check(|blocked| {
        let clock = ManualClock::new();
        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(TICK))
        };
        let rate = rate_on(&clock, 1, blocked);
        rate.observe("k", 7);
        advancer.join().unwrap();
        clock.advance(10 * TICK);
        assert_eq!(counts(&rate), (0, 0), "a count from ten windows ago read");
    });
}
