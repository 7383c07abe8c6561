//! Which master serves which key, and the connections to the masters.
//!
//! Standalone, there is one master, the configured server. On a Cluster the masters and the
//! slot each one serves are learnt with `CLUSTER SLOTS`, from a master already connected, else
//! from the configured URLs, else from the masters known before; they are learnt anew when a
//! reply says a slot moved or a master could not be reached. Each key's slot is computed here
//! (`keys::slot`), so every command goes straight to its master.

use std::time::{Duration, Instant};

use redis::{Client, Connection, ConnectionAddr, ConnectionInfo, Value};

use super::error::StoreError;
use super::sent::Sent;
use crate::fleet::keys::SLOTS;

/// No master known for a slot.
const NO_MASTER: u16 = u16::MAX;

/// A master (or the one standalone server), its connection, and this round's commands for it.
pub(super) struct Master {
    /// `host:port` (a Unix socket's path), as `ConnectionAddr` displays it and as Redis names
    /// a master in `CLUSTER SLOTS` and redirections.
    pub(super) addr: String,
    info: ConnectionInfo,
    pub(super) con: Option<Connection>,
    /// Whether this connection has loaded the scripts; a new connection loads them again in
    /// its first pipeline (the server may have restarted and lost them).
    pub(super) scripts_loaded: bool,
    /// The commands of this round, RESP-encoded.
    pub(super) out: Vec<u8>,
    /// What each reply of this round answers.
    pub(super) sent: Vec<Sent>,
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

    /// Drops the connection; the next one loads the scripts again.
    pub(super) fn disconnect(&mut self) {
        self.con = None;
        self.scripts_loaded = false;
    }

    /// Writes this round's pipeline, connecting first if needed. `timeout` bounds each write.
    pub(super) fn send(&mut self, timeout: Duration, deadline: Instant) -> Result<(), StoreError> {
        if self.con.is_none() {
            self.con = Some(connect(&self.addr, &self.info, timeout, deadline)?);
        }
        let Some(con) = self.con.as_mut() else {
            return Err(StoreError::new(format!("{}: not connected", self.addr)));
        };
        con.send_packed_command(&self.out)
            .map_err(|e| StoreError::client(format!("{}: sending", self.addr), e))
    }
}

/// The masters and, on a Cluster, the master of each slot.
pub(super) struct Routing {
    cluster: bool,
    /// How long a write may take, and a connection at most.
    timeout: Duration,
    /// Where to start: the configured URLs.
    seeds: Vec<ConnectionInfo>,
    /// Standalone: the one server. Cluster: the masters, as last learnt.
    pub(super) masters: Vec<Master>,
    /// Cluster: the master of each slot (an index into `masters`); empty until learnt, and
    /// emptied when the slots must be learnt anew.
    slots: Vec<u16>,
}

impl Routing {
    /// Routing for the servers at `seeds`: the one server, or a Cluster's nodes to ask for
    /// the slots. No I/O.
    pub(super) fn new(cluster: bool, seeds: Vec<ConnectionInfo>, timeout: Duration) -> Routing {
        let masters = if cluster {
            Vec::new()
        } else {
            seeds
                .iter()
                .map(|info| Master::new(info.addr.to_string(), info.clone()))
                .collect()
        };
        Routing {
            cluster,
            timeout,
            seeds,
            masters,
            slots: Vec::new(),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether a master holds an open connection.
    pub(super) fn is_connected(&self) -> bool {
        self.masters.iter().any(|m| m.con.is_some())
    }

    /// A Cluster whose slots are not known (yet, or any more).
    pub(super) fn needs_slots(&self) -> bool {
        self.cluster && self.slots.is_empty()
    }

    /// Makes the next round learn the slots anew (a slot moved, or a master is gone and may
    /// have been replaced by a failover).
    pub(super) fn forget_slots(&mut self) {
        self.slots.clear();
    }

    /// The master serving `slot` (the one server, standalone).
    pub(super) fn master_of(&self, slot: u16) -> Result<usize, StoreError> {
        if !self.cluster {
            return Ok(0);
        }
        match self.slots.get(usize::from(slot)) {
            Some(&m) if m != NO_MASTER => Ok(usize::from(m)),
            _ => Err(StoreError::new(format!("no master serves slot {slot}"))),
        }
    }

    /// The master at `addr` (from an `ASK` redirection), added to the known ones if new.
    pub(super) fn master_at(&mut self, addr: &str) -> usize {
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
    /// connected first, then the configured URLs, then the masters known from before.
    /// Learning renumbers the masters; connections to masters that stay masters are kept.
    pub(super) fn learn_slots(&mut self, deadline: Instant) -> Result<(), StoreError> {
        let mut last_error = None;
        let mut ranges = None;
        // The connection that answered, when it was opened here: kept for its master.
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
            // The configured URLs may all be gone while masters learnt since are not.
            let known = self
                .masters
                .iter()
                .filter(|m| m.con.is_none())
                .map(|m| m.info.clone());
            let candidates: Vec<ConnectionInfo> = self.seeds.iter().cloned().chain(known).collect();
            for seed in &candidates {
                let addr = seed.addr.to_string();
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
