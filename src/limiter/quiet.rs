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
//! `M` the defaults' threshold at build, it holds until `set_limits` lowers the rate limit).
//! Such a request is judged hot when its current count alone reaches `P`, and then, like any
//! request the sketches do not admit alone, reads the previous window before anything else
//! looks at its counts.
//!
//! Only the default limits' requests of one unit outside a fleet are judged so (the common
//! path, `acquire_one`); every other request reads both windows, and marks like the rest.
//!
//! # Orderings
//!
//! The mark is raised after the add that reached `M` and read after the request's own add,
//! both `SeqCst` like the counts. A unit admitted before a request reads no mark was counted
//! and, if its count reached `M`, marked before it was admitted; so what the key was admitted
//! in the window before, as that request is decided, is below `M`. A key that leaves the
//! exact stage counts its lane's units (and marks) before its filter cell is unflagged
//! (`Release`); a request that finds the cell unflagged (`Acquire`) then reads that mark.
//!
//! A request of the window before held up between its add and its mark (a thread preempted
//! there, as the window ends) is decided after a request of the next window that read no
//! mark, and its units join the window before after that decision. Under the same limits,
//! either its count made it hot (it is decided under the exact stage's lock, and there, its
//! window passed, in the window of the time now, counting the request that missed it:
//! `Sketches::again_after`), or it is admitted by the sketches alone below `P`: the sketches
//! alone admit less than `P` of a key in a window (`proof.rs`), so the window before holds
//! less than `P` of such late units and the sliding count stays below `2·(P − 1)`, within `L`
//! when `2·⌈P⌉ ≤ L + 2`, the limiter's other check. A key judged under other limits too (a
//! plan's) is judged by each decision's own: a request judged on its current window alone
//! saw its count within its limit when it was decided. So is a late request whose defaults
//! `set_limits` lowered between its add and its mark: its units are below the threshold it
//! was judged by, the older one, not the new `P`; like any request racing `set_limits`, each
//! decision holds to the limits it read.
//!
//! # What changes besides the read
//!
//! The argument is about admissions. Promotions move: a key below the threshold in its
//! current window is no longer promoted for what its previous window weighs, only once its
//! current count reaches `P` or its line is marked. Where keys share counters (small sketches,
//! or past the peak rate the sketches were sized for), that changes which of them is promoted
//! first, and so which is refused while the other is judged alone: a review's random driver
//! (1,000 seeds of limits from 1 to 101 on sketches down to one row of four counters) found
//! 121 seeds with more wrong refusals than before and 87 with fewer, 0.24% more in all, and
//! no admission past a limit; the limiter bench's workloads, sized as a user would, refuse no
//! healthy key after their warm-up either way. The over-limit cache has five slots a line for
//! six.

use crate::rate::WindowView;

use super::key_lines::KeyLine;
use super::limits::{Promotion, Thresholds};

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
    /// (see the module docs): `M + ⌈P⌉ ≤ L + 2`, and `2·⌈P⌉ ≤ L + 2` for a window before
    /// that requests held up between their adds and their marks filled (up to `P` by the
    /// sketch alone). False without a rate limit.
    pub(crate) fn allows(self, t: &Thresholds) -> bool {
        t.rate.is_some_and(|rate| {
            // `as` saturates; a threshold is at least 0.
            let promote_at = rate.promote_at.ceil() as isize;
            let room = rate.limit.saturating_add(2);
            self.at.saturating_add(promote_at) <= room && promote_at.saturating_mul(2) <= room
        })
    }
}

/// The last window whose previous count a request of a key of `line`, under the default
/// limits of `promotion`, must read: by the line's mark (one more than its latest marked
/// window, so every window up to the one after it), where the defaults allow it; `u64::MAX`
/// (always read) otherwise.
#[inline(always)]
pub(crate) fn read_previous_through(line: KeyLine<'_>, promotion: Promotion) -> u64 {
    if promotion.current_alone() {
        line.rate_mark()
    } else {
        u64::MAX
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::limiter::Limits;

    fn thresholds(limit: u32, promotion: f64) -> Thresholds {
        Thresholds::promoting(&Limits::new().max_rate(limit), promotion, promotion)
    }

    /// The defaults at build allow it, for every limit from 1 to the largest; lowered under
    /// what the mark was set for, or with a promotion past half of each limit, they do not.
    #[test]
    fn the_current_window_alone_is_allowed_where_both_windows_stay_within_the_limit() {
        for limit in [1, 2, 3, 7, 100, 101, 65_536, Limits::MAX_LIMIT] {
            let t = thresholds(limit, 0.5);
            let mark = RateMark::new(&t);
            assert!(mark.allows(&t), "the defaults at build, limit {limit}");
            // Whatever it allows, a key below the mark in the window before and below its
            // threshold in this one is within its limit.
            let promote_at = t.rate.unwrap().promote_at.ceil() as isize;
            assert!((mark.at - 1) + (promote_at - 1) <= limit as isize);
            assert!(mark.allows(&thresholds(
                limit.saturating_mul(4).min(Limits::MAX_LIMIT),
                0.5
            )));
        }
        let mark = RateMark::new(&thresholds(100, 0.5));
        assert!(!mark.allows(&thresholds(60, 0.5)), "lowered: 50 + 30 > 62");
        assert!(
            mark.allows(&thresholds(98, 0.5)),
            "lowered a little: 50 + 49 ≤ 100"
        );
        assert!(!mark.allows(&thresholds(1_000, 0.9)), "2·900 > 1002");
        assert!(!RateMark::new(&thresholds(100, 1.0)).allows(&thresholds(100, 1.0)));
        let no_rate = Thresholds::promoting(&Limits::new().max_inflight(10), 0.5, 0.5);
        assert!(!RateMark::new(&no_rate).allows(&no_rate), "no rate limit");
    }

    /// The promotion word keeps its thresholds whatever its bit says, and the bit itself.
    #[test]
    fn the_promotion_word_carries_whether_the_current_window_alone_is_allowed() {
        for limit in [1, 100, Limits::MAX_LIMIT] {
            let promotion = thresholds(limit, 0.5).promotion();
            for allowed in [false, true] {
                let word = promotion.with_current_alone(allowed).to_bits();
                let back = Promotion::from_bits(word);
                assert_eq!(back.current_alone(), allowed);
                assert_eq!(back.rate(), promotion.rate());
                assert_eq!(back.with_current_alone(false), promotion);
            }
        }
    }
}
