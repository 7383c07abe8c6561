//! What a node knows of the fleet's counts of one key, and the decision on them.
//!
//! Each key the exact stage tracks carries a [`FleetView`], written by the sync thread (under
//! the key's set lock) and read by the key's requests (under the same lock). A request is
//! admitted when, with `P` the fleet's total of the previous window and `C` that of the
//! current one at the last sync (this node's count then, `c₀`, included), `c` this node's count
//! now, `r` the rate at which the other nodes admitted the key between the last two syncs and
//! `t` the time since the last sync,
//!
//! ```text
//! P·(1−f) + C + (c − c₀) + r·t + 1 ≤ L
//! ```
//!
//! This node's own requests count exactly; the others' are extrapolated from what they did,
//! not from what this node does, so a burst here is not taken for a burst everywhere, and a
//! key only this node sends (`r = 0`) is judged on its own count: a key under the limit
//! fleet-wide is never refused for the others' sake.

use crate::rate::WindowView;

/// The fleet's counts of one key at the last sync that reached Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FleetView {
    /// The window (its number since the Unix epoch) the counts are of; `None` before the
    /// first sync of the key.
    pub(crate) window: Option<u64>,
    /// The fleet's total in `window`, this node's count included.
    pub(crate) total: u64,
    /// The fleet's total in the window before.
    pub(crate) previous: u64,
    /// This node's count in `window` as pushed.
    pub(crate) own: u64,
    /// When the sync's counts were taken, on the limiter's clock (nanoseconds).
    pub(crate) at: u64,
    /// The other nodes' admissions of the key per nanosecond, between the last two syncs (or
    /// over the window before, at a window's first sync).
    pub(crate) others_rate: f64,
}

impl FleetView {
    /// The view after a sync at `at` that found the fleet's `total` and `previous` totals of
    /// `window` with this node's count `own` in it, and `own_previous` in the window before;
    /// `len` is a window's length in nanoseconds.
    pub(crate) fn synced(
        &self,
        window: u64,
        at: u64,
        (total, previous): (u64, u64),
        (own, own_previous): (u64, u64),
        len: u64,
    ) -> FleetView {
        let others = total.saturating_sub(own) as f64;
        let others_rate = match self.window {
            Some(w) if w == window && at > self.at => {
                let before = self.total.saturating_sub(self.own) as f64;
                ((others - before) / (at - self.at) as f64).max(0.0)
            }
            // A window's first sync: the others' pace over the whole window before.
            _ => previous.saturating_sub(own_previous) as f64 / len.max(1) as f64,
        };
        FleetView {
            window: Some(window),
            total,
            previous,
            own,
            at,
            others_rate,
        }
    }

    /// The fleet's counts of the key in window `window` (and the one before) as they stand
    /// at `local.at`, this node's count there being `own_now` (this request not included).
    /// `None` when the view is older than the window before (the key was not synced lately:
    /// only the local counts decide).
    pub(crate) fn estimate(
        &self,
        window: u64,
        local: &WindowView,
        own_now: u64,
        own_previous: u64,
    ) -> Option<(u64, u64)> {
        let synced = self.window?;
        let others_since = |since: u64| (self.others_rate * since as f64).ceil() as u64;
        if synced == window {
            let since = local.at.saturating_sub(self.at);
            Some((
                self.previous,
                self.total
                    .saturating_add(own_now.saturating_sub(self.own))
                    .saturating_add(others_since(since)),
            ))
        } else if synced.checked_add(1) == Some(window) {
            // A new window since the last sync: that window's total, with what this node and
            // (at their pace) the others admitted in it after the sync, is now the previous
            // window's; this one holds this node's count and the others' since it began.
            let began = local.at.saturating_sub(local.into);
            let previous = self
                .total
                .saturating_add(own_previous.saturating_sub(self.own))
                .saturating_add(others_since(began.saturating_sub(self.at)));
            Some((previous, own_now.saturating_add(others_since(local.into))))
        } else {
            None
        }
    }

    /// The local window view with the fleet's counts in it (this request included in the
    /// current count), to decide and to work out a `retry_after` on.
    pub(crate) fn judged(
        &self,
        local: &WindowView,
        window: u64,
        own_now: u64,
        own_previous: u64,
    ) -> Option<WindowView> {
        let (previous, current) = self.estimate(window, local, own_now, own_previous)?;
        let clamp = |n: u64| isize::try_from(n).unwrap_or(isize::MAX);
        Some(WindowView {
            prev: clamp(previous),
            curr: clamp(current).saturating_add(1),
            ..*local
        })
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn local(at: u64, into: u64) -> WindowView {
        WindowView {
            bucket: 5,
            prev: 0,
            curr: 0,
            into,
            len: 1_000,
            at,
        }
    }

    #[test]
    fn this_nodes_counts_are_exact_and_the_others_are_extrapolated_from_their_pace() {
        // First sync of window 5 at t=100: fleet 30 (10 ours); the window before: 90 (30 ours).
        let v = FleetView::default().synced(5, 100, (30, 90), (10, 30), 1_000);
        assert!((v.others_rate - 0.06).abs() < 1e-9, "{v:?}"); // 60 others over 1,000 ns
                                                               // Next sync at t=200: fleet 50, 15 ours: the others went from 20 to 35 in 100 ns.
        let v = v.synced(5, 200, (50, 90), (15, 30), 1_000);
        assert!((v.others_rate - 0.15).abs() < 1e-9, "{v:?}");
        // At t=300 with 40 of ours: 50 + 25 (ours since) + 15 (the others' pace).
        assert_eq!(v.estimate(5, &local(300, 300), 40, 30), Some((90, 90)));
        // A burst here is counted once, not once per node.
        assert_eq!(v.estimate(5, &local(200, 200), 115, 30), Some((90, 150)));
    }

    #[test]
    fn a_key_only_this_node_sends_is_judged_on_its_own_count() {
        let v = FleetView::default().synced(5, 100, (30, 40), (30, 40), 1_000);
        assert_eq!(v.others_rate, 0.0);
        assert_eq!(v.estimate(5, &local(900, 900), 34, 40), Some((40, 34)));
    }

    #[test]
    fn a_view_from_the_window_before_becomes_the_previous_total() {
        let v = FleetView::default().synced(5, 100, (60, 90), (20, 30), 1_000);
        // Window 6, 100 ns in: the previous total is 60 at the sync (t=100), plus this node's
        // 5 after it and the others' 0.06/ns for the 900 ns left of it (54); and the others'
        // pace since window 6 began.
        assert_eq!(v.estimate(6, &local(1_100, 100), 4, 25), Some((119, 10)));
        assert_eq!(
            v.estimate(7, &local(2_100, 100), 4, 25),
            None,
            "too old to say anything"
        );
        let never = FleetView::default();
        assert_eq!(never.estimate(5, &local(0, 0), 4, 0), None, "never synced");
    }
}
