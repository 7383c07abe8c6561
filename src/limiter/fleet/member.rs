//! The limiter as its fleet's sync thread sees it ([`Member`]): the keys of the exact stage
//! with their counts, and their views to write the fleet's totals into.

use std::hash::Hash;
use std::sync::{Arc, Weak};

use crate::fleet::{FleetKey, FleetNode, FleetView, Member, Tracked};
use crate::limiter::shared::Shared;
use crate::rate::Rate;

/// Starts the sync thread of `shared`'s node (the `spawn` of a `FleetSetup` for keys `K`).
pub(crate) fn spawn_sync<K>(shared: Weak<Shared<K>>, node: Arc<FleetNode>)
where
    K: FleetKey + Hash + Eq + Send + Sync + 'static,
{
    crate::fleet::spawn(shared, node);
}

impl<K> Member for Shared<K>
where
    K: FleetKey + Hash + Eq + Send + Sync + 'static,
{
    fn rate(&self) -> Option<&Rate> {
        self.sketches.rate.as_ref()
    }

    fn for_each_tracked(&self, bucket: u64, f: &mut dyn FnMut(Tracked<'_>)) {
        self.exact.for_each(|entry, _, _| {
            let mut counts = entry.state.counts.rate;
            counts.roll_to(bucket);
            let own = |b: Option<u64>| {
                b.and_then(|b| counts.bound(b))
                    .map_or(0, |n| n.max(0) as u64)
            };
            f(Tracked {
                hash: entry.hash,
                generation: entry.generation,
                key: entry.key.fleet_key(),
                count: own(Some(bucket)),
                previous: own(bucket.checked_sub(1)),
                view: entry.state.counts.fleet,
            });
        });
    }

    fn learnt(&self, hash: u64, generation: u32, f: &mut dyn FnMut(&mut FleetView)) {
        self.exact.update(hash, generation, |entry, _| {
            f(&mut entry.state.counts.fleet)
        });
    }
}
