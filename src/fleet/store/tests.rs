//! The store's tests, against real `redis-server` children (skipped, with a word on stderr,
//! when the binary is missing): one server, or a Cluster of three masters.

use super::exchange::MAX_COUNT;
use super::*;
// The harness that starts real Redis servers (test-support/), shared with the integration tests.
use floodgate_test_support::redis_server::{RedisCluster, RedisServer, Reply};
use std::thread;

/// The windows' length in these tests; window numbers are explicit, never waited for.
const W: u64 = 1000;
/// A window number, and a time on the node's clock, well past the epoch.
const WINDOW: u64 = 1_700_000_000;
const NOW: u64 = WINDOW * W;

fn config(url: &str) -> FleetConfig {
    FleetConfig::new(url).timeout(Duration::from_millis(500))
}

fn store(config: &FleetConfig) -> Store {
    Store::new(config).expect("a valid configuration")
}

/// A push of this node's count of `key` in `window` (0: a pure read).
fn push(key: &str, window: u64, count: u64) -> Push<'_> {
    Push {
        key: key.as_bytes(),
        window,
        count,
        previous: 0,
        refused: 0,
        refused_previous: 0,
    }
}

/// What the window script answers for a key no node refused: its totals in the window and
/// the window before.
fn counts(current: u64, previous: u64) -> KeyTotals {
    KeyTotals {
        current,
        previous,
        refusers: 0,
    }
}

/// Nothing counted in either window.
const NONE: KeyTotals = KeyTotals {
    current: 0,
    previous: 0,
    refusers: 0,
};

/// Syncs and returns the counts and the node count, panicking on failure.
fn sync(store: &mut Store, node: &str, now: u64, pushes: &[Push<'_>]) -> (Vec<KeyTotals>, usize) {
    let synced = store
        .sync(node, now, W, pushes)
        .unwrap_or_else(|e| panic!("sync of {node}: {e}"));
    (synced.totals.to_vec(), synced.nodes)
}

/// The name of `key`'s hash of counts for `window`.
fn hash_name(prefix: &str, key: &str, window: u64) -> String {
    let mut name = Vec::new();
    keys::window_key(&mut name, prefix, key.as_bytes(), window);
    String::from_utf8(name).unwrap()
}

#[test]
fn pushes_from_two_nodes_sum_up() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let config = config(&server.url());
    let (mut a, mut b) = (store(&config), store(&config));
    assert!(!a.is_connected(), "no I/O before the first sync");

    let (totals, nodes) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);
    assert_eq!((totals, nodes), (vec![counts(3, 0)], 1));
    assert!(a.is_connected());
    let (totals, nodes) = sync(
        &mut b,
        "b",
        NOW,
        &[push("k", WINDOW, 4), push("other", WINDOW, 1)],
    );
    assert_eq!((totals, nodes), (vec![counts(7, 0), counts(1, 0)], 2));
    // A's count grows: its field is replaced, not added to.
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
    assert_eq!(totals, vec![counts(9, 0)]);
    // Each node's count is a field of the key's hash.
    let name = hash_name("floodgate", "k", WINDOW);
    assert_eq!(server.command(&["HGET", &name, "a"]).text(), "5");
    assert_eq!(server.command(&["HGET", &name, "b"]).text(), "4");
    assert_eq!(server.command(&["HLEN", &name]), Reply::Int(2));
    // No pushes at all still marks the node alive and counts the nodes.
    let (totals, nodes) = sync(&mut a, "a", NOW, &[]);
    assert_eq!((totals, nodes), (vec![], 2));
}

#[test]
fn a_push_sent_again_counts_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let config = config(&server.url());
    let (mut a, mut b) = (store(&config), store(&config));
    assert_eq!(
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]).0,
        vec![counts(3, 0)]
    );
    // The same count again (a sync retried), alone and twice in one sync.
    assert_eq!(
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]).0,
        vec![counts(3, 0)]
    );
    assert_eq!(
        sync(
            &mut a,
            "a",
            NOW,
            &[push("k", WINDOW, 3), push("k", WINDOW, 3)]
        )
        .0,
        vec![counts(3, 0); 2]
    );
    assert_eq!(
        sync(&mut b, "b", NOW, &[push("k", WINDOW, 4)]).0,
        vec![counts(7, 0)]
    );
    assert_eq!(
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]).0,
        vec![counts(7, 0)]
    );
}

