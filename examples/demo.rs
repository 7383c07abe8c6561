//! floodgate in front of a real HTTP server, under a flood.
//!
//! ```text
//! cargo run --release --example demo            # about 10 s
//! FLOODGATE_DEMO_SECS=2 cargo run --release --example demo
//! cargo run --release --example demo -- --serve --port 0 --secs 120 [--no-layer]
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
//! With `--serve`, it runs the server alone, for an outside load generator (`scripts/soak`
//! drives it with wrk): it prints `listening on http://127.0.0.1:PORT` on stdout, serves
//! until `--secs` (default 60) have passed, a line arrives on stdin, or SIGINT/SIGTERM, and
//! then prints the server's own report: requests and 503s per origin class, as the server
//! answered them; over-rejections of healthy origins; the heavy hitters; and the process's
//! memory (resident set, and live heap bytes counted by the global allocator) sampled every
//! `--sample-secs` (default 5), to show that it stays flat. The report ends with one
//! `summary key=value …` line for scripts. `--no-layer` serves the same origins without the
//! `LimitLayer`, to compare latencies.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate::{HeavyHitter, LimitLayer, Limiter, LimiterStats, Reason, Rejected};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{HOST, RETRY_AFTER};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tower::{Layer, ServiceExt};

const HEALTHY_ORIGINS: usize = 10_000;
const SLOW_HOST: &str = "slow.example";
const FLOODED_HOST: &str = "flooded.example";
const SLOW_RESPONSE: Duration = Duration::from_millis(100);
const SLOW_BACKOFF: Duration = Duration::from_millis(50);

const MAX_INFLIGHT: isize = 16;
const MAX_RATE: isize = 1000; // per second
/// The most requests per second the limiter is sized for: this demo's own volume (about
/// 100,000 a second at best, client and server sharing two cores), with room to spare.
const PEAK_RATE: u64 = 250_000;

const SERVER_THREADS: usize = 2;
const HEALTHY_CLIENTS: usize = 48;
const SLOW_CLIENTS: usize = 32;
const FLOOD_CLIENTS: usize = 24;
/// Bounds each client loop besides the deadline.
const MAX_REQUESTS_PER_CLIENT: u64 = 5_000_000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Distinct hostnames of the key-rotating flood the exact map is measured for.
const ROTATING_ORIGINS: usize = 1_000_000;

// ---------------------------------------------------------------------------------------------
// A global allocator that counts, per thread, the bytes live (allocated minus freed), so the
// memory of a structure built on one thread can be read off exactly; and, once
// `count_process_heap` has been called, the bytes live in the whole process. The one copy of
// it is tests/common/alloc.rs, shared with the tests and benches.

#[path = "../tests/common/alloc.rs"]
mod counting;

use counting::{bytes_held_by, count_process_heap};

#[global_allocator]
static GLOBAL: counting::CountingAlloc = counting::CountingAlloc;

// ---------------------------------------------------------------------------------------------
// Origins, and what was asked of them and answered.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Healthy,
    Slow,
    Flooded,
    /// A Host that is none of the above (seen only by `--serve`, from a misconfigured client).
    Other,
}

/// The requests of one class and their outcomes: as its clients saw them (the demo), or as
/// the server answered them (`--serve`).
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    ok: AtomicU64,
    /// 503 for the rate limit (clients tell it by its `Retry-After`).
    rejected_rate: AtomicU64,
    /// 503 for the in-flight limit.
    rejected_inflight: AtomicU64,
    /// Anything else: other statuses, and for clients transport errors and timeouts.
    errors: AtomicU64,
}

