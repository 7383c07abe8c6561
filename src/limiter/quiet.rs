//! A request judged on its key's current rate window alone, where its key's line says that
//! no key of the line counted much in the window before: the previous window's count, a
//! second cache line of the rate sketch, is then not read.
//!
//! # Why it may be left unread
//!
//! The limit is judged on the sliding count `prev·(1−f) + curr` of what a key was admitted in
//! the window before and in this one. A request the sketches admit alone must leave that
//! count within the key's limit `L`. Each key line keeps a rate mark: the latest window in
//! which a count of one of its keys, returned by an add to the rate sketch, reached the
//! limiter's mark `M` ([`RateMark`]); every add of the limiter's to the rate sketch checks
//! (requests, requests counted again in a later window, and a lane's leased units when its
//! lease is taken back). A key's count in a window is at least what it was admitted in it
//! (the sketch never under-counts), and the last of its adds returns at least all of them;
//! so a key whose line shows no mark in the window before had less than `M` admitted there.
//! A request of such a key whose own current count (its units included) is below its
//! promotion threshold `P` then leaves the sliding count below `(M − 1) + (P − 1)`: within
//! `L` whenever `M + ⌈P⌉ ≤ L + 2`, which the limiter checks for its default limits each time
//! they are set ([`RateMark::allows`]; with the default promotion at half of each limit and
//! `M` the defaults' threshold at build, it holds until `set_limits` lowers the rate limit),
//! and as long as no decision was judged against a rate threshold above `M` (a plan's, or
//! defaults raised since; then every request reads both windows). Such a request is judged
//! hot when its current count alone reaches `P`, and then, like any request the sketches do
//! not admit alone, reads the previous window before anything else looks at its counts.
//!
//! Only the default limits' requests of one unit outside a fleet are judged so (the common
//! path, `acquire_one`); every other request reads both windows, and marks like the rest.
//!
//! # Orderings
//!
//! The mark is raised after the add that reached `M` and read after the request's own add,
//! both `SeqCst` like the counts, so a request that reads no mark read it before that raise
//! in the one order of counts and marks. A key that leaves the exact stage counts its lane's
//! units (and marks) before its filter cell is unflagged (`Release`); a request that finds
//! the cell unflagged (`Acquire`) then reads that mark.
//!
//! A request held up between its add and its raise of the mark (a thread preempted there, as
//! the window ends) may be missed by a request of the next window that reads the mark first.
//! That add reached `M`, at least the threshold it is judged by (no decision is judged by a
//! higher one while requests are judged so), so its key is hot: it is decided under the
//! exact stage's lock, and there, its window passed, in the window of the time now
//! (`Sketches::again_after`), after the request that missed it and counting it.

use crate::rate::WindowView;

use super::key_lines::KeyLine;
use super::limits::{Promotion, Thresholds};
use super::proof::HighestRatePromotion;

/// The count of one key in one rate window at which the key marks its line: the default
/// limits' rate promotion threshold at build, rounded up (past every count without a rate).
/// Fixed for the limiter's life: lines marked under it mean the same whatever `set_limits`
/// does; a later default it does not suit judges every request on both windows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateMark {
    at: isize,
}

impl RateMark {
    /// The mark for a limiter whose default limits at build are `defaults`.
    pub(crate) fn new(defaults: &Thresholds) -> Self {
        let at = defaults.rate.map_or(isize::MAX, |rate| {
            // `as` saturates; a threshold is at least 0.
            rate.promote_at.ceil() as isize
        });
        RateMark { at: at.max(1) }
    }

    /// Marks `line` if `count`, a key's count in window `bucket` after an add of the limiter's,
    /// reached the mark.
    #[inline(always)]
    pub(crate) fn note(self, line: KeyLine<'_>, bucket: u64, count: isize) {
        if count >= self.at {
            line.mark_rate(bucket);
        }
    }

    /// [`note`](Self::note) of a request's rate window, if the limiter counts a rate.
    #[inline(always)]
    pub(crate) fn note_view(self, line: KeyLine<'_>, view: Option<&WindowView>) {
        if let Some(view) = view {
            self.note(line, view.bucket, view.curr);
        }
    }

    /// Whether a key under the limits `t`, below their rate promotion threshold in its current
    /// window and with less than the mark in the window before, is within their rate limit
    /// (see the module docs): `M + ⌈P⌉ ≤ L + 2`. False without a rate limit.
    pub(crate) fn allows(self, t: &Thresholds) -> bool {
        t.rate.is_some_and(|rate| {
            let promote_at = rate.promote_at.ceil() as isize;
            self.at.saturating_add(promote_at) <= rate.limit.saturating_add(2)
        })
    }
}

impl RateMark {
    /// The last window whose previous count a request of a key of `line`, under the default
    /// limits of `promotion`, must read: by the line's mark (one more than its latest marked
    /// window, so every window up to the one after it), where the defaults allow it and no
    /// decision was judged against a rate threshold above the mark (`highest`: a key admitted
    /// alone under a higher one may have had that much in the window before); `u64::MAX`
    /// (always read) otherwise.
    #[inline(always)]
    pub(crate) fn read_previous_through(
        self,
        line: KeyLine<'_>,
        promotion: Promotion,
        highest: &HighestRatePromotion,
    ) -> u64 {
        if promotion.current_alone() && highest.at_most(self.at) {
            line.rate_mark()
        } else {
            u64::MAX
        }
    }
}