#[test]
fn a_lower_count_does_not_lower_the_stored_one() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut a = store(&config(&server.url()));
    let name = hash_name("floodgate", "k", WINDOW);
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
    // A push overtaken by a later one (the later first, in one sync) or sent late.
    let (totals, _) = sync(
        &mut a,
        "a",
        NOW,
        &[push("k", WINDOW, 8), push("k", WINDOW, 6)],
    );
    assert_eq!(totals, vec![counts(8, 0); 2]);
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 2)]);
    assert_eq!(totals, vec![counts(8, 0)]);
    assert_eq!(server.command(&["HGET", &name, "a"]).text(), "8");
    // The largest count a push carries, and larger ones capped to it.
    let (totals, _) = sync(&mut a, "a", NOW, &[push("big", WINDOW, u64::MAX)]);
    assert_eq!(totals, vec![counts(MAX_COUNT, 0)]);
    let big = hash_name("floodgate", "big", WINDOW);
    assert_eq!(
        server.command(&["HGET", &big, "a"]).text(),
        MAX_COUNT.to_string()
    );
}

#[test]
fn a_pure_read_creates_nothing() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (mut a, mut b) = (store(&config(&server.url())), store(&config(&server.url())));
    // Nothing there: no hash for either window afterwards.
    let (totals, _) = sync(&mut a, "a", NOW, &[push("new", WINDOW, 0)]);
    assert_eq!(totals, vec![NONE]);
    assert_eq!(
        server.command(&["KEYS", "floodgate:{*"]),
        Reply::Array(Some(vec![]))
    );
    // An existing hash: read without adding the reader or renewing the expiry.
    sync(&mut b, "b", NOW, &[push("k", WINDOW, 2)]);
    let name = hash_name("floodgate", "k", WINDOW);
    assert_eq!(server.command(&["PEXPIRE", &name, "60000"]), Reply::Int(1));
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 0)]);
    assert_eq!(totals, vec![counts(2, 0)]);
    assert_eq!(server.command(&["HEXISTS", &name, "a"]), Reply::Int(0));
    let pttl = server.command(&["PTTL", &name]).int();
    assert!(
        pttl > a.expiry_ms(W) as i64,
        "a read renewed the expiry: PTTL {pttl}"
    );
}

#[test]
fn the_previous_window_total_is_returned() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut a = store(&config(&server.url()));
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
    let (totals, _) = sync(&mut a, "a", NOW + W, &[push("k", WINDOW + 1, 2)]);
    assert_eq!(totals, vec![counts(2, 5)]);
    let (totals, _) = sync(&mut a, "a", NOW + 2 * W, &[push("k", WINDOW + 2, 0)]);
    assert_eq!(totals, vec![counts(0, 2)]);
    // Prefixes keep fleets apart.
    let mut other = store(&config(&server.url()).prefix("other"));
    let (totals, _) = sync(&mut other, "a", NOW, &[push("k", WINDOW + 1, 1)]);
    assert_eq!(totals, vec![counts(1, 0)]);
    // Window 0 has no predecessor.
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", 0, 1)]);
    assert_eq!(totals, vec![counts(1, 0)]);
}

#[test]
fn a_push_carries_the_final_count_of_the_window_before() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (mut a, mut b) = (store(&config(&server.url())), store(&config(&server.url())));
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
    sync(&mut b, "b", NOW, &[push("k", WINDOW, 4)]);
    // A's last sync of the window missed 3 of its requests: its first push of the next
    // window brings them, and a lower previous count (B's, sent again) lowers nothing.
    let late = Push {
        previous: 8,
        ..push("k", WINDOW + 1, 1)
    };
    assert_eq!(sync(&mut a, "a", NOW + W, &[late]).0, vec![counts(1, 12)]);
    let again = Push {
        previous: 2,
        ..push("k", WINDOW + 1, 0)
    };
    assert_eq!(sync(&mut b, "b", NOW + W, &[again]).0, vec![counts(1, 12)]);
    // A Redis that lost the window before (restarted empty) has it back from the pushes.
    server.command(&["FLUSHALL"]);
    assert_eq!(sync(&mut a, "a", NOW + W, &[late]).0, vec![counts(1, 8)]);
}

