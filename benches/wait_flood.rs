//! A flood end to end with waiting on: the tower layer in front of a service, one key flooded
//! far over its in-flight limit, three ways of answering it side by side in one run.
//!
//! - `refuse`: [`LimitLayer`] as it comes, refusing at once (503) what is over the limit.
//! - `wait`: the same with `.wait(MAX_WAIT)`: a request over the limit waits on the limiter's
//!   shared 10 ms tick for a permit of its key, up to its deadline, then is refused.
//! - `tokio`: the same job done with tokio's parts, as a user without floodgate would: a
//!   `tokio::sync::Semaphore` of the limit a key (in a `DashMap`, keyed by the same
//!   [`HostKey`]), `tokio::time::timeout(MAX_WAIT, acquire_owned())`, 503 when it runs out; a
//!   boxed `async` block a request, as a hand-written tower service returns. Its 503 is bare,
//!   where the layer's carries the `RateLimit-Policy` and `RateLimit` fields (part of the
//!   layer's CPU a request below).
//!
//! The service behind each holds an admitted request [`HOLD`] (a tokio `sleep`: the same on
//! every side) and answers 200. [`CLIENTS`] tasks each send requests of one host,
//! `flooded.example`, one after another without pause (a closed loop), all on one
//! current-thread tokio runtime: the flood is `CLIENTS` requests always outstanding against a
//! limit of [`LIMIT`] in flight. In-process (`ServiceExt::oneshot`), no HTTP: an HTTP server
//! calls the layer the same way and adds its own per-request work (parsing, the socket) to
//! every side alike; the flood needs thousands of requests outstanding, which over loopback
//! would be thousands of connections.
//!
//! Each side runs [`WARM`] untimed, then [`MEASURE`]; a request counts if it started and
//! ended within the measured span. Printed per side, the median over [`ROUNDS`] rounds (the
//! sides in turns, the order rotated each round):
//!
//! - requests/s answered, and of them admitted/s (200) and refused/s (503);
//! - latency p50 and p99 of all requests, p99 of the admitted ones, and p50 and the
//!   longest of the refused ones, in µs (a refusal after waiting comes at the deadline,
//!   never before: the refused of `refuse` are answered at once);
//! - CPU µs a request: the process's user + system time over the span (`getrusage`: the
//!   runtime's thread and the limiter's clock thread both), ÷ requests answered.
//!
//! `cargo bench --bench wait_flood` (about 45 s); `-- wait_all tokio` runs those sides only
//! (ids `refuse`, `wait`, `wait_all`, `tokio`); `FLOOD_CLIENTS`, `FLOOD_ROUNDS` and
//! `FLOOD_SECS` change the load and the length.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use floodgate::layer::{HostKey, KeyExtractor, LimitLayer};
use floodgate::Limiter;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

/// The flooded key's limit of requests in flight.
const LIMIT: u32 = 16;
/// How long the service holds an admitted request.
const HOLD: Duration = Duration::from_millis(2);
/// How long a request over the limit may wait (`wait` and `tokio`).
const MAX_WAIT: Duration = Duration::from_millis(50);
/// Requests always outstanding (a closed loop of this many clients).
const CLIENTS: usize = 2_000;
const WARM: Duration = Duration::from_millis(500);
const MEASURE: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const HOST: &str = "flooded.example";

type Body = Empty<bytes::Bytes>;

/// The origin: holds an admitted request [`HOLD`], then answers 200.
#[derive(Clone)]
struct Origin;

impl Service<Request<Body>> for Origin {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        Box::pin(async {
            tokio::time::sleep(HOLD).await;
            Ok(Response::new(Body::new()))
        })
    }
}

/// Tokio's parts doing the layer's waiting job: a semaphore a key, a timeout on its
/// acquisition, 503 when it runs out.
#[derive(Clone)]
struct SemaphoreLimit<S> {
    inner: S,
    keys: Arc<DashMap<String, Arc<Semaphore>>>,
}

