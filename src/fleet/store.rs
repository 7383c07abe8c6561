//! The fleet's Redis store: pushes this node's counts and pulls the fleet's totals, in one
//! pipelined round trip per sync, on Redis or Redis Cluster.
//!
//! It speaks to the masters itself, over the `redis` crate's blocking [`Connection`]s, rather
//! than through the crate's `ClusterConnection`: that one's pipeline fails as a whole on the
//! first error reply and drops every other reply, so after a `NOSCRIPT` (a master restarted
//! or failed over) or a `MOVED` (a slot resharded) on one master it cannot tell which scripts
//! ran elsewhere, and sending them again would count those nodes' pushes twice. Here each
//! reply is read on its own: a command refused with `NOSCRIPT`, `MOVED` or `ASK` did not run,
//! so exactly those are sent again (after loading the scripts, learning the slots anew, or with
//! `ASKING`), and the others are not.
//!
//! A sync sends each master its part of the pipeline before reading any reply, so it costs one
//! round trip whatever the number of masters, plus one only in the rare rounds that follow a
//! redirection or a lost script. Everything it does, connecting included, runs against one
//! deadline, the configured timeout: a dead or stalled Redis makes a sync fail after that long,
//! never hang.

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, Value};

use super::keys::{self, Digits, SLOTS};
use super::FleetConfig;
use crate::ConfigError;

/// The script that adds a node's count to a key's counter and reads the totals.
const WINDOW_SCRIPT: &str = include_str!("window.lua");
/// The script that marks a node alive and counts the nodes alive.
const NODES_SCRIPT: &str = include_str!("nodes.lua");

/// Rounds per sync at most: the first, and re-sends after a redirection or a lost script (a
/// resharding moves a slot once; a second redirection of the same command within one sync is
/// a cluster in flux, and the next sync will try again).
const ROUNDS: usize = 3;

/// No master known for a slot.
const NO_MASTER: u16 = u16::MAX;

/// One key's push: what this node counted for `key` in `window` since its last push (0 for a
/// pure read of the totals).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Push<'a> {
    /// The user key, any bytes.
    pub(crate) key: &'a [u8],
    /// The window number: Unix time in ms divided by the window's length, the same on every node.
    pub(crate) window: u64,
    /// This node's count to add (saturated at `i64::MAX`, Redis's largest integer).
    pub(crate) delta: u64,
}

/// What a sync learnt: the fleet's totals, one per push and in push order, and the number of
/// nodes seen recently (this one included).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Synced<'a> {
    /// `(this window's total, the previous window's total)` for each push.
    pub(crate) totals: &'a [(u64, u64)],
    /// Nodes whose last sync is within the nodes' time to live.
    pub(crate) nodes: usize,
}

/// Why a sync failed. When a sync fails its pushes may have been applied in part or in whole
/// (a timeout cannot tell whether Redis ran what it was sent); the caller decides whether to
/// push those counts again.
#[derive(Debug)]
pub(crate) struct StoreError {
    what: String,
    source: Option<redis::RedisError>,
    /// The sync's deadline passed before this step could start.
    out_of_time: bool,
}

impl StoreError {
    fn new(what: impl Into<String>) -> StoreError {
        StoreError {
            what: what.into(),
            source: None,
            out_of_time: false,
        }
    }

    fn client(what: impl Into<String>, source: redis::RedisError) -> StoreError {
        StoreError {
            what: what.into(),
            source: Some(source),
            out_of_time: false,
        }
    }

    fn timeout(addr: &str) -> StoreError {
        StoreError {
            out_of_time: true,
            ..StoreError::new(format!("{addr}: out of time"))
        }
    }

