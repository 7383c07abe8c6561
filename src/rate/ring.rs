//! A [`Rate`] and its ring of window slots: counting into them and reading them on the
//! request path (for the public API and for the limiter's hooks), and the clearing ahead of
//! use that its clock runs ([`Tick`]). How the windows work, and the orderings between the
//! clearing and the counting, is in the `rate` module's docs.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::window::{sliding_count, WindowView};
use crate::clock::{Registration, Tick, TimeSource, TICK_NANOS};
use crate::estimator::{KeyHasher, Table};
use crate::sync::{AtomicU64, Ordering};

/// Rows of the default `Rate` sketch (pingora-limits' value).
pub const DEFAULT_ROWS: usize = 4;
/// Columns of the default `Rate` sketch (pingora-limits' value).
pub const DEFAULT_COLUMNS: usize = 1024;
/// The longest interval a `Rate` accepts.
pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);
/// The most sub-windows a window may be split into.
pub const MAX_SUB_WINDOWS: usize = 64;

/// What a rate function gets to compute a rate from: see [`Rate::rate_with`].
///
/// For a plain `Rate`, `prev_samples` is the count of the previous window, `curr_samples` the
/// count so far in the current one, and `current_interval_fraction` how far into the current
/// window we are (0 ≤ f < 1). With k sub-windows, `curr_samples` is the count of the current
/// sub-window and the k−1 before it, `prev_samples` the count of the sub-window before those,
/// and the fraction is how far into the current sub-window we are — so the proportional
/// estimate `prev·(1−f) + curr` is a sliding window of one interval at a finer grain.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Rate, rate::RateComponents};
///
/// let clock = ManualClock::new();
/// let rate = Rate::builder(Duration::from_secs(10)).clock(&clock).build().unwrap();
/// rate.observe(&"k", 10);
/// clock.advance(Duration::from_secs(12));
/// rate.observe(&"k", 4);
/// let parts: RateComponents = rate.rate_with(&"k", |parts| parts);
/// assert_eq!((parts.prev_samples, parts.curr_samples), (10, 4));
/// assert_eq!(parts.interval, Duration::from_secs(10));
/// assert!((parts.current_interval_fraction - 0.2).abs() < 1e-9);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct RateComponents {
    /// Events in the previous window (see the type docs for sub-windows).
    pub prev_samples: isize,
    /// Events so far in the current window.
    pub curr_samples: isize,
    /// The configured interval.
    pub interval: Duration,
    /// How far into the current window (or sub-window) the time is, from 0 up to (not
    /// including) 1.
    pub current_interval_fraction: f64,
}

/// The sliding-window estimate of events per second: `(prev·(1−f) + curr) / interval`,
/// interpolating between the previous and the current window by how far into the current one
/// we are.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Rate, rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN};
///
/// let clock = ManualClock::new();
/// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
/// rate.observe(&"k", 100);
/// clock.advance(Duration::from_millis(1250));
/// rate.observe(&"k", 10);
/// // 100 · (1 − 0.25) + 10 = 85 events in the last second.
/// let estimate = rate.rate_with(&"k", PROPORTIONAL_RATE_ESTIMATE_CALC_FN);
/// assert!((estimate - 85.0).abs() < 1e-9);
/// ```
pub static PROPORTIONAL_RATE_ESTIMATE_CALC_FN: fn(RateComponents) -> f64 = |parts| {
    let weighted = sliding_count(
        parts.prev_samples as f64,
        parts.curr_samples as f64,
        parts.current_interval_fraction,
    );
    weighted / parts.interval.as_secs_f64()
};

/// Per-key event counts per time window, and the rates they give, in fixed memory.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Rate};
///
/// let clock = ManualClock::new();
/// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
/// assert_eq!(rate.observe(&"origin-a", 3), 3);
/// assert_eq!(rate.observe(&"origin-a", 2), 5);
/// assert_eq!(rate.rate(&"origin-a"), 0.0); // no complete window yet
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(rate.rate(&"origin-a"), 5.0); // 5 events in the last complete second
/// assert_eq!(rate.peek(&"origin-a"), 0); // nothing yet in the new window
/// ```
///
/// In production, use the shared ticker (the default):
///
/// ```
/// use std::time::Duration;
///
/// let rate = floodgate::Rate::new(Duration::from_secs(1));
/// assert!(rate.observe(&"origin-a", 1) >= 1);
/// ```
pub struct Rate {
    pub(super) core: Arc<RateCore>,
    /// The core's place in its clock's schedule, cancelled when the `Rate` drops.
    pub(super) registration: Registration,
}

