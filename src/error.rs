//! The one error type of the crate: what was wrong with a configuration, and what is allowed.

use std::fmt;
use std::time::Duration;

/// A configuration that floodgate refuses at construction time.
///
/// Every constructor that can fail returns this error: `try_new`, `with_size`, `with_error`
/// and the builders' `build`. The constructors with pingora-limits' signatures
/// ([`Estimator::new`](crate::Estimator::new), [`Rate::new`](crate::Rate::new),
/// [`Rate::new_with_estimator_config`](crate::Rate::new_with_estimator_config)) cannot return
/// it, so they panic with its `Display` text instead. Nothing on the request path returns or
/// panics with it.
///
/// The messages speak of rows and columns, the words of `try_new`, `with_size` and the
/// builders; pingora-limits' `hashes` are rows and its `slots` are columns.
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
    /// A sketch was asked for with zero rows (pingora-limits' `hashes`).
    ZeroRows,
    /// A sketch was asked for with zero columns (pingora-limits' `slots`).
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
    /// [`Estimator::with_error`](crate::Estimator::with_error) was asked for an ε and δ whose
    /// sketch would exceed [`Estimator::MAX_COUNTERS`](crate::Estimator::MAX_COUNTERS)
    /// counters.
    TooPrecise {
        /// ε asked for.
        epsilon: f64,
        /// δ asked for.
        delta: f64,
        /// The rows δ needs: ⌈ln(1/δ)⌉, at least 1.
        rows: usize,
        /// The columns ε needs: ⌈e/ε⌉, before rounding up to a power of two. A float,
        /// because a tiny ε needs more columns than `usize` counts (infinite when e/ε
        /// overflows `f64`).
        columns: f64,
        /// The most counters a sketch may have,
        /// [`Estimator::MAX_COUNTERS`](crate::Estimator::MAX_COUNTERS).
        max_counters: usize,
    },
    /// A limiter's sketch asked for with more rows than one cache line has counters: each
    /// key's counters for every row live in one 64-byte block of 16.
    TooManyRows {
        /// Rows asked for.
        rows: usize,
        /// The most allowed.
        max: usize,
    },
    /// A limit that the limiter's 32-bit counters cannot judge: counts read at most 2^31, and a
    /// limit must be at most half of that, [`Limits::MAX_LIMIT`](crate::Limits::MAX_LIMIT), so
    /// that a count at the limit with a request of the largest cost is still counted exactly.
    LimitTooLarge {
        /// The limit asked for.
        limit: u32,
        /// The largest limit allowed.
        max: u32,
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
    /// A limiter's exact stage asked for with no place, or with more than allowed
    /// (2^20 keys).
    ExactCapacity {
        /// Keys asked for.
        asked: usize,
        /// The most allowed.
        max: usize,
    },
    /// More waiters asked for than a limiter allows
    /// (2^24); their room is allocated up front.
    Waiters {
        /// Waiters asked for.
        asked: usize,
        /// The most allowed.
        max: usize,
    },
    /// A limit or threshold outside what is allowed; the message names it.
    InvalidLimit(&'static str),
    /// New default limits ([`Limiter::set_limits`](crate::Limiter::set_limits)) that leave
    /// out a kind the limiter counts: neither a limit of it
    /// ([`Limits::max_inflight`](crate::Limits::max_inflight),
    /// [`Limits::max_rate`](crate::Limits::max_rate)) nor that there is none
    /// ([`Limits::no_inflight`](crate::Limits::no_inflight),
    /// [`Limits::no_rate`](crate::Limits::no_rate)). Taken as "no limit", a push of one kind
    /// would turn the other off unsaid; the defaults in force stay.
    LimitLeftOut {
        /// The kind left out (the first, if both are).
        kind: crate::LimitKind,
    },
    /// An adaptive in-flight limit that cannot work
    /// ([`LimiterBuilder::adaptive_inflight`](crate::LimiterBuilder::adaptive_inflight)): no
    /// `max_inflight` to learn under, a floor of 0 or above it, a tolerance outside (1, 10],
    /// or probes fewer than 4 rounds apart. The message says which.
    InvalidAdaptive(&'static str),
    /// A client address prefix longer than the address
    /// (`floodgate::fields::client::ClientAddr`); the message names the family.
    InvalidClientPrefix(&'static str),
    /// A fleet configuration (`floodgate::fleet::FleetConfig`, feature `redis`) that cannot
    /// work: a sync interval shorter than one tick, or longer than a minute or the rate
    /// window, a timeout under a millisecond or over a minute, an expected size of 0 or over
    /// 10,000 nodes, an empty prefix or one with braces, a URL that is not a Redis URL (or a TLS one), a Unix socket
    /// or a database other than 0 for a Cluster; or a fleet limiter without `max_rate`, or
    /// whose rate interval is not a whole number of milliseconds. The message says which, and
    /// what is allowed.
    Fleet(String),
    /// A `Retry-After` jitter (the tower layer's `retry_after_jitter`, feature `tower`) longer
    /// than allowed: a client told to come back in a random time up to days would not.
    RetryAfterJitter {
        /// The jitter asked for.
        asked: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// A refusal's status (the tower layer's `RefusalResponse`, feature `tower`) that is not
    /// a client or a server error: a refusal must not read as a success or a redirection.
    RefusalStatus {
        /// The status asked for.
        status: u16,
    },
    /// A name for a policy of the RateLimit fields (`fields::ratelimit::PolicyNames`) that a
    /// client could not read: empty, with a character a Structured Field String cannot carry,
    /// or the same for both policies.
    PolicyName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroRows => f.write_str("a sketch needs at least one row, got 0 rows"),
            ConfigError::ZeroColumns => {
                f.write_str("a sketch needs at least one column, got 0 columns")
            }
            ConfigError::TooLarge { rows, columns } => write!(
                f,
                "a sketch of {rows} rows x {columns} columns (columns rounded up to a power of two; \
                 for a Rate, times its window slots) exceeds the limit of {} counters",
                crate::Estimator::MAX_COUNTERS
            ),
            ConfigError::TooPrecise {
                epsilon,
                delta,
                rows,
                columns,
                max_counters,
            } => {
                write!(
                    f,
                    "epsilon = {epsilon:e} and delta = {delta:e} need a sketch of {rows} rows \
                     (ceil(ln(1/delta))) x {} columns (ceil(e/epsilon), before rounding up to a \
                     power of two), {} counters, over the limit of {max_counters} counters",
                    Count(*columns),
                    Count(*rows as f64 * *columns),
                )?;
                // The smallest epsilon that fits at this depth: the widest power-of-two row
                // that `rows` rows may have is w, and ⌈e/ε⌉ ≤ w exactly when ε ≥ e/w.
                match *max_counters / (*rows).max(1) {
                    0 => f.write_str("; choose a larger delta"),
                    fit => {
                        let widest = 1usize << (usize::BITS - 1 - fit.leading_zeros());
                        // Four digits rounded to nearest are within 0.05% of the value; from
                        // 0.1% above it they never fall below it, so the example fits.
                        let example = std::f64::consts::E / widest as f64 * 1.001;
                        write!(
                            f,
                            "; at {rows} rows epsilon must be at least e/{widest} \
                             ({example:.3e} will do)"
                        )
                    }
                }
            }
            ConfigError::TooManyRows { rows, max } => write!(
                f,
                "a limiter's sketch keeps a key's counters for every row in one cache line of \
                 {max} counters, so it takes 1 to {max} rows, got {rows}"
            ),
            ConfigError::LimitTooLarge { limit, max } => write!(
                f,
                "a limit of {limit} is more than the limiter's counters can judge (they \
                 read at most 2^31); the largest limit is {max}"
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
                 (one tick of the coarse clock, {tick:?}, per sub-window)",
                tick = crate::clock::TICK
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
            ConfigError::ExactCapacity { asked, max } => write!(
                f,
                "the exact stage needs a capacity between 1 and {max} keys, got {asked}"
            ),
            ConfigError::Waiters { asked, max } => write!(
                f,
                "a limiter holds at most {max} waiters (their room is allocated when it is \
                 built), got {asked}"
            ),
            ConfigError::InvalidLimit(what) | ConfigError::InvalidAdaptive(what) => f.write_str(what),
            ConfigError::LimitLeftOut { kind } => {
                let (limit, off) = match kind {
                    crate::LimitKind::Inflight => ("max_inflight", "no_inflight"),
                    crate::LimitKind::Rate => ("max_rate", "no_rate"),
                };
                write!(
                    f,
                    "these limits leave out the {kind} limit, which the limiter counts: name one \
                     (Limits::{limit}) or turn it off (Limits::{off}); the defaults in force are \
                     unchanged"
                )
            }
            ConfigError::InvalidClientPrefix(what) => f.write_str(what),
            ConfigError::Fleet(what) => f.write_str(what),
            ConfigError::RetryAfterJitter { asked, max } => write!(
                f,
                "a Retry-After jitter of {asked:?} is too long: it must be at most {max:?}"
            ),
            ConfigError::PolicyName { name, why } => {
                write!(f, "the RateLimit policy name {name:?} {why}")
            }
            ConfigError::RefusalStatus { status } => write!(
                f,
                "a refusal must answer with a client or a server error (400 to 599), not {status}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A count held in an `f64`: whole numbers as digits while `f64` holds them exactly, larger
/// ones in scientific notation, and an overflow as such.
struct Count(f64);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// 2^53: up to here every whole number is exact in an `f64`.
        const EXACT: f64 = 9_007_199_254_740_992.0;
        if !self.0.is_finite() {
            write!(f, "more than {:.1e}", f64::MAX)
        } else if self.0 <= EXACT {
            write!(f, "{:.0}", self.0)
        } else {
            write!(f, "about {:.3e}", self.0)
        }
    }
}
