//! floodgate in front of a real HTTP server, under a flood.
//!
//! ```text
//! cargo run --release --example demo            # about 10 s
//! FLOODGATE_DEMO_SECS=2 cargo run --release --example demo
//! ```
//!
//! A hyper server on 127.0.0.1 (an ephemeral port; nothing else is contacted) plays 10,002
//! origins, chosen by the Host header, behind [`floodgate::LimitLayer`]:
//!
//! - 10,000 healthy origins (`site-NNNNN.example`): answer at once, each asked a few times a
//!   second at most;
//! - one slow origin (`slow.example`): answers after 100 ms, so its requests pile up in flight;
//!   its clients back off 50 ms after a 503;
//! - one flooded origin (`flooded.example`): clients hammer it with no pause.
//!
//! Clients (hyper-util's pooled keep-alive client) drive it for `FLOODGATE_DEMO_SECS` seconds
//! (default 10), a progress line each second on stderr; then the report on stdout: requests
//! and 503s per origin class, over-rejections of healthy origins (expected 0), the heavy
//! hitters the limiter found, throughput, and the limiter's memory next to an exact per-key
//! map's for the same keys, measured by a counting allocator.
//!
//! The origins, the limiter and the server are shared with examples/soak_server.rs (the
//! server alone, for `scripts/soak`), in examples/common.

mod common;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::counting::bytes_held_by;
use common::*;
use floodgate::LimitLayer;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HOST, RETRY_AFTER};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::Layer;

const SLOW_BACKOFF: Duration = Duration::from_millis(50);
const HEALTHY_CLIENTS: usize = 48;
const SLOW_CLIENTS: usize = 32;
const FLOOD_CLIENTS: usize = 24;
/// Bounds each client loop besides the deadline.
const MAX_REQUESTS_PER_CLIENT: u64 = 5_000_000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Distinct hostnames of the key-rotating flood the exact map is measured for.
const ROTATING_ORIGINS: usize = 1_000_000;

// ---------------------------------------------------------------------------------------------
// The demo's clients.

/// A small, fast PRNG (SplitMix64) for picking healthy origins; one per client task.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (((z >> 32) * n as u64) >> 32) as usize
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

