//! The report's tables, as the demo and the soak server print them, and their number formats.

use std::sync::atomic::Ordering::Relaxed;

use floodgate::{HeavyHitter, LimiterStats};

use crate::origins::HEALTHY_ORIGINS;
use crate::server::{MAX_INFLIGHT, MAX_RATE, PEAK_RATE};
use crate::tally::Stats;

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
