//! The fleet's Redis store: pushes this node's counts and pulls the fleet's totals, in one
//! pipelined round trip per sync, on Redis or Redis Cluster.
//!
//! Any command of a sync may be sent again: a push is an absolute count that Redis keeps only
//! when it is larger than the stored one (`window.lua`), and the nodes script sets this node's
//! score and drops the nodes older than a bound, the same each time it runs (`nodes.lua`).
//!
//! The commands are the `redis` crate's [`Cmd`](redis::Cmd)s, sent and read over its blocking
//! [`Connection`]s; which master serves which slot is this module's own ([`routing`]), not the
//! crate's `ClusterConnection` (feature `cluster`), whose pipeline at 0.32, the newest line for
//! our rust-version, lacks two things the store needs (seen with the store's tests run on it):
//!
//! - It does not follow `MOVED` or `ASK` within a pipeline: it retries the replies that
//!   `Connection::recv_response` returns as errors, but that returns a server's error reply as a
//!   value, which `ClusterPipeline::query` then returns as the pipeline's error. The resharding
//!   test failed with `Moved` (a new connection, learning the slots, got through), and the
//!   migration test with `Ask` on every sync: the slot's old master stays its owner until the
//!   migration ends.
//! - Its timeouts are per read, not per sync: it reads a stalled master's replies one by one,
//!   each waiting for the whole response timeout. With six commands on a stalled master and a
//!   timeout of 200 ms, `a_stalled_cluster_master_fails_the_sync_in_time_and_the_retry_counts_once`
//!   took 1.2 s.
//!
//! Here each reply is read on its own: a command refused with `NOSCRIPT` (a master restarted,
//! failed over or flushed its scripts), `MOVED` or `ASK` did not run, so only those are sent
//! again, in the same sync, after loading the scripts, learning the slots anew, or with
//! `ASKING`. Sending the whole pipeline again would count nothing twice, but would cost every
//! master a second round trip of all its commands.
//!
//! A sync sends each master its part of the pipeline before reading any reply, so it costs one
//! round trip whatever the number of masters, plus one only in the rare rounds that follow a
//! redirection or a lost script. Everything it does, connecting included, runs against one
//! deadline, the configured timeout: a dead or stalled Redis makes a sync fail after that long,
//! never hang.
//!
//! The parts: [`routing`] knows the masters and which serves each slot, [`scripts`] writes the
//! scripts' calls and reads their replies, [`exchange`] is what a sync pushes and learns back,
//! [`sent`] the commands in flight and what each reply answers, [`error`] why a sync failed,
//! and this file runs the rounds of a sync.

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Connection, ErrorKind, RedisError, Value};

use super::config::FleetConfig;
use super::keys;
use crate::ConfigError;

mod error;
mod exchange;
mod routing;
mod scripts;
mod sent;
#[cfg(test)]
mod tests;

pub(crate) use error::StoreError;
pub(crate) use exchange::{KeyTotals, Push, Synced};
use routing::Routing;
use scripts::Scripts;
use sent::{Job, Pending, Sent};

/// Rounds per sync at most: the first, and re-sends after a redirection or a lost script (a
/// resharding moves a slot once; a second redirection of the same command within one sync is
/// a cluster in flux, and the next sync will try again).
const ROUNDS: usize = 3;

