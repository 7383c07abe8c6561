#![cfg(not(floodgate_loom))]
//! In-flight limits learnt from latency, on the family of origin models
//! (`floodgate_example_support::capacity_sim`): members drawn from seeds the law's constants
//! were not chosen on (they were chosen on seeds 1-24), each a set of origins of one shape
//! with a fault (slower, servers lost, a hang behind a timeout), and the model it was first
//! tuned on. Simulated time on a `ManualClock`: nothing sleeps, and every run is the same.

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{AdaptiveInflight, ConfigError, InflightLimit, Limiter, Outcome, Reason};
use floodgate_example_support::capacity_sim::{run_with, Fault, Member, Policy, Report};
use proptest::prelude::*;

/// A run of `member`, its limiter's hash keys fixed by the seed: every run of the test is
/// the same (with random keys, which keys share counters varies, and with it a figure or two).
fn on(member: &Member, policy: Policy) -> Report {
    run_with(member, policy, |builder| builder.hash_seed(member.seed))
}

fn learnt(member: &Member) -> Report {
    on(member, Policy::Adaptive(AdaptiveInflight::new()))
}

/// Members of the family the constants were not chosen on, quick to simulate: every fault
/// kind, one to 110 servers, service times of 1.3 ms to 330 ms, one of them 400 origins at
/// once. (Seeds 101-124 are the example's table; these are the ones whose runs take under a
/// second in the test profile.)
const JUDGED: [u64; 9] = [101, 106, 107, 108, 111, 114, 117, 118, 121];

/// No healthy origin is refused on any member: not the other origins, not the faulty ones
/// before their fault, whichever origins share sketch counters.
#[test]
fn no_healthy_origin_is_refused_on_members_it_was_not_tuned_on() {
    for seed in JUDGED.into_iter().chain([104]) {
        let member = Member::draw(seed);
        let r = learnt(&member);
        assert_eq!(
            r.refused_healthy,
            0,
            "seed {seed}, {}: {}",
            member.describe(),
            r.summary()
        );
    }
}

/// A faulty origin is held: a slower one or one that lost servers near its capacity (goodput
/// 0.9 or more) with a 99th percentile under the static ceiling's, a hung one to a few
/// requests in flight; and within 2 s of its recovery it is no longer refused.
#[test]
fn a_faulty_origin_is_held_and_let_go_on_members_it_was_not_tuned_on() {
    // Not 101: 1 of 4 servers of 330 ms left, its last refusal 2.8 s after the recovery.
    for seed in JUDGED.into_iter().filter(|&s| s != 101) {
        let member = Member::draw(seed);
        let (r, ceiling) = (learnt(&member), on(&member, Policy::Static));
        let figures = format!("seed {seed}, {}: {}", member.describe(), r.summary());
        assert!(
            r.refused_faulty > 0,
            "its overloaded callers are refused: {figures}"
        );
        match member.fault {
            Fault::Hang { .. } => assert!(
                r.inflight_share <= (4.0 / f64::from(member.ceiling)).max(0.1),
                "in flight: {figures}"
            ),
            _ => {
                assert!(r.goodput >= 0.9, "goodput: {figures}");
                assert!(
                    r.p99 < 0.8 * ceiling.p99,
                    "p99 against {}: {figures}",
                    ceiling.p99
                );
            }
        }
        assert_eq!(r.refused_after_recovery, 0, "recovery: {figures}");
    }
}

/// The goals in full (goodput ≥ 0.9, 99th percentile within twice the service time's own, no
/// healthy refusal, none from 2 s after the recovery) on the members that meet them, so that
/// a change that loses one fails here. The example's table says which members do not, and
/// why.
#[test]
fn the_goals_hold_in_full_on_these_members() {
    for seed in [105, 106, 107, 109, 111, 114, 116, 117, 118, 124] {
        let member = Member::draw(seed);
        let r = learnt(&member);
        assert!(
            r.meets_goals(&member),
            "seed {seed}, {}: {}",
            member.describe(),
            r.summary()
        );
    }
}