#[test]
fn refusals_are_told_as_the_other_nodes_that_refused() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let config = config(&server.url());
    let (mut a, mut b, mut c) = (store(&config), store(&config), store(&config));
    let refusing = |key, count, refused, refused_previous| Push {
        refused,
        refused_previous,
        ..push(key, WINDOW, count)
    };
    // A node's own refusals are not told back to it.
    let (totals, _) = sync(&mut a, "a", NOW, &[refusing("k", 3, 2, 1)]);
    assert_eq!(totals[0].refusers, 0);
    // A node that refused in both windows counts once; one that refused in either counts.
    let (totals, _) = sync(&mut b, "b", NOW, &[refusing("k", 3, 0, 4)]);
    assert_eq!(totals[0].refusers, 1);
    let (totals, _) = sync(&mut c, "c", NOW, &[refusing("k", 0, 0, 0)]);
    assert_eq!(totals[0].refusers, 2);
    assert_eq!(totals[0].current, 6, "refusals are not counts");
    // Refusals live in hashes of their own, which expire like the counts.
    let mut name = hash_name("floodgate", "k", WINDOW);
    name.push_str(":refused");
    assert_eq!(server.command(&["HGET", &name, "a"]).text(), "2");
    let pttl = server.command(&["PTTL", &name]).int();
    assert!(pttl > 0 && pttl <= a.expiry_ms(W) as i64, "PTTL {pttl}");
}

#[test]
fn hashes_and_the_node_set_expire() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let config = config(&server.url());
    let mut a = store(&config);
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 1)]);
    let expiry = a.expiry_ms(W);
    assert_eq!(expiry, 2 * W + 1000, "two windows and a margin of a second");
    let pttl = server
        .command(&["PTTL", &hash_name("floodgate", "k", WINDOW)])
        .int();
    assert!(pttl > 0 && pttl <= expiry as i64, "PTTL {pttl}");
    let nodes_ttl = 2 * config.node_ttl().as_millis() as i64;
    let pttl = server.command(&["PTTL", "floodgate:nodes"]).int();
    assert!(pttl > 0 && pttl <= nodes_ttl, "PTTL {pttl}");
}

#[test]
fn a_node_drops_out_of_the_count_after_its_ttl() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let config = config(&server.url());
    let ttl = config.node_ttl().as_millis() as u64;
    let (mut a, mut b) = (store(&config), store(&config));
    assert_eq!(sync(&mut a, "a", NOW, &[]).1, 1);
    assert_eq!(sync(&mut b, "b", NOW, &[]).1, 2);
    assert_eq!(
        sync(&mut a, "a", NOW + ttl, &[]).1,
        2,
        "b is exactly ttl old"
    );
    assert_eq!(sync(&mut a, "a", NOW + ttl + 1, &[]).1, 1, "b is gone");
    assert_eq!(sync(&mut b, "b", NOW + ttl + 1, &[]).1, 2, "b is back");
    assert_eq!(server.command(&["ZCARD", "floodgate:nodes"]), Reply::Int(2));
}

#[test]
fn lost_scripts_are_loaded_again_without_counting_twice() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (mut a, mut b) = (store(&config(&server.url())), store(&config(&server.url())));
    sync(&mut b, "b", NOW, &[push("k", WINDOW, 2)]);
    sync(
        &mut a,
        "a",
        NOW,
        &[push("k", WINDOW, 3), push("j", WINDOW, 1)],
    );
    assert_eq!(
        server.command(&["SCRIPT", "FLUSH"]),
        Reply::Simple("OK".into())
    );
    let (totals, nodes) = sync(
        &mut a,
        "a",
        NOW,
        &[push("k", WINDOW, 4), push("j", WINDOW, 1)],
    );
    assert_eq!((totals, nodes), (vec![counts(6, 0), counts(1, 0)], 2));
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 0)]);
    assert_eq!(totals, vec![counts(6, 0)]);
}

#[test]
fn a_killed_server_fails_the_sync_in_time_and_a_restarted_one_is_used_again() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let timeout = Duration::from_millis(200);
    let mut a = store(&config(&server.url()).timeout(timeout));
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);

    server.kill();
    for count in [4, 5] {
        // The first sync finds the old connection broken, the second cannot connect.
        let start = Instant::now();
        let result = a.sync("a", NOW, W, &[push("k", WINDOW, count)]).map(|_| ());
        let err = result.expect_err("a sync with Redis down");
        assert!(
            start.elapsed() < timeout + Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
        assert!(!a.is_connected());
        assert!(err.to_string().starts_with("fleet sync: "), "{err}");
    }

    server.restart();
    // Nothing was persisted, but the count is absolute: the next push restores it whole.
    let (totals, nodes) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 6)]);
    assert_eq!((totals, nodes), (vec![counts(6, 0)], 1));
}

