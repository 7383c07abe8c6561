//! Shadow mode: a limiter (or one plan) in shadow decides and counts exactly as it would
//! enforcing, and admits what it would refuse with a permit that says so.
//!
//! Checked against an enforcing twin on the same traffic: request by request, the shadow
//! side's `shadow_rejection` is the enforcing side's rejection, and nothing else differs.

use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Limiter, LimiterBuilder, Limits, OwnedPermit, Reason, Rejected};
use proptest::prelude::*;

const INTERVAL: Duration = Duration::from_millis(100);
const KEYS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    /// A request for a key, its permit kept until a `Drop`.
    Acquire(u8),
    /// Drops the oldest kept permit, if any.
    Drop,
    /// Advances both clocks.
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS).prop_map(Op::Acquire),
        2 => Just(Op::Drop),
        1 => (1u16..150).prop_map(Op::Advance),
    ]
}

/// The twins' hash keys: both count the same keys in the same counters.
const SEED: u64 = 0x5eed;

/// Limits small enough to be reached, on a sketch wide enough that under [`SEED`] no two of
/// the keys share all their counters (checked by
/// `the_twins_keys_share_no_counters_under_their_seed`). A request refused from the
/// enforcing side's over-limit cache is not counted in its sketches, and one refused in
/// shadow is: a key sharing every counter with a refused one would read more on the shadow
/// side. With the seed fixed, whether that can happen is settled once, not per run.
fn builder(clock: &ManualClock) -> LimiterBuilder<String> {
    Limiter::builder()
        .max_inflight(3)
        .max_rate(5, INTERVAL)
        .sketch(2, 1 << 16)
        .hash_seed(SEED)
        .clock(clock)
}

#[test]
fn the_twins_keys_share_no_counters_under_their_seed() {
    let clock = ManualClock::new();
    let limiter = builder(&clock).build().unwrap();
    for k in 0..KEYS {
        let permit = limiter.try_acquire_owned(&format!("key-{k}")).unwrap();
        for other in (0..KEYS).filter(|&o| o != k) {
            let estimate = limiter.estimate(&format!("key-{other}"));
            assert_eq!(
                estimate.inflight,
                Some(0),
                "key-{k} and key-{other} collide"
            );
            // Each key before `k` sent its own one request in this window.
            let own = if other < k { 1.0 } else { 0.0 };
            assert_eq!(estimate.rate, Some(own), "key-{k} and key-{other} collide");
        }
        drop(permit);
    }
}

/// The plan key `k` is judged against when plans are in play: small for some keys, none for
/// the others (the defaults).
fn plan(key: u8) -> Option<Limits> {
    (key % 2 == 0).then(|| Limits::new().max_inflight(2).max_rate(3))
}

/// Whether the enforcing side's rejection `enforced` is the one a shadow admission `shadow`
/// stands for: alike in all, the wait too, which the enforcing side may answer from its
/// over-limit cache (exact to the nanosecond for these windows) where a shadow threshold keeps
/// no deadline there and decides each of its refusals anew.
fn alike(enforced: &Rejected, shadow: &Rejected) -> bool {
    enforced == shadow
}

