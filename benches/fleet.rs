//! Fleet (feature `redis`): the cost of `try_acquire` + permit drop on a limiter in a fleet,
//! next to the same limiter without one, side by side in one run on the same traffic. The
//! issue's requirement: with a fleet configured, `try_acquire` costs at most 1.2× a local
//! limiter's.
//!
//! # The two sides
//!
//! Each scenario builds a fresh pair of `Limiter<String>` from one builder:
//!
//! - `local`: the builder alone;
//! - `fleet`: the same builder plus `.fleet(FleetConfig::new(url).prefix(unique)
//!   .sync_interval(100 ms))`, one node of a fleet of [`NODES`] (3) syncing through a real
//!   `redis-server` the bench starts on a free loopback port (the tests' harness,
//!   test-support/src/redis_server.rs; nothing persisted, killed on exit). Without a
//!   `redis-server` the bench prints why and measures nothing (`FLOODGATE_REQUIRE_REDIS=1`
//!   makes that a failure, as in the tests).
//!
//! **The rest of the fleet.** Two more limiters are built from the same builder and the same
//! `FleetConfig` (same prefix, same server): the background nodes. They live, and sync, for
//! the whole scenario, and each sends a light share of the same traffic (the scenario's order,
//! from a place of its own) from a thread of its own, paced at [`BACKGROUND_RATE`] (2,000)
//! requests a second in bursts every 10 ms: small on purpose, as the machine has two cores,
//! one taken by the timed loop and the other shared by the three sync threads,
//! `redis-server` and these two senders. They run while both sides are checked and timed, so
//! the local side runs under the same load. Their keys' counts reach the measured node
//! through Redis, so the fleet's totals it judges on are real ones of three nodes.
//!
//! **What N = 3 changes.** The measured node decides on the thresholds of a node of three:
//! keys are promoted to the exact stage at a third of the local threshold
//! (`src/limiter/decision.rs`, `in_fleet`), so more keys take the exact stage's path, judged
//! against the fleet's view, and a promoted key the fleet has said nothing of lately is also
//! held to the node's share, `⌈L ÷ 3⌉`, of its limit. The difference between the sides is
//! then the fleet's own work on the request path (its thresholds, the extra promotions and
//! their exact-stage decisions, the view judged) and its sync thread. At the rates one thread
//! reaches here, the cold keys of `rotating` and `healthy` (tens of requests a second each,
//! and fewer) stay under even a third of the threshold (167 a second), so both sides promote
//! the same keys: the printed `promoted` counts show it.
//!
//! Before anything is checked or timed the fleet must have formed as the measured node sees
//! it: it has synced and its last sync counted 3 nodes (`fleet_status().nodes == 3`). After
//! its side is timed it must still be connected, have gone on syncing and still count 3
//! nodes, and each background node must still be connected and count 3 (their figures and
//! statuses are printed).
//!
//! **Real clock.** The fleet's windows are aligned to the Unix epoch and its sync threads run
//! on the real clock, so a `ManualClock` cannot drive it: both sides here run on the real
//! (coarse, shared) clock, and the timed traffic is as fast as the loop goes on one thread
//! (the machine's other core is left to the sync threads, the background senders and
//! `redis-server`).
//!
//! # Scenarios (group `fleet_<scenario>`, ids `local/1`, `fleet/1`, `local/2`, `fleet/2`: each
//! side timed twice, in turns)
//!
//! Limits bind: `flood` and `rotating` send keys far over their limits. Those two and
//! `healthy` limit each key to [`LIMIT`] (1,000) requests a second, with the
//! sketches sized for [`PEAK_RATE`] (16M requests a second, more than one thread sends: the
//! sketch noise stays well under the promotion threshold, so cold keys stay cold).
//!
//! - `flood`: every request for one key, thousands of times its limit: the over-limit cache
//!   refuses most of them, and the exact stage (with the fleet's view on the fleet side)
//!   decides the rest.
//! - `rotating`: 100,000 keys; 8 hot keys take a quarter of the requests (each far over its
//!   limit), the other 99,992 the rest (each well under its limit, decided by the sketch).
//! - `under`: one key under its limit but promoted, so that each request is decided and
//!   admitted by the exact stage, on the fleet side against the fleet's view too: a limit of
//!   [`UNDER_LIMIT`] (10^9 a second) with promotion at 0.1% of it (10^6 a second; a third
//!   of that on the fleet side).
//! - `healthy`: 1,000,000 keys drawn uniformly, each far under its limit: the sketch
//!   alone admits them (the fleet syncs none of them), the cheapest path.
//!
//! One timed operation is `try_acquire(key).is_ok()`: the permit, if any, is dropped at once.
//! The keys are `String`s built before timing, walked in a pre-drawn order (a fixed seed, the
//! same for both sides); each side goes on from where its previous batch stopped.
//!
//! # Checks
//!
//! Before timing, each side runs the scenario's traffic untimed for [`CHECK_TIME`] and the
//! bench asserts that the limits bind as intended: the keys over their limits are refused, and
//! admitted at most their limit per window (`LIMIT × (seconds + 2)` over the check); the keys
//! under their limits are not refused (at most 0.1% of their requests in `rotating`, none
//! elsewhere). The timed loop counts admissions too, and after timing the same is asserted of
//! its totals (refusals in `flood` and `rotating`, none in `under` and `healthy`).
//!
//! # Ratios
//!
//! After criterion's groups, a table of the median ns per operation over every batch of at
//! least [`MIN_BATCH`] operations each side timed (warm-up included, as benches/wait.rs does),
//! the ratio fleet ÷ local, and the admitted and refused counts of the timed loops.
//!
//! # Running
//!
//! `cargo bench --features redis --bench fleet` (about 35 s: criterion's warm-up 1 s and
//! measurement 2 s of the shared `config`, per side and scenario); `-- flood` runs one
//! scenario.