/// The model the law was first tuned on (10 servers of 10 ms, 10× slower): held at its
/// capacity with three fifths of the static ceiling's 99th percentile or less, nothing healthy refused,
/// nothing refused after it recovers. Its 99th percentile (about 4× the service time's own)
/// misses the goal of 2×: its healthy concurrency (5) is under the learning threshold (12 of
/// a ceiling of 100), so the learner starts when the queue is already there, and the first
/// 2 s after the slowdown, judged, go to finding the no-load latency.
#[test]
fn the_model_first_tuned_on_is_held_with_a_shorter_tail_than_the_ceilings() {
    let tuned = Member::tuned();
    let (r, ceiling) = (learnt(&tuned), on(&tuned, Policy::Static));
    let figures = r.summary();
    assert!(r.goodput >= 0.9, "{figures}");
    assert!(
        r.p99 <= 0.6 * ceiling.p99,
        "{figures} against {}",
        ceiling.summary()
    );
    assert_eq!(r.refused_healthy + r.refused_after_recovery, 0, "{figures}");
}

/// A key whose in-flight sketch counters are shared with keys holding many requests reads a
/// high estimate with none of its own in flight: it is not held by a learner for it. Under the
/// law before, it started learning at the estimate and its first round cut the limit to a
/// quarter of that: the same run refused it 29,973 times, at a limit of 127.
#[test]
fn a_key_next_to_busy_keys_in_the_sketch_is_not_held_for_their_requests() {
    let clock = ManualClock::new();
    let limiter: Limiter<u64> = Limiter::builder()
        .max_inflight(200)
        .adaptive_inflight(AdaptiveInflight::new())
        .peak_rate(1_000)
        .hash_seed(7)
        .clock(&clock)
        .build()
        .unwrap();
    // 8,000 keys holding 20 each: with the smallest sketch, every counter carries over a
    // hundred of others' requests, past the key's old promotion threshold of 100.
    let busy: Vec<_> = (1_000..9_000u64)
        .flat_map(|key| (0..20).map(move |_| key))
        .filter_map(|key| limiter.try_acquire_owned(&key).ok())
        .collect();
    assert!(busy.len() > 100_000);
    // A fresh key keeps 30 in flight, each taking 5 ms, for 5 s.
    let mut mine = std::collections::VecDeque::new();
    for _ in 0..5_000 {
        clock.advance(Duration::from_millis(1));
        while mine.len() >= 30 {
            let _done: floodgate::OwnedPermit<u64> = mine.pop_front().unwrap();
        }
        for _ in 0..6 {
            match limiter.try_acquire_owned(&1) {
                Ok(permit) => mine.push_back(permit),
                Err(refused) => panic!("the fresh key was refused: {refused:?}"),
            }
            if mine.len() >= 30 {
                break;
            }
        }
    }
    assert_eq!(limiter.inflight_limit(&1), Some(200));
}

/// What a key learnt outlives a pause of a few seconds (its callers' next burst meets the
/// learnt limit, not the ceiling), and is forgotten after `forget_after` without a request.
#[test]
fn a_learnt_limit_outlives_a_pause_and_is_forgotten_after_forget_after() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(40)
        .adaptive_inflight(AdaptiveInflight::new().forget_after(Duration::from_secs(10)))
        .clock(&clock)
        .build()
        .unwrap();
    // Two servers of 10 ms (latency 10 ms × in flight ÷ 2), callers asking for more than it
    // serves: the limit comes down from 40.
    let mut held: std::collections::VecDeque<(u64, floodgate::OwnedPermit<String>)> =
        Default::default();
    let mut now = 0u64;
    let mut drive = |limiter: &Limiter<String>, ms: u64| {
        for _ in 0..ms {
            clock.advance(Duration::from_millis(1));
            now += 1;
            let latency = 5 * held.len().max(2) as u64;
            while held.front().is_some_and(|(at, _)| now - at >= latency) {
                held.pop_front();
            }
            while let Ok(permit) = limiter.try_acquire_owned("origin") {
                held.push_back((now, permit));
                if held.len() >= 40 {
                    break;
                }
            }
        }
        held.clear();
    };
    drive(&limiter, 5_000);
    let learnt = limiter.inflight_limit("origin").unwrap();
    assert!(learnt < 20, "learnt {learnt} for two servers");
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        limiter.inflight_limit("origin"),
        Some(learnt),
        "kept over a 5 s pause"
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        limiter.inflight_limit("origin"),
        Some(40),
        "forgotten after 10 s more"
    );
}

