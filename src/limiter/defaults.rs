//! The limiter's default limits as the request path reads them: whole, or in the one word of
//! them that a request needs on its most common paths.
//!
//! Whole, they are 56 bytes of thresholds behind a sequence lock (crossbeam's `AtomicCell`):
//! a copy of tens of instructions a request (28 when they were 80 bytes, out of 132 on a
//! flooding key's path and 279 on a healthy key's: callgrind, at 100k requests a second). Most requests need less of them:
//!
//! - a request the over-limit cache refuses needs the rate limit and its tag
//!   ([`LimitTag`]);
//! - a request the sketches admit alone (its key below its promotion thresholds and not
//!   flagged, outside a fleet) needs those two thresholds ([`Promotion`]), and whether it
//!   may be judged on its current rate window alone (`quiet.rs`), in the same word;
//! - a promoted key's request admitted in its lane needs, in a limiter that counts units in
//!   flight alone, the in-flight limit and its threshold ([`InflightAlone`]), and in one
//!   that counts both, both limits ([`BothLimits`]).
//!
//! Each is one atomic word, read whole, so a decision made on one never mixes the limits of
//! two `set_limits`; the thresholds are read whole for every other request.
//!
//! # Orderings
//!
//! [`store`](Defaults::store) writes the thresholds, then the promotion word, the lanes'
//! words, then the tag, each publishing with `Release`; the request path reads them in the
//! opposite order with `Acquire`. So a request that read a newer word reads thresholds at least as new after it
//! (it may read older words and newer thresholds, which only means it decided on a
//! `set_limits` that came before the one it then read in full: each decision is made on one
//! of them whole).

use crossbeam_utils::atomic::AtomicCell;

use super::limits::{BothLimits, InflightAlone, Promotion, Thresholds};
use super::overlimit::LimitTag;
use super::quiet::RateMark;
use crate::sync::{AtomicU64, Ordering};

/// The default limits (see the module docs).
pub(crate) struct Defaults {
    /// Whole. `AtomicCell` (a sequence lock for a value this size): a read writes nothing and
    /// takes no lock unless it races a store (then it waits for it).
    thresholds: AtomicCell<Thresholds>,
    /// [`Promotion::to_bits`] of `thresholds`.
    promotion: AtomicU64,
    /// [`InflightAlone::bits`] of `thresholds` (0: none).
    inflight_alone: AtomicU64,
    /// [`BothLimits::bits`] of `thresholds` (0: none).
    both: AtomicU64,
    /// The rate limit and its over-limit tag.
    tag: LimitTag,
    /// The limiter's rate mark, fixed at build (`quiet.rs`): whether the defaults allow a
    /// request to be judged on its current window alone under it is in their promotion word.
    mark: RateMark,
}

impl Defaults {
    pub(crate) fn new(t: Thresholds, mark: RateMark) -> Self {
        Defaults {
            thresholds: AtomicCell::new(t),
            promotion: AtomicU64::new(promotion_bits(&t, mark)),
            inflight_alone: AtomicU64::new(inflight_alone_bits(&t)),
            both: AtomicU64::new(both_bits(&t)),
            tag: LimitTag::new(t.rate_tag()),
            mark,
        }
    }

    /// Replaces them. Stores from several threads must be serialised by the caller (two
    /// interleaved could leave one's words with the other's thresholds).
    pub(crate) fn store(&self, t: Thresholds) {
        self.thresholds.store(t);
        self.promotion
            .store(promotion_bits(&t, self.mark), Ordering::Release);
        self.inflight_alone
            .store(inflight_alone_bits(&t), Ordering::Release);
        self.both.store(both_bits(&t), Ordering::Release);
        self.tag.set(t.rate_tag());
    }

    /// The thresholds, whole.
    #[inline]
    pub(crate) fn load(&self) -> Thresholds {
        self.thresholds.load()
    }

    /// The promotion thresholds.
    #[inline]
    pub(crate) fn promotion(&self) -> Promotion {
        Promotion::from_bits(self.promotion.load(Ordering::Acquire))
    }

    /// The in-flight limit and its promotion threshold, if the limits count units in flight
    /// alone.
    #[inline]
    pub(crate) fn inflight_alone(&self) -> Option<InflightAlone> {
        InflightAlone::from_bits(self.inflight_alone.load(Ordering::Acquire))
    }

    /// The in-flight limit and the rate limit, if the limits count both.
    #[inline]
    pub(crate) fn both(&self) -> Option<BothLimits> {
        BothLimits::from_bits(self.both.load(Ordering::Acquire))
    }

    /// The limiter's rate mark: the count at which an add to the rate sketch marks its key's
    /// line.
    #[inline]
    pub(crate) fn rate_mark(&self) -> RateMark {
        self.mark
    }

    /// The rate limit's over-limit tag mix and the limit, if there is a rate limit.
    #[inline]
    pub(crate) fn tag(&self) -> Option<(u64, isize)> {
        self.tag.get()
    }
}

/// `t`'s promotion thresholds as one word, saying whether `t` allows a request to be judged on
/// its current window alone under `mark`.
fn promotion_bits(t: &Thresholds, mark: RateMark) -> u64 {
    t.promotion().with_current_alone(mark.allows(t)).to_bits()
}

fn inflight_alone_bits(t: &Thresholds) -> u64 {
    t.inflight_alone().map_or(0, InflightAlone::bits)
}

fn both_bits(t: &Thresholds) -> u64 {
    t.both_limits().map_or(0, BothLimits::bits)
}