    /// Whether the sync ran out of time (its deadline passed, or a read or a connection
    /// attempt timed out), rather than meeting an error.
    pub(crate) fn is_timeout(&self) -> bool {
        self.out_of_time || self.source.as_ref().is_some_and(|e| e.is_timeout())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fleet sync: ")?;
        f.write_str(&self.what)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A command of a sync, by what it is for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Job {
    /// The window script for push `i`.
    Window(usize),
    /// The nodes script.
    Nodes,
}

/// A command still to send, and the master an `ASK` redirection named for it.
#[derive(Debug, Clone, Copy)]
struct Pending {
    job: Job,
    ask: Option<usize>,
}

/// What a reply answers, in the order the commands went out to one master.
#[derive(Debug, Clone, Copy)]
enum Sent {
    /// `SCRIPT LOAD`, before the first script on a connection (or after a `NOSCRIPT`).
    Load,
    /// `ASKING`, before a command redirected by `ASK`.
    Asking,
    /// A script.
    Job(Pending),
}

/// A master (or the one standalone server) and this sync's commands for it.
struct Master {
    /// `host:port`, as Redis names it in `CLUSTER SLOTS` and redirections (for a Unix socket,
    /// its path).
    addr: String,
    info: ConnectionInfo,
    con: Option<Connection>,
    /// Whether this connection has loaded both scripts; a new connection loads them again in
    /// its first pipeline (the server may have restarted and lost them).
    scripts_loaded: bool,
    /// The commands of this round, RESP-encoded.
    out: Vec<u8>,
    /// What each reply of this round answers.
    sent: Vec<Sent>,
}

impl Master {
    fn new(addr: String, info: ConnectionInfo) -> Master {
        Master {
            addr,
            info,
            con: None,
            scripts_loaded: false,
            out: Vec::new(),
            sent: Vec::new(),
        }
    }

    fn disconnect(&mut self) {
        self.con = None;
        self.scripts_loaded = false;
    }
}

/// The connection to the fleet's Redis (standalone or Cluster), owned by the one thread that
/// syncs. It connects lazily, on the first sync, and again on the next sync after any error.
pub(crate) struct Store {
    prefix: String,
    nodes_key: String,
    nodes_slot: u16,
    timeout: Duration,
    node_ttl_ms: u64,
    margin_ms: u64,
    window_sha: String,
    nodes_sha: String,
    cluster: bool,
    /// Where to start: the configured URLs.
    seeds: Vec<ConnectionInfo>,
    /// Standalone: the one server. Cluster: the masters, as last learnt.
    masters: Vec<Master>,
    /// Cluster: the master of each slot (an index into `masters`); empty until learnt, and
    /// emptied by a `MOVED` so that the next round learns the slots anew.
    slots: Vec<u16>,
    // Buffers kept from one sync to the next.
    pending: Vec<Pending>,
    retry: Vec<Pending>,
    name: Vec<u8>,
    totals: Vec<(u64, u64)>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.prefix)
            .field("cluster", &self.cluster)
            .field(
                "masters",
                &self.masters.iter().map(|m| &m.addr).collect::<Vec<_>>(),
            )
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store for `config`, validated; it does no I/O until the first sync.
    pub(crate) fn new(config: &FleetConfig) -> Result<Store, ConfigError> {
        config.validate()?;
        let seeds = config.connection_infos()?;
        let masters = if config.is_cluster() {
            Vec::new()
        } else {
            seeds
                .iter()
                .map(|info| Master::new(addr_of(&info.addr), info.clone()))
                .collect()
        };
        let prefix = config.get_prefix().to_owned();
        let nodes_key = keys::nodes_key(&prefix);
        let sync_ms = duration_ms(config.get_sync_interval());
        Ok(Store {
            nodes_slot: keys::slot(nodes_key.as_bytes()),
            nodes_key,
            prefix,
            timeout: config.get_timeout(),
            node_ttl_ms: duration_ms(config.node_ttl()),
            // A push may come late by a sync interval, and a reader's clock may lag; a second
            // (or a sync interval, when longer) beyond the two windows covers both.
            margin_ms: sync_ms.max(1000),
            window_sha: redis::Script::new(WINDOW_SCRIPT).get_hash().to_owned(),
            nodes_sha: redis::Script::new(NODES_SCRIPT).get_hash().to_owned(),
            cluster: config.is_cluster(),
            seeds,
            masters,
            slots: Vec::new(),
            pending: Vec::new(),
            retry: Vec::new(),
            name: Vec::new(),
            totals: Vec::new(),
        })
    }

    /// Whether the store holds an open connection (as of its last sync).
    pub(crate) fn is_connected(&self) -> bool {
        self.masters.iter().any(|m| m.con.is_some())
    }

    /// The masters the store knows (1 for a standalone server; 0 for a cluster not yet reached).
    pub(crate) fn masters(&self) -> usize {
        self.masters.len()
    }

    /// How long a window's counter lives after each push: two windows and a margin.
    pub(crate) fn expiry_ms(&self, window_ms: u64) -> u64 {
        window_ms.saturating_mul(2).saturating_add(self.margin_ms)
    }

    /// Pushes this node's counts and pulls the fleet's totals: for each push, its key's
    /// counters of `push.window` and the window before; and marks `node` alive at `now_unix_ms`
    /// (on this node's clock) and counts the nodes alive. `window_ms` is the windows' length,
    /// for the counters' expiry. Returns within about the configured timeout, whatever Redis
    /// does.
    pub(crate) fn sync(
        &mut self,
        node: &str,
        now_unix_ms: u64,
        window_ms: u64,
        pushes: &[Push<'_>],
    ) -> Result<Synced<'_>, StoreError> {
        let deadline = Instant::now() + self.timeout;
        self.totals.clear();
        self.totals.resize(pushes.len(), (0, 0));
        self.pending.clear();
        self.pending.extend((0..pushes.len()).map(|i| Pending {
            job: Job::Window(i),
            ask: None,
        }));
        self.pending.push(Pending {
            job: Job::Nodes,
            ask: None,
        });
        let args = Args {
            node,
            now_unix_ms,
            expiry_ms: self.expiry_ms(window_ms),
            pushes,
        };
        let mut nodes = None;
        for _ in 0..ROUNDS {
            self.round(&args, deadline, &mut nodes)?;
            if self.retry.is_empty() {
                return match nodes {
                    Some(nodes) => Ok(Synced {
                        totals: &self.totals,
                        nodes,
                    }),
                    // Every command was answered, the nodes script included.
                    None => Err(StoreError::new("no reply to the nodes script")),
                };
            }
            std::mem::swap(&mut self.pending, &mut self.retry);
            self.retry.clear();
        }
        Err(StoreError::new(format!(
            "{} commands still redirected after {ROUNDS} rounds",
            self.pending.len()
        )))
    }

    /// One round: sends every pending command to its master, then reads every reply, filling
    /// in totals and collecting in `self.retry` the commands to send again.
    fn round(
        &mut self,
        args: &Args<'_, '_>,
        deadline: Instant,
        nodes: &mut Option<usize>,
    ) -> Result<(), StoreError> {
        if self.cluster && self.slots.is_empty() {
            self.learn_slots(deadline)?;
            // Learning the slots renumbers the masters: an ASK target is found again by the
            // command going to its slot's master first (which answers ASK again if still
            // migrating).
            for pending in &mut self.pending {
                pending.ask = None;
            }
        }
        for master in &mut self.masters {
            master.out.clear();
            master.sent.clear();
        }
        for i in 0..self.pending.len() {
            let pending = self.pending[i];
            self.encode(pending, args)?;
        }

        // Send every master its part before reading any reply: one round trip for all.
        let mut failure = None;
        for m in 0..self.masters.len() {
            if self.masters[m].sent.is_empty() {
                continue;
            }
            if let Err(e) = self.send(m, deadline) {
                self.masters[m].disconnect();
                failure.get_or_insert(e);
            }
        }

        // Read every reply, even after a failure elsewhere, so that the connections stay in
        // step with their servers.
        self.retry.clear();
        for m in 0..self.masters.len() {
            if self.masters[m].sent.is_empty() || self.masters[m].con.is_none() {
                continue;
            }
            if let Err(e) = self.receive(m, deadline, nodes) {
                failure.get_or_insert(e);
            }
        }
        match failure {
            Some(e) => {
                // A master that cannot be reached may have been replaced (a failover): learn
                // the slots anew on the next sync.
                self.slots.clear();
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Appends one command (and what must come before it) to its master's pipeline.
    fn encode(&mut self, pending: Pending, args: &Args<'_, '_>) -> Result<(), StoreError> {
        self.name.clear();
        let slot = match pending.job {
            Job::Window(i) => {
                let push = &args.pushes[i];
                keys::window_key(&mut self.name, &self.prefix, push.key, push.window);
                keys::slot(&self.name)
            }
            Job::Nodes => self.nodes_slot,
        };
        let m = match pending.ask {
            Some(m) => m,
            None => self.master_of(slot)?,
        };
        let Some(master) = self.masters.get_mut(m) else {
            return Err(StoreError::new(format!("no master {m} for slot {slot}")));
        };
        let out = &mut master.out;
        if master.sent.is_empty() && !master.scripts_loaded {
            for script in [WINDOW_SCRIPT, NODES_SCRIPT] {
                resp_array(out, 3);
                resp_bulk(out, b"SCRIPT");
                resp_bulk(out, b"LOAD");
                resp_bulk(out, script.as_bytes());
                master.sent.push(Sent::Load);
            }
        }
        if pending.ask.is_some() {
            resp_array(out, 1);
            resp_bulk(out, b"ASKING");
            master.sent.push(Sent::Asking);
        }
        match pending.job {
            Job::Window(i) => {
                let push = &args.pushes[i];
                resp_array(out, 7);
                resp_bulk(out, b"EVALSHA");
                resp_bulk(out, self.window_sha.as_bytes());
                resp_bulk(out, b"2");
                resp_bulk(out, &self.name);
                // The previous window's counter: the same name with the window before.
                let tail = self
                    .name
                    .iter()
                    .rposition(|&b| b == b':')
                    .map_or(0, |p| p + 1);
                self.name.truncate(tail);
                match push.window.checked_sub(1) {
                    Some(previous) => self
                        .name
                        .extend_from_slice(Digits::new(previous).as_bytes()),
                    // Window 0 has no predecessor: a name no counter has.
                    None => self.name.extend_from_slice(b"-1"),
                }
                resp_bulk(out, &self.name);
                resp_bulk(out, Digits::new(push.delta.min(i64::MAX as u64)).as_bytes());
                resp_bulk(out, Digits::new(args.expiry_ms).as_bytes());
            }
            Job::Nodes => {
                resp_array(out, 8);
                resp_bulk(out, b"EVALSHA");
                resp_bulk(out, self.nodes_sha.as_bytes());
                resp_bulk(out, b"1");
                resp_bulk(out, self.nodes_key.as_bytes());
                resp_bulk(out, args.node.as_bytes());
                resp_bulk(out, Digits::new(args.now_unix_ms).as_bytes());
                let oldest = args.now_unix_ms.saturating_sub(self.node_ttl_ms);
                resp_bulk(out, Digits::new(oldest).as_bytes());
                resp_bulk(
                    out,
                    Digits::new(self.node_ttl_ms.saturating_mul(2)).as_bytes(),
                );
            }
        }
        master.sent.push(Sent::Job(pending));
        Ok(())
    }

    /// The master serving `slot` (the one server, standalone).
    fn master_of(&self, slot: u16) -> Result<usize, StoreError> {
        if !self.cluster {
            return Ok(0);
        }
        match self.slots.get(usize::from(slot)) {
            Some(&m) if m != NO_MASTER => Ok(usize::from(m)),
            _ => Err(StoreError::new(format!("no master serves slot {slot}"))),
        }
    }

    /// Writes master `m`'s pipeline, connecting first if needed.
    fn send(&mut self, m: usize, deadline: Instant) -> Result<(), StoreError> {
        let timeout = self.timeout;
        let master = &mut self.masters[m];
        if master.con.is_none() {
            master.con = Some(connect(&master.addr, &master.info, timeout, deadline)?);
        }
        let Some(con) = master.con.as_mut() else {
            return Err(StoreError::new(format!("{}: not connected", master.addr)));
        };
        con.send_packed_command(&master.out)
            .map_err(|e| StoreError::client(format!("{}: sending", master.addr), e))
    }

    /// Reads master `m`'s replies. On an error the connection is dropped (its remaining
    /// replies would be out of step).
    fn receive(
        &mut self,
        m: usize,
        deadline: Instant,
        nodes: &mut Option<usize>,
    ) -> Result<(), StoreError> {
        let (Some(mut con), sent) = (
            self.masters[m].con.take(),
            std::mem::take(&mut self.masters[m].sent),
        ) else {
            return Ok(());
        };
        let result = self.read_replies(m, &mut con, &sent, deadline, nodes);
        let master = &mut self.masters[m];
        master.sent = sent;
        match result {
            // Every reply read: the connection is in step, whatever the replies said.
            Ok(refused) => {
                master.con = Some(con);
                refused.map_or(Ok(()), Err)
            }
            Err(e) => {
                master.disconnect();
                Err(e)
            }
        }
    }

    /// Reads the replies to `sent` from master `m`. Fails only when the connection did (its
    /// remaining replies would be out of step); a reply the store cannot use comes back as
    /// `Ok(Some(error))` once all of them have been read.
    fn read_replies(
        &mut self,
        m: usize,
        con: &mut Connection,
        sent: &[Sent],
        deadline: Instant,
        nodes: &mut Option<usize>,
    ) -> Result<Option<StoreError>, StoreError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(StoreError::timeout(&self.masters[m].addr));
        }
        con.set_read_timeout(Some(remaining)).map_err(|e| {
            StoreError::client(
                format!("{}: setting the read timeout", self.masters[m].addr),
                e,
            )
        })?;
        let mut loads_ok = true;
        // A reply the store cannot use fails the sync, but only after the other replies
        // have been read, so that the connection stays in step and is kept.
        let mut bad_reply = None;
        for &what in sent {
            let reply = con
                .recv_response()
                .map_err(|e| StoreError::client(format!("{}: reading", self.masters[m].addr), e))?;
            let refused = match (what, reply) {
                (_, Value::ServerError(err)) => Some(RedisError::from(err)),
                (Sent::Load, _) | (Sent::Asking, _) => None,
                (
                    Sent::Job(Pending {
                        job: Job::Window(i),
                        ..
                    }),
                    Value::Array(items),
                ) => {
                    match items.as_slice() {
                        [Value::Int(current), Value::Int(previous)] => {
                            self.totals[i] = (non_negative(*current), non_negative(*previous));
                        }
                        _ => {
                            bad_reply
                                .get_or_insert_with(|| format!("window script answered {items:?}"));
                        }
                    }
                    None
                }
                (
                    Sent::Job(Pending {
                        job: Job::Nodes, ..
                    }),
                    Value::Int(n),
                ) => {
                    *nodes = Some(usize::try_from(n).unwrap_or(0));
                    None
                }
                (Sent::Job(_), other) => {
                    bad_reply.get_or_insert_with(|| format!("a script answered {other:?}"));
                    None
                }
            };
            let Some(err) = refused else { continue };
            match (what, err.kind()) {
                (Sent::Load, _) | (Sent::Asking, _) => {
                    loads_ok = false;
                    bad_reply.get_or_insert_with(|| describe(&err));
                }
                (Sent::Job(pending), ErrorKind::NoScriptError) => {
                    // The server lost the scripts (restart, failover, SCRIPT FLUSH): this
                    // script did not run. Load them and send it again.
                    loads_ok = false;
                    self.retry.push(pending);
                }
                (Sent::Job(_), ErrorKind::Moved) if !self.cluster => {
                    bad_reply.get_or_insert_with(|| {
                        format!(
                            "{} (a Cluster node: configure it with FleetConfig::cluster)",
                            describe(&err)
                        )
                    });
                }
                (Sent::Job(pending), ErrorKind::Moved) => {
                    // The slot has another master now: the command did not run. Learn the
                    // slots again and send it there.
                    self.slots.clear();
                    self.retry.push(Pending {
                        job: pending.job,
                        ask: None,
                    });
                }
                (Sent::Job(pending), ErrorKind::Ask) => {
                    // The slot is migrating and the keys are at the target already: send
                    // the command there, after ASKING.
                    match err.redirect_node() {
                        Some((target, _slot)) => {
                            let target = target.to_owned();
                            let ask = self.master_at(&target);
                            self.retry.push(Pending {
                                job: pending.job,
                                ask: Some(ask),
                            });
                        }
                        None => {
                            bad_reply.get_or_insert_with(|| describe(&err));
                        }
                    }
                }
                (Sent::Job(_), _) => {
                    // TRYAGAIN, CLUSTERDOWN, LOADING, a script error: the next sync tries again.
                    bad_reply.get_or_insert_with(|| describe(&err));
                }
            }
        }
        let master = &mut self.masters[m];
        master.scripts_loaded = loads_ok;
        Ok(bad_reply.map(|what| StoreError::new(format!("{}: {what}", master.addr))))
    }

    /// The master at `addr` (from a redirection), added to the known ones if new.
    fn master_at(&mut self, addr: &str) -> usize {
        if let Some(m) = self.masters.iter().position(|m| m.addr == addr) {
            return m;
        }
        let info = self.info_for(addr);
        self.masters.push(Master::new(addr.to_owned(), info));
        self.masters.len() - 1
    }

    /// How to connect to the master at `host:port`: as to the first seed (its user,
    /// password, protocol), at that address.
    fn info_for(&self, addr: &str) -> ConnectionInfo {
        let mut info = self.seeds[0].clone();
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse().ok()?)))
            .unwrap_or((addr, 6379));
        info.addr = ConnectionAddr::Tcp(host.to_owned(), port);
        info
    }

    /// Learns which master serves each slot, with `CLUSTER SLOTS`, asking the masters already
    /// connected first and then the configured URLs. Connections to masters that stay masters
    /// are kept.
    fn learn_slots(&mut self, deadline: Instant) -> Result<(), StoreError> {
        let mut last_error = None;
        let mut ranges = None;
        // The connection that answered, when it came from a seed: kept for its master.
        let mut seed_con = None;
        for m in 0..self.masters.len() {
            let master = &mut self.masters[m];
            let Some(con) = master.con.as_mut() else {
                continue;
            };
            match cluster_slots(con, &master.addr, deadline) {
                Ok(found) => {
                    ranges = Some(found);
                    break;
                }
                Err(e) => {
                    self.masters[m].disconnect();
                    last_error = Some(e);
                }
            }
        }
        if ranges.is_none() {
            // Then the configured URLs, and the masters known from before (the URLs may all
            // be gone while masters learnt since are not).
            let known = self
                .masters
                .iter()
                .filter(|m| m.con.is_none())
                .map(|m| m.info.clone());
            let candidates: Vec<ConnectionInfo> = self.seeds.iter().cloned().chain(known).collect();
            for seed in &candidates {
                let addr = addr_of(&seed.addr);
                let found = connect(&addr, seed, self.timeout, deadline).and_then(|mut con| {
                    cluster_slots(&mut con, &addr, deadline).map(|found| (found, con))
                });
                match found {
                    Ok((found, con)) => {
                        ranges = Some(found);
                        seed_con = Some((addr, con));
                        break;
                    }
                    Err(e) => last_error = Some(e),
                }
            }
        }
        let Some(ranges) = ranges else {
            return Err(last_error.unwrap_or_else(|| StoreError::new("no cluster URL to ask")));
        };

        let mut old = std::mem::take(&mut self.masters);
        self.slots.clear();
        self.slots.resize(SLOTS, NO_MASTER);
        for range in &ranges {
            let m = match self.masters.iter().position(|m| m.addr == range.addr) {
                Some(m) => m,
                None => {
                    let master = match old.iter().position(|m| m.addr == range.addr) {
                        Some(i) => old.swap_remove(i),
                        None => Master::new(range.addr.clone(), self.info_for(&range.addr)),
                    };
                    self.masters.push(master);
                    self.masters.len() - 1
                }
            };
            let m = u16::try_from(m).unwrap_or(NO_MASTER);
            for slot in range.start..=range.end.min(SLOTS as u16 - 1) {
                self.slots[usize::from(slot)] = m;
            }
        }
        if let Some((addr, con)) = seed_con {
            if let Some(master) = self.masters.iter_mut().find(|m| m.addr == addr) {
                if master.con.is_none() {
                    master.con = Some(con);
                    master.scripts_loaded = false;
                }
            }
        }
        Ok(())
    }
}

