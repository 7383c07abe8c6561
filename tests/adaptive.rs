#![cfg(not(floodgate_loom))]
//! In-flight limits learnt from latency, on a model of real origins
//! (`floodgate_example_support::capacity_sim`): 20 healthy origins of 10 servers of 10 ms,
//! sent half their capacity, and one that slows down 10× for 15 s and recovers. The learnt
//! limit is set beside a static limit too high (the ceiling it learns under) and one too low.
//! Simulated time on a `ManualClock`: nothing sleeps, and every run is the same.

use std::time::Duration;

use floodgate::AdaptiveInflight;
use floodgate_example_support::capacity_sim::{run, Policy, Report, Scenario};

const CEILING: u32 = 100;

fn adaptive(scenario: &Scenario) -> Report {
    let config = AdaptiveInflight::new();
    run(
        scenario,
        Policy::Adaptive {
            ceiling: CEILING,
            config,
        },
    )
}

/// The slow origin is held near what it can serve: 90% of its capacity served or more, its
/// 99th percentile within twice its service time once the limit has settled (two seconds
/// after it slowed down), no healthy origin refused, and no refusal a second after it recovered.
#[test]
fn a_slow_origin_is_held_near_its_capacity_and_the_others_are_untouched() {
    for seed in [7, 8, 9, 10, 11] {
        let r = adaptive(&Scenario {
            seed,
            ..Scenario::default()
        });
        let figures = format!("seed {seed}: {r:?}");
        assert!(r.goodput >= 0.90, "goodput: {figures}");
        assert!(r.p99 <= 2.0, "p99: {figures}");
        assert!(
            r.refused_slow > 0,
            "its overloaded callers are refused: {figures}"
        );
        assert_eq!(r.refused_healthy, 0, "healthy origins: {figures}");
        assert_eq!(r.refused_healthy_times, 0, "while it is healthy: {figures}");
        assert!(
            r.recovered_after < Duration::from_secs(1),
            "recovery: {figures}"
        );
    }
}

/// The static limits it is set beside: the ceiling serves the slow origin fully but lets its
/// queue grow to ten service times; a limit low enough to bound the queue wastes most of its
/// capacity and refuses the healthy origins too.
#[test]
fn a_static_limit_is_either_too_high_for_latency_or_too_low_for_goodput() {
    let scenario = Scenario::default();
    let high = run(&scenario, Policy::Static(CEILING));
    assert!(high.p99 > 5.0, "{high:?}");
    let low = run(&scenario, Policy::Static(4));
    assert!(low.goodput < 0.5, "{low:?}");
    assert!(low.refused_healthy > 0, "{low:?}");
    let learnt = adaptive(&scenario);
    assert!(learnt.p99 < high.p99 / 2.0 && learnt.goodput > 2.0 * low.goodput);
}

#[test]
#[ignore]
fn trace_seed() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let r = adaptive(&Scenario {
        seed,
        ..Scenario::default()
    });
    println!("goodput {:.3} p99 {:.2}", r.goodput, r.p99);
    for s in r.samples.iter().filter(|s| (9.9..26.0).contains(&s.at)) {
        print!(
            "{:.1}:{}/{}/{:.0} ",
            s.at, s.limit, s.inflight, s.latency_ms
        );
    }
    println!();
}
