//! The fleet (feature `redis`): three limiters, one redis-server of the test's own on a free
//! loopback port, the real clock and paced traffic (tests/common/fleet.rs), once the fleet has
//! formed. A key that floods every node, evenly or mostly through one, is held to about its
//! limit fleet-wide; a key under the limit fleet-wide, spread evenly, sent mostly through one
//! node, or through one node alone, is never refused.
//!
//! Run with `--nocapture` to see each window's figures.
//!
//! A key new to a formed fleet, flooded through every node, on a manual clock (no window to
//! wait for): its first window is held within the bound too.
//!
//! And a fleet's configuration over the whole range of its durations and counts: built, it
//! works; refused, it says what is allowed (no redis-server needed).
//!
//! Skips with a printed reason without a `redis-server` binary (fails instead under
//! `FLOODGATE_REQUIRE_REDIS=1`, as CI sets).

#![cfg(feature = "redis")]

mod common;

use std::ops::{Range, RangeInclusive};
use std::thread;
use std::time::{Duration, Instant};

use common::fleet::{sleep_until_window, unix_window, Flow, Tally, Traffic, WINDOW};
use common::ticker::{poll, DEADLINE};
use floodgate::clock::ManualClock;
use floodgate::fleet::{FleetConfig, FleetStatus};
use floodgate::{ConfigError, Limiter};
use floodgate_test_support::redis_server::RedisServer;
use proptest::prelude::*;

const NODES: usize = 3;
const LIMIT: u32 = 300;
/// What a flooded key may be admitted fleet-wide in a full window, as a fraction of its limit.
const FLOOD_BOUND: RangeInclusive<f64> = 0.6..=1.15;
/// 0.8 × the limit, per second: a key under the limit fleet-wide.
const UNDER: u32 = LIMIT * 8 / 10;

fn node(redis: &RedisServer, prefix: &str) -> Limiter<String> {
    Limiter::builder()
        .max_rate(LIMIT, WINDOW)
        .fleet(
            FleetConfig::new(redis.url())
                .prefix(prefix)
                .sync_interval(Duration::from_millis(100))
                // Generous: the test's threads share two cores with the other tests.
                .timeout(Duration::from_secs(1)),
        )
        .build()
        .unwrap()
}