/// The arguments of one sync, for the encoder.
struct Args<'n, 'p> {
    node: &'n str,
    now_unix_ms: u64,
    expiry_ms: u64,
    pushes: &'p [Push<'p>],
}

/// A range of slots and the address of its master, from `CLUSTER SLOTS`.
struct SlotRange {
    start: u16,
    end: u16,
    addr: String,
}

/// Asks one node for the slots' masters.
fn cluster_slots(
    con: &mut Connection,
    addr: &str,
    deadline: Instant,
) -> Result<Vec<SlotRange>, StoreError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(StoreError::timeout(addr));
    }
    con.set_read_timeout(Some(remaining))
        .map_err(|e| StoreError::client(format!("{addr}: setting the read timeout"), e))?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(con)
        .map_err(|e| StoreError::client(format!("{addr}: CLUSTER SLOTS"), e))?;
    let asked_host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let bad = || StoreError::new(format!("{addr}: CLUSTER SLOTS answered {reply:?}"));
    let Value::Array(entries) = &reply else {
        return Err(bad());
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        // [start, end, [host, port, id, ...], replicas...]
        let Value::Array(fields) = entry else {
            return Err(bad());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => return Err(bad()),
        };
        // An empty host means "the address you reached me at".
        let host = if host.is_empty() || host == "?" {
            asked_host.to_owned()
        } else {
            host
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else {
            return Err(bad());
        };
        ranges.push(SlotRange {
            start,
            end,
            addr: format!("{host}:{port}"),
        });
    }
    if ranges.is_empty() {
        return Err(StoreError::new(format!("{addr}: no slot is served")));
    }
    Ok(ranges)
}

