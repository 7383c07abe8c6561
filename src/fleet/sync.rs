//! The sync thread of a fleet's node: every sync interval, the counts of the keys the limiter
//! counts exactly go out to Redis, and the fleet's totals of them come back into the limiter.
//!
//! It sees the limiter only through [`Member`], which the limiter implements at its seam with
//! the fleet, so that this module knows nothing of the limiter's storage.

use std::borrow::Cow;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{FleetNode, FleetView, Push, Store};
use crate::clock::saturating_nanos;
use crate::rate::Rate;
use crate::ConfigError;

/// What the sync thread reads and writes of a limiter.
pub(crate) trait Member: Send + Sync + 'static {
    /// The limiter's rate windows (a fleet limiter always has them).
    fn rate(&self) -> Option<&Rate>;

    /// Calls `f` with each key the limiter counts exactly, its counts as of `bucket`.
    fn for_each_tracked(&self, bucket: u64, f: &mut dyn FnMut(Tracked<'_>));

    /// Calls `f` on the fleet's view of the key pushed as `hash` and `generation`, if the
    /// limiter still counts that key there.
    fn learnt(&self, hash: u64, generation: u64, f: &mut dyn FnMut(&mut FleetView));
}

/// One key the limiter counts exactly, as the sync reads it.
#[derive(Debug)]
pub(crate) struct Tracked<'a> {
    /// Where the key's entry is, to find it again when the fleet answers.
    pub(crate) hash: u64,
    pub(crate) generation: u64,
    /// The key's name in the fleet.
    pub(crate) key: Cow<'a, [u8]>,
    /// This node's count of the key in the current window, and in the one before.
    pub(crate) count: u64,
    pub(crate) previous: u64,
    /// What the fleet last said of the key, and this node's refusals of it.
    pub(crate) view: FleetView,
}

/// The window length a fleet accepts: whole milliseconds, as Redis names windows.
pub(crate) fn check_interval(interval: Duration) -> Result<(), ConfigError> {
    if interval.subsec_nanos() % 1_000_000 != 0 {
        return Err(ConfigError::Fleet(format!(
            "a fleet limiter's rate interval must be a whole number of milliseconds, got \
             {interval:?}"
        )));
    }
    Ok(())
}

/// Starts the sync thread of `limiter`'s node. It holds the limiter weakly and ends with it.
pub(crate) fn spawn<L: Member + ?Sized>(limiter: Weak<L>, node: Arc<FleetNode>) {
    let spawned = thread::Builder::new()
        .name("floodgate-fleet".into())
        .spawn(move || sync_loop(&limiter, &node));
    if let Err(error) = spawned {
        log::error!("floodgate fleet: cannot start the sync thread ({error}); deciding locally");
    }
}

/// One key to push, owned across the round trip to Redis.
struct Pushed {
    hash: u64,
    generation: u64,
    key: Vec<u8>,
    count: u64,
    previous: u64,
    /// This node's refusals in the current window, and in the one before.
    refused: (u64, u64),
}

fn sync_loop<L: Member + ?Sized>(limiter: &Weak<L>, node: &FleetNode) {
    let mut store = match Store::new(&node.config) {
        Ok(store) => store,
        Err(error) => {
            node.failed(error.to_string());
            return;
        }
    };
    let interval = node.config.get_sync_interval();
    let mut keys: Vec<Pushed> = Vec::new();
    let mut next = Instant::now();
    loop {
        // The first sync at once: until it, the node knows no fleet (it counts itself alone).
        match limiter.upgrade() {
            Some(limiter) => sync_once(&*limiter, node, &mut store, &mut keys),
            None => return,
        }
        // Checked: `validate` bounds the interval, but the sync thread may not panic on it.
        next = next.checked_add(interval).unwrap_or(next);
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now; // late: do not try to catch up
        }
    }
}

/// One sync: the tracked keys' counts out, the fleet's totals back into their views.
fn sync_once<L: Member + ?Sized>(
    limiter: &L,
    node: &FleetNode,
    store: &mut Store,
    keys: &mut Vec<Pushed>,
) {
    let Some(rate) = limiter.rate() else {
        return;
    };
    let (bucket, at, into) = rate.now_bucket();
    let window = rate.window_number(bucket);
    keys.clear();
    limiter.for_each_tracked(bucket, &mut |tracked| {
        keys.push(Pushed {
            hash: tracked.hash,
            generation: tracked.generation,
            key: tracked.key.into_owned(),
            count: tracked.count,
            previous: tracked.previous,
            refused: tracked.view.refused.of(bucket),
        });
    });
    let pushes: Vec<Push<'_>> = keys
        .iter()
        .map(|k| Push {
            key: &k.key,
            window,
            count: k.count,
            // Every push carries the final count of the window before: the last sync of that
            // window missed its last moments, and a Redis that restarted empty lost it.
            previous: k.previous,
            refused: k.refused.0,
            refused_previous: k.refused.1,
        })
        .collect();
    let window_ms = u64::try_from(rate.interval().as_millis()).unwrap_or(u64::MAX);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // The windows took their alignment from the Unix clock when the limiter was built, and
    // follow the monotonic clock since: a Unix clock stepped since then is told once.
    let aligned_ms = window
        .saturating_mul(window_ms)
        .saturating_add(into / 1_000_000);
    node.check_clock(now_ms as i128 - aligned_ms as i128);
    match store.sync(&node.id, now_ms, window_ms, &pushes) {
        Ok(synced) => {
            let len = saturating_nanos(rate.interval());
            let sync = saturating_nanos(node.config.get_sync_interval());
            for (pushed, totals) in keys.iter().zip(synced.totals) {
                limiter.learnt(pushed.hash, pushed.generation, &mut |view| {
                    *view = view.synced(
                        (bucket, at, into),
                        totals,
                        (pushed.count, pushed.previous),
                        (len, sync),
                    );
                });
            }
            node.succeeded(synced.nodes, pushes.len());
        }
        Err(error) => node.failed(error.to_string()),
    }
}
