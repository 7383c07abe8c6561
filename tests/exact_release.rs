//! A promoted key's permits give their units back without its set's lock, and nothing is lost
//! or counted twice when they race each other, new admissions, the clock's sweep, and other
//! keys taking and leaving the key's set.

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Limits};
use rand::{Rng, SeedableRng};

/// A key with requests in flight throughout (what makes an in-flight limit matter) is
/// admitted and gives each request back without a lock, as long as it fits, and refused
/// without one past its limit; only the release that leaves it nothing in flight takes one,
/// to see whether the key has cooled down. Before, every admission and release of a promoted
/// key took its set's lock.
#[test]
fn a_promoted_key_is_admitted_and_released_without_a_lock_while_it_fits() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(8)
        .clock(&clock)
        .build()
        .unwrap();
    // Four held promote it (at half of 8).
    let held: Vec<_> = (0..4)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1);
    // Its first decision under the lock since says what its lane admits under.
    drop(limiter.try_acquire("origin").unwrap());
    let locks = limiter.exact_locks_taken();
    for _ in 0..1_000 {
        let permits: Vec<_> = (0..4)
            .map(|_| limiter.try_acquire("origin").unwrap())
            .collect();
        drop(permits);
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "an admission or a release that fit took the lock"
    );
    let ninth = limiter.with_limits(floodgate::Limits::new().max_inflight(8));
    let full: Vec<_> = (0..4)
        .map(|_| ninth.try_acquire("origin").unwrap())
        .collect();
    assert!(limiter.try_acquire("origin").is_err(), "9 over 8");
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "a refusal the lock would make took it"
    );
    drop(full);
    let locks = limiter.exact_locks_taken();
    drop(held);
    assert_eq!(
        limiter.exact_locks_taken(),
        locks + 1,
        "the last release looks at the key once"
    );
    assert_eq!(limiter.stats().promoted, 0, "cool: it left at its release");
}

/// A promoted key at its in-flight limit is refused in its lane, without the lock, with the
/// answer the lock gives (reason, bound and limit), on every path a request takes (`try_acquire`,
/// a plan's limits, a cost, a waiting request's attempts), in shadow as an admission that
/// says so; the reports count each refusal, while the key is promoted and after it left.
/// Before, each of these refusals took its set's lock.
#[test]
fn a_promoted_key_at_its_in_flight_limit_is_refused_without_the_lock() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(8)
        .max_waiters(4)
        .clock(&clock)
        .build()
        .unwrap();
    let held: Vec<_> = (0..8)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1);
    // Its first refusal is decided under the lock: the key's lane learns its base there.
    let first = limiter.try_acquire("origin").unwrap_err();
    let locks = limiter.exact_locks_taken();
    let plan = limiter.with_limits(Limits::new().max_inflight(8));
    let shadow = limiter.with_limits(Limits::new().max_inflight(8).shadow(true));
    let mut refused = 1;
    for round in 0..100 {
        let rejected = match round % 4 {
            0 => limiter.try_acquire("origin").unwrap_err(),
            1 => plan.try_acquire("origin").unwrap_err(),
            2 => plan.cost(3).try_acquire("origin").unwrap_err(),
            _ => {
                let permit = shadow.try_acquire("origin").unwrap();
                permit
                    .shadow_rejection()
                    .expect("refused in shadow")
                    .clone()
            }
        };
        refused += 1;
        assert_eq!(rejected.reason, floodgate::Reason::Inflight);
        assert_eq!(rejected.limit, first.limit);
        let cost = if round % 4 == 2 { 3 } else { 1 };
        assert_eq!(rejected.estimate, 8 + cost, "round {round}");
    }
    // A waiting request's first attempt and the one it makes after joining its line.
    let mut waiting = limiter.acquire("origin", Duration::from_millis(50));
    let waker = std::task::Waker::noop();
    let polled = std::pin::Pin::new(&mut waiting).poll(&mut std::task::Context::from_waker(waker));
    assert!(polled.is_pending());
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "a refusal the lock would make took it"
    );
    assert_eq!(
        limiter.estimate("origin").inflight,
        Some(8),
        "nothing counted"
    );
    // Its two attempts, and every refusal above (in shadow too: the refusal an admission
    // stands for).
    refused += 2;
    let reported = limiter.heavy_hitters()[0].rejected;
    assert_eq!(reported, refused);
    drop(held);
    assert_eq!(
        limiter.stats().promoted,
        0,
        "cool: it left at its last release"
    );
    assert_eq!(
        limiter.heavy_hitters()[0].rejected,
        reported,
        "its refusals left with it"
    );
}