impl<S> Service<Request<Body>> for SemaphoreLimit<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let key = HostKey.key(&request).expect("every request has a host");
        let semaphore = match self.keys.get(key.as_ref()) {
            Some(semaphore) => Arc::clone(&semaphore),
            None => Arc::clone(
                &self
                    .keys
                    .entry(key.into_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(LIMIT as usize))),
            ),
        };
        let inner = self.inner.clone();
        Box::pin(async move {
            match tokio::time::timeout(MAX_WAIT, semaphore.acquire_owned()).await {
                Ok(Ok(permit)) => {
                    let response = inner.oneshot(request).await;
                    drop(permit);
                    response
                }
                _ => {
                    let mut refused = Response::new(Body::new());
                    *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    Ok(refused)
                }
            }
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Refuse,
    Wait,
    WaitAll,
    Tokio,
}

impl Side {
    const ALL: [Side; 4] = [Side::Refuse, Side::Wait, Side::WaitAll, Side::Tokio];

    /// What `cargo bench --bench wait_flood -- <id>` runs alone.
    fn id(self) -> &'static str {
        match self {
            Side::Refuse => "refuse",
            Side::Wait => "wait",
            Side::WaitAll => "wait_all",
            Side::Tokio => "tokio",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Side::Refuse => "floodgate, refuse at once",
            Side::Wait => "floodgate, .wait(50 ms)",
            Side::WaitAll => "floodgate, .wait(50 ms), all may wait",
            Side::Tokio => "tokio Semaphore + timeout",
        }
    }
}

/// What one side's measured span gave.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    per_sec: f64,
    admitted_per_sec: f64,
    refused_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    admitted_p99_us: f64,
    refused_p50_us: f64,
    refused_max_us: f64,
    cpu_us_per_request: f64,
}

/// One request as a client saw it.
struct Answer {
    started: Instant,
    ended: Instant,
    admitted: bool,
}

struct Load {
    clients: usize,
    warm: Duration,
    measure: Duration,
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let of = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    of(usage.ru_utime) + of(usage.ru_stime)
}

