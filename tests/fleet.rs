//! The fleet (feature `redis`): three limiters, one redis-server of the test's own on a free
//! loopback port, the real clock and paced traffic. A key that floods every node is held to
//! about its limit fleet-wide; a key under the limit fleet-wide is never refused.
//!
//! Skips with a printed reason without a `redis-server` binary (fails instead under
//! `FLOODGATE_REQUIRE_REDIS=1`, as CI sets).

#![cfg(feature = "redis")]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::redis::RedisServer;
use floodgate::fleet::FleetConfig;
use floodgate::Limiter;

const NODES: usize = 3;
const LIMIT: isize = 300;
const WINDOW: Duration = Duration::from_secs(1);

fn unix_window() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis();
    (ms / WINDOW.as_millis()) as u64
}

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

/// Waits until every node has synced and sees the whole fleet (a running fleet's state; a
/// node that has not synced yet knows of no other).
fn wait_for_fleet(nodes: &[Limiter<String>]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|n| {
        let s = n.fleet_status().unwrap();
        s.syncs > 0 && s.nodes == nodes.len()
    }) {
        assert!(Instant::now() < deadline, "the fleet never formed");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `per_node` requests per second of `key` through each node for `run`, paced, and
/// returns the requests admitted per Unix window (all nodes together) and the number refused.
fn drive(
    nodes: &[Limiter<String>],
    key: &str,
    per_node: u32,
    run: Duration,
) -> (BTreeMap<u64, u64>, u64) {
    let start = Arc::new(Barrier::new(nodes.len()));
    let handles: Vec<_> = nodes
        .iter()
        .map(|limiter| {
            let (limiter, start, key) = (limiter.clone(), Arc::clone(&start), key.to_owned());
            thread::spawn(move || {
                let mut admitted = BTreeMap::<u64, u64>::new();
                let mut refused = 0;
                start.wait();
                let began = Instant::now();
                let gap = Duration::from_secs(1) / per_node;
                let mut i = 0u32;
                while began.elapsed() < run {
                    match limiter.try_acquire(&key) {
                        Ok(_) => *admitted.entry(unix_window()).or_default() += 1,
                        Err(_) => refused += 1,
                    }
                    i += 1;
                    let due = began + gap * i;
                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                        thread::sleep(wait);
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let mut all = BTreeMap::new();
    let mut refused = 0;
    for handle in handles {
        let (admitted, r) = handle.join().unwrap();
        for (window, n) in admitted {
            *all.entry(window).or_default() += n;
        }
        refused += r;
    }
    (all, refused)
}

#[test]
fn a_key_flooding_every_node_is_held_to_about_its_limit_fleet_wide() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let nodes: Vec<_> = (0..NODES).map(|_| node(&redis, "flood")).collect();
    wait_for_fleet(&nodes);
    // Each node alone would admit LIMIT per window: 3× the limit without the fleet.
    let (admitted, _) = drive(&nodes, "flooded.example", 1_000, Duration::from_secs(6));
    let statuses: Vec<_> = nodes.iter().map(|n| n.fleet_status().unwrap()).collect();
    for s in &statuses {
        assert!(s.connected && s.nodes == NODES, "{s:?}");
    }
    // The first and last windows are partial (and the first is the fleet finding itself:
    // a node knows the others only after its first sync).
    let full: Vec<_> = admitted
        .iter()
        .skip(2)
        .take(admitted.len().saturating_sub(3))
        .collect();
    assert!(full.len() >= 2, "{admitted:?}");
    let ratios: Vec<_> = full
        .iter()
        .map(|(_, &n)| format!("{:.2}", n as f64 / LIMIT as f64))
        .collect();
    eprintln!(
        "full windows, admitted fleet-wide ÷ the limit: {}",
        ratios.join(" ")
    );
    for (window, &n) in full {
        let ratio = n as f64 / LIMIT as f64;
        assert!(
            (0.6..=1.15).contains(&ratio),
            "window {window}: {n} admitted fleet-wide, {ratio:.2} × the limit: {admitted:?}, \
             {statuses:?}"
        );
    }
}

#[test]
fn a_key_under_the_limit_fleet_wide_is_never_refused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let nodes: Vec<_> = (0..NODES).map(|_| node(&redis, "steady")).collect();
    wait_for_fleet(&nodes);
    // 0.8 × the limit in all, spread over the three nodes.
    let per_node = (LIMIT as u32 * 8 / 10) / NODES as u32;
    let (_, refused) = drive(&nodes, "steady.example", per_node, Duration::from_secs(4));
    let statuses: Vec<_> = nodes.iter().map(|n| n.fleet_status().unwrap()).collect();
    assert_eq!(refused, 0, "{statuses:?}");
    // And 0.8 × the limit through one node alone, while the others see none of it.
    let (_, refused) = drive(
        &nodes[..1],
        "lonely.example",
        LIMIT as u32 * 8 / 10,
        Duration::from_secs(4),
    );
    let statuses: Vec<_> = nodes.iter().map(|n| n.fleet_status().unwrap()).collect();
    assert_eq!(refused, 0, "{statuses:?}");
}
