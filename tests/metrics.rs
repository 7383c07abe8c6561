//! Feature `metrics`: what a limiter publishes through the `metrics` facade, read back with
//! metrics-util's debugging recorder.
//!
//! The limiter's clock publishes once a sweep (a rate window, at most a second): each test
//! drives a `ManualClock` and installs its recorder on the test's thread only
//! (`with_local_recorder`), where `advance` runs the clock's work.
#![cfg(feature = "metrics")]

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Limits};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

const WINDOW: Duration = Duration::from_secs(1);

/// The value of `name` with exactly these labels in a snapshot, if published.
fn value(snapshotter: &Snapshotter, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    want.sort();
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find_map(|(key, _, _, value)| {
            let key = key.key();
            let mut got: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            got.sort();
            (key.name() == name && got == want).then(|| match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(_) => f64::NAN,
            })
        })
}

/// `floodgate_requests_total` of limiter `name` for one decision and reason.
fn requests(s: &Snapshotter, name: &str, decision: &str, reason: &str) -> Option<f64> {
    let labels = [
        ("limiter", name),
        ("decision", decision),
        ("reason", reason),
    ];
    value(s, "floodgate_requests_total", &labels)
}

#[test]
fn every_decision_is_counted_by_decision_and_reason() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .name("edge")
            .max_inflight(2)
            .max_rate(5, WINDOW)
            .sketch(2, 1 << 16)
            .clock(&clock)
            .build()
            .unwrap();
        // In flight: 2 admitted, 3 refused.
        let held: Vec<_> = (0..5)
            .filter_map(|_| limiter.try_acquire("busy").ok())
            .collect();
        assert_eq!(held.len(), 2);
        drop(held);
        // Rate: 3 more admitted (5 in the window), then 4 refused, the later ones from the
        // over-limit cache.
        let admitted = (0..7)
            .filter(|_| limiter.try_acquire("busy").is_ok())
            .count();
        assert_eq!(admitted, 3);
        // A plan in shadow: 1 admitted, 2 admitted in shadow.
        let trial = Limits::new().max_rate(1).shadow(true);
        let shadowed = (0..3)
            .filter_map(|_| limiter.with_limits(trial).try_acquire("trial").ok())
            .filter(|p| p.shadow_rejection().is_some())
            .count();
        assert_eq!(shadowed, 2);
        // A plan the limiter cannot judge (an in-flight limit past the largest).
        let huge = Limits::new().max_inflight(u32::MAX);
        assert!(limiter.with_limits(huge).try_acquire("other").is_err());

        assert_eq!(requests(&snapshotter, "edge", "admitted", "none"), None);
        clock.advance(WINDOW * 2);
        let s = &snapshotter;
        assert_eq!(requests(s, "edge", "admitted", "none"), Some(6.0));
        assert_eq!(requests(s, "edge", "refused", "inflight"), Some(3.0));
        assert_eq!(requests(s, "edge", "refused", "rate"), Some(4.0));
        assert_eq!(requests(s, "edge", "shadow_refused", "rate"), Some(2.0));
        assert_eq!(requests(s, "edge", "shadow_refused", "inflight"), Some(0.0));
        assert_eq!(requests(s, "edge", "refused", "limit_too_large"), Some(1.0));
        assert_eq!(
            requests(s, "edge", "refused", "rate_not_counted"),
            None,
            "misconfigurations are published once seen"
        );
    });
}

#[test]
fn gauges_show_the_exact_stage_the_waiters_and_the_saturation() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_inflight(4)
            .max_rate(100, WINDOW)
            .exact_capacity(64)
            .clock(&clock)
            .build()
            .unwrap();
        let _held: Vec<_> = (0..3)
            .map(|_| limiter.try_acquire("hot").unwrap())
            .collect();
        clock.advance(WINDOW + Duration::from_millis(10));
        let s = &snapshotter;
        let default = [("limiter", "default")];
        assert_eq!(value(s, "floodgate_exact_keys", &default), Some(1.0));
        let capacity = value(s, "floodgate_exact_capacity", &default).unwrap();
        assert!(capacity >= 64.0, "{capacity}");
        assert_eq!(value(s, "floodgate_waiting", &default), Some(0.0));
        let rate = [("limiter", "default"), ("kind", "rate")];
        let saturation = value(s, "floodgate_saturation", &rate).unwrap();
        assert!((0.0..0.5).contains(&saturation), "{saturation}");
        let inflight = [("limiter", "default"), ("kind", "inflight")];
        assert!(value(s, "floodgate_saturation", &inflight).is_some());
    });
}