impl Tally {
    fn record(&self, status: StatusCode, rate_limited: bool) {
        let counter = match status {
            StatusCode::OK => &self.ok,
            StatusCode::SERVICE_UNAVAILABLE if rate_limited => &self.rejected_rate,
            StatusCode::SERVICE_UNAVAILABLE => &self.rejected_inflight,
            _ => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Requests, 200s, 503s for the rate, 503s for in-flight, errors.
    fn counts(&self) -> [u64; 5] {
        let counters = [
            &self.requests,
            &self.ok,
            &self.rejected_rate,
            &self.rejected_inflight,
            &self.errors,
        ];
        counters.map(|n| n.load(Relaxed))
    }

    fn rejected(&self) -> u64 {
        self.rejected_rate.load(Relaxed) + self.rejected_inflight.load(Relaxed)
    }
}

struct Stats {
    healthy: Tally,
    slow: Tally,
    flooded: Tally,
    other: Tally,
    /// Per healthy origin: requests sent, and in flight now / at most, to show that each
    /// stayed far under both limits.
    healthy_requests: Vec<AtomicU32>,
    healthy_inflight: Vec<AtomicI64>,
    healthy_peak_inflight: AtomicI64,
}

impl Stats {
    fn new() -> Self {
        Stats {
            healthy: Tally::default(),
            slow: Tally::default(),
            flooded: Tally::default(),
            other: Tally::default(),
            healthy_requests: (0..HEALTHY_ORIGINS).map(|_| AtomicU32::new(0)).collect(),
            healthy_inflight: (0..HEALTHY_ORIGINS).map(|_| AtomicI64::new(0)).collect(),
            healthy_peak_inflight: AtomicI64::new(0),
        }
    }

    fn tally(&self, class: Class) -> &Tally {
        match class {
            Class::Healthy => &self.healthy,
            Class::Slow => &self.slow,
            Class::Flooded => &self.flooded,
            Class::Other => &self.other,
        }
    }

    fn total(&self, f: impl Fn(&Tally) -> u64) -> u64 {
        f(&self.healthy) + f(&self.slow) + f(&self.flooded) + f(&self.other)
    }

    /// A request for healthy origin `i` starts.
    fn healthy_start(&self, i: usize) {
        self.healthy_requests[i].fetch_add(1, Relaxed);
        let now = self.healthy_inflight[i].fetch_add(1, Relaxed) + 1;
        self.healthy_peak_inflight.fetch_max(now, Relaxed);
    }

    /// A request for healthy origin `i` has its answer.
    fn healthy_end(&self, i: usize) {
        self.healthy_inflight[i].fetch_sub(1, Relaxed);
    }

    /// Requests sent to the busiest healthy origin.
    fn busiest_healthy(&self) -> u32 {
        let requests = self.healthy_requests.iter().map(|n| n.load(Relaxed));
        requests.max().unwrap_or(0)
    }
}

fn healthy_host(i: usize) -> String {
    format!("site-{i:05}.example")
}

/// The class of a Host header value, and for a healthy origin its number.
fn classify(host: &[u8]) -> (Class, Option<usize>) {
    if host == SLOW_HOST.as_bytes() {
        return (Class::Slow, None);
    }
    if host == FLOODED_HOST.as_bytes() {
        return (Class::Flooded, None);
    }
    let healthy = std::str::from_utf8(host)
        .ok()
        .and_then(|h| h.strip_prefix("site-")?.strip_suffix(".example"))
        .filter(|n| n.len() == 5)
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&i| i < HEALTHY_ORIGINS);
    match healthy {
        Some(i) => (Class::Healthy, Some(i)),
        None => (Class::Other, None),
    }
}

/// The origins behind the limiter: the slow one takes its time, everyone else answers at once.
async fn origin(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let slow = req
        .headers()
        .get(HOST)
        .is_some_and(|h| h.as_bytes() == SLOW_HOST.as_bytes());
    if slow {
        tokio::time::sleep(SLOW_RESPONSE).await;
    }
    Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}

// ---------------------------------------------------------------------------------------------
// The server, shared by both modes.

/// The demo's limiter, and the heap bytes it holds (read off the counting allocator).
fn build_limiter() -> Result<(Limiter<String>, usize), floodgate::ConfigError> {
    // The shared ticker thread starts with the first rate limit; start it before measuring,
    // so the measurement is the limiter's alone.
    drop(
        Limiter::<String>::builder()
            .max_rate(1, Duration::from_secs(1))
            .build()?,
    );
    let (limiter, heap) = bytes_held_by(|| {
        Limiter::<String>::builder()
            .max_inflight(MAX_INFLIGHT)
            .max_rate(MAX_RATE, Duration::from_secs(1))
            .peak_rate(PEAK_RATE)
            .build()
    });
    Ok((limiter?, heap))
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_THREADS)
        .enable_all()
        .build()
}