/// One client: requests for its class until the deadline, over keep-alive connections.
async fn client_loop(
    client: HttpClient,
    addr: SocketAddr,
    class: Class,
    seed: u64,
    deadline: Instant,
    stats: Arc<Stats>,
) {
    let uri: hyper::Uri = format!("http://{addr}/").parse().expect("a valid URI");
    let mut rng = SplitMix(seed);
    let tally = stats.tally(class);
    for _ in 0..MAX_REQUESTS_PER_CLIENT {
        if Instant::now() >= deadline {
            break;
        }
        let healthy = (class == Class::Healthy).then(|| rng.below(HEALTHY_ORIGINS));
        let host = match (class, healthy) {
            (Class::Healthy, Some(i)) => healthy_host(i),
            (Class::Slow, _) => SLOW_HOST.to_owned(),
            _ => FLOODED_HOST.to_owned(),
        };
        if let Some(i) = healthy {
            stats.healthy_start(i);
        }
        let req = Request::get(uri.clone())
            .header(HOST, host)
            .body(Empty::new())
            .expect("a valid request");
        tally.requests.fetch_add(1, Relaxed);
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let response = client.request(req).await.ok()?;
            let status = response.status();
            let retry_after = response.headers().contains_key(RETRY_AFTER);
            response.into_body().collect().await.ok()?;
            Some((status, retry_after))
        })
        .await;
        if let Some(i) = healthy {
            stats.healthy_end(i);
        }
        match outcome {
            Ok(Some((status, retry_after))) => {
                tally.record(status, retry_after);
                if status == StatusCode::SERVICE_UNAVAILABLE && class == Class::Slow {
                    tokio::time::sleep(SLOW_BACKOFF).await;
                }
            }
            _ => {
                tally.errors.fetch_add(1, Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

/// An exact per-key map as a proxy would keep it for the same limits: per origin, the
/// requests in flight and a sliding window (window id, previous and current counts).
#[derive(Default)]
#[allow(dead_code)] // built to be measured, not read
struct ExactCounts {
    inflight: AtomicI64,
    window: AtomicU64,
    previous: AtomicU64,
    current: AtomicU64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().len() > 1 {
        // The server-only mode that once lived here is its own example now.
        eprintln!("usage: demo (no arguments; FLOODGATE_DEMO_SECS sets the length, default 10)\nthe server alone, for a load generator: cargo run --release --example soak_server -- --help");
        std::process::exit(2);
    }
    demo()
}

fn demo_duration() -> Duration {
    let secs = std::env::var("FLOODGATE_DEMO_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .unwrap_or(10.0);
    Duration::from_secs_f64(secs.clamp(0.1, 3600.0))
}

/// The self-driving demo: server and clients in one process, the report at the end.
fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let duration = demo_duration();
    let (limiter, limiter_heap) = build_limiter()?;
    let stats = Arc::new(Stats::new());

    let runtime = runtime()?;
    let (addr, elapsed, hitters, limiter_stats) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let service = LimitLayer::new(limiter.clone()).layer(tower::service_fn(origin));
        let server = tokio::spawn(serve(listener, service));

        eprintln!(
            "floodgate demo: serving 127.0.0.1:{} for {:.1} s; {} healthy origins, 1 slow, 1 flooded",
            addr.port(),
            duration.as_secs_f64(),
            thousands(HEALTHY_ORIGINS as u64),
        );
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build_http();
        let start = Instant::now();
        let deadline = start + duration;
        let mut clients = Vec::new();
        let classes = [
            (Class::Healthy, HEALTHY_CLIENTS),
            (Class::Slow, SLOW_CLIENTS),
            (Class::Flooded, FLOOD_CLIENTS),
        ];
        for (class, n) in classes {
            for i in 0..n {
                let seed = 0x5EED_0000 + (clients.len() as u64) * 7919 + i as u64;
                clients.push(tokio::spawn(client_loop(
                    client.clone(),
                    addr,
                    class,
                    seed,
                    deadline,
                    Arc::clone(&stats),
                )));
            }
        }

        // Progress, once a second.
        let tty = std::io::stderr().is_terminal();
        let mut last = 0;
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        while Instant::now() + Duration::from_millis(50) < deadline {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tokio::time::sleep_until(deadline.into()) => break,
            }
            let total = stats.total(|t| t.requests.load(Relaxed));
            let line = format!(
                "{:>4.0} s  {:>7} req/s  {:>10} requests  503s: flooded {:>9}  slow {:>7}  healthy {}",
                start.elapsed().as_secs_f64(),
                thousands(total - last),
                thousands(total),
                thousands(stats.flooded.rejected()),
                thousands(stats.slow.rejected()),
                thousands(stats.healthy.rejected()),
            );
            last = total;
            let mut err = std::io::stderr().lock();
            let _ = if tty {
                write!(err, "\r{line}\x1b[K")
            } else {
                writeln!(err, "{line}")
            };
            let _ = err.flush();
        }
        // What the limiter is limiting now, while the flood is still on.
        let hitters = limiter.heavy_hitters();
        let limiter_stats = limiter.stats();
        for c in clients {
            let _ = c.await;
        }
        let elapsed = start.elapsed();
        if tty {
            eprintln!();
        }
        server.abort();
        Ok::<_, std::io::Error>((addr, elapsed, hitters, limiter_stats))
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));

    // The exact per-key maps a proxy would need for the same traffic: one entry per origin
    // that sent a request. Built here, on this thread alone, after the run.
    let mut keys: Vec<String> = (0..HEALTHY_ORIGINS)
        .filter(|&i| stats.healthy_requests[i].load(Relaxed) > 0)
        .map(healthy_host)
        .collect();
    keys.extend([SLOW_HOST.to_owned(), FLOODED_HOST.to_owned()]);
    let key_count = keys.len();
    let (hash_map, hash_map_bytes) = bytes_held_by(|| {
        let mut map: HashMap<String, ExactCounts> = HashMap::new();
        for key in &keys {
            map.entry(key.clone()).or_default();
        }
        map
    });
    let (dash_map, dash_map_bytes) = bytes_held_by(|| {
        let map: dashmap::DashMap<String, ExactCounts> = dashmap::DashMap::new();
        for key in &keys {
            map.entry(key.clone()).or_default();
        }
        map
    });
    drop((hash_map, dash_map));
    // And for a flood of rotating hostnames (an attacker inventing a new origin per request).
    let (rotating_map, rotating_bytes) = bytes_held_by(|| {
        let mut map: HashMap<String, ExactCounts> = HashMap::new();
        for i in 0..ROTATING_ORIGINS {
            map.entry(format!("r{i:07}.flood.example")).or_default();
        }
        map
    });
    drop(rotating_map);

    // ---- The report ----
    let secs = elapsed.as_secs_f64();
    let total = stats.total(|t| t.requests.load(Relaxed));
    println!();
    println!(
        "floodgate demo: {secs:.1} s of HTTP/1.1 over loopback (127.0.0.1:{}), {} clients, {SERVER_THREADS} server threads",
        addr.port(),
        HEALTHY_CLIENTS + SLOW_CLIENTS + FLOOD_CLIENTS,
    );
    print_limits(&limiter_stats);
    println!();
    print_classes(&stats);
    println!();

    println!(
        "over-rejections of healthy origins: {} (expected 0: the busiest healthy origin sent {} requests in the whole run and had at most {} in flight at once, under both limits)",
        thousands(stats.healthy.rejected()),
        thousands(u64::from(stats.busiest_healthy())),
        stats.healthy_peak_inflight.load(Relaxed),
    );
    println!(
        "throughput: {} requests/s ({} requests in {secs:.1} s, all classes, client and server sharing 2 cores)",
        thousands((total as f64 / secs.max(1e-9)) as u64),
        thousands(total),
    );
    println!();

    print_heavy_hitters(&hitters, &limiter_stats);
    println!();

    let per_key = |b: usize| b as f64 / key_count.max(1) as f64;
    println!(
        "memory for {} distinct origins (heap bytes held, counted by a global allocator around each build):",
        thousands(key_count as u64)
    );
    println!(
        "  floodgate Limiter                  {:>12}  fixed at construction; memory_bytes() says {}",
        kib(limiter_heap),
        kib(limiter.memory_bytes()),
    );
    println!(
        "  HashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
        kib(hash_map_bytes),
        per_key(hash_map_bytes),
    );
    println!(
        "  DashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
        kib(dash_map_bytes),
        per_key(dash_map_bytes),
    );
    println!(
        "  same HashMap, 1,000,000 origins    {:>12}  a flood of invented hostnames (measured too)",
        kib(rotating_bytes),
    );
    println!(
        "  (ExactCounts = in-flight count + sliding window, {} B. The limiter is the same size for any number of",
        std::mem::size_of::<ExactCounts>()
    );
    println!(
        "   origins; beyond that it holds only the keys of promoted origins, here {}; the maps grow by every new origin.)",
        limiter_stats.promoted,
    );
    println!();

    if stats.total(|t| t.ok.load(Relaxed)) == 0 {
        eprintln!("no request succeeded: the demo did not work");
        std::process::exit(1);
    }
    Ok(())
}
