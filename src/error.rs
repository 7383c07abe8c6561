//! The one error type of the crate: what was wrong with a configuration, and what is allowed.

use std::fmt;
use std::time::Duration;

/// A configuration that floodgate refuses at construction time.
///
/// Every constructor that can fail returns this error; the panicking constructors
/// (`new`, kept for pingora-limits compatibility) panic with its `Display` text.
/// Nothing on the request path returns or panics with it.
///
/// # Examples
///
/// ```
/// use floodgate::{ConfigError, Estimator};
///
/// let err = Estimator::try_new(0, 1024).unwrap_err();
/// assert_eq!(err, ConfigError::ZeroRows);
/// assert!(err.to_string().contains("at least one row"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A sketch was asked for with zero rows (hash functions).
    ZeroRows,
    /// A sketch was asked for with zero columns (slots per row).
    ZeroColumns,
    /// The requested rows × columns (after rounding columns up to a power of two) exceed
    /// [`Estimator::MAX_COUNTERS`](crate::Estimator::MAX_COUNTERS) counters (for a `Rate`,
    /// across all its window slots).
    TooLarge {
        /// Rows asked for.
        rows: usize,
        /// Columns asked for (before rounding up to a power of two).
        columns: usize,
    },
    /// The memory for the sketch could not be allocated.
    AllocationFailed {
        /// Bytes that were asked of the allocator.
        bytes: usize,
    },
    /// ε (the relative error bound) must lie strictly between 0 and 1.
    Epsilon(f64),
    /// δ (the failure probability) must lie strictly between 0 and 1.
    Delta(f64),
    /// A rate interval shorter than one tick of the coarse clock (or zero).
    IntervalTooShort {
        /// The interval asked for.
        interval: Duration,
        /// The shortest interval allowed.
        min: Duration,
    },
    /// A rate interval too long to count in the clock's nanosecond arithmetic.
    IntervalTooLong {
        /// The interval asked for.
        interval: Duration,
        /// The longest interval allowed.
        max: Duration,
    },
    /// A rate asked for zero sub-windows, or more than allowed.
    SubWindows {
        /// Sub-windows asked for.
        asked: usize,
        /// The most allowed.
        max: usize,
    },
    /// An interval that its sub-windows do not divide into whole nanoseconds.
    SubWindowsDoNotDivide {
        /// The interval asked for.
        interval: Duration,
        /// Sub-windows asked for.
        sub_windows: usize,
    },
    /// A limit or threshold outside what is allowed; the message names it.
    InvalidLimit(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroRows => f.write_str("a sketch needs at least one row (hashes >= 1)"),
            ConfigError::ZeroColumns => {
                f.write_str("a sketch needs at least one column (slots >= 1)")
            }
            ConfigError::TooLarge { rows, columns } => write!(
                f,
                "a sketch of {rows} rows x {columns} columns (columns rounded up to a power of two; \
                 for a Rate, times its window slots) exceeds the limit of {} counters",
                crate::Estimator::MAX_COUNTERS
            ),
            ConfigError::AllocationFailed { bytes } => {
                write!(f, "could not allocate {bytes} bytes for the sketch counters")
            }
            ConfigError::Epsilon(e) => {
                write!(f, "epsilon must be strictly between 0 and 1, got {e}")
            }
            ConfigError::Delta(d) => write!(f, "delta must be strictly between 0 and 1, got {d}"),
            ConfigError::IntervalTooShort { interval, min } => write!(
                f,
                "a rate interval of {interval:?} is shorter than the minimum of {min:?} \
                 (one 10 ms tick of the coarse clock per sub-window)"
            ),
            ConfigError::IntervalTooLong { interval, max } => {
                write!(f, "a rate interval of {interval:?} exceeds the maximum of {max:?}")
            }
            ConfigError::SubWindows { asked, max } => write!(
                f,
                "a rate window needs between 1 and {max} sub-windows, got {asked}"
            ),
            ConfigError::SubWindowsDoNotDivide {
                interval,
                sub_windows,
            } => write!(
                f,
                "a rate interval of {interval:?} does not divide into {sub_windows} sub-windows \
                 of whole nanoseconds; choose an interval that is a multiple of {sub_windows} ns"
            ),
            ConfigError::InvalidLimit(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for ConfigError {}