/// A window slot: one bucket's counts, and which bucket they belong to.
pub(super) struct Slot {
    /// The bucket this slot was last cleared for. Stored with `Release` after the clearing,
    /// loaded with `Acquire` before counting into the slot (see the `rate` module's docs).
    pub(super) bucket: AtomicU64,
    /// Flat for a public `Rate`; blocked for a limiter's, whose clearing then zeroes only the
    /// blocks written in the slot's last use.
    pub(super) counts: Table,
}

/// The time as the request path reads it, once: the current bucket, its slot's index, the
/// nanoseconds since `start` and since the bucket began.
#[derive(Debug, Clone, Copy)]
struct Now {
    bucket: u64,
    index: usize,
    elapsed: u64,
    into: u64,
    /// The time on the Rate's clock (`time_at(elapsed)`).
    at: u64,
}

pub(super) struct RateCore {
    pub(super) slots: Box<[Slot]>,
    /// The one hasher of every slot's table.
    pub(super) hasher: KeyHasher,
    pub(super) time: TimeSource,
    /// The time the Rate was created, on `time` (or, for windows aligned to the Unix epoch,
    /// the start of the window then in progress), plus `shift`: the anchor of every window.
    pub(super) start: u64,
    /// What `start` and every time compared with it are moved forward by, so that an anchor
    /// before the clock's zero (an aligned window that began before the process did) is still
    /// a `u64`: one interval for aligned windows, 0 otherwise.
    pub(super) shift: u64,
    /// The number since the Unix epoch of the window that starts at `start` (0 unless
    /// aligned): what a fleet names the window by.
    pub(super) first_window: u64,
    /// Length of a bucket (interval / sub_windows), in nanoseconds; at least one tick.
    pub(super) bucket_nanos: u64,
    pub(super) sub_windows: u64,
    pub(super) interval: Duration,
    /// How far into a bucket the coarse time is taken as it is: the bucket's length less the
    /// coarse time's lag (two ticks on the shared clock, none on a manual clock, whose time is
    /// exact). Past it the precise clock is read; 0 (always precise) for a bucket no longer
    /// than the lag.
    pub(super) settled_span: u64,
    /// The bucket the ticker last saw as current, with its slot's index in the low
    /// [`HINT_INDEX_BITS`] ([`pack_hint`]): lets the request path find its bucket and slot
    /// without a division. Only ever raised (`fetch_max`; the bucket is in the high bits);
    /// `Relaxed` because it is a hint checked against the time, and the slot's own tag orders
    /// the data.
    pub(super) current_hint: AtomicU64,
}

impl Rate {
    /// Counts `events` for `key` in the current window and returns the key's count so far in
    /// the current window (with sub-windows: the current sub-window and the k−1 before it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// assert_eq!(rate.observe(&"k", 2), 2);
    /// assert_eq!(rate.observe(&"k", 3), 5);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rate.observe(&"k", 1), 1); // a new window
    /// ```
    #[inline]
    pub fn observe<T: Hash + ?Sized>(&self, key: &T, events: isize) -> isize {
        let core = &*self.core;
        let hash = core.hash(key);
        let (bucket, _) = core.now();
        let slot = core.slot_to_count_in(core.slot_index(bucket));
        let current = slot.counts.incr(hash, events);
        if core.sub_windows == 1 {
            current
        } else {
            current.saturating_add(core.sum(
                hash,
                bucket.saturating_sub(core.sub_windows - 1),
                bucket,
            ))
        }
    }

    /// The key's count so far in the current window, without counting anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 2);
    /// assert_eq!(rate.peek(&"k"), 2);
    /// assert_eq!(rate.peek(&"k"), 2); // peeking counts nothing
    /// ```
    pub fn peek<T: Hash + ?Sized>(&self, key: &T) -> isize {
        let core = &*self.core;
        let (bucket, _) = core.now();
        let first = (bucket + 1).saturating_sub(core.sub_windows);
        core.sum(core.hash(key), first, bucket + 1)
    }

