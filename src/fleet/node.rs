//! A node of a fleet: its id, what it last learnt of the fleet, and its report.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{FleetConfig, FleetStatus};
use crate::sync::lock;

/// One limiter's membership of a fleet, shared by its request path (the fleet's size and
/// whether Redis is away, two relaxed loads) and its sync thread (everything else).
pub(crate) struct FleetNode {
    pub(crate) config: FleetConfig,
    /// This node's name in Redis: the process and random bits, so that a restarted process
    /// is a new node (its old counts are not taken for its new ones).
    pub(crate) id: String,
    /// The length of a window, which bounds how long the last view of Redis is trusted.
    pub(crate) window: Duration,
    /// Nodes seen at the last sync that reached Redis (at least 1: this one). `Relaxed`: a
    /// size a sync later or earlier only moves a threshold.
    nodes: AtomicUsize,
    /// Redis has been away for longer than a window: decide on the local share of the limit.
    degraded: AtomicBool,
    report: Mutex<Report>,
}

#[derive(Default)]
struct Report {
    connected: bool,
    last_success: Option<Instant>,
    syncs: u64,
    errors: u64,
    keys: u64,
    last_error: Option<String>,
    /// The failure of this outage has been logged (once per outage).
    logged: bool,
}

impl FleetNode {
    pub(crate) fn new(config: FleetConfig, window: Duration) -> Self {
        FleetNode {
            config,
            id: node_id(),
            window,
            nodes: AtomicUsize::new(1),
            degraded: AtomicBool::new(false),
            report: Mutex::new(Report::default()),
        }
    }

    /// The fleet's size as last seen (1 before the first sync).
    #[inline]
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.load(Ordering::Relaxed).max(1)
    }

    /// Whether Redis has been away longer than a window.
    #[inline]
    pub(crate) fn degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    /// A sync reached Redis: `nodes` seen, `keys` pushed.
    pub(crate) fn succeeded(&self, nodes: usize, keys: usize) {
        self.nodes.store(nodes.max(1), Ordering::Relaxed);
        self.degraded.store(false, Ordering::Relaxed);
        let mut report = lock(&self.report);
        if report.logged {
            log::info!("floodgate fleet: Redis is back, syncing again");
        }
        report.connected = true;
        report.last_success = Some(Instant::now());
        report.syncs += 1;
        report.keys += keys as u64;
        report.last_error = None;
        report.logged = false;
    }

    /// A sync failed with `error`. After a window without a sync the node decides on its
    /// share of each limit until Redis is back.
    pub(crate) fn failed(&self, error: String, since_start: Instant) {
        let mut report = lock(&self.report);
        report.connected = false;
        report.errors += 1;
        if !report.logged {
            log::warn!(
                "floodgate fleet: sync failed ({error}); deciding locally, and on this node's \
                 share of each limit after a window without a sync"
            );
            report.logged = true;
        }
        report.last_error = Some(error);
        let last = report.last_success.unwrap_or(since_start);
        if last.elapsed() > self.window {
            self.degraded.store(true, Ordering::Relaxed);
        }
    }

    /// The report of `Limiter::fleet_status`.
    pub(crate) fn status(&self) -> FleetStatus {
        let report = lock(&self.report);
        FleetStatus {
            connected: report.connected,
            nodes: if report.syncs > 0 { self.nodes() } else { 0 },
            last_sync_age: report.last_success.map(|t| t.elapsed()),
            syncs: report.syncs,
            sync_errors: report.errors,
            keys_synced: report.keys,
            last_error: report.last_error.clone(),
        }
    }
}

/// A name no other node of the fleet has: the process id and random bits.
fn node_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{}-{:016x}", std::process::id(), random.finish())
}
