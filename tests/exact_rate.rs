//! A promoted key under a rate limit (and no in-flight limit) is admitted without its set's
//! lock, out of a lease of room its last decision under the lock counted ahead; nothing is
//! admitted past the limit when requests race for leases, the lock takes them back, and other
//! keys take and leave the key's set; reports and refunds count what was admitted, not what
//! was leased.

use std::collections::HashMap;
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Figure, Limiter, Limits};
use rand::{Rng, SeedableRng};

const INTERVAL: Duration = Duration::from_secs(1);

/// A limiter of `limit` requests a second (windows of a second), on `clock`.
fn limiter(clock: &ManualClock, limit: u32) -> Limiter<String> {
    Limiter::builder()
        .max_rate(limit, INTERVAL)
        .clock(clock)
        .build()
        .unwrap()
}

/// A key driven at 60% of its rate limit, evenly over many windows, is admitted with a few
/// locks a window (its lease runs out and is granted again as the previous window slides
/// out), not one a request; a request it cannot take is decided under the lock. Before,
/// every admission of a promoted key took its set's lock.
#[test]
fn a_promoted_key_under_a_rate_limit_takes_a_few_locks_a_window_not_one_a_request() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 1_000);
    let per_window = 600;
    let step = INTERVAL / per_window;
    // Two windows to promote the key and settle it.
    for _ in 0..2 * per_window {
        drop(limiter.try_acquire("origin").unwrap());
        clock.advance(step);
    }
    assert_eq!(limiter.stats().promoted, 1);
    let locks = limiter.exact_locks_taken();
    let windows = 20;
    for _ in 0..windows * per_window {
        drop(
            limiter
                .try_acquire("origin")
                .expect("refused at 60% of its limit"),
        );
        clock.advance(step);
    }
    let taken = limiter.exact_locks_taken() - locks;
    assert!(
        taken <= 4 * u64::from(windows),
        "{taken} locks for {} admissions in {windows} windows",
        windows * per_window
    );
}

/// Within one window, at one time: a promoted key takes its lease without the lock, and the
/// request that would fill it is decided under the lock, which holds the next refusals in the
/// over-limit cache.
#[test]
fn a_lease_runs_out_one_request_before_the_limit_and_the_lock_fills_it() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 100);
    for _ in 0..51 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(limiter.stats().promoted, 1, "promoted at 50");
    let locks = limiter.exact_locks_taken();
    for _ in 0..48 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "a lease's request took the lock"
    );
    drop(limiter.try_acquire("origin").unwrap());
    assert_eq!(
        limiter.exact_locks_taken(),
        locks + 1,
        "the 100th, under the lock"
    );
    assert!(limiter.try_acquire("origin").is_err(), "101 over 100");
    assert_eq!(
        limiter.exact_locks_taken(),
        locks + 1,
        "the first refusal, from the over-limit cache"
    );
}

/// What a report says a promoted key admitted is what it admitted: the units of its lease
/// not yet taken are not in it.
#[test]
fn a_report_counts_what_was_admitted_not_what_was_leased() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock, 100);
    // Promoted at 50 in window 0; its counts are exact from window 1 on.
    for _ in 0..60 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    clock.advance(INTERVAL + INTERVAL / 2);
    for _ in 0..60 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    clock.advance(INTERVAL / 2);
    // Window 2, at its start: 60 in the window before, 7 in this one, and a lease of most of
    // the 33 units of room left counted ahead in the key's window.
    for _ in 0..7 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    let hitter = limiter
        .heavy_hitters()
        .into_iter()
        .find(|h| h.key == "origin" && h.left_ago.is_none())
        .expect("promoted");
    assert_eq!(hitter.rate, Some(Figure::Counted(67.0)));
    assert_eq!(limiter.estimate("origin").rate, Some(67.0));
}

/// A request admitted out of its key's lease, then taken back because another key refused
/// (several keys in one decision), gives its units back to its key's window: the key is
/// charged for what it admitted.
#[test]
fn a_refund_gives_back_units_taken_from_a_lease() {
    let clock = ManualClock::new();
    let origins = limiter(&clock, 100);
    let clients = limiter(&clock, 100);
    for _ in 0..60 {
        drop(origins.try_acquire("origin").unwrap());
    }
    clock.advance(INTERVAL);
    for _ in 0..100 {
        drop(clients.try_acquire("client").unwrap());
    }
    let locks = origins.exact_locks_taken();
    for _ in 0..5 {
        drop(origins.try_acquire("origin").unwrap());
    }
    for _ in 0..20 {
        let refused = origins.try_acquire_and("origin", || clients.try_acquire("client"));
        assert!(refused.is_err(), "the client is over its limit");
    }
    // Its first admission in the window granted a lease; the refunds take the lock.
    assert!(origins.exact_locks_taken() > locks);
    clock.advance(INTERVAL);
    let hitter = origins
        .heavy_hitters()
        .into_iter()
        .find(|h| h.key == "origin")
        .expect("promoted");
    // At the start of window 2: the 5 of window 1 slide in whole, none of the 20 refunded.
    assert_eq!(hitter.rate, Some(Figure::Counted(5.0)));
}