    /// The key's rate, in events per second, over the last complete window.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(2)).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 5);
    /// clock.advance(Duration::from_secs(2));
    /// assert_eq!(rate.rate(&"k"), 2.5); // 5 events in the last 2 s
    /// ```
    pub fn rate<T: Hash + ?Sized>(&self, key: &T) -> f64 {
        let core = &*self.core;
        let (bucket, _) = core.now();
        let count = core.sum(
            core.hash(key),
            bucket.saturating_sub(core.sub_windows),
            bucket,
        );
        count as f64 / core.interval.as_secs_f64()
    }

    /// Computes a rate for `key` with `rate_calc_fn` from the previous and current counts, the
    /// interval and how far into the current window the time is (see [`RateComponents`]).
    ///
    /// [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`] gives the sliding-window estimate.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 8);
    /// clock.advance(Duration::from_secs(1));
    /// rate.observe(&"k", 3);
    /// assert_eq!(rate.rate_with(&"k", |p| p.prev_samples + p.curr_samples), 11);
    /// ```
    pub fn rate_with<F, T, K>(&self, key: &K, mut rate_calc_fn: F) -> T
    where
        F: FnMut(RateComponents) -> T,
        K: Hash + ?Sized,
    {
        let core = &*self.core;
        let hash = core.hash(key);
        let (bucket, elapsed) = core.now();
        let k = core.sub_windows;
        let first_current = (bucket + 1).saturating_sub(k);
        let curr_samples = core.sum(hash, first_current, bucket + 1);
        // With k = 1, the whole previous window; none before the Rate existed.
        let prev_samples = match (bucket + 1).checked_sub(k + 1) {
            Some(prev) => core.count(hash, prev),
            None => 0,
        };
        rate_calc_fn(RateComponents {
            prev_samples,
            curr_samples,
            interval: core.interval,
            current_interval_fraction: core.fraction(bucket, elapsed),
        })
    }

    /// The sliding-window rate estimate for `key`, in events per second:
    /// `rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 100);
    /// clock.advance(Duration::from_millis(1500));
    /// assert!((rate.sliding_rate(&"k") - 50.0).abs() < 1e-9); // 100 · (1 − 0.5)
    /// ```
    pub fn sliding_rate<K: Hash + ?Sized>(&self, key: &K) -> f64 {
        self.rate_with(key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)
    }

    /// The window length.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rate = floodgate::Rate::new(Duration::from_millis(500));
    /// assert_eq!(rate.interval(), Duration::from_millis(500));
    /// ```
    pub fn interval(&self) -> Duration {
        self.core.interval
    }

    /// Bytes this `Rate` occupies: fixed at construction, whatever the number of keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rate = floodgate::Rate::new(Duration::from_secs(1));
    /// let before = rate.memory_bytes();
    /// (0..1000u64).for_each(|k| { rate.observe(&k, 1); });
    /// assert_eq!(rate.memory_bytes(), before);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<RateCore>()
            + self
                .core
                .slots
                .iter()
                .map(|s| std::mem::size_of::<AtomicU64>() + s.counts.memory_bytes())
                .sum::<usize>()
    }
}

impl Drop for Rate {
    fn drop(&mut self) {
        // The clock forgets the core at its next tick; the counters are freed now (the clock
        // holds only a weak reference).
        self.core.time.cancel(self.registration);
    }
}

impl std::fmt::Debug for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rate")
            .field("interval", &self.core.interval)
            .field("sub_windows", &self.core.sub_windows)
            .finish_non_exhaustive()
    }
}

