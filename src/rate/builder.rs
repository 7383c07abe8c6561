//! How a [`Rate`] is made: its constructors, each through [`RateBuilder`], which takes the
//! `Rate`'s interval, sketch size, sub-windows and clock and validates them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::ring::{
    Rate, RateCore, Slot, DEFAULT_COLUMNS, DEFAULT_ROWS, MAX_INTERVAL, MAX_SUB_WINDOWS,
};
use crate::clock::{ManualClock, Tick, TimeSource, TICK, TICK_NANOS};
use crate::error::ConfigError;
use crate::estimator::{checked_shape, checked_size, Blocked, CountMin, KeyHasher, Table};
use crate::sync::AtomicU64;

// A `Rate`'s constructors: each goes through the builder.
impl Rate {
    /// Creates a `Rate` with windows of `interval` and the default sketch (4 × 1024 per
    /// window slot), on the shared ticker.
    ///
    /// # Panics
    ///
    /// Panics with the [`ConfigError`] message if `interval` is under one tick (10 ms) or over
    /// [`MAX_INTERVAL`]; [`Rate::try_new`] returns the error instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rate = floodgate::Rate::new(Duration::from_secs(1));
    /// assert_eq!(rate.interval(), Duration::from_secs(1));
    /// ```
    pub fn new(interval: Duration) -> Self {
        Self::builder(interval)
            .build()
            .unwrap_or_else(|e| panic!("floodgate::Rate::new: {e}"))
    }

    /// As [`Rate::new`], returning an error instead of panicking.
    ///
    /// # Errors
    ///
    /// As [`RateBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{ConfigError, Rate};
    ///
    /// assert!(Rate::try_new(Duration::from_secs(1)).is_ok());
    /// let err = Rate::try_new(Duration::from_millis(1)).unwrap_err();
    /// assert!(matches!(err, ConfigError::IntervalTooShort { .. }));
    /// ```
    pub fn try_new(interval: Duration) -> Result<Self, ConfigError> {
        Self::builder(interval).build()
    }

    /// Creates a `Rate` whose window slots are `hashes` × `slots` sketches (the signature of
    /// pingora-limits' constructor).
    ///
    /// # Panics
    ///
    /// As [`Rate::new`], and for zero `hashes` or `slots`.
    ///
    /// # Examples
    ///
    /// ```
    /// let rate = floodgate::Rate::new_with_estimator_config(std::time::Duration::from_secs(1), 3, 2048);
    /// assert_eq!(rate.observe(&7u64, 1), 1);
    /// ```
    pub fn new_with_estimator_config(interval: Duration, hashes: usize, slots: usize) -> Self {
        Self::builder(interval)
            .estimator(hashes, slots)
            .build()
            .unwrap_or_else(|e| {
                panic!(
                    "floodgate::Rate::new_with_estimator_config(interval = {interval:?}, \
                     hashes = {hashes}, slots = {slots}): {e} (hashes are rows, slots are \
                     columns; Rate::builder(interval).estimator(rows, columns).build() returns \
                     this error instead of panicking)"
                )
            })
    }

    /// A builder for the less common settings: sketch size, sub-windows, a manual clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(10)).clock(&clock).build().unwrap();
    /// assert_eq!(rate.interval(), Duration::from_secs(10));
    /// ```
    pub fn builder(interval: Duration) -> RateBuilder {
        RateBuilder {
            interval,
            rows: DEFAULT_ROWS,
            columns: DEFAULT_COLUMNS,
            sub_windows: 1,
            clock: None,
            aligned: false,
            blocked: false,
        }
    }
}

/// Configures a [`Rate`]: interval, sketch size, sub-windows and clock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let rate = floodgate::Rate::builder(Duration::from_secs(60))
///     .estimator(4, 4096)
///     .sub_windows(6)
///     .build()
///     .unwrap();
/// assert_eq!(rate.interval(), Duration::from_secs(60));
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RateBuilder {
    pub(super) interval: Duration,
    pub(super) rows: usize,
    pub(super) columns: usize,
    pub(super) sub_windows: usize,
    pub(super) clock: Option<ManualClock>,
    /// Windows start at multiples of the interval in Unix time (a fleet's), not when the
    /// `Rate` is built.
    pub(super) aligned: bool,
    /// Slots in the limiter's blocked layout (`estimator/blocked.rs`) instead of flat rows.
    pub(super) blocked: bool,
}

