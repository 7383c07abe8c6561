//! What the demo measures of memory, read off the counting allocator (which the program
//! installs): the heap a limiter takes, the whole process's live heap, and what exact per-key
//! maps would hold for the same origins.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use floodgate::{ConfigError, Limiter};
use floodgate_test_support::counting_alloc::{bytes_held_by, process_bytes_held};

use crate::clients::invented_hosts;
use crate::origins::{healthy_host, rotating_host, FLOODED_HOST, HEALTHY_ORIGINS, SLOW_HOST};
use crate::tally::Stats;

/// The limiter `build` builds, and the heap bytes it holds.
pub fn build_measured(
    build: impl FnOnce() -> Result<Limiter<String>, ConfigError>,
) -> Result<(Limiter<String>, usize), ConfigError> {
    // The shared ticker thread starts with the first rate limit; start it before measuring,
    // so the measurement is the limiter's alone.
    drop(
        Limiter::<String>::builder()
            .max_rate(1, Duration::from_secs(1))
            .build()?,
    );
    let (limiter, heap) = bytes_held_by(build);
    Ok((limiter?, heap))
}

/// The live heap of the whole process, and the hosts the rotating attacker had invented by
/// then.
#[derive(Clone, Copy)]
pub struct HeapSample {
    pub heap: isize,
    pub invented: u64,
}

impl HeapSample {
    pub fn take() -> HeapSample {
        HeapSample {
            heap: process_bytes_held(),
            invented: invented_hosts(),
        }
    }
}

/// An exact per-key map as a proxy would keep it for the same limits: per origin, the
/// requests in flight and a sliding window (window id, previous and current counts).
#[derive(Default)]
#[allow(dead_code)] // built to be measured, not read
pub struct ExactCounts {
    inflight: AtomicI64,
    window: AtomicU64,
    previous: AtomicU64,
    current: AtomicU64,
}

/// The heap bytes of exact per-key maps holding every origin that was sent a request.
pub struct ExactMaps {
    pub keys: usize,
    /// A `HashMap<String, ExactCounts>`.
    pub hash_map: usize,
    /// A `DashMap<String, ExactCounts>`.
    pub dash_map: usize,
}

impl ExactMaps {
    /// Builds each map on this thread alone, measures it and drops it: the keys are the
    /// healthy origins that `stats` saw a request for, the slow and flooded ones, and every
    /// host the rotating attacker invented (same-length names stand in for those).
    pub fn measure(stats: &Stats) -> ExactMaps {
        let mut keys: Vec<String> = (0..HEALTHY_ORIGINS)
            .filter(|&i| stats.healthy_requests[i].load(Relaxed) > 0)
            .map(healthy_host)
            .collect();
        keys.extend([SLOW_HOST.to_owned(), FLOODED_HOST.to_owned()]);
        keys.extend((0..invented_hosts()).map(rotating_host));
        let entries = || keys.iter().map(|key| (key.clone(), ExactCounts::default()));
        let hash_map = bytes_held_by(|| entries().collect::<HashMap<_, _>>()).1;
        let dash_map = bytes_held_by(|| entries().collect::<dashmap::DashMap<_, _>>()).1;
        ExactMaps {
            keys: keys.len(),
            hash_map,
            dash_map,
        }
    }
}
