//! What a node knows of the fleet's counts of one key, and the decision on them.
//!
//! Each key the exact stage tracks carries a [`FleetView`], written by the sync thread (under
//! the key's set lock) and read by the key's requests (under the same lock). A request is
//! admitted when, with `P` the fleet's total of the previous window and `C` that of the
//! current one at the last sync (this node's count then, `c₀`, included), `c` this node's count
//! now and `n` the nodes that send the key,
//!
//! ```text
//! P·(1−f) + C + n·(c − c₀) + 1 ≤ L
//! ```
//!
//! Each node assumes that since the last sync the others admitted what it did: exact for a
//! key that floods every node alike, and, for a key that only this node sends (`n = 1`), its
//! own count: a key under the limit fleet-wide is never refused for the others' sake.

use crate::rate::WindowView;

/// The fleet's counts of one key at the last sync that reached Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
    /// The nodes that sent the key in `window` or the one before (this one included).
    pub(crate) senders: u32,
}

impl FleetView {
    /// The view of the key's window `window` as the fleet sees it now: its previous-window
    /// total and the current window's total extrapolated from `own_now` (this node's count
    /// in `window` now, this request not included). `None` when the view is older than the
    /// window before (the key was not synced lately: only the local counts decide).
    pub(crate) fn estimate(&self, window: u64, own_now: u64) -> Option<(u64, u64)> {
        let synced = self.window?;
        let senders = u64::from(self.senders.max(1));
        if synced == window {
            let since = own_now.saturating_sub(self.own);
            Some((
                self.previous,
                self.total.saturating_add(senders.saturating_mul(since)),
            ))
        } else if synced.checked_add(1) == Some(window) {
            // A new window since the last sync: what was this one's total is now the previous
            // window's, and all of this node's count is new.
            Some((self.total, senders.saturating_mul(own_now)))
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
    ) -> Option<WindowView> {
        let (previous, current) = self.estimate(window, own_now)?;
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

    fn view(window: u64, total: u64, previous: u64, own: u64, senders: u32) -> FleetView {
        FleetView {
            window: Some(window),
            total,
            previous,
            own,
            senders,
        }
    }

    #[test]
    fn others_are_assumed_to_have_admitted_what_this_node_did_since_the_sync() {
        // Three senders; at the sync the fleet had 30 (10 of them ours), now we have 14.
        let v = view(5, 30, 90, 10, 3);
        assert_eq!(v.estimate(5, 14), Some((90, 42)));
        // Only this node sends the key: its own count, nothing more.
        let alone = view(5, 30, 0, 30, 1);
        assert_eq!(alone.estimate(5, 34), Some((0, 34)));
    }

    #[test]
    fn a_view_from_the_window_before_becomes_the_previous_total() {
        let v = view(5, 60, 90, 20, 3);
        assert_eq!(v.estimate(6, 4), Some((60, 12)));
        assert_eq!(v.estimate(7, 4), None, "too old to say anything");
        assert_eq!(FleetView::default().estimate(5, 4), None, "never synced");
    }
}