/// The same in a limiter that counts both requests in flight and a rate: a promoted key's
/// request is admitted in flight in its lane and takes its rate units out of its lease, and
/// its release gives them back, without a lock while both fit; the reports count every
/// request admitted. Before, every admission of such a key took its set's lock.
#[test]
fn a_promoted_key_counting_both_is_admitted_and_released_without_a_lock_while_it_fits() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(8)
        .max_rate(100_000, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1, "promoted at 4 in flight");
    // Its first decision under the lock since leases it room and says what its lane admits
    // under.
    drop(limiter.try_acquire("origin").unwrap());
    let locks = limiter.exact_locks_taken();
    for _ in 0..1_000 {
        let permits: Vec<_> = (0..4)
            .map(|_| limiter.try_acquire("origin").unwrap())
            .collect();
        drop(permits);
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "an admission or a release that fit took the lock"
    );
    let full: Vec<_> = (0..4)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(
        limiter.try_acquire("origin").unwrap_err().reason,
        floodgate::Reason::Inflight,
        "9 over 8"
    );
    assert_eq!(
        limiter.exact_locks_taken(),
        locks + 1,
        "a refusal is decided under the lock"
    );
    let estimate = limiter.estimate("origin");
    assert_eq!(estimate.inflight, Some(8));
    assert_eq!(estimate.rate, Some(4_009.0), "every request admitted");
    drop(full);
    drop(held);
    let estimate = limiter.estimate("origin");
    assert_eq!(
        estimate.inflight,
        Some(0),
        "every unit in flight given back"
    );
    assert_eq!(estimate.rate, Some(4_009.0));
}

/// A key under both limits whose requests come one at a time (each given back before the
/// next) is promoted by its rate, and has nothing in flight after each release: its releases
/// take no lock to see whether it has cooled down (its rate keeps it hot), and its
/// admissions take its lease. Before, each release took the lock and took the lease back, and
/// the next request was decided under the lock too. It is judged cool at the clock's sweep.
#[test]
fn a_key_under_both_whose_requests_come_one_at_a_time_takes_no_lock() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(8)
        .max_rate(1_000, Duration::from_secs(1))
        .clock(&clock)
        .build()
        .unwrap();
    for _ in 0..601 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(limiter.stats().promoted, 1, "promoted at 500 by its rate");
    let locks = limiter.exact_locks_taken();
    for _ in 0..300 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "a release with nothing left in flight, or the admission after it, took the lock"
    );
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
    clock.advance(Duration::from_secs(3));
    assert_eq!(
        limiter.stats().promoted,
        0,
        "cool once its rate fell: demoted"
    );
}

/// A key promoted by a spike that then settles below its promotion threshold, with requests
/// in flight throughout, cannot cool down (it holds units in flight) and is not hot: its
/// admissions pass its lane without the lock too. Before, each took the lock.
#[test]
fn a_promoted_key_settled_below_its_threshold_is_admitted_without_a_lock() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(100)
        .clock(&clock)
        .build()
        .unwrap();
    let spike: Vec<_> = (0..60)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1, "promoted at 50");
    let mut steady: Vec<_> = (0..30)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    drop(spike);
    // One decision under the lock lowers the key's bound now that the spike is back.
    drop(steady.remove(0));
    steady.push(limiter.try_acquire("origin").unwrap());
    let locks = limiter.exact_locks_taken();
    for _ in 0..1_000 {
        drop(steady.remove(0));
        steady.push(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "30 in flight of 100 took the lock"
    );
    assert_eq!(limiter.stats().promoted, 1);
    drop(steady);
    assert_eq!(limiter.stats().promoted, 0, "cool once all are back");
}

/// A promoted key whose requests in flight from before its promotion came back, below its
/// promotion threshold now and with nothing counted in its lane, is judged at its next
/// request under the lock and leaves: its lane admits no request below the threshold while it
/// counts nothing, nor one that would lower its base (what the key had in flight when
/// promoted), whether the path reads the limits whole or their one word.
#[test]
fn a_promoted_key_cooled_below_its_threshold_leaves_at_its_next_request() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(100)
        .clock(&clock)
        .build()
        .unwrap();
    let mut spike: Vec<_> = (0..60)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1, "promoted at 50");
    // The requests from its promotion on, back: its lane counts nothing, and 49 in flight
    // keep it hot.
    drop(spike.split_off(49));
    assert_eq!(limiter.stats().promoted, 1, "49 in flight");
    // Those from before its promotion were counted by the sketch alone, and their releases
    // do not look at the key.
    spike.truncate(20);
    assert_eq!(limiter.stats().promoted, 1, "20 in flight");
    let request = limiter.try_acquire("origin").unwrap();
    assert_eq!(
        limiter.stats().promoted,
        0,
        "21 in flight of a threshold of 50, none counted in the lane: judged and left"
    );
    drop((request, spike));
}

