//! The shared ticker's CPU per second with 10, 10,000 and 1,000,000 registered `Rate`s,
//! idle (one-hour windows: nothing due while it runs) and busy (one-second windows, so each
//! `Rate` changes window once a second, while a thread observes keys on all of them).
//!
//! Not a criterion bench: what matters is the ticker thread's CPU time over wall time, read
//! from the kernel's per-thread accounting (`/proc/self/task/<tid>/schedstat`), and how many
//! `Rate`s it ran per second. Run: `cargo bench --bench ticker` (set `TICKER_BENCH_SECS` for
//! a longer window than 3 s, `TICKER_BENCH_COUNTS=10,10000` for other sizes).

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use floodgate::clock::{self, testing, TICK};
use floodgate::Rate;

/// The live ticker thread's id and its CPU time so far (nanoseconds), if /proc has it.
fn ticker_cpu() -> Option<(String, u64)> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let comm = std::fs::read_to_string(path.join("comm")).ok()?;
        if comm.starts_with("floodgate-tick") {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let on_cpu = stat.split_whitespace().next()?.parse().ok()?;
            let tid = path.file_name()?.to_string_lossy().into_owned();
            return Some((tid, on_cpu));
        }
    }
    None
}

/// Waits until the coarse clock has moved `ticks` ticks on.
fn wait_ticks(ticks: u32) {
    let from = clock::coarse_now();
    while clock::coarse_now() < from + ticks * TICK {
        thread::sleep(Duration::from_millis(2));
    }
}

struct Measured {
    cpu_share: f64,
    runs_per_sec: f64,
    observes_per_sec: f64,
}

fn measure(rates: &[Rate], busy: bool, window: Duration) -> Option<Measured> {
    wait_ticks(5); // past the first run of each new Rate
    let stop = AtomicBool::new(false);
    thread::scope(|s| {
        let observer = busy.then(|| {
            s.spawn(|| {
                let mut observes = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (i, rate) in rates.iter().enumerate() {
                        rate.observe(&(i as u64 ^ observes), 1);
                    }
                    observes += rates.len() as u64;
                }
                observes
            })
        });
        let (tid, cpu0) = ticker_cpu()?;
        let runs0 = testing::users_run();
        let start = Instant::now();
        thread::sleep(window);
        let (tid1, cpu1) = ticker_cpu()?;
        let wall = start.elapsed();
        let runs = testing::users_run() - runs0;
        stop.store(true, Ordering::Relaxed);
        let observes = observer.map_or(0, |o| o.join().unwrap());
        if tid1 != tid {
            eprintln!("  (the ticker was replaced during the measurement; figures dropped)");
            return None;
        }
        Some(Measured {
            cpu_share: (cpu1 - cpu0) as f64 / wall.as_nanos() as f64,
            runs_per_sec: runs as f64 / wall.as_secs_f64(),
            observes_per_sec: observes as f64 / wall.as_secs_f64(),
        })
    })
}

fn main() {
    let secs: u64 = std::env::var("TICKER_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let counts: Vec<usize> = std::env::var("TICKER_BENCH_COUNTS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 10_000, 1_000_000]);
    let window = Duration::from_secs(secs);
    println!("shared ticker CPU over {secs} s windows (1 × 16 sketches per window slot)");
    println!(
        "{:>10}  {:<5}  {:>14}  {:>12}  {:>14}",
        "rates", "load", "ticker CPU", "runs/s", "observes/s"
    );
    for &n in &counts {
        for busy in [false, true] {
            let interval = if busy {
                Duration::from_secs(1)
            } else {
                Duration::from_secs(3600)
            };
            let rates: Vec<Rate> = (0..n)
                .map(|_| Rate::builder(interval).estimator(1, 16).build().unwrap())
                .collect();
            match measure(&rates, busy, window) {
                Some(m) => println!(
                    "{n:>10}  {:<5}  {:>13.3}%  {:>12.0}  {:>14.0}",
                    if busy { "busy" } else { "idle" },
                    m.cpu_share * 100.0,
                    m.runs_per_sec,
                    m.observes_per_sec
                ),
                None => println!("{n:>10}  (no /proc: ticker CPU cannot be read here)"),
            }
            drop(rates);
            wait_ticks(3); // the cancellations applied before the next size
        }
    }
}