/// The property under contention: three threads take drawn costs from keys of drawn rate
/// limits (1, small, large, the largest), all keys hot on a one-counter sketch and 24 keys for
/// 16 places, so that keys are promoted, replaced and promoted again while leases are taken
/// and taken back; the clock moves between rounds by drawn steps (within a window, across
/// one, across many). After each round, at its time, every key's true sliding count is
/// within its limit.
#[test]
fn racing_requests_never_take_a_key_past_its_rate_limit() {
    for seed in 0..12u64 {
        run_seed(seed);
    }
}

fn run_seed(seed: u64) {
    const KEYS: usize = 24;
    const THREADS: usize = 3;
    const ROUNDS: usize = 40;
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(100, INTERVAL)
        .sketch(1, 1)
        .exact_capacity(16)
        .clock(&clock)
        .build()
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let limits: Vec<u32> = (0..KEYS)
        .map(|_| match rng.gen_range(0..4) {
            0 => 1,
            1 => rng.gen_range(2..=16),
            2 => rng.gen_range(17..=100_000),
            _ => Limits::MAX_LIMIT,
        })
        .collect();
    let len = INTERVAL.as_nanos() as u64;
    // Units admitted, by key and window.
    let admitted: Mutex<HashMap<(usize, u64), u64>> = Mutex::new(HashMap::new());
    let barrier = Barrier::new(THREADS + 1);
    // The first key found over its limit: asserted once the threads are done (a panic here
    // would leave them waiting at the barrier).
    let mut over = None;
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (limiter, limits, admitted, barrier, clock) =
                (&limiter, &limits, &admitted, &barrier, &clock);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 31 + thread as u64);
                for _ in 0..ROUNDS {
                    barrier.wait();
                    let window = clock.now().as_nanos() as u64 / len;
                    let mut mine = HashMap::new();
                    for _ in 0..400 {
                        let key = rng.gen_range(0..KEYS);
                        let limit = limits[key];
                        let cost = match rng.gen_range(0..10) {
                            0..=5 => 1,
                            6..=8 => rng.gen_range(1..=limit.min(1 << 20)),
                            _ => limit.saturating_add(1),
                        };
                        let with = limiter.with_limits(Limits::new().max_rate(limit));
                        if with.cost(cost).try_acquire(&format!("key-{key}")).is_ok() {
                            *mine.entry((key, window)).or_insert(0) += u64::from(cost);
                        }
                    }
                    let mut all = admitted.lock().unwrap();
                    for (k, units) in mine {
                        *all.entry(k).or_insert(0) += units;
                    }
                    drop(all);
                    barrier.wait();
                }
            });
        }
        for round in 0..ROUNDS {
            barrier.wait();
            barrier.wait();
            let now = clock.now().as_nanos() as u64;
            let (window, into) = (now / len, now % len);
            let all = admitted.lock().unwrap();
            for (key, &limit) in limits.iter().enumerate() {
                let curr = all.get(&(key, window)).copied().unwrap_or(0);
                let prev = window
                    .checked_sub(1)
                    .and_then(|w| all.get(&(key, w)).copied())
                    .unwrap_or(0);
                // prev·(1 − f) + curr ≤ limit, in integer nanoseconds.
                let sliding =
                    u128::from(prev) * u128::from(len - into) + u128::from(curr) * u128::from(len);
                if sliding > u128::from(limit) * u128::from(len) && over.is_none() {
                    over = Some(format!(
                        "seed {seed}, round {round}, key {key}: {prev} before and {curr} now \
                         at {into} ns into the window, over {limit}"
                    ));
                }
            }
            drop(all);
            let step = match rng.gen_range(0..4) {
                0 => Duration::from_nanos(rng.gen_range(1..len / 10)),
                1 => Duration::from_nanos(rng.gen_range(len / 10..len)),
                2 => INTERVAL,
                _ => INTERVAL * rng.gen_range(2..5),
            };
            clock.advance(step);
        }
    });
    assert_eq!(over, None);
}

/// Requests racing a clock that another thread moves, over window boundaries among others:
/// a request that read the time before a boundary may reach the exact stage after it, and
/// promote its key there while requests that read the newer time were admitted by the sketch
/// alone. At every instant some admissions were made at (their clock read the same before
/// and after them), the key's true sliding count at that instant, of every admission
/// finished by then, is within its limit. Limiters whose promoted keys take leases and whose
/// keys are judged under the lock, at a promotion threshold at the limit (the key is promoted
/// and demoted again and again) and at the default. Before the promotion counted from the
/// window the clock was in, a review's run of this kind found up to 199 units admitted in a
/// window of limit 100.
#[test]
fn requests_racing_a_moving_clock_never_take_a_key_past_its_rate_limit() {
    for seed in 0..32u64 {
        racing_the_clock(seed);
    }
}

