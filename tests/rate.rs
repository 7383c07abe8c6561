//! Public-API tests of [`floodgate::Rate`]: windows on the test clock (anchored at creation,
//! exact counts across many boundaries, idle gaps, sub-windows), exact `rate`/`rate_with`
//! values, construction errors, fixed memory, pingora-limits call-site compatibility, and the
//! one-sided guarantee against an exact model and under concurrent window changes.
//!
//! Every window test runs on a [`ManualClock`]: time only moves when a test calls `advance`,
//! whose ticks (the slot clearing) run synchronously, so no test sleeps and every value is
//! compared exactly.
#![cfg(not(floodgate_loom))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::rate::{MAX_INTERVAL, MAX_SUB_WINDOWS};
use floodgate::{
    rate::RateComponents, rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN, ConfigError, Rate,
};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod common;

use common::ops::arb_vec;
use floodgate_fuzz_harness as harness;
use floodgate_test_support::counting_alloc::{bytes_allocated_by, CountingAlloc};
use floodgate_test_support::panics::panic_message_of;
use harness::rate::{RateInput, RateOp};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

// ---------------------------------------------------------------------------------------------
// Helpers.

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const NS: Duration = Duration::from_nanos(1);

/// A `Rate` of `interval` on `clock` (created at the clock's current time).
fn manual_rate(clock: &ManualClock, interval: Duration) -> Rate {
    Rate::builder(interval).clock(clock).build().unwrap()
}

/// A `Rate` of `interval` split into `k` sub-windows, on `clock`.
fn manual_rate_k(clock: &ManualClock, interval: Duration, k: usize) -> Rate {
    Rate::builder(interval)
        .sub_windows(k)
        .clock(clock)
        .build()
        .unwrap()
}

/// The components `rate_with` hands its function, for `key`.
fn parts(rate: &Rate, key: &str) -> RateComponents {
    rate.rate_with(key, |c: RateComponents| c)
}

/// `(prev_samples, curr_samples)` for `key`.
fn counts(rate: &Rate, key: &str) -> (isize, isize) {
    let c = parts(rate, key);
    (c.prev_samples, c.curr_samples)
}

/// The sliding estimate `(prev·(1−f) + curr) / interval`, written out independently of the
/// crate's function pointer.
fn sliding(prev: isize, curr: isize, fraction: f64, interval: Duration) -> f64 {
    (prev as f64 * (1.0 - fraction) + curr as f64) / interval.as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// observe / peek / rate / rate_with basics.

#[test]
fn observe_returns_the_count_so_far_in_the_current_window() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, SEC);
    assert_eq!(rate.observe("a", 1), 1);
    assert_eq!(rate.observe("a", 4), 5);
    assert_eq!(rate.observe("b", 2), 2, "another key has its own count");
    assert_eq!(
        rate.observe("a", 0),
        5,
        "observing zero events counts nothing"
    );
    clock.advance(999 * MS);
    assert_eq!(rate.observe("a", 1), 6, "still the first window");
    clock.advance(MS);
    assert_eq!(rate.observe("a", 1), 1, "a new window starts from zero");
    assert_eq!(rate.observe("a", 2), 3);
}

#[test]
fn peek_reads_the_current_count_without_counting() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, SEC);
    assert_eq!(rate.peek("a"), 0);
    for _ in 0..10 {
        assert_eq!(rate.peek("a"), 0, "peek must not count");
    }
    assert_eq!(
        rate.observe("a", 3),
        3,
        "peeks before did not add to the count"
    );
    for _ in 0..10 {
        assert_eq!(rate.peek("a"), 3);
    }
    assert_eq!(rate.observe("a", 1), 4);
    clock.advance(SEC);
    assert_eq!(rate.peek("a"), 0);
    assert_eq!(
        rate.rate("a"),
        4.0,
        "peeks did not count in the previous window either"
    );
}

#[test]
fn rate_is_the_last_complete_window_per_interval_second() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, 2 * SEC);
    rate.observe("a", 10);
    assert_eq!(rate.rate("a"), 0.0, "no complete window yet");
    clock.advance(SEC);
    rate.observe("a", 3);
    assert_eq!(rate.rate("a"), 0.0, "the first window is not complete yet");
    clock.advance(SEC);
    assert_eq!(rate.rate("a"), 6.5, "13 events in a 2 s window");
    rate.observe("a", 100);
    clock.advance(1999 * MS);
    assert_eq!(rate.rate("a"), 6.5, "rate() ignores the current window");
    clock.advance(MS);
    assert_eq!(rate.rate("a"), 50.0);

    let clock = ManualClock::new();
    let quarter = manual_rate(&clock, 250 * MS);
    quarter.observe("a", 3);
    clock.advance(250 * MS);
    assert_eq!(quarter.rate("a"), 12.0, "3 events in 250 ms");
}