/// Hooks for the limiter, which hashes a key once for all its sketches. Plain windows only
/// (one sub-window).
impl Rate {
    /// Counts `cost` events for an already-hashed key and returns the window as it stands
    /// after them: the previous window's count read in a window of bucket up to
    /// `read_previous_through`, and left at 0 (unread) in a later one, for a caller that knows
    /// it small enough not to matter (the limiter's rate mark); `u64::MAX` always reads it.
    #[inline(always)] // the request path: its caller, the limiter, is its only one (with a cost
                      // among its arguments, a plain `#[inline]` was no longer taken: 36 instructions a request)
    pub(crate) fn observe_hashed(
        &self,
        hash: u64,
        cost: u32,
        read_previous_through: u64,
    ) -> WindowView {
        let core = &*self.core;
        debug_assert_eq!(core.sub_windows, 1, "the limiter uses plain windows");
        let now = core.now_indexed();
        let counts = &core.slot_to_count_in(now.index).counts;
        // Every slot's table has the same shape: the key's block is found once for both.
        let block = counts.block_of(hash);
        let curr = counts.incr_in(block, hash, cost as isize);
        // The slot before, without a second division.
        let prev = if now.bucket == 0 || now.bucket > read_previous_through {
            0
        } else {
            core.slots[core.index_before(now.index)]
                .counts
                .get_in(block, hash)
        };
        core.window_view(now, prev, curr)
    }

    /// `view` with the key's count in its previous window read now (0 in the first window).
    pub(crate) fn with_previous(&self, hash: u64, view: WindowView) -> WindowView {
        let (prev, _) = self.counts_in(hash, &view);
        WindowView { prev, ..view }
    }

    /// Counts `units` more events for an already-hashed key in the window of bucket `bucket`,
    /// after the fact: what a promoted key's lane took out of a lease of that window without
    /// counting it here, told when the lease is taken back (the limiter's `close_lane`). Never
    /// taken out again: adding to a slot is always safe.
    ///
    /// Nothing is counted once the ring has cleared the window's slot for a later window: the
    /// window no longer weighs (a slot is cleared two windows after its own ended), and the
    /// units would count in a window they were not admitted in. Only a thread held up for a
    /// window between its check of the slot and its adds (the slot cleared in between) counts
    /// them there: an over-count of that later window, never a unit missed. Returns the key's
    /// count in the window with them (`None`: not counted, the window no longer weighs).
    pub(crate) fn add_at(&self, hash: u64, bucket: u64, units: u32) -> Option<isize> {
        let core = &*self.core;
        let index = core.slot_index(bucket);
        // `Acquire`, as before counting into a slot (`slot_to_count_in`). A slot a late tick
        // left uncleared still holds an older bucket, and counts for this one: counted.
        if core.slots[index].bucket.load(Ordering::Acquire) > bucket {
            return None;
        }
        let counts = &core.slots[index].counts;
        Some(counts.incr_in(counts.block_of(hash), hash, units as isize))
    }

    /// The current window as a request would see it, without reading or counting the key:
    /// its bucket, its slot and the time (the counts 0). For a promoted key's request taken
    /// out of its lease, which counts nothing here until the lease is taken back.
    #[inline]
    pub(crate) fn window_now(&self) -> WindowView {
        self.core.window_view(self.core.now_indexed(), 0, 0)
    }

    /// The key's counts in `view`'s windows now: (previous, current).
    pub(crate) fn counts_in(&self, hash: u64, view: &WindowView) -> (isize, isize) {
        let core = &*self.core;
        debug_assert_eq!(
            view.index,
            core.slot_index(view.bucket),
            "a view of this Rate"
        );
        let counts = &core.slots[view.index].counts;
        // Every slot's table has the same shape: the key's block is found once for both.
        let block = counts.block_of(hash);
        let prev = match view.bucket {
            0 => 0,
            _ => core.slots[core.index_before(view.index)]
                .counts
                .get_in(block, hash),
        };
        (prev, counts.get_in(block, hash))
    }

    /// The sliding-window count that a counter carries on average now, `prev·(1−f) + curr`
    /// over the mean counts of the two windows' slots: the noise every key's estimate starts
    /// from. Reads a row of each slot: for reports, not the request path.
    pub(crate) fn noise(&self) -> f64 {
        let core = &*self.core;
        debug_assert_eq!(core.sub_windows, 1, "the limiter uses plain windows");
        let (bucket, elapsed) = core.now();
        let curr = core.slot(bucket).counts.mean_count();
        let prev = match bucket.checked_sub(1) {
            Some(prev) => core.slot(prev).counts.mean_count(),
            None => 0.0,
        };
        sliding_count(prev, curr, core.fraction(bucket, elapsed))
    }

