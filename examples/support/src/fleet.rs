//! The fleet example's machinery (examples/fleet.rs): its own redis-server, the load on its
//! nodes (a flooded origin and a quiet one, paced), what each node answered in each second,
//! and the report of each second and of the run.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use floodgate_test_support::redis_server::{RedisServer, StartError};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::MissedTickBehavior;
use tower::ServiceExt;

use crate::origins::FLOODED_HOST;
use crate::report::thousands;

pub const NODES: usize = 3;
/// The fleet-wide limit per origin, per window.
pub const LIMIT: u32 = 500;
/// One window a second, so that each second of the run is one of the fleet's windows.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Seconds left out of the summary: the fleet's first syncs and promotions.
pub const WARMUP_SECS: usize = 2;
/// What the flood offers each node, per second, and over how many client tasks.
const FLOOD_PER_NODE: u32 = 2_000;
const FLOOD_TASKS_PER_NODE: u32 = 4;
const QUIET_HOST: &str = "quiet.example";
const QUIET_PER_SECOND: u32 = 20;
/// The target per window, for a key flooding every node.
const TARGET: (f64, f64) = (0.6, 1.15);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// After a second ends, how long to wait for its last responses before printing it.
const PRINT_GRACE: Duration = Duration::from_millis(150);

const NO_REDIS_SERVER: &str = "\
redis-server was not found, and no Redis was given.
Either install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis),
or point the demo at a running Redis: --redis redis://HOST:PORT/ (or FLOODGATE_REDIS=...).";

/// A redis-server of the demo's own on a free loopback port, with no persistence; stopped
/// when dropped.
pub fn start_redis() -> Result<RedisServer, String> {
    let redis = RedisServer::try_start().map_err(|e| match e {
        StartError::NotFound(_) => NO_REDIS_SERVER.to_owned(),
        StartError::Failed(why) => why,
    })?;
    println!(
        "started redis-server on 127.0.0.1:{} (pid {}; stopped at the end)",
        redis.port(),
        redis.pid().map_or("?".into(), |pid| pid.to_string()),
    );
    Ok(redis)
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

pub struct Counts {
    /// Unix time of the run's start, in ms: a whole second, set by `drive`.
    start_ms: AtomicU64,
    /// `[node][second]`.
    seconds: Vec<Vec<Second>>,
    /// Requests that got no answer in time, or a transport error (client side).
    client_errors: AtomicU64,
}

impl Counts {
    pub fn new(secs: usize) -> Counts {
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

/// `service` (node `node`'s), with each response counted in `counts` by its request's Host
/// and its status, as the node answered it.
pub fn counted<S, B>(
    node: usize,
    service: S,
    counts: &Arc<Counts>,
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
    let counts = Arc::clone(counts);
    tower::service_fn(move |req: Request<Incoming>| {
        let (service, counts) = (service.clone(), Arc::clone(&counts));
        async move {
            let host = req.headers().get(HOST).map(|h| h.as_bytes().to_vec());
            let response = service.oneshot(req).await?;
            counts.record(node, host.as_deref(), response.status());
            Ok::<_, Infallible>(response)
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The clients.

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

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

/// Drives the nodes at `addrs` for `secs` whole seconds from the next Unix second (so that
/// each second of the run is one fleet window), and prints each second as it ends. False if a
/// client task failed.
pub async fn drive(addrs: &[SocketAddr], counts: &Arc<Counts>, secs: u64) -> bool {
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
    for &addr in addrs {
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
        addrs.to_vec(),
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
    ok
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

/// Prints the summary, with each node's `fleet_status()` at the end as `statuses` describe
/// them; false if the quiet origin was refused or nothing was admitted.
pub fn summary(counts: &Counts, statuses: &[String]) -> bool {
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
        println!("    node {}: {status}", i + 1);
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
