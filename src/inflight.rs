//! Per-key counts of the requests in flight, given back when a guard drops.
//!
//! [`Inflight::incr`] adds to a key's count in a count-min [`Estimator`] and returns a guard;
//! dropping the guard — on any thread, during a panic unwind, or when the future holding it is
//! cancelled — subtracts exactly what the guard added. The guard keeps the key's 64-bit keyed
//! hash, so its drop derives the same H counters without hashing the key again.
//!
//! Two kinds of guard:
//!
//! - [`Guard`], from [`Inflight::incr`]: owns a reference-counted handle to the counters and
//!   has no lifetime, like pingora-limits' guard, so it fits in a per-request context
//!   (`struct Ctx { guard: Option<Guard> }`) and in `'static` tasks. It costs one reference
//!   count increment per request and one decrement when it drops, on a count that every
//!   thread shares.
//! - [`BorrowedGuard`], from [`Inflight::incr_borrowed`]: borrows the `Inflight` and touches
//!   no shared reference count; for call sites that drop the guard within the borrow (a
//!   local, or a `BorrowedGuard<'static>` from an `Inflight` in a `static`).
//!
//! The default size, 4 × 8192, gives two unrelated keys a probability of 8192^-4 = 2^-52 of
//! sharing all four counters.

use std::hash::Hash;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::sync::{AtomicIsize, Ordering::Relaxed};
use crate::Estimator;

/// Rows of the default [`Inflight`] sketch.
pub const DEFAULT_ROWS: usize = 4;
/// Columns of the default [`Inflight`] sketch.
pub const DEFAULT_COLUMNS: usize = 8192;

/// Approximate per-key in-flight counts in fixed memory; a drop-guard gives each count back.
///
/// Estimates are never below the true number in flight. The counters live behind an `Arc`
/// that each [`Guard`] shares, so a guard may outlive the `Inflight` it came from (the
/// counters are freed with the last of them).
///
/// # Examples
///
/// ```
/// use floodgate::Inflight;
///
/// let inflight = Inflight::new();
/// let (guard, count) = inflight.incr("origin-a", 1);
/// assert_eq!(count, 1);
/// let (_second, count) = inflight.incr("origin-a", 1);
/// assert_eq!(count, 2);
/// drop(guard);
/// assert_eq!(inflight.get("origin-a"), 1);
/// ```
#[derive(Debug)]
pub struct Inflight {
    estimator: Arc<Estimator>,
}

impl Default for Inflight {
    fn default() -> Self {
        Self::new()
    }
}

impl Inflight {
    /// Creates an `Inflight` of the default size, 4 × 8192 counters (256 KiB on 64-bit).
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// assert_eq!(inflight.estimator().rows(), 4);
    /// assert_eq!(inflight.estimator().columns(), 8192);
    /// ```
    pub fn new() -> Self {
        Self::with_size(DEFAULT_ROWS, DEFAULT_COLUMNS).expect("the default size is valid")
    }

    /// Creates an `Inflight` with `rows` × `columns` counters (columns rounded up to a power
    /// of two).
    ///
    /// # Errors
    ///
    /// As [`Estimator::try_new`].
    ///
    /// # Examples
    ///
    /// ```
    /// let small = floodgate::Inflight::with_size(3, 1024).unwrap();
    /// assert_eq!(small.estimator().columns(), 1024);
    /// assert!(floodgate::Inflight::with_size(0, 1024).is_err());
    /// ```
    pub fn with_size(rows: usize, columns: usize) -> Result<Self, ConfigError> {
        Ok(Inflight {
            estimator: Arc::new(Estimator::try_new(rows, columns)?),
        })
    }