/// Connects within what is left of the sync's time, with `timeout` as the write timeout.
fn connect(
    addr: &str,
    info: &ConnectionInfo,
    timeout: Duration,
    deadline: Instant,
) -> Result<Connection, StoreError> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(StoreError::timeout(addr));
    }
    let client = Client::open(info.clone())
        .map_err(|e| StoreError::client(format!("{addr}: opening"), e))?;
    let con = client
        .get_connection_with_timeout(remaining)
        .map_err(|e| StoreError::client(format!("{addr}: connecting"), e))?;
    con.set_write_timeout(Some(timeout))
        .map_err(|e| StoreError::client(format!("{addr}: setting the write timeout"), e))?;
    Ok(con)
}

/// `host:port` (or a socket's path) for messages and for matching Redis's own addresses.
pub(super) fn addr_of(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
    }
}

/// An error reply as Redis wrote it: its code, then its details.
fn describe(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => err.to_string(),
    }
}

fn non_negative(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// RESP: the header of an array of `len` elements.
fn resp_array(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    out.extend_from_slice(Digits::new(len as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// RESP: a bulk string.
fn resp_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(Digits::new(bytes.len() as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

// The harness that starts real Redis servers, shared with the integration tests (one copy).
#[cfg(test)]
#[allow(unreachable_pub, dead_code)]
#[path = "../../tests/common/redis.rs"]
mod redis_server;

#[cfg(test)]
mod tests {
    use super::redis_server::{RedisCluster, RedisServer, Reply};
    use super::*;
    use std::thread;

    /// The windows' length in these tests; window numbers are explicit, never waited for.
    const W: u64 = 1000;
    /// A window number, and a time on the node's clock, well past the epoch.
    const WINDOW: u64 = 1_700_000_000;
    const NOW: u64 = WINDOW * W;

    fn config(url: &str) -> FleetConfig {
        FleetConfig::new(url).timeout(Duration::from_millis(500))
    }

    fn store(config: &FleetConfig) -> Store {
        Store::new(config).expect("a valid configuration")
    }

    fn push(key: &str, window: u64, delta: u64) -> Push<'_> {
        Push {
            key: key.as_bytes(),
            window,
            delta,
        }
    }

    /// Syncs and returns the totals and the node count, panicking on failure.
    fn sync(
        store: &mut Store,
        node: &str,
        now: u64,
        pushes: &[Push<'_>],
    ) -> (Vec<(u64, u64)>, usize) {
        let synced = store
            .sync(node, now, W, pushes)
            .unwrap_or_else(|e| panic!("sync of {node}: {e}"));
        (synced.totals.to_vec(), synced.nodes)
    }

    fn counter_name(prefix: &str, key: &str, window: u64) -> String {
        let mut name = Vec::new();
        keys::window_key(&mut name, prefix, key.as_bytes(), window);
        String::from_utf8(name).unwrap()
    }

    #[test]
    fn pushes_from_two_nodes_sum_up() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let config = config(&server.url());
        let (mut a, mut b) = (store(&config), store(&config));
        assert!(!a.is_connected(), "no I/O before the first sync");

        let (totals, nodes) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);
        assert_eq!((totals, nodes), (vec![(3, 0)], 1));
        assert!(a.is_connected());
        let (totals, nodes) = sync(
            &mut b,
            "b",
            NOW,
            &[push("k", WINDOW, 4), push("other", WINDOW, 1)],
        );
        assert_eq!((totals, nodes), (vec![(7, 0), (1, 0)], 2));
        // A pure read sees the fleet's total and leaves no counter behind for a new key.
        let (totals, _) = sync(
            &mut a,
            "a",
            NOW,
            &[push("k", WINDOW, 0), push("new", WINDOW, 0)],
        );
        assert_eq!(totals, vec![(7, 0), (0, 0)]);
        let fresh = counter_name("floodgate", "new", WINDOW);
        assert_eq!(server.command(&["EXISTS", &fresh]), Reply::Int(0));
        assert_eq!(
            server
                .command(&["GET", &counter_name("floodgate", "k", WINDOW)])
                .text(),
            "7"
        );
        // No pushes at all still marks the node alive and counts the nodes.
        let (totals, nodes) = sync(&mut a, "a", NOW, &[]);
        assert_eq!((totals, nodes), (vec![], 2));
    }

    #[test]
    fn the_previous_window_total_is_returned() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let mut a = store(&config(&server.url()));
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 5)]);
        let (totals, _) = sync(&mut a, "a", NOW + W, &[push("k", WINDOW + 1, 2)]);
        assert_eq!(totals, vec![(2, 5)]);
        let (totals, _) = sync(&mut a, "a", NOW + 2 * W, &[push("k", WINDOW + 2, 0)]);
        assert_eq!(totals, vec![(0, 2)]);
        // Prefixes keep fleets apart.
        let mut other = store(&config(&server.url()).prefix("other"));
        let (totals, _) = sync(&mut other, "a", NOW, &[push("k", WINDOW + 1, 1)]);
        assert_eq!(totals, vec![(1, 0)]);
        // Window 0 has no predecessor.
        let (totals, _) = sync(&mut a, "a", NOW, &[push("k", 0, 1)]);
        assert_eq!(totals, vec![(1, 0)]);
    }

    #[test]
    fn counters_and_the_node_set_expire() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let config = config(&server.url());
        let mut a = store(&config);
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 1)]);
        let expiry = a.expiry_ms(W);
        assert_eq!(expiry, 2 * W + 1000, "two windows and a margin of a second");
        let pttl = server
            .command(&["PTTL", &counter_name("floodgate", "k", WINDOW)])
            .int();
        assert!(pttl > 0 && pttl <= expiry as i64, "PTTL {pttl}");
        let nodes_ttl = 2 * config.node_ttl().as_millis() as i64;
        let pttl = server.command(&["PTTL", "floodgate:nodes"]).int();
        assert!(pttl > 0 && pttl <= nodes_ttl, "PTTL {pttl}");
    }

    #[test]
    fn a_node_drops_out_of_the_count_after_its_ttl() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let config = config(&server.url());
        let ttl = config.node_ttl().as_millis() as u64;
        let (mut a, mut b) = (store(&config), store(&config));
        assert_eq!(sync(&mut a, "a", NOW, &[]).1, 1);
        assert_eq!(sync(&mut b, "b", NOW, &[]).1, 2);
        assert_eq!(
            sync(&mut a, "a", NOW + ttl, &[]).1,
            2,
            "b is exactly ttl old"
        );
        assert_eq!(sync(&mut a, "a", NOW + ttl + 1, &[]).1, 1, "b is gone");
        assert_eq!(sync(&mut b, "b", NOW + ttl + 1, &[]).1, 2, "b is back");
        assert_eq!(server.command(&["ZCARD", "floodgate:nodes"]), Reply::Int(2));
    }

    #[test]
    fn lost_scripts_are_loaded_again_without_counting_twice() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let mut a = store(&config(&server.url()));
        sync(
            &mut a,
            "a",
            NOW,
            &[push("k", WINDOW, 3), push("j", WINDOW, 1)],
        );
        assert_eq!(
            server.command(&["SCRIPT", "FLUSH"]),
            Reply::Simple("OK".into())
        );
        let (totals, nodes) = sync(
            &mut a,
            "a",
            NOW,
            &[push("k", WINDOW, 4), push("j", WINDOW, 1)],
        );
        assert_eq!((totals, nodes), (vec![(7, 0), (2, 0)], 1));
        let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 0)]);
        assert_eq!(totals, vec![(7, 0)]);
    }

    #[test]
    fn a_killed_server_fails_the_sync_in_time_and_a_restarted_one_is_used_again() {
        let Some(mut server) = RedisServer::start() else {
            return;
        };
        let timeout = Duration::from_millis(200);
        let mut a = store(&config(&server.url()).timeout(timeout));
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);

        server.kill();
        for _ in 0..2 {
            // The first sync finds the old connection broken, the second cannot connect.
            let start = Instant::now();
            let result = a.sync("a", NOW, W, &[push("k", WINDOW, 1)]).map(|_| ());
            let err = result.expect_err("a sync with Redis down");
            assert!(
                start.elapsed() < timeout + Duration::from_millis(500),
                "{:?}",
                start.elapsed()
            );
            assert!(!a.is_connected());
            assert!(err.to_string().starts_with("fleet sync: "), "{err}");
        }

        server.restart();
        // Nothing was persisted: the counter starts again.
        let (totals, nodes) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 2)]);
        assert_eq!((totals, nodes), (vec![(2, 0)], 1));
    }

    #[test]
    fn a_stalled_server_fails_the_sync_in_time() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let timeout = Duration::from_millis(200);
        let mut a = store(&config(&server.url()).timeout(timeout));
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 3)]);

        let stall = server.stall(Duration::from_secs(2));
        let start = Instant::now();
        let err = a
            .sync("a", NOW, W, &[push("k", WINDOW, 5)])
            .map(|_| ())
            .expect_err("a sync with Redis stalled");
        let took = start.elapsed();
        assert!(took >= timeout - Duration::from_millis(20), "{took:?}");
        assert!(took < timeout + Duration::from_millis(500), "{took:?}");
        assert!(err.is_timeout(), "{err}");
        stall.join().expect("the stall ends");

        // The stalled push ran once Redis woke up: a failed sync may have been applied.
        let (totals, _) = sync(&mut a, "a", NOW, &[push("k", WINDOW, 1)]);
        assert_eq!(totals, vec![(9, 0)]);
    }

    #[test]
    fn buffers_are_kept_between_syncs() {
        let Some(server) = RedisServer::start() else {
            return;
        };
        let mut a = store(&config(&server.url()));
        let keys: Vec<String> = (0..50).map(|i| format!("key-{i}")).collect();
        let pushes: Vec<Push<'_>> = keys.iter().map(|k| push(k, WINDOW, 1)).collect();
        sync(&mut a, "a", NOW, &pushes);
        let buffers = |a: &Store| {
            (
                a.totals.as_ptr(),
                a.pending.as_ptr(),
                a.masters[0].out.as_ptr(),
                a.masters[0].sent.as_ptr(),
            )
        };
        let first = buffers(&a);
        for _ in 0..10 {
            sync(&mut a, "a", NOW, &pushes);
            assert_eq!(buffers(&a), first, "a buffer was allocated again");
        }
    }

    #[test]
    fn a_standalone_configuration_pointed_at_a_cluster_says_so() {
        let Some(cluster) = RedisCluster::start(3) else {
            return;
        };
        // A key whose slot the first master does not serve.
        let key = (0..)
            .map(|i| format!("key-{i}"))
            .find(|k| {
                let slot = keys::slot(counter_name("floodgate", k, WINDOW).as_bytes());
                cluster.server_of_slot(slot).port() != cluster.servers()[0].port()
            })
            .unwrap();
        let mut a = store(&config(&cluster.servers()[0].url()));
        let err = a
            .sync("a", NOW, W, &[push(&key, WINDOW, 1)])
            .map(|_| ())
            .expect_err("MOVED");
        assert!(err.to_string().contains("FleetConfig::cluster"), "{err}");
    }

    /// Keys whose counters land on each master in turn, with their slots.
    fn keys_on_each_master(cluster: &RedisCluster, prefix: &str) -> Vec<(String, u16)> {
        cluster
            .servers()
            .iter()
            .map(|server| {
                (0..)
                    .map(|i| format!("origin-{i}.example"))
                    .map(|k| {
                        let slot = keys::slot(counter_name(prefix, &k, WINDOW).as_bytes());
                        (k, slot)
                    })
                    .find(|(_, slot)| cluster.server_of_slot(*slot).port() == server.port())
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn a_cluster_sums_pushes_on_keys_spread_over_its_masters() {
        let Some(cluster) = RedisCluster::start(3) else {
            return;
        };
        let urls = cluster.urls();
        let spread = keys_on_each_master(&cluster, "floodgate");
        for (key, slot) in &spread {
            let name = counter_name("floodgate", key, WINDOW);
            assert_eq!(cluster.keyslot(&name), *slot, "our slot of {name}");
            let previous = counter_name("floodgate", key, WINDOW - 1);
            assert_eq!(
                cluster.keyslot(&previous),
                *slot,
                "{previous} shares the slot"
            );
        }
        // One node knows every master's URL, the other only one of them: it learns the rest.
        let mut a = store(&FleetConfig::cluster(urls.clone()).timeout(Duration::from_millis(500)));
        let mut b =
            store(&FleetConfig::cluster([urls[1].clone()]).timeout(Duration::from_millis(500)));
        let pushes_a: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 2)).collect();
        let pushes_b: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 3)).collect();
        let (totals, nodes) = sync(&mut a, "a", NOW, &pushes_a);
        assert_eq!((totals, nodes), (vec![(2, 0); 3], 1));
        let (totals, nodes) = sync(&mut b, "b", NOW, &pushes_b);
        assert_eq!((totals, nodes), (vec![(5, 0); 3], 2));
        assert_eq!(a.masters(), 3);
        assert_eq!(b.masters(), 3);
        // Each master holds the counter of its key.
        for ((key, _), server) in spread.iter().zip(cluster.servers()) {
            let name = counter_name("floodgate", key, WINDOW);
            assert_eq!(server.command(&["GET", &name]).text(), "5");
        }
        let next: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW + 1, 1)).collect();
        let (totals, _) = sync(&mut a, "a", NOW + W, &next);
        assert_eq!(totals, vec![(1, 5); 3]);
        // Scripts lost on one master only are loaded there, and nothing counts twice.
        cluster.servers()[1].command(&["SCRIPT", "FLUSH"]);
        let (totals, _) = sync(&mut a, "a", NOW + W, &next);
        assert_eq!(totals, vec![(2, 5); 3]);
    }

    #[test]
    fn a_cluster_master_killed_fails_the_sync_in_time_and_is_used_again_once_back() {
        let Some(mut cluster) = RedisCluster::start(3) else {
            return;
        };
        let timeout = Duration::from_millis(300);
        let mut a = store(&FleetConfig::cluster(cluster.urls()).timeout(timeout));
        let spread = keys_on_each_master(&cluster, "floodgate");
        let pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 1)).collect();
        sync(&mut a, "a", NOW, &pushes);

        cluster.server_mut(2).kill();
        for _ in 0..2 {
            let start = Instant::now();
            a.sync("a", NOW, W, &pushes)
                .map(|_| ())
                .expect_err("a sync with a master down");
            assert!(
                start.elapsed() < timeout + Duration::from_millis(500),
                "{:?}",
                start.elapsed()
            );
        }

        // Back within the cluster's node timeout, with its slots but not its data. It may
        // answer CLUSTERDOWN until it has heard from the others: poll, with pure reads (a
        // failed sync may still have been applied on the masters that answered).
        cluster.server_mut(2).restart();
        let reads: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 0)).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        let totals = loop {
            match a.sync("a", NOW, W, &reads) {
                Ok(synced) => break synced.totals.to_vec(),
                Err(e) => assert!(Instant::now() < deadline, "still failing: {e}"),
            }
            thread::sleep(Duration::from_millis(20));
        };
        // The first push, and perhaps those of the two failed syncs, on the masters that
        // stayed up; nothing on the restarted one.
        for total in &totals[..2] {
            assert!((1..=3).contains(&total.0), "{totals:?}");
        }
        assert_eq!(totals[2], (0, 0), "{totals:?}");
        let (totals, _) = sync(&mut a, "a", NOW, &pushes);
        assert_eq!(totals[2], (1, 0), "{totals:?}");
    }

    /// The id of a cluster node.
    fn node_id(server: &RedisServer) -> String {
        server.command(&["CLUSTER", "MYID"]).text()
    }

    #[test]
    fn a_cluster_resharding_is_followed_without_counting_twice() {
        let Some(cluster) = RedisCluster::start(3) else {
            return;
        };
        let mut a =
            store(&FleetConfig::cluster(cluster.urls()).timeout(Duration::from_millis(500)));
        let spread = keys_on_each_master(&cluster, "floodgate");
        let pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 1)).collect();
        sync(&mut a, "a", NOW, &pushes);

        // Move the (empty) slot of a new key from the master serving it to the next one:
        // the store still believes the old master, which answers MOVED.
        let servers = cluster.servers();
        let (key, slot) = (0..)
            .map(|i| format!("moved-{i}"))
            .map(|k| {
                let slot = keys::slot(counter_name("floodgate", &k, WINDOW).as_bytes());
                (k, slot)
            })
            .find(|(_, slot)| cluster.server_of_slot(*slot).port() == servers[0].port())
            .unwrap();
        let (from, to) = (&servers[0], &servers[1]);
        let slot_arg = slot.to_string();
        let (from_id, to_id) = (node_id(from), node_id(to));
        let ok = Reply::Simple("OK".into());
        assert_eq!(
            to.command(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]),
            ok
        );
        assert_eq!(
            from.command(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]),
            ok
        );
        for server in [to, from, &servers[2]] {
            assert_eq!(
                server.command(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
                ok
            );
        }

        let mut pushes: Vec<Push<'_>> = spread.iter().map(|(k, _)| push(k, WINDOW, 1)).collect();
        pushes.push(push(&key, WINDOW, 4));
        let (totals, nodes) = sync(&mut a, "a", NOW, &pushes);
        assert_eq!((totals, nodes), (vec![(2, 0), (2, 0), (2, 0), (4, 0)], 1));
        let name = counter_name("floodgate", &key, WINDOW);
        assert_eq!(to.command(&["GET", &name]).text(), "4");
        assert!(matches!(from.command(&["GET", &name]), Reply::Error(e) if e.starts_with("MOVED")));
    }

    #[test]
    fn a_cluster_slot_migrating_is_followed_with_asking() {
        let Some(cluster) = RedisCluster::start(3) else {
            return;
        };
        let servers = cluster.servers();
        // A prefix whose node set lands on the first master, and is not there yet.
        let prefix = (0..)
            .map(|i| format!("ask{i}"))
            .find(|p| {
                let slot = keys::slot(keys::nodes_key(p).as_bytes());
                cluster.server_of_slot(slot).port() == servers[0].port()
            })
            .unwrap();
        let nodes_key = keys::nodes_key(&prefix);
        let slot_arg = keys::slot(nodes_key.as_bytes()).to_string();
        let mut a = store(
            &FleetConfig::cluster(cluster.urls())
                .prefix(&prefix)
                .timeout(Duration::from_millis(500)),
        );
        // Learn the slots before the migration starts.
        sync(&mut a, "a", NOW, &[push("k", WINDOW, 1)]);
        assert_eq!(servers[0].command(&["DEL", &nodes_key]), Reply::Int(1));

        let (from, to) = (&servers[0], &servers[1]);
        let (from_id, to_id) = (node_id(from), node_id(to));
        let ok = Reply::Simple("OK".into());
        assert_eq!(
            to.command(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]),
            ok
        );
        assert_eq!(
            from.command(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]),
            ok
        );
        // The node set is not on the old master: it sends the store on with ASK.
        let (_, nodes) = sync(&mut a, "a", NOW, &[]);
        assert_eq!(nodes, 1);
        let (_, nodes) = sync(&mut a, "b", NOW, &[]);
        assert_eq!(nodes, 2);
        for server in [to, from] {
            assert_eq!(
                server.command(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id]),
                ok
            );
        }
        assert_eq!(to.command(&["ZCARD", &nodes_key]), Reply::Int(2));
    }
}