/// The server: accepts on `listener` and serves each connection with a clone of `service`.
async fn serve<S, B>(listener: tokio::net::TcpListener, service: S)
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

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
// Reporting, shared by both modes.

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

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn kib(bytes: usize) -> String {
    if bytes < 10 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

fn print_limits(limiter_stats: &LimiterStats) {
    println!(
        "limits per origin: {MAX_INFLIGHT} in flight, {MAX_RATE} requests/s (sliding window); sketches sized for {PEAK_RATE} requests/s, exact stage {} keys",
        limiter_stats.exact_capacity,
    );
}

/// Requests and their outcomes per origin class.
fn print_classes(stats: &Stats) {
    let row = |name: &str, origins: &str, counts: [u64; 5]| {
        let [requests, ok, rate, inflight, errors] = counts.map(thousands);
        println!(
            "{name:<22} {origins:>8} {requests:>11} {ok:>11} {rate:>10} {inflight:>14} {errors:>7}"
        );
    };
    println!(
        "{:<22} {:>8} {:>11} {:>11} {:>10} {:>14} {:>7}",
        "origin class", "origins", "requests", "200 OK", "503 rate", "503 in-flight", "errors"
    );
    let mut total = [0; 5];
    let mut rows = vec![
        ("healthy", thousands(HEALTHY_ORIGINS as u64), &stats.healthy),
        ("slow (100 ms)", "1".into(), &stats.slow),
        ("flooded", "1".into(), &stats.flooded),
    ];
    if stats.other.requests.load(Relaxed) > 0 {
        rows.push(("other hosts", "-".into(), &stats.other));
    }
    for (name, origins, t) in rows {
        let counts = t.counts();
        row(name, &origins, counts);
        for (sum, n) in total.iter_mut().zip(counts) {
            *sum += n;
        }
    }
    row("total", &thousands(HEALTHY_ORIGINS as u64 + 2), total);
}

fn print_heavy_hitters(hitters: &[HeavyHitter<String>], limiter_stats: &LimiterStats) {
    println!("heavy hitters the limiter found (its exact stage, at the end of the run):");
    println!(
        "  {:<22} {:>10} {:>14} {:>16}",
        "key", "in flight", "requests/s", "rejected"
    );
    for h in hitters.iter().take(10) {
        println!(
            "  {:<22} {:>10} {:>14} {:>16}",
            h.key,
            h.inflight.map_or("-".into(), |n| n.to_string()),
            h.rate.map_or("-".into(), |r| thousands(r.round() as u64)),
            thousands(h.rejected),
        );
    }
    if hitters.len() > 10 {
        println!("  … and {} more", hitters.len() - 10);
    }
    println!(
        "  (promotions so far {}, keys in the exact stage now {}, decisions by the sketch alone because the exact stage was full {})",
        thousands(limiter_stats.promotions),
        limiter_stats.promoted,
        thousands(limiter_stats.exact_full),
    );
}

// ---------------------------------------------------------------------------------------------

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        return demo();
    }
    match ServeOptions::parse(&args) {
        Ok(Some(options)) => serve_mode(&options),
        Ok(None) => {
            println!("{USAGE}");
            Ok(())
        }
        Err(message) => {
            eprintln!("demo: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
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

// ---------------------------------------------------------------------------------------------
// `--serve`: the server alone, for an outside load generator, and the server's own report.

const USAGE: &str = "usage: demo                        the self-driving demo (FLOODGATE_DEMO_SECS, default 10)
       demo --serve [--port N] [--secs S] [--sample-secs S] [--no-layer]
                                   the server alone on 127.0.0.1:N (default 0: any free port),
                                   until S seconds (default 60), a line on stdin, or SIGINT/SIGTERM";

struct ServeOptions {
    port: u16,
    duration: Duration,
    sample_every: Duration,
    layer: bool,
}

impl ServeOptions {
    /// The options, or `None` for `--help`.
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut options = ServeOptions {
            port: 0,
            duration: Duration::from_secs(60),
            sample_every: Duration::from_secs(5),
            layer: true,
        };
        let mut serve = false;
        let mut args = args.iter();
        let secs = |value: Option<&String>, name: &str| {
            value
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 1.0 && *s <= 86_400.0)
                .map(Duration::from_secs_f64)
                .ok_or(format!("{name} wants a number of seconds, 1 to 86400"))
        };
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--serve" => serve = true,
                "--no-layer" => options.layer = false,
                "--port" => {
                    options.port = args
                        .next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--port wants a port number, 0 for any free one")?;
                }
                "--secs" => options.duration = secs(args.next(), "--secs")?,
                "--sample-secs" => options.sample_every = secs(args.next(), "--sample-secs")?,
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if !serve {
            return Err("options other than --serve need --serve".into());
        }
        Ok(Some(options))
    }
}

/// Set by SIGINT, SIGTERM or a line on stdin: stop serving and report.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // A second signal while the report is being written: leave at once.
    if STOP.swap(true, Relaxed) {
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Sets `STOP` on SIGINT, SIGTERM, or a line on stdin (end of input is not a request to stop:
/// a server started with stdin closed or from /dev/null runs on).
fn stop_on_signal_or_stdin() {
    let handler = on_signal as extern "C" fn(libc::c_int);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only swaps an atomic and calls `_exit`, both async-signal-safe.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
    std::thread::spawn(|| {
        let mut line = String::new();
        if matches!(std::io::stdin().read_line(&mut line), Ok(n) if n > 0) {
            STOP.store(true, Relaxed);
        }
    });
}

/// `inner`, with every request and every answer counted in `stats` by origin class, as the
/// server sees them: a load generator keeps no per-origin counts.
fn counted<S, B>(
    inner: S,
    stats: Arc<Stats>,
) -> impl tower::Service<
    Request<Incoming>,
    Response = Response<B>,
    Error = Infallible,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    tower::service_fn(move |req: Request<Incoming>| {
        let inner = inner.clone();
        let stats = Arc::clone(&stats);
        async move {
            let host = req.headers().get(HOST).map_or(&b""[..], |h| h.as_bytes());
            let (class, healthy) = classify(host);
            let tally = stats.tally(class);
            tally.requests.fetch_add(1, Relaxed);
            if let Some(i) = healthy {
                stats.healthy_start(i);
            }
            let response = inner.oneshot(req).await;
            if let Some(i) = healthy {
                stats.healthy_end(i);
            }
            let response = response?;
            let reason = response.extensions().get::<Rejected>().map(|r| r.reason);
            tally.record(response.status(), reason == Some(Reason::Rate));
            Ok(response)
        }
    })
}

/// The process's memory at one moment.
struct Sample {
    at: Duration,
    requests: u64,
    /// Resident set size, from /proc/self/statm.
    rss: Option<usize>,
    /// Heap bytes live, from the counting allocator.
    heap: isize,
}

impl Sample {
    fn take(start: Instant, stats: &Stats) -> Self {
        Sample {
            at: start.elapsed(),
            requests: stats.total(|t| t.requests.load(Relaxed)),
            rss: resident_bytes(),
            heap: counting::process_bytes_held(),
        }
    }
}

fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: `sysconf` only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * usize::try_from(page).ok()?)
}

