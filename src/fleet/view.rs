//! What a node knows of the fleet's counts of one key, and the decision on them.
//!
//! Each key the exact stage tracks carries a [`FleetView`], written by the sync thread (under
//! the key's set lock) and read by the key's requests (under the same lock). With `L` the
//! limit, `P` the fleet's total of the previous window and `T` that of the current one at the
//! last sync (this node's count then included), `f` the fraction of the window gone, and `m`
//! what this node admitted since the sync, the room the fleet has left is
//! `R = L − P·(1−f) − T`, and a request is admitted when
//!
//! ```text
//! m + 1 + others ≤ R,   others = r·t                      if no other node refuses the key
//!                       max(r·t, R·k ÷ (k+1))             if k other nodes refuse it
//! ```
//!
//! where `r` is the pace at which the other nodes admitted the key between the last two
//! syncs (over a sync interval at least: two syncs close together can see a whole push of
//! another node land between them) and `t` the time since the last sync. The second form is `(k+1)·(m+1) ≤ R`: this
//! node takes at most its share of the room.
//!
//! Why two forms: a node that refuses the key will take any room the window leaves, so its
//! pace since the last sync says nothing of what it admits next, and nodes that each expected
//! the others to keep their last pace would all take the same room at once (the first version
//! did, up to 1.3× the limit with 3 nodes and 2× with 10). A node that refuses nothing admits
//! what it is sent, and its pace is the best guess; a key under the limit fleet-wide has no
//! node refusing it, so its bursts through one node are judged on that node's own count and
//! the others' pace, not held to a share. This node's own requests always count exactly.
//!
//! The fleet's first word on a key ([`FleetView::is_first_word`]) is judged by this node's
//! share as well: it cannot show the nodes that count the key unseen, each up to its share.

use super::KeyTotals;
use crate::rate::{Rolling, WindowView};

/// The fleet's counts of one key at the last sync that reached Redis, and this node's
/// refusals of it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FleetView {
    /// The window the counts are of, by the limiter's own numbering (its Rate's bucket:
    /// consecutive windows have consecutive numbers); `None` before the
    /// first sync of the key.
    pub(crate) window: Option<u64>,
    /// The fleet's total in `window`, this node's count included.
    pub(crate) total: u64,
    /// The fleet's total in the window before, this node's final count included.
    pub(crate) previous: u64,
    /// This node's count in `window` as pushed.
    pub(crate) own: u64,
    /// When the sync's counts were taken, on the limiter's clock (nanoseconds).
    pub(crate) at: u64,
    /// The other nodes' admissions of the key per nanosecond, between the last two syncs but
    /// over a sync interval at least (or over the window before, at a window's first sync), in fixed point: 2^32 is one per
    /// nanosecond, so that the request path applies it with integer arithmetic (the sync
    /// works it out in floats).
    pub(crate) others_pace: Pace,
    /// The other nodes that refused the key in `window` or the window before. Refusals of
    /// the window before count too: a node whose refusal is held in its over-limit cache past
    /// the boundary refuses without counting it for a while.
    pub(crate) refusers: u32,
    /// This node's refusals of the key, counted by its requests.
    pub(crate) refused: Refusals,
    /// When the first sync of this run of views was made (the view before it was of no
    /// window, or of one older than the window before): the fleet's first word on the key.
    pub(crate) first_at: u64,
}

/// A node's refusals of one key in its latest window and the one before.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Refusals(Rolling<u64>);

impl Refusals {
    /// Counts a refusal in `window`.
    pub(crate) fn note(&mut self, window: u64) {
        self.0.roll_to(window);
        self.0.current = self.0.current.saturating_add(1);
    }

    /// The refusals in `window` and the one before (a request may have counted one in the
    /// window after already: a sync reads the counts of its own window).
    pub(crate) fn of(self, window: u64) -> (u64, u64) {
        let before = window.checked_sub(1).and_then(|w| self.0.of(w));
        (self.0.of(window).unwrap_or(0), before.unwrap_or(0))
    }
}

impl FleetView {
    /// Counts a refusal of the key by this node in `window`, for the fleet to learn that this
    /// node takes any room left.
    #[inline]
    pub(crate) fn note_refusal(&mut self, window: u64) {
        self.refused.note(window);
    }