mod common;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::Throughput;
use floodgate::fleet::FleetConfig;
use floodgate::{Limiter, LimiterBuilder};
use floodgate_test_support::redis_server::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Requests per [`INTERVAL`] per key in the `flood`, `rotating` and `healthy` scenarios.
const LIMIT: u32 = 1_000;
const INTERVAL: Duration = Duration::from_secs(1);
/// What the sketches are sized for: above what one thread of this loop sends.
const PEAK_RATE: u64 = 16_000_000;
/// The fleet's sync interval.
const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The `under` scenario's limit, and its promotion threshold (a fraction of it).
const UNDER_LIMIT: u32 = 1_000_000_000;
const UNDER_PROMOTION: f64 = 0.001;

/// Keys of the `rotating` scenario, the hot ones among them, and the hot ones' share.
const ROTATING_KEYS: usize = 100_000;
const HOT_KEYS: usize = 8;
const HOT_SHARE: f64 = 0.25;
/// Keys of the `healthy` scenario.
const HEALTHY_KEYS: usize = 1_000_000;

/// The length of each scenario's pre-drawn order of keys (a power of two: the index wraps
/// with a mask).
const ORDER: usize = 1 << 20;
const MASK: usize = ORDER - 1;

/// The untimed check's duration, per side.
const CHECK_TIME: Duration = Duration::from_millis(400);
/// The shortest batch the table's medians count (criterion's first warm-up batches are a few
/// operations, timed with the clock's own overhead).
const MIN_BATCH: u64 = 10_000;
/// How long the fleet may take to form: the measured node synced and seeing [`NODES`] nodes.
const SYNC_DEADLINE: Duration = Duration::from_secs(10);

/// The fleet's size: the measured node and `NODES - 1` background nodes.
const NODES: usize = 3;
/// Requests a second each background node sends (kept small: the machine has two cores, the
/// measured loop takes one, and the other is shared by the sync threads, `redis-server` and
/// these senders).
const BACKGROUND_RATE: u64 = 2_000;
/// How often a background node sends its next burst, and the burst (`BACKGROUND_RATE` paced
/// over it).
const BACKGROUND_TICK: Duration = Duration::from_millis(10);
const BACKGROUND_BURST: u64 = BACKGROUND_RATE * BACKGROUND_TICK.as_millis() as u64 / 1_000;

/// One traffic pattern: its keys (those over their limits first) and the order they come in.
struct Scenario {
    name: &'static str,
    keys: Vec<String>,
    order: Box<[u32; ORDER]>,
    /// `keys[..hot]` are sent over their limits; the others under.
    hot: usize,
    /// Whether the timed loop must see refusals (`true`) or none (`false`).
    refuses: bool,
    /// The builder both sides start from.
    builder: fn() -> LimiterBuilder<String>,
}

fn builder() -> LimiterBuilder<String> {
    Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .peak_rate(PEAK_RATE)
}

fn under_builder() -> LimiterBuilder<String> {
    Limiter::builder()
        .max_rate(UNDER_LIMIT, INTERVAL)
        .promotion_threshold(UNDER_PROMOTION)
        .peak_rate(PEAK_RATE)
}

