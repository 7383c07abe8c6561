//! A node of a fleet: its id, what it last learnt of the fleet, and its report
//! ([`FleetStatus`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::config::FleetConfig;
use crate::sync::lock;

/// One limiter's membership of a fleet, shared by its request path (the fleet's size, its
/// inverse, and the time of the last good sync: relaxed loads, each free to be a sync older
/// or newer than the others, which only moves a threshold for one request) and its sync
/// thread (everything else).
pub(crate) struct FleetNode {
    pub(crate) config: FleetConfig,
    /// This node's name in Redis: the process and random bits, so that a restarted process
    /// is a new node (its old counts are not taken for its new ones).
    pub(crate) id: String,
    /// The sync interval in nanoseconds.
    pub(crate) sync_nanos: u64,
    /// Nodes seen at the last sync that reached Redis (at least 1: this one). `Relaxed`: a
    /// size a sync later or earlier only moves a threshold.
    nodes: AtomicUsize,
    /// `1 ÷ nodes` as `f64` bits, for the request path to multiply by.
    inverse: AtomicU64,
    /// When the last sync that reached Redis ended (or the node was made), on the shared
    /// coarse clock, in nanoseconds.
    last_ok: AtomicU64,
    /// How long the last view is trusted: after that the node decides on its local share.
    stale_after: u64,
    report: Mutex<Report>,
    /// A step of the Unix clock has been told (once per node).
    clock_told: AtomicBool,
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

/// What a node reports about its syncing with the fleet, from
/// `Limiter::fleet_status` (`None` for a limiter without a fleet).
///
/// A snapshot: it does not change once returned.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FleetStatus {
    /// Whether the last sync reached Redis (and the connection is still open).
    pub connected: bool,
    /// Nodes seen by Redis within the nodes' time to live
    /// ([`FleetConfig::node_ttl`]), this one included, as of the last sync that succeeded;
    /// 0 before the first.
    pub nodes: usize,
    /// Time since the last sync that succeeded; `None` before the first.
    pub last_sync_age: Option<Duration>,
    /// Syncs that succeeded.
    pub syncs: u64,
    /// Syncs that failed (Redis unreachable, slow, or refusing).
    pub sync_errors: u64,
    /// Keys pushed and pulled, over all the syncs that succeeded.
    pub keys_synced: u64,
    /// The last failure, if the last sync failed.
    pub last_error: Option<String>,
    /// Whether the node decides on its local share of each limit, `⌈L ÷ nodes⌉` on its own
    /// counts, because its last view of the fleet is too old to trust (no sync has succeeded
    /// for three sync intervals, or the timeout and one interval when longer, at most a
    /// window): Redis is away or too slow.
    pub on_local_share: bool,
}

impl FleetNode {
    pub(crate) fn new(config: FleetConfig, window: Duration) -> Self {
        let stale_after = {
            let interval = config.get_sync_interval();
            // Saturating: `validate` bounds both, but nothing here may panic on what it is
            // given.
            let after = interval
                .saturating_mul(3)
                .max(config.get_timeout().saturating_add(interval))
                .min(window);
            crate::clock::saturating_nanos(after)
        };
        let sync_nanos = crate::clock::saturating_nanos(config.get_sync_interval());
        // The expected size until Redis says: a node that never reaches it decides on its
        // share, not the whole limit.
        let expected = config.get_expected_nodes().max(1);
        FleetNode {
            config,
            id: node_id(),
            sync_nanos,
            nodes: AtomicUsize::new(expected),
            inverse: AtomicU64::new((1.0 / expected as f64).to_bits()),
            // On the shared coarse clock whatever the limiter's (a limiter on a manual clock
            // has no `Rate` on it): the time a real sync thread's rounds take.
            last_ok: AtomicU64::new(coarse_nanos()),
            stale_after,
            report: Mutex::new(Report::default()),
            clock_told: AtomicBool::new(false),
        }
    }