/// Three nodes on a redis-server of their own, once every node has synced and sees the whole
/// fleet (a running fleet's state; a node that has not synced yet knows of no other); `None`
/// without a `redis-server` (the test is skipped).
fn fleet(prefix: &str) -> Option<(RedisServer, Vec<Limiter<String>>)> {
    let redis = RedisServer::start()?;
    let nodes: Vec<_> = (0..NODES).map(|_| node(&redis, prefix)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !statuses(&nodes)
        .iter()
        .all(|s| s.syncs > 0 && s.nodes == NODES)
    {
        assert!(
            Instant::now() < deadline,
            "the fleet never formed: {:#?}",
            statuses(&nodes)
        );
        thread::sleep(Duration::from_millis(10));
    }
    Some((redis, nodes))
}

fn statuses(nodes: &[Limiter<String>]) -> Vec<FleetStatus> {
    nodes.iter().map(|n| n.fleet_status().unwrap()).collect()
}

/// What a run of traffic met, and the nodes' statuses at its end.
struct Run {
    tally: Tally,
    /// The Unix windows the traffic ran through in full.
    full: Range<u64>,
    statuses: Vec<FleetStatus>,
}

/// Runs `flows` through `nodes` until `windows` full windows have passed after the one the
/// traffic starts in.
fn run(nodes: &[Limiter<String>], flows: &[Flow], windows: u64) -> Run {
    let traffic = Traffic::start(nodes, flows);
    sleep_until_window(unix_window() + windows + 1);
    let end = unix_window();
    let tally = traffic.stop();
    let statuses = statuses(nodes);
    assert_eq!(
        tally.errors(),
        0,
        "errors on the request path: {statuses:?}"
    );
    let first = *tally.windows().start();
    Run {
        tally,
        full: first + 1..end,
        statuses,
    }
}

/// Floods one key as `flows` say for five full windows, prints what the fleet admitted in
/// each full window but the first, and checks it is within [`FLOOD_BOUND`] × the limit.
fn assert_flood_held_to_the_limit(nodes: &[Limiter<String>], flows: &[Flow]) {
    let key = &flows[0].key;
    let Run {
        tally,
        full,
        statuses,
    } = run(nodes, flows, 5);
    for s in &statuses {
        assert!(s.connected && s.nodes == NODES, "{statuses:?}");
    }
    // The first full window carries the key's first (partial) one: each node decided it alone
    // until it had promoted the key and synced it.
    let checked = full.start + 1..full.end;
    let fleet = tally.per_window(key, None, checked.clone());
    assert!(fleet.len() >= 2, "{fleet:?}");
    let ratios: Vec<_> = fleet
        .iter()
        .map(|&(_, n)| format!("{:.2}", n as f64 / LIMIT as f64))
        .collect();
    let per_node: Vec<_> = (0..NODES)
        .map(|i| {
            let counts: Vec<_> = tally
                .per_window(key, Some(i), checked.clone())
                .iter()
                .map(|&(_, n)| n.to_string())
                .collect();
            format!("node {i}: {}", counts.join(" "))
        })
        .collect();
    eprintln!(
        "{key}: full windows, admitted fleet-wide ÷ the limit: {} (admitted per node, {})",
        ratios.join(" "),
        per_node.join("; ")
    );
    for &(window, n) in &fleet {
        let ratio = n as f64 / LIMIT as f64;
        assert!(
            FLOOD_BOUND.contains(&ratio),
            "{key}, window {window}: {n} admitted fleet-wide, {ratio:.2} × the limit: \
             {fleet:?} ({}), {statuses:?}",
            per_node.join("; ")
        );
    }
}

/// Runs `flows` (keys under the limit fleet-wide) for `windows` full windows, prints each
/// flow's refusals per window, and checks that nothing was refused.
fn assert_never_refused(nodes: &[Limiter<String>], flows: &[Flow], windows: u64) {
    let Run {
        tally, statuses, ..
    } = run(nodes, flows, windows);
    let lines: Vec<_> = flows
        .iter()
        .map(|flow| {
            let per_window: Vec<_> = tally
                .windows()
                .map(|w| {
                    let (decided, admitted) = tally.counts(&flow.key, Some(flow.node), w);
                    decided - admitted
                })
                .collect();
            (flow, per_window)
        })
        .collect();
    let report: Vec<_> = lines
        .iter()
        .map(|(flow, refused)| {
            format!(
                "{} through node {} at {}/s: refused per window {refused:?}",
                flow.key, flow.node, flow.per_second
            )
        })
        .collect();
    eprintln!("{}", report.join("\n"));
    let refused: u64 = lines.iter().flat_map(|(_, r)| r).sum();
    assert_eq!(refused, 0, "{}\n{statuses:?}", report.join("\n"));
}

#[test]
fn a_key_flooding_every_node_is_held_to_about_its_limit_fleet_wide() {
    let Some((_redis, nodes)) = fleet("flood") else {
        return;
    };
    // Each node alone would admit the limit per window: 3× the limit without the fleet.
    let flows: Vec<_> = (0..NODES)
        .map(|i| Flow::new(i, "flooded.example", 1_000))
        .collect();
    assert_flood_held_to_the_limit(&nodes, &flows);
}

#[test]
fn a_key_flooding_one_node_far_more_than_the_others_is_held_to_about_its_limit() {
    let Some((_redis, nodes)) = fleet("skewed") else {
        return;
    };
    // Without the fleet: the limit through node 0, and 200 through each of the others, 2.3×
    // the limit.
    let key = "skewed.example";
    let flows = [
        Flow::new(0, key, 2_000),
        Flow::new(1, key, 200),
        Flow::new(2, key, 200),
    ];
    assert_flood_held_to_the_limit(&nodes, &flows);
}

#[test]
fn a_key_under_the_limit_fleet_wide_is_never_refused() {
    let Some((_redis, nodes)) = fleet("steady") else {
        return;
    };
    // 0.8 × the limit in all, spread over the three nodes.
    let flows: Vec<_> = (0..NODES)
        .map(|i| Flow::new(i, "steady.example", UNDER / NODES as u32))
        .collect();
    assert_never_refused(&nodes, &flows, 3);
    // And 0.8 × the limit through one node alone, while the others see none of it.
    assert_never_refused(&nodes, &[Flow::new(0, "lonely.example", UNDER)], 3);
}

#[test]
fn a_key_under_the_limit_fleet_wide_sent_unevenly_is_never_refused() {
    let Some((_redis, nodes)) = fleet("uneven") else {
        return;
    };
    // 0.8 × the limit in all, each key more than its share (⌈L ÷ N⌉) through node 0: 80% of
    // it, the other nodes' part too small for them to sync the key (under the promotion
    // threshold ÷ N); and half of it, the other nodes syncing it too.
    let (most, half) = ("uneven.example", "lopsided.example");
    let flows = [
        Flow::new(0, most, UNDER * 8 / 10),
        Flow::new(1, most, UNDER / 10),
        Flow::new(2, most, UNDER / 10),
        Flow::new(0, half, UNDER / 2),
        Flow::new(1, half, UNDER / 4),
        Flow::new(2, half, UNDER / 4),
    ];
    assert_never_refused(&nodes, &flows, 3);
}

/// The sync interval of the fleets here.
const SYNC: Duration = Duration::from_millis(100);

/// Floods `key` through each node once it has synced since `before` (its `syncs`), in the
/// order they sync: each node decides right after its own sync, before the others' next
/// ones, as it does under steady traffic. Returns what each node admitted.
fn flood_after_each_sync(nodes: &[Limiter<String>], before: &[FleetStatus], key: &str) -> Vec<u64> {
    let mut admitted = vec![None; nodes.len()];
    poll(DEADLINE, Duration::from_millis(1), || {
        for (i, status) in statuses(nodes).iter().enumerate() {
            if admitted[i].is_none() && status.syncs > before[i].syncs {
                // Offered far more than the limit, at one instant.
                let n = (0..2 * LIMIT)
                    .filter(|_| nodes[i].try_acquire(key).is_ok())
                    .count();
                admitted[i] = Some(n as u64);
            }
        }
        admitted.iter().all(Option::is_some)
    })
    .unwrap_or_else(|waited| panic!("no syncs within {waited:?}: {:#?}", statuses(nodes)));
    admitted
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect()
}

/// A key the formed fleet has never seen, flooded through all three nodes, each right after
/// its sync, in rounds a sync interval apart (on a manual clock shared by the nodes: the whole
/// run is the key's first window; the syncs run on their own). Each node held the key to
/// its share ⌈L ÷ N⌉ until its first sync of it, and then the first node to sync saw its own
/// count alone in Redis and took the others' room as well: about 1.65 × the limit in the
/// key's first window with real traffic, 2 × here. Held within the bound,
/// `L · (1 + S ÷ W) + N`.
#[test]
fn a_new_key_flooded_on_a_formed_fleet_is_held_to_its_limit_in_its_first_window() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let clock = ManualClock::new();
    // A millisecond into a window, so that the run (six sync intervals) stays inside it.
    clock.advance(Duration::from_millis(10 * WINDOW.as_millis() as u64 + 1));
    let nodes: Vec<_> = (0..NODES)
        .map(|_| {
            Limiter::builder()
                .max_rate(LIMIT, WINDOW)
                .clock(&clock)
                .fleet(
                    FleetConfig::new(redis.url())
                        .prefix("new-key")
                        .sync_interval(SYNC)
                        .timeout(Duration::from_secs(1)),
                )
                .build()
                .unwrap()
        })
        .collect();
    poll(DEADLINE, Duration::from_millis(10), || {
        statuses(&nodes)
            .iter()
            .all(|s| s.syncs > 0 && s.nodes == NODES)
    })
    .unwrap_or_else(|_| panic!("the fleet never formed: {:#?}", statuses(&nodes)));
    let key = "new.example";
    let mut admitted = [0u64; NODES];
    for _ in 0..6 {
        let round = flood_after_each_sync(&nodes, &statuses(&nodes), key);
        for (admitted, round) in admitted.iter_mut().zip(round) {
            *admitted += round;
        }
        clock.advance(SYNC);
    }
    let total: u64 = admitted.iter().sum();
    let bound = LIMIT as f64 * (1.0 + SYNC.as_secs_f64() / WINDOW.as_secs_f64()) + NODES as f64;
    eprintln!(
        "a new key's first window: {total} admitted, {:.2} × the limit (by node {admitted:?})",
        total as f64 / LIMIT as f64
    );
    assert!(
        total as f64 <= bound,
        "{total} admitted in the key's first window, {:.2} × the limit of {LIMIT} (by node \
         {admitted:?}); the bound is {bound}",
        total as f64 / LIMIT as f64
    );
    assert!(
        total >= LIMIT as u64 * 9 / 10,
        "the fleet held the key well under its limit: {total} (by node {admitted:?})"
    );
}