/// What the server saw while it served.
struct Watch {
    samples: Vec<Sample>,
    /// The most requests one healthy origin got within one second (whole seconds since start).
    busiest_second: u32,
    stopped_by: &'static str,
}

/// Serves until the deadline or `STOP`; meanwhile samples memory every `sample_every` and
/// the healthy origins' requests every second.
async fn watch(stats: &Stats, options: &ServeOptions, start: Instant) -> Watch {
    const SECOND: Duration = Duration::from_secs(1);
    let deadline = start + options.duration;
    let mut samples = vec![Sample::take(start, stats)];
    let mut seen = vec![0u32; HEALTHY_ORIGINS];
    let mut busiest_second = 0;
    let (mut next_second, mut next_sample) = (start + SECOND, start + options.sample_every);
    loop {
        let now = Instant::now();
        let stopped_by = if STOP.load(Relaxed) {
            Some("a signal or a line on stdin")
        } else {
            (now >= deadline).then_some("the end of --secs")
        };
        if now >= next_second || stopped_by.is_some() {
            for (seen, requests) in seen.iter_mut().zip(&stats.healthy_requests) {
                let requests = requests.load(Relaxed);
                busiest_second = busiest_second.max(requests - *seen);
                *seen = requests;
            }
            next_second += SECOND;
        }
        if now >= next_sample || stopped_by.is_some() {
            let sample = Sample::take(start, stats);
            let previous = samples.last().map_or(0, |s| s.requests);
            eprintln!(
                "{:>6.0} s  {:>12} requests  {:>8} req/s  RSS {:>10}  heap {:>10}  503s: flooded {} slow {} healthy {}",
                sample.at.as_secs_f64(),
                thousands(sample.requests),
                thousands(
                    ((sample.requests - previous) as f64 / options.sample_every.as_secs_f64())
                        as u64
                ),
                sample.rss.map_or("?".into(), kib),
                kib(sample.heap.max(0) as usize),
                thousands(stats.flooded.rejected()),
                thousands(stats.slow.rejected()),
                thousands(stats.healthy.rejected()),
            );
            samples.push(sample);
            next_sample += options.sample_every;
        }
        if let Some(stopped_by) = stopped_by {
            return Watch {
                samples,
                busiest_second,
                stopped_by,
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn serve_mode(options: &ServeOptions) -> Result<(), Box<dyn std::error::Error>> {
    count_process_heap();
    stop_on_signal_or_stdin();
    let limiter = match options.layer {
        true => Some(build_limiter()?.0),
        false => None,
    };
    let stats = Arc::new(Stats::new());

    let runtime = runtime()?;
    let (addr, elapsed, watched, limited) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port)).await?;
        let addr = listener.local_addr()?;
        let origins = tower::service_fn(origin);
        let server = match &limiter {
            Some(limiter) => {
                let service = LimitLayer::new(limiter.clone()).layer(origins);
                tokio::spawn(serve(listener, counted(service, Arc::clone(&stats))))
            }
            None => tokio::spawn(serve(listener, counted(origins, Arc::clone(&stats)))),
        };
        println!("listening on http://{addr}");
        eprintln!(
            "floodgate demo server on http://{addr}, {}, for at most {:.0} s (a line on stdin or SIGINT ends it sooner); Host: site-00000.example … site-{:05}.example, {SLOW_HOST}, {FLOODED_HOST}",
            if limiter.is_some() { "LimitLayer on" } else { "no LimitLayer" },
            options.duration.as_secs_f64(),
            HEALTHY_ORIGINS - 1,
        );
        let start = Instant::now();
        let watched = watch(&stats, options, start).await;
        let elapsed = start.elapsed();
        // What the limiter is limiting now, before the connections go.
        let limited = limiter.as_ref().map(|l| (l.heavy_hitters(), l.stats()));
        server.abort();
        Ok::<_, std::io::Error>((addr, elapsed, watched, limited))
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));

    // ---- The report ----
    let secs = elapsed.as_secs_f64();
    let total = stats.total(|t| t.requests.load(Relaxed));
    println!();
    println!(
        "floodgate demo server: {secs:.1} s on {addr}, {}, {SERVER_THREADS} server threads; stopped by {}",
        if limiter.is_some() { "LimitLayer on" } else { "no LimitLayer (same origins, nothing limited)" },
        watched.stopped_by,
    );
    if let Some((_, limiter_stats)) = &limited {
        print_limits(limiter_stats);
    }
    println!();
    println!("every request the server answered, by the class of its Host (errors: statuses other than 200 and 503):");
    print_classes(&stats);
    println!();
    println!(
        "over-rejections of healthy origins: {} (expected 0: the busiest healthy origin got {} requests in its busiest second, {} in the whole run, and had at most {} in flight at once)",
        thousands(stats.healthy.rejected()),
        thousands(u64::from(watched.busiest_second)),
        thousands(u64::from(stats.busiest_healthy())),
        stats.healthy_peak_inflight.load(Relaxed),
    );
    println!(
        "throughput: {} requests/s ({} requests in {secs:.1} s)",
        thousands((total as f64 / secs.max(1e-9)) as u64),
        thousands(total),
    );
    println!();
    if let Some((hitters, limiter_stats)) = &limited {
        print_heavy_hitters(hitters, limiter_stats);
        println!();
    }

    // Memory under load: from the first sample taken while requests were arriving (before
    // and after it) to the last.
    let samples = &watched.samples;
    let loaded: Vec<&Sample> = samples
        .windows(3)
        .filter(|w| w[0].requests < w[1].requests && w[1].requests < w[2].requests)
        .map(|w| &w[1])
        .collect();
    let (first, last) = match (loaded.first(), loaded.last()) {
        (Some(first), Some(last)) => (*first, *last),
        _ => (&samples[0], &samples[samples.len() - 1]),
    };
    println!(
        "memory, sampled every {:.0} s (RSS from /proc/self/statm; heap = bytes live, counted by the global allocator):",
        options.sample_every.as_secs_f64()
    );
    println!(
        "  {:>8} {:>14} {:>12} {:>12}",
        "time", "requests", "RSS", "heap"
    );
    for s in samples {
        println!(
            "  {:>6.0} s {:>14} {:>12} {:>12}",
            s.at.as_secs_f64(),
            thousands(s.requests),
            s.rss.map_or("?".into(), kib),
            kib(s.heap.max(0) as usize),
        );
    }
    let rss_kib = |s: &Sample| s.rss.map_or(-1, |b| (b / 1024) as i64);
    let heap_kib = |s: &Sample| s.heap as i64 / 1024;
    println!(
        "  under load ({:.0} s → {:.0} s): RSS {} KiB → {} KiB ({:+} KiB), heap {} KiB → {} KiB ({:+} KiB){}",
        first.at.as_secs_f64(),
        last.at.as_secs_f64(),
        rss_kib(first),
        rss_kib(last),
        rss_kib(last) - rss_kib(first),
        heap_kib(first),
        heap_kib(last),
        heap_kib(last) - heap_kib(first),
        match &limiter {
            Some(l) => format!("; the limiter is {} of it, fixed", kib(l.memory_bytes())),
            None => String::new(),
        },
    );
    println!();

    // One line for scripts.
    let field = |t: &Tally, name: &str| {
        format!(
            "{name}={} {name}_ok={} {name}_503_rate={} {name}_503_inflight={} {name}_errors={}",
            t.requests.load(Relaxed),
            t.ok.load(Relaxed),
            t.rejected_rate.load(Relaxed),
            t.rejected_inflight.load(Relaxed),
            t.errors.load(Relaxed),
        )
    };
    println!(
        "summary layer={} secs={secs:.1} requests={total} {} {} {} {} over_rejections={} busiest_healthy_second={} healthy_peak_inflight={} rss_start_kib={} rss_end_kib={} heap_start_kib={} heap_end_kib={} mem_start_s={:.0} mem_end_s={:.0}",
        limiter.is_some(),
        field(&stats.healthy, "healthy"),
        field(&stats.slow, "slow"),
        field(&stats.flooded, "flooded"),
        field(&stats.other, "other"),
        stats.healthy.rejected(),
        watched.busiest_second,
        stats.healthy_peak_inflight.load(Relaxed),
        rss_kib(first),
        rss_kib(last),
        heap_kib(first),
        heap_kib(last),
        first.at.as_secs_f64(),
        last.at.as_secs_f64(),
    );
    Ok(())
}