#[test]
fn rate_with_components_are_exact() {
    let clock = ManualClock::new();
    let interval = SEC;
    let rate = manual_rate(&clock, interval);

    let c = parts(&rate, "k");
    assert_eq!((c.prev_samples, c.curr_samples), (0, 0));
    assert_eq!(c.interval, interval);
    assert_eq!(c.current_interval_fraction, 0.0);

    rate.observe("k", 8);
    clock.advance(250 * MS);
    let c = parts(&rate, "k");
    assert_eq!((c.prev_samples, c.curr_samples), (0, 8));
    assert_eq!(c.current_interval_fraction, 0.25);

    clock.advance(750 * MS); // exactly at the boundary: fraction 0 of the new window
    let c = parts(&rate, "k");
    assert_eq!((c.prev_samples, c.curr_samples), (8, 0));
    assert_eq!(c.current_interval_fraction, 0.0);

    rate.observe("k", 3);
    clock.advance(500 * MS);
    let c = parts(&rate, "k");
    assert_eq!((c.prev_samples, c.curr_samples), (8, 3));
    assert_eq!(c.current_interval_fraction, 0.5);
    assert_eq!(c.interval, interval);

    clock.advance(375 * MS);
    assert_eq!(parts(&rate, "k").current_interval_fraction, 0.875);

    // The function's return type is generic.
    let label: String = rate.rate_with("k", |c| format!("{}/{}", c.prev_samples, c.curr_samples));
    assert_eq!(label, "8/3");
    // And it may be FnMut.
    let mut calls = 0;
    rate.rate_with("k", |_| calls += 1);
    assert_eq!(calls, 1);
}

#[test]
fn proportional_estimate_and_sliding_rate_are_exact() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, 2 * SEC);
    rate.observe("k", 100);
    clock.advance(2 * SEC + 500 * MS); // a quarter into the second window
    rate.observe("k", 10);
    // (100 · (1 − 0.25) + 10) / 2 s = 42.5 /s, exact in binary floating point.
    assert_eq!(
        rate.rate_with("k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN),
        42.5
    );
    assert_eq!(rate.sliding_rate("k"), 42.5);
    assert_eq!(rate.sliding_rate("other"), 0.0);

    // The static on hand-made components.
    let c = parts(&rate, "k");
    assert_eq!(
        PROPORTIONAL_RATE_ESTIMATE_CALC_FN(c),
        sliding(100, 10, 0.25, 2 * SEC)
    );

    // At the boundary the estimate is the whole previous window.
    clock.advance(1500 * MS);
    assert_eq!(counts(&rate, "k"), (10, 0));
    assert_eq!(rate.sliding_rate("k"), 5.0);
    assert_eq!(rate.rate("k"), 5.0);
}

#[test]
fn an_event_just_after_a_boundary_counts_in_the_new_window() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, SEC);
    clock.advance(SEC - NS);
    assert_eq!(rate.observe("k", 1), 1);
    assert_eq!(
        rate.rate("k"),
        0.0,
        "1 ns before the boundary is still window 0"
    );
    clock.advance(NS);
    assert_eq!(
        rate.observe("k", 1),
        1,
        "exactly at the boundary is window 1"
    );
    assert_eq!(rate.rate("k"), 1.0);
    clock.advance(SEC - NS);
    assert_eq!(rate.observe("k", 1), 2);
    clock.advance(NS);
    assert_eq!(rate.peek("k"), 0);
    assert_eq!(rate.rate("k"), 2.0);
    clock.advance(NS);
    assert_eq!(
        rate.observe("k", 5),
        5,
        "1 ns after the boundary is the new window"
    );
    assert_eq!(counts(&rate, "k"), (2, 5));
}

#[test]
fn counts_land_in_the_right_window_across_many_boundaries() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(3_141_592)); // creation off the tick grid
    let interval = 30 * MS;
    let rate = manual_rate(&clock, interval);
    let mut rng = StdRng::seed_from_u64(7);
    let mut previous = 0isize;
    for window in 0..600u64 {
        // Spread this window's events over steps short enough to stay in the window.
        let expected = (window % 13) as isize + (window % 3) as isize;
        let mut into = Duration::ZERO;
        for seen in 1..=expected {
            assert_eq!(rate.observe("k", 1), seen, "window {window}");
            let step = Duration::from_nanos(rng.gen_range(0..2_000_000));
            into += step;
            clock.advance(step);
        }
        let c = parts(&rate, "k");
        assert_eq!(
            (c.prev_samples, c.curr_samples),
            (previous, expected),
            "window {window}"
        );
        assert_eq!(rate.rate("k"), previous as f64 / interval.as_secs_f64());
        assert_eq!(rate.peek("k"), expected);
        // Other keys saw nothing.
        assert_eq!(counts(&rate, "other"), (0, 0));
        clock.advance(interval - into);
        previous = expected;
    }
}