    /// Adds `value` to `key`'s in-flight count and returns a guard that subtracts it again on
    /// drop, with the key's new estimate.
    ///
    /// The signature of pingora-limits' `Inflight::incr`: the [`Guard`] has no lifetime, so it
    /// can be kept in a per-request context or moved into a `'static` task. It shares the
    /// counters through an `Arc` (one reference-count increment here, one decrement when it
    /// drops). [`Inflight::incr_borrowed`] skips that when the guard can borrow the
    /// `Inflight`.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Guard, Inflight};
    ///
    /// // A proxy's per-request context, as in pingora.
    /// struct Ctx {
    ///     guard: Option<Guard>,
    /// }
    ///
    /// let inflight = Inflight::new();
    /// let mut ctx = Ctx { guard: None };
    /// let (guard, count) = inflight.incr("origin-a", 1);
    /// assert_eq!(count, 1);
    /// ctx.guard = Some(guard);
    /// // The context may go to another thread, and outlive the borrow of `inflight`.
    /// std::thread::spawn(move || drop(ctx)).join().unwrap();
    /// assert_eq!(inflight.get("origin-a"), 0);
    /// ```
    #[inline]
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> (Guard, isize) {
        let hash = self.estimator.hash(&key);
        let estimate = self.estimator.counts().incr(hash, value);
        let guard = Guard {
            estimator: Arc::clone(&self.estimator),
            held: Held::new(hash, value),
        };
        (guard, estimate)
    }

    /// As [`Inflight::incr`], but the guard borrows this `Inflight` instead of sharing its
    /// counters through an `Arc`: no reference count is touched, which saves a contended
    /// atomic increment and decrement per request when many threads use one `Inflight`.
    ///
    /// The guard cannot outlive the borrow; it is `BorrowedGuard<'static>` when the
    /// `Inflight` is in a `static`.
    ///
    /// # Examples
    ///
    /// ```
    /// static INFLIGHT: std::sync::LazyLock<floodgate::Inflight> =
    ///     std::sync::LazyLock::new(floodgate::Inflight::new);
    ///
    /// let (guard, count): (floodgate::inflight::BorrowedGuard<'static>, isize) =
    ///     INFLIGHT.incr_borrowed(42u64, 2);
    /// assert_eq!(count, 2);
    /// std::thread::spawn(move || drop(guard)).join().unwrap();
    /// assert_eq!(INFLIGHT.get(42u64), 0);
    /// ```
    #[inline]
    pub fn incr_borrowed<T: Hash>(&self, key: T, value: isize) -> (BorrowedGuard<'_>, isize) {
        let hash = self.estimator.hash(&key);
        let estimate = self.estimator.counts().incr(hash, value);
        let guard = BorrowedGuard {
            estimator: &self.estimator,
            held: Held::new(hash, value),
        };
        (guard, estimate)
    }

    /// The estimated number in flight for `key`: never below the true number.
    ///
    /// Not in pingora-limits' `Inflight`, whose counts can only be read through a guard.
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// let (_guard, _) = inflight.incr("k", 3);
    /// assert_eq!(inflight.get("k"), 3);
    /// assert_eq!(inflight.get("other"), 0);
    /// ```
    #[inline]
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.estimator.get(key)
    }

    /// The sketch behind this `Inflight` (for its size, ε, δ and memory).
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::with_size(3, 1024).unwrap();
    /// assert_eq!(inflight.estimator().rows(), 3);
    /// assert_eq!(inflight.estimator().columns(), 1024);
    /// ```
    pub fn estimator(&self) -> &Estimator {
        &self.estimator
    }

    /// Heap and inline bytes this `Inflight` occupies — the sketch, its `Arc`'s two reference
    /// counts and the handle to it; fixed at construction.
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// assert!(inflight.memory_bytes() > inflight.estimator().memory_bytes());
    /// assert!(inflight.memory_bytes() >= 4 * 8192 * std::mem::size_of::<isize>());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        // The Arc's allocation holds the strong and weak counts next to the sketch.
        std::mem::size_of::<Self>()
            + 2 * std::mem::size_of::<usize>()
            + self.estimator.memory_bytes()
    }
}

/// What a guard has added for its key, and gives back on drop.
struct Held {
    /// The key's keyed hash, from which its H counters follow without hashing again.
    hash: u64,
    /// The amount one [`Guard::incr`] adds.
    unit: isize,
    /// Everything this guard has added so far. Only the guard's own methods touch it, and
    /// `Drop` runs after all of them (it has `&mut self`), so `Relaxed` suffices; it is atomic
    /// only so that guards stay `Sync` like pingora-limits' guards.
    total: AtomicIsize,
}

impl Held {
    fn new(hash: u64, unit: isize) -> Self {
        Held {
            hash,
            unit,
            total: AtomicIsize::new(unit),
        }
    }

