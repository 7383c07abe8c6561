//! Three proxies holding one rate limit together through Redis (feature `redis`).
//!
//! ```text
//! cargo run --release --example fleet --features redis                 # about 10 s
//! cargo run --release --example fleet --features redis -- --secs 20
//! cargo run --release --example fleet --features redis -- --redis redis://127.0.0.1:6379/
//! ```
//!
//! Without `--redis URL` (or `FLOODGATE_REDIS`) the demo starts a `redis-server` of its own on
//! a free loopback port, with no persistence, and stops it at the end. It then runs three
//! nodes on 127.0.0.1, each a hyper server behind [`floodgate::layer::LimitLayer`] with a
//! `Limiter<String>` of its own, all three built with one [`FleetConfig`]: at most 500
//! requests/s per origin, fleet-wide. Clients send:
//!
//! - `flooded.example`: 2,000 requests/s to each node, 12 × the limit in all;
//! - `quiet.example`: 20 requests/s spread over the nodes, far under the limit, which must
//!   always be served.
//!
//! The load starts on a Unix second, so each second of the run is one of the fleet's windows
//! (they are aligned to the Unix epoch). Each second the demo prints what every node admitted
//! and refused for the flooded origin, the fleet's sum against the limit, and how the quiet
//! origin fared; at the end, the mean fleet-wide admissions after the first two seconds and
//! each node's `fleet_status()`. The counts are the servers' own (per response status), not
//! the clients'.
//!
//! Exits with 1 if the quiet origin got a 503, if Redis cannot be reached or started, or if
//! nothing was admitted; with 2 on bad arguments. This file is the fleet: its nodes, their
//! layers and what they report; the redis-server, the load, the counts and the report are in
//! examples/support (`fleet`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::fleet::{FleetConfig, FleetStatus};
use floodgate::{layer::LimitLayer, Limiter};
use floodgate_example_support::fleet::{
    counted, drive, start_redis, summary, unix_ms, Counts, LIMIT, NODES, WARMUP_SECS, WINDOW,
};
use floodgate_example_support::origins::origin;
use floodgate_example_support::report::thousands;
use floodgate_example_support::server::{runtime, serve};
use tower::Layer;

const DEFAULT_SECS: u64 = 10;
const FLEET_JOIN_DEADLINE: Duration = Duration::from_secs(5);

const USAGE: &str = "\
usage: fleet [--redis URL] [--secs N]
  --redis URL   the Redis to sync through (also FLOODGATE_REDIS); without it the demo starts
                a redis-server of its own on a free loopback port
  --secs N      how long the load runs, in whole seconds (default 10, at least 3)";

struct Args {
    redis: Option<String>,
    secs: u64,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        redis: std::env::var("FLOODGATE_REDIS")
            .ok()
            .filter(|s| !s.trim().is_empty()),
        secs: DEFAULT_SECS,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or(format!("{name} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--redis" => args.redis = Some(value()?),
            "--secs" => {
                let v = value()?;
                args.secs = v
                    .parse()
                    .ok()
                    .filter(|&s| s > WARMUP_SECS as u64 && s <= 3600)
                    .ok_or(format!(
                        "--secs {v}: give whole seconds, from {} to 3600",
                        WARMUP_SECS + 1
                    ))?;
            }
            _ => return Err(format!("unknown argument {name:?}")),
        }
    }
    if let Some(url) = &args.redis {
        FleetConfig::new(url.clone())
            .validate()
            .map_err(|e| format!("--redis: {e}"))?;
    }
    Ok(Some(args))
}

fn main() {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("fleet: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // `demo` returns before exiting, so that its redis-server child is dropped (killed) first.
    match demo(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("fleet: {e}");
            std::process::exit(1);
        }
    }
}

