//! The two Lua scripts a sync runs (`src/fleet/window.lua`, `src/fleet/nodes.lua`): how each
//! is loaded, how a call of each is written into a pipeline, and how the window script's
//! reply is read. The scripts are called by their SHA1 (`EVALSHA`), loaded with `SCRIPT LOAD`
//! on every new connection.

use redis::Value;

use super::{KeyTotals, Push, MAX_COUNT};
use crate::fleet::resp;

/// Stores a node's count of a key in a window and reads the fleet's counts of the key.
const WINDOW: &str = include_str!("../window.lua");
/// The suffix of a key's hash of refusals for a window, after the name of its hash of counts.
const REFUSED: &[u8] = b":refused";
/// Marks a node alive and counts the nodes alive.
const NODES: &str = include_str!("../nodes.lua");

/// The scripts' SHA1s, as `EVALSHA` takes them.
pub(super) struct Scripts {
    window_sha: String,
    nodes_sha: String,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            window_sha: redis::Script::new(WINDOW).get_hash().to_owned(),
            nodes_sha: redis::Script::new(NODES).get_hash().to_owned(),
        }
    }

    /// Appends a `SCRIPT LOAD` of each script; returns how many replies they will have.
    pub(super) fn load(out: &mut Vec<u8>) -> usize {
        for script in [WINDOW, NODES] {
            resp::array(out, 3);
            resp::bulk(out, b"SCRIPT");
            resp::bulk(out, b"LOAD");
            resp::bulk(out, script.as_bytes());
        }
        2
    }

    /// Appends the window script's call for `node`'s `push`. `name` holds the name of the
    /// key's hash of counts for `push.window`; it is left holding another of the key's names.
    pub(super) fn window(
        &self,
        out: &mut Vec<u8>,
        name: &mut Vec<u8>,
        node: &str,
        push: &Push<'_>,
        expiry_ms: u64,
    ) {
        resp::array(out, 13);
        resp::bulk(out, b"EVALSHA");
        resp::bulk(out, self.window_sha.as_bytes());
        resp::bulk(out, b"4");
        // The other three names: the same name with the window before, and each with the
        // suffix of refusals.
        let stem = name.iter().rposition(|&b| b == b':').map_or(0, |p| p + 1);
        let previous = push.window.checked_sub(1).map(resp::Digits::new);
        // Window 0 has no predecessor: a name no hash has.
        let previous = previous.as_ref().map_or(&b"-1"[..], |d| d.as_bytes());
        let current = resp::Digits::new(push.window);
        for (window, suffix) in [
            (current.as_bytes(), &b""[..]),
            (previous, b""),
            (current.as_bytes(), REFUSED),
            (previous, REFUSED),
        ] {
            name.truncate(stem);
            name.extend_from_slice(window);
            name.extend_from_slice(suffix);
            resp::bulk(out, name);
        }
        resp::bulk(out, node.as_bytes());
        resp::number(out, push.count.min(MAX_COUNT));
        resp::number(out, expiry_ms);
        resp::number(out, push.previous.min(MAX_COUNT));
        resp::number(out, push.refused.min(MAX_COUNT));
        resp::number(out, push.refused_previous.min(MAX_COUNT));
    }

    /// Appends the nodes script's call: `node` is alive at `now_unix_ms`, and nodes stay
    /// alive for `node_ttl_ms` after their last sync.
    pub(super) fn nodes(
        &self,
        out: &mut Vec<u8>,
        nodes_key: &str,
        node: &str,
        now_unix_ms: u64,
        node_ttl_ms: u64,
    ) {
        resp::array(out, 8);
        resp::bulk(out, b"EVALSHA");
        resp::bulk(out, self.nodes_sha.as_bytes());
        resp::bulk(out, b"1");
        resp::bulk(out, nodes_key.as_bytes());
        resp::bulk(out, node.as_bytes());
        resp::number(out, now_unix_ms);
        resp::number(out, now_unix_ms.saturating_sub(node_ttl_ms));
        // The whole set outlives its last node by a time to live.
        resp::number(out, node_ttl_ms.saturating_mul(2));
    }
}

/// The counts in the window script's reply, `{current, previous, refusers}`; `None` for a
/// reply of another shape.
pub(super) fn window_totals(reply: &[Value]) -> Option<KeyTotals> {
    match reply {
        [Value::Int(current), Value::Int(previous), Value::Int(refusers)] => Some(KeyTotals {
            current: non_negative(*current),
            previous: non_negative(*previous),
            refusers: u32::try_from((*refusers).max(0)).unwrap_or(u32::MAX),
        }),
        _ => None,
    }
}

fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