/// Drives `service` with the flood and returns what the measured span gave.
async fn flood<S, B>(service: S, load: &Load) -> Figures
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    let start = Instant::now();
    let (from, until) = (start + load.warm, start + load.warm + load.measure);
    let clients: Vec<_> = (0..load.clients)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while Instant::now() < until {
                    let request = Request::get("/")
                        .header(http::header::HOST, HOST)
                        .body(Body::new())
                        .expect("a valid request");
                    let started = Instant::now();
                    let response = service.clone().oneshot(request).await.expect("infallible");
                    let ended = Instant::now();
                    let status = response.status();
                    assert!(
                        status == StatusCode::OK || status == StatusCode::SERVICE_UNAVAILABLE,
                        "unexpected status {status}"
                    );
                    drop(response);
                    if started >= from && ended <= until {
                        answers.push(Answer {
                            started,
                            ended,
                            admitted: status == StatusCode::OK,
                        });
                    }
                    // A refused-at-once request never yields: let the others in.
                    tokio::task::yield_now().await;
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let cpu_from = cpu_time();
    tokio::time::sleep_until(until.into()).await;
    let cpu = cpu_time() - cpu_from;
    let mut answers = Vec::new();
    for client in clients {
        answers.extend(client.await.expect("a client task"));
    }
    let secs = load.measure.as_secs_f64();
    let admitted = answers.iter().filter(|a| a.admitted).count();
    let latency = |a: &Answer| (a.ended - a.started).as_secs_f64() * 1e6;
    let mut all: Vec<f64> = answers.iter().map(latency).collect();
    let mut of_admitted: Vec<f64> = answers.iter().filter(|a| a.admitted).map(latency).collect();
    let mut of_refused: Vec<f64> = answers
        .iter()
        .filter(|a| !a.admitted)
        .map(latency)
        .collect();
    Figures {
        per_sec: answers.len() as f64 / secs,
        admitted_per_sec: admitted as f64 / secs,
        refused_per_sec: (answers.len() - admitted) as f64 / secs,
        p50_us: quantile(&mut all, 0.5),
        p99_us: quantile(&mut all, 0.99),
        admitted_p99_us: quantile(&mut of_admitted, 0.99),
        refused_p50_us: quantile(&mut of_refused, 0.5),
        refused_max_us: quantile(&mut of_refused, 1.0),
        cpu_us_per_request: cpu.as_secs_f64() * 1e6 / answers.len().max(1) as f64,
    }
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_unstable_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

fn run(side: Side, load: &Load) -> Figures {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        match side {
            Side::Refuse | Side::Wait | Side::WaitAll => {
                let builder = Limiter::builder().max_inflight(LIMIT);
                // `WaitAll`: every client's request may wait, as every one does on the tokio
                // side; `Wait` keeps the default bound of a key's line.
                let builder = match side {
                    Side::WaitAll => builder
                        .max_waiters(load.clients)
                        .max_waiters_per_key(load.clients),
                    _ => builder,
                };
                let limiter = builder.build().expect("a valid limiter");
                let layer = LimitLayer::new(limiter.clone());
                let figures = match side {
                    Side::Refuse => flood(layer.layer(Origin), load).await,
                    _ => flood(layer.wait(MAX_WAIT).layer(Origin), load).await,
                };
                // Every waiter left, every permit came back.
                assert_eq!(limiter.stats().waiting, 0, "{side:?}: a waiter left behind");
                let all: Result<Vec<_>, _> =
                    (0..LIMIT).map(|_| limiter.try_acquire(HOST)).collect();
                assert!(all.is_ok(), "{side:?}: a permit never came back");
                figures
            }
            Side::Tokio => {
                let keys = Arc::new(DashMap::new());
                let service = SemaphoreLimit {
                    inner: Origin,
                    keys: Arc::clone(&keys),
                };
                let figures = flood(service, load).await;
                let semaphore = keys.get(HOST).expect("the flooded key's semaphore");
                assert_eq!(semaphore.available_permits(), LIMIT as usize);
                figures
            }
        }
    })
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; other words are the sides to run (all without).
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let sides: Vec<usize> = (0..Side::ALL.len())
        .filter(|&i| only.is_empty() || only.iter().any(|o| o == Side::ALL[i].id()))
        .collect();
    let load = Load {
        clients: env_or("FLOOD_CLIENTS", CLIENTS),
        warm: WARM,
        measure: Duration::from_secs_f64(env_or("FLOOD_SECS", MEASURE.as_secs_f64())),
    };
    let rounds = env_or("FLOOD_ROUNDS", ROUNDS).max(1);
    println!(
        "one key flooded: {} clients in a closed loop, in-flight limit {LIMIT}, service holds {} ms, wait up to {} ms; {} rounds of {:.1} s a side, sides in turns",
        load.clients,
        HOLD.as_millis(),
        MAX_WAIT.as_millis(),
        rounds,
        load.measure.as_secs_f64()
    );
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); Side::ALL.len()];
    for round in 0..rounds {
        for turn in 0..sides.len() {
            let index = sides[(round + turn) % sides.len()];
            let side = Side::ALL[index];
            let f = run(side, &load);
            eprintln!("round {round} {:<28} {f:.1?}", side.name());
            figures[index].push(f);
        }
    }
    println!();
    println!("| side | requests/s | admitted/s | refused/s | p50 µs | p99 µs | admitted p99 µs | refused p50 µs | refused max µs | CPU µs a request |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (side, runs) in Side::ALL.iter().zip(&figures) {
        if runs.is_empty() {
            continue;
        }
        let m = |f: fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} |",
            side.name(),
            m(|f| f.per_sec),
            m(|f| f.admitted_per_sec),
            m(|f| f.refused_per_sec),
            m(|f| f.p50_us),
            m(|f| f.p99_us),
            m(|f| f.admitted_p99_us),
            m(|f| f.refused_p50_us),
            m(|f| f.refused_max_us),
            m(|f| f.cpu_us_per_request),
        );
    }
}