    /// `1 ÷` the fleet's size as last seen (relaxed like the size: a threshold a sync late).
    #[inline]
    pub(crate) fn inverse(&self) -> f64 {
        f64::from_bits(self.inverse.load(Ordering::Relaxed))
    }

    /// The fleet's size as last seen (1 before the first sync).
    #[inline]
    pub(crate) fn nodes(&self) -> usize {
        self.nodes.load(Ordering::Relaxed).max(1)
    }

    /// Whether the last sync that reached Redis is too old to trust its view: decided on the
    /// request path, so that a sync blocked on a stalled Redis does not delay it.
    #[inline]
    pub(crate) fn degraded(&self) -> bool {
        // One load: the request's own `Rate` reads start and watch the ticker (a thread-local
        // count per read, which this check need not pay again).
        crate::clock::coarse_load().saturating_sub(self.last_ok.load(Ordering::Relaxed))
            > self.stale_after
    }

    /// A sync reached Redis: `nodes` seen, `keys` pushed.
    pub(crate) fn succeeded(&self, nodes: usize, keys: usize) {
        self.nodes.store(nodes.max(1), Ordering::Relaxed);
        self.inverse
            .store((1.0 / nodes.max(1) as f64).to_bits(), Ordering::Relaxed);
        self.last_ok.store(coarse_nanos(), Ordering::Relaxed);
        let mut report = lock(&self.report);
        let was_out = report.logged;
        report.connected = true;
        report.last_success = Some(Instant::now());
        report.syncs += 1;
        report.keys += keys as u64;
        report.last_error = None;
        report.logged = false;
        drop(report);
        // Logged after the lock: a logger may be slow, and `fleet_status` takes the lock.
        if was_out {
            log::info!("floodgate fleet: Redis is back, syncing again");
        }
    }

    /// A sync failed with `error` (counted and, once per outage, logged). Whether the node
    /// decides on its share is a matter of time since the last success: see
    /// [`degraded`](Self::degraded).
    pub(crate) fn failed(&self, error: String) {
        let mut report = lock(&self.report);
        report.connected = false;
        report.errors += 1;
        let first = !report.logged;
        report.logged = true;
        let never_reached = report.syncs == 0;
        let told = first.then(|| error.clone());
        report.last_error = Some(error);
        drop(report);
        match told {
            // Most likely a wrong URL or port, a firewall, or Redis not started: until it is
            // fixed the fleet holds no common limit, so this is an error, not a warning.
            Some(error) if never_reached => log::error!(
                "floodgate fleet: cannot reach Redis at {:?} ({error}); check the URL and \
                 port. Until it is reached this node decides alone, on its share of each \
                 limit as if the fleet had {} nodes (FleetConfig::expected_nodes)",
                self.config.redacted_urls(),
                self.config.get_expected_nodes()
            ),
            Some(error) => log::warn!(
                "floodgate fleet: sync failed ({error}); deciding locally, and on this node's \
                 share of each limit once its last view is stale"
            ),
            None => {}
        }
    }

    /// The Unix clock reads `offset_ms` away from the time the limiter's windows stand at
    /// (their alignment is taken once, when the limiter is built): more than a sync interval
    /// is logged, once.
    pub(crate) fn check_clock(&self, offset_ms: i128) {
        let interval =
            i128::try_from(self.config.get_sync_interval().as_millis()).unwrap_or(i128::MAX);
        if offset_ms.abs() > interval && !self.clock_told.swap(true, Ordering::Relaxed) {
            log::warn!(
                "floodgate fleet: the Unix clock is {offset_ms} ms away from this limiter's \
                 windows, aligned when it was built: its counts go to other windows than the \
                 fleet's; build the limiter again once the clock is set"
            );
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
            on_local_share: self.degraded(),
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

/// The shared coarse clock in nanoseconds (its first read starts the ticker).
#[inline]
fn coarse_nanos() -> u64 {
    crate::clock::saturating_nanos(crate::clock::coarse_now())
}