    /// The view after a sync at `at`, `into` nanoseconds into its window `window`, that found
    /// the fleet's `synced` counts, with this node's count `own` in that window and
    /// `own_previous` in the window before; `len` and `sync` are the lengths of a window and
    /// of a sync interval in nanoseconds. `regathering`: the fleet is gathering again after an
    /// outage, and Redis may lack the counts of the nodes that have not synced since (a Redis
    /// that restarted lost them): the view is the fleet's first word on the key again.
    pub(crate) fn synced(
        &self,
        (window, at, into): (u64, u64, u64),
        synced: &KeyTotals,
        (own, own_previous): (u64, u64),
        (len, sync): (u64, u64),
        regathering: bool,
    ) -> FleetView {
        let others = synced.current.saturating_sub(own) as f64;
        let others_pace = match self.window {
            Some(w) if w == window && at > self.at => {
                let before = self.total.saturating_sub(self.own) as f64;
                // Over a sync interval at least: each other node's push carries up to an
                // interval of its admissions, and one may land between two close syncs.
                let span = (at - self.at).max(sync);
                Pace::of(((others - before) / span as f64).max(0.0))
            }
            // Two syncs at one time: nothing learnt of the pace.
            Some(w) if w == window => self.others_pace,
            // A window's first sync: the others' pace over the whole window before.
            _ => Pace::of(synced.previous.saturating_sub(own_previous) as f64 / len.max(1) as f64),
        };
        // The window before as Redis has it lacks the last moments of each node that has not
        // yet synced in this window: no less than this view's estimate of it.
        let previous =
            match self.window {
                Some(w) if w.checked_add(1) == Some(window) => synced
                    .previous
                    .max(self.rolled_over(at.saturating_sub(into), len, own_previous)),
                _ => synced.previous,
            };
        // The same run of views while they follow one another, window by window, and the
        // fleet is not gathering again after an outage.
        let follows = !regathering
            && matches!(self.window, Some(w) if w == window || w.checked_add(1) == Some(window));
        FleetView {
            window: Some(window),
            total: synced.current,
            previous,
            own,
            at,
            others_pace,
            refusers: synced.refusers,
            refused: self.refused,
            first_at: if follows { self.first_at } else { at },
        }
    }

    /// Whether this view is the fleet's first word on the key: its first sync, or one made
    /// less than half a sync interval after it (two syncs close together, a late one and the
    /// next on schedule). A first word cannot show the nodes that held the key unseen, each
    /// on its share: a node counts a key it has not promoted, or promoted since its last
    /// sync, on its own, and pushes it at its next sync, within an interval. The node that
    /// syncs first sees its own count alone, and took the room the others held for its own
    /// (three nodes flooded with a new key admitted 1.65 × its limit in its first window). So
    /// until its next sync a node keeps to its share as well (`sync`: the interval, in
    /// nanoseconds).
    #[inline]
    pub(crate) fn is_first_word(&self, sync: u64) -> bool {
        self.window.is_some() && self.at.saturating_sub(self.first_at) < sync / 2
    }

    /// The total of this view's window once it is over, the next having begun at `began`:
    /// the total at the sync, plus what this node admitted in it after the sync
    /// (`own_final` in all), plus the others' admissions in the rest of it at their average
    /// pace over the part seen (their pace between the last two syncs is no better a guess:
    /// under a flood it is whatever room the sliding window left them).
    fn rolled_over(&self, began: u64, len: u64, own_final: u64) -> u64 {
        let last_began = began.saturating_sub(len);
        let seen = self.at.saturating_sub(last_began).clamp(1, len.max(1));
        let average = self.total.saturating_sub(self.own) as f64 / seen as f64;
        let unseen = ceil(average * len.saturating_sub(seen) as f64);
        self.total
            .saturating_add(own_final.saturating_sub(self.own))
            .saturating_add(unseen)
    }