#[test]
fn a_stalled_server_fails_the_sync_in_time_and_the_retry_counts_once() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let timeout = Duration::from_millis(200);
    let config = config(&server.url()).timeout(timeout);
    let (mut a, mut b) = (store(&config), store(&config));
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);
    sync(&mut b, "b", NOW, &[push("k", WINDOW, 1)]);

    let stall = server.stall(Duration::from_secs(2));
    let start = Instant::now();
    let err = a
        .sync("a", NOW, W, &[push("k", WINDOW, 5)])
        .map(|_| ())
        .expect_err("a sync with Redis stalled");
    let took = start.elapsed();
    assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
    assert!(took < timeout + Duration::from_millis(500), "{took:?}");
    assert!(err.is_timeout(), "{err}");
    stall.join().expect("the stall ends");

    // The push the sync gave up on ran once Redis woke up...
    let (totals, _) = sync(&mut b, "b", NOW, &[push("k", WINDOW, 0)]);
    assert_eq!(totals, vec![counts(6, 0)]);
    // ...and sending it again counts nothing twice.
    let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
    assert_eq!(totals, vec![counts(6, 0)]);
}

#[test]
fn buffers_are_kept_between_syncs() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut a = store(&config(&server.url()));
    let keys: Vec<String> = (0..50).map(|i| format!("key-{i}")).collect();
    let pushes: Vec<Push<'_>> = keys.iter().map(|k| push(k, WINDOW, 1)).collect();
    sync(&mut a, "a", NOW, &pushes);
    let buffers = |a: &Store| {
        (
            a.totals.as_ptr(),
            a.pending.as_ptr(),
            a.routing.masters[0].out.as_ptr(),
            a.routing.masters[0].sent.as_ptr(),
        )
    };
    let first = buffers(&a);
    for _ in 0..10 {
        sync(&mut a, "a", NOW, &pushes);
        assert_eq!(buffers(&a), first, "a buffer was allocated again");
    }
}

#[test]
fn a_standalone_configuration_pointed_at_a_cluster_says_so() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    // A key whose slot the first master does not serve.
    let key = (0..)
        .map(|i| format!("key-{i}"))
        .find(|k| {
            let slot = keys::slot(hash_name("floodgate", k, WINDOW).as_bytes());
            cluster.server_of_slot(slot).port() != cluster.servers()[0].port()
        })
        .unwrap();
    let mut a = store(&config(&cluster.servers()[0].url()));
    let err = a
        .sync("a", NOW, W, &[push(&key, WINDOW, 1)])
        .map(|_| ())
        .expect_err("MOVED");
    assert!(err.to_string().contains("FleetConfig::cluster"), "{err}");
}

/// Keys whose hashes land on each master in turn, with their slots.
fn keys_on_each_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16)> {
    cluster
        .servers()
        .iter()
        .map(|server| {
            (0..)
                .map(|i| format!("origin-{i}.example"))
                .map(|k| {
                    let slot = keys::slot(hash_name(prefix, &k, WINDOW).as_bytes());
                    (k, slot)
                })
                .find(|(_, slot)| cluster.server_of_slot(*slot).port() == server.port())
                .unwrap()
        })
        .collect()
}

