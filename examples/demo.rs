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
//! request succeeded. This file is the limiter and the layer; the origins, the clients, the
//! tallies and the report are in examples/support, whose server the soak server shares
//! (tools/soak: the server alone, for `scripts/soak`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use floodgate::{layer::LimitLayer, Limiter};
use floodgate_example_support::clients::Clients;
use floodgate_example_support::memory::{build_measured, ExactMaps};
use floodgate_example_support::origins::{origin, HEALTHY_ORIGINS};
use floodgate_example_support::report::{thousands, DemoReport};
use floodgate_example_support::server::{runtime, serve, MAX_INFLIGHT, MAX_RATE, PEAK_RATE};
use floodgate_example_support::tally::Stats;
use floodgate_test_support::counting_alloc::{count_process_heap, CountingAlloc};
use tower::Layer;

// Counted, so that the memory the report shows is measured.
#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().len() > 1 {
        // The server-only mode that once lived here is its own tool now.
        eprintln!("usage: demo (no arguments; FLOODGATE_DEMO_SECS sets the length, default 10)\nthe server alone, for a load generator: cargo run --release -p floodgate-soak -- --help");
        std::process::exit(2);
    }
    let secs = std::env::var("FLOODGATE_DEMO_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite())
        .unwrap_or(10.0);
    let duration = Duration::from_secs_f64(secs.clamp(0.1, 3600.0));
    count_process_heap();

    // The limiter: per origin host, at most 16 requests in flight and 1,000 a second, in
    // sketches sized for 250,000 requests a second in all. Its size is fixed from here on.
    let (limiter, limiter_heap) = build_measured(|| {
        Limiter::<String>::builder()
            .max_inflight(MAX_INFLIGHT)
            .max_rate(MAX_RATE, Duration::from_secs(1))
            .peak_rate(PEAK_RATE)
            .build()
    })?;
    let size_at_start = limiter.memory_bytes();
    let stats = Arc::new(Stats::default());

    let runtime = runtime()?;
    let (addr, elapsed, heap, hitters, limiter_stats) = runtime.block_on(async {
        // The origins behind the layer: it keys each request by its Host, and answers a 503
        // with Retry-After to an origin over a limit without calling the origin.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let service = LimitLayer::new(limiter.clone()).layer(tower::service_fn(origin));
        let server = tokio::spawn(serve(listener, service));
        eprintln!(
            "floodgate demo: serving {addr} for {:.1} s; {} healthy origins, 1 slow, 1 flooded, and a rotating attacker",
            duration.as_secs_f64(),
            thousands(HEALTHY_ORIGINS as u64),
        );

        let clients = Clients::start(addr, duration, &stats);
        let heap = clients.progress().await;
        // What the limiter is limiting now, while the flood is still on.
        let (hitters, limiter_stats) = (limiter.heavy_hitters(), limiter.stats());
        let elapsed = clients.finish().await;
        server.abort();
        Ok::<_, std::io::Error>((addr, elapsed, heap, hitters, limiter_stats))
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    let size_at_end = limiter.memory_bytes();

    DemoReport {
        addr,
        elapsed,
        stats: &stats,
        hitters: &hitters,
        limiter_stats: &limiter_stats,
        limiter_heap,
        memory_bytes: [size_at_start, size_at_end],
        heap,
        // The same origins in exact per-key maps, as a limiter without a sketch keeps them.
        exact_maps: &ExactMaps::measure(&stats),
    }
    .print();

    let failure = if stats.healthy.rejected() > 0 {
        "a healthy origin got a 503 (an over-rejection)"
    } else if size_at_end != size_at_start {
        "the limiter's memory_bytes() changed during the run"
    } else if stats.total(|t| t.ok.load(Relaxed)) == 0 {
        "no request succeeded"
    } else {
        return Ok(());
    };
    eprintln!("demo failed: {failure}");
    std::process::exit(1);
}
