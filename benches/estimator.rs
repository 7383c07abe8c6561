//! `Estimator::incr` against its floor, pingora-limits' estimator of the same size, DashMap and
//! Mutex<HashMap>, on each workload, with one thread and with two threads sharing one
//! instance. One group per workload, so every ratio comes from one run.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use common::ids::{estimator as ids, THREADS};
use common::{Floor, Workload};
use criterion::{criterion_group, criterion_main, Criterion};
use dashmap::DashMap;

fn estimators(c: &mut Criterion) {
    for workload in Workload::ALL {
        let keys = workload.keys();
        let floor_3x1024 = (Floor::<3, 1024>::new(), Floor::<3, 1024>::keys(&keys));
        let floor_4x8192 = (Floor::<4, 8192>::new(), Floor::<4, 8192>::keys(&keys));
        let floodgate_3x1024 = floodgate::Estimator::new(3, 1024);
        let floodgate_4x8192 = floodgate::Estimator::new(4, 8192);
        let pingora_3x1024 = pingora_limits::estimator::Estimator::new(3, 1024);
        let pingora_4x8192 = pingora_limits::estimator::Estimator::new(4, 8192);
        let dashmap = DashMap::<u64, AtomicUsize>::new();
        let mutex_hashmap = Mutex::new(HashMap::<u64, usize>::new());
        // Insert every key once, so the maps are timed in their steady state (updates of
        // present keys), not while they grow.
        for &key in keys.iter() {
            dashmap_incr(&dashmap, key);
            mutex_hashmap_incr(&mutex_hashmap, key);
        }

        let mut group = common::group(c, ids::PART, workload);
        for threads in THREADS {
            let (floor, floor_keys) = &floor_3x1024;
            common::bench(&mut group, ids::FLOOR_3X1024.id, threads, floor_keys, |k| {
                floor.incr(k, 1)
            });
            common::bench(&mut group, ids::FLOODGATE_3X1024.id, threads, &keys, |k| {
                floodgate_3x1024.incr(k, 1)
            });
            common::bench(&mut group, ids::PINGORA_3X1024.id, threads, &keys, |k| {
                pingora_3x1024.incr(k, 1)
            });
            let (floor, floor_keys) = &floor_4x8192;
            common::bench(&mut group, ids::FLOOR_4X8192.id, threads, floor_keys, |k| {
                floor.incr(k, 1)
            });
            common::bench(&mut group, ids::FLOODGATE_4X8192.id, threads, &keys, |k| {
                floodgate_4x8192.incr(k, 1)
            });
            common::bench(&mut group, ids::PINGORA_4X8192.id, threads, &keys, |k| {
                pingora_4x8192.incr(k, 1)
            });
            common::bench(&mut group, ids::DASHMAP.id, threads, &keys, |k| {
                dashmap_incr(&dashmap, k)
            });
            common::bench(&mut group, ids::MUTEX_HASHMAP.id, threads, &keys, |k| {
                mutex_hashmap_incr(&mutex_hashmap, k)
            });
        }
        group.finish();
    }
}

/// The usual lock-light DashMap counter: a read-locked lookup and an atomic add, taking the
/// write lock only for a key not seen before.
fn dashmap_incr(map: &DashMap<u64, AtomicUsize>, key: u64) -> usize {
    if let Some(count) = map.get(&key) {
        return count.fetch_add(1, Relaxed) + 1;
    }
    map.entry(key)
        .or_insert_with(|| AtomicUsize::new(0))
        .fetch_add(1, Relaxed)
        + 1
}

fn mutex_hashmap_incr(map: &Mutex<HashMap<u64, usize>>, key: u64) -> usize {
    let mut map = map.lock().expect("not poisoned");
    let count = map.entry(key).or_insert(0);
    *count += 1;
    *count
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = estimators
}
criterion_main!(benches);