#[test]
fn windows_are_anchored_at_creation_not_at_the_first_request_after_expiry() {
    let clock = ManualClock::new();
    clock.advance(Duration::from_millis(3700));
    let rate = manual_rate(&clock, SEC); // windows start at 3.7 s, 4.7 s, 5.7 s, ...
    rate.observe("k", 1);
    clock.advance(2500 * MS); // 6.2 s: window 2, after an idle window 1
    assert_eq!(rate.observe("k", 4), 4);
    assert_eq!(counts(&rate, "k"), (0, 4), "window 1 was idle");
    assert_eq!(parts(&rate, "k").current_interval_fraction, 0.5);
    clock.advance(600 * MS); // 6.8 s: window 3. Anchored at 6.2 s it would still be current.
    assert_eq!(rate.peek("k"), 0, "6.7 s started a new window");
    assert_eq!(rate.rate("k"), 4.0);
    let fraction = parts(&rate, "k").current_interval_fraction;
    assert!((fraction - 0.1).abs() < 1e-9, "fraction {fraction}");

    // A second Rate on the same clock has its own anchor.
    let later = manual_rate(&clock, SEC); // windows start at 6.8 s, 7.8 s, ...
    later.observe("k", 2);
    clock.advance(950 * MS); // 7.75 s
    assert_eq!(
        later.peek("k"),
        2,
        "the later Rate's first window runs until 7.8 s"
    );
    assert_eq!(rate.rate("k"), 0.0, "the first Rate moved on at 7.7 s");
    clock.advance(50 * MS);
    assert_eq!(later.peek("k"), 0);
    assert_eq!(later.rate("k"), 2.0);
}

#[test]
fn an_idle_gap_of_one_interval_reads_zero() {
    let clock = ManualClock::new();
    let rate = manual_rate(&clock, SEC);
    rate.observe("k", 7);
    clock.advance(SEC);
    assert_eq!(rate.rate("k"), 7.0);
    clock.advance(SEC); // window 1 passed without events
    assert_eq!(rate.rate("k"), 0.0);
    assert_eq!(rate.peek("k"), 0);
    assert_eq!(counts(&rate, "k"), (0, 0));
    assert_eq!(rate.sliding_rate("k"), 0.0);
    assert_eq!(rate.observe("k", 1), 1);
}

#[test]
fn idle_gaps_of_many_intervals_read_zero_even_where_slots_are_reused() {
    // Gaps of every length up to and past the ring of k + 3 slots, and long ones, from every
    // position in a window: stale counts in a reused slot must never come back.
    let interval = 40 * MS;
    for k in [1usize, 2, 4] {
        for gap in (1..=12).chain([31, 64, 1000]) {
            for offset in [Duration::ZERO, 7 * MS, interval - NS] {
                let clock = ManualClock::new();
                let rate = manual_rate_k(&clock, interval, k);
                clock.advance(offset);
                rate.observe("k", 1000);
                clock.advance(interval * gap);
                let what = format!("k={k} gap={gap} offset={offset:?}");
                // The windows that started after the observe hold nothing.
                let idle_sub_windows = (gap as usize) * k;
                if idle_sub_windows > k {
                    assert_eq!(rate.rate("k"), 0.0, "{what}");
                    assert_eq!(counts(&rate, "k"), (0, 0), "{what}");
                }
                assert_eq!(rate.peek("k"), 0, "{what}");
                assert_eq!(rate.observe("k", 1), 1, "{what}");
            }
        }
    }
}

#[test]
fn repeated_ticks_at_the_same_time_do_not_clear_live_windows() {
    // `advance(0)` runs one more tick at the current time, as a duplicate or late ticker
    // would. At every position in a window, including just before and at a boundary.
    let clock = ManualClock::new();
    clock.advance(5 * MS);
    let rate = manual_rate(&clock, 10 * MS);
    let mut previous = 0;
    for window in 0..20isize {
        let mut total = 0;
        for step in [0u64, 1, 4_999_999, 3_000_000, 1_999_999] {
            clock.advance(Duration::from_nanos(step));
            total += window + 1;
            assert_eq!(rate.observe("k", window + 1), total);
            for _ in 0..3 {
                clock.advance(Duration::ZERO);
            }
            assert_eq!(counts(&rate, "k"), (previous, total), "window {window}");
        }
        clock.advance(NS); // exactly on the next boundary
        for _ in 0..3 {
            clock.advance(Duration::ZERO);
        }
        assert_eq!(counts(&rate, "k"), (total, 0), "window {window}");
        previous = total;
    }
}

#[test]
fn clones_of_a_manual_clock_share_one_time_and_drive_the_same_rates() {
    let clock = ManualClock::new();
    let other = clock.clone();
    let rate = manual_rate(&clock, SEC);
    rate.observe("k", 2);
    other.advance(SEC);
    assert_eq!(clock.now(), SEC);
    assert_eq!(
        rate.rate("k"),
        2.0,
        "a clone's advance moves the Rate's windows"
    );
    clock.advance(SEC);
    assert_eq!(other.now(), 2 * SEC);
    assert_eq!(rate.rate("k"), 0.0);
    assert!(format!("{clock:?}").contains("ManualClock"));
}

