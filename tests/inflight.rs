//! Public-API tests of [`floodgate::Inflight`] and its guards: estimates never below the true
//! number in flight, and guards that always give their count back — on any thread, during a
//! panic unwind, when a future is cancelled, and after `Guard::incr`.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::mpsc;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, Wake, Waker};
use std::thread;

use floodgate::{Guard, Inflight, OwnedGuard};
use proptest::prelude::*;

mod common;

use common::bytes_allocated_by;

#[global_allocator]
static GLOBAL: common::CountingAlloc = common::CountingAlloc;

fn assert_send<T: Send>(_: &T) {}

// ---------------------------------------------------------------------------------------------
// Properties 1 and 2 against an exact model, for any interleaving of acquires and drops.

const KEYS: u64 = 8;

#[derive(Debug, Clone)]
enum Op {
    /// Acquire `key` with `value`; an `OwnedGuard` when `owned`.
    Acquire { key: u64, value: isize, owned: bool },
    /// Drop the live guard at `pick % live.len()`.
    Drop(usize),
    /// `incr()` the live guard at `pick % live.len()`.
    Incr(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS, 0isize..=5, any::<bool>())
            .prop_map(|(key, value, owned)| Op::Acquire { key, value, owned }),
        3 => any::<usize>().prop_map(Op::Drop),
        2 => any::<usize>().prop_map(Op::Incr),
    ]
}

enum AnyGuard<'a> {
    Borrowed(Guard<'a>),
    Owned(OwnedGuard),
}

impl AnyGuard<'_> {
    fn incr(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.incr(),
            AnyGuard::Owned(g) => g.incr(),
        }
    }

    fn get(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.get(),
            AnyGuard::Owned(g) => g.get(),
        }
    }
}

/// A live guard and what the model says it holds.
struct Live<'a> {
    guard: AnyGuard<'a>,
    key: u64,
    unit: isize,
    total: isize,
}