#[test]
fn a_cluster_sums_pushes_on_keys_spread_over_its_masters() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let urls = cluster.urls();
    let spread = keys_on_each_master(&cluster, "floodgate");
    for (key, slot) in &spread {
        let name = hash_name("floodgate", key, WINDOW);
        assert_eq!(cluster.keyslot(&name), *slot, "our slot of {name}");
        let previous = hash_name("floodgate", key, WINDOW - 1);
        assert_eq!(
            cluster.keyslot(&previous),
            *slot,
            "{previous} shares the slot"
        );
    }
    // One node knows every master's URL, the other only one of them: it learns the rest.
    let mut a = store(&FleetConfig::cluster(urls.clone()).timeout(Duration::from_millis(500)));
    let mut b = store(&FleetConfig::cluster([urls[1].clone()]).timeout(Duration::from_millis(500)));
    let pushes_a: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 2)).collect();
    let pushes_b: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 3)).collect();
    let (totals, nodes) = sync(&mut a, "a", NOW, &pushes_a);
    assert_eq!((totals, nodes), (vec![counts(2, 0); 3], 1));
    let (totals, nodes) = sync(&mut b, "b", NOW, &pushes_b);
    assert_eq!((totals, nodes), (vec![counts(5, 0); 3], 2));
    // Sent again, on every master: nothing counts twice.
    let (totals, _) = sync(&mut a, "a", NOW, &pushes_a);
    assert_eq!(totals, vec![counts(5, 0); 3]);
    assert_eq!(a.masters(), 3);
    assert_eq!(b.masters(), 3);
    // Each master holds the hash of its key, a field per node.
    for ((key, _), server) in spread.iter().zip(cluster.servers()) {
        let name = hash_name("floodgate", key, WINDOW);
        assert_eq!(server.command(&["HGET", &name, "a"]).text(), "2");
        assert_eq!(server.command(&["HGET", &name, "b"]).text(), "3");
    }
    let next: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW + 1, 1)).collect();
    let (totals, _) = sync(&mut a, "a", NOW + W, &next);
    assert_eq!(totals, vec![counts(1, 5); 3]);
    // Scripts lost on one master only are loaded there, and nothing counts twice.
    cluster.servers()[1].command(&["SCRIPT", "FLUSH"]);
    let next: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW + 1, 2)).collect();
    let (totals, _) = sync(&mut a, "a", NOW + W, &next);
    assert_eq!(totals, vec![counts(2, 5); 3]);
}

#[test]
fn a_cluster_master_killed_fails_the_sync_in_time_and_is_used_again_once_back() {
    let Some(mut cluster) = RedisCluster::start(3) else {
        return;
    };
    let timeout = Duration::from_millis(300);
    let mut a = store(&FleetConfig::cluster(cluster.urls()).timeout(timeout));
    let spread = keys_on_each_master(&cluster, "floodgate");
    let pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 1)).collect();
    sync(&mut a, "a", NOW, &pushes);

    cluster.server_mut(2).kill();
    let grown: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 2)).collect();
    for _ in 0..2 {
        let start = Instant::now();
        a.sync("a", NOW, W, &grown)
            .map(|_| ())
            .expect_err("a sync with a master down");
        assert!(
            start.elapsed() < timeout + Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
    }

    // Back within the cluster's node timeout, with its slots but not its data. It may
    // answer CLUSTERDOWN until it has heard from the others: poll, with pure reads.
    cluster.server_mut(2).restart();
    let reads: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let totals = loop {
        match a.sync("a", NOW, W, &reads) {
            Ok(synced) => break synced.totals.to_vec(),
            Err(e) => assert!(Instant::now() < deadline, "still failing: {e}"),
        }
        thread::sleep(Duration::from_millis(20));
    };
    // The masters that stayed up ran the failed syncs' pushes (once, however many times
    // they were sent); the restarted one lost its data.
    assert_eq!(totals, vec![counts(2, 0), counts(2, 0), NONE], "{totals:?}");
    // The next push restores this node's count there whole.
    let (totals, _) = sync(&mut a, "a", NOW, &grown);
    assert_eq!(totals, vec![counts(2, 0); 3]);
}

/// The id of a cluster node.
fn node_id(server: &RedisServer) -> String {
    server.command(&["CLUSTER", "MYID"]).text()
}

#[test]
fn a_cluster_resharding_is_followed_without_counting_twice() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let mut a = store(&FleetConfig::cluster(cluster.urls()).timeout(Duration::from_millis(500)));
    let spread = keys_on_each_master(&cluster, "floodgate");
    let pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 1)).collect();
    sync(&mut a, "a", NOW, &pushes);

    // Move the (empty) slot of a new key from the master serving it to the next one:
    // the store still believes the old master, which answers MOVED.
    let servers = cluster.servers();
    let (key, slot) = (0..)
        .map(|i| format!("moved-{i}"))
        .map(|k| {
            let slot = keys::slot(hash_name("floodgate", &k, WINDOW).as_bytes());
            (k, slot)
        })
        .find(|(_, slot)| cluster.server_of_slot(*slot).port() == servers[0].port())
        .unwrap();
    let (from, to) = (&servers[0], &servers[1]);
    let slot_arg = slot.to_string();
    let (from_id, to_id) = (node_id(from), node_id(to));
    let ok = Reply::Simple("OK".into());
    assert_eq!(
        to.command(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]),
        ok
    );
    assert_eq!(
        from.command(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]),
        ok
    );
    for server in [to, from, &servers[2]] {
        assert_eq!(
            server.command(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
            ok
        );
    }

    let mut pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 2)).collect();
    pushes.push(push(&key, WINDOW, 4));
    let (totals, nodes) = sync(&mut a, "a", NOW, &pushes);
    assert_eq!(
        (totals, nodes),
        (
            vec![counts(2, 0), counts(2, 0), counts(2, 0), counts(4, 0)],
            1
        )
    );
    let name = hash_name("floodgate", &key, WINDOW);
    assert_eq!(to.command(&["HGET", &name, "a"]).text(), "4");
    assert!(
        matches!(from.command(&["HGET", &name, "a"]), Reply::Error(e) if e.starts_with("MOVED"))
    );
}

