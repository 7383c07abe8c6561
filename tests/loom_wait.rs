//! loom models of waiting for a permit (`Limiter::acquire`, see `src/limiter/wait/mod.rs`):
//! a permit that comes back while a request is parking is never missed, and a waiter
//! cancelled after it was woken for a permit passes its turn on, so no permit is lost with
//! it.
//!
//! Run with (a separate target dir keeps the normal build cache intact):
//!
//! ```sh
//! RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom_wait
//! ```
//!
//! A lost wake-up shows as a deadlock: `block_on` parks its thread until the future is woken,
//! and loom reports an execution in which every thread is blocked. In-flight limits only (a
//! rate waiter is woken by the clock, which a model does not advance), a one-counter sketch,
//! and a limiter built inside each model, as loom requires of the crate's atomics and locks.

#![cfg(floodgate_loom)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;

use floodgate::clock::ManualClock;
use floodgate::Limiter;
use floodgate_test_support::loom::check;

/// Longer than any model runs: the clock never moves, so no waiter gives up.
const FOREVER: Duration = Duration::from_secs(3600);

/// One request in flight at most per key.
fn limiter(clock: &ManualClock) -> Arc<Limiter<u64>> {
    let limiter = Limiter::builder()
        .max_inflight(1)
        .sketch(1, 1)
        .exact_capacity(16)
        .max_waiters(4)
        .clock(clock)
        .build()
        .unwrap();
    Arc::new(limiter)
}

/// A waker that does nothing: for a future polled once by hand.
struct Ignore;

impl Wake for Ignore {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// The permit is given back on another thread while the request makes its first attempt,
/// parks and counts itself: whatever the interleaving, the request ends up admitted.
#[test]
fn a_permit_given_back_while_a_request_parks_is_never_missed() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = limiter(&clock);
        let held = limiter.try_acquire_owned(&7).unwrap();
        let releaser = thread::spawn(move || drop(held));
        let permit = block_on(limiter.acquire(&7, FOREVER));
        assert!(permit.is_ok(), "{permit:?}");
        releaser.join().unwrap();
        drop(permit);
        assert_eq!(limiter.stats().waiting, 0);
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
    });
}

/// Two waiters in line; the permit comes back on one thread while the first waiter is
/// cancelled on another. Whether the release finds the first waiter (which then passes its
/// turn on as it leaves) or only the second, the second is admitted.
#[test]
fn a_waiter_cancelled_after_its_wake_up_passes_the_permit_on() {
    check(|| {
        let clock = ManualClock::new();
        let limiter = limiter(&clock);
        let held = limiter.try_acquire_owned(&7).unwrap();
        let mut first = limiter.acquire(&7, FOREVER);
        let waker = Waker::from(std::sync::Arc::new(Ignore));
        assert!(Pin::new(&mut first)
            .poll(&mut Context::from_waker(&waker))
            .is_pending());
        let second = limiter.acquire(&7, FOREVER);
        let releaser = thread::spawn(move || drop(held));
        let canceller = thread::spawn(move || drop(first));
        let permit = block_on(second);
        assert!(permit.is_ok(), "{permit:?}");
        releaser.join().unwrap();
        canceller.join().unwrap();
        drop(permit);
        assert_eq!(limiter.stats().waiting, 0);
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
    });
}

/// The first model for a key the exact stage has no place for: its one set of 16 is held by
/// keys with as much evidence as its knocks (a request decided and one in flight each, two
/// knocks), so the request is refused by the sketch alone, and as head of its
/// line it reads the key's count after counting itself instead of trying again
/// (`Shared::refused_again_in_flight`). Whatever the interleaving with the release, the
/// request ends up admitted.
#[test]
fn a_permit_given_back_while_a_request_of_a_key_without_a_place_parks_is_never_missed() {
    // Setting the stage up takes more of loom's branches than its default allows.
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 20_000;
    builder.check(|| {
        let clock = ManualClock::new();
        let limiter = Limiter::builder()
            .max_inflight(1)
            .sketch(2, 64)
            .exact_capacity(16)
            .max_waiters(4)
            .clock(&clock)
            .build()
            .unwrap();
        let limiter = Arc::new(limiter);
        let residents: Vec<_> = (100..116u64)
            .map(|key| limiter.try_acquire_owned(&key).unwrap())
            .collect();
        let held = limiter.try_acquire_owned(&7).unwrap();
        assert_eq!(limiter.stats().promoted, 16, "no place for the key");
        let releaser = thread::spawn(move || drop(held));
        let permit = block_on(limiter.acquire(&7, FOREVER));
        assert!(permit.is_ok(), "{permit:?}");
        releaser.join().unwrap();
        drop(permit);
        drop(residents);
        assert_eq!(limiter.stats().waiting, 0);
        assert_eq!(limiter.estimate(&7).inflight, Some(0));
    });
}