/// New default limits hold for a promoted key at once, and its lane admits under them again
/// without the lock after one decision under it: in a limiter that counts units in flight
/// alone, and in one that counts both (each reads the default limits' one word its lane
/// admits under, which `set_limits` replaces with the rest).
#[test]
fn new_default_limits_hold_for_a_promoted_key_and_its_lane_admits_under_them() {
    for both in [false, true] {
        let clock = ManualClock::new();
        let builder = Limiter::builder().max_inflight(8).clock(&clock);
        let builder = if both {
            builder.max_rate(100_000, Duration::from_secs(1))
        } else {
            builder
        };
        let limiter: Limiter<String> = builder.build().unwrap();
        let limits = |inflight: u32| {
            let limits = Limits::new().max_inflight(inflight);
            if both {
                limits.max_rate(100_000)
            } else {
                limits
            }
        };
        let held: Vec<_> = (0..4)
            .map(|_| limiter.try_acquire("origin").unwrap())
            .collect();
        assert_eq!(limiter.stats().promoted, 1, "promoted at 4 in flight");
        for inflight in [6, 8, 5] {
            limiter.set_limits(limits(inflight)).unwrap();
            let room = (inflight - 4) as usize;
            let full: Vec<_> = (0..room)
                .map(|_| limiter.try_acquire("origin").unwrap())
                .collect();
            assert_eq!(
                limiter.try_acquire("origin").unwrap_err().reason,
                floodgate::Reason::Inflight,
                "both {both}: {} over {inflight}",
                inflight + 1
            );
            drop(full);
            let locks = limiter.exact_locks_taken();
            for _ in 0..1_000 {
                let permits: Vec<_> = (0..room)
                    .map(|_| limiter.try_acquire("origin").unwrap())
                    .collect();
                drop(permits);
            }
            assert!(
                limiter.exact_locks_taken() <= locks + 1,
                "both {both}, a limit of {inflight}: {} locks in 1,000 rounds that fit",
                limiter.exact_locks_taken() - locks
            );
        }
        drop(held);
        assert_eq!(limiter.estimate("origin").inflight, Some(0), "both {both}");
    }
}

/// A release that finds its key's place given to another key since (the key left, and the
/// place was taken) gives back nothing to the newcomer: its units left with the entry that
/// counted them.
#[test]
fn a_release_after_its_keys_place_was_taken_leaves_the_newcomers_count_alone() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(4)
        .sketch(1, 1) // one counter: every key looks as heavy as all of them
        .exact_capacity(16) // one set
        .clock(&clock)
        .build()
        .unwrap();
    let old: Vec<_> = (0..2)
        .map(|_| limiter.try_acquire("old").unwrap())
        .collect();
    assert_eq!(limiter.stats().promoted, 1);
    // Fill the set with keys that hold one request each, and then more keys that knock until
    // one takes the place of the weakest, which may be "old".
    let mut others = Vec::new();
    for i in 0..64 {
        let key = format!("key-{i}");
        for _ in 0..6 {
            if let Ok(p) = limiter.try_acquire(&key) {
                others.push(p);
                break;
            }
        }
    }
    // Whatever happened to "old", its permits give back its own units, no one else's: once
    // every permit is dropped, every key's count is 0 and each is admitted to its limit again.
    drop(old);
    drop(others);
    clock.advance(Duration::from_secs(5));
    for key in ["old", "key-0", "key-63"] {
        let estimate = limiter.estimate(key);
        assert_eq!(estimate.inflight, Some(0), "{key}");
        let again: Vec<_> = (0..4).map(|_| limiter.try_acquire(key)).collect();
        assert!(again.iter().all(Result::is_ok), "{key}: {again:?}");
    }
}