/// The connection to the fleet's Redis (standalone or Cluster), owned by the one thread that
/// syncs. It connects lazily, on the first sync, and again on the next sync after any error.
pub(crate) struct Store {
    prefix: String,
    nodes_key: String,
    nodes_slot: u16,
    timeout: Duration,
    node_ttl_ms: u64,
    margin_ms: u64,
    scripts: Scripts,
    routing: Routing,
    // Buffers kept from one sync to the next.
    pending: Vec<Pending>,
    retry: Vec<Pending>,
    name: Vec<u8>,
    totals: Vec<KeyTotals>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("prefix", &self.prefix)
            .field("cluster", &self.routing.is_cluster())
            .field(
                "masters",
                &self
                    .routing
                    .masters
                    .iter()
                    .map(|m| &m.addr)
                    .collect::<Vec<_>>(),
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
            scripts: Scripts::new(),
            routing: Routing::new(config.is_cluster(), seeds, config.get_timeout()),
            pending: Vec::new(),
            retry: Vec::new(),
            name: Vec::new(),
            totals: Vec::new(),
        })
    }

    /// Whether the store holds an open connection (as of its last sync).
    pub(crate) fn is_connected(&self) -> bool {
        self.routing.is_connected()
    }

    /// The masters the store knows (1 for a standalone server; 0 for a cluster not yet reached).
    #[cfg(test)]
    pub(crate) fn masters(&self) -> usize {
        self.routing.masters.len()
    }

    /// How long a key's hash of a window lives after each push that raises a count: two
    /// windows and a margin.
    pub(crate) fn expiry_ms(&self, window_ms: u64) -> u64 {
        window_ms.saturating_mul(2).saturating_add(self.margin_ms)
    }

    /// Pushes this node's counts and pulls the fleet's: for each push, stores `node`'s count
    /// of the key in `push.window` (and the window before, and its refusals in both, unless
    /// Redis has larger ones) and reads the key's totals in that window and the one before and
    /// the other nodes that refused it; and marks `node` alive at `now_unix_ms`
    /// (on this node's clock) and counts the nodes alive. `node` must be this process's own:
    /// a node restarted under its old id has none of its requests seen in the window until
    /// its new count passes the old one, still stored. `window_ms` is the windows' length,
    /// for the hashes' expiry. Returns within about the configured timeout, whatever Redis
    /// does.
    pub(crate) fn sync(
        &mut self,
        node: &str,
        now_unix_ms: u64,
        window_ms: u64,
        pushes: &[Push<'_>],
    ) -> Result<Synced<'_>, StoreError> {
        // Checked: `validate` bounds the timeout, but no sync may panic on it.
        let now = Instant::now();
        let deadline = now.checked_add(self.timeout).unwrap_or(now);
        self.totals.clear();
        self.totals.resize(pushes.len(), KeyTotals::default());
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
        if self.routing.needs_slots() {
            self.routing.learn_slots(deadline)?;
            // Learning the slots renumbers the masters: an ASK target is found again by the
            // command going to its slot's master first (which answers ASK again if still
            // migrating).
            for pending in &mut self.pending {
                pending.ask = None;
            }
        }
        for master in &mut self.routing.masters {
            master.out.clear();
            master.sent.clear();
        }
        for i in 0..self.pending.len() {
            let pending = self.pending[i];
            self.encode(pending, args)?;
        }

        // Send every master its part before reading any reply: one round trip for all.
        let mut failure = None;
        for master in &mut self.routing.masters {
            if master.sent.is_empty() {
                continue;
            }
            if let Err(e) = master.send(self.timeout, deadline) {
                master.disconnect();
                failure.get_or_insert(e);
            }
        }

        // Read every reply, even after a failure elsewhere, so that the connections stay in
        // step with their servers.
        self.retry.clear();
        for m in 0..self.routing.masters.len() {
            let master = &self.routing.masters[m];
            if master.sent.is_empty() || master.con.is_none() {
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
                self.routing.forget_slots();
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
            None => self.routing.master_of(slot)?,
        };
        let Some(master) = self.routing.masters.get_mut(m) else {
            return Err(StoreError::new(format!("no master {m} for slot {slot}")));
        };
        let out = &mut master.out;
        if master.sent.is_empty() && !master.scripts_loaded {
            for _ in 0..self.scripts.load(out) {
                master.sent.push(Sent::Load);
            }
        }
        if pending.ask.is_some() {
            self.scripts.asking(out);
            master.sent.push(Sent::Asking);
        }
        match pending.job {
            Job::Window(i) => {
                self.scripts.window(
                    out,
                    &mut self.name,
                    args.node,
                    &args.pushes[i],
                    args.expiry_ms,
                );
            }
            Job::Nodes => self.scripts.nodes(
                out,
                &self.nodes_key,
                args.node,
                args.now_unix_ms,
                self.node_ttl_ms,
            ),
        }
        master.sent.push(Sent::Job(pending));
        Ok(())
    }

    /// Reads master `m`'s replies. On an error the connection is dropped (its remaining
    /// replies would be out of step).
    fn receive(
        &mut self,
        m: usize,
        deadline: Instant,
        nodes: &mut Option<usize>,
    ) -> Result<(), StoreError> {
        let master = &mut self.routing.masters[m];
        let (Some(mut con), sent) = (master.con.take(), std::mem::take(&mut master.sent)) else {
            return Ok(());
        };
        let result = self.read_replies(m, &mut con, &sent, deadline, nodes);
        let master = &mut self.routing.masters[m];
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
        let addr = &self.routing.masters[m].addr;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(StoreError::timeout(addr));
        }
        con.set_read_timeout(Some(remaining))
            .map_err(|e| StoreError::client(format!("{addr}: setting the read timeout"), e))?;
        let mut loads_ok = true;
        // A reply the store cannot use fails the sync, but only after the other replies
        // have been read, so that the connection stays in step and is kept.
        let mut bad_reply = None;
        for &what in sent {
            let reply = con.recv_response().map_err(|e| {
                let addr = &self.routing.masters[m].addr;
                StoreError::client(format!("{addr}: reading"), e)
            })?;
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
                    match scripts::window_totals(&items) {
                        Some(totals) => self.totals[i] = totals,
                        None => {
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
                (Sent::Job(_), ErrorKind::Moved) if !self.routing.is_cluster() => {
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
                    self.routing.forget_slots();
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
                            let ask = self.routing.master_at(&target);
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
        let master = &mut self.routing.masters[m];
        master.scripts_loaded = loads_ok;
        Ok(bad_reply.map(|what| StoreError::new(format!("{}: {what}", master.addr))))
    }
}

/// The arguments of one sync, for the encoder.
struct Args<'n, 'p> {
    node: &'n str,
    now_unix_ms: u64,
    expiry_ms: u64,
    pushes: &'p [Push<'p>],
}

/// An error reply as Redis wrote it: its code, then its details.
fn describe(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => err.to_string(),
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