impl RateBuilder {
    /// The sketch size of each window slot: `rows` × `columns` (columns rounded up to a power
    /// of two), as for [`Estimator::try_new`](crate::Estimator::try_new).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Rate;
    ///
    /// let small = Rate::builder(Duration::from_secs(1)).estimator(2, 256).build().unwrap();
    /// let large = Rate::builder(Duration::from_secs(1)).estimator(4, 4096).build().unwrap();
    /// assert!(small.memory_bytes() < large.memory_bytes());
    /// ```
    pub fn estimator(mut self, rows: usize, columns: usize) -> Self {
        self.rows = rows;
        self.columns = columns;
        self
    }

    /// Splits each window into `k` sub-windows, for a smoother sliding rate. The interval must
    /// be a whole number of nanoseconds per sub-window, each at least one tick long.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).sub_windows(4).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 4);
    /// clock.advance(Duration::from_millis(500));
    /// assert_eq!(rate.observe(&"k", 1), 5); // the last four 250 ms sub-windows
    /// ```
    pub fn sub_windows(mut self, k: usize) -> Self {
        self.sub_windows = k;
        self
    }

    /// Takes time from a [`ManualClock`] instead of the shared ticker (for tests).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Rate};
    ///
    /// let clock = ManualClock::new();
    /// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// rate.observe(&"k", 3);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(rate.peek(&"k"), 0);
    /// ```
    pub fn clock(mut self, clock: &ManualClock) -> Self {
        self.clock = Some(clock.clone());
        self
    }

    /// Starts the windows at whole multiples of the interval since the Unix epoch (on a
    /// [`ManualClock`], since its zero), so that every process names and slides the same
    /// windows: what a fleet of limiters needs to add up their counts.
    pub(crate) fn aligned_to_unix_epoch(mut self) -> Self {
        self.aligned = true;
        self
    }

    /// Keeps each key's counters for every row in one cache line of each slot, with 32-bit
    /// counters that saturate at 2^31, and clears only the blocks written in a slot's last
    /// use: the layout a `Limiter` counts its rate in. At most 16 rows.
    pub(crate) fn blocked(mut self) -> Self {
        self.blocked = true;
        self
    }

