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
//! nothing was admitted; with 2 on bad arguments.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use floodgate::fleet::{FleetConfig, FleetStatus};
use floodgate::{layer::LimitLayer, Limiter};
use floodgate_example_support::origins::{origin, FLOODED_HOST};
use floodgate_example_support::report::thousands;
use floodgate_example_support::server::{runtime, serve};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::MissedTickBehavior;
use tower::{Layer, ServiceExt};

const NODES: usize = 3;
/// The fleet-wide limit per origin, per window.
const LIMIT: u32 = 500;
const WINDOW: Duration = Duration::from_secs(1);
/// What the flood offers each node, per second, and over how many client tasks.
const FLOOD_PER_NODE: u32 = 2_000;
const FLOOD_TASKS_PER_NODE: u32 = 4;
const QUIET_HOST: &str = "quiet.example";
const QUIET_PER_SECOND: u32 = 20;
const DEFAULT_SECS: u64 = 10;
/// Seconds left out of the summary: the fleet's first syncs and promotions.
const WARMUP_SECS: usize = 2;
/// The issue's target per window, for a key flooding every node.
const TARGET: (f64, f64) = (0.6, 1.15);
const REDIS_START_DEADLINE: Duration = Duration::from_secs(5);
const FLEET_JOIN_DEADLINE: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// After a second ends, how long to wait for its last responses before printing it.
const PRINT_GRACE: Duration = Duration::from_millis(150);

const USAGE: &str = "\
usage: fleet [--redis URL] [--secs N]
  --redis URL   the Redis to sync through (also FLOODGATE_REDIS); without it the demo starts
                a redis-server of its own on a free loopback port
  --secs N      how long the load runs, in whole seconds (default 10, at least 3)";

const NO_REDIS_SERVER: &str = "\
redis-server was not found, and no Redis was given.
Either install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis),
or point the demo at a running Redis: --redis redis://HOST:PORT/ (or FLOODGATE_REDIS=...).";

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
            let redis = OwnRedis::start()?;
            println!(
                "started redis-server on 127.0.0.1:{} (pid {}; stopped at the end)",
                redis.port,
                redis.child.id()
            );
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
    let statuses: Vec<_> = nodes.iter().map(|n| n.fleet_status()).collect();
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

// ---------------------------------------------------------------------------------------------
// A redis-server of the demo's own.

struct OwnRedis {
    child: Child,
    port: u16,
}

