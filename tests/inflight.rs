//! Public-API tests of [`floodgate::Inflight`] and its guards: estimates never below the true
//! number in flight, and guards that always give their count back — on any thread, during a
//! panic unwind, when a future is cancelled, and after `Guard::incr`; and the shapes a
//! pingora proxy writes (a guard in a per-request context), against floodgate and
//! pingora-limits alike.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::mpsc;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::thread;

use floodgate::{inflight::BorrowedGuard, Guard, Inflight};
use proptest::prelude::*;

mod common;

use common::ops::arb_vec;
use floodgate_fuzz_harness as harness;
use floodgate_test_support::counting_alloc::{bytes_allocated_by, bytes_held, CountingAlloc};
use harness::inflight::{AnyGuard, InflightInput, InflightOp};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn assert_send<T: Send>(_: &T) {}

// ---------------------------------------------------------------------------------------------
// Properties 1 and 2 (docs/architecture.md) against an exact model, for any interleaving of
// acquires and drops: the inflight fuzz harness's (`fuzz/harness/src/inflight.rs`), on operations
// proptest builds (`tests/common/ops.rs`).

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn estimate_never_below_in_flight_and_zero_when_all_guards_dropped(
        rows in any::<u8>(),
        columns in any::<u8>(),
        large in any::<bool>(),
        ops in arb_vec::<InflightOp>(1..80),
    ) {
        harness::inflight::run(&InflightInput { rows, columns, large, ops });
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
    let inflight = Inflight::with_size(2, 8).unwrap();
    // Held across the whole test: every read of the sentinel key must see it.
    let (sentinel, _) = inflight.incr_borrowed("sentinel", 1);

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
                        let (g, n) = inflight.incr(key, 2);
                        assert!(n >= 2, "estimate {n} below the guard's own 2");
                        AnyGuard::Owned(g)
                    } else {
                        let (g, n) = inflight.incr_borrowed(key, 1);
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
fn borrowed_guard_dropped_during_panic_unwind_gives_count_back() {
    let inflight = Inflight::new();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let (_guard, n) = inflight.incr_borrowed("origin-a", 3);
        assert_eq!(n, 3);
        assert_eq!(inflight.get("origin-a"), 3);
        panic!("the request handler panicked while holding the guard");
    }));
    assert!(result.is_err());
    assert_eq!(inflight.get("origin-a"), 0);
}

#[test]
fn guard_dropped_during_panic_unwind_on_another_thread_gives_count_back() {
    let inflight = Inflight::new();
    let (guard, n) = inflight.incr("origin-a", 2);
    assert_eq!(n, 2);
    let handle = thread::spawn(move || {
        let _guard = guard;
        panic!("the task holding the owned guard panicked");
    });
    assert!(handle.join().is_err());
    assert_eq!(inflight.get("origin-a"), 0);

    // And caught on the current thread.
    let result = catch_unwind(AssertUnwindSafe(|| {
        let (guard, _) = inflight.incr("origin-b", 1);
        guard.incr();
        panic!("boom");
    }));
    assert!(result.is_err());
    assert_eq!(inflight.get("origin-b"), 0);
}

