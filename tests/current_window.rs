//! A request under the default limits whose key's line shows no rate mark is judged on its
//! current window alone, its previous window unread: the keys that counted much in the window
//! before mark their lines, so that theirs read it.

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Reason};

const SECOND: Duration = Duration::from_secs(1);

/// A limiter of 100 requests a second whose exact stage (one set of 16) is held by 16 keys,
/// each promoted with more evidence (refusals) than a newcomer's few knocks.
fn stage_full_of_others(clock: &ManualClock) -> Limiter<String> {
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(100, SECOND)
        .exact_capacity(16)
        .clock(clock)
        .build()
        .unwrap();
    for key in (0..16).map(|i| format!("resident-{i}")) {
        while limiter.try_acquire(&key).is_ok() {}
        for _ in 0..50 {
            assert!(limiter.try_acquire(&key).is_err(), "its evidence");
        }
    }
    assert_eq!(limiter.stats().promoted, 16);
    limiter
}

/// A key in a filter cell no resident flagged (whose requests the filter would send to the
/// stage anyway).
fn newcomer(limiter: &Limiter<String>) -> String {
    (0..)
        .map(|i| format!("newcomer-{i}"))
        .find(|k| limiter.estimate(k).rate == Some(0.0) && !limiter.exact_filter_flagged(k))
        .expect("a key")
}

/// A key the exact stage has no place for is admitted to its limit in one window by the
/// sketches alone; as the next window starts its sliding count is still at the limit, and its
/// next request is refused. Judged on that window alone (its count 1, far below its
/// promotion threshold), it would be admitted: its line's mark, raised as its count passed
/// the threshold, makes it read the window before.
#[test]
fn a_key_admitted_to_its_limit_without_a_place_is_refused_as_the_next_window_starts() {
    let clock = ManualClock::new();
    let limiter = stage_full_of_others(&clock);
    let key = newcomer(&limiter);
    let mut admitted = 0;
    while limiter.try_acquire(&key).is_ok() {
        admitted += 1;
    }
    assert_eq!(admitted, 100, "admitted to its limit in the first window");
    assert_eq!(limiter.stats().promoted, 16, "the newcomer has no place");
    // A microsecond into the next window: the window before weighs all but a millionth.
    let now = clock.now();
    clock.advance(SECOND - now + Duration::from_micros(1));
    let refused = limiter
        .try_acquire(&key)
        .expect_err("admitted past its limit");
    assert_eq!(refused.reason, Reason::Rate);
    assert_eq!(limiter.stats().promoted, 16, "the newcomer has no place");
}

/// The keys of a healthy window are judged on their current window alone and admitted, as
/// before: keys far below their limits in both windows, through a window's end.
#[test]
fn keys_far_below_their_limits_are_admitted_through_a_windows_end() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(100, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    for window in 0..3 {
        for round in 0..40 {
            for key in (0..100).map(|i| format!("origin-{i}")) {
                assert!(
                    limiter.try_acquire(&key).is_ok(),
                    "{key} refused in window {window}, round {round}"
                );
            }
            clock.advance(SECOND / 40);
        }
    }
    assert_eq!(limiter.stats().promoted, 0);
}