    /// The number since the Unix epoch of the window of `bucket` (windows aligned to it).
    #[cfg(feature = "redis")]
    pub(crate) fn window_number(&self, bucket: u64) -> u64 {
        self.core.window_number(bucket)
    }

    /// The current bucket, the time now on the Rate's clock, and how far into the bucket
    /// that is (nanoseconds).
    #[cfg(feature = "redis")]
    pub(crate) fn now_bucket(&self) -> (u64, u64, u64) {
        let core = &*self.core;
        let (bucket, elapsed) = core.now();
        (
            bucket,
            core.time_at(elapsed),
            core.offset_in_bucket(bucket, elapsed),
        )
    }

    /// The time now on the Rate's clock, as a request would read it.
    pub(crate) fn now_at(&self) -> u64 {
        let core = &*self.core;
        core.time_at(core.now().1)
    }

    /// The time now on the Rate's clock by the coarse time, if the windows read it as they
    /// would the exact time (not near a window's end); `None` near a boundary.
    #[inline]
    pub(crate) fn settled_now(&self) -> Option<u64> {
        let core = &*self.core;
        core.settled().map(|now| now.at)
    }

    /// The longest a rate rejection waits, in nanoseconds: two windows (the key's count in
    /// the current one slides out by the end of the next). In nanoseconds rather than a
    /// `Duration`: the flood path compares it with another count of nanoseconds, and a
    /// `Duration`'s multiplication and comparison took it 20 instructions more (callgrind).
    /// No overflow: an interval is at most `MAX_INTERVAL`, a year, under 2^55 ns.
    #[inline]
    pub(crate) fn longest_wait_nanos(&self) -> u64 {
        debug_assert_eq!(self.core.sub_windows, 1, "the limiter uses plain windows");
        2 * self.core.bucket_nanos
    }

    /// The current window as `observe_hashed` would see it, without counting anything.
    pub(crate) fn view(&self, hash: u64) -> WindowView {
        let view = self.core.window_view(self.core.now_indexed(), 0, 0);
        let counts = self.counts_in(hash, &view);
        view.with_counts(counts)
    }
}

impl RateCore {
    #[inline]
    fn hash<T: Hash + ?Sized>(&self, key: &T) -> u64 {
        self.hasher.hash(key)
    }

    #[inline]
    fn slot(&self, bucket: u64) -> &Slot {
        &self.slots[self.slot_index(bucket)]
    }

    /// The index of `bucket`'s slot in the ring.
    #[inline]
    fn slot_index(&self, bucket: u64) -> usize {
        (bucket % self.slots.len() as u64) as usize
    }

    /// The index of the slot before the one at `index`, round the ring.
    #[inline]
    fn index_before(&self, index: usize) -> usize {
        index.checked_sub(1).unwrap_or(self.slots.len() - 1)
    }

    /// The slot at `index`, ordered for counting into it: the load of its tag is there for
    /// its `Acquire` alone (the value is not needed). It pairs with the ticker's `Release`
    /// store of the tag after clearing the slot, so a clearing whose tag this load sees
    /// happens-before the increments that follow and cannot wipe them (the `rate` module's
    /// docs).
    #[inline]
    fn slot_to_count_in(&self, index: usize) -> &Slot {
        let slot = &self.slots[index];
        let _ordered_after_clearing = slot.bucket.load(Ordering::Acquire);
        slot
    }