/// Keys learning their in-flight limit, and those held below their ceiling: a key at its
/// learning threshold (4 of 8) learns, and one whose requests are overloads is held below its
/// ceiling; a key under its threshold does not learn.
#[test]
fn gauges_show_the_keys_learning_their_in_flight_limit() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_inflight(8)
            .adaptive_inflight(floodgate::AdaptiveInflight::new().learn_from(0.5))
            .clock(&clock)
            .build()
            .unwrap();
        let mut slow: std::collections::VecDeque<_> = (0..4)
            .map(|_| limiter.try_acquire_owned("slow").unwrap())
            .collect();
        for _ in 0..200 {
            clock.advance(Duration::from_millis(1));
            if let Some(mut done) = slow.pop_front() {
                done.record(floodgate::Outcome::Overload);
            }
            if let Ok(permit) = limiter.try_acquire_owned("slow") {
                slow.push_back(permit);
            }
        }
        let _quiet = limiter.try_acquire("quiet").unwrap();
        clock.advance(Duration::from_secs(1));
        let default = [("limiter", "default")];
        let s = &snapshotter;
        assert_eq!(value(s, "floodgate_learning_keys", &default), Some(1.0));
        assert_eq!(
            value(s, "floodgate_learning_keys_held", &default),
            Some(1.0)
        );
    });
}

#[test]
fn admissions_at_80_percent_of_a_limit_are_counted_near_it() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let limiter: Limiter<String> = Limiter::builder()
            .max_rate(10, WINDOW)
            .sketch(2, 1 << 16)
            .clock(&clock)
            .build()
            .unwrap();
        for _ in 0..12 {
            let _ = limiter.try_acquire("k");
        }
        clock.advance(WINDOW * 2);
        // The 8th, 9th and 10th requests are admitted at 80% or more of 10.
        let default = [("limiter", "default")];
        assert_eq!(
            value(&snapshotter, "floodgate_near_limit_total", &default),
            Some(3.0)
        );
    });
}

/// Threads count in slots of their own, and threads past the slots share one: with more
/// threads than slots at once, and threads that exit and give their slot to the next,
/// every request is counted once.
#[test]
fn no_decision_is_lost_across_threads_that_come_and_go() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(1_000_000)
        .clock(&clock)
        .build()
        .unwrap();
    const PER_THREAD: u64 = 500;
    let mut expected = 0;
    for wave in 0..3u64 {
        // 200 at once: more than the 128 slots.
        let threads: Vec<_> = (0..200u64)
            .map(|t| {
                let limiter = limiter.clone();
                std::thread::spawn(move || {
                    for i in 0..PER_THREAD {
                        drop(
                            limiter
                                .try_acquire(&(wave * 1_000_000 + t * 1_000 + i))
                                .unwrap(),
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        expected += 200 * PER_THREAD;
    }
    metrics::with_local_recorder(&recorder, || clock.advance(Duration::from_secs(2)));
    let labels = [
        ("limiter", "default"),
        ("decision", "admitted"),
        ("reason", "none"),
    ];
    assert_eq!(
        value(&snapshotter, "floodgate_requests_total", &labels),
        Some(expected as f64)
    );
}

/// Two limiters under one name (or one rebuilt under its name) add to one series: what each
/// counted, not the larger of their totals.
#[test]
fn limiters_sharing_a_name_publish_the_sum_of_their_counts() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let clock = ManualClock::new();
        let build = || -> Limiter<String> {
            Limiter::builder()
                .name("twin")
                .max_inflight(100)
                .clock(&clock)
                .build()
                .unwrap()
        };
        let (a, b) = (build(), build());
        for i in 0..3 {
            drop(a.try_acquire(&format!("a{i}")).unwrap());
            drop(b.try_acquire(&format!("b{i}")).unwrap());
        }
        drop(b.try_acquire("b").unwrap());
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            requests(&snapshotter, "twin", "admitted", "none"),
            Some(7.0)
        );
    });
}

/// A request that waits for a permit is one request: counted once, by its answer, however
/// many attempts it made.
#[tokio::test(flavor = "current_thread")]
async fn a_waiting_request_is_counted_once_by_its_answer() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .name("waits")
        .max_inflight(1)
        .clock(&clock)
        .build()
        .unwrap();
    let held = limiter.try_acquire_owned("k").unwrap();
    let waiting = limiter.acquire("k", Duration::from_secs(5));
    let mut waiting = std::pin::pin!(waiting);
    assert!(
        futures_poll(waiting.as_mut()).is_pending(),
        "its first try was refused"
    );
    drop(held);
    let permit = waiting.await.expect("admitted once the permit came back");
    drop(permit);
    metrics::with_local_recorder(&recorder, || clock.advance(Duration::from_secs(2)));
    let s = &snapshotter;
    assert_eq!(requests(s, "waits", "admitted", "none"), Some(2.0));
    assert_eq!(requests(s, "waits", "refused", "inflight"), Some(0.0));
}

/// Polls a future once, with a waker that does nothing.
fn futures_poll<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let waker = floodgate_test_support::waker::noop();
    f.poll(&mut std::task::Context::from_waker(&waker))
}
