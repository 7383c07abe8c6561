//! floodgate in front of a real HTTP server, under a flood and a key-rotating attacker.
//!
//! ```text
//! cargo run --release --example demo            # about 10 s
//! FLOODGATE_DEMO_SECS=2 cargo run --release --example demo
//! ```
//!
//! A hyper server on 127.0.0.1 (an ephemeral port; nothing else is contacted) plays the
//! origins, chosen by the Host header, behind [`floodgate::layer::LimitLayer`]:
//!
//! - 10,000 healthy origins (`site-NNNNN.example`): answer at once, each asked a few times a
//!   second at most;
//! - one slow origin (`slow.example`): answers after 100 ms, so its requests pile up in flight;
//!   its clients back off 50 ms after a 503;
//! - one flooded origin (`flooded.example`): clients hammer it with no pause;
//! - invented origins (`<16 hex digits>.rotating.example`): an attacker rotating keys, a fresh
//!   host every two requests, so that no key ever comes near a limit.
//!
//! Clients (hyper-util's pooled keep-alive client) drive it for `FLOODGATE_DEMO_SECS` seconds
//! (default 10), a progress line each second on stderr; then the report on stdout: requests
//! and 503s per origin class, over-rejections of healthy origins, what the rotating requests
//! got, the heavy hitters the limiter found, throughput, and memory: the limiter's (fixed)
//! next to an exact per-key map's for the same keys, measured by a counting allocator.
//!
//! It exits with 1 if a healthy origin got a 503, if the limiter's size changed, or if no
//! request succeeded. The origins, the limiter and the server are shared with the soak server
//! (tools/soak: the server alone, for `scripts/soak`), in examples/support.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate::{layer::LimitLayer, HeavyHitter, Limiter, LimiterStats};
use floodgate_example_support::origins::*;
use floodgate_example_support::report::*;
use floodgate_example_support::server::*;
use floodgate_example_support::tally::*;
use floodgate_test_support::counting_alloc::{
    bytes_held_by, count_process_heap, process_bytes_held, CountingAlloc,
};
use http_body_util::{BodyExt, Empty};
use hyper::header::{HOST, RETRY_AFTER};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::Layer;

// Counted, so that the memory the report shows is measured.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const SLOW_BACKOFF: Duration = Duration::from_millis(50);
const HEALTHY_CLIENTS: usize = 48;
const SLOW_CLIENTS: usize = 32;
const FLOOD_CLIENTS: usize = 24;
const ROTATING_CLIENTS: usize = 16;
/// Requests the rotating attacker sends to each host it invents.
const REQUESTS_PER_ROTATING_HOST: u64 = 2;
/// Bounds each client loop besides the deadline.
const MAX_REQUESTS_PER_CLIENT: u64 = 5_000_000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Hosts the rotating attacker has invented so far.
static INVENTED: AtomicU64 = AtomicU64::new(0);

