//! loom models of the limiter's exact stage: requests racing a promotion (the handshake
//! between the sketch increment and the filter, see `src/limiter/exact/mod.rs`) never hold
//! more than the limit, a release racing the clock's sweep leaves the counts balanced, a
//! release without the lock racing an admission never lets it pass the limit, and a
//! refusal from the over-limit cache racing the sweep counts its key's run of refusals once
//! (`src/limiter/overlimit.rs`).
//!
//! Run with (a separate target dir keeps the normal build cache intact):
//!
//! ```sh
//! RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_limiter
//! ```
//!
//! In-flight limits but for the last model (the rate path's windows have models of their own
//! in `tests/loom_rate.rs`), a one-counter sketch and one set of 16 places, and hashers with
//! fixed keys under loom, so every iteration touches the same atomics. Each model builds its
//! clock and limiter inside `loom::model`, as loom requires of the crate's atomics and locks.

#![cfg(floodgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;

use floodgate::clock::ManualClock;
use floodgate::{Figure, Limiter};
use floodgate_test_support::loom::check;

/// At most `limit` in flight per key; a key is promoted once `promote_at` are in flight.
fn limiter(clock: &ManualClock, limit: u32, promote_at: u32) -> Arc<Limiter<u64>> {
    let limiter = Limiter::builder()
        .max_inflight(limit)
        .promotion_threshold(promote_at as f64 / limit as f64)
        .sketch(1, 1)
        .exact_capacity(16)
        .clock(clock)
        .build()
        .unwrap();
    Arc::new(limiter)
}

/// Limit 2, promoted at 2 in flight: the first request is admitted by the sketch alone, the
/// second promotes the key (flag, then read the sketch for its base), the third is decided by
/// the exact stage. Whatever the interleaving, at most two hold a permit, and once all are
/// dropped the key's count is back to 0.
#[test]
fn requests_racing_a_promotion_never_hold_more_than_the_limit() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, 2, 2);
        let others: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                thread::spawn(move || limiter.try_acquire_owned(&7).ok())
            })
            .collect();
        let mine = limiter.try_acquire_owned(&7).ok();
        let mut permits: Vec<_> = others.into_iter().map(|t| t.join().unwrap()).collect();
        permits.push(mine);
        let held = permits.iter().flatten().count();
        assert!(held <= 2, "{held} permits held over a limit of 2");
        assert!(held >= 1, "no request admitted");
        drop(permits);
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
    });
}

/// A promoted key's last permit is dropped on one thread while the clock's sweep runs on
/// another: the key ends demoted or still promoted, but its counts balance and its full
/// limit is available again.
#[test]
fn a_release_racing_the_sweep_leaves_the_counts_balanced() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, 2, 1);
        let permit = limiter.try_acquire_owned(&7).unwrap();
        assert_eq!(limiter.stats().promoted, 1);
        let sweeper = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_secs(1)))
        };
        drop(permit);
        sweeper.join().unwrap();
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
        let again: Vec<_> = (0..3)
            .filter_map(|_| limiter.try_acquire(&7).ok())
            .collect();
        assert_eq!(again.len(), 2, "the key's full limit is available again");
    });
}

/// A promoted key's permit is given back without the lock (another of its permits stays in
/// flight) while another thread's request is decided under the lock: the admission sees the
/// unit given back or not, never more than the limit is held, and once all are dropped the
/// key's count is back to 0 and its full limit is available again.
#[test]
fn a_release_without_the_lock_racing_an_admission_never_holds_more_than_the_limit() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = limiter(&clock, 2, 1);
        let kept = limiter.try_acquire_owned(&7).unwrap();
        let given_back = limiter.try_acquire_owned(&7).unwrap();
        assert_eq!(limiter.stats().promoted, 1);
        let admitting = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_owned(&7).ok())
        };
        drop(given_back);
        let admitted = admitting.join().unwrap();
        // The exact stage counts every unit held, no more, no fewer: none given back twice or
        // not at all, none counted past the limit.
        let held = 1 + isize::from(admitted.is_some());
        let hitters = limiter.heavy_hitters();
        assert_eq!(
            hitters.len(),
            1,
            "still promoted: one permit stayed in flight"
        );
        assert_eq!(hitters[0].inflight, Some(Figure::Counted(held)));
        drop((kept, admitted));
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
        let again: Vec<_> = (0..3)
            .filter_map(|_| limiter.try_acquire(&7).ok())
            .collect();
        assert_eq!(again.len(), 2, "the key's full limit is available again");
    });
}

/// A key's refusal answered by the over-limit cache marks the deadline its last admission
/// held there (one compare-and-swap) while the clock's sweep counts the key's runs of such
/// refusals under its set's lock: whatever the interleaving, the report counts the run once,
/// before the deadline passes and after the sweep that clears it.
#[test]
fn a_refusal_from_the_cache_racing_the_sweep_counts_its_run_once() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = Limiter::builder()
            .max_rate(2, Duration::from_secs(1))
            .promotion_threshold(0.5)
            .sketch(1, 1)
            .exact_capacity(16)
            .clock(&clock)
            .build()
            .unwrap();
        let limiter = Arc::new(limiter);
        // The second admission fills the key: one more fits 1.5 s in.
        drop(limiter.try_acquire(&7).unwrap());
        drop(limiter.try_acquire(&7).unwrap());
        let refuser = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire(&7).is_err())
        };
        clock.advance(Duration::from_secs(1));
        assert!(refuser.join().unwrap(), "refused");
        let rejected = |limiter: &Limiter<u64>| limiter.heavy_hitters()[0].rejected;
        assert_eq!(rejected(&limiter), 1);
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            rejected(&limiter),
            1,
            "after the sweep that cleared the deadline"
        );
    });
}
