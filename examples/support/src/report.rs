//! The report's tables, as the demo and the soak server print them, their number formats, and
//! the demo's whole report.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use floodgate::{Figure, HeavyHitter, LimiterStats};

use crate::clients::{invented_hosts, CLIENTS, REQUESTS_PER_ROTATING_HOST};
use crate::memory::{ExactCounts, ExactMaps, HeapSample};
use crate::origins::HEALTHY_ORIGINS;
use crate::server::{MAX_INFLIGHT, MAX_RATE, PEAK_RATE, SERVER_THREADS};
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

/// A figure of the heavy hitters' table: a count as itself, the sketch's estimate as its upper
/// bound, marked.
fn figure<T: Copy>(figure: Option<Figure<T>>, show: impl Fn(T) -> String) -> String {
    match figure {
        None => "-".into(),
        Some(Figure::Counted(n)) => show(n),
        Some(Figure::Estimated { at_most }) => format!("≤ {} est.", show(at_most)),
    }
}

pub fn print_heavy_hitters(hitters: &[HeavyHitter<String>], limiter_stats: &LimiterStats) {
    println!("heavy hitters the limiter found (its exact stage, at the end of the run):");
    println!(
        "  {:<22} {:>14} {:>16} {:>16}",
        "key", "in flight", "requests/s", "rejected"
    );
    for h in hitters.iter().take(10) {
        println!(
            "  {:<22} {:>14} {:>16} {:>16}",
            h.key,
            figure(h.inflight, |n| n.to_string()),
            figure(h.rate, |r| thousands(r.round() as u64)),
            thousands(h.rejected),
        );
    }
    if hitters.len() > 10 {
        println!("  … and {} more", hitters.len() - 10);
    }
    println!(
        "  (a plain figure is counted: the exact stage counted each request it covers. \"≤ n est.\" is the\n   \
         sketch's estimate, an upper bound: keys that share the key's counters add to it, so the true\n   \
         figure may be far lower. A key is listed once its estimate reaches half a limit.)"
    );
    println!(
        "  (promotions so far {}, keys in the exact stage now {}, decisions by the sketch alone because the key found no place in the exact stage {})",
        thousands(limiter_stats.promotions),
        limiter_stats.promoted,
        thousands(limiter_stats.exact_full),
    );
}

/// What the demo's report says, gathered by examples/demo.rs.
pub struct DemoReport<'a> {
    pub addr: SocketAddr,
    pub elapsed: Duration,
    pub stats: &'a Stats,
    /// The limiter's heavy hitters and stats, taken while the load was still on.
    pub hitters: &'a [HeavyHitter<String>],
    pub limiter_stats: &'a LimiterStats,
    /// The heap bytes the limiter took when built.
    pub limiter_heap: usize,
    /// Its `memory_bytes()` at the start and at the end.
    pub memory_bytes: [usize; 2],
    /// The process's live heap, warmed up and at the end of the load.
    pub heap: [HeapSample; 2],
    pub exact_maps: &'a ExactMaps,
}

impl DemoReport<'_> {
    pub fn print(&self) {
        let stats = self.stats;
        let invented = invented_hosts();
        let (secs, [warm, end]) = (self.elapsed.as_secs_f64(), self.heap);
        let total = stats.total(|t| t.requests.load(Relaxed));
        println!();
        println!(
            "floodgate demo: {secs:.1} s of HTTP/1.1 over loopback ({}), {CLIENTS} clients, {SERVER_THREADS} server threads",
            self.addr
        );
        print_limits(self.limiter_stats);
        println!();
        print_classes(stats, Some(invented));
        println!();

        println!(
            "over-rejections of healthy origins: {} (expected 0, with the flood and the rotating attacker on: the busiest healthy origin sent {} requests in the whole run and had at most {} in flight at once, under both limits)",
            thousands(stats.healthy.rejected()),
            thousands(u64::from(stats.busiest_healthy())),
            stats.healthy_peak_inflight.load(Relaxed),
        );
        let [sent, ok, ..] = stats.rotating.counts();
        println!(
            "rotating attacker: {} requests to {} invented hosts ({REQUESTS_PER_ROTATING_HOST} each): {} admitted (200 OK), {} refused (503).\n  \
             Admitted, as they should be: each invented host is one more origin far under its limits, so a per-origin\n  \
             limiter lets it through (to stop a client like this, limit it by its own address, not by the Host it names).\n  \
             What the limiter owes under it: no over-rejection of healthy origins (above) and fixed memory (below).",
            thousands(sent),
            thousands(invented),
            thousands(ok),
            thousands(stats.rotating.rejected()),
        );
        println!(
            "throughput: {} requests/s ({} requests in {secs:.1} s, all classes, client and server sharing 2 cores)",
            thousands((total as f64 / secs.max(1e-9)) as u64),
            thousands(total),
        );
        println!();

        print_heavy_hitters(self.hitters, self.limiter_stats);
        println!();

        let maps = self.exact_maps;
        let per_key = |b: usize| b as f64 / maps.keys.max(1) as f64;
        println!(
            "memory for {} distinct origins, {} of them invented (heap bytes held, counted by a global allocator):",
            thousands(maps.keys as u64),
            thousands(invented),
        );
        let [at_start, at_end] = self.memory_bytes;
        println!(
            "  floodgate Limiter                  {:>12}  fixed: memory_bytes() {} at the start, {} at the end",
            kib(self.limiter_heap),
            kib(at_start),
            kib(at_end),
        );
        println!(
            "  HashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
            kib(maps.hash_map),
            per_key(maps.hash_map)
        );
        println!(
            "  DashMap<String, ExactCounts>       {:>12}  {:.0} B per origin",
            kib(maps.dash_map),
            per_key(maps.dash_map)
        );
        println!(
            "  the whole process, live heap       {:>12}  at the end; {} at 1 s ({:+.1} KiB while {} more hosts were invented)",
            kib(end.heap.max(0) as usize),
            kib(warm.heap.max(0) as usize),
            (end.heap - warm.heap) as f64 / 1024.0,
            thousands(end.invented - warm.invented),
        );
        println!(
            "  (ExactCounts = in-flight count + sliding window, {} B. The limiter is the same size for any number of origins; beyond",
            std::mem::size_of::<ExactCounts>()
        );
        println!(
            "   that it holds only the keys of promoted origins, here {}; the maps grow by every new origin.)",
            self.limiter_stats.promoted,
        );
        println!();
    }
}