/// `learn_from` and `forget_after` are checked at build, with the builder's error.
#[test]
fn learn_from_and_forget_after_out_of_range_are_refused_at_build() {
    let build = |config: AdaptiveInflight| {
        Limiter::<String>::builder()
            .max_inflight(100)
            .adaptive_inflight(config)
            .build()
            .map(|_| ())
    };
    for share in [0.0, -1.0, 1.5, f64::NAN, f64::INFINITY] {
        let r = build(AdaptiveInflight::new().learn_from(share));
        assert!(
            matches!(r, Err(ConfigError::InvalidAdaptive(_))),
            "{share}: {r:?}"
        );
    }
    for idle in [
        Duration::ZERO,
        Duration::from_millis(99),
        Duration::from_secs(3601),
        Duration::MAX,
    ] {
        let r = build(AdaptiveInflight::new().forget_after(idle));
        assert!(
            matches!(r, Err(ConfigError::InvalidAdaptive(_))),
            "{idle:?}: {r:?}"
        );
    }
    assert!(build(
        AdaptiveInflight::new()
            .learn_from(1.0)
            .forget_after(Duration::from_secs(3600))
    )
    .is_ok());
}

/// A limiter of 20 in flight per key, learning, on a manual clock.
fn learning(clock: &ManualClock, config: AdaptiveInflight) -> Limiter<String> {
    Limiter::builder()
        .max_inflight(20)
        .adaptive_inflight(config)
        .clock(clock)
        .build()
        .unwrap()
}

/// Holds `n` permits of the key (its promotion threshold is 10), then completes and replaces
/// one a millisecond, `completions` times, each completion recorded as `outcome`, and ends
/// the rest the same way.
fn drive(
    limiter: &Limiter<String>,
    clock: &ManualClock,
    n: usize,
    completions: usize,
    outcome: Outcome,
) {
    let mut held: Vec<_> = (0..n)
        .map(|_| limiter.try_acquire_owned("origin").unwrap())
        .collect();
    for _ in 0..completions {
        clock.advance(Duration::from_millis(1));
        let mut permit = held.remove(0);
        permit.record(outcome);
        drop(permit);
        if let Ok(permit) = limiter.try_acquire_owned("origin") {
            held.push(permit);
        }
    }
    // The requests still in flight end as the others did (a permit dropped unrecorded is a
    // success, and the origin answering one admitted after the last overload gives the room
    // back).
    for mut permit in held {
        permit.record(outcome);
    }
}

/// A key that reached its learning threshold is judged by `max_inflight` while its latency
/// says nothing against it; rounds of overloads (a 5xx, a timeout) back its limit off by
/// half their share a round, and its refusals name the learnt limit.
#[test]
fn recorded_overloads_back_the_learnt_limit_off() {
    let clock = ManualClock::new();
    let limiter = learning(&clock, AdaptiveInflight::new());
    drive(&limiter, &clock, 9, 200, Outcome::Success);
    assert_eq!(
        limiter.inflight_limit("origin"),
        Some(20),
        "successes: the ceiling"
    );
    let clock = ManualClock::new();
    let limiter = learning(&clock, AdaptiveInflight::new());
    drive(&limiter, &clock, 10, 200, Outcome::Overload);
    let learnt = limiter.inflight_limit("origin").unwrap();
    assert!(
        learnt < 10,
        "10 in flight, every one an overload: backed off to {learnt}"
    );
    let held: Vec<_> = (0..learnt)
        .map(|_| limiter.try_acquire("origin").unwrap())
        .collect();
    let refused = limiter.try_acquire("origin").unwrap_err();
    assert_eq!((refused.reason, refused.limit), (Reason::Inflight, learnt));
    drop(held);
    let hitter = limiter
        .heavy_hitters()
        .into_iter()
        .find(|h| h.key == "origin");
    assert_eq!(
        hitter.and_then(|h| h.inflight_limit),
        Some(InflightLimit::Learnt {
            limit: learnt,
            ceiling: 20
        })
    );
}

/// Quick 5xx, a steady share of a key's requests (a broken route, or a client sending what
/// its origin refuses at once), say nothing of load: an origin at half its capacity, a third
/// of its requests answered 5xx in a millisecond, the rest in 10 ms, is never held under its
/// ceiling, and none of its requests is refused. (Every round with an overload cut the limit
/// by half its share: the same traffic held it at the floor, refusing a third of it.)
#[test]
fn quick_server_errors_do_not_hold_a_key() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(64)
        .adaptive_inflight(AdaptiveInflight::new())
        .clock(&clock)
        .build()
        .unwrap();
    // (completes at, the permit, whether it fails): 20 arrivals every 10 ms.
    let mut held = Vec::new();
    let mut refused = 0;
    let mut lowest = 64;
    for step in 0..1_000u64 {
        let now = step * 1_000_000;
        for i in 0..2u64 {
            let n = step * 2 + i;
            let fails = n % 3 == 0;
            match limiter.try_acquire_owned("origin") {
                Ok(permit) => held.push((
                    now + if fails { 1_000_000 } else { 10_000_000 },
                    permit,
                    fails,
                )),
                Err(_) => refused += 1,
            }
        }
        clock.advance(Duration::from_millis(1));
        let (done, rest): (Vec<_>, Vec<_>) = held
            .into_iter()
            .partition(|&(at, ..)| at <= now + 1_000_000);
        held = rest;
        for (_, mut permit, fails) in done {
            if fails {
                permit.record(Outcome::Overload);
            }
        }
        lowest = lowest.min(limiter.inflight_limit("origin").unwrap());
    }
    assert_eq!((refused, lowest), (0, 64));
}

