//! Per-key event rates over fixed windows, in fixed memory, with no rotation on the request
//! path.
//!
//! # Windows
//!
//! A [`Rate`] counts events in windows of a fixed interval, anchored at the moment the `Rate`
//! was created: window `w` covers `[start + w·interval, start + (w+1)·interval)`, whatever
//! the traffic. Optionally a window is made of k equal sub-windows ("buckets"); a plain `Rate`
//! has k = 1 and its buckets are its windows.
//!
//! Each bucket's counts live in a count-min table of their own (an
//! [`Estimator`](crate::Estimator)'s counters; the `Rate` owns the one hasher of all its
//! slots; a `Limiter`'s `Rate` keeps a key's rows in one cache line instead, and its clearing
//! zeroes only the blocks written since), in a ring of k + 4 slots; bucket `b` uses slot `b mod (k+4)`. Readers need
//! buckets `b−k ..= b`; the shared ticker ([`clock`](crate::clock)) clears the slots of
//! buckets `b+1` and `b+2` as bucket `b` begins (the `Rate` is scheduled on the ticker's
//! timing wheel for the start of each bucket, so a ticker does nothing for it in between), so
//! a slot is always zeroed at least one whole bucket before it is used, and the request path
//! never flips, clears or rotates anything: it derives the slot from the time.
//! The fourth spare slot is for readers: one that read the time in bucket `b−1` and reads
//! the counts after the ticker has moved on to `b` still finds buckets `b−1−k ..= b−1` intact
//! (the clearing for `b+2` reuses the slot of `b−k−2`).
//!
//! # Time on the request path
//!
//! The request path reads the coarse clock (one relaxed load) and the window the ticker last
//! saw as current (one more load), and takes that window when the coarse time is not within two
//! ticks of its end. Near a boundary it reads the precise clock instead, so an event just after
//! a boundary counts in the new window even though the coarse clock lags by up to a tick. For
//! an interval of one second that is 2% of calls; no division happens on the fast path.
//!
//! # Guarantees
//!
//! Within a window, estimates never fall below the true count of events observed in it, from
//! any number of threads and across window changes (each slot is cleared only while it is at
//! least one bucket away from current). A count may be over-estimated by collisions in the
//! sketch, bounded as for [`Estimator`](crate::Estimator).
//!
//! # Orderings
//!
//! Each slot records the bucket it was cleared for (`Slot::bucket`). The ticker zeroes a slot's
//! counters and then stores the new bucket with `Release`; `observe` loads it with `Acquire`
//! before incrementing, so the zeroing happens-before any increment that sees the slot as
//! prepared, and can never be ordered after it and wipe it. The counters themselves are
//! `SeqCst`, for [`Estimator::incr`](crate::Estimator::incr)'s re-read, not for this protocol.

mod builder;
mod ring;
mod window;

pub use builder::RateBuilder;
pub use ring::{
    Rate, RateComponents, DEFAULT_COLUMNS, DEFAULT_ROWS, MAX_INTERVAL, MAX_SUB_WINDOWS,
    PROPORTIONAL_RATE_ESTIMATE_CALC_FN,
};
pub(crate) use window::{ExactWindows, Rolling, WindowView};
