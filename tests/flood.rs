//! Floods of distinct keys: memory stays fixed and healthy keys are decided as before.
//!
//! A counting global allocator measures what the test's own thread allocates; each structure
//! is built before the measurement starts, then 10,000,000 distinct keys go through it.
#![cfg(not(floodgate_loom))]

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Inflight, Limiter, Rate};
use floodgate_test_support::counting_alloc::{bytes_held, CountingAlloc};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn heap() -> isize {
    bytes_held()
}

const FLOOD: u64 = 10_000_000;
const HEALTHY: [u64; 4] = [u64::MAX, u64::MAX - 1, u64::MAX - 2, u64::MAX - 3];

/// Distinct flood keys (none equal to a healthy key).
fn flood_keys() -> impl Iterator<Item = u64> {
    (0..FLOOD).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8)
}

#[test]
fn inflight_heap_is_unchanged_by_ten_million_distinct_keys() {
    let inflight = Inflight::new();
    let held: Vec<_> = HEALTHY.iter().map(|&k| inflight.incr(k, 1).0).collect();
    let before = heap();
    for key in flood_keys() {
        let (guard, estimate) = inflight.incr(key, 1);
        assert!(estimate >= 1);
        drop(guard);
    }
    assert_eq!(heap(), before, "the flood allocated");
    for &key in &HEALTHY {
        // The flood's guards all dropped: only the healthy key's own guard is counted, up to
        // collisions among the four healthy keys (2^-52 each).
        assert_eq!(inflight.get(key), 1, "healthy key {key} after the flood");
    }
    drop(held);
}

#[test]
fn rate_heap_is_unchanged_by_ten_million_distinct_keys() {
    let clock = ManualClock::new();
    let rate = Rate::builder(Duration::from_secs(1))
        .estimator(4, 1 << 16)
        .clock(&clock)
        .build()
        .unwrap();
    clock.advance(Duration::ZERO); // the clock schedules the new Rate: a one-time allocation
    let before = heap();
    for key in flood_keys() {
        rate.observe(&key, 1);
    }
    for &key in &HEALTHY {
        rate.observe(&key, 5);
    }
    clock.advance(Duration::from_secs(1));
    assert_eq!(heap(), before, "the flood allocated");
    for &key in &HEALTHY {
        // 10M events over 65,536 columns: about 153 per counter; never below the true 5.
        let seen = rate.rate(&key);
        assert!(seen >= 5.0, "healthy key {key} under-counted: {seen}");
    }
}

#[test]
fn limiter_heap_stays_within_its_fixed_size_and_healthy_keys_keep_their_decisions() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(10)
        .max_rate(100_000, Duration::from_secs(1))
        .sketch(4, 1 << 16)
        .clock(&clock)
        .build()
        .unwrap();
    // Decisions for the healthy keys before the flood: every one of 10 permits admitted, the
    // eleventh rejected.
    let decide = |limiter: &Limiter<u64>| -> Vec<usize> {
        HEALTHY
            .iter()
            .map(|&key| {
                let permits: Vec<_> = (0..11)
                    .filter_map(|_| limiter.try_acquire(&key).ok())
                    .collect();
                permits.len()
            })
            .collect()
    };
    assert_eq!(decide(&limiter), vec![10; HEALTHY.len()]);
    // The exact stage is allocated up front; what the keys own on the heap (u64: nothing)
    // is all that could be added, so the heap must not move at all. (The clock's one-time
    // allocation for scheduling the limiter's Rate is done by its first advance, here.)
    clock.advance(Duration::ZERO);
    let before = heap();
    let mut admitted = 0u64;
    for (i, key) in flood_keys().enumerate() {
        if limiter.try_acquire(&key).is_ok() {
            admitted += 1;
        }
        if i % 1_000_000 == 999_999 {
            // A new window every million keys, so the rate counts do not pile up.
            clock.advance(Duration::from_secs(1));
        }
    }
    assert_eq!(heap(), before, "the flood allocated");
    assert_eq!(
        admitted, FLOOD,
        "distinct keys, each once: none is over a limit"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(decide(&limiter), vec![10; HEALTHY.len()]);
}