/// The tower layer records a 5xx from the inner service as the origin's overload (without it,
/// completions at no latency would leave the limit where it started).
#[cfg(feature = "tower")]
#[test]
fn the_layer_records_a_server_error_as_an_overload() {
    use floodgate::layer::LimitLayer;
    use http::{Request, Response, StatusCode};
    use tower::{service_fn, Layer, ServiceExt};

    let clock = ManualClock::new();
    let limiter = learning(&clock, AdaptiveInflight::new());
    // 9 held outside the layer and one through it make the key learn at 10 in flight; the
    // layer's requests then complete one at a time.
    let held: Vec<_> = (0..9)
        .map(|_| limiter.try_acquire_owned("origin").unwrap())
        .collect();
    let service = LimitLayer::new(limiter.clone())
        .key_fn(|_: &Request<()>| "origin".to_owned())
        .layer(service_fn(|_: Request<()>| async {
            let mut response = Response::new(String::new());
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            Ok::<_, std::convert::Infallible>(response)
        }));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Every answer a 502 until the limit backed off under the 10 in flight: then the
        // layer's 503 names the learnt limit.
        for _ in 0..200 {
            clock.advance(Duration::from_millis(1));
            let response = service.clone().oneshot(Request::new(())).await.unwrap();
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                let refused = response.extensions().get::<floodgate::Rejected>().unwrap();
                assert_eq!(refused.reason, Reason::Inflight);
                assert!(refused.limit < 10, "{refused:?}");
                break;
            }
            assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
            drop(response);
        }
    });
    drop(held);
    let learnt = limiter.inflight_limit("origin").unwrap();
    assert!(learnt < 10, "backed off to {learnt}");
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Complete { index: usize, overload: bool },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Acquire),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(index, overload)| Op::Complete { index, overload }),
        2 => (1u64..50).prop_map(|ms| Op::Advance { ms }),
    ]
}

proptest! {
    /// Whatever the traffic and its latencies: the limit a key is judged by stays between the
    /// floor and the ceiling, and a request is admitted only if the key's requests in flight,
    /// itself included, stay within the limit it was judged by (read after the decision,
    /// which raises a stalled limit).
    #[test]
    fn the_learnt_limit_stays_in_its_bounds_and_is_never_exceeded(
        floor in 1u32..6,
        ops in proptest::collection::vec(op(), 1..600),
    ) {
        let clock = ManualClock::new();
        let config = AdaptiveInflight::new().floor(floor).probe_every(4);
        let limiter: Limiter<String> = Limiter::builder()
            .max_inflight(12)
            .adaptive_inflight(config)
            .clock(&clock)
            .build()
            .unwrap();
        let mut held = Vec::new();
        for op in ops {
            match op {
                Op::Acquire => {
                    let limit = limiter.inflight_limit("k").unwrap();
                    prop_assert!((floor..=12).contains(&limit), "limit {limit}");
                    if let Ok(permit) = limiter.try_acquire_owned("k") {
                        held.push(permit);
                        // The limit it was judged by: a stalled one is raised in the decision.
                        let limit = limiter.inflight_limit("k").unwrap();
                        prop_assert!(held.len() as u32 <= limit, "{} in flight over {limit}", held.len());
                    }
                }
                Op::Complete { index, overload } if !held.is_empty() => {
                    let mut permit = held.swap_remove(index % held.len());
                    if overload {
                        permit.record(Outcome::Overload);
                    }
                }
                Op::Complete { .. } => {}
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
            }
        }
    }
}