#[test]
fn a_dropped_rate_does_not_stop_the_clock() {
    let clock = ManualClock::new();
    let dropped = manual_rate(&clock, 10 * MS);
    dropped.observe("k", 1);
    drop(dropped);
    let kept = manual_rate(&clock, 10 * MS);
    kept.observe("k", 3);
    clock.advance(10 * MS);
    assert_eq!(kept.rate("k"), 3.0 / (10 * MS).as_secs_f64());
    clock.advance(100 * MS);
    assert_eq!(kept.observe("k", 1), 1);
}

// ---------------------------------------------------------------------------------------------
// Sub-windows: the semantics documented on `RateComponents`.

#[test]
fn sub_window_components_follow_the_documented_semantics() {
    // k = 4 sub-windows of 250 ms. Sub-window b gets 2^(b mod 20) events, so every sum of up
    // to 5 consecutive sub-windows identifies exactly which sub-windows it includes.
    let k = 4u64;
    let interval = SEC;
    let sub = interval / k as u32;
    let clock = ManualClock::new();
    let rate = manual_rate_k(&clock, interval, k as usize);
    let events = |b: u64| 1isize << (b % 20);
    let sum = |range: std::ops::RangeInclusive<i64>| -> isize {
        range.filter(|&b| b >= 0).map(|b| events(b as u64)).sum()
    };
    for b in 0..60u64 {
        let bi = b as i64;
        let ki = k as i64;
        // Current sub-window b and the k−1 before it.
        let curr = sum(bi - ki + 1..=bi - 1) + events(b);
        assert_eq!(
            rate.observe("k", events(b)),
            curr,
            "observe in sub-window {b}"
        );
        assert_eq!(rate.peek("k"), curr, "peek in sub-window {b}");
        for (into, fraction) in [(0u32, 0.0), (125, 0.5), (62, 0.748)] {
            if into > 0 {
                clock.advance(Duration::from_millis(into.into()));
            }
            let c = parts(&rate, "k");
            assert_eq!(c.curr_samples, curr, "curr in sub-window {b}");
            let prev = if bi >= ki { events(b - k) } else { 0 };
            assert_eq!(
                c.prev_samples, prev,
                "prev: the sub-window before those, at {b}"
            );
            assert_eq!(c.interval, interval);
            assert!(
                (c.current_interval_fraction - fraction).abs() < 1e-12,
                "fraction of the sub-window at {b}: {}",
                c.current_interval_fraction
            );
            // rate(): the last k complete sub-windows, one interval, per second.
            let last_interval = sum(bi - ki..=bi - 1);
            assert_eq!(
                rate.rate("k"),
                last_interval as f64 / interval.as_secs_f64()
            );
            // The proportional estimate is a sliding interval at the sub-window grain.
            let expected = sliding(prev, curr, c.current_interval_fraction, interval);
            assert_eq!(rate.sliding_rate("k"), expected);
            assert_eq!(
                rate.rate_with("k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN),
                expected
            );
        }
        clock.advance(sub - Duration::from_millis(187));
    }
}

#[test]
fn sub_windows_expire_one_sub_window_at_a_time() {
    let clock = ManualClock::new();
    let rate = manual_rate_k(&clock, 60 * MS, 3); // 20 ms sub-windows
    rate.observe("k", 1); // sub-window 0
    clock.advance(20 * MS);
    rate.observe("k", 10); // sub-window 1
    clock.advance(20 * MS);
    rate.observe("k", 100); // sub-window 2
    assert_eq!(rate.peek("k"), 111);
    clock.advance(20 * MS); // sub-window 3: 0 has left the sliding window
    assert_eq!(rate.peek("k"), 110);
    assert_eq!(counts(&rate, "k"), (1, 110));
    assert_eq!(rate.rate("k"), 111.0 / 0.06);
    clock.advance(20 * MS);
    assert_eq!(rate.peek("k"), 100);
    assert_eq!(counts(&rate, "k"), (10, 100));
    clock.advance(20 * MS);
    assert_eq!(counts(&rate, "k"), (100, 0));
    clock.advance(20 * MS);
    assert_eq!(counts(&rate, "k"), (0, 0));
    assert_eq!(rate.rate("k"), 0.0);
}

#[test]
fn huge_counts_saturate_instead_of_wrapping() {
    for k in [1usize, 2, 4, 8] {
        let clock = ManualClock::new();
        let rate = manual_rate_k(&clock, 80 * MS, k);
        let mut last = 0;
        for _ in 0..(2 * k + 4) {
            let got = rate.observe("k", isize::MAX);
            assert!(
                got >= last && got >= isize::MAX / 2,
                "k={k}: observe gave {got}"
            );
            last = got;
            let c = parts(&rate, "k");
            assert!(
                c.prev_samples >= 0 && c.curr_samples >= isize::MAX / 2,
                "k={k}: {c:?}"
            );
            assert!(rate.rate("k") >= 0.0 && rate.sliding_rate("k").is_finite());
            clock.advance(80 * MS / k as u32);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Construction errors.

#[test]
fn bad_configs_are_rejected_with_the_right_error() {
    let build = |interval: Duration, k: usize| Rate::builder(interval).sub_windows(k).build();
    let too_short =
        |interval: Duration, min: Duration| ConfigError::IntervalTooShort { interval, min };
    let cases: Vec<(Duration, usize, ConfigError)> = vec![
        (Duration::ZERO, 1, too_short(Duration::ZERO, 10 * MS)),
        (MS, 1, too_short(MS, 10 * MS)),
        (10 * MS - NS, 1, too_short(10 * MS - NS, 10 * MS)),
        (29 * MS, 3, too_short(29 * MS, 30 * MS)),
        (
            SEC,
            101,
            ConfigError::SubWindows {
                asked: 101,
                max: MAX_SUB_WINDOWS,
            },
        ),
        (
            MAX_INTERVAL + NS,
            1,
            ConfigError::IntervalTooLong {
                interval: MAX_INTERVAL + NS,
                max: MAX_INTERVAL,
            },
        ),
        (
            SEC,
            0,
            ConfigError::SubWindows {
                asked: 0,
                max: MAX_SUB_WINDOWS,
            },
        ),
        (
            10 * SEC,
            MAX_SUB_WINDOWS + 1,
            ConfigError::SubWindows {
                asked: MAX_SUB_WINDOWS + 1,
                max: MAX_SUB_WINDOWS,
            },
        ),
        // Documented on `build`: an interval the sub-windows do not divide evenly.
        (
            SEC,
            7,
            ConfigError::SubWindowsDoNotDivide {
                interval: SEC,
                sub_windows: 7,
            },
        ),
        (
            SEC + NS,
            2,
            ConfigError::SubWindowsDoNotDivide {
                interval: SEC + NS,
                sub_windows: 2,
            },
        ),
    ];
    for (interval, k, expected) in cases {
        match build(interval, k) {
            Ok(_) => panic!("interval {interval:?} with {k} sub-windows was accepted"),
            Err(e) => assert_eq!(e, expected, "interval {interval:?}, k = {k}"),
        }
    }
    assert_eq!(Rate::try_new(MS).unwrap_err(), too_short(MS, 10 * MS));
    assert_eq!(
        Rate::try_new(MAX_INTERVAL + SEC).unwrap_err(),
        ConfigError::IntervalTooLong {
            interval: MAX_INTERVAL + SEC,
            max: MAX_INTERVAL
        }
    );
    let sketch = |rows, columns| Rate::builder(SEC).estimator(rows, columns).build();
    assert_eq!(sketch(0, 1024).unwrap_err(), ConfigError::ZeroRows);
    assert_eq!(sketch(4, 0).unwrap_err(), ConfigError::ZeroColumns);
    assert!(matches!(
        sketch(1 << 20, 1 << 20).unwrap_err(),
        ConfigError::TooLarge { .. }
    ));

    // The edges that are allowed.
    let clock = ManualClock::new();
    for (interval, k) in [
        (10 * MS, 1),
        (30 * MS, 3),
        (MAX_INTERVAL, 1),
        (640 * MS, MAX_SUB_WINDOWS),
        (Duration::from_nanos(25_000_000), 2),
    ] {
        let rate = Rate::builder(interval)
            .sub_windows(k)
            .clock(&clock)
            .build()
            .unwrap_or_else(|e| panic!("{interval:?} / {k} refused: {e}"));
        assert_eq!(rate.interval(), interval);
    }
}

/// The text a caller sees must say what was wrong: for an interval that 7 sub-windows do not
/// divide, "needs between 1 and 64 sub-windows, got 7" names a number that is allowed.
#[test]
fn indivisible_interval_error_message_says_what_is_wrong() {
    let err = Rate::builder(SEC).sub_windows(7).build().unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("divide") || message.contains("divisible"),
        "message does not say the interval must be divisible: {message:?}"
    );
}

#[test]
fn rate_new_panics_with_the_config_error_message() {
    type Case = (Box<dyn FnOnce()>, String);
    let cases: Vec<Case> = vec![
        (
            Box::new(|| drop(Rate::new(Duration::ZERO))),
            format!(
                "floodgate::Rate::new: {}",
                Rate::try_new(Duration::ZERO).unwrap_err()
            ),
        ),
        (
            Box::new(|| drop(Rate::new(MS))),
            format!("floodgate::Rate::new: {}", Rate::try_new(MS).unwrap_err()),
        ),
        (
            Box::new(|| drop(Rate::new(MAX_INTERVAL + NS))),
            format!(
                "floodgate::Rate::new: {}",
                Rate::try_new(MAX_INTERVAL + NS).unwrap_err()
            ),
        ),
        (
            Box::new(|| drop(Rate::new_with_estimator_config(SEC, 0, 1024))),
            config_panic(SEC, 0, 1024, ConfigError::ZeroRows),
        ),
        (
            Box::new(|| drop(Rate::new_with_estimator_config(SEC, 4, 0))),
            config_panic(SEC, 4, 0, ConfigError::ZeroColumns),
        ),
        (
            Box::new(|| drop(Rate::new_with_estimator_config(MS, 4, 1024))),
            config_panic(MS, 4, 1024, Rate::try_new(MS).unwrap_err()),
        ),
    ];
    for (f, expected) in cases {
        assert_eq!(panic_message_of(f), expected);
    }
    // The pingora-named constructor names its arguments as given, and says which are rows.
    let zero_rows = config_panic(SEC, 0, 1024, ConfigError::ZeroRows);
    assert!(zero_rows.contains("hashes = 0") && zero_rows.contains("hashes are rows"));
    // And the messages say what is allowed.
    let message = Rate::try_new(MS).unwrap_err().to_string();
    assert!(
        message.contains("1ms") && message.contains("10ms"),
        "{message}"
    );
}

/// The panic of `Rate::new_with_estimator_config(interval, hashes, slots)` for `error`.
fn config_panic(interval: Duration, hashes: usize, slots: usize, error: ConfigError) -> String {
    format!(
        "floodgate::Rate::new_with_estimator_config(interval = {interval:?}, hashes = {hashes}, \
         slots = {slots}): {error} (hashes are rows, slots are columns; \
         Rate::builder(interval).estimator(rows, columns).build() returns this error instead of \
         panicking)"
    )
}

// ---------------------------------------------------------------------------------------------
// pingora-limits call-site compatibility.

/// The same call-site text, expanded once against pingora-limits and once against floodgate:
/// switching crates is changing the path. Every signature is pinned by a typed binding.
macro_rules! pingora_call_sites {
    ($module:ident, $krate:ident) => {
        mod $module {
            use std::hash::Hash;
            use std::time::Duration;

            use $krate::rate::{Rate, RateComponents, PROPORTIONAL_RATE_ESTIMATE_CALC_FN};

            /// pingora-limits' signatures, as function-pointer and generic bounds.
            pub fn signatures() {
                let _: fn(Duration) -> Rate = Rate::new;
                let _: fn(Duration, usize, usize) -> Rate = Rate::new_with_estimator_config;
                let _: fn(&Rate, &u64, isize) -> isize = Rate::observe::<u64>;
                let _: fn(&Rate, &u64) -> f64 = Rate::rate::<u64>;
                let _: fn(RateComponents) -> f64 = PROPORTIONAL_RATE_ESTIMATE_CALC_FN;
                let _: &'static fn(RateComponents) -> f64 = &PROPORTIONAL_RATE_ESTIMATE_CALC_FN;
            }

            /// `rate_with`'s generic signature: no stricter bounds than pingora's.
            pub fn rate_with_signature<F, T, K>(rate: &Rate, key: &K, rate_calc_fn: F) -> T
            where
                F: FnMut(RateComponents) -> T,
                K: Hash,
            {
                rate.rate_with(key, rate_calc_fn)
            }

            /// A generic helper as a proxy would write it.
            fn over_limit<K: Hash>(rate: &Rate, key: &K, limit: f64) -> bool {
                rate.rate_with(key, |c: RateComponents| {
                    let prev = c.prev_samples as f64;
                    let curr = c.curr_samples as f64;
                    let secs = c.interval.as_secs_f64();
                    (prev * (1.0 - c.current_interval_fraction) + curr) / secs > limit
                })
            }

            /// Returns (observe result, rate, estimate, generic rate_with result).
            pub fn run() -> (isize, f64, f64, (isize, Duration)) {
                let rate = Rate::new(Duration::from_secs(3600));
                let tuned = Rate::new_with_estimator_config(Duration::from_secs(3600), 2, 256);
                let key = "origin";
                rate.observe(&key, 1);
                let observed: isize = rate.observe(&key, 2);
                tuned.observe(&7u64, 1);
                let r: f64 = rate.rate(&key);
                let estimate: f64 = rate.rate_with(&key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
                let generic: (isize, Duration) =
                    rate.rate_with(&key, |c: RateComponents| (c.curr_samples, c.interval));
                assert!(!over_limit(&rate, &key, 1.0e9));
                let _: f64 = rate_with_signature(&rate, &key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
                (observed, r, estimate, generic)
            }
        }
    };
}

pingora_call_sites!(with_pingora, pingora_limits);
pingora_call_sites!(with_floodgate, floodgate);

#[test]
fn pingora_rate_call_sites_compile_and_agree() {
    with_pingora::signatures();
    with_floodgate::signatures();
    let (observed, r, _, generic) = with_floodgate::run();
    // One hour windows from creation: the test runs inside the first one.
    assert_eq!(observed, 3);
    assert_eq!(r, 0.0);
    assert_eq!(generic, (3, Duration::from_secs(3600)));
    let (p_observed, p_rate, _, p_generic) = with_pingora::run();
    assert_eq!((p_observed, p_rate, p_generic), (observed, r, generic));
}

// ---------------------------------------------------------------------------------------------
// Fixed memory, no allocation on the request path.

#[test]
fn memory_bytes_unchanged_after_100k_distinct_keys() {
    let clock = ManualClock::new();
    let rate = manual_rate_k(&clock, 40 * MS, 2);
    // The clock takes the new Rate into its schedule at its first advance (a one-time
    // allocation of the clock's, not the Rate's): do that before counting.
    clock.advance(Duration::ZERO);
    let before = rate.memory_bytes();
    assert!(
        before >= 5 * 4 * 1024 * std::mem::size_of::<isize>(),
        "k + 3 slots of 4 × 1024"
    );
    let allocated = bytes_allocated_by(|| {
        for i in 0..100_000u64 {
            rate.observe(&i, 1);
            if i % 1000 == 0 {
                clock.advance(3 * MS); // cross windows on the way (ticks allocate nothing)
            }
            rate.peek(&i);
            rate.rate(&i);
            rate.rate_with(&i, PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
        }
    });
    assert_eq!(rate.memory_bytes(), before);
    assert_eq!(allocated, 0, "the request path allocated {allocated} bytes");
}

#[test]
fn shared_clock_request_path_does_not_allocate() {
    let rate = Rate::new(Duration::from_secs(3600));
    // Warm up: the ticker is started by construction, thread-locals touched.
    for i in 0..2048u64 {
        rate.observe(&i, 1);
    }
    let generation = floodgate::clock::testing::ticker_generation();
    let allocated = bytes_allocated_by(|| {
        for i in 0..100_000u64 {
            rate.observe(&i, 1);
            rate.rate(&i);
        }
    });
    // A ticker restart (a liveness check finding it over a second late on a starved machine)
    // spawns a thread; it is not the request path this test is about.
    if floodgate::clock::testing::ticker_generation() == generation {
        assert_eq!(allocated, 0, "the request path allocated {allocated} bytes");
    }
}

#[test]
fn shared_clock_rate_counts_exactly_within_its_first_window() {
    // One-hour windows anchored at creation: this test runs inside window 0.
    let rate = Rate::new(Duration::from_secs(3600));
    for i in 1..=1000 {
        assert_eq!(rate.observe("k", 1), i);
    }
    assert_eq!(rate.peek("k"), 1000);
    assert_eq!(rate.rate("k"), 0.0);
    let c = parts(&rate, "k");
    assert_eq!((c.prev_samples, c.curr_samples), (0, 1000));
    assert!((0.0..1.0).contains(&c.current_interval_fraction));
    assert_eq!(rate.interval(), Duration::from_secs(3600));
}

// ---------------------------------------------------------------------------------------------
// Property 1 (docs/architecture.md) against an exact model: the rate fuzz harness's
// (`fuzz/harness/src/rate.rs`), on operations proptest builds (`tests/common/ops.rs`).

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// One key in a full-size sketch: every value is exactly the model's.
    #[test]
    fn single_key_counts_equal_the_exact_model(
        (k, bucket, offset) in any::<(u8, u8, u32)>(),
        ops in arb_vec::<RateOp>(1..120),
    ) {
        // 4 rows × 1024 columns, 1 key.
        harness::rate::run(&RateInput { k, bucket, rows: 3, columns: 16, keys: 0, offset, ops });
    }

    /// Five keys in a sketch small enough that they collide: never below the model, never
    /// above what all keys observed.
    #[test]
    fn colliding_keys_never_read_below_the_exact_model(
        (k, bucket, offset) in any::<(u8, u8, u32)>(),
        (rows, columns) in prop_oneof![Just((0u8, 0u8)), Just((0, 1)), Just((1, 3))],
        ops in arb_vec::<RateOp>(1..120),
    ) {
        harness::rate::run(&RateInput { k, bucket, rows, columns, keys: 4, offset, ops });
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrency: observers racing an advancing clock.

/// Each observer thread counts its own key and notes, for every observe, the clock before and
/// after it: the observe counted in a bucket between the two. Whenever both are in the same
/// bucket, what `observe` returned must lie between the observes that certainly count in its
/// window (nothing lost) and those that may (nothing stale); at rest, so must `peek` and
/// `rate`.
fn observers_race_an_advancing_clock(interval: Duration, k: usize, seed: u64) {
    const OBSERVERS: usize = 3;
    const ADVANCES: usize = 50_000;
    let clock = ManualClock::new();
    clock.advance(Duration::from_nanos(seed % 10_000_000));
    // 4 × 1024: distinct keys share all four columns with probability 2^-40.
    let rate = Arc::new(
        Rate::builder(interval)
            .sub_windows(k)
            .estimator(4, 1024)
            .clock(&clock)
            .build()
            .unwrap(),
    );
    let start = clock.now().as_nanos() as u64;
    let bucket_nanos = interval.as_nanos() as u64 / k as u64;
    let bucket_of = move |t: Duration| (t.as_nanos() as u64 - start) / bucket_nanos;
    let k = k as u64;
    // The last bucket whose slot an observe that saw buckets `lo..=hi` may have counted in.
    // Within one bucket, only that bucket. Across a boundary, its increment may land after the
    // ticks up to `hi` prepared its slot for a later bucket (up to `hi + 2`): an observe in
    // flight while the clock moves on may over-count a later window (never under-count one).
    let reach = |lo: u64, hi: u64| if lo == hi { hi } else { hi + 2 };
    let done = Arc::new(AtomicBool::new(false));

    let observers: Vec<_> = (0..OBSERVERS)
        .map(|t| {
            let (rate, clock, done) = (Arc::clone(&rate), clock.clone(), Arc::clone(&done));
            thread::spawn(move || {
                let key = format!("observer-{t}");
                // (first bucket, last bucket) of each earlier observe -> how many.
                let mut history: BTreeMap<(u64, u64), isize> = BTreeMap::new();
                let mut checked = 0u64;
                while !done.load(Ordering::Relaxed) {
                    let lo = bucket_of(clock.now());
                    let got = rate.observe(&key, 1);
                    let hi = bucket_of(clock.now());
                    if lo == hi {
                        let first = (lo + 1).saturating_sub(k);
                        let (mut certain, mut possible) = (1, 1);
                        for (&(a, b), &n) in &history {
                            if a >= first && b <= lo {
                                certain += n;
                            }
                            if reach(a, b) >= first && a <= lo {
                                possible += n;
                            }
                        }
                        assert!(
                            (certain..=possible).contains(&got),
                            "{key}: observe in bucket {lo} returned {got}, expected \
                             {certain}..={possible}"
                        );
                        checked += 1;
                    }
                    *history.entry((lo, hi)).or_insert(0) += 1;
                    // Forget what can no longer be in any window this thread will look at.
                    let keep_from = (lo + 1).saturating_sub(k + 2);
                    while let Some((&(_, b), _)) = history.first_key_value() {
                        if b >= keep_from {
                            break;
                        }
                        history.pop_first();
                    }
                }
                (key, history, checked)
            })
        })
        .collect();

    let advancer = {
        let clock = clock.clone();
        thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            for i in 0..ADVANCES {
                let step = match i % 4 {
                    0 => Duration::from_nanos(rng.gen_range(0..=bucket_nanos * 2)),
                    1 => Duration::from_nanos(1),
                    _ => Duration::from_nanos(rng.gen_range(0..=3_000_000)),
                };
                clock.advance(step);
                if i % 64 == 0 {
                    thread::yield_now();
                }
            }
        })
    };
    advancer.join().unwrap();
    done.store(true, Ordering::Relaxed);

    let now = bucket_of(clock.now());
    let mut total_checked = 0;
    for observer in observers {
        let (key, history, checked) = observer.join().unwrap();
        total_checked += checked;
        // At rest: the current window and the one before it, against all observes that may
        // or must have landed in them.
        let window = |first: u64, last: u64| {
            let (mut certain, mut possible) = (0, 0);
            for (&(a, b), &n) in &history {
                if a >= first && b <= last {
                    certain += n;
                }
                if reach(a, b) >= first && a <= last {
                    possible += n;
                }
            }
            certain..=possible
        };
        let curr = window((now + 1).saturating_sub(k), now);
        assert!(
            curr.contains(&rate.peek(&key)),
            "{key}: peek {} not in {curr:?}",
            rate.peek(&key)
        );
        if now >= k {
            let prev = window(now - k, now - 1);
            let counted = rate.rate(&key) * interval.as_secs_f64();
            assert!(
                counted >= *prev.start() as f64 - 1e-6 && counted <= *prev.end() as f64 + 1e-6,
                "{key}: rate × interval = {counted}, expected {prev:?}"
            );
        }
    }
    assert!(
        total_checked > 1000,
        "only {total_checked} observes could be checked"
    );
}

#[test]
fn concurrent_observes_across_window_changes_lose_nothing_and_read_nothing_stale() {
    observers_race_an_advancing_clock(10 * MS, 1, 1);
    observers_race_an_advancing_clock(25 * MS, 1, 2);
}

#[test]
fn concurrent_observes_across_sub_window_changes_lose_nothing_and_read_nothing_stale() {
    observers_race_an_advancing_clock(30 * MS, 3, 3);
}
