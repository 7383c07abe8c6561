//! Peak heap bytes of each structure, through a counting global allocator, printed as a
//! Markdown table.
//!
//! Each cell is a fresh structure: the peak is reset just before it is built, and the figure
//! is the peak above what was allocated before (so it includes construction and any growth,
//! resizes' transient double tables included). Keys come from allocation-free streams, so
//! the only heap counted is the structure's own.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use common::Workload;
use dashmap::DashMap;
use floodgate_test_support::counting_alloc::{peak_bytes_by, CountingAlloc};

/// Counts, per thread, the bytes held and their peak (this bench builds and loads every
/// structure on its one thread, so that is all of each structure's heap).
#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// What a structure goes through before its peak is read.
#[derive(Clone, Copy)]
enum Load {
    /// Built, nothing inserted.
    Empty,
    /// 1,000,000 increments drawn from a workload.
    Ops(Workload),
    /// One increment of each of this many distinct keys.
    Distinct(u64),
}

const LOADS: [(Load, &str); 6] = [
    (Load::Empty, "new()"),
    (Load::Ops(Workload::Uniform), "1M ops uniform"),
    (Load::Ops(Workload::Zipf), "1M ops Zipf"),
    (Load::Ops(Workload::HotKey), "1M ops hot key"),
    (Load::Distinct(1_000_000), "1M distinct keys"),
    (Load::Distinct(10_000_000), "10M distinct keys"),
];

const OPS: usize = 1_000_000;

/// Peak heap bytes, above the bytes live before, of building a structure and applying `load`.
fn peak<S>(build: impl FnOnce() -> S, incr: impl Fn(&S, u64), load: Load) -> usize {
    let (structure, peak) = peak_bytes_by(|| {
        let structure = build();
        match load {
            Load::Empty => {}
            Load::Ops(workload) => {
                for key in workload.stream(42).take(OPS) {
                    incr(&structure, key);
                }
            }
            Load::Distinct(n) => {
                for key in 0..n {
                    incr(&structure, key);
                }
            }
        }
        structure
    });
    drop(structure);
    peak
}

/// One table row: the structure's peak under every load.
fn row<S>(name: &str, build: impl Fn() -> S, incr: impl Fn(&S, u64)) {
    let started = Instant::now();
    let cells: Vec<String> = LOADS
        .iter()
        .map(|&(load, _)| human(peak(&build, &incr, load)))
        .collect();
    println!("| {name} | {} |", cells.join(" | "));
    eprintln!("  ({name}: {:.1?})", started.elapsed());
}

/// Exact bytes, with a decimal-prefixed figure for reading.
fn human(bytes: usize) -> String {
    let b = bytes as f64;
    let short = if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{bytes} B")
    };
    format!("{bytes} B ({short})")
}

fn main() {
    // ahash seeds its per-instance keys from a process-wide source it allocates on first
    // use; build one of each sketch first so that one-off allocation lands in no cell.
    drop(floodgate::Estimator::new(1, 1));
    drop(pingora_limits::estimator::Estimator::new(1, 1));

    println!(
        "{} above the baseline, each cell a fresh structure.\n",
        common::ids::memory::HEADING
    );
    let header: Vec<&str> = LOADS.iter().map(|&(_, name)| name).collect();
    println!("| structure | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(LOADS.len()));

    for (rows, columns) in [(3, 1024), (4, 8192)] {
        row(
            &format!("floodgate Estimator {rows}×{columns}"),
            || floodgate::Estimator::new(rows, columns),
            |e, k| {
                e.incr(k, 1);
            },
        );
        row(
            &format!("pingora Estimator {rows}×{columns}"),
            || pingora_limits::estimator::Estimator::new(rows, columns),
            |e, k| {
                e.incr(k, 1);
            },
        );
    }
    // Guards are dropped at once: the figure is the structure, not requests held open.
    row(
        "floodgate Inflight (default 4×8192)",
        floodgate::Inflight::new,
        |i, k| drop(i.incr(k, 1)),
    );
    row(
        "pingora Inflight (4×8192)",
        pingora_limits::inflight::Inflight::new,
        |i, k| drop(i.incr(k, 1)),
    );
    row(
        "DashMap<u64, AtomicUsize>",
        DashMap::<u64, AtomicUsize>::new,
        |m, k| {
            if let Some(count) = m.get(&k) {
                count.fetch_add(1, Relaxed);
                return;
            }
            m.entry(k)
                .or_insert_with(|| AtomicUsize::new(0))
                .fetch_add(1, Relaxed);
        },
    );
    row(
        "Mutex<HashMap<u64, usize>>",
        || Mutex::new(HashMap::<u64, usize>::new()),
        |m, k| *m.lock().expect("not poisoned").entry(k).or_insert(0) += 1,
    );
}
