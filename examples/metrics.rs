//! A limiter's metrics served to Prometheus: `cargo run --release --example metrics
//! --features metrics`.
//!
//! Installs metrics-exporter-prometheus's recorder with its HTTP listener on a free loopback
//! port, drives a limiter for three seconds (healthy origins, one flooded, one trying a new
//! plan in shadow), then scrapes `/metrics` over HTTP as Prometheus would and prints
//! floodgate's lines. The limiter publishes once a sweep (a rate window, at most a second),
//! from its clock's thread; the request path only counts, per thread.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use floodgate::{Limiter, Limits};
use metrics_exporter_prometheus::PrometheusBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A free port: bound once, then handed to the exporter.
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;

    let limiter: Limiter<String> = Limiter::builder()
        .name("per-origin")
        .max_inflight(20)
        .max_rate(50, Duration::from_secs(1))
        .build()?;
    let trial = Limits::new().max_rate(10).shadow(true);

    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        for origin in 0..50 {
            // Healthy: a request per origin every 50 ms, 20 a second, under 50.
            drop(limiter.try_acquire(&format!("origin-{origin}.example")));
        }
        for _ in 0..100 {
            // A flood: 2,000 a second against 50.
            drop(limiter.try_acquire("flooded.example"));
        }
        // A new plan in shadow: 20 a second against a trial limit of 10.
        drop(limiter.with_limits(trial).try_acquire("trial.example"));
        sent += 151;
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "sent {sent} requests in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    // The last requests are published at the limiter's next sweep (within a second).
    std::thread::sleep(Duration::from_millis(1100));

    // What Prometheus would scrape.
    let body = scrape(addr)?;
    for line in body.lines().filter(|l| l.contains("floodgate_")) {
        println!("{line}");
    }
    Ok(())
}

/// `GET /metrics` over HTTP/1.0: the response's body.
fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(body.to_owned())
}