#[test]
fn a_cluster_slot_migrating_is_followed_with_asking() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let servers = cluster.servers();
    // A prefix whose node set lands on the first master, and is not there yet.
    let prefix = (0..)
        .map(|i| format!("ask{i}"))
        .find(|p| {
            let slot = keys::slot(keys::nodes_key(p).as_bytes());
            cluster.server_of_slot(slot).port() == servers[0].port()
        })
        .unwrap();
    let nodes_key = keys::nodes_key(&prefix);
    let slot_arg = keys::slot(nodes_key.as_bytes()).to_string();
    let mut a = store(
        &FleetConfig::cluster(cluster.urls())
            .prefix(&prefix)
            .timeout(Duration::from_millis(500)),
    );
    // Learn the slots before the migration starts.
    sync(&mut a, "a", NOW, &[push("k", WINDOW, 1)]);
    assert_eq!(servers[0].command(&["DEL", &nodes_key]), Reply::Int(1));

    let (from, to) = (&servers[0], &servers[1]);
    let (from_id, to_id) = (node_id(from), node_id(to));
    let ok = Reply::Simple("OK".into());
    assert_eq!(
        to.command(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]),
        ok
    );
    assert_eq!(
        from.command(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]),
        ok
    );
    // The node set is not on the old master: it sends the store on with ASK.
    let (_, nodes) = sync(&mut a, "a", NOW, &[]);
    assert_eq!(nodes, 1);
    let (_, nodes) = sync(&mut a, "b", NOW, &[]);
    assert_eq!(nodes, 2);
    for server in [to, from] {
        assert_eq!(
            server.command(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
            ok
        );
    }
    assert_eq!(to.command(&["ZCARD", &nodes_key]), Reply::Int(2));
}

/// `n` keys whose hashes land on each master, master by master.
fn keys_per_master(cluster: &RedisCluster, prefix: &str, n: usize) -> Vec<Vec<String>> {
    cluster
        .servers()
        .iter()
        .map(|server| {
            (0..)
                .map(|i| format!("origin-{i}.example"))
                .filter(|k| {
                    let slot = keys::slot(hash_name(prefix, k, WINDOW).as_bytes());
                    cluster.server_of_slot(slot).port() == server.port()
                })
                .take(n)
                .collect()
        })
        .collect()
}

#[test]
fn a_stalled_cluster_master_fails_the_sync_in_time_and_the_retry_counts_once() {
    let Some(cluster) = RedisCluster::start(3) else {
        return;
    };
    let timeout = Duration::from_millis(200);
    let mut a = store(&FleetConfig::cluster(cluster.urls()).timeout(timeout));
    // Several keys on each master: a stalled master costs the sync its timeout once, not
    // once per command it was sent.
    let keys: Vec<String> = keys_per_master(&cluster, "floodgate", 5).concat();
    let pushes = |count| -> Vec<Push<'_>> { keys.iter().map(|k| push(k, WINDOW, count)).collect() };
    sync(&mut a, "a", NOW, &pushes(1));

    let stall = cluster.servers()[1].stall(Duration::from_secs(2));
    let start = Instant::now();
    let err = a
        .sync("a", NOW, W, &pushes(2))
        .map(|_| ())
        .expect_err("a sync with a master stalled");
    let took = start.elapsed();
    assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
    assert!(took < timeout + Duration::from_millis(500), "{took:?}");
    assert!(err.is_timeout(), "{err}");
    stall.join().expect("the stall ends");

    // Every master ran the pushes (the stalled one once awake); sent again, they count once.
    let (totals, _) = sync(&mut a, "a", NOW, &pushes(2));
    assert_eq!(totals, vec![counts(2, 0); keys.len()]);
}
