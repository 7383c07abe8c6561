//! Per-key counts of the requests in flight, given back when a guard drops.
//!
//! [`Inflight::incr`] adds to a key's count in a count-min [`Estimator`] and returns a guard;
//! dropping the guard — on any thread, during a panic unwind, or when the future holding it is
//! cancelled — subtracts exactly what the guard added. The guard keeps the key's 64-bit keyed
//! hash, so its drop derives the same H counters without hashing the key again, and it
//! borrows the `Inflight` ([`Guard`]) or owns an `Arc` to it ([`OwnedGuard`]), so the request
//! path touches no shared reference count unless the caller asks for ownership.
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
/// Estimates are never below the true number in flight.
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
    estimator: Estimator,
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
            estimator: Estimator::try_new(rows, columns)?,
        })
    }

    /// Adds `value` to `key`'s in-flight count and returns a guard that subtracts it again on
    /// drop, with the key's new estimate.
    ///
    /// The guard borrows this `Inflight`; it is `Guard<'static>` when the `Inflight` is in a
    /// `static`. For an `Arc<Inflight>` use [`Inflight::incr_owned`].
    ///
    /// # Examples
    ///
    /// ```
    /// static INFLIGHT: std::sync::LazyLock<floodgate::Inflight> =
    ///     std::sync::LazyLock::new(floodgate::Inflight::new);
    ///
    /// let (guard, count): (floodgate::Guard<'static>, isize) = INFLIGHT.incr(42u64, 2);
    /// assert_eq!(count, 2);
    /// std::thread::spawn(move || drop(guard)).join().unwrap();
    /// assert_eq!(INFLIGHT.get(42u64), 0);
    /// ```
    #[inline]
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> (Guard<'_>, isize) {
        let hash = self.estimator.hash(&key);
        let estimate = self.estimator.incr_hashed(hash, value);
        let guard = Guard {
            inflight: self,
            held: Held::new(hash, value),
        };
        (guard, estimate)
    }

    /// As [`Inflight::incr`], but the guard holds a clone of the `Arc`, so it can outlive any
    /// borrow (one reference-count increment per call, and one decrement on drop).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let inflight = Arc::new(floodgate::Inflight::new());
    /// let (guard, count) = inflight.incr_owned("origin-a", 1);
    /// assert_eq!(count, 1);
    /// let handle = std::thread::spawn(move || guard.get());
    /// assert_eq!(handle.join().unwrap(), 1);
    /// assert_eq!(inflight.get("origin-a"), 0);
    /// ```
    #[inline]
    pub fn incr_owned<T: Hash>(self: &Arc<Self>, key: T, value: isize) -> (OwnedGuard, isize) {
        let hash = self.estimator.hash(&key);
        let estimate = self.estimator.incr_hashed(hash, value);
        let guard = OwnedGuard {
            inflight: Arc::clone(self),
            held: Held::new(hash, value),
        };
        (guard, estimate)
    }

    /// The estimated number in flight for `key`: never below the true number.
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

    /// Heap and inline bytes this `Inflight` occupies; fixed at construction.
    ///
    /// # Examples
    ///
    /// ```
    /// let inflight = floodgate::Inflight::new();
    /// assert_eq!(inflight.memory_bytes(), inflight.estimator().memory_bytes());
    /// assert!(inflight.memory_bytes() >= 4 * 8192 * std::mem::size_of::<isize>());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.estimator.memory_bytes()
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
        let estimate = estimator.incr_hashed(self.hash, self.unit);
        let unit = self.unit;
        // Saturating, like the counters: a guard never gives back less than it added unless
        // the count itself has saturated (then the counter stays saturated anyway).
        let _ = self
            .total
            .fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_add(unit)));
        estimate
    }

    fn give_back(&self, estimator: &Estimator) {
        estimator.decr_hashed(self.hash, self.total.load(Relaxed));
    }
}

/// Gives a key's in-flight count back when dropped; borrowed from an [`Inflight`].
///
/// Created by [`Inflight::incr`]. `Send` and `Sync`: it may be dropped on any thread.
#[must_use = "dropping the guard immediately gives the in-flight count back"]
pub struct Guard<'a> {
    inflight: &'a Inflight,
    held: Held,
}

impl Guard<'_> {
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
        self.held.incr(&self.inflight.estimator)
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
        self.inflight.estimator.get_hashed(self.held.hash)
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.held.give_back(&self.inflight.estimator);
    }
}

impl std::fmt::Debug for Guard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("value", &self.held.total.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// Gives a key's in-flight count back when dropped; owns an `Arc<Inflight>`.
///
/// Created by [`Inflight::incr_owned`], for callers that cannot borrow the `Inflight` for the
/// guard's lifetime (a task spawned with `'static` bounds, say).
#[must_use = "dropping the guard immediately gives the in-flight count back"]
pub struct OwnedGuard {
    inflight: Arc<Inflight>,
    held: Held,
}

impl OwnedGuard {
    /// As [`Guard::incr`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let inflight = Arc::new(floodgate::Inflight::new());
    /// let (guard, _) = inflight.incr_owned("k", 1);
    /// assert_eq!(guard.incr(), 2);
    /// drop(guard);
    /// assert_eq!(inflight.get("k"), 0);
    /// ```
    pub fn incr(&self) -> isize {
        self.held.incr(&self.inflight.estimator)
    }

    /// As [`Guard::get`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// let inflight = Arc::new(floodgate::Inflight::new());
    /// let (guard, _) = inflight.incr_owned("k", 2);
    /// assert_eq!(guard.get(), 2);
    /// ```
    pub fn get(&self) -> isize {
        self.inflight.estimator.get_hashed(self.held.hash)
    }
}

impl Drop for OwnedGuard {
    fn drop(&mut self) {
        self.held.give_back(&self.inflight.estimator);
    }
}

impl std::fmt::Debug for OwnedGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedGuard")
            .field("value", &self.held.total.load(Relaxed))
            .finish_non_exhaustive()
    }
}