    /// The blocked layout, for the crate's own loom models and tests (not a stable API).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn blocked_for_tests(self) -> Self {
        self.blocked()
    }

    /// Builds the `Rate`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::IntervalTooShort`] when a (sub-)window would be shorter than one tick
    /// (10 ms), [`ConfigError::IntervalTooLong`] beyond [`MAX_INTERVAL`],
    /// [`ConfigError::SubWindows`] for zero or more than [`MAX_SUB_WINDOWS`] sub-windows,
    /// [`ConfigError::SubWindowsDoNotDivide`] for an interval they do not divide into whole
    /// nanoseconds, and the errors of [`Estimator::try_new`](crate::Estimator::try_new) — where the limit on counters
    /// applies to all k + 4 window slots together.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{ConfigError, Rate};
    ///
    /// let zero = Rate::builder(Duration::from_secs(1)).sub_windows(0).build();
    /// assert!(matches!(zero, Err(ConfigError::SubWindows { .. })));
    /// assert!(Rate::builder(Duration::from_secs(1)).build().is_ok());
    /// ```
    pub fn build(self) -> Result<Rate, ConfigError> {
        self.build_with_hasher(KeyHasher::new())
    }

    /// [`build`](Self::build) with the hasher of the structure the `Rate` is part of (a
    /// `Limiter` indexes its Rate, its in-flight table and its exact stage by one hash).
    pub(crate) fn build_with_hasher(self, hasher: KeyHasher) -> Result<Rate, ConfigError> {
        let k = self.sub_windows;
        if k == 0 || k > MAX_SUB_WINDOWS {
            return Err(ConfigError::SubWindows {
                asked: k,
                max: MAX_SUB_WINDOWS,
            });
        }
        if self.interval > MAX_INTERVAL {
            return Err(ConfigError::IntervalTooLong {
                interval: self.interval,
                max: MAX_INTERVAL,
            });
        }
        let interval_nanos = self.interval.as_nanos() as u64; // ≤ MAX_INTERVAL fits
        let k64 = k as u64;
        if interval_nanos / k64 < TICK_NANOS {
            return Err(ConfigError::IntervalTooShort {
                interval: self.interval,
                min: TICK * k as u32,
            });
        }
        if interval_nanos % k64 != 0 {
            return Err(ConfigError::SubWindowsDoNotDivide {
                interval: self.interval,
                sub_windows: k,
            });
        }
        // The k + 4 slots together stay within the counters one sketch may have.
        if self.blocked {
            checked_shape(self.rows, self.columns, k + 4)?;
        } else {
            checked_size(self.rows, self.columns, k + 4)?;
        }
        let table = || -> Result<Table, ConfigError> {
            Ok(if self.blocked {
                Table::Blocked(Blocked::try_new(self.rows, self.columns, true)?)
            } else {
                Table::Flat(CountMin::try_new(self.rows, self.columns)?)
            })
        };
        let slots = (0..k + 4)
            .map(|bucket| {
                Ok(Slot {
                    // Slot s starts out cleared for bucket s.
                    bucket: AtomicU64::new(bucket as u64),
                    counts: table()?,
                })
            })
            .collect::<Result<Box<[Slot]>, ConfigError>>()?;
        let time = match &self.clock {
            Some(clock) => TimeSource::manual(clock),
            None => TimeSource::Shared,
        };
        let margin = time.lag();
        let now = time.precise();
        let (start, shift, first_window) = if self.aligned {
            let unix_now = match &time {
                TimeSource::Manual(_) => now,
                TimeSource::Shared => unix_nanos(),
            };
            aligned_start(now, unix_now, interval_nanos)
        } else {
            (now, 0, 0)
        };
        let core = Arc::new(RateCore {
            slots,
            hasher,
            start,
            shift,
            first_window,
            time,
            bucket_nanos: interval_nanos / k64,
            sub_windows: k64,
            interval: self.interval,
            settled_span: (interval_nanos / k64).saturating_sub(margin),
            current_hint: AtomicU64::new(0),
        });
        let weak: Weak<dyn Tick> = Arc::downgrade(&core) as Weak<dyn Tick>;
        let registration = core.time.register(weak);
        Ok(Rate { core, registration })
    }
}

/// Nanoseconds since the Unix epoch by the OS clock (0 if the clock is set before it).
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, crate::clock::saturating_nanos)
}

/// Where windows of `interval` nanoseconds aligned to the Unix epoch start on a clock that
/// reads `now` when Unix time is `unix_now`: the anchor of the window in progress, moved
/// forward by the returned shift (one interval, so that a window that began before the
/// clock's zero, as the shared clock's does when the process is young, is still anchored at
/// its true start), the shift, and that window's number since the epoch.
fn aligned_start(now: u64, unix_now: u64, interval: u64) -> (u64, u64, u64) {
    let into = unix_now % interval;
    let shifted = now.saturating_add(interval) - into;
    (shifted, interval, unix_now / interval)
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::aligned_start;

    #[test]
    fn aligned_windows_start_at_multiples_of_the_interval_in_unix_time() {
        // 1,000 ns windows; Unix time 12,345 ns: window 12 began 345 ns ago (anchors are
        // shifted forward by one interval).
        assert_eq!(aligned_start(10_000, 12_345, 1_000), (10_655, 1_000, 12));
        // A clock at 100 still anchors 345 ns back, before its zero.
        assert_eq!(aligned_start(100, 12_345, 1_000), (755, 1_000, 12));
        // Two clocks with different zeros agree on the windows' Unix boundaries.
        let (a, _, wa) = aligned_start(5_000, 12_345, 1_000);
        let (b, _, wb) = aligned_start(70_000, 12_345, 1_000);
        assert_eq!((5_000 + 1_000 - a, wa), (70_000 + 1_000 - b, wb));
    }
}
