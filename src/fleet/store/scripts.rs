//! The two Lua scripts a sync runs (`src/fleet/window.lua`, `src/fleet/nodes.lua`): how each
//! is loaded, how a call of each is written into a pipeline, and how the window script's
//! reply is read. The scripts are called by their SHA1 (`EVALSHA`), loaded with `SCRIPT LOAD`
//! on every new connection. Each command is built in one `redis::Cmd`, cleared and reused,
//! and appended to its master's buffer: a sync allocates nothing per command.

use redis::{Cmd, Value};

use super::exchange::{KeyTotals, Push, MAX_COUNT};
use crate::fleet::keys;

/// Stores a node's count of a key in a window and reads the fleet's counts of the key.
const WINDOW: &str = include_str!("../window.lua");
/// The suffix of a key's hash of refusals for a window, after the name of its hash of counts.
const REFUSED: &[u8] = b":refused";
/// Marks a node alive and counts the nodes alive.
const NODES: &str = include_str!("../nodes.lua");

/// The scripts' SHA1s, as `EVALSHA` takes them, and the command being written.
pub(super) struct Scripts {
    window_sha: String,
    nodes_sha: String,
    cmd: Cmd,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            window_sha: redis::Script::new(WINDOW).get_hash().to_owned(),
            nodes_sha: redis::Script::new(NODES).get_hash().to_owned(),
            cmd: Cmd::new(),
        }
    }

    /// Appends a `SCRIPT LOAD` of each script; returns how many replies they will have.
    pub(super) fn load(&mut self, out: &mut Vec<u8>) -> usize {
        for script in [WINDOW, NODES] {
            self.cmd.clear();
            self.cmd.arg("SCRIPT").arg("LOAD").arg(script);
            self.cmd.write_packed_command(out);
        }
        2
    }

    /// Appends `ASKING`, which lets the next command run on the target of a slot migrating.
    pub(super) fn asking(&mut self, out: &mut Vec<u8>) {
        self.cmd.clear();
        self.cmd.arg("ASKING");
        self.cmd.write_packed_command(out);
    }

    /// Appends the window script's call for `node`'s `push`. `name` holds the name of the
    /// key's hash of counts for `push.window`; it is left holding another of the key's names.
    pub(super) fn window(
        &mut self,
        out: &mut Vec<u8>,
        name: &mut Vec<u8>,
        node: &str,
        push: &Push<'_>,
        expiry_ms: u64,
    ) {
        let cmd = &mut self.cmd;
        cmd.clear();
        cmd.arg("EVALSHA").arg(&self.window_sha).arg(4);
        // The four names: this window's and the window before's, each of counts and of
        // refusals; they differ from `name` only after its last ':'.
        let stem = name.iter().rposition(|&b| b == b':').map_or(0, |p| p + 1);
        for (previous, suffix) in [
            (false, &b""[..]),
            (true, b""),
            (false, REFUSED),
            (true, REFUSED),
        ] {
            name.truncate(stem);
            match (previous, push.window.checked_sub(1)) {
                (false, _) => keys::push_number(name, push.window),
                (true, Some(window)) => keys::push_number(name, window),
                // Window 0 has no predecessor: a name no hash has.
                (true, None) => name.extend_from_slice(b"-1"),
            }
            name.extend_from_slice(suffix);
            cmd.arg(&name[..]);
        }
        cmd.arg(node)
            .arg(push.count.min(MAX_COUNT))
            .arg(expiry_ms)
            .arg(push.previous.min(MAX_COUNT))
            .arg(push.refused.min(MAX_COUNT))
            .arg(push.refused_previous.min(MAX_COUNT));
        cmd.write_packed_command(out);
    }

    /// Appends the nodes script's call: `node` is alive at `now_unix_ms`, and nodes stay
    /// alive for `node_ttl_ms` after their last sync.
    pub(super) fn nodes(
        &mut self,
        out: &mut Vec<u8>,
        nodes_key: &str,
        node: &str,
        now_unix_ms: u64,
        node_ttl_ms: u64,
    ) {
        let cmd = &mut self.cmd;
        cmd.clear();
        cmd.arg("EVALSHA")
            .arg(&self.nodes_sha)
            .arg(1)
            .arg(nodes_key)
            .arg(node)
            .arg(now_unix_ms)
            .arg(now_unix_ms.saturating_sub(node_ttl_ms))
            // The whole set outlives its last node by a time to live.
            .arg(node_ttl_ms.saturating_mul(2));
        cmd.write_packed_command(out);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn push(window: u64, count: u64) -> Push<'static> {
        Push {
            key: b"k",
            window,
            count,
            previous: 2,
            refused: 3,
            refused_previous: 4,
        }
    }

    /// The call as a fresh command writes it, for comparison with the reused one.
    fn expected(sha: &str, names: [&str; 4], count: u64) -> Vec<u8> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(4).arg(&names[..]);
        cmd.arg("n").arg(count).arg(5000).arg(2).arg(3).arg(4);
        cmd.get_packed_command()
    }

    #[test]
    fn a_window_call_names_both_windows_hashes_and_caps_its_counts() {
        let mut scripts = Scripts::new();
        let mut out = Vec::new();
        for (window, count) in [(7, 1), (0, u64::MAX)] {
            let mut name = Vec::new();
            keys::window_key(&mut name, "p", b"k", window);
            scripts.window(&mut out, &mut name, "n", &push(window, count), 5000);
        }
        let mut want = expected(
            &scripts.window_sha,
            ["p:{k}:7", "p:{k}:6", "p:{k}:7:refused", "p:{k}:6:refused"],
            1,
        );
        // Window 0 has no predecessor: a name no hash has.
        want.extend(expected(
            &scripts.window_sha,
            ["p:{k}:0", "p:{k}:-1", "p:{k}:0:refused", "p:{k}:-1:refused"],
            MAX_COUNT,
        ));
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
    }

    #[test]
    fn a_nodes_call_follows_a_window_call_without_its_arguments() {
        let mut scripts = Scripts::new();
        let mut out = Vec::new();
        let mut name = Vec::new();
        keys::window_key(&mut name, "p", b"k", 7);
        scripts.window(&mut out, &mut name, "n", &push(7, 1), 5000);
        let start = out.len();
        scripts.nodes(&mut out, "p:nodes", "n", 10_000, 3_000);
        let mut want = redis::cmd("EVALSHA");
        want.arg(&scripts.nodes_sha).arg(1).arg("p:nodes").arg("n");
        want.arg(10_000).arg(7_000).arg(6_000);
        assert_eq!(&out[start..], &want.get_packed_command()[..]);
    }
}