fn in_flight(live: &[Live<'_>], key: u64) -> isize {
    live.iter().filter(|l| l.key == key).map(|l| l.total).sum()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn estimate_never_below_in_flight_and_zero_when_all_guards_dropped(
        rows in 1usize..=3,
        columns in 1usize..=8,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        // Small sketches, so that keys collide.
        let inflight = Arc::new(Inflight::with_size(rows, columns).unwrap());
        let mut live: Vec<Live<'_>> = Vec::new();
        for op in ops {
            match op {
                Op::Acquire { key, value, owned } => {
                    let (guard, estimate) = if owned {
                        let (g, n) = inflight.incr_owned(key, value);
                        (AnyGuard::Owned(g), n)
                    } else {
                        let (g, n) = inflight.incr(key, value);
                        (AnyGuard::Borrowed(g), n)
                    };
                    live.push(Live { guard, key, unit: value, total: value });
                    let truth = in_flight(&live, key);
                    prop_assert!(estimate >= truth, "incr returned {} < {}", estimate, truth);
                }
                Op::Drop(pick) => {
                    if !live.is_empty() {
                        drop(live.swap_remove(pick % live.len()));
                    }
                }
                Op::Incr(pick) => {
                    if !live.is_empty() {
                        let i = pick % live.len();
                        live[i].total += live[i].unit;
                        let estimate = live[i].guard.incr();
                        let truth = in_flight(&live, live[i].key);
                        prop_assert!(estimate >= truth, "Guard::incr returned {} < {}", estimate, truth);
                    }
                }
            }
            let total: isize = live.iter().map(|l| l.total).sum();
            for key in 0..KEYS {
                let (estimate, truth) = (inflight.get(key), in_flight(&live, key));
                prop_assert!(estimate >= truth, "key {} reads {} < {} in flight", key, estimate, truth);
                prop_assert!(estimate <= total, "key {} reads {} > {} in flight in all", key, estimate, total);
            }
            for l in &live {
                prop_assert!(l.guard.get() >= in_flight(&live, l.key));
            }
        }
        drop(live);
        for key in 0..KEYS {
            prop_assert_eq!(inflight.get(key), 0, "key {} after every guard dropped", key);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Property 2 across threads.

#[test]
fn guards_moved_across_threads_and_dropped_elsewhere_balance_to_zero() {
    const PRODUCERS: u64 = 2;
    const DROPPERS: usize = 2;
    const PER_PRODUCER: u64 = 4_000;
    const KEYS: u64 = 6;
    let inflight = Arc::new(Inflight::with_size(2, 8).unwrap());
    // Held across the whole test: every read of the sentinel key must see it.
    let (sentinel, _) = inflight.incr("sentinel", 1);

    thread::scope(|s| {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..DROPPERS)
            .map(|_| mpsc::channel::<AnyGuard<'_>>())
            .unzip();
        for p in 0..PRODUCERS {
            let senders = senders.clone();
            let inflight = &inflight;
            s.spawn(move || {
                for i in 0..PER_PRODUCER {
                    let key = (p + i) % KEYS;
                    let guard = if i % 3 == 0 {
                        let (g, n) = inflight.incr_owned(key, 2);
                        assert!(n >= 2, "estimate {n} below the guard's own 2");
                        AnyGuard::Owned(g)
                    } else {
                        let (g, n) = inflight.incr(key, 1);
                        assert!(n >= 1, "estimate {n} below the guard's own 1");
                        AnyGuard::Borrowed(g)
                    };
                    assert!(inflight.get("sentinel") >= 1);
                    senders[(i as usize) % DROPPERS].send(guard).unwrap();
                }
            });
        }
        drop(senders);
        for rx in receivers {
            let inflight = &inflight;
            s.spawn(move || {
                for (i, guard) in rx.into_iter().enumerate() {
                    let held = if i % 5 == 0 {
                        // Add once more on this thread; the drop below gives both back.
                        let before = guard.get();
                        assert!(guard.incr() > 0 && before > 0);
                        2
                    } else {
                        1
                    };
                    assert!(guard.get() >= held);
                    assert!(inflight.get("sentinel") >= 1);
                    drop(guard);
                }
            });
        }
    });

    for key in 0..KEYS {
        assert!(
            inflight.get(key) <= 1,
            "key {key}: only the sentinel may collide"
        );
    }
    drop(sentinel);
    for key in 0..KEYS {
        assert_eq!(inflight.get(key), 0, "key {key} after every guard dropped");
    }
    assert_eq!(inflight.get("sentinel"), 0);
}

#[test]
fn guard_dropped_during_panic_unwind_gives_count_back() {
    let inflight = Inflight::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let (_guard, n) = inflight.incr("origin-a", 3);
        assert_eq!(n, 3);
        assert_eq!(inflight.get("origin-a"), 3);
        panic!("the request handler panicked while holding the guard");
    }));
    assert!(result.is_err());
    assert_eq!(inflight.get("origin-a"), 0);
}

#[test]
fn owned_guard_dropped_during_panic_unwind_on_another_thread_gives_count_back() {
    let inflight = Arc::new(Inflight::new());
    let (guard, n) = inflight.incr_owned("origin-a", 2);
    assert_eq!(n, 2);
    let handle = thread::spawn(move || {
        let _guard = guard;
        panic!("the task holding the owned guard panicked");
    });
    assert!(handle.join().is_err());
    assert_eq!(inflight.get("origin-a"), 0);

    // And caught on the current thread.
    let result = catch_unwind(AssertUnwindSafe(|| {
        let (guard, _) = inflight.incr_owned("origin-b", 1);
        guard.incr();
        panic!("boom");
    }));
    assert!(result.is_err());
    assert_eq!(inflight.get("origin-b"), 0);
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn guard_held_across_await_is_given_back_when_the_future_is_cancelled() {
    let inflight = Inflight::new();
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    {
        let mut request = pin!(async {
            let (_guard, _) = inflight.incr("origin-a", 1);
            std::future::pending::<()>().await; // an upstream that never answers
        });
        assert_eq!(request.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(
            inflight.get("origin-a"),
            1,
            "in flight while the future is pending"
        );
        // The client disconnects: the proxy drops the future without polling it again.
    }
    assert_eq!(inflight.get("origin-a"), 0);
}

#[test]
fn owned_guard_balances_like_a_borrowed_one() {
    let inflight = Arc::new(Inflight::with_size(3, 64).unwrap());
    let (a, n) = inflight.incr_owned("k", 2);
    assert_eq!(n, 2);
    let (b, n) = inflight.incr_owned("k", 3);
    assert_eq!(n, 5);
    assert_eq!(a.get(), 5);
    drop(a);
    assert_eq!(b.get(), 3);
    // The guard keeps the Inflight alive after the caller's handle is gone.
    let weak = Arc::downgrade(&inflight);
    drop(inflight);
    assert_eq!(b.incr(), 6);
    drop(b);
    assert!(
        weak.upgrade().is_none(),
        "the last guard released the Inflight"
    );
}

/// pingora-limits' `Guard::incr` added to the count but its drop gave back only the initial
/// value, so every `incr` leaked permanently into the key's in-flight count.
#[test]
fn regression_pingora_guard_incr_leaked_count_on_drop() {
    let inflight = Arc::new(Inflight::new());
    let (guard, n) = inflight.incr("origin-a", 2);
    assert_eq!(n, 2);
    assert_eq!(guard.incr(), 4);
    assert_eq!(guard.incr(), 6);
    assert_eq!(guard.get(), 6);
    drop(guard);
    assert_eq!(inflight.get("origin-a"), 0, "Guard::incr leaked");

    let (owned, _) = inflight.incr_owned("origin-b", 1);
    for expected in 2..=5 {
        assert_eq!(owned.incr(), expected);
    }
    drop(owned);
    assert_eq!(inflight.get("origin-b"), 0, "OwnedGuard::incr leaked");
}

#[test]
fn static_guard_is_send_and_can_be_dropped_on_another_thread() {
    static INFLIGHT: LazyLock<Inflight> = LazyLock::new(Inflight::new);
    let (guard, n): (Guard<'static>, isize) = INFLIGHT.incr("origin-a", 2);
    assert_eq!(n, 2);
    assert_send(&guard);
    // `thread::spawn` needs `Send + 'static`: this compiles only for a `Guard<'static>`.
    thread::spawn(move || {
        assert_eq!(guard.get(), 2);
        drop(guard);
    })
    .join()
    .unwrap();
    assert_eq!(INFLIGHT.get("origin-a"), 0);
}

#[test]
fn inflight_and_guards_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Inflight>();
    assert_send_sync::<Guard<'static>>();
    assert_send_sync::<OwnedGuard>();
}

// ---------------------------------------------------------------------------------------------
// pingora-limits compatibility.

/// Call sites written for `pingora_limits::inflight::Inflight`, instantiated for any crate with
/// that module path (pingora's `Inflight` has no `get`, and its guard leaks its `incr`s, so
/// counts are read through guards and the drop is checked only for the guard that did not call
/// `incr`).
macro_rules! pingora_inflight_call_sites {
    ($krate:ident) => {{
        use $krate::inflight::{Guard, Inflight};

        let inflight = Inflight::new();
        let (guard, n): (Guard, isize) = inflight.incr("origin-a", 1);
        assert_eq!(n, 1);
        let (other, n) = inflight.incr(String::from("origin-a"), 1);
        assert_eq!(n, 2);
        let (third, n) = inflight.incr(7u64, 3);
        assert_eq!(n, 3);
        let after_incr: isize = guard.incr();
        assert_eq!(after_incr, 3);
        let now: isize = other.get();
        assert_eq!(now, 3);
        drop(other);
        assert_eq!(guard.get(), 2);
        assert_eq!(third.get(), 3);
        drop(third);
        drop(guard);
    }};
}

#[test]
fn pingora_inflight_call_sites_compile_and_agree() {
    pingora_inflight_call_sites!(pingora_limits);
    pingora_inflight_call_sites!(floodgate);
}

// ---------------------------------------------------------------------------------------------
// Properties 3 and 5: fixed memory, no allocation per request.

#[test]
fn acquiring_and_dropping_guards_allocates_nothing() {
    let inflight = Arc::new(Inflight::new());
    let before = inflight.memory_bytes();
    let names: Vec<String> = (0..20_000).map(|i| format!("origin-{i}")).collect();
    let allocated = bytes_allocated_by(|| {
        for name in &names {
            let (guard, _) = inflight.incr(name.as_str(), 1);
            guard.incr();
            let (owned, _) = inflight.incr_owned(name.as_str(), 1);
            drop(guard);
            drop(owned);
        }
    });
    assert_eq!(allocated, 0, "a request allocated");
    assert_eq!(inflight.memory_bytes(), before);
    assert_eq!(inflight.get("origin-0"), 0);
}