/// The property under contention: threads take and give back permits of drawn costs for a
/// few hot keys of one set, while another thread promotes and demotes keys of the same set
/// (their places change hands) and the clock sweeps. At every moment each hot key's units held
/// are within its limit (none admitted past it: no release gave back what it did not count,
/// none counted in the wrong place), and once all are given back nothing is left counted:
/// the keys cool down and leave the stage, and each is admitted to its whole limit again.
#[test]
fn racing_releases_admissions_and_place_changes_keep_every_hot_key_within_its_limit() {
    const THREADS: usize = 3;
    const HOT: u64 = 4;
    // Entries that lost their place to a key with more evidence, over all seeds.
    let mut replaced = 0;
    let mut admitted_in_all = 0;
    let mut promotions = 0;
    for seed in 0..32u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xF100D ^ seed);
        // The last eight seeds count a rate too, never reached: a promoted key's admission
        // in its lane takes its lease after it counts itself in flight, and gives its units
        // back when the lease has none for it.
        let both = seed >= 24;
        // Limits over their whole range: 1, small, large, the largest.
        let limit: u32 = match seed % 4 {
            0 => 1,
            1 => rng.gen_range(2..=16),
            2 => rng.gen_range(17..=100_000),
            _ => Limits::MAX_LIMIT,
        };
        let clock = ManualClock::new();
        let builder = Limiter::builder()
            .max_inflight(limit)
            .sketch(1, 1)
            .exact_capacity(16)
            .clock(&clock);
        let builder = match both {
            true => builder.max_rate(Limits::MAX_LIMIT, Duration::from_secs(1)),
            false => builder,
        };
        let limiter: Limiter<u64> = builder.build().unwrap();
        let held: Vec<AtomicI64> = (0..HOT).map(|_| AtomicI64::new(0)).collect();
        let done = AtomicUsize::new(0);
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (limiter, held, admitted, done) = (&limiter, &held, &admitted, &done);
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 31 + t as u64);
                s.spawn(move || {
                    // Counted done however the worker ends, a failed assertion included, so
                    // that the churn below stops and the failure is reported.
                    let _done = Done(done);
                    let mut permits = Vec::new();
                    for _ in 0..50_000 {
                        let key = rng.gen_range(0..HOT);
                        // Costs from 1 to the whole limit (and past it, refused at once).
                        let cost = match rng.gen_range(0..8) {
                            0 => limit,
                            1 => limit.saturating_add(1),
                            2 => (limit / 2).max(1),
                            3 => (limit / 4).max(1),
                            _ => rng.gen_range(1..=limit.min(4)),
                        };
                        let with = limiter.with_limits(Limits::new().max_inflight(limit));
                        if let Ok(permit) = with.cost(cost).try_acquire(&key) {
                            let now = held[key as usize]
                                .fetch_add(i64::from(cost), Ordering::SeqCst)
                                + i64::from(cost);
                            assert!(
                                now <= i64::from(limit),
                                "key {key}: {now} units held over a limit of {limit}"
                            );
                            admitted.fetch_add(1, Ordering::Relaxed);
                            permits.push((key, cost, permit));
                        }
                        if permits.len() > rng.gen_range(0..3) {
                            let (key, cost, permit) = permits.swap_remove(0);
                            held[key as usize].fetch_sub(i64::from(cost), Ordering::SeqCst);
                            drop(permit);
                        }
                    }
                    for (key, cost, permit) in permits {
                        held[key as usize].fetch_sub(i64::from(cost), Ordering::SeqCst);
                        drop(permit);
                    }
                });
            }
            // Keys come and go in the same set, each holding a request of a quarter of the
            // limit for a while (on the shared counter, every key looks that heavy at least),
            // and the clock sweeps, until the workers are done.
            let (limiter, clock, done) = (&limiter, &clock, &done);
            s.spawn(move || {
                let with = limiter.with_limits(Limits::new().max_inflight(limit));
                let with = with.cost((limit / 4).max(1));
                let mut holding = std::collections::VecDeque::new();
                let mut next = 1_000u64;
                while done.load(Ordering::Acquire) < THREADS {
                    for _ in 0..4 {
                        if let Ok(permit) = with.try_acquire(&next) {
                            holding.push_back(permit);
                        }
                    }
                    if holding.len() > 24 {
                        holding.pop_front();
                    }
                    next += 1;
                    if next % 4 == 0 {
                        clock.advance(Duration::from_millis(10));
                    }
                    std::thread::yield_now();
                }
            });
        });
        let stats = limiter.stats();
        eprintln!(
            "seed {seed}, limit {limit}, a rate too: {both}: {} admitted, {} promotions, {} \
             replaced",
            admitted.load(Ordering::Relaxed),
            stats.promotions,
            stats.replaced
        );
        // (A seed may admit nothing: with a limit of 1, keys holding their one unit on the
        // shared counter keep every other key's bound at its limit.)
        admitted_in_all += admitted.load(Ordering::Relaxed);
        // What the test is for happened (over all seeds, below): places changed hands under
        // the hot keys (a key left and another took its way, under a new generation).
        promotions += stats.promotions;
        replaced += stats.replaced;
        // All given back: nothing is left counted anywhere.
        clock.advance(Duration::from_secs(5));
        assert_eq!(
            limiter.stats().promoted,
            0,
            "seed {seed}: a key kept units in flight after all were given back"
        );
        for key in 0..HOT {
            // (Counting a rate, on the one counter: the whole request of the key before
            // slides out of the windows first.)
            clock.advance(Duration::from_secs(5));
            assert_eq!(limiter.estimate(&key).inflight, Some(0), "seed {seed}");
            let whole = limiter
                .with_limits(Limits::new().max_inflight(limit))
                .cost(limit)
                .try_acquire(&key);
            assert!(whole.is_ok(), "seed {seed}, key {key}: {whole:?}");
        }
    }
    assert!(promotions > 32 * 16, "{promotions} promotions in all");
    assert!(replaced > 0, "no seed replaced an entry");
    assert!(admitted_in_all > 0, "nothing admitted");
}

/// Counts a worker done when it ends, however it ends.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}