/// Requests that never end (streams, here admitted before the key learns, whose completions it
/// never sees) beside a flow of short ones: a learnt limit that no completion moves is let up
/// after a second, so the key is not held for good (the review's case: refused for the whole
/// 10 s, at a learnt limit of 2 with no short request in flight).
#[test]
fn requests_that_never_end_do_not_freeze_a_learning_key() {
    let clock = ManualClock::new();
    let limiter = learning(&clock, AdaptiveInflight::new());
    let _streams: Vec<_> = (0..3)
        .map(|_| limiter.try_acquire_owned("origin").unwrap())
        .collect();
    let mut short: std::collections::VecDeque<_> = (0..7)
        .map(|_| limiter.try_acquire_owned("origin").unwrap())
        .collect();
    let (mut in_a_row, mut worst) = (0u32, 0u32);
    for _ in 0..10_000 {
        clock.advance(Duration::from_millis(1));
        short.pop_front();
        match limiter.try_acquire_owned("origin") {
            Ok(permit) => {
                short.push_back(permit);
                in_a_row = 0;
            }
            Err(_) => {
                in_a_row += 1;
                worst = worst.max(in_a_row);
            }
        }
    }
    // A limit no completion moves is let up after a second (or 8 no-load latencies).
    assert!(
        worst <= 1_100,
        "refused {worst} ms in a row, limit {:?}, {} short in flight",
        limiter.inflight_limit("origin"),
        short.len()
    );
}

/// Every caller waits (`acquire`) and one request completes a millisecond: when the learnt
/// limit rises (a probe put back, a doubling, the learner done), the waiters are told of the
/// room, not only of the permit that came back.
#[test]
fn waiters_fill_a_learnt_limit_that_rose() {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    let clock = ManualClock::new();
    let limiter = learning(&clock, AdaptiveInflight::new());
    let waker = floodgate_test_support::waker::noop();
    let mut cx = Context::from_waker(&waker);
    let mut held = std::collections::VecDeque::new();
    while let Ok(permit) = limiter.try_acquire_owned("origin") {
        held.push_back(permit);
    }
    let mut waiters = Vec::new();
    let mut short_of_the_limit = 0;
    for _ in 0..3_000 {
        while waiters.len() < 5 {
            waiters.push(limiter.acquire("origin", Duration::from_secs(60)));
        }
        clock.advance(Duration::from_millis(1));
        held.pop_front();
        let mut i = 0;
        while i < waiters.len() {
            match Pin::new(&mut waiters[i]).poll(&mut cx) {
                Poll::Ready(Ok(permit)) => {
                    held.push_back(permit);
                    drop(waiters.swap_remove(i));
                }
                Poll::Ready(Err(rejected)) => panic!("{rejected}"),
                Poll::Pending => i += 1,
            }
        }
        let limit = limiter.inflight_limit("origin").unwrap() as usize;
        short_of_the_limit += usize::from(!waiters.is_empty() && held.len() < limit);
    }
    assert!(
        short_of_the_limit < 50,
        "{short_of_the_limit} of 3,000 ms with room under the limit while waiters were parked"
    );
}

/// A key's own `max_inflight` below the configured floor (`with_limits`, `set_limits`) holds:
/// the learnt limit is clamped to it, and nothing panics (a clamp of floor over ceiling did, in
/// a permit's drop).
#[test]
fn a_ceiling_below_the_floor_holds_and_nothing_panics() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(100)
        .adaptive_inflight(AdaptiveInflight::new().floor(2))
        .clock(&clock)
        .build()
        .unwrap();
    let one = limiter.with_limits(floodgate::Limits::new().max_inflight(1));
    for _ in 0..200 {
        let permit = one.try_acquire_owned("origin");
        assert!(permit.is_ok(), "one at a time fits a limit of 1");
        assert!(
            one.try_acquire_owned("origin").is_err(),
            "a second does not"
        );
        clock.advance(Duration::from_millis(1));
        drop(permit);
    }
}

/// `set_limits` checks a learnt in-flight limit against its new ceiling as the builder does: a
/// push without `max_inflight`, or with one under the floor, is refused, and the limits in force
/// stay.
#[test]
fn set_limits_refuses_a_ceiling_the_builder_would_refuse() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(100)
        .adaptive_inflight(AdaptiveInflight::new().floor(4))
        .build()
        .unwrap();
    let under = limiter.set_limits(floodgate::Limits::new().max_inflight(3));
    assert!(
        matches!(under, Err(floodgate::ConfigError::InvalidAdaptive(_))),
        "{under:?}"
    );
    let none = limiter.set_limits(floodgate::Limits::new().max_rate(10));
    assert!(
        matches!(none, Err(floodgate::ConfigError::InvalidAdaptive(_))),
        "{none:?}"
    );
    assert_eq!(limiter.limits(), floodgate::Limits::new().max_inflight(100));
    assert!(limiter
        .set_limits(floodgate::Limits::new().max_inflight(4))
        .is_ok());
}