    /// The number since the Unix epoch of the window that holds `bucket`, for windows
    /// aligned to the epoch: what every node of a fleet calls it.
    // Read by the fleet alone (feature `redis`), which names windows by it.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn window_number(&self, bucket: u64) -> u64 {
        self.first_window.saturating_add(bucket / self.sub_windows)
    }

    /// The current bucket and the time since `start`, in nanoseconds.
    #[inline]
    fn now(&self) -> (u64, u64) {
        let now = self.now_indexed();
        (now.bucket, now.elapsed)
    }

    /// [`now`](Self::now), with the index of the bucket's slot and the time into the bucket.
    #[inline]
    fn now_indexed(&self) -> Now {
        match self.settled() {
            Some(now) => now,
            None => self.now_precise(),
        }
    }

    /// The current bucket and the time since `start` by the coarse time, when that is as good
    /// as the exact time: in the bucket the ticker last saw, and not within the coarse time's
    /// lag of its end (where an event may already belong to the next bucket).
    ///
    /// In wrapping arithmetic, one comparison for both ends: a coarse time before the anchor,
    /// or before the hint's bucket began (the ticker can run ahead of the coarse time), wraps
    /// to far past `settled_span` and is left to the precise path, which clamps it. Nothing
    /// else wraps: a time is a `u64` of nanoseconds, and the hint's bucket began at a time the
    /// ticker saw. So `elapsed` is exact here, and the time on the Rate's clock is the coarse
    /// time itself.
    #[inline]
    fn settled(&self) -> Option<Now> {
        let t = self.time.coarse();
        let elapsed = t.wrapping_add(self.shift).wrapping_sub(self.start);
        let hint = self.current_hint.load(Ordering::Relaxed);
        let (bucket, index) = unpack_hint(hint);
        let into = elapsed.wrapping_sub(bucket.wrapping_mul(self.bucket_nanos));
        (into < self.settled_span).then_some(Now {
            bucket,
            index,
            elapsed,
            into,
            at: t,
        })
    }

    /// Near a boundary (or before the ticker has caught up): the exact bucket.
    #[inline(never)]
    fn now_precise(&self) -> Now {
        let elapsed = self.elapsed_at(self.time.precise());
        let bucket = elapsed / self.bucket_nanos;
        Now {
            bucket,
            index: self.slot_index(bucket),
            elapsed,
            into: elapsed % self.bucket_nanos,
            at: self.time_at(elapsed),
        }
    }

    /// Nanoseconds since the anchor at time `t` on the clock (0 before it).
    #[inline]
    fn elapsed_at(&self, t: u64) -> u64 {
        t.saturating_add(self.shift).saturating_sub(self.start)
    }

    /// The time on the clock `elapsed` nanoseconds after the anchor.
    #[inline]
    pub(super) fn time_at(&self, elapsed: u64) -> u64 {
        self.start
            .saturating_add(elapsed)
            .saturating_sub(self.shift)
    }

    /// Nanoseconds from the start of `bucket` to the time `elapsed` (0 before it).
    #[inline]
    fn offset_in_bucket(&self, bucket: u64, elapsed: u64) -> u64 {
        elapsed.saturating_sub(bucket.saturating_mul(self.bucket_nanos))
    }

    /// How far into `bucket` the time `elapsed` is, in [0, 1).
    fn fraction(&self, bucket: u64, elapsed: u64) -> f64 {
        let into = self.offset_in_bucket(bucket, elapsed);
        (into as f64 / self.bucket_nanos as f64).clamp(0.0, 1.0)
    }

    /// The key's count in one bucket.
    #[inline]
    fn count(&self, hash: u64, bucket: u64) -> isize {
        self.slot(bucket).counts.get(hash)
    }

    /// The key's total over buckets `first..end`.
    fn sum(&self, hash: u64, first: u64, end: u64) -> isize {
        (first..end).fold(0isize, |total, b| total.saturating_add(self.count(hash, b)))
    }

    /// Clears the slot for bucket `bucket`, unless it was already cleared for it (or a later
    /// bucket): idempotent, so late or duplicate ticks do nothing. Also does nothing when the
    /// bucket starts less than a tick from now, by a clock read just before the clearing: a
    /// tick that runs late (its thread preempted, many `Rate`s ticked before this one) must
    /// not clear a bucket that requests may already be counting in. The slot then keeps stale
    /// counts, which can only over-count.
    fn prepare(&self, bucket: u64) {
        let slot = self.slot(bucket);
        if slot.bucket.load(Ordering::Relaxed) >= bucket {
            return;
        }
        let elapsed = self.elapsed_at(self.time.precise());
        let begins = bucket.saturating_mul(self.bucket_nanos);
        if begins.saturating_sub(elapsed) < TICK_NANOS {
            return;
        }
        slot.counts.reset();
        // Release: the zeroing above happens-before any observe that loads this tag.
        slot.bucket.store(bucket, Ordering::Release);
    }

    /// The window of the bucket `now` is in, with the key's counts in it (`curr`) and in the
    /// bucket before (`prev`; 0 before the Rate existed).
    #[inline]
    fn window_view(&self, now: Now, prev: isize, curr: isize) -> WindowView {
        WindowView {
            bucket: now.bucket,
            index: now.index,
            prev,
            curr,
            into: now.into,
            len: self.bucket_nanos,
            at: now.at,
        }
    }
}

