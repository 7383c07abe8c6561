//! Attacks on the sketch: collisions chosen against one instance do not carry over to another,
//! and counters driven to their limits saturate instead of wrapping.
#![cfg(not(floodgate_loom))]

use floodgate::{Estimator, Inflight};

const ROWS: usize = 2;
const COLUMNS: usize = 64;
const VICTIM: &str = "victim.example";

/// What an attacker who knows the crate but not an instance's hash keys can do: probe their
/// own instance (same size) until they hold `wanted` keys that share every one of the
/// victim's counters there.
fn colliding_keys(probe: &Estimator, wanted: usize) -> Vec<String> {
    let mut found = Vec::new();
    let mut candidate = 0u64;
    while found.len() < wanted {
        candidate += 1;
        let key = format!("attacker-{candidate}.example");
        let before = probe.get(VICTIM);
        probe.incr(&key, 1);
        if probe.get(VICTIM) > before {
            found.push(key.clone());
        }
        probe.decr(&key, 1);
        assert!(
            candidate < 100_000_000,
            "no collisions found: is hashing keyed at all?"
        );
    }
    found
}

#[test]
fn collisions_found_against_one_instance_do_not_carry_over_to_another() {
    const ATTACK_KEYS: usize = 20;
    const ATTACK_REPEATS: isize = 100;
    const BACKGROUND: u64 = 10_000;

    let attacker_copy = Estimator::new(ROWS, COLUMNS);
    let attack = colliding_keys(&attacker_copy, ATTACK_KEYS);

    // The same traffic into the attacker's copy and into the defended instance: the attack
    // keys, and background traffic of distinct keys.
    let defended = Estimator::new(ROWS, COLUMNS);
    for sketch in [&attacker_copy, &defended] {
        for key in &attack {
            sketch.incr(key, ATTACK_REPEATS);
        }
        for i in 0..BACKGROUND {
            sketch.incr(i, 1);
        }
    }
    let total = ATTACK_KEYS as f64 * ATTACK_REPEATS as f64 + BACKGROUND as f64;
    let bound = defended.epsilon() * total; // the victim's true count is 0

    let against_copy = attacker_copy.get(VICTIM) as f64;
    let against_defended = defended.get(VICTIM) as f64;
    assert!(
        against_copy >= (ATTACK_KEYS as isize * ATTACK_REPEATS) as f64,
        "the attack works where the hash keys are known: {against_copy}"
    );
    assert!(
        against_copy > bound,
        "the attack breaks the count-min bound on the attacker's copy ({against_copy} <= {bound})"
    );
    // With random hash keys each attack key shares a given counter of the victim's with
    // probability 1/64, and the background adds about 156 per counter; going over the bound
    // (about 510) needs four or more attack keys in both rows (probability below 1e-7).
    assert!(
        against_defended <= bound,
        "the victim's estimate {against_defended} exceeds the count-min bound {bound}"
    );
}

#[test]
fn inflight_counts_saturate_and_stay_saturated_under_extreme_values() {
    let inflight = Inflight::new();
    let (a, first) = inflight.incr("k", isize::MAX);
    assert_eq!(first, isize::MAX / 2);
    let (b, second) = inflight.incr("k", isize::MAX);
    assert_eq!(second, isize::MAX / 2, "saturated, not wrapped");
    let (c, third) = inflight.incr("k", 1);
    assert_eq!(third, isize::MAX / 2);
    drop(c);
    drop(b);
    // Saturation is sticky: the true count is unknown once saturated, so it is never lowered
    // to a value that could be below the truth.
    assert_eq!(inflight.get("k"), isize::MAX / 2);
    drop(a);
    assert!(inflight.get("k") >= 0);
    assert_eq!(
        inflight.get("other-key"),
        0,
        "other keys unaffected (2^-52 collision)"
    );
}