    /// The local window view `local` (of window `window`, numbered as in the view; this
    /// request's `cost` units counted in it) with the fleet's counts in it, and at least its own: to decide
    /// on (`fits(limit)` is the rule above) and to work out a `retry_after` on. `own_now` and
    /// `own_previous` are this node's counts of the key in this window (this request not
    /// included) and the one before. `None` when the view is older than the window before
    /// (the key was not synced lately: the local counts and this node's share decide).
    #[inline]
    pub(crate) fn judged(
        &self,
        local: &WindowView,
        window: u64,
        own_now: u64,
        own_previous: u64,
        cost: isize,
    ) -> Option<WindowView> {
        let synced = self.window?;
        let cost = cost.max(0) as u64;
        let (previous, total, mine, since) = if synced == window {
            (
                self.previous,
                self.total,
                own_now.saturating_sub(self.own),
                local.at.saturating_sub(self.at),
            )
        } else if synced.checked_add(1) == Some(window) {
            // A new window since the last sync (its first moments, until this node syncs):
            // the view's window is the previous one, and this one holds this node's count
            // and the others' since it began.
            let began = local.at.saturating_sub(local.into);
            let previous = self.rolled_over(began, local.len, own_previous);
            (previous, 0, own_now, local.into)
        } else {
            return None;
        };
        let at_pace = mine.saturating_add(self.others_pace.over(since));
        let k = u64::from(self.refusers);
        // (k+1)·(m+c) − c: the share form, with the request's own c units added below.
        let at_share = (k + 1)
            .saturating_mul(mine)
            .saturating_add(k.saturating_mul(cost));
        let clamp = |n: u64| isize::try_from(n).unwrap_or(isize::MAX);
        // Never less than the local counts (which a key promoted in this window may have
        // from its sketch alone): judging the fleet's counts judges this node's own too.
        let current = total
            .saturating_add(at_pace.max(at_share))
            .saturating_add(cost);
        Some(WindowView {
            prev: clamp(previous).max(local.prev),
            curr: clamp(current).max(local.curr),
            ..*local
        })
    }
}

/// Admissions per nanosecond in fixed point, 32 bits of them fractional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace(u64);

impl Pace {
    /// The pace of `per_ns` admissions per nanosecond (to the nearest, saturating).
    fn of(per_ns: f64) -> Pace {
        // `as` saturates, and takes NaN to 0.
        Pace((per_ns * (1u64 << 32) as f64 + 0.5) as u64)
    }

    /// The admissions in `nanos` at this pace, rounded up unless within 2^-20 of a whole
    /// number: a pace that is a whole number per window (0.06/ns over 1,000 ns) must not
    /// gain a request from its last bit.
    #[inline]
    fn over(self, nanos: u64) -> u64 {
        let scaled = u128::from(self.0) * u128::from(nanos) + ((1u128 << 32) - (1 << 12));
        u64::try_from(scaled >> 32).unwrap_or(u64::MAX)
    }
}