fn racing_the_clock(seed: u64) {
    const LIMIT: u32 = 100;
    let len: u64 = 10_000_000;
    let clock = ManualClock::new();
    let builder = Limiter::builder()
        .max_rate(LIMIT, Duration::from_nanos(len))
        .exact_capacity(16)
        .clock(&clock);
    let builder = if seed % 2 == 0 {
        builder.max_inflight(Limits::MAX_LIMIT)
    } else {
        builder
    };
    let builder = if seed % 4 < 2 {
        builder.promotion_threshold(1.0)
    } else {
        builder
    };
    let limiter: Limiter<String> = builder.build().unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    // (time read before, time read after, cost) of each admission.
    let log: Mutex<Vec<(u64, u64, u64)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let (clock, done) = (&clock, &done);
        scope.spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let step = match rng.gen_range(0..4) {
                    0 => len,
                    1 => rng.gen_range(1..=len / 50),
                    2 => rng.gen_range(1..3 * len),
                    _ => rng.gen_range(1..=1_000),
                };
                clock.advance(Duration::from_nanos(step));
                std::thread::yield_now();
            }
        });
        let threads: Vec<_> = (0..3u64)
            .map(|thread| {
                let (limiter, log, clock) = (&limiter, &log, clock);
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 7 + thread);
                    let mut mine = Vec::new();
                    for _ in 0..30_000 {
                        let cost = match rng.gen_range(0..10) {
                            0..=7 => 1,
                            8 => rng.gen_range(2..=10),
                            _ => rng.gen_range(0..=LIMIT + 1),
                        };
                        let before = clock.now().as_nanos() as u64;
                        let admitted = limiter.with_cost(cost).try_acquire("origin").is_ok();
                        let after = clock.now().as_nanos() as u64;
                        if admitted && cost > 0 {
                            mine.push((before, after, u64::from(cost)));
                        }
                    }
                    log.lock().unwrap().extend(mine);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let log = log.into_inner().unwrap();
    let mut instants: Vec<u64> = log.iter().filter(|a| a.0 == a.1).map(|a| a.0).collect();
    instants.sort_unstable();
    instants.dedup();
    // By window (of the time read before: an admission whose clock moved during it is
    // weighed at most as much as it counts), in the order they finished.
    let mut by_window: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for &(before, after, cost) in &log {
        by_window
            .entry(before / len)
            .or_default()
            .push((after, cost));
    }
    let finished_by = |window: u64, t: u64| -> u64 {
        by_window.get(&window).map_or(0, |admissions| {
            admissions
                .iter()
                .filter(|(after, _)| *after <= t)
                .map(|(_, cost)| cost)
                .sum()
        })
    };
    for t in instants {
        let (window, into) = (t / len, t % len);
        let curr = finished_by(window, t);
        let prev = window.checked_sub(1).map_or(0, |w| finished_by(w, t));
        // prev·(1 − f) + curr ≤ limit, in integer nanoseconds.
        let sliding =
            u128::from(prev) * u128::from(len - into) + u128::from(curr) * u128::from(len);
        assert!(
            sliding <= u128::from(LIMIT) * u128::from(len),
            "seed {seed}: at {t} ns ({into} into window {window}), {prev} before and {curr} now"
        );
    }
}

/// Requests of one key under two plans race: one plan with the largest rate limit, the
/// defaults' limit of 50 for the others (of costs 1 and 2, which take turns replacing each
/// other's over-limit deadline, so that both keep reaching the key's lane). A decision under
/// the lock for the first plan grants a lease sized by its limit; a request of the defaults
/// never takes it. The clock stays in one window: a request of the defaults is admitted only
/// while the units admitted before its call began, its own added, are within 50. Before, a
/// request that had checked the lane's limits before reading its word took the other plan's
/// lease: a review found one admitted as the 59,092nd unit of the window.
#[test]
fn a_request_never_takes_a_lease_granted_under_another_plans_limit() {
    use std::sync::atomic::{AtomicU64, Ordering};
    for round in 0..100u64 {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, 50);
        let admitted = AtomicU64::new(0);
        let over: Mutex<Option<String>> = Mutex::new(None);
        std::thread::scope(|scope| {
            let (limiter, admitted) = (&limiter, &admitted);
            scope.spawn(move || {
                let largest = limiter.with_limits(Limits::new().max_rate(Limits::MAX_LIMIT));
                for _ in 0..6_000 {
                    if largest.try_acquire("origin").is_ok() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
            for thread in 0..2u64 {
                let over = &over;
                scope.spawn(move || {
                    for n in 0..6_000u64 {
                        let cost = 1 + (n + thread) % 2;
                        let before = admitted.load(Ordering::SeqCst);
                        if limiter.with_cost(cost as u32).try_acquire("origin").is_ok() {
                            admitted.fetch_add(cost, Ordering::SeqCst);
                            if before + cost > 50 {
                                over.lock().unwrap().get_or_insert(format!(
                                    "round {round}: {cost} admitted under 50 after {before}"
                                ));
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(over.into_inner().unwrap(), None);
    }
}