/// Runs `ops` through an enforcing limiter and a shadow one (shadow from the builder, or
/// from each plan) and checks that they decide alike.
fn run_twins(ops: &[Op], shadow_plans: bool) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let enforcing = builder(&clock).build().unwrap();
    let shadow = builder(&clock).shadow(!shadow_plans).build().unwrap();
    let mut held: Vec<(Option<OwnedPermit<String>>, OwnedPermit<String>)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Acquire(k) => {
                let key = format!("key-{k}");
                let limits = if shadow_plans { plan(*k) } else { None };
                let (enforced, shadowed) = match limits {
                    Some(l) => (
                        enforcing.with_limits(l).try_acquire_owned(&key),
                        shadow.with_limits(l.shadow(true)).try_acquire_owned(&key),
                    ),
                    None => (
                        enforcing.try_acquire_owned(&key),
                        shadow.try_acquire_owned(&key),
                    ),
                };
                // Keys without a plan are judged by the defaults, in shadow only when the
                // whole limiter is: with shadow plans, those decide as the enforcing side.
                let shadowed = match shadowed {
                    Ok(permit) => permit,
                    Err(r) if shadow_plans && limits.is_none() => {
                        prop_assert_eq!(enforced.as_ref().err(), Some(&r), "op {}", i);
                        continue;
                    }
                    Err(r) => {
                        return Err(TestCaseError::fail(format!(
                            "op {i}: refused in shadow: {r}"
                        )))
                    }
                };
                match (&enforced, shadowed.shadow_rejection()) {
                    (Ok(_), None) => {}
                    (Err(r), Some(s)) => prop_assert!(alike(r, s), "op {i} {op:?}: {r:?} {s:?}"),
                    (e, s) => {
                        return Err(TestCaseError::fail(format!(
                            "op {i} {op:?}: enforcing {e:?}, shadow {s:?}"
                        )))
                    }
                }
                held.push((enforced.ok(), shadowed));
            }
            Op::Drop => {
                if !held.is_empty() {
                    drop(held.remove(0));
                }
            }
            Op::Advance(ms) => clock.advance(Duration::from_millis(u64::from(*ms))),
        }
        for k in 0..KEYS {
            let key = format!("key-{k}");
            prop_assert_eq!(
                enforcing.estimate(&key),
                shadow.estimate(&key),
                "op {}: {} counted differently",
                i,
                key
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_shadow_limiter_decides_and_counts_as_it_would_enforcing(ops in prop::collection::vec(op(), 1..120)) {
        run_twins(&ops, false)?;
    }

    #[test]
    fn a_plan_in_shadow_decides_and_counts_as_it_would_enforcing(ops in prop::collection::vec(op(), 1..120)) {
        run_twins(&ops, true)?;
    }
}

#[test]
fn limits_the_limiter_cannot_judge_are_admitted_in_shadow_with_the_reason() {
    let limiter: Limiter<String> = Limiter::builder().max_rate(10, INTERVAL).build().unwrap();
    let wrong = Limits::new().max_inflight(5);
    assert_eq!(
        limiter
            .with_limits(wrong)
            .try_acquire("k")
            .unwrap_err()
            .reason,
        Reason::InflightNotCounted
    );
    let permit = limiter
        .with_limits(wrong.shadow(true))
        .try_acquire("k")
        .unwrap();
    assert_eq!(
        permit.shadow_rejection().map(|r| r.reason),
        Some(Reason::InflightNotCounted)
    );
    let suspended = Limits::new().max_rate(0).shadow(true);
    let permit = limiter.with_limits(suspended).try_acquire("k").unwrap();
    assert_eq!(permit.shadow_rejection().map(|r| r.limit), Some(0));
}

#[tokio::test]
async fn waiting_in_shadow_admits_at_once_what_it_would_have_made_wait() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(1)
        .shadow(true)
        .clock(&clock)
        .build()
        .unwrap();
    let _first = limiter.try_acquire_owned("k").unwrap();
    let second = limiter
        .acquire("k", Duration::from_secs(10))
        .await
        .expect("admitted in shadow, without waiting");
    assert_eq!(
        second.shadow_rejection().map(|r| r.reason),
        Some(Reason::Inflight)
    );
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn set_limits_turns_a_shadow_limiter_to_enforcing_and_back() {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(1)
        .shadow(true)
        .build()
        .unwrap();
    assert!(limiter.limits().is_shadow());
    let _first = limiter.try_acquire("k").unwrap();
    let second = limiter.try_acquire("k").expect("admitted in shadow");
    assert!(second.shadow_rejection().is_some());

    limiter.set_limits(Limits::new().max_inflight(1)).unwrap();
    assert!(!limiter.limits().is_shadow());
    let refused = limiter.try_acquire("k").unwrap_err();
    assert_eq!(refused.reason, Reason::Inflight, "enforcing now");

    limiter
        .set_limits(Limits::new().max_inflight(1).shadow(true))
        .unwrap();
    let third = limiter.try_acquire("k").expect("in shadow again");
    assert_eq!(
        third.shadow_rejection().map(|r| r.reason),
        Some(Reason::Inflight)
    );
}

/// A flood refused for real leaves its deadline in the over-limit cache; a decision in
/// shadow under the same limit must still admit (in shadow), never be refused by it.
#[test]
fn a_shadow_decision_is_never_refused_by_an_enforcing_decisions_deadline() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(5, INTERVAL)
        .clock(&clock)
        .build()
        .unwrap();
    let plan = Limits::new().max_rate(5);
    let refused = (0..50)
        .filter(|_| limiter.with_limits(plan).try_acquire("k").is_err())
        .count();
    assert!(refused >= 40, "the flood is refused: {refused}");

    let trial = limiter.with_limits(plan.shadow(true));
    let permit = trial.try_acquire("k").expect("a plan in shadow admits");
    assert_eq!(
        permit.shadow_rejection().map(|r| r.reason),
        Some(Reason::Rate)
    );

    // The same for the whole limiter put in shadow while the deadline is held.
    limiter
        .set_limits(Limits::new().max_rate(5).shadow(true))
        .unwrap();
    let permit = limiter
        .try_acquire("k")
        .expect("the limiter in shadow admits");
    assert!(permit.shadow_rejection().is_some());
    let permit = limiter
        .with_limits(plan)
        .try_acquire("k")
        .expect("and so do its plans");
    assert!(permit.shadow_rejection().is_some());
}