/// `⌈x⌉` of a non-negative `x` (saturating), without libm's `ceil`: that is a call where the
/// target has no rounding instruction.
fn ceil(x: f64) -> u64 {
    let n = x as u64;
    n.saturating_add(u64::from((n as f64) < x))
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn local(at: u64, into: u64) -> WindowView {
        WindowView {
            bucket: 5,
            index: 0,
            prev: 0,
            curr: 0,
            into,
            len: 1_000,
            at,
        }
    }

    fn totals(current: u64, previous: u64) -> KeyTotals {
        KeyTotals {
            current,
            previous,
            ..KeyTotals::default()
        }
    }

    /// The fleet's counts a view judges with: (previous window, current window with the
    /// request).
    fn judged(
        v: &FleetView,
        window: u64,
        local: WindowView,
        own: (u64, u64),
    ) -> Option<(isize, isize)> {
        v.judged(&local, window, own.0, own.1, 1)
            .map(|w| (w.prev, w.curr))
    }

    #[test]
    fn the_fleets_first_word_on_a_key_lasts_until_the_next_sync_an_interval_on() {
        // Sync interval 100 ns. A key's first view, at t=100: the nodes that held it unseen on
        // their shares have not pushed it yet.
        let v = FleetView::default().synced(
            (5, 100, 100),
            &totals(10, 0),
            (10, 0),
            (1_000, 100),
            false,
        );
        assert!(v.is_first_word(100));
        // A late sync and the next on schedule, close together: still the first word.
        let close = v.synced((5, 130, 130), &totals(10, 0), (10, 0), (1_000, 100), false);
        assert!(close.is_first_word(100));
        // An interval on, every node has pushed what it held: the fleet's word stands alone.
        let later = close.synced((5, 200, 200), &totals(30, 0), (10, 0), (1_000, 100), false);
        assert!(!later.is_first_word(100));
        // And so on into the next window; a view that lapsed (two windows) starts again.
        let next = later.synced(
            (6, 1_100, 100),
            &totals(5, 30),
            (2, 10),
            (1_000, 100),
            false,
        );
        assert!(!next.is_first_word(100));
        let again = next.synced((8, 3_100, 100), &totals(5, 0), (5, 0), (1_000, 100), false);
        assert!(again.is_first_word(100));
        assert!(!FleetView::default().is_first_word(100), "no word at all");
    }

    /// While the fleet gathers again after an outage, Redis may lack the counts of the nodes
    /// that have not synced since (a Redis that restarted lost them): every view is the
    /// fleet's first word again, until the next sync after the fleet has gathered.
    #[test]
    fn a_view_while_the_fleet_gathers_again_is_a_first_word() {
        // A steady run of views, then Redis away, back empty within the same window: this
        // node's count alone.
        let v = FleetView::default().synced(
            (5, 100, 100),
            &totals(30, 0),
            (10, 0),
            (1_000, 100),
            false,
        );
        let v = v.synced((5, 200, 200), &totals(60, 0), (20, 0), (1_000, 100), false);
        assert!(!v.is_first_word(100));
        let back = v.synced((5, 500, 500), &totals(40, 0), (40, 0), (1_000, 100), true);
        assert!(back.is_first_word(100), "{back:?}");
        let still = back.synced((5, 600, 600), &totals(80, 0), (45, 0), (1_000, 100), true);
        assert!(still.is_first_word(100), "{still:?}");
        // Gathered: the next view stands alone.
        let gathered = still.synced((5, 700, 700), &totals(120, 0), (50, 0), (1_000, 100), false);
        assert!(!gathered.is_first_word(100), "{gathered:?}");
    }

    #[test]
    fn this_nodes_counts_are_exact_and_the_others_are_extrapolated_from_their_pace() {
        // First sync of window 5 at t=100: fleet 30 (10 ours); the window before: 90 (30 ours).
        let v = FleetView::default().synced(
            (5, 100, 100),
            &totals(30, 90),
            (10, 30),
            (1_000, 100),
            false,
        );
        assert_eq!(v.others_pace.over(1_000), 60, "{v:?}"); // 60 others over 1,000 ns
                                                            // Next sync at t=200: fleet 50, 15 ours: the others went from 20 to 35 in 100 ns.
        let v = v.synced(
            (5, 200, 200),
            &totals(50, 90),
            (15, 30),
            (1_000, 100),
            false,
        );
        assert_eq!(v.others_pace.over(100), 15, "{v:?}");
        // At t=300 with 40 of ours: 50 + 25 (ours since) + 15 (the others' pace) + 1.
        assert_eq!(judged(&v, 5, local(300, 300), (40, 30)), Some((90, 91)));
        // A burst here is counted once, not once per node.
        assert_eq!(judged(&v, 5, local(200, 200), (115, 30)), Some((90, 151)));
    }

    /// A sync that comes soon after a late one (the sync thread does not catch up, but the
    /// next is due on its schedule) can see a whole push of each other node land between the
    /// two: an interval's admissions. Taken as the pace of the few nanoseconds between, and
    /// extrapolated until the next sync, they made the others look several times as busy as
    /// they were, and refused a key well under the limit fleet-wide.
    #[test]
    fn what_the_others_pushed_between_two_close_syncs_is_spread_over_a_sync_interval() {
        // The others admit 0.2/ns (20 a sync interval of 100 ns), and push once an interval.
        let v = FleetView::default().synced(
            (5, 100, 100),
            &totals(30, 90),
            (10, 30),
            (1_000, 100),
            false,
        );
        // A late sync at 190 saw nothing new; one due at 200 runs at 195 and sees their push.
        let v = v.synced(
            (5, 190, 190),
            &totals(32, 90),
            (12, 30),
            (1_000, 100),
            false,
        );
        let v = v.synced(
            (5, 195, 195),
            &totals(52, 90),
            (12, 30),
            (1_000, 100),
            false,
        );
        assert_eq!(v.others_pace.over(100), 20, "{v:?}");
        // 100 ns after it, 10 of ours since: 52 + 10 + the others' 20 + 1, not their 20 of 5
        // ns times 20 (400).
        assert_eq!(judged(&v, 5, local(295, 295), (22, 30)), Some((90, 83)));
    }

    #[test]
    fn a_key_only_this_node_sends_is_judged_on_its_own_count() {
        let v = FleetView::default().synced(
            (5, 100, 100),
            &totals(30, 40),
            (30, 40),
            (1_000, 100),
            false,
        );
        assert_eq!(v.others_pace, Pace::default());
        assert_eq!(judged(&v, 5, local(900, 900), (34, 40)), Some((40, 35)));
    }

    #[test]
    fn with_other_nodes_refusing_this_node_takes_at_most_its_share_of_the_room() {
        // Two others refuse the key: each request here stands for three (k + 1).
        let refusing = KeyTotals {
            refusers: 2,
            ..totals(30, 90)
        };
        let v =
            FleetView::default().synced((5, 100, 100), &refusing, (10, 30), (1_000, 100), false);
        assert_eq!(v.refusers, 2);
        // 4 of ours since the sync: 30 + 3·(4 + 1) = 45, more than the pace's 30 + 4 + 6 + 1.
        assert_eq!(judged(&v, 5, local(200, 200), (14, 30)), Some((90, 45)));
        // With room R = L − P·(1−f) − T, the request fits when 3·(m + 1) ≤ R.
        let w = v.judged(&local(200, 200), 5, 14, 30, 1).unwrap();
        assert!(w.fits(90 * 8 / 10 + 30 + 15)); // R = 15 = 3·5
        assert!(!w.fits(90 * 8 / 10 + 30 + 14));
    }

    #[test]
    fn a_view_from_the_window_before_becomes_the_previous_total() {
        // At t=400 of window 5: fleet 60 (20 ours): the others admitted 40 in 400 ns.
        let v = FleetView::default().synced(
            (5, 400, 400),
            &totals(60, 90),
            (20, 30),
            (1_000, 100),
            false,
        );
        // Window 6, 100 ns in: the previous total is 60 at the sync, plus this node's 5
        // after it, plus the others' 600 ns left of it at their average 0.1/ns (60); this
        // window: our 4, and the others' 0.06/ns (their pace over window 4) for 100 ns, + 1.
        assert_eq!(judged(&v, 6, local(1_100, 100), (4, 25)), Some((125, 11)));
        assert_eq!(
            judged(&v, 7, local(2_100, 100), (4, 25)),
            None,
            "too old to say anything"
        );
        assert_eq!(
            judged(&FleetView::default(), 5, local(0, 0), (4, 0)),
            None,
            "never synced"
        );
        // This node's first sync of window 6, at 1,050: Redis has the window before as the
        // nodes last pushed it, which lacks the end of those yet to sync in window 6; the
        // view keeps its own estimate of it when that is larger (125, as above).
        let next = v.synced(
            (6, 1_050, 50),
            &totals(5, 100),
            (3, 25),
            (1_000, 100),
            false,
        );
        assert_eq!(next.previous, 125);
        let next = v.synced(
            (6, 1_050, 50),
            &totals(5, 140),
            (3, 25),
            (1_000, 100),
            false,
        );
        assert_eq!(next.previous, 140);
    }

    #[test]
    fn a_pace_rounds_up() {
        let pace = Pace::of(0.25);
        assert_eq!((pace.over(0), pace.over(4), pace.over(5)), (0, 1, 2));
        assert_eq!(Pace::of(1e30).over(1 << 40), u64::MAX);
        assert_eq!(Pace::default().over(u64::MAX), 0);
    }

    #[test]
    fn ceil_rounds_up_and_saturates() {
        assert_eq!(ceil(0.0), 0);
        assert_eq!(ceil(2.0), 2);
        assert_eq!(ceil(2.000_1), 3);
        assert_eq!(ceil(1e30), u64::MAX);
        assert_eq!(ceil(f64::NAN), 0);
    }

    #[test]
    fn refusals_are_counted_per_window() {
        let mut r = Refusals::default();
        r.note(7);
        r.note(7);
        assert_eq!(r.of(7), (2, 0));
        assert_eq!(r.of(8), (0, 2));
        assert_eq!(r.of(9), (0, 0));
        r.note(9);
        assert_eq!(r.of(9), (1, 0));
        // A sync of window 8 after a request counted one in window 9.
        assert_eq!(r.of(8), (0, 0));
        r.note(8);
        assert_eq!(r.of(8), (0, 0), "too late to count in window 8");
        // A sync keeps the request path's count.
        let mut v = FleetView::default();
        v.refused.note(9);
        assert_eq!(
            v.synced((9, 1, 1), &totals(1, 0), (1, 0), (10, 1), false)
                .refused
                .of(9),
            (1, 0)
        );
    }
}