/// A loopback URL that nothing listens on.
fn nowhere() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("redis://127.0.0.1:{port}/")
}

/// A duration anywhere from 0 to `Duration::MAX`, its ends and the plausible range drawn more
/// often than a uniform draw would.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(secs, nanos)| Duration::new(secs, nanos)),
        (0..u64::from(u32::MAX)).prop_map(Duration::from_micros),
        (0u64..2_000).prop_map(Duration::from_millis),
    ]
}

/// A count anywhere from 0 to `usize::MAX`, its ends and small fleets drawn more often.
fn any_count() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0), Just(usize::MAX), any::<usize>(), 0usize..100]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A fleet configuration with any sync interval, timeout and expected size, from 0 to
    /// their maximum: `build` never panics (`Duration::MAX` overflowed its arithmetic), and
    /// either refuses it with a fleet error that says what is allowed, or gives a limiter
    /// that works while Redis is away (the first request of a key admitted: an expected size
    /// of `usize::MAX` refused every one), syncs within its window and gives up on a sync
    /// within a minute (a sync interval of a year was accepted).
    #[test]
    fn a_fleet_config_from_zero_to_the_maximum_is_built_working_or_refused_clearly(
        sync in any_duration(),
        timeout in any_duration(),
        expected in any_count(),
    ) {
        let config = FleetConfig::new(nowhere())
            .prefix("ranges")
            .sync_interval(sync)
            .timeout(timeout)
            .expected_nodes(expected);
        let built = Limiter::<String>::builder()
            .max_rate(LIMIT, WINDOW)
            .fleet(config)
            .build();
        match built {
            Err(ConfigError::Fleet(message)) => prop_assert!(
                message.contains("at least") || message.contains("at most"),
                "a refusal says what is allowed: {message}"
            ),
            Err(other) => prop_assert!(false, "not a fleet error: {other}"),
            Ok(limiter) => {
                prop_assert!(limiter.try_acquire("first.example").is_ok(), "{limiter:?}");
                prop_assert!(sync <= WINDOW, "a sync interval of {sync:?} accepted");
                prop_assert!(timeout <= Duration::from_secs(60), "a timeout of {timeout:?} accepted");
            }
        }
    }
}
