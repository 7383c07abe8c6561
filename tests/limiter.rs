#![cfg(not(floodgate_loom))]
//! Public-API tests of [`floodgate::Limiter`]: it never admits a key at or over its limit
//! (against an exact model, for any interleaving, with sketches small enough that every key
//! collides and an exact stage small enough to be full); it never rejects a key under its
//! limit that has the sketch to itself, and the exact stage admits a light key that shares
//! every sketch counter with a heavy one; permits always give their slot back; its reports
//! (`heavy_hitters`, `stats`, `Rejected`) say what happened; bad configurations are refused.
//!
//! Tests marked `#[ignore = "bug: …"]` fail on the current code and guard a reported bug:
//! run them with `cargo test --test limiter -- --ignored`.
//!
//! Rate windows run on a [`ManualClock`]: time moves only when a test calls `advance`, so no
//! test sleeps and no test asserts a timing.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

mod common;

use common::ops::{arb, arb_vec};
use floodgate::clock::{ManualClock, TICK};
/// The largest exact capacity a limiter takes, as `LimiterBuilder::exact_capacity` documents.
const MAX_EXACT_CAPACITY: usize = 1 << 20;
use floodgate::{
    ConfigError, Figure, InflightLimit, Limiter, OwnedPermit, Permit, Reason, Rejected,
};
use floodgate_fuzz_harness as harness;
use harness::limiter::{LimiterConfig, LimiterInput, LimiterOp, Limits};
use harness::permits::AnyPermit;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------------
// Property: never admit a key at or over its limit, for any interleaving (tiny sketches, tiny
// exact stages), with the right reason and retry time on every rejection; and permits balance
// afterwards. The exact model and every check are the limiter fuzz harness's
// (`fuzz/harness/src/limiter.rs`); proptest builds its operations (`tests/common/ops.rs`).

const NS: Duration = Duration::from_nanos(1);
/// The rate interval of the scenario tests.
const INTERVAL: Duration = Duration::from_millis(100);

fn acquire(limiter: &Limiter<u64>, key: u64, owned: bool) -> Result<AnyPermit<'_, u64>, Rejected> {
    if owned {
        limiter.try_acquire_owned(&key).map(AnyPermit::Owned)
    } else {
        limiter.try_acquire(&key).map(AnyPermit::Borrowed)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Up to 24 keys on sketches small enough that every key collides; at the end each key
    /// alone gets exactly what its limits allow.
    #[test]
    fn never_admits_a_key_at_or_over_its_limit_and_balances_afterwards(
        config in arb::<LimiterConfig>(),
        ops in arb_vec::<LimiterOp>(1..120),
    ) {
        harness::limiter::run(&LimiterInput { config, ops });
    }

    /// With one key the sketch counts it exactly, so every request the exact model admits
    /// must be admitted — below the promotion threshold (sketch only) and above it (exact
    /// stage) — its `retry_after` is tight, and a retry then is admitted. A rate-only or
    /// in-flight-only limiter: with both, a demoted and re-promoted key may carry rejected
    /// requests in a window the exact stage did not see (the sketch counts offered load),
    /// which is allowed.
    #[test]
    fn a_lone_key_is_never_over_rejected(
        config in arb::<LimiterConfig>(),
        ops in arb_vec::<LimiterOp>(1..150),
    ) {
        let limits = match config.limits {
            Limits::Both(inflight, _) => Limits::Inflight(inflight),
            limits => limits,
        };
        let config = LimiterConfig { keys: 0, limits, ..config };
        harness::limiter::run(&LimiterInput { config, ops });
    }
}

// ---------------------------------------------------------------------------------------------
// Over-rejection: the exact stage admits a light key that shares every sketch counter with a
// heavy one.

/// A limiter whose sketch has one counter per row: every key shares the same counters, so
/// the sketch's estimate for any key is the total of all keys.
/// The keys the exact stage holds now (not those that left it, which `heavy_hitters` lists
/// for a while too).
fn held(limiter: &Limiter<String>) -> Vec<floodgate::HeavyHitter<String>> {
    let hitters = limiter.heavy_hitters().into_iter();
    hitters.filter(|h| h.left_ago.is_none()).collect()
}

fn one_counter(clock: &ManualClock) -> floodgate::LimiterBuilder<String> {
    Limiter::builder().sketch(1, 1).clock(clock)
}

#[test]
fn a_light_key_sharing_the_sketch_with_a_heavy_one_gets_its_full_in_flight_limit() {
    let clock = ManualClock::new();
    let limiter = one_counter(&clock)
        .max_inflight(4)
        .promotion_threshold(0.25) // promote at one in flight
        .build()
        .unwrap();
    // The light key is promoted on its first request and keeps its entry while it holds it.
    let mut light = vec![limiter.try_acquire("light").unwrap()];
    // The heavy key fills the shared counter: its own requests now count the light one too.
    let heavy: Vec<_> = (0..8)
        .filter_map(|_| limiter.try_acquire("heavy").ok())
        .collect();
    assert_eq!(
        heavy.len(),
        3,
        "the heavy key is judged with the light key's permit"
    );
    // The shared counter now says 1 + 3 + this request = 5 > 4 for every key: a key the exact
    // stage knows nothing about is rejected with that estimate.
    let fresh = limiter.try_acquire("fresh").unwrap_err();
    assert_eq!(
        (fresh.reason, fresh.estimate, fresh.limit),
        (Reason::Inflight, 5, 4)
    );
    // The light key's exact count is 1: it gets all 4 although the sketch says 5, 6, 7.
    for n in 2..=4 {
        match limiter.try_acquire("light") {
            Ok(p) => light.push(p),
            Err(r) => panic!("light key over-rejected at its permit {n}: {r}"),
        }
    }
    let over = limiter.try_acquire("light").unwrap_err();
    assert_eq!((over.reason, over.estimate), (Reason::Inflight, 5));
}

/// A key seen for the first time, whose every sketch counter is shared with a flooded key,
/// is admitted at once: promoted on that request, its counts before are bounded by what the
/// promotion threshold proves (it was admitted by the sketch alone only below the threshold,
/// in this window and the one before), not by the flood's counts. Without that bound its
/// first requests were refused until the flood's counts slid out of view — with a key's rows
/// in one cache line, such full collisions are what a fresh key meets next to a heavy one.
#[test]
fn a_fresh_key_sharing_every_counter_with_a_flood_is_admitted_at_its_first_request() {
    let clock = ManualClock::new();
    let limiter = one_counter(&clock).max_rate(10, INTERVAL).build().unwrap();
    // The flood's 10 admitted and its first refusal count in the one counter (the rest are
    // refused by the over-limit cache, uncounted): it says 11 for every key.
    for _ in 0..30 {
        let _ = limiter.try_acquire("flood");
    }
    clock.advance(INTERVAL / 2);
    let mut admitted = 0;
    for n in 0..20 {
        match limiter.try_acquire("fresh") {
            Ok(_) => admitted += 1,
            Err(r) => {
                assert!(n > 0, "the first request was refused: {r}");
                break;
            }
        }
    }
    // Promoted on its first request, with at most 4 before (promotion at 5): 4 + 6 = 10.
    assert_eq!(admitted, 6, "admitted up to what the bounds allow");
}