/// The demo; `Ok(false)` when it ran but something it promises did not hold.
fn demo(args: &Args) -> Result<bool, String> {
    // Our own redis-server lives as long as this guard. A Ctrl-C at the terminal reaches it
    // too (it is in our process group), so it does not outlive an interrupted demo either.
    let (url, _own_redis) = match &args.redis {
        Some(url) => (url.clone(), None),
        None => {
            let redis = start_redis()?;
            (redis.url(), Some(redis))
        }
    };
    // A prefix of this run's own, so that the demo's keys and nodes never meet another
    // fleet's (or an earlier run's) on a shared Redis.
    let prefix = format!("floodgate-fleet-demo-{}-{}", std::process::id(), unix_ms());
    let config = FleetConfig::new(url.clone()).prefix(&prefix);
    let nodes = (0..NODES)
        .map(|_| {
            Limiter::<String>::builder()
                .max_rate(LIMIT, WINDOW)
                .fleet(config.clone())
                .build()
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the fleet's configuration: {e}"))?;
    println!(
        "{NODES} nodes, one limit: {LIMIT} requests/s per origin fleet-wide (windows of {WINDOW:?}, syncs every {:?}), Redis {url:?}, prefix {prefix:?}",
        config.get_sync_interval(),
    );
    wait_for_fleet(&nodes, &url)?;

    let counts = Arc::new(Counts::new(args.secs as usize));
    let runtime = runtime().map_err(|e| format!("starting tokio: {e}"))?;
    let ok = runtime.block_on(run(&nodes, &counts, args.secs))?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    let statuses: Vec<_> = nodes
        .iter()
        .map(|n| {
            n.fleet_status()
                .as_ref()
                .map_or("no fleet".into(), describe)
        })
        .collect();
    Ok(summary(&counts, &statuses) && ok)
}

/// Waits until every node has synced and sees the whole fleet, so that the first seconds of
/// the run measure the fleet rather than its start.
fn wait_for_fleet(nodes: &[Limiter<String>], url: &str) -> Result<(), String> {
    let deadline = Instant::now() + FLEET_JOIN_DEADLINE;
    loop {
        let statuses: Vec<_> = nodes.iter().filter_map(Limiter::fleet_status).collect();
        if statuses.iter().all(|s| s.connected && s.nodes >= NODES) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let why: Vec<_> = statuses
                .iter()
                .enumerate()
                .map(|(i, s)| format!("  node {}: {}", i + 1, describe(s)))
                .collect();
            return Err(format!(
                "the nodes did not all sync through Redis at {url} within {FLEET_JOIN_DEADLINE:?}:\n{}",
                why.join("\n")
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts node `i`'s server: the origins behind `LimitLayer`, and around it a count of what
/// the node answered.
async fn start_node(
    i: usize,
    limiter: &Limiter<String>,
    counts: &Arc<Counts>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let limited = LimitLayer::new(limiter.clone()).layer(tower::service_fn(origin));
    tokio::spawn(serve(listener, counted(i, limited, counts)));
    Ok(addr)
}

/// Serves the nodes, drives them for `secs` whole seconds, and prints each second as it ends.
/// `Ok(false)` if a client task failed.
async fn run(nodes: &[Limiter<String>], counts: &Arc<Counts>, secs: u64) -> Result<bool, String> {
    let mut addrs = Vec::new();
    for (i, limiter) in nodes.iter().enumerate() {
        let addr = start_node(i, limiter, counts)
            .await
            .map_err(|e| format!("starting node {}: {e}", i + 1))?;
        addrs.push(addr);
    }
    let list: Vec<_> = addrs.iter().map(ToString::to_string).collect();
    println!("nodes on {}", list.join(", "));
    Ok(drive(&addrs, counts, secs).await)
}

/// A node's `fleet_status()`, in one line.
fn describe(s: &FleetStatus) -> String {
    let age = s.last_sync_age.map_or("never synced".into(), |a| {
        format!("last sync {} ms ago", a.as_millis())
    });
    let mut line = format!(
        "{}, {} nodes seen, {age}, {} syncs, {} sync errors, {} keys synced",
        if s.connected {
            "connected"
        } else {
            "not connected"
        },
        s.nodes,
        thousands(s.syncs),
        thousands(s.sync_errors),
        thousands(s.keys_synced),
    );
    if let Some(e) = &s.last_error {
        line.push_str(&format!("; last error: {e}"));
    }
    line
}