impl OwnRedis {
    fn start() -> Result<OwnRedis, String> {
        let mut last_error = String::new();
        // The free port may be taken before redis-server binds it: try a few.
        for _ in 0..3 {
            let port = free_port().map_err(|e| format!("finding a free port: {e}"))?;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => NO_REDIS_SERVER.to_owned(),
                    _ => format!("starting redis-server: {e}"),
                })?;
            let mut redis = OwnRedis { child, port };
            match redis.wait_ready() {
                Ok(()) => return Ok(redis),
                Err(e) => last_error = e, // dropping `redis` kills it
            }
        }
        Err(format!("redis-server would not start: {last_error}"))
    }

    /// Polls PING until the server answers PONG, it exits, or the deadline passes.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + REDIS_START_DEADLINE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server on port {} exited at once ({status})",
                    self.port
                ));
            }
            if ping(self.port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "redis-server on port {} did not answer PING within {REDIS_START_DEADLINE:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Whether a Redis on this loopback port answers PING (a server still loading answers an
/// error instead).
fn ping(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let timeout = Duration::from_millis(200);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply)?;
        Ok(&reply == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// What the nodes answered, per node and second of the run.

#[derive(Default)]
struct Second {
    flood_ok: AtomicU64,
    flood_503: AtomicU64,
    quiet_ok: AtomicU64,
    quiet_503: AtomicU64,
    /// Any other status, either origin.
    other: AtomicU64,
}

struct Counts {
    /// Unix time of the run's start, in ms: a whole second, set by `run`.
    start_ms: AtomicU64,
    /// `[node][second]`.
    seconds: Vec<Vec<Second>>,
    /// Requests that got no answer in time, or a transport error (client side).
    client_errors: AtomicU64,
}

impl Counts {
    fn new(secs: usize) -> Counts {
        let per_node = || (0..secs).map(|_| Second::default()).collect();
        Counts {
            start_ms: AtomicU64::new(u64::MAX),
            seconds: (0..NODES).map(|_| per_node()).collect(),
            client_errors: AtomicU64::new(0),
        }
    }

    /// Counts a response of `node`, in the second of the run it is answered in.
    fn record(&self, node: usize, host: Option<&[u8]>, status: StatusCode) {
        let Some(ms) = unix_ms().checked_sub(self.start_ms.load(Relaxed)) else {
            return;
        };
        let Some(second) = self.seconds[node].get((ms / 1000) as usize) else {
            return; // answered after the run
        };
        let flooded = host == Some(FLOODED_HOST.as_bytes());
        let quiet = host == Some(QUIET_HOST.as_bytes());
        let counter = match status {
            StatusCode::OK if flooded => &second.flood_ok,
            StatusCode::SERVICE_UNAVAILABLE if flooded => &second.flood_503,
            StatusCode::OK if quiet => &second.quiet_ok,
            StatusCode::SERVICE_UNAVAILABLE if quiet => &second.quiet_503,
            _ => &second.other,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// The sum over nodes of `f` in second `s`.
    fn fleet(&self, s: usize, f: impl Fn(&Second) -> &AtomicU64) -> u64 {
        self.seconds
            .iter()
            .map(|node| f(&node[s]).load(Relaxed))
            .sum()
    }

    /// The sum over the whole run of `f`.
    fn total(&self, f: impl Fn(&Second) -> &AtomicU64 + Copy) -> u64 {
        (0..self.seconds[0].len()).map(|s| self.fleet(s, f)).sum()
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------------------------
// The servers and their clients.

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

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
    let counts = Arc::clone(counts);
    let counted = tower::service_fn(move |req: Request<Incoming>| {
        let (limited, counts) = (limited.clone(), Arc::clone(&counts));
        async move {
            let host = req.headers().get(HOST).map(|h| h.as_bytes().to_vec());
            let response = limited.oneshot(req).await?;
            counts.record(i, host.as_deref(), response.status());
            Ok::<_, Infallible>(response)
        }
    });
    tokio::spawn(serve(listener, counted));
    Ok(addr)
}

/// One client: `per_second` requests for `host`, paced, from `start` to `deadline`, to the
/// `addrs` in turn. A tick missed (a busy CPU) is skipped, not made up in a burst, so the
/// rates above are ceilings.
async fn paced_client(
    client: HttpClient,
    addrs: Vec<SocketAddr>,
    host: &'static str,
    per_second: u32,
    start: tokio::time::Instant,
    deadline: tokio::time::Instant,
    counts: Arc<Counts>,
) {
    let mut tick = tokio::time::interval_at(start, Duration::from_secs(1) / per_second);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    for addr in addrs.iter().cycle() {
        if tick.tick().await >= deadline {
            return;
        }
        let req = Request::get(format!("http://{addr}/"))
            .header(HOST, host)
            .body(Empty::new());
        let Ok(req) = req else { return };
        let answered = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let response = client.request(req).await.ok()?;
            response.into_body().collect().await.ok()
        })
        .await;
        if !matches!(answered, Ok(Some(_))) {
            counts.client_errors.fetch_add(1, Relaxed);
        }
    }
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

    // Start on the next Unix second, so that each second of the run is one fleet window.
    let now_ms = unix_ms();
    let start_ms = (now_ms / 1000 + 1) * 1000;
    let start = tokio::time::Instant::now() + Duration::from_millis(start_ms - now_ms);
    let deadline = start + Duration::from_secs(secs);
    counts.start_ms.store(start_ms, Relaxed);
    println!(
        "load: {FLOODED_HOST} at {} requests/s to each node ({} × the limit in all), {QUIET_HOST} at {QUIET_PER_SECOND} requests/s over all three; {secs} s from Unix second {}",
        thousands(u64::from(FLOOD_PER_NODE)),
        FLOOD_PER_NODE as f64 * NODES as f64 / LIMIT as f64,
        start_ms / 1000,
    );

    let client: HttpClient = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build_http();
    let mut clients = Vec::new();
    for &addr in &addrs {
        for _ in 0..FLOOD_TASKS_PER_NODE {
            clients.push(tokio::spawn(paced_client(
                client.clone(),
                vec![addr],
                FLOODED_HOST,
                FLOOD_PER_NODE / FLOOD_TASKS_PER_NODE,
                start,
                deadline,
                Arc::clone(counts),
            )));
        }
    }
    clients.push(tokio::spawn(paced_client(
        client.clone(),
        addrs.clone(),
        QUIET_HOST,
        QUIET_PER_SECOND,
        start,
        deadline,
        Arc::clone(counts),
    )));

    for s in 0..secs as usize {
        tokio::time::sleep_until(start + Duration::from_secs(s as u64 + 1) + PRINT_GRACE).await;
        print_second(counts, s, start_ms / 1000 + s as u64);
    }
    let mut ok = true;
    for c in clients {
        ok &= c.await.is_ok();
    }
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// The report.

fn print_second(counts: &Counts, s: usize, unix_second: u64) {
    println!("second {:>2} (window {unix_second})", s + 1);
    for (i, node) in counts.seconds.iter().enumerate() {
        let second = &node[s];
        println!(
            "  node {}  admitted {:>6}/s   503 {:>6}/s",
            i + 1,
            thousands(second.flood_ok.load(Relaxed)),
            thousands(second.flood_503.load(Relaxed)),
        );
    }
    let admitted = counts.fleet(s, |x| &x.flood_ok);
    println!(
        "  fleet   admitted {:>6}/s = {:.2} × the limit ({LIMIT}/s)   {QUIET_HOST}: {} × 200, {} × 503",
        thousands(admitted),
        admitted as f64 / LIMIT as f64,
        counts.fleet(s, |x| &x.quiet_ok),
        counts.fleet(s, |x| &x.quiet_503),
    );
}

/// Prints the summary; false if the quiet origin was refused or nothing was admitted.
fn summary(counts: &Counts, statuses: &[Option<FleetStatus>]) -> bool {
    let secs = counts.seconds[0].len();
    let ratios: Vec<f64> = (WARMUP_SECS..secs)
        .map(|s| counts.fleet(s, |x| &x.flood_ok) as f64 / LIMIT as f64)
        .collect();
    let mean = ratios.iter().sum::<f64>() / ratios.len().max(1) as f64;
    let min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ratios.iter().copied().fold(0.0, f64::max);
    let within = ratios
        .iter()
        .filter(|r| (TARGET.0..=TARGET.1).contains(*r))
        .count();
    let offered = counts.total(|x| &x.flood_ok) + counts.total(|x| &x.flood_503);
    let [quiet_ok, quiet_503] = [
        counts.total(|x| &x.quiet_ok),
        counts.total(|x| &x.quiet_503),
    ];

    println!();
    println!("summary ({NODES} nodes, limit {LIMIT}/s fleet-wide):");
    println!(
        "  fleet-wide admitted/s over seconds {}-{secs}: mean {:.0}/s = {mean:.2} × the limit; per second {min:.2}-{max:.2} ×; within the target {:.2}-{:.2} × in {within} of {} seconds",
        WARMUP_SECS + 1,
        mean * LIMIT as f64,
        TARGET.0,
        TARGET.1,
        ratios.len(),
    );
    println!(
        "  {FLOODED_HOST}: {} requests answered, {}/s on average ({:.1} × the limit)",
        thousands(offered),
        thousands(offered / secs as u64),
        offered as f64 / secs as f64 / LIMIT as f64,
    );
    println!(
        "  {QUIET_HOST}: {quiet_ok} × 200, {quiet_503} × 503 (expected 0); other statuses {}, client errors and timeouts {}",
        counts.total(|x| &x.other),
        counts.client_errors.load(Relaxed),
    );
    println!("  fleet_status() at the end:");
    for (i, status) in statuses.iter().enumerate() {
        let line = status.as_ref().map_or("no fleet".into(), describe);
        println!("    node {}: {line}", i + 1);
    }
    if quiet_503 > 0 {
        eprintln!("fleet: {QUIET_HOST}, far under the limit, got a 503");
        return false;
    }
    if counts.total(|x| &x.flood_ok) == 0 {
        eprintln!("fleet: no request of {FLOODED_HOST} was admitted");
        return false;
    }
    true
}

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