/// What the threshold proves covers every threshold a key was judged by: a key admitted by
/// the sketch alone up to 400 times under its own plan (promotion at 500) is not promoted
/// later under the defaults (promotion at 50) with a count of 49.
#[test]
fn a_key_admitted_past_the_default_threshold_under_its_own_plan_is_not_undercounted() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(100, INTERVAL)
        .sketch(4, 1 << 16)
        .clock(&clock)
        .build()
        .unwrap();
    let plan = floodgate::Limits::new().max_rate(1000);
    for n in 0..400 {
        assert!(
            limiter.with_limits(plan).try_acquire("planned").is_ok(),
            "request {n} under its plan"
        );
    }
    let rejected = limiter.try_acquire("planned").unwrap_err();
    assert_eq!(rejected.reason, Reason::Rate);
    assert!(rejected.estimate > 400, "{rejected}");
}

/// Rate-limits a heavy key (`heavy` requests per window), `steady` keys (3 each per window)
/// and a light one (1 per window, mid-window) that all share the one sketch counter, for
/// `windows` windows; returns whether each of the light key's requests was admitted.
fn light_next_to_heavy(
    limiter: &Limiter<String>,
    clock: &ManualClock,
    windows: u32,
    heavy: usize,
    steady: &[String],
) -> Vec<bool> {
    let mut admitted = Vec::new();
    for _ in 0..windows {
        for _ in 0..heavy {
            let _ = limiter.try_acquire("heavy");
        }
        for _ in 0..3 {
            for key in steady {
                let _ = limiter.try_acquire(key);
            }
        }
        clock.advance(INTERVAL / 2);
        match limiter.try_acquire("light") {
            Ok(_) => admitted.push(true),
            // The one counter holds the others' requests too; a rejection within the
            // retry_after of an earlier one reports just `limit + 1`.
            Err(r) => {
                assert!(r.estimate > r.limit, "{r}");
                admitted.push(false);
            }
        }
        clock.advance(INTERVAL / 2);
    }
    admitted
}

#[test]
fn a_light_key_sharing_the_sketch_with_a_heavy_one_is_admitted_by_rate_once_promoted() {
    let clock = ManualClock::new();
    let roomy = one_counter(&clock)
        .max_rate(10, INTERVAL)
        .exact_capacity(1024)
        .build()
        .unwrap();
    let light = light_next_to_heavy(&roomy, &clock, 8, 30, &[]);
    // Promoted in window 0 with the sketch's count as its base; that base is gone from the
    // sliding window after two windows, and from then on the exact counts decide.
    assert_eq!(&light[2..], &[true; 6], "{light:?}");
    assert!(roomy.heavy_hitters().iter().any(|h| h.key == "light"));

    // The exact stage (one set of 16) full of 16 steady keys that share the counter too, each
    // used more often than the light key knocks: the light key never earns a place, and the
    // sketch alone rejects it in every window. This is what the exact stage saved it from.
    // (No heavy key here: while its rejections come from the over-limit cache its entry
    // shows no use, and the light key would earn that place, which is right but not this
    // test's point.)
    let clock = ManualClock::new();
    let full = one_counter(&clock)
        .max_rate(10, INTERVAL)
        .exact_capacity(16)
        .build()
        .unwrap();
    let steady: Vec<String> = (0..16).map(|i| format!("steady-{i}")).collect();
    // Warm-up: promoted with the counter's count as their bases, which slide out in two
    // windows; until then some are rejected (and, in the over-limit cache, show no use).
    light_next_to_heavy(&full, &clock, 3, 0, &steady);
    let light = light_next_to_heavy(&full, &clock, 8, 0, &steady);
    assert_eq!(light, vec![false; 8]);
    let stats = full.stats();
    assert_eq!(stats.promoted, 16);
    assert!(stats.exact_full > 0, "{stats:?}");
}

// ---------------------------------------------------------------------------------------------
// Permits balance, wherever and however they are dropped.

/// Takes as many permits (up to `limit`) for each key as the limiter admits, in a mix of kinds.
fn take_permits<'a>(
    limiter: &'a Limiter<String>,
    keys: &[&str],
    limit: u32,
) -> (Vec<Permit<'a, String>>, Vec<OwnedPermit<String>>) {
    let (mut borrowed, mut owned) = (Vec::new(), Vec::new());
    for key in keys {
        for i in 0..limit {
            if i % 2 == 0 {
                borrowed.extend(limiter.try_acquire(*key).ok());
            } else {
                owned.extend(limiter.try_acquire_owned(*key).ok());
            }
        }
    }
    (borrowed, owned)
}

/// Each key alone can take exactly `limit` permits.
fn assert_each_key_gets_exactly(limiter: &Limiter<String>, keys: &[&str], limit: u32) {
    for key in keys {
        let permits: Vec<_> = (0..limit)
            .map(|i| {
                limiter
                    .try_acquire(*key)
                    .unwrap_or_else(|r| panic!("{key}: permit {} rejected: {r}", i + 1))
            })
            .collect();
        let r = limiter.try_acquire(*key).unwrap_err();
        assert_eq!(
            (r.reason, r.estimate),
            (Reason::Inflight, limit + 1),
            "{key}"
        );
        drop(permits);
    }
}

