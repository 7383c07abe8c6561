//! What the demo (examples/demo.rs) and the soak server (examples/soak_server.rs) share: the
//! origins and how a Host header picks one, the limiter in front of them, the server loop,
//! the tallies per origin class, and the report's tables. One copy, so that the two programs
//! measure the same server.

// Each example uses the part it needs.
#![allow(dead_code)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use floodgate::{HeavyHitter, Limiter, LimiterStats};
use floodgate_test_support::counting_alloc::{bytes_held_by, CountingAlloc};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;

// Both examples install the tests' counting allocator, so that the memory they report is
// measured.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

pub const HEALTHY_ORIGINS: usize = 10_000;
pub const SLOW_HOST: &str = "slow.example";
pub const FLOODED_HOST: &str = "flooded.example";
/// Where the demo's key-rotating attacker invents its hosts.
const ROTATING_SUFFIX: &str = ".rotating.example";
const SLOW_RESPONSE: Duration = Duration::from_millis(100);

pub const MAX_INFLIGHT: u32 = 16;
pub const MAX_RATE: u32 = 1000; // per second
/// The most requests per second the limiter is sized for: this demo's own volume (about
/// 100,000 a second at best, client and server sharing two cores), with room to spare.
pub const PEAK_RATE: u64 = 250_000;
pub const SERVER_THREADS: usize = 2;

// ---------------------------------------------------------------------------------------------
// Origins, and what was asked of them and answered.

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Healthy,
    Slow,
    Flooded,
    /// Invented hosts, each sent a request or two: an attacker rotating keys.
    Rotating,
    /// A Host that is none of the above (seen only by the soak server, from a misconfigured
    /// client).
    Other,
}

/// The requests of one class and their outcomes: as its clients saw them (the demo), or as
/// the server answered them (the soak server).
#[derive(Default)]
pub struct Tally {
    pub requests: AtomicU64,
    pub ok: AtomicU64,
    /// 503 for the rate limit (clients tell it by its `Retry-After`).
    pub rejected_rate: AtomicU64,
    /// 503 for the in-flight limit.
    pub rejected_inflight: AtomicU64,
    /// Anything else: other statuses, and for clients transport errors and timeouts.
    pub errors: AtomicU64,
}