fn order(draw: impl FnMut() -> u32) -> Box<[u32; ORDER]> {
    let order: Vec<u32> = std::iter::repeat_with(draw).take(ORDER).collect();
    order.into_boxed_slice().try_into().expect("ORDER draws")
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}.example")).collect()
}

fn scenarios() -> Vec<Scenario> {
    let mut rng = StdRng::seed_from_u64(0xF1EE7);
    let rotating = order(|| {
        if rng.gen_bool(HOT_SHARE) {
            rng.gen_range(0..HOT_KEYS as u32)
        } else {
            rng.gen_range(HOT_KEYS as u32..ROTATING_KEYS as u32)
        }
    });
    let healthy = order(|| rng.gen_range(0..HEALTHY_KEYS as u32));
    vec![
        Scenario {
            name: "flood",
            keys: keys("flood", 1),
            order: order(|| 0),
            hot: 1,
            refuses: true,
            builder,
        },
        Scenario {
            name: "rotating",
            keys: keys("rotating", ROTATING_KEYS),
            order: rotating,
            hot: HOT_KEYS,
            refuses: true,
            builder,
        },
        Scenario {
            name: "under",
            keys: keys("under", 1),
            order: order(|| 0),
            hot: 0,
            refuses: false,
            builder: under_builder,
        },
        Scenario {
            name: "healthy",
            keys: keys("healthy", HEALTHY_KEYS),
            order: healthy,
            hot: 0,
            refuses: false,
            builder,
        },
    ]
}

/// The timed loop: `iters` requests from position `from` of the scenario's order, each a
/// `try_acquire` whose permit is dropped at once; returns how many were admitted.
#[inline(never)]
fn run(limiter: &Limiter<String>, s: &Scenario, from: usize, iters: u64) -> u64 {
    let mut admitted = 0;
    let mut i = from;
    for _ in 0..iters {
        let key = s.keys[s.order[i & MASK] as usize].as_str();
        admitted += u64::from(limiter.try_acquire(key).is_ok());
        i = i.wrapping_add(1);
    }
    admitted
}

/// One side of a scenario: its limiter and what its timed batches saw.
struct Side {
    label: &'static str,
    limiter: Limiter<String>,
    /// Where the next batch starts in the scenario's order.
    next: Cell<usize>,
    /// ns per operation of each batch of at least [`MIN_BATCH`].
    batches: RefCell<Vec<f64>>,
    admitted: Cell<u64>,
    refused: Cell<u64>,
}

impl Side {
    fn new(label: &'static str, limiter: Limiter<String>) -> Side {
        Side {
            label,
            limiter,
            next: Cell::new(0),
            batches: RefCell::new(Vec::new()),
            admitted: Cell::new(0),
            refused: Cell::new(0),
        }
    }

    fn median(&self) -> Option<f64> {
        let mut ns = self.batches.borrow().clone();
        ns.sort_by(f64::total_cmp);
        ns.get(ns.len() / 2).copied()
    }
}

/// The untimed check: the scenario's traffic for [`CHECK_TIME`], every decision tallied by
/// whether its key is sent over its limit, and the limits asserted to bind as intended.
fn check(s: &Scenario, side: &Side) {
    // (admitted, refused) of the keys over their limits, then of the others.
    let mut hot = (0u64, 0u64);
    let mut cold = (0u64, 0u64);
    let began = Instant::now();
    let mut i = 0usize;
    while began.elapsed() < CHECK_TIME {
        for _ in 0..1_000 {
            let k = s.order[i & MASK] as usize;
            let ok = side.limiter.try_acquire(s.keys[k].as_str()).is_ok();
            let tally = if k < s.hot { &mut hot } else { &mut cold };
            if ok {
                tally.0 += 1;
            } else {
                tally.1 += 1;
            }
            i += 1;
        }
    }
    let secs = began.elapsed().as_secs_f64();
    let (label, name) = (side.label, s.name);
    println!(
        "check {name}/{label}: {i} requests in {secs:.2} s; over their limits: {} admitted, {} \
         refused; under: {} admitted, {} refused",
        hot.0, hot.1, cold.0, cold.1
    );
    if s.hot > 0 {
        assert!(hot.1 > 0, "{name}/{label}: no key reached its limit");
        let most = s.hot as f64 * LIMIT as f64 * (secs + 2.0);
        assert!(
            hot.0 as f64 <= most,
            "{name}/{label}: {} admitted over {secs:.2} s, more than {most} allow",
            hot.0
        );
    }
    let allowed = if s.refuses { cold.0 / 1_000 } else { 0 };
    assert!(
        cold.1 <= allowed,
        "{name}/{label}: {} requests under their limits refused",
        cold.1
    );
}