#[test]
fn permits_dropped_on_other_threads_in_a_panic_or_owned_give_every_slot_back() {
    const LIMIT: u32 = 6;
    let keys = ["a", "b", "c", "d"];
    // A sketch with no collisions, and one where all four keys share two counters.
    for (rows, columns) in [(4, 4096), (1, 2)] {
        let limiter: Limiter<String> = Limiter::builder()
            .max_inflight(LIMIT)
            .sketch(rows, columns)
            .exact_capacity(16)
            .build()
            .unwrap();
        for round in 0..3 {
            let (mut borrowed, mut owned) = take_permits(&limiter, &keys, LIMIT);
            if columns > 2 {
                assert_eq!((borrowed.len(), owned.len()), (12, 12), "round {round}");
            }
            assert!(!borrowed.is_empty() && !owned.is_empty());
            let unwinding = borrowed.split_off(borrowed.len() / 2);
            let owned_unwinding = owned.split_off(owned.len() / 2);
            // Dropped while a request handler panics, on this thread.
            let result = catch_unwind(AssertUnwindSafe(move || {
                let _held = (unwinding, owned_unwinding);
                panic!("request handler panicked (expected by the test)");
            }));
            assert!(result.is_err());
            thread::scope(|s| {
                // Borrowed permits dropped on another thread, half of them in a panic there.
                let panicking = borrowed.split_off(borrowed.len() / 2);
                s.spawn(move || drop(borrowed));
                let handle = s.spawn(move || {
                    let _held = panicking;
                    panic!("handler thread panicked (expected by the test)");
                });
                assert!(handle.join().is_err());
                // Owned permits sent to another thread and dropped there.
                let (tx, rx) = mpsc::channel::<OwnedPermit<String>>();
                s.spawn(move || rx.into_iter().for_each(drop));
                owned.into_iter().for_each(|p| tx.send(p).unwrap());
            });
            assert_each_key_gets_exactly(&limiter, &keys, LIMIT);
        }
        let stats = limiter.stats();
        assert!(
            stats.promotions >= 4,
            "the exact stage took part: {stats:?}"
        );
    }
}

/// Held units per key (a permit's cost, 1 by default), counted by the test: incremented after
/// an admission, decremented before the permit drops, so it never exceeds what the limiter
/// really has admitted.
struct HeldCounts(Vec<AtomicIsize>);

impl HeldCounts {
    fn new(keys: usize) -> Self {
        HeldCounts((0..keys).map(|_| AtomicIsize::new(0)).collect())
    }

    /// Counts an admission of `units` and returns the units held now.
    fn admitted(&self, key: usize, units: isize) -> isize {
        self.0[key].fetch_add(units, Ordering::SeqCst) + units
    }

    fn released(&self, key: usize, units: isize) {
        self.0[key].fetch_sub(units, Ordering::SeqCst);
    }
}

/// `threads` threads, each with its own clone of the limiter, acquire random keys (mostly the
/// `hot` first ones), hold up to `hold` permits and drop random ones, for `ops` operations;
/// asserts after every admission that no key holds more than `limit` units. Each request
/// costs 1, or with `max_cost` over 1 a random 1 to `max_cost` units (`with_cost`).
#[allow(clippy::too_many_arguments)] // the scenario's knobs, named at each call
fn hammer(
    limiter: &Limiter<u64>,
    keys: usize,
    hot: usize,
    limit: u32,
    threads: u64,
    ops: usize,
    hold: usize,
    max_cost: u32,
) {
    let held = HeldCounts::new(keys);
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        for t in 0..threads {
            let limiter = limiter.clone();
            let (held, stop) = (&held, &stop);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(0x5eed + t);
                let mut mine: VecDeque<(usize, isize, AnyPermit<'_, u64>)> = VecDeque::new();
                for _ in 0..ops {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if mine.len() >= hold || (!mine.is_empty() && rng.gen_bool(0.4)) {
                        let i = rng.gen_range(0..mine.len());
                        let (key, units, permit) = mine.swap_remove_back(i).unwrap();
                        held.released(key, units);
                        drop(permit);
                        continue;
                    }
                    let key = if rng.gen_bool(0.7) {
                        rng.gen_range(0..hot)
                    } else {
                        rng.gen_range(hot..keys)
                    };
                    let cost = rng.gen_range(1..=max_cost);
                    let admitted = match cost {
                        1 => acquire(&limiter, key as u64, rng.gen_bool(0.3)),
                        _ => limiter
                            .with_cost(cost)
                            .try_acquire(&(key as u64))
                            .map(AnyPermit::Borrowed),
                    };
                    if let Ok(permit) = admitted {
                        let now = held.admitted(key, cost as isize);
                        if now > limit as isize {
                            stop.store(true, Ordering::Relaxed);
                            panic!("key {key} has {now} units held, limit {limit}");
                        }
                        mine.push_back((key, cost as isize, permit));
                    }
                }
                for (key, units, permit) in mine {
                    held.released(key, units);
                    drop(permit);
                }
            });
        }
    });
}

/// Each of `keys` keys alone takes exactly `limit` permits.
fn assert_balanced(limiter: &Limiter<u64>, keys: usize, limit: u32) {
    for key in 0..keys as u64 {
        let permits: Vec<_> = (0..limit)
            .map(|i| {
                limiter
                    .try_acquire(&key)
                    .unwrap_or_else(|r| panic!("key {key} permit {}: {r}", i + 1))
            })
            .collect();
        assert_eq!(limiter.try_acquire(&key).unwrap_err().estimate, limit + 1);
        drop(permits);
    }
}

#[test]
fn concurrent_sketch_decisions_never_hold_more_than_the_limit_and_balance_afterwards() {
    const KEYS: usize = 24;
    const LIMIT: u32 = 3;
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(LIMIT)
        .promotion_threshold(0.25) // promote at 1 in flight
        .exact_capacity(1) // one key per shard
        .build()
        .unwrap();
    // Fill the exact stage with keys that hold a permit (so they never cool down): every
    // hot request of the test's keys is then decided by the sketch, the fallback path.
    let fillers: Vec<_> = (1_000..1_400u64)
        .map(|k| limiter.try_acquire(&k).unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 16);
    let full = limiter.stats().exact_full;
    hammer(&limiter, KEYS, 3, LIMIT, 3, 200_000, 6, 1);
    assert!(
        limiter.stats().exact_full > full + 1_000,
        "{:?}",
        limiter.stats()
    );
    drop(fillers);
    assert_balanced(&limiter, KEYS, LIMIT);
}

#[test]
fn concurrent_exact_stage_decisions_never_hold_more_than_the_limit_and_balance_afterwards() {
    hammer_both_stages(3, 6, 1);
}

/// Requests of 1 to 4 units against a limit of 6 units in flight, in both stages: no key ever
/// holds more than 6 units, and every unit comes back.
#[test]
fn concurrent_decisions_with_costs_never_hold_more_units_than_the_limit_and_balance_afterwards() {
    hammer_both_stages(6, 4, 4);
}