#[test]
fn guard_held_across_await_is_given_back_when_the_future_is_cancelled() {
    let inflight = Inflight::new();
    let waker = floodgate_test_support::waker::noop();
    let mut cx = Context::from_waker(&waker);
    {
        let mut request = pin!(async {
            let (_guard, _) = inflight.incr("origin-a", 1);
            let (_borrowed, _) = inflight.incr_borrowed("origin-b", 1);
            std::future::pending::<()>().await; // an upstream that never answers
        });
        assert_eq!(request.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(
            inflight.get("origin-a"),
            1,
            "in flight while the future is pending"
        );
        assert_eq!(inflight.get("origin-b"), 1);
        // The client disconnects: the proxy drops the future without polling it again.
    }
    assert_eq!(inflight.get("origin-a"), 0);
    assert_eq!(inflight.get("origin-b"), 0);
}

#[test]
fn guard_balances_like_a_borrowed_one_and_outlives_its_inflight() {
    // Measured on this thread by the counting allocator: what the Inflight holds on the heap.
    let heap_before = bytes_held();
    let inflight = Inflight::with_size(3, 64).unwrap();
    let sketch_heap = bytes_held() - heap_before;
    assert!(sketch_heap >= 3 * 64 * std::mem::size_of::<isize>() as isize);
    let (a, n) = inflight.incr("k", 2);
    assert_eq!(n, 2);
    let (b, n) = inflight.incr("k", 3);
    assert_eq!(n, 5);
    let (c, n) = inflight.incr_borrowed("k", 1);
    assert_eq!(n, 6);
    assert_eq!(a.get(), 6);
    drop(a);
    assert_eq!(b.get(), 4);
    drop(c);
    assert_eq!(b.get(), 3);
    // The guard keeps the counters alive after the Inflight itself is gone.
    drop(inflight);
    assert_eq!(
        bytes_held() - heap_before,
        sketch_heap,
        "a live guard keeps the counters"
    );
    assert_eq!(b.incr(), 6);
    assert_eq!(b.get(), 6);
    drop(b);
    assert_eq!(
        bytes_held(),
        heap_before,
        "the last guard released the counters"
    );
}

/// pingora-limits' `Guard::incr` added to the count but its drop gave back only the initial
/// value, so every `incr` leaked permanently into the key's in-flight count.
#[test]
fn regression_pingora_guard_incr_leaked_count_on_drop() {
    let inflight = Inflight::new();
    let (guard, n) = inflight.incr("origin-a", 2);
    assert_eq!(n, 2);
    assert_eq!(guard.incr(), 4);
    assert_eq!(guard.incr(), 6);
    assert_eq!(guard.get(), 6);
    drop(guard);
    assert_eq!(inflight.get("origin-a"), 0, "Guard::incr leaked");

    let (borrowed, _) = inflight.incr_borrowed("origin-b", 1);
    for expected in 2..=5 {
        assert_eq!(borrowed.incr(), expected);
    }
    drop(borrowed);
    assert_eq!(inflight.get("origin-b"), 0, "BorrowedGuard::incr leaked");
}

#[test]
fn static_borrowed_guard_is_send_and_can_be_dropped_on_another_thread() {
    static INFLIGHT: LazyLock<Inflight> = LazyLock::new(Inflight::new);
    let (guard, n): (BorrowedGuard<'static>, isize) = INFLIGHT.incr_borrowed("origin-a", 2);
    assert_eq!(n, 2);
    assert_send(&guard);
    // `thread::spawn` needs `Send + 'static`: this compiles only for a `BorrowedGuard<'static>`.
    thread::spawn(move || {
        assert_eq!(guard.get(), 2);
        drop(guard);
    })
    .join()
    .unwrap();
    assert_eq!(INFLIGHT.get("origin-a"), 0);
}

#[test]
fn guard_from_a_local_inflight_is_send_and_static() {
    let inflight = Inflight::new();
    let (guard, n) = inflight.incr("origin-a", 2);
    assert_eq!(n, 2);
    assert_send(&guard);
    // `thread::spawn` needs `Send + 'static`: a `Guard` has no lifetime, wherever the
    // `Inflight` lives.
    thread::spawn(move || {
        assert_eq!(guard.get(), 2);
        drop(guard);
    })
    .join()
    .unwrap();
    assert_eq!(inflight.get("origin-a"), 0);
}

#[test]
fn inflight_and_guards_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_static<T: 'static>() {}
    assert_send_sync::<Inflight>();
    assert_send_sync::<Guard>();
    assert_static::<Guard>();
    assert_send_sync::<BorrowedGuard<'static>>();
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

/// The shape of a pingora proxy, instantiated for any crate with pingora-limits' module path.
/// `ProxyHttp::new_ctx(&self) -> Self::CTX` makes a per-request context with no lifetime to
/// tie a borrow to (`CTX: Send + Sync`), so the guard is a field of type `Option<Guard>`,
/// filled in a request filter from an `Inflight` that is a field of the proxy, or a `static`.
/// The context lives until the request ends, and may be dropped on another thread.
macro_rules! pingora_ctx_shape {
    ($krate:ident) => {{
        use $krate::inflight::{Guard, Inflight};

        /// A pingora `ProxyHttp::CTX`.
        struct Ctx {
            guard: Option<Guard>,
        }

        /// A pingora `ProxyHttp` implementation that owns its `Inflight`.
        struct Proxy {
            inflight: Inflight,
            limit: isize,
        }

        impl Proxy {
            /// `ProxyHttp::new_ctx`.
            fn new_ctx(&self) -> Ctx {
                Ctx { guard: None }
            }

            /// `ProxyHttp::request_filter`: counts the request in flight until the context
            /// drops, and says whether it is within the limit.
            fn request_filter(&self, ctx: &mut Ctx, origin: &str) -> bool {
                let (guard, count) = self.inflight.incr(origin, 1);
                ctx.guard = Some(guard);
                count <= self.limit
            }
        }

        /// A context made by a function that only borrows the `Inflight`: it outlives the
        /// borrow.
        fn ctx_for(inflight: &Inflight, origin: &str) -> (Ctx, isize) {
            let (guard, count) = inflight.incr(origin, 1);
            (Ctx { guard: Some(guard) }, count)
        }

        fn assert_ctx<T: Send + Sync + 'static>(_: &T) {}

        // The `Inflight` as a field of the proxy.
        let proxy = Proxy {
            inflight: Inflight::new(),
            limit: 2,
        };
        let (mut a, mut b, mut c) = (proxy.new_ctx(), proxy.new_ctx(), proxy.new_ctx());
        assert!(proxy.request_filter(&mut a, "origin-a"));
        assert!(proxy.request_filter(&mut b, "origin-a"));
        assert!(
            !proxy.request_filter(&mut c, "origin-a"),
            "the third is over"
        );
        assert_ctx(&a);
        // The refused request ends on another thread; its context drops there.
        thread::spawn(move || drop(c)).join().unwrap();
        assert_eq!(b.guard.as_ref().map(Guard::get), Some(2));
        drop(a);
        assert_eq!(b.guard.as_ref().map(Guard::get), Some(1));
        let (d, count) = ctx_for(&proxy.inflight, "origin-a");
        assert_eq!(count, 2);
        drop(b);
        assert_eq!(d.guard.as_ref().map(Guard::get), Some(1));
        drop(d);
        let (e, count) = ctx_for(&proxy.inflight, "origin-a");
        assert_eq!(count, 1, "every context gave its count back");
        drop(e);

        // The `Inflight` in a `static`.
        static INFLIGHT: LazyLock<Inflight> = LazyLock::new(Inflight::new);
        let (first, count) = ctx_for(&INFLIGHT, "origin-s");
        assert_eq!(count, 1);
        let second = thread::spawn(|| {
            let mut ctx = Ctx { guard: None };
            let (guard, count) = INFLIGHT.incr("origin-s", 1);
            ctx.guard = Some(guard);
            assert_eq!(count, 2);
            ctx
        })
        .join()
        .unwrap();
        assert_ctx(&second);
        drop(first);
        assert_eq!(second.guard.as_ref().map(Guard::get), Some(1));
        drop(second);
        let (third, count) = ctx_for(&INFLIGHT, "origin-s");
        assert_eq!(count, 1, "every context gave its count back");
        drop(third);
    }};
}

#[test]
fn pingora_ctx_with_an_optional_guard_compiles_and_agrees() {
    pingora_ctx_shape!(pingora_limits);
    pingora_ctx_shape!(floodgate);
}

// ---------------------------------------------------------------------------------------------
// Properties 3 and 5: fixed memory, no allocation per request.

#[test]
fn acquiring_and_dropping_guards_allocates_nothing() {
    let inflight = Inflight::new();
    let before = inflight.memory_bytes();
    let names: Vec<String> = (0..20_000).map(|i| format!("origin-{i}")).collect();
    let allocated = bytes_allocated_by(|| {
        for name in &names {
            let (guard, _) = inflight.incr(name.as_str(), 1);
            guard.incr();
            let (borrowed, _) = inflight.incr_borrowed(name.as_str(), 1);
            drop(guard);
            drop(borrowed);
        }
    });
    assert_eq!(allocated, 0, "a request allocated");
    assert_eq!(inflight.memory_bytes(), before);
    assert_eq!(inflight.get("origin-0"), 0);
}