impl Tally {
    pub fn record(&self, status: StatusCode, rate_limited: bool) {
        let counter = match status {
            StatusCode::OK => &self.ok,
            StatusCode::SERVICE_UNAVAILABLE if rate_limited => &self.rejected_rate,
            StatusCode::SERVICE_UNAVAILABLE => &self.rejected_inflight,
            _ => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Requests, 200s, 503s for the rate, 503s for in-flight, errors.
    pub fn counts(&self) -> [u64; 5] {
        let counters = [
            &self.requests,
            &self.ok,
            &self.rejected_rate,
            &self.rejected_inflight,
            &self.errors,
        ];
        counters.map(|n| n.load(Relaxed))
    }

    pub fn rejected(&self) -> u64 {
        self.rejected_rate.load(Relaxed) + self.rejected_inflight.load(Relaxed)
    }
}

pub struct Stats {
    pub healthy: Tally,
    pub slow: Tally,
    pub flooded: Tally,
    pub rotating: Tally,
    pub other: Tally,
    /// Per healthy origin: requests sent, and in flight now / at most, to show that each
    /// stayed far under both limits.
    pub healthy_requests: Vec<AtomicU32>,
    healthy_inflight: Vec<AtomicI64>,
    pub healthy_peak_inflight: AtomicI64,
}

impl Stats {
    pub fn new() -> Self {
        Stats {
            healthy: Tally::default(),
            slow: Tally::default(),
            flooded: Tally::default(),
            rotating: Tally::default(),
            other: Tally::default(),
            healthy_requests: (0..HEALTHY_ORIGINS).map(|_| AtomicU32::new(0)).collect(),
            healthy_inflight: (0..HEALTHY_ORIGINS).map(|_| AtomicI64::new(0)).collect(),
            healthy_peak_inflight: AtomicI64::new(0),
        }
    }

    pub fn tally(&self, class: Class) -> &Tally {
        match class {
            Class::Healthy => &self.healthy,
            Class::Slow => &self.slow,
            Class::Flooded => &self.flooded,
            Class::Rotating => &self.rotating,
            Class::Other => &self.other,
        }
    }

    pub fn total(&self, f: impl Fn(&Tally) -> u64) -> u64 {
        [
            &self.healthy,
            &self.slow,
            &self.flooded,
            &self.rotating,
            &self.other,
        ]
        .into_iter()
        .map(f)
        .sum()
    }

    /// A request for healthy origin `i` starts.
    pub fn healthy_start(&self, i: usize) {
        self.healthy_requests[i].fetch_add(1, Relaxed);
        let now = self.healthy_inflight[i].fetch_add(1, Relaxed) + 1;
        self.healthy_peak_inflight.fetch_max(now, Relaxed);
    }

    /// A request for healthy origin `i` has its answer.
    pub fn healthy_end(&self, i: usize) {
        self.healthy_inflight[i].fetch_sub(1, Relaxed);
    }

    /// Requests sent to the busiest healthy origin.
    pub fn busiest_healthy(&self) -> u32 {
        let requests = self.healthy_requests.iter().map(|n| n.load(Relaxed));
        requests.max().unwrap_or(0)
    }
}

pub fn healthy_host(i: usize) -> String {
    format!("site-{i:05}.example")
}

/// The `n`th host of the rotating attacker (n: any number; the demo draws them at random).
pub fn rotating_host(n: u64) -> String {
    format!("{n:016x}{ROTATING_SUFFIX}")
}

/// The class of a Host header value, and for a healthy origin its number.
pub fn classify(host: &[u8]) -> (Class, Option<usize>) {
    if host == SLOW_HOST.as_bytes() {
        return (Class::Slow, None);
    }
    if host == FLOODED_HOST.as_bytes() {
        return (Class::Flooded, None);
    }
    if host.ends_with(ROTATING_SUFFIX.as_bytes()) {
        return (Class::Rotating, None);
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
pub async fn origin(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
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
// The server.

/// The limiter, and the heap bytes it holds (read off the counting allocator).
pub fn build_limiter() -> Result<(Limiter<String>, usize), floodgate::ConfigError> {
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

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_THREADS)
        .enable_all()
        .build()
}

/// The server: accepts on `listener` and serves each connection with a clone of `service`.
pub async fn serve<S, B>(listener: tokio::net::TcpListener, service: S)
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
// Reporting.

pub fn thousands(n: u64) -> String {
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

pub fn kib(bytes: usize) -> String {
    if bytes < 10 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

pub fn print_limits(limiter_stats: &LimiterStats) {
    println!(
        "limits per origin: {MAX_INFLIGHT} in flight, {MAX_RATE} requests/s (sliding window); sketches sized for {PEAK_RATE} requests/s, exact stage {} keys",
        limiter_stats.exact_capacity,
    );
}

/// Requests and their outcomes per origin class; `rotating_hosts`: how many hosts the rotating
/// attacker invented, where known.
pub fn print_classes(stats: &Stats, rotating_hosts: Option<u64>) {
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
    if stats.rotating.requests.load(Relaxed) > 0 {
        let hosts = rotating_hosts.map_or("-".into(), thousands);
        rows.push(("rotating (invented)", hosts, &stats.rotating));
    }
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
    let origins = HEALTHY_ORIGINS as u64 + 2 + rotating_hosts.unwrap_or(0);
    row("total", &thousands(origins), total);
}

pub fn print_heavy_hitters(hitters: &[HeavyHitter<String>], limiter_stats: &LimiterStats) {
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
        "  (promotions so far {}, keys in the exact stage now {}, decisions by the sketch alone because the key found no place in the exact stage {})",
        thousands(limiter_stats.promotions),
        limiter_stats.promoted,
        thousands(limiter_stats.exact_full),
    );
}
