//! `Inflight::incr` plus dropping its guard — one request's whole in-flight bookkeeping —
//! for floodgate's `Guard` (which shares the counters through an `Arc`, like pingora-limits'
//! guard), its `BorrowedGuard` (from `incr_borrowed`, no reference count), and
//! pingora-limits' `Inflight` (fixed at 4 × 8192), next to the floor of H `fetch_add`s and H
//! `fetch_sub`s at that size. One group per workload, one and two threads.

mod common;

use common::ids::{inflight as ids, THREADS};
use common::{Floor, Workload};
use criterion::{criterion_group, criterion_main, Criterion};

fn inflight(c: &mut Criterion) {
    for workload in Workload::ALL {
        let keys = workload.keys();
        let (floor, floor_keys) = (Floor::<4, 8192>::new(), Floor::<4, 8192>::keys(&keys));
        // floodgate at pingora-limits' fixed size (also floodgate's default).
        let floodgate = floodgate::Inflight::new();
        let pingora = pingora_limits::inflight::Inflight::new();

        let mut group = common::group(c, ids::PART, workload);
        for threads in THREADS {
            common::bench(
                &mut group,
                ids::FLOOR_4X8192.id,
                threads,
                &floor_keys,
                |k| {
                    let estimate = floor.incr(k, 1);
                    floor.decr(k, 1);
                    estimate
                },
            );
            common::bench(&mut group, ids::FLOODGATE_GUARD.id, threads, &keys, |k| {
                let (guard, estimate) = floodgate.incr(k, 1);
                drop(guard);
                estimate
            });
            common::bench(
                &mut group,
                ids::FLOODGATE_BORROWED_GUARD.id,
                threads,
                &keys,
                |k| {
                    let (guard, estimate) = floodgate.incr_borrowed(k, 1);
                    drop(guard);
                    estimate
                },
            );
            common::bench(&mut group, ids::PINGORA.id, threads, &keys, |k| {
                let (guard, estimate) = pingora.incr(k, 1);
                drop(guard);
                estimate
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = inflight
}
criterion_main!(benches);
