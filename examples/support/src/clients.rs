//! The demo's clients: for each origin class, tasks that send requests over keep-alive
//! connections until a deadline and count what they got in a [`Stats`], and a progress line
//! each second on stderr.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use floodgate_test_support::counting_alloc::process_bytes_held;
use http_body_util::{BodyExt, Empty};
use hyper::header::{HOST, RETRY_AFTER};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinHandle;

use crate::memory::HeapSample;
use crate::origins::{
    healthy_host, rotating_host, Class, FLOODED_HOST, HEALTHY_ORIGINS, SLOW_HOST,
};
use crate::report::{kib, thousands};
use crate::splitmix::SplitMix;
use crate::tally::Stats;

const SLOW_BACKOFF: Duration = Duration::from_millis(50);
const HEALTHY_CLIENTS: usize = 48;
const SLOW_CLIENTS: usize = 32;
const FLOOD_CLIENTS: usize = 24;
const ROTATING_CLIENTS: usize = 16;
/// Client tasks of every class together.
pub const CLIENTS: usize = HEALTHY_CLIENTS + SLOW_CLIENTS + FLOOD_CLIENTS + ROTATING_CLIENTS;
/// Requests the rotating attacker sends to each host it invents.
pub const REQUESTS_PER_ROTATING_HOST: u64 = 2;
/// Bounds each client loop besides the deadline.
const MAX_REQUESTS_PER_CLIENT: u64 = 5_000_000;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Hosts the rotating attacker has invented so far.
static INVENTED: AtomicU64 = AtomicU64::new(0);

/// Hosts the rotating attacker has invented so far.
pub fn invented_hosts() -> u64 {
    INVENTED.load(Relaxed)
}

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

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

/// The demo's clients of every class, running until their deadline.
pub struct Clients {
    tasks: Vec<JoinHandle<()>>,
    start: Instant,
    deadline: Instant,
    stats: Arc<Stats>,
}

impl Clients {
    /// Starts every class's clients against the server at `addr`, for `duration` from now,
    /// each counting what it got in `stats`. Called within the runtime, which runs them.
    pub fn start(addr: SocketAddr, duration: Duration, stats: &Arc<Stats>) -> Clients {
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build_http();
        let start = Instant::now();
        let deadline = start + duration;
        let mut tasks = Vec::new();
        let classes = [
            (Class::Healthy, HEALTHY_CLIENTS),
            (Class::Slow, SLOW_CLIENTS),
            (Class::Flooded, FLOOD_CLIENTS),
            (Class::Rotating, ROTATING_CLIENTS),
        ];
        for (class, n) in classes {
            for i in 0..n {
                let seed = 0x5EED_0000 + (tasks.len() as u64) * 7919 + i as u64;
                let job = client_loop(
                    client.clone(),
                    addr,
                    class,
                    seed,
                    deadline,
                    Arc::clone(stats),
                );
                tasks.push(tokio::spawn(job));
            }
        }
        Clients {
            tasks,
            start,
            deadline,
            stats: Arc::clone(stats),
        }
    }

    /// A progress line each second on stderr until the deadline; returns the process's heap at
    /// the first line (warmed up) and at the end.
    pub async fn progress(&self) -> [HeapSample; 2] {
        let stats = &self.stats;
        // On a terminal, one line rewritten in place; elsewhere, a line each second.
        let (line_start, line_end) = match std::io::stderr().is_terminal() {
            true => ("\r", "\x1b[K"),
            false => ("", "\n"),
        };
        let (mut last, mut warm) = (0, None);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + Duration::from_secs(1),
            Duration::from_secs(1),
        );
        while Instant::now() + Duration::from_millis(50) < self.deadline {
            tokio::select! {
                _ = tick.tick() => {}
                _ = tokio::time::sleep_until(self.deadline.into()) => break,
            }
            warm.get_or_insert_with(HeapSample::take);
            let total = stats.total(|t| t.requests.load(Relaxed));
            let line = format!(
                "{:>4.0} s  {:>7} req/s  {:>10} requests  503s: flooded {:>9}  slow {:>7}  healthy {}  invented hosts {:>8}  heap {}",
                self.start.elapsed().as_secs_f64(),
                thousands(total - last),
                thousands(total),
                thousands(stats.flooded.rejected()),
                thousands(stats.slow.rejected()),
                thousands(stats.healthy.rejected()),
                thousands(invented_hosts()),
                kib(process_bytes_held().max(0) as usize),
            );
            last = total;
            eprint!("{line_start}{line}{line_end}");
        }
        let end = HeapSample::take();
        [warm.unwrap_or(end), end]
    }

    /// Waits for every client to finish; returns the time since they started.
    pub async fn finish(self) -> Duration {
        for task in self.tasks {
            let _ = task.await;
        }
        let elapsed = self.start.elapsed();
        if std::io::stderr().is_terminal() {
            eprintln!(); // after the progress line rewritten in place
        }
        elapsed
    }
}
