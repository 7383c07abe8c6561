//! The demo's server alone, for an outside load generator: `scripts/soak` drives it with wrk.
//!
//! ```text
//! cargo run --release -p floodgate-soak -- --port 0 --secs 120 [--no-layer]
//! ```
//!
//! The same origins and limiter as examples/demo.rs (examples/support), on 127.0.0.1: it
//! prints `listening on http://127.0.0.1:PORT` on stdout, serves until `--secs` (default 60)
//! have passed, a line arrives on stdin, or SIGINT/SIGTERM, and then prints the server's own
//! report: requests and 503s per origin class, as the server answered them; over-rejections
//! of healthy origins; the heavy hitters; and the process's memory (resident set, and live
//! heap bytes counted by the global allocator) sampled every `--sample-secs` (default 5), to
//! show that it stays flat. The report ends with one `summary key=value …` line for scripts.
//! `--no-layer` serves the same origins without the `LimitLayer`, to compare latencies.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::{layer::LimitLayer, Limiter, Reason, Rejected};
use floodgate_example_support::origins::{
    classify, origin, FLOODED_HOST, HEALTHY_ORIGINS, SLOW_HOST,
};
use floodgate_example_support::report::{
    kib, print_classes, print_heavy_hitters, print_limits, thousands,
};
use floodgate_example_support::server::{
    runtime, serve, MAX_INFLIGHT, MAX_RATE, PEAK_RATE, SERVER_THREADS,
};
use floodgate_example_support::tally::{Stats, Tally};
use floodgate_test_support::counting_alloc::{
    count_process_heap, process_bytes_held, CountingAlloc,
};
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::{Request, Response};
use tower::{Layer, ServiceExt};

// Counted, so that the report's heap figures are measured.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const USAGE: &str = "usage: soak_server [--port N] [--secs S] [--sample-secs S] [--no-layer]
       the server alone on 127.0.0.1:N (default 0: any free port), until S seconds
       (default 60), a line on stdin, or SIGINT/SIGTERM";

struct Options {
    port: u16,
    duration: Duration,
    sample_every: Duration,
    layer: bool,
}

impl Options {
    /// The options, or `None` for `--help`.
    fn parse(args: &[String]) -> Result<Option<Self>, String> {
        let mut options = Options {
            port: 0,
            duration: Duration::from_secs(60),
            sample_every: Duration::from_secs(5),
            layer: true,
        };
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
        Ok(Some(options))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match Options::parse(&args) {
        Ok(Some(options)) => run(&options),
        Ok(None) => {
            println!("{USAGE}");
            Ok(())
        }
        Err(message) => {
            eprintln!("soak_server: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
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
            heap: process_bytes_held(),
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
async fn watch(stats: &Stats, options: &Options, start: Instant) -> Watch {
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

fn run(options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    count_process_heap();
    stop_on_signal_or_stdin();
    // The demo's limiter (examples/demo.rs), from the same settings.
    let limiter = match options.layer {
        true => Some(
            Limiter::<String>::builder()
                .max_inflight(MAX_INFLIGHT)
                .max_rate(MAX_RATE, Duration::from_secs(1))
                .peak_rate(PEAK_RATE)
                .build()?,
        ),
        false => None,
    };
    let stats = Arc::new(Stats::default());

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
            "floodgate soak server on http://{addr}, {}, for at most {:.0} s (a line on stdin or SIGINT ends it sooner); Host: site-00000.example … site-{:05}.example, {SLOW_HOST}, {FLOODED_HOST}",
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
        "floodgate soak server: {secs:.1} s on {addr}, {}, {SERVER_THREADS} server threads; stopped by {}",
        if limiter.is_some() { "LimitLayer on" } else { "no LimitLayer (same origins, nothing limited)" },
        watched.stopped_by,
    );
    if let Some((_, limiter_stats)) = &limited {
        print_limits(limiter_stats);
    }
    println!();
    println!("every request the server answered, by the class of its Host (errors: statuses other than 200 and 503):");
    print_classes(&stats, None);
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
        "summary layer={} secs={secs:.1} requests={total} {} {} {} {} {} over_rejections={} busiest_healthy_second={} healthy_peak_inflight={} rss_start_kib={} rss_end_kib={} heap_start_kib={} heap_end_kib={} mem_start_s={:.0} mem_end_s={:.0}",
        limiter.is_some(),
        field(&stats.healthy, "healthy"),
        field(&stats.slow, "slow"),
        field(&stats.flooded, "flooded"),
        field(&stats.rotating, "rotating"),
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