/// [`hammer`] on 24 keys limited to `limit` in flight, each thread holding up to `hold`
/// permits of 1 to `max_cost` units: with collisions everywhere and a tiny exact stage, and
/// with few collisions and a roomy one. Every key then gets its limit alone.
fn hammer_both_stages(limit: u32, hold: usize, max_cost: u32) {
    const KEYS: usize = 24;
    for (rows, columns, capacity) in [(2, 8, 1), (4, 1024, 64)] {
        let limiter: Limiter<u64> = Limiter::builder()
            .max_inflight(limit)
            .sketch(rows, columns)
            .exact_capacity(capacity)
            .build()
            .unwrap();
        hammer(&limiter, KEYS, 3, limit, 3, 60_000, hold, max_cost);
        assert!(limiter.stats().promotions > 0);
        assert_balanced(&limiter, KEYS, limit);
    }
}

/// Two threads each take a permit for one key, count it, give it back, `rounds` times, while
/// `already_held` permits for the key are held elsewhere; returns the most held at once.
fn churn_one_key(limiter: &Limiter<u64>, already_held: isize, rounds: usize) -> isize {
    let held = AtomicIsize::new(already_held);
    let most = AtomicIsize::new(already_held);
    thread::scope(|s| {
        for _ in 0..2 {
            let limiter = limiter.clone();
            let (held, most) = (&held, &most);
            s.spawn(move || {
                for _ in 0..rounds {
                    if let Ok(permit) = limiter.try_acquire(&7) {
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        held.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                    if most.load(Ordering::Relaxed) > already_held + 1 {
                        return;
                    }
                }
            });
        }
    });
    most.load(Ordering::SeqCst)
}

/// A promoted key at its limit of 1: thread A counts itself in the sketch and reads 1; thread B
/// counts itself (2), takes the lock first and is admitted by the exact count (0 + 1); A then
/// takes the lock and decides with min(its stale sketch read 1, exact 1 + 1) = 1: admitted.
#[test]
fn no_over_admission_when_two_requests_race_for_the_exact_stage_lock() {
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(1)
        .promotion_threshold(1.0)
        .build()
        .unwrap();
    let most = churn_one_key(&limiter, 0, 2_000_000);
    assert!(most <= 1, "{most} permits held at once, limit 1");
}

/// One permit admitted before the promotion stays held (untracked, base 1); two threads take
/// and give back the second slot. A release decrements the sketch, then (under the lock)
/// `tracked`; a request deciding in between rebases with `estimate − 1 − tracked`, which
/// counts the released permit twice, and lowers `base` to 0 for good: from then on the exact
/// bound is one short and both threads are admitted next to the held permit.
#[test]
fn no_over_admission_when_a_release_races_a_rebase() {
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(2)
        .promotion_threshold(1.0)
        .build()
        .unwrap();
    let _admitted_before_promotion = limiter.try_acquire(&7).unwrap();
    let most = churn_one_key(&limiter, 1, 2_000_000);
    assert!(most <= 2, "{most} permits held at once, limit 2");
}

/// The rate form of the first race, over many keys at once: each key is promoted with one
/// admitted request in the window (limit 2), then two threads walk the keys in step, one
/// request each. Thread A counts itself in the sketch (2) and reads it; B counts itself (3),
/// takes the lock first and is admitted by the exact count (1 + 1); A then decides with
/// min(its stale sketch read 2, exact 2 + 1) = 2: admitted, the third in the window.
#[test]
fn no_rate_over_admission_when_two_requests_race_for_the_exact_stage_lock() {
    const KEYS: u64 = 1_000;
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_rate(2, INTERVAL)
        .exact_capacity(KEYS as usize)
        .clock(&clock)
        .build()
        .unwrap();
    let admitted: Vec<AtomicIsize> = (0..KEYS).map(|_| AtomicIsize::new(0)).collect();
    for round in 0..300 {
        // Two whole windows on: the previous window and the current one are empty.
        clock.advance(2 * INTERVAL);
        for (key, count) in (0..KEYS).zip(&admitted) {
            let _ = limiter.try_acquire(&key).unwrap();
            count.store(1, Ordering::SeqCst);
        }
        thread::scope(|s| {
            for _ in 0..2 {
                let (limiter, admitted) = (&limiter, &admitted);
                s.spawn(move || {
                    for (key, count) in (0..KEYS).zip(admitted) {
                        if limiter.try_acquire(&key).is_ok() {
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
            }
        });
        for (key, count) in admitted.iter().enumerate() {
            let n = count.load(Ordering::SeqCst);
            assert!(
                n <= 2,
                "round {round}: key {key} admitted {n} times in one window, limit 2"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reports: heavy hitters, stats, demotion.

#[test]
fn heavy_hitters_lists_the_flooded_keys_with_counts_and_rejections_but_not_the_light_ones() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let busy_1: Vec<_> = (0..10)
        .filter_map(|_| limiter.try_acquire("busy-1").ok())
        .collect();
    let busy_2: Vec<_> = (0..7)
        .filter_map(|_| limiter.try_acquire("busy-2").ok())
        .collect();
    let light: Vec<_> = (0..50)
        .map(|i| limiter.try_acquire(&format!("light-{i}")).unwrap())
        .collect();
    assert_eq!((busy_1.len(), busy_2.len()), (4, 4));
    let hitters = limiter.heavy_hitters();
    let summary: Vec<_> = hitters
        .iter()
        .map(|h| (h.key.as_str(), h.inflight, h.rate, h.rejected))
        .collect();
    assert_eq!(
        summary,
        vec![
            // Most rejected first; one request of each was admitted before its promotion,
            // counted by the sketch alone.
            ("busy-1", Some(Figure::Estimated { at_most: 4 }), None, 6),
            ("busy-2", Some(Figure::Estimated { at_most: 4 }), None, 3),
        ]
    );
    drop((busy_1, busy_2, light));
}

/// A light key whose counters are shared with a hot one is promoted and listed next to it, at
/// the shared counter's figure: the report must mark that figure as the sketch's upper bound,
/// not as the key's count. Once the exact stage has counted it through both windows the rate
/// reads, the figure is its count.
#[test]
fn heavy_hitters_marks_the_rate_of_a_light_key_on_shared_counters_as_an_estimate() {
    let clock = ManualClock::new();
    let limiter = one_counter(&clock)
        .max_rate(1_000, Duration::from_secs(1))
        .build()
        .unwrap();
    let window = |light: usize| {
        for _ in 0..600 {
            let _ = limiter.try_acquire("hot"); // refused past its limit in the later windows
        }
        for _ in 0..light {
            let _admitted = limiter.try_acquire("light").unwrap();
        }
    };
    window(2);
    let light = held(&limiter).into_iter().find(|h| h.key == "light");
    let rate = light.expect("promoted on the shared counter").rate.unwrap();
    assert_eq!(
        rate.counted(),
        None,
        "2 requests sent, reported as {rate:?}"
    );
    assert!(
        rate.at_most() >= 2.0,
        "an estimate is an upper bound: {rate:?}"
    );

    // Two more windows of 2 requests: both windows the rate reads are counted.
    clock.advance(Duration::from_secs(1));
    window(2);
    clock.advance(Duration::from_secs(1));
    window(2);
    let light = held(&limiter).into_iter().find(|h| h.key == "light");
    assert_eq!(light.unwrap().rate, Some(Figure::Counted(4.0)));
}

/// The same for requests in flight, and the in-flight limit the key is judged by is reported
/// as the configured one.
#[test]
fn heavy_hitters_marks_the_in_flight_count_of_a_light_key_on_shared_counters_as_an_estimate() {
    let clock = ManualClock::new();
    let limiter = one_counter(&clock).max_inflight(100).build().unwrap();
    let hot: Vec<_> = (0..60)
        .map(|_| limiter.try_acquire("hot").unwrap())
        .collect();
    let light: Vec<_> = (0..2)
        .map(|_| limiter.try_acquire("light").unwrap())
        .collect();
    let found = held(&limiter).into_iter().find(|h| h.key == "light");
    let found = found.expect("promoted on the shared counter");
    let inflight = found.inflight.unwrap();
    assert_eq!(
        inflight.counted(),
        None,
        "2 in flight, reported as {inflight:?}"
    );
    assert!(inflight.at_most() >= 2, "an estimate is an upper bound");
    assert_eq!(found.inflight_limit, Some(InflightLimit::Configured(100)));
    drop((hot, light));
}

#[test]
fn heavy_hitters_reports_admitted_rates_not_offered_load() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(4, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let admitted = (0..10)
        .filter(|_| limiter.try_acquire("busy").is_ok())
        .count();
    let _ = limiter.try_acquire("quiet").unwrap();
    assert_eq!(admitted, 4);
    let hitters = limiter.heavy_hitters();
    assert_eq!(hitters.len(), 1, "{hitters:?}");
    let busy = &hitters[0];
    // One rejection decided here; the next five are rejected by the over-limit cache until its
    // retry_after, without being counted anywhere.
    assert_eq!(
        (busy.key.as_str(), busy.inflight, busy.rejected),
        ("busy", None, 1)
    );
    // 5 counted in the sketch, 4 admitted: the exact stage knows 4 (3 counted, and at most 1
    // admitted before the promotion, which only the sketch saw).
    assert_eq!(busy.rate, Some(Figure::Estimated { at_most: 4.0 }));
    clock.advance(Duration::from_millis(1500));
    // Half of the previous window still counts.
    assert_eq!(
        limiter.heavy_hitters()[0].rate,
        Some(Figure::Estimated { at_most: 2.0 })
    );
}

#[test]
fn stats_count_promotions_and_exact_full_fallbacks() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(2)
        .exact_capacity(1) // one key per shard, 16 in all
        .build()
        .unwrap();
    assert_eq!(
        (limiter.stats().promotions, limiter.stats().exact_full),
        (0, 0)
    );
    // Promotion at 1 in flight: each key's first request is hot, and holding it keeps the key
    // from cooling down. 400 keys cover all 16 shards (but for odds of about 1e-10).
    let held: Vec<_> = (0..400)
        .map(|i| limiter.try_acquire(&format!("k{i}")).unwrap())
        .collect();
    let stats = limiter.stats();
    assert_eq!(stats.exact_capacity, 16);
    assert_eq!(stats.promoted, 16);
    assert_eq!(stats.promotions, 16);
    assert_eq!(
        stats.exact_full,
        400 - 16,
        "every other hot key fell back to the sketch"
    );
    // Sketch-only decisions still hold the limit.
    let k399 = limiter.try_acquire("k399");
    let over = limiter.try_acquire("k399").unwrap_err();
    assert!(k399.is_ok(), "the second permit fits the limit of 2");
    assert_eq!((over.reason, over.limit), (Reason::Inflight, 2));
    drop(held);
}

/// Floods `key` to its in-flight limit of 4 (promoted at 2), returns the permits.
fn flood<'a>(limiter: &'a Limiter<String>, key: &str) -> Vec<Permit<'a, String>> {
    let permits: Vec<_> = (0..6)
        .filter_map(|_| limiter.try_acquire(key).ok())
        .collect();
    assert_eq!(permits.len(), 4);
    permits
}

#[test]
fn a_cooled_key_is_demoted_and_promoted_afresh() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let permits = flood(&limiter, "origin");
    assert_eq!(limiter.stats().promotions, 1);
    assert_eq!(limiter.stats().promoted, 1);
    drop(permits); // in the order they were taken
    assert_eq!(
        limiter.stats().promoted,
        0,
        "demoted once nothing is in flight"
    );
    assert!(held(&limiter).is_empty());
    let permits = flood(&limiter, "origin");
    assert_eq!(limiter.stats().promotions, 2, "promoted again");
    assert_eq!(held(&limiter)[0].rejected, 2, "counts start afresh");
    drop(permits);
}

#[test]
fn a_cooled_key_is_demoted_whatever_order_its_permits_drop_in() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(4).build().unwrap();
    let mut permits = flood(&limiter, "origin");
    // The first permit was admitted by the sketch before the promotion; drop it last.
    permits.reverse();
    drop(permits);
    let _permits = flood(&limiter, "origin");
    assert_eq!(
        limiter.stats().promotions,
        2,
        "{:?}",
        limiter.heavy_hitters()
    );
    assert_eq!(held(&limiter)[0].rejected, 2, "counts start afresh");
}

#[test]
fn a_rate_limited_key_that_cooled_down_is_demoted() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let flood_rate = || {
        (0..20)
            .filter(|_| limiter.try_acquire("origin").is_ok())
            .count()
    };
    assert_eq!(flood_rate(), 10);
    assert_eq!(limiter.stats().promotions, 1);
    // Ten quiet windows later, one request (a sliding count of 1, under a quarter of the
    // limit): the key is cold by any measure.
    clock.advance(Duration::from_secs(10));
    let _ = limiter.try_acquire("origin").unwrap();
    let hitters = held(&limiter);
    assert!(
        hitters.is_empty(),
        "idle for 10 windows, still held: {hitters:?}"
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(flood_rate(), 10);
    assert_eq!(limiter.stats().promotions, 2, "promoted afresh");
}

// ---------------------------------------------------------------------------------------------
// Construction errors.

#[test]
fn builder_rejects_bad_configs_with_the_right_error_and_a_helpful_message() {
    type B = floodgate::LimiterBuilder<String>;
    let base = || Limiter::<String>::builder();
    let cases: Vec<(&str, B, ConfigError, &[&str])> = vec![
        (
            "no limit",
            base(),
            ConfigError::InvalidLimit("a limiter needs max_inflight, max_rate or both"),
            &["max_inflight", "max_rate"],
        ),
        (
            "max_inflight 0",
            base().max_inflight(0),
            ConfigError::InvalidLimit("max_inflight must be at least 1"),
            &["max_inflight", "at least 1"],
        ),
        (
            "max_rate 0",
            base().max_rate(0, Duration::from_secs(1)),
            ConfigError::InvalidLimit("max_rate must be at least 1"),
            &["max_rate", "at least 1"],
        ),
        (
            "promotion 0",
            base().max_inflight(1).promotion_threshold(0.0),
            ConfigError::InvalidLimit("the promotion threshold must be in (0, 1]"),
            &["promotion", "(0, 1]"],
        ),
        (
            "promotion 1.5",
            base().max_inflight(1).promotion_threshold(1.5),
            ConfigError::InvalidLimit("the promotion threshold must be in (0, 1]"),
            &["promotion", "(0, 1]"],
        ),
        (
            "promotion NaN",
            base()
                .max_rate(1, Duration::from_secs(1))
                .promotion_threshold(f64::NAN),
            ConfigError::InvalidLimit("the promotion threshold must be in (0, 1]"),
            &["promotion", "(0, 1]"],
        ),
        (
            "promotion -inf",
            base()
                .max_inflight(1)
                .promotion_threshold(f64::NEG_INFINITY),
            ConfigError::InvalidLimit("the promotion threshold must be in (0, 1]"),
            &["promotion"],
        ),
        (
            "exact capacity 0",
            base().max_inflight(1).exact_capacity(0),
            ConfigError::ExactCapacity {
                asked: 0,
                max: MAX_EXACT_CAPACITY,
            },
            &["capacity", "between 1 and"],
        ),
        (
            "zero sketch rows (in flight)",
            base().max_inflight(1).sketch(0, 1024),
            ConfigError::ZeroRows,
            &["at least one row", "got 0 rows"],
        ),
        (
            "zero sketch rows (rate)",
            base().max_rate(1, Duration::from_secs(1)).sketch(0, 1024),
            ConfigError::ZeroRows,
            &["at least one row", "got 0 rows"],
        ),
        (
            "zero sketch columns",
            base().max_inflight(1).sketch(4, 0),
            ConfigError::ZeroColumns,
            &["at least one column", "got 0 columns"],
        ),
        (
            "interval under a tick",
            base().max_rate(10, Duration::from_millis(5)),
            ConfigError::IntervalTooShort {
                interval: Duration::from_millis(5),
                min: TICK,
            },
            &["5ms", "10ms", "shorter"],
        ),
        (
            "zero interval",
            base().max_rate(10, Duration::ZERO),
            ConfigError::IntervalTooShort {
                interval: Duration::ZERO,
                min: TICK,
            },
            &["shorter"],
        ),
    ];
    for (what, builder, expected, words) in cases {
        let err = builder
            .build()
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(err, expected, "{what}");
        let message = err.to_string();
        for word in words {
            assert!(message.contains(word), "{what}: {message:?} lacks {word:?}");
        }
    }
    // The edges that are allowed.
    assert!(base()
        .max_inflight(1)
        .promotion_threshold(1.0)
        .build()
        .is_ok());
    assert!(base()
        .max_inflight(1)
        .exact_capacity(1)
        .sketch(1, 1)
        .build()
        .is_ok());
    assert!(base().max_rate(1, TICK).build().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Rejected: Display and retry_after.

#[test]
fn rejected_display_mentions_the_estimate_the_limit_and_the_retry_time() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(2)
        .max_rate(3, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let held: Vec<_> = (0..2).map(|_| limiter.try_acquire("k").unwrap()).collect();
    let inflight = limiter.try_acquire("k").unwrap_err();
    assert_eq!((inflight.estimate, inflight.limit), (3, 2));
    let text = inflight.to_string();
    assert!(text.contains('3') && text.contains("limit of 2"), "{text}");
    assert!(
        text.contains("in flight") && !text.contains("retry"),
        "{text}"
    );
    drop(held);
    let _third = limiter.try_acquire("k").unwrap();
    let rate = limiter.try_acquire("k").unwrap_err();
    assert_eq!(
        (rate.reason, rate.estimate, rate.limit),
        (Reason::Rate, 4, 3)
    );
    let text = rate.to_string();
    assert!(text.contains('4') && text.contains("limit of 3"), "{text}");
    assert!(text.contains("retry after"), "{text}");
    let boxed: Box<dyn std::error::Error> = Box::new(rate);
    assert!(boxed.to_string().contains("per interval"));
}

/// A rate-limited key on a fresh limiter: `before` requests at the start of window 0, then at
/// `offset` into window 1, requests until one is rejected. Returns the limiter, its clock and
/// the rejection (`None` if nothing was rejected).
fn rate_scenario(
    interval: Duration,
    limit: u32,
    before: u32,
    offset: Duration,
) -> (Limiter<String>, ManualClock, Option<Rejected>) {
    let clock = ManualClock::new();
    let limiter = Limiter::builder()
        .max_rate(limit, interval)
        .sketch(4, 256)
        .clock(&clock)
        .build()
        .unwrap();
    for _ in 0..before {
        let _ = limiter.try_acquire("k").unwrap();
    }
    clock.advance(interval + offset);
    let rejected = (0..=2 * limit).find_map(|_| limiter.try_acquire("k").err());
    (limiter, clock, rejected)
}

/// For many rate-limited scenarios (see [`rate_scenario`]), checks that the rejected request
/// is rejected again `retry_after − 1ns` later and admitted `retry_after + slack` later (each
/// on its own limiter, so one probe does not change what the other sees). Returns the
/// scenarios that failed.
fn retry_after_failures(slack: Duration) -> Vec<String> {
    let mut failures = Vec::new();
    let mut checked = 0;
    for interval in [
        Duration::from_secs(1),
        Duration::from_millis(300),
        Duration::from_millis(70),
    ] {
        for limit in [1, 2, 3, 5, 10] {
            for before in 0..=limit {
                for fraction in [0.0, 0.1, 0.37, 0.5, 0.9] {
                    let offset = interval.mul_f64(fraction) + 3 * NS;
                    let case = format!("interval {interval:?}, limit {limit}, {before} in window 0, then at {offset:?} into window 1");
                    let (limiter, clock, rejected) = rate_scenario(interval, limit, before, offset);
                    let r = rejected.unwrap_or_else(|| panic!("{case}: nothing rejected"));
                    assert_eq!((r.reason, r.limit), (Reason::Rate, limit));
                    let retry = r
                        .retry_after
                        .unwrap_or_else(|| panic!("{case}: no retry_after"));
                    assert!(retry > Duration::ZERO, "{case}");
                    let (twin, twin_clock, _) = rate_scenario(interval, limit, before, offset);
                    twin_clock.advance(retry - NS);
                    if twin.try_acquire("k").is_ok() {
                        failures.push(format!("{case}: fits 1ns before retry_after {retry:?}"));
                    }
                    clock.advance(retry + slack);
                    if let Err(again) = limiter.try_acquire("k") {
                        failures.push(format!(
                            "{case}: rejected {slack:?} after retry_after {retry:?}: {again}"
                        ));
                    };
                    checked += 1;
                }
            }
        }
    }
    // 3 intervals × (2 + 3 + 4 + 6 + 11) (limit, before) pairs × 5 offsets.
    assert_eq!(checked, 390);
    failures
}

#[test]
fn retry_after_is_the_moment_the_same_request_fits_to_within_a_nanosecond() {
    let failures = retry_after_failures(NS);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn retry_after_is_never_early() {
    let failures = retry_after_failures(Duration::ZERO);
    assert!(
        failures.is_empty(),
        "{} of 390 early:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn retry_after_holds_when_the_sketch_decides_alone() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(4, Duration::from_secs(1))
        .sketch(4, 4096)
        .exact_capacity(1)
        .clock(&clock)
        .build()
        .unwrap();
    // Fill the exact stage with keys that stay hot (4 requests each, at the limit).
    for i in 0..400 {
        for _ in 0..4 {
            let _ = limiter.try_acquire(&format!("filler-{i}"));
        }
    }
    assert_eq!(limiter.stats().promoted, 16);
    let full_before = limiter.stats().exact_full;
    // A key that shares no counter with the fillers: its estimate is its own count, and the
    // retry is judged on it alone. (Which keys share counters follows the hash keys, random
    // for each build: a fixed name shared counters with fillers in some builds.)
    let k = (0..)
        .map(|i| format!("k-{i}"))
        .find(|k| limiter.estimate(k).rate == Some(0.0))
        .expect("a key on counters of its own");
    let k = k.as_str();
    for _ in 0..4 {
        let _ = limiter.try_acquire(k).unwrap();
    }
    let r = limiter.try_acquire(k).unwrap_err();
    assert!(
        limiter.stats().exact_full > full_before,
        "decided by the sketch"
    );
    let retry = r.retry_after.unwrap();
    clock.advance(retry);
    if let Err(again) = limiter.try_acquire(k) {
        panic!("rejected again after retry_after {retry:?}: {again}");
    };
}

/// Regression: an exact capacity of 2^40 keys aborted the process on allocation instead of
/// returning an error.
#[test]
fn an_exact_capacity_above_the_maximum_is_an_error_not_an_abort() {
    for capacity in [MAX_EXACT_CAPACITY + 1, 1 << 40, usize::MAX] {
        let err = Limiter::<u64>::builder()
            .max_inflight(1)
            .exact_capacity(capacity)
            .build()
            .unwrap_err();
        assert!(
            err == ConfigError::ExactCapacity {
                asked: capacity,
                max: MAX_EXACT_CAPACITY
            },
            "{capacity}: {err:?}"
        );
        assert!(err.to_string().contains("between 1 and"), "{err}");
    }
}

/// A `Rate` holds k + 4 window sketches: the counter limit applies to them together, so a
/// configuration that would need tens of gigabytes is refused, not attempted.
#[test]
fn a_rate_whose_window_slots_together_exceed_the_counter_limit_is_refused() {
    let err = floodgate::Rate::builder(Duration::from_secs(64))
        .sub_windows(64)
        .estimator(1, floodgate::Estimator::MAX_COUNTERS)
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::TooLarge { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("1 rows x 268435456 columns") && message.contains("window slots"),
        "{message}"
    );
}

// ---------------------------------------------------------------------------------------------
// Volume: sizing from the peak rate, and saying when traffic goes past it.

/// Requests per 10 ms at a simulated million requests per second.
const PER_TICK_AT_1M: u64 = 10_000;

/// One tick (10 ms) of the flood trace at a million requests a second: 100 healthy origins at
/// 10 requests per second (a tenth of their limit) — one request each from 10 of them per tick
/// —, one key flooding with 20% of the traffic, and the rest invented keys each sent twice.
/// Returns (healthy requests refused, flood requests admitted) for this tick.
fn flood_tick(limiter: &Limiter<u64>, tick: u64) -> (u64, u64) {
    const FLOOD: u64 = u64::MAX;
    let (mut refused, mut flood_admitted) = (0, 0);
    let healthy = (0..10).map(|i| (tick * 10 + i) % 100);
    for origin in healthy {
        refused += u64::from(limiter.try_acquire(&origin).is_err());
    }
    for _ in 0..PER_TICK_AT_1M / 5 {
        flood_admitted += u64::from(limiter.try_acquire(&FLOOD).is_ok());
    }
    let invented = (PER_TICK_AT_1M - 10 - PER_TICK_AT_1M / 5) / 2;
    for i in 0..invented {
        let key = 1_000 + (tick * invented + i) * 0x9E37_79B9;
        drop(limiter.try_acquire(&key));
        drop(limiter.try_acquire(&key));
    }
    (refused, flood_admitted)
}

#[test]
fn the_default_limiter_serves_healthy_origins_through_floods_at_a_million_requests_a_second() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_rate(100, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let (mut refused, mut flood_admitted, mut flood_per_second) = (0, 0, Vec::new());
    for tick in 0..300 {
        let (r, a) = flood_tick(&limiter, tick);
        refused += r;
        flood_admitted += a;
        if tick % 100 == 99 {
            flood_per_second.push(flood_admitted);
            flood_admitted = 0;
        }
        clock.advance(TICK);
    }
    let stats = limiter.stats();
    println!("{stats:?}; flood admitted per second: {flood_per_second:?}");
    assert_eq!(refused, 0, "healthy requests refused at 1M requests/s");
    // The sliding window admits at most 100 in any one-second window; in the first second
    // 100 exactly, then whatever the window frees.
    assert_eq!(flood_per_second[0], 100);
    assert!(
        flood_per_second.iter().all(|&n| n <= 100),
        "the flooding key got more than its limit: {flood_per_second:?}"
    );
    assert!(!stats.saturated, "sized for 1M/s, yet saturated: {stats:?}");
    assert!(
        limiter.memory_bytes() <= 32 << 20,
        "{} bytes",
        limiter.memory_bytes()
    );
}

#[test]
fn stats_say_when_traffic_goes_past_what_the_sketches_can_tell_apart() {
    let clock = ManualClock::new();
    let build = |peak: u64| -> Limiter<u64> {
        Limiter::builder()
            .max_inflight(100)
            .max_rate(100, Duration::from_secs(1))
            .peak_rate(peak)
            .clock(&clock)
            .build()
            .unwrap()
    };
    let (small, sized) = (build(10_000), build(1_000_000));
    for limiter in [&small, &sized] {
        let quiet = limiter.stats();
        assert_eq!(
            (quiet.rate_noise, quiet.inflight_noise),
            (Some(0.0), Some(0.0))
        );
        assert_eq!(quiet.rate_promote_at, Some(50.0));
        assert_eq!(quiet.inflight_promote_at, Some(50.0));
        assert!(!quiet.saturated);
    }
    // A million distinct keys within one window: a million requests per second.
    for key in 0..1_000_000u64 {
        drop(small.try_acquire(&key));
        drop(sized.try_acquire(&key));
    }
    let (past, within) = (small.stats(), sized.stats());
    println!("sized for 10k/s: {past:?}\nsized for 1M/s: {within:?}");
    assert!(past.saturated, "100x its peak rate, not reported: {past:?}");
    assert!(past.rate_noise.unwrap() >= 25.0);
    assert!(!within.saturated, "at its peak rate: {within:?}");
    // At most a quarter of the promotion threshold at the peak: what the sizing promises.
    assert!(within.rate_noise.unwrap() <= 12.5, "{within:?}");
    // In-flight counts went back to zero: no in-flight noise either way.
    assert_eq!(within.inflight_noise, Some(0.0));
}

#[test]
fn the_sketch_size_follows_the_peak_rate_in_half_the_flat_memory_unless_given() {
    let build = |b: floodgate::LimiterBuilder<u64>| b.build().unwrap().memory_bytes();
    let rate = || {
        Limiter::<u64>::builder()
            .max_inflight(100)
            .max_rate(100, Duration::from_secs(1))
    };
    let default = build(rate());
    let small = build(rate().peak_rate(10_000));
    let huge = build(rate().peak_rate(u64::MAX));
    let given = build(rate().peak_rate(u64::MAX).sketch(4, 1024));
    assert!(small < default, "{small} vs {default}");
    // Sketches of 32-bit counters in 64-byte blocks, not rounded to a power of two: the
    // default limiter (a peak of a million a second, limits of 100) takes less than half of
    // what it took with flat `isize` rows: 26,214,888 bytes, and 1,835,008 more with the
    // fleet's feature, whose exact-stage entries are larger. Its exact stage's lanes have
    // grown since, apart from the sketches: a line each (64 bytes, where 56 shared lines),
    // 8 bytes more for each of its 16,384 places.
    let lanes_since = 8 * 16_384;
    let half_of_flat = if cfg!(feature = "redis") {
        (26_214_888 + 1_835_008) / 2 + lanes_since
    } else {
        26_214_888 / 2 + lanes_since
    };
    assert!(
        default <= half_of_flat,
        "default limiter of {default} bytes"
    );
    assert!(
        huge <= 32 << 20,
        "columns stop at MAX_SIZED_COLUMNS: {huge} bytes"
    );
    assert_eq!(
        given,
        build(rate().sketch(4, 1024)),
        "sketch() overrides the sizing"
    );
    let err = rate().peak_rate(0).build().unwrap_err();
    assert!(matches!(err, ConfigError::InvalidLimit(_)));
    assert!(err.to_string().contains("peak rate"), "{err}");
}

/// A flood that ends between two scrapes is still in the second: a key that left the exact
/// stage stays in `heavy_hitters` (with when it left and the refusals it had) for the
/// retention, then goes.
#[test]
fn a_flooded_key_stays_in_heavy_hitters_for_the_retention_after_it_leaves_the_stage() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(10, Duration::from_secs(1))
        .heavy_hitters_retention(Duration::from_secs(30))
        .clock(&clock)
        .build()
        .unwrap();
    let refused = (0..50)
        .filter(|_| limiter.try_acquire("flood").is_err())
        .count();
    assert_eq!(refused, 40);
    let held = limiter.heavy_hitters();
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].key.as_str(), held[0].left_ago), ("flood", None));
    assert!(held[0].rejected > 0);

    // The flood is over: the sweep demotes the key once its windows have passed.
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.stats().promoted, 0, "demoted");
    let after = limiter.heavy_hitters();
    assert_eq!(after.len(), 1, "still listed");
    assert_eq!(after[0].key, "flood");
    assert_eq!(after[0].rejected, held[0].rejected);
    let ago = after[0].left_ago.expect("left the stage");
    assert!(ago <= Duration::from_secs(5), "{ago:?}");

    clock.advance(Duration::from_secs(30));
    assert!(limiter.heavy_hitters().is_empty(), "past the retention");
}

/// What the promotion threshold proves of a key's admissions holds unless that key was
/// admitted some other way in the windows it covers (it left the stage, or the sketch
/// decided it alone while hot). Another key leaving the same set of the exact stage says
/// nothing of it: a fresh key sharing every counter with a flood is still admitted at its
/// first request after a neighbour left. When the set recorded only that one of its keys was
/// lost, such a key started from the flood's counts and was refused (the accuracy pass's rare
/// wrong refusal after warm-up, at Zipf 1M/s).
#[test]
fn a_key_leaving_the_exact_stage_takes_no_other_keys_proven_bound_with_it() {
    let clock = ManualClock::new();
    let limiter = one_counter(&clock)
        .max_inflight(4)
        .max_rate(10, INTERVAL)
        .exact_capacity(16) // one set: every key's
        .build()
        .unwrap();
    // Two in flight promote it (at half of 4); given back, it is cool and leaves.
    let permits: Vec<_> = (0..2)
        .map(|_| limiter.try_acquire("gone").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1);
    drop(permits);
    assert_eq!(limiter.stats().promoted, 0, "it left at its release");
    for _ in 0..30 {
        let _ = limiter.try_acquire("flood");
    }
    let fresh = limiter.try_acquire("fresh");
    assert!(
        fresh.is_ok(),
        "refused at its first request: {:?}",
        fresh.err()
    );
}