/// Bits of [`RateCore::current_hint`] that hold the slot index: more than the
/// `MAX_SUB_WINDOWS + 4` slots a ring can have. A bucket is at least a tick (10 ms) long, so
/// bucket numbers stay below 2^41 and fit above them.
const HINT_INDEX_BITS: u32 = 8;
const _: () = assert!(MAX_SUB_WINDOWS + 4 < 1 << HINT_INDEX_BITS);

/// The hint word for `bucket`, whose slot is at `index`.
fn pack_hint(bucket: u64, index: usize) -> u64 {
    bucket << HINT_INDEX_BITS | index as u64
}

/// The bucket and slot index of a hint word.
#[inline]
fn unpack_hint(hint: u64) -> (u64, usize) {
    (
        hint >> HINT_INDEX_BITS,
        (hint & ((1 << HINT_INDEX_BITS) - 1)) as usize,
    )
}

impl Tick for RateCore {
    /// Runs as each bucket begins (and once after registration): clears the slots of the next
    /// two buckets, and asks to run again when the next bucket begins.
    fn tick(&self, now: u64) -> u64 {
        let elapsed = self.elapsed_at(now);
        let current = elapsed / self.bucket_nanos;
        self.current_hint.fetch_max(
            pack_hint(current, self.slot_index(current)),
            Ordering::Relaxed,
        );
        // Bucket current + 2 is new work; current + 1 was normally cleared as "two ahead" a
        // bucket ago, and is retried here after a late tick. `prepare` reads the clock again
        // and leaves alone a bucket that starts within a tick.
        self.prepare(current + 1);
        self.prepare(current + 2);
        self.time_at(current.saturating_add(1).saturating_mul(self.bucket_nanos))
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A ticker that already saw the next bucket begin (it runs ahead of the coarse time,
    /// which lags) leaves the request path to the precise time: the coarse time is not read
    /// as being in that bucket, whose start it has not reached.
    #[test]
    fn a_coarse_time_before_the_hints_bucket_is_not_settled() {
        let clock = ManualClock::new();
        let rate = Rate::builder(Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        clock.advance(Duration::from_millis(2500));
        let core = &*rate.core;
        let now = core.settled().expect("in bucket 2, as the ticker saw");
        assert_eq!((now.bucket, now.into), (2, 500_000_000));
        core.current_hint
            .fetch_max(pack_hint(3, core.slot_index(3)), Ordering::Relaxed);
        assert!(core.settled().is_none(), "bucket 3 has not begun");
        assert_eq!(core.now_indexed().bucket, 2);
    }

    /// Units told after the fact count in their window while its slot is still its own (the
    /// limiter's lease, taken back a window later), and nowhere once the ring has cleared the
    /// slot for a later window: they would count in a window they were not admitted in.
    #[test]
    fn units_added_after_the_fact_count_in_their_window_until_its_slot_is_given_on() {
        let clock = ManualClock::new();
        let rate = Rate::builder(Duration::from_secs(1))
            .clock(&clock)
            .build()
            .unwrap();
        let hash = 0x5EED_0000_0000_0001;
        rate.add_at(hash, 0, 7);
        assert_eq!(rate.view(hash).curr, 7);
        clock.advance(Duration::from_millis(1_500));
        rate.add_at(hash, 0, 3);
        assert_eq!(
            rate.view(hash).prev,
            10,
            "the window before, still its own slot"
        );
        // Past the end of bucket 2, bucket 0's slot is cleared for bucket 5 (or later).
        clock.advance(Duration::from_secs(2));
        rate.add_at(hash, 0, 50);
        clock.advance(Duration::from_secs(2));
        assert_eq!(rate.view(hash).curr, 0, "counted in bucket 5");
    }
}
