//! loom models of the sketch's counters: no interleaving of concurrent updates and reads may
//! read a count below the true one, and saturation holds under concurrency.
//!
//! Run with (a separate target dir keeps the normal build cache intact):
//!
//! ```sh
//! RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_estimator
//! ```
//!
//! The sketches are tiny and, where keys must share counters, one column wide: the hash seeds
//! are random per instance, so only a one-column sketch (every key shares every counter) or a
//! single key gives each loom iteration the same accesses to the same counters, which loom's
//! replay of interleavings needs.
#![cfg(floodgate_loom)]

use loom::sync::Arc;
use loom::thread;

use floodgate::{Estimator, Inflight};
use floodgate_test_support::loom::check;

/// The value counts saturate at, as documented on `Estimator::incr`.
const SATURATED: isize = isize::MAX / 2;

/// Two writers on two keys that share every counter, and a reader: the reader and the writers'
/// own `incr` results never see less than what is known to be in the sketch.
#[test]
fn colliding_keys_never_read_below_true_count() {
    check(|| {
        let sketch = Arc::new(Estimator::new(2, 1));
        // Added before the writers start, removed only after they are joined.
        sketch.incr("a", 1);

        let writers: Vec<_> = [("a", 2isize), ("b", 1)]
            .into_iter()
            .map(|(key, value)| {
                let sketch = Arc::clone(&sketch);
                thread::spawn(move || {
                    let base = if key == "a" { 1 } else { 0 };
                    let estimate = sketch.incr(key, value);
                    assert!(estimate >= base + value, "incr({key}) returned {estimate}");
                    sketch.decr(key, value);
                })
            })
            .collect();

        let a = sketch.get("a");
        assert!(a >= 1, "reader saw {a} for a key with one in flight");
        assert!(sketch.get("b") >= 0);

        for w in writers {
            w.join().unwrap();
        }
        // Everything the writers added they removed: both counters hold exactly the base.
        assert_eq!(sketch.get("a"), 1);
        assert_eq!(sketch.get("b"), 1, "b shares a's counters");
        sketch.decr("a", 1);
        assert_eq!(sketch.get("a"), 0);
    });
}

/// One key in a 2 × 2 sketch: its counters are its own, and concurrent increments and
/// decrements of it sum exactly.
#[test]
fn one_key_concurrent_incr_decr_sums_exactly() {
    check(|| {
        let sketch = Arc::new(Estimator::new(2, 2));
        sketch.incr("k", 1);

        let incr_decr = {
            let sketch = Arc::clone(&sketch);
            thread::spawn(move || {
                let estimate = sketch.incr("k", 2);
                assert!(estimate >= 3, "incr returned {estimate}");
                sketch.decr("k", 2);
            })
        };
        let incr_only = {
            let sketch = Arc::clone(&sketch);
            thread::spawn(move || {
                let estimate = sketch.incr("k", 1);
                assert!(estimate >= 2, "incr returned {estimate}");
            })
        };
        let k = sketch.get("k");
        assert!((1..=4).contains(&k), "reader saw {k}");

        incr_decr.join().unwrap();
        incr_only.join().unwrap();
        assert_eq!(sketch.get("k"), 2);
    });
}

/// Two small increments race across the ceiling on the single-instruction path: neither
/// result nor any read wraps, and the count ends at the ceiling.
#[test]
fn racing_increments_at_the_ceiling_saturate() {
    check(|| {
        let sketch = Arc::new(Estimator::new(1, 1));
        sketch.incr("k", SATURATED - 1);

        let threads: Vec<_> = [1isize, 2]
            .into_iter()
            .map(|value| {
                let sketch = Arc::clone(&sketch);
                thread::spawn(move || {
                    // The true count after this thread's own increment is at least the ceiling.
                    assert_eq!(sketch.incr("k", value), SATURATED);
                })
            })
            .collect();
        let k = sketch.get("k");
        assert!((SATURATED - 1..=SATURATED).contains(&k), "reader saw {k}");

        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(sketch.get("k"), SATURATED);
        assert_eq!(sketch.incr("k", 1), SATURATED, "stays saturated");
    });
}

/// A key whose true count (isize::MAX) is above the ceiling must read the ceiling while a
/// decrement of 1 runs: the true count stays above the ceiling throughout.
#[test]
fn saturated_count_reads_the_ceiling_during_a_decrement() {
    check(|| {
        let sketch = Arc::new(Estimator::new(1, 1));
        assert_eq!(sketch.incr("k", isize::MAX), SATURATED);

        let decrement = {
            let sketch = Arc::clone(&sketch);
            thread::spawn(move || sketch.decr("k", 1))
        };
        let k = sketch.get("k");
        assert_eq!(
            k, SATURATED,
            "read {k} while the true count is isize::MAX - 1 or more"
        );

        decrement.join().unwrap();
        assert_eq!(sketch.get("k"), SATURATED);
    });
}

/// As above with two decrements racing each other: the sticky ceiling must hold after both,
/// since the true count (isize::MAX - 2) is still above it.
#[test]
fn saturated_count_is_not_lowered_by_concurrent_decrements() {
    check(|| {
        let sketch = Arc::new(Estimator::new(1, 1));
        assert_eq!(sketch.incr("k", isize::MAX), SATURATED);

        let threads: Vec<_> = (0..2)
            .map(|_| {
                let sketch = Arc::clone(&sketch);
                thread::spawn(move || sketch.decr("k", 1))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let k = sketch.get("k");
        assert_eq!(k, SATURATED, "saturated count lowered to {k}");
    });
}

/// Guards for colliding keys dropped on other threads, one after a `Guard::incr`: a guard held
/// throughout is always counted, and after the joins only it remains.
#[test]
fn guards_dropped_on_other_threads_give_back_exactly() {
    check(|| {
        let inflight = std::sync::Arc::new(Inflight::with_size(2, 1).unwrap());
        let (held, _) = inflight.incr_borrowed("held", 1);

        let (with_incr, _) = inflight.incr("a", 1);
        let t1 = thread::spawn(move || {
            assert!(with_incr.incr() >= 2);
            drop(with_incr);
        });
        let t2 = {
            let inflight = std::sync::Arc::clone(&inflight);
            thread::spawn(move || {
                let (guard, estimate) = inflight.incr("b", 1);
                assert!(estimate >= 2);
                drop(guard);
            })
        };
        let h = held.get();
        assert!(h >= 1, "the held guard's key read {h}");

        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(inflight.get("held"), 1);
        drop(held);
        assert_eq!(inflight.get("held"), 0);
        assert_eq!(inflight.get("a"), 0);
    });
}

/// Two requests increment one key at once: whatever the order of their adds in each row, at
/// least one of them must see both (otherwise both would pass a limit of 1). The rows are
/// updated one at a time, so the minimum of the values the adds returned can be 1 for both;
/// the estimate has to account for the other increment.
#[test]
fn two_concurrent_increments_cannot_both_miss_each_other() {
    check(|| {
        let sketch = Arc::new(Estimator::new(2, 2));
        let other = {
            let sketch = Arc::clone(&sketch);
            thread::spawn(move || sketch.incr("k", 1))
        };
        let mine = sketch.incr("k", 1);
        let theirs = other.join().unwrap();
        assert!(
            mine >= 2 || theirs >= 2,
            "both concurrent increments returned {mine} and {theirs}: both would be admitted \
             under a limit of 1"
        );
        assert_eq!(sketch.get("k"), 2);
    });
}