/// After a side is timed: what its timed loop decided and its limiter's state, and the
/// assertions on both (refusals where limits bind, none elsewhere; sketches not saturated).
fn report(s: &Scenario, side: &Side) {
    let (admitted, refused) = (side.admitted.get(), side.refused.get());
    if admitted + refused == 0 {
        return; // filtered out
    }
    let stats = side.limiter.stats();
    println!(
        "{}/{}: timed {admitted} admitted, {refused} refused; promoted {}, rate noise {:.1}, \
         saturated {}",
        s.name,
        side.label,
        stats.promoted,
        stats.rate_noise.unwrap_or(0.0),
        stats.saturated
    );
    if s.refuses {
        assert!(refused > 0, "{}/{}: nothing refused", s.name, side.label);
    } else {
        assert_eq!(refused, 0, "{}/{}: refusals", s.name, side.label);
    }
    assert!(!stats.saturated, "{}/{}: saturated", s.name, side.label);
}

/// A unique prefix for one fleet limiter's Redis keys.
fn prefix(scenario: &str) -> String {
    format!("fleet-bench-{}-{scenario}", std::process::id())
}

/// Waits until the fleet has formed as the measured node sees it: it has synced, and the last
/// sync counted [`NODES`] nodes.
fn wait_for_fleet(limiter: &Limiter<String>) {
    let deadline = Instant::now() + SYNC_DEADLINE;
    loop {
        let status = limiter.fleet_status().expect("a fleet limiter");
        if status.syncs > 0 && status.nodes == NODES {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet of {NODES} did not form within {SYNC_DEADLINE:?}: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A background node's traffic: the scenario's order from `from`, [`BACKGROUND_BURST`]
/// requests every [`BACKGROUND_TICK`] (about [`BACKGROUND_RATE`] a second), until `stop`;
/// returns (admitted, refused).
fn background(
    s: &Scenario,
    limiter: &Limiter<String>,
    from: usize,
    stop: &AtomicBool,
) -> (u64, u64) {
    let (mut admitted, mut refused) = (0u64, 0u64);
    let mut i = from;
    let mut next = Instant::now();
    while !stop.load(Relaxed) {
        for _ in 0..BACKGROUND_BURST {
            let key = s.keys[s.order[i & MASK] as usize].as_str();
            if limiter.try_acquire(key).is_ok() {
                admitted += 1;
            } else {
                refused += 1;
            }
            i = i.wrapping_add(1);
        }
        next += BACKGROUND_TICK;
        match next.checked_duration_since(Instant::now()) {
            Some(wait) => std::thread::sleep(wait),
            None => next = Instant::now(), // late: do not catch up in a burst
        }
    }
    (admitted, refused)
}

/// Tells the background senders to stop when dropped, a panic's unwinding included (the scope
/// that runs them would otherwise wait for them forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// What one side's timed loop gave: median ns per operation, admitted, refused.
type Figures = (Option<f64>, u64, u64);

/// One row of the table: a scenario's two sides (their limiters dropped).
struct Row {
    name: &'static str,
    local: Figures,
    fleet: Figures,
}

impl Side {
    fn figures(&self) -> Figures {
        (self.median(), self.admitted.get(), self.refused.get())
    }
}

fn print_table(rows: &[Row]) {
    println!();
    println!(
        "Median ns per try_acquire + drop over every batch of at least {MIN_BATCH} timed \
         (warm-up included), each side timed twice in turns; one thread, real clock; the fleet \
         side a node of {NODES}, the others sending {BACKGROUND_RATE} requests a second each:"
    );
    println!("| scenario | local ns | fleet ns | fleet ÷ local | ≤ 1.2 | local admitted / refused | fleet admitted / refused |");
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        let ((Some(local), la, lr), (Some(fleet), fa, fr)) = (row.local, row.fleet) else {
            continue; // filtered out
        };
        let ratio = fleet / local;
        println!(
            "| {} | {local:.1} | {fleet:.1} | {ratio:.2} | {} | {la} / {lr} | {fa} / {fr} |",
            row.name,
            if ratio <= 1.2 { "yes" } else { "NO" },
        );
    }
}

fn main() {
    let Some(redis) = RedisServer::start() else {
        eprintln!("fleet bench: no redis-server to sync through, nothing measured");
        return;
    };
    let mut c = common::config().configure_from_args();
    let mut rows = Vec::new();
    for s in scenarios() {
        let config = FleetConfig::new(redis.url())
            .prefix(&prefix(s.name))
            .sync_interval(SYNC_INTERVAL);
        let node = || {
            (s.builder)()
                .fleet(config.clone())
                .build()
                .expect("valid fleet limiter")
        };
        let local = (s.builder)().build().expect("valid limiter");
        let fleet = node();
        // The rest of the fleet: alive (syncing) for the whole scenario, each sending a light
        // share of the same traffic from a thread of its own.
        let others: Vec<Limiter<String>> = (1..NODES).map(|_| node()).collect();
        let stop = AtomicBool::new(false);
        let (local, fleet) = (Side::new("local", local), Side::new("fleet", fleet));
        let sent = std::thread::scope(|scope| {
            let stopping = StopOnDrop(&stop);
            let senders: Vec<_> = others
                .iter()
                .enumerate()
                .map(|(n, other)| {
                    let (s, stop) = (&s, &stop);
                    // Each from its own place in the order (the measured node starts at 0).
                    let from = (n + 1) * ORDER / NODES;
                    scope.spawn(move || background(s, other, from, stop))
                })
                .collect();
            wait_for_fleet(&fleet.limiter);
            for side in [&local, &fleet] {
                check(&s, side);
            }
            if s.name == "under" {
                for side in [&local, &fleet] {
                    assert!(
                        side.limiter.stats().promoted >= 1,
                        "under/{}: the key was not promoted",
                        side.label
                    );
                }
            }
            let syncs_before = fleet.limiter.fleet_status().expect("fleet").syncs;
            let mut g = c.benchmark_group(format!("fleet_{}", s.name));
            g.throughput(Throughput::Elements(1));
            // Each side twice, in turns (local, fleet, local, fleet): a noisy stretch of this
            // shared machine then falls on both sides rather than on one, and the medians are
            // over both turns' batches.
            for (turn, side) in [(1, &local), (1, &fleet), (2, &local), (2, &fleet)] {
                g.bench_function(format!("{}/{turn}", side.label), |b| {
                    b.iter_custom(|iters| {
                        let from = side.next.get();
                        let start = Instant::now();
                        let admitted = run(&side.limiter, &s, from, iters);
                        let elapsed = start.elapsed();
                        side.next.set(from.wrapping_add(iters as usize));
                        side.admitted.set(side.admitted.get() + admitted);
                        side.refused.set(side.refused.get() + (iters - admitted));
                        if iters >= MIN_BATCH {
                            let ns = elapsed.as_nanos() as f64 / iters as f64;
                            side.batches.borrow_mut().push(ns);
                        }
                        elapsed
                    })
                });
                // Read after its last turn: an idle limiter's windows empty and its promoted
                // keys cool down.
                if turn == 2 {
                    report(&s, side);
                }
            }
            g.finish();
            let status = fleet.limiter.fleet_status().expect("fleet");
            println!("{}/fleet status: {status:?}", s.name);
            if fleet.admitted.get() + fleet.refused.get() > 0 {
                assert!(
                    status.connected && status.syncs > syncs_before,
                    "{}: the fleet node lost Redis while timed: {status:?}",
                    s.name
                );
                assert_eq!(
                    status.nodes, NODES,
                    "{}: the fleet node no longer sees {NODES} nodes: {status:?}",
                    s.name
                );
            }
            drop(stopping);
            senders
                .into_iter()
                .map(|sender| sender.join().expect("background sender panicked"))
                .collect::<Vec<_>>()
        });
        for (other, (admitted, refused)) in others.iter().zip(sent) {
            let status = other.fleet_status().expect("fleet");
            println!(
                "{}/background node: {admitted} admitted, {refused} refused; promoted {}; \
                 {status:?}",
                s.name,
                other.stats().promoted
            );
            assert!(
                status.connected && status.nodes == NODES,
                "{}: a background node left the fleet: {status:?}",
                s.name
            );
        }
        rows.push(Row {
            name: s.name,
            local: local.figures(),
            fleet: fleet.figures(),
        });
        // The limiters (and the fleet nodes' sync threads) end here, before the next scenario.
    }
    c.final_summary();
    print_table(&rows);
    drop(redis);
}