    fn incr(&self, estimator: &Estimator) -> isize {
        let estimate = estimator.counts().incr(self.hash, self.unit);
        let unit = self.unit;
        // Saturating, like the counters: a guard never gives back less than it added unless
        // the count itself has saturated (then the counter stays saturated anyway).
        let _ = self
            .total
            .fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_add(unit)));
        estimate
    }

    fn give_back(&self, estimator: &Estimator) {
        estimator.counts().decr(self.hash, self.total.load(Relaxed));
    }
}

/// Gives a key's in-flight count back when dropped; has no lifetime.
///
/// Created by [`Inflight::incr`]. Like pingora-limits' `Guard` it shares the counters
/// through an `Arc`, so it can be stored in a per-request context, moved into a `'static`
/// task and outlive the `Inflight`. `Send` and `Sync`: it may be dropped on any thread.
///
/// # Examples
///
/// ```
/// use floodgate::{Guard, Inflight};
///
/// fn admit(inflight: &Inflight, origin: &str, limit: isize) -> Option<Guard> {
///     let (guard, count) = inflight.incr(origin, 1);
///     (count <= limit).then_some(guard) // a refused request's guard drops here
/// }
///
/// let inflight = Inflight::new();
/// let first = admit(&inflight, "origin-a", 1);
/// assert!(first.is_some());
/// assert!(admit(&inflight, "origin-a", 1).is_none());
/// drop(first);
/// assert_eq!(inflight.get("origin-a"), 0);
/// ```
#[must_use = "dropping the guard immediately gives the in-flight count back"]
pub struct Guard {
    estimator: Arc<Estimator>,
    held: Held,
}

impl Guard {
    /// Adds the guard's value to its key once more (given back on drop with the rest) and
    /// returns the key's new estimate.
    ///
    /// Unlike pingora-limits, where the extra count was never given back, a guard gives back
    /// everything it added.
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// let (guard, _) = inflight.incr("k", 1);
    /// assert_eq!(guard.incr(), 2);
    /// drop(guard);
    /// assert_eq!(inflight.get("k"), 0);
    /// ```
    pub fn incr(&self) -> isize {
        self.held.incr(&self.estimator)
    }

    /// The key's current estimate.
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// let (guard, _) = inflight.incr("k", 2);
    /// let (_other, _) = inflight.incr("k", 1);
    /// assert_eq!(guard.get(), 3);
    /// ```
    pub fn get(&self) -> isize {
        self.estimator.counts().get(self.held.hash)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.held.give_back(&self.estimator);
    }
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("value", &self.held.total.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// Gives a key's in-flight count back when dropped; borrows the [`Inflight`].
///
/// Created by [`Inflight::incr_borrowed`], for call sites that drop the guard while the
/// `Inflight` is still borrowed (a local, or an `Inflight` in a `static`): it skips the
/// shared reference count that a [`Guard`] increments and decrements. `Send` and `Sync`: it
/// may be dropped on any thread.
///
/// # Examples
///
/// ```
/// let inflight = floodgate::Inflight::new();
/// {
///     let (guard, count) = inflight.incr_borrowed("origin-a", 1);
///     assert_eq!(count, 1);
///     assert_eq!(guard.get(), 1);
/// } // dropped with the scope
/// assert_eq!(inflight.get("origin-a"), 0);
/// ```
#[must_use = "dropping the guard immediately gives the in-flight count back"]
pub struct BorrowedGuard<'a> {
    estimator: &'a Estimator,
    held: Held,
}

impl BorrowedGuard<'_> {
    /// As [`Guard::incr`].
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// let (guard, _) = inflight.incr_borrowed("k", 1);
    /// assert_eq!(guard.incr(), 2);
    /// drop(guard);
    /// assert_eq!(inflight.get("k"), 0);
    /// ```
    pub fn incr(&self) -> isize {
        self.held.incr(self.estimator)
    }

    /// As [`Guard::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// let (guard, _) = inflight.incr_borrowed("k", 2);
    /// let (_other, _) = inflight.incr("k", 1);
    /// assert_eq!(guard.get(), 3);
    /// ```
    pub fn get(&self) -> isize {
        self.estimator.counts().get(self.held.hash)
    }
}

impl Drop for BorrowedGuard<'_> {
    fn drop(&mut self) {
        self.held.give_back(self.estimator);
    }
}

impl std::fmt::Debug for BorrowedGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BorrowedGuard")
            .field("value", &self.held.total.load(Relaxed))
            .finish_non_exhaustive()
    }
}