/// A small, fast PRNG (SplitMix64) for picking origins; one per client task.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (((self.next() >> 32) * n as u64) >> 32) as usize
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
    let mut invented = String::new();
    for n in 0..MAX_REQUESTS_PER_CLIENT {
        if Instant::now() >= deadline {
            break;
        }
        let healthy = (class == Class::Healthy).then(|| rng.below(HEALTHY_ORIGINS));
        let host = match (class, healthy) {
            (Class::Healthy, Some(i)) => healthy_host(i),
            (Class::Slow, _) => SLOW_HOST.to_owned(),
            (Class::Rotating, _) => {
                if n % REQUESTS_PER_ROTATING_HOST == 0 {
                    // 64 random bits: a host nobody has used before.
                    invented = rotating_host(rng.next());
                    INVENTED.fetch_add(1, Relaxed);
                }
                invented.clone()
            }
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
        let Ok(Some((status, retry_after))) = outcome else {
            tally.errors.fetch_add(1, Relaxed);
            continue;
        };
        tally.record(status, retry_after);
        if status == StatusCode::SERVICE_UNAVAILABLE && class == Class::Slow {
            tokio::time::sleep(SLOW_BACKOFF).await;
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().len() > 1 {
        // The server-only mode that once lived here is its own example now.
        eprintln!("usage: demo (no arguments; FLOODGATE_DEMO_SECS sets the length, default 10)\nthe server alone, for a load generator: cargo run --release -p floodgate-soak -- --help");
        std::process::exit(2);
    }
    let secs = std::env::var("FLOODGATE_DEMO_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .unwrap_or(10.0);
    demo(Duration::from_secs_f64(secs.clamp(0.1, 3600.0)))
}

/// The live heap of the whole process (server and clients), and the hosts invented by then.
fn heap_sample() -> (isize, u64) {
    (process_bytes_held(), INVENTED.load(Relaxed))
}

/// What the run leaves for the report, taken while the load was still on.
struct Run {
    addr: SocketAddr,
    elapsed: Duration,
    hitters: Vec<HeavyHitter<String>>,
    limiter_stats: LimiterStats,
    /// At the first progress tick (warmed up) and at the end.
    heap: [(isize, u64); 2],
}

/// Serves behind `limiter`, drives it with every class of client for `duration`.
async fn run(
    limiter: &Limiter<String>,
    stats: &Arc<Stats>,
    duration: Duration,
) -> std::io::Result<Run> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let service = LimitLayer::new(limiter.clone()).layer(tower::service_fn(origin));
    let server = tokio::spawn(serve(listener, service));
    eprintln!(
        "floodgate demo: serving {addr} for {:.1} s; {} healthy origins, 1 slow, 1 flooded, and a rotating attacker",
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
        (Class::Rotating, ROTATING_CLIENTS),
    ];
    for (class, n) in classes {
        for i in 0..n {
            let seed = 0x5EED_0000 + (clients.len() as u64) * 7919 + i as u64;
            let job = client_loop(
                client.clone(),
                addr,
                class,
                seed,
                deadline,
                Arc::clone(stats),
            );
            clients.push(tokio::spawn(job));
        }
    }

    // Progress, once a second.
    let tty = std::io::stderr().is_terminal();
    // On a terminal, one line rewritten in place; elsewhere, a line each second.
    let (line_start, line_end) = if tty { ("\r", "\x1b[K") } else { ("", "\n") };
    let (mut last, mut warm) = (0, None);
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    while Instant::now() + Duration::from_millis(50) < deadline {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::time::sleep_until(deadline.into()) => break,
        }
        warm.get_or_insert_with(heap_sample);
        let total = stats.total(|t| t.requests.load(Relaxed));
        let line = format!(
            "{:>4.0} s  {:>7} req/s  {:>10} requests  503s: flooded {:>9}  slow {:>7}  healthy {}  invented hosts {:>8}  heap {}",
            start.elapsed().as_secs_f64(),
            thousands(total - last),
            thousands(total),
            thousands(stats.flooded.rejected()),
            thousands(stats.slow.rejected()),
            thousands(stats.healthy.rejected()),
            thousands(INVENTED.load(Relaxed)),
            kib(process_bytes_held().max(0) as usize),
        );
        last = total;
        eprint!("{line_start}{line}{line_end}");
    }
    // What the limiter is limiting now, while the flood is still on.
    let end = heap_sample();
    let (hitters, limiter_stats) = (limiter.heavy_hitters(), limiter.stats());
    for c in clients {
        let _ = c.await;
    }
    let elapsed = start.elapsed();
    if tty {
        eprintln!();
    }
    server.abort();
    let heap = [warm.unwrap_or(end), end];
    Ok(Run {
        addr,
        elapsed,
        hitters,
        limiter_stats,
        heap,
    })
}

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

/// The heap bytes of a `HashMap` and of a `DashMap` holding `keys`, each built on this
/// thread alone and dropped once measured.
fn exact_map_bytes(keys: &[String]) -> (usize, usize) {
    let entries = || keys.iter().map(|key| (key.clone(), ExactCounts::default()));
    let hash_map = bytes_held_by(|| entries().collect::<HashMap<_, _>>()).1;
    let dash_map = bytes_held_by(|| entries().collect::<dashmap::DashMap<_, _>>()).1;
    (hash_map, dash_map)
}

/// The self-driving demo: server and clients in one process, the report at the end.
fn demo(duration: Duration) -> Result<(), Box<dyn std::error::Error>> {
    count_process_heap();
    let (limiter, limiter_heap) = build_limiter()?;
    let limiter_size = limiter.memory_bytes();
    let stats = Arc::new(Stats::default());
    let runtime = runtime()?;
    let run = runtime.block_on(run(&limiter, &stats, duration))?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    let limiter_size_after = limiter.memory_bytes();

    // The keys an exact per-key map would hold for the same traffic: every origin that was
    // sent a request, the invented ones too (same-length names stand in for those).
    let invented = INVENTED.load(Relaxed);
    let mut keys: Vec<String> = (0..HEALTHY_ORIGINS)
        .filter(|&i| stats.healthy_requests[i].load(Relaxed) > 0)
        .map(healthy_host)
        .collect();
    keys.extend([SLOW_HOST.to_owned(), FLOODED_HOST.to_owned()]);
    keys.extend((0..invented).map(rotating_host));
    let (hash_map_bytes, dash_map_bytes) = exact_map_bytes(&keys);

    // ---- The report ----
    let (secs, [warm, end]) = (run.elapsed.as_secs_f64(), run.heap);
    let total = stats.total(|t| t.requests.load(Relaxed));
    let clients = HEALTHY_CLIENTS + SLOW_CLIENTS + FLOOD_CLIENTS + ROTATING_CLIENTS;
    println!();
    println!(
        "floodgate demo: {secs:.1} s of HTTP/1.1 over loopback ({}), {clients} clients, {SERVER_THREADS} server threads",
        run.addr
    );
    print_limits(&run.limiter_stats);
    println!();
    print_classes(&stats, Some(invented));
    println!();

    println!(
        "over-rejections of healthy origins: {} (expected 0, with the flood and the rotating attacker on: the busiest healthy origin sent {} requests in the whole run and had at most {} in flight at once, under both limits)",
        thousands(stats.healthy.rejected()),
        thousands(u64::from(stats.busiest_healthy())),
        stats.healthy_peak_inflight.load(Relaxed),
    );
    let [sent, ok, ..] = stats.rotating.counts();
    println!(
        "rotating attacker: {} requests to {} invented hosts ({REQUESTS_PER_ROTATING_HOST} each): {} admitted (200 OK), {} refused (503).\n  \
         Admitted, as they should be: each invented host is one more origin far under its limits, so a per-origin\n  \
         limiter lets it through (to stop a client like this, limit it by its own address, not by the Host it names).\n  \
         What the limiter owes under it: no over-rejection of healthy origins (above) and fixed memory (below).",
        thousands(sent),
        thousands(invented),
        thousands(ok),
        thousands(stats.rotating.rejected()),
    );
    println!(
        "throughput: {} requests/s ({} requests in {secs:.1} s, all classes, client and server sharing 2 cores)",
        thousands((total as f64 / secs.max(1e-9)) as u64),
        thousands(total),
    );
    println!();

    print_heavy_hitters(&run.hitters, &run.limiter_stats);
    println!();

    let per_key = |b: usize| b as f64 / keys.len().max(1) as f64;
    println!(
        "memory for {} distinct origins, {} of them invented (heap bytes held, counted by a global allocator):",
        thousands(keys.len() as u64),
        thousands(invented),
    );
    println!(
        "  floodgate Limiter                  {:>12}  fixed: memory_bytes() {} at the start, {} at the end",
        kib(limiter_heap),
        kib(limiter_size),
        kib(limiter_size_after),
    );
    println!(
        "  HashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
        kib(hash_map_bytes),
        per_key(hash_map_bytes)
    );
    println!(
        "  DashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
        kib(dash_map_bytes),
        per_key(dash_map_bytes)
    );
    println!(
        "  the whole process, live heap       {:>12}  at the end; {} at 1 s ({:+.1} KiB while {} more hosts were invented)",
        kib(end.0.max(0) as usize),
        kib(warm.0.max(0) as usize),
        (end.0 - warm.0) as f64 / 1024.0,
        thousands(end.1 - warm.1),
    );
    println!(
        "  (ExactCounts = in-flight count + sliding window, {} B. The limiter is the same size for any number of origins; beyond",
        std::mem::size_of::<ExactCounts>()
    );
    println!(
        "   that it holds only the keys of promoted origins, here {}; the maps grow by every new origin.)",
        run.limiter_stats.promoted,
    );
    println!();

    let failure = if stats.healthy.rejected() > 0 {
        "a healthy origin got a 503 (an over-rejection)"
    } else if limiter_size_after != limiter_size {
        "the limiter's memory_bytes() changed during the run"
    } else if stats.total(|t| t.ok.load(Relaxed)) == 0 {
        "no request succeeded"
    } else {
        return Ok(());
    };
    eprintln!("demo failed: {failure}");
    std::process::exit(1);
}
