//! Real Redis servers for the fleet's tests: one server, or a Cluster of masters, each a child
//! `redis-server` on a free loopback port with nothing persisted (`--save "" --appendonly no`)
//! and its files in a temporary directory, all removed on drop.
//!
//! Without a `redis-server` (on `PATH`, or at `$FLOODGATE_REDIS_SERVER`), [`RedisServer::start`]
//! and [`RedisCluster::start`] print why to stderr and return `None`, and the test returns early;
//! with `FLOODGATE_REQUIRE_REDIS=1` (which `.ci/run` sets under CI) they panic instead, so CI
//! cannot pass on skipped tests. A program that says why in its own words (the fleet example)
//! calls [`RedisServer::try_start`] instead, which returns the reason.
//!
//! Used by the fleet's integration tests, the fleet bench, the fleet store's unit tests
//! (`src/fleet/store/tests.rs`) and the fleet example (through examples/support). Only std: the
//! servers are driven with hand-written RESP over a `TcpStream`, so it needs neither the `redis`
//! client nor floodgate.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What a test prints (or panics with, under `FLOODGATE_REQUIRE_REDIS=1`) without the binary.
const MISSING: &str = "redis-server not found: install Debian's redis-server";

/// How long a server may take to answer its first PING, and a cluster to agree.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// How long a harness request waits for its reply.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A reply, as RESP2 has them.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$3 foo`, or the nil bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, or the nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integer of an integer reply; panics on any other.
    pub fn int(&self) -> i64 {
        match self {
            Reply::Int(n) => *n,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// The text of a simple or bulk string reply; panics on any other.
    pub fn text(&self) -> String {
        match self {
            Reply::Simple(s) => s.clone(),
            Reply::Bulk(Some(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("expected a string reply, got {other:?}"),
        }
    }

    /// The elements of an array reply; panics on any other.
    pub fn array(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            other => panic!("expected an array reply, got {other:?}"),
        }
    }
}

/// Sends one command to `port` on loopback and reads its reply, within `timeout`.
pub fn request(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    send(&stream, args)?;
    read_reply(&mut BufReader::new(&stream))
}

fn send(mut stream: &TcpStream, args: &[&str]) -> io::Result<()> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    stream.write_all(&out)
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{line:?}: {e}")))
    };
    match kind {
        "+" => Ok(Reply::Simple(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Int(number()?)),
        "$" => match usize::try_from(number()?) {
            Err(_) => Ok(Reply::Bulk(None)),
            Ok(len) => {
                let mut bytes = vec![0; len + 2];
                reader.read_exact(&mut bytes)?;
                bytes.truncate(len);
                Ok(Reply::Bulk(Some(bytes)))
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Ok(Reply::Array(None)),
            Ok(len) => (0..len)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()
                .map(|items| Reply::Array(Some(items))),
        },
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a RESP reply: {line:?}"),
        )),
    }
}

/// Why [`RedisServer::try_start`] started no server. Its text is what a test prints when it
/// skips.
#[derive(Debug)]
pub enum StartError {
    /// There is no `redis-server` to run.
    NotFound(String),
    /// The binary would not run, or no server of it answered.
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotFound(why) | StartError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StartError {}

/// The `redis-server` to run and its major version, or `None` (after printing why, or
/// panicking under `FLOODGATE_REQUIRE_REDIS=1`).
fn binary() -> Option<(String, u32)> {
    match find_binary() {
        Ok(found) => Some(found),
        Err(e) => skip(&e.to_string()),
    }
}

/// The `redis-server` to run and its major version.
fn find_binary() -> Result<(String, u32), StartError> {
    let bin = std::env::var("FLOODGATE_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let version = Command::new(&bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match version {
        Ok(out) if out.status.success() => {
            // "Redis server v=7.0.15 sha=..." (Valkey prints the same shape).
            let text = String::from_utf8_lossy(&out.stdout);
            let major = text
                .split("v=")
                .nth(1)
                .and_then(|v| v.split('.').next())
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            Ok((bin, major))
        }
        Ok(out) => Err(StartError::Failed(format!(
            "{bin} --version failed ({}): {MISSING}",
            out.status
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(StartError::NotFound(format!("{MISSING} ({bin}: {e})")))
        }
        Err(e) => Err(StartError::Failed(format!("{MISSING} ({bin}: {e})"))),
    }
}

/// Prints why a test skips and returns `None`, or panics when Redis is required.
fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("FLOODGATE_REQUIRE_REDIS").is_ok_and(|v| v == "1") {
        panic!("{why} (FLOODGATE_REQUIRE_REDIS=1: the Redis tests must run)");
    }
    eprintln!("skipped: {why}");
    None
}

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "floodgate-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound, read, released: another process could take it before the
/// server does, which `RedisServer::start` survives by trying again). With `bus`, one whose
/// Cluster bus port (port + 10000) is free as well.
fn free_port(bus: bool) -> u16 {
    for _ in 0..100 {
        let Ok(listener) = TcpListener::bind(("127.0.0.1", 0)) else {
            continue;
        };
        let Ok(port) = listener.local_addr().map(|a| a.port()) else {
            continue;
        };
        if !bus {
            return port;
        }
        if port <= u16::MAX - 10_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found");
}

/// One `redis-server` child on loopback; killed (and its directory removed) on drop.
pub struct RedisServer {
    bin: String,
    major: u32,
    port: u16,
    cluster: bool,
    dir: TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING; `None` (after printing
    /// why) when there is no `redis-server`.
    pub fn start() -> Option<RedisServer> {
        Self::start_node(false)
    }

    /// Starts a server on a free port and waits until it answers PING, or says why it could
    /// not, whether or not Redis is required.
    pub fn try_start() -> Result<RedisServer, StartError> {
        let (bin, major) = find_binary()?;
        Self::spawn_node(bin, major, false)
            .map_err(|e| StartError::Failed(format!("redis-server would not start: {e}")))
    }

    fn start_node(cluster: bool) -> Option<RedisServer> {
        let (bin, major) = binary()?;
        let server = Self::spawn_node(bin, major, cluster);
        Some(server.unwrap_or_else(|e| panic!("redis-server would not start: {e}")))
    }

    /// A server of `bin` on a free port, answering PING; the last error if none would start.
    fn spawn_node(bin: String, major: u32, cluster: bool) -> Result<RedisServer, String> {
        let mut last_error = String::new();
        // A port can be taken between finding it and the server binding it: try a few.
        for _ in 0..5 {
            let mut server = RedisServer {
                bin: bin.clone(),
                major,
                port: free_port(cluster),
                cluster,
                dir: TempDir::new(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// Starts the child on `self.port` and waits for its first PONG.
    fn spawn(&mut self) -> Result<(), String> {
        let log = self.dir.0.join("redis.log");
        let mut command = Command::new(&self.bin);
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir.0)
            .arg("--logfile")
            .arg(&log)
            .args(["--daemonize", "no"]);
        if self.major >= 7 {
            // Redis 7 refuses DEBUG (used by `stall`) unless allowed; loopback clients will do.
            command.args(["--enable-debug-command", "local"]);
        }
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(self.dir.0.join(format!("nodes-{}.conf", self.port)))
                .args(["--cluster-node-timeout", "5000"]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", self.bin))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "redis-server on port {} exited ({status}): {}",
                        self.port,
                        tail(&log)
                    ));
                }
            }
            let pong = request(self.port, &["PING"], Duration::from_millis(200));
            if matches!(&pong, Ok(Reply::Simple(s)) if s == "PONG") {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "redis-server on port {} did not answer PING within {START_DEADLINE:?} \
                     ({pong:?}): {}",
                    self.port,
                    tail(&log)
                ));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Sends one command and returns its reply; panics if the server cannot be reached.
    pub fn command(&self, args: &[&str]) -> Reply {
        request(self.port, args, REQUEST_TIMEOUT)
            .unwrap_or_else(|e| panic!("{args:?} to port {}: {e}", self.port))
    }

    /// Kills the server (SIGKILL: no goodbye to its clients) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again, on the same port and with an empty dataset; panics if it
    /// will not come back.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("restarting redis-server: {e}");
        }
    }

    /// Stalls the server for `duration` with `DEBUG SLEEP` (it answers nobody meanwhile), and
    /// returns once the stall has begun; join the handle to wait for its end. `duration`
    /// should be well above 100 ms: the stall is confirmed by a PING going unanswered that long.
    pub fn stall(&self, duration: Duration) -> JoinHandle<()> {
        let seconds = format!("{:.3}", duration.as_secs_f64());
        let stream = TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("connecting to port {}: {e}", self.port));
        send(&stream, &["DEBUG", "SLEEP", &seconds]).expect("sending DEBUG SLEEP");
        // The server may still answer others before it reads the DEBUG SLEEP: wait until a
        // PING goes unanswered.
        let deadline = Instant::now() + duration / 2;
        loop {
            match request(self.port, &["PING"], Duration::from_millis(100)) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                _ if Instant::now() > deadline => panic!("DEBUG SLEEP did not stall the server"),
                _ => {}
            }
        }
        thread::spawn(move || {
            let mut reader = BufReader::new(&stream);
            match read_reply(&mut reader) {
                Ok(Reply::Simple(ok)) if ok == "OK" => {}
                other => panic!("DEBUG SLEEP answered {other:?}"),
            }
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last lines of a log, for messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// A Redis Cluster of masters on loopback (no replicas), the slots split evenly among them.
pub struct RedisCluster {
    servers: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `masters` cluster-enabled servers, gives each its share of the slots, joins them
    /// and waits until every one reports `cluster_state:ok` and knows every master; `None`
    /// (after printing why) when there is no `redis-server`.
    pub fn start(masters: usize) -> Option<RedisCluster> {
        assert!(masters >= 1);
        let servers = (0..masters)
            .map(|_| RedisServer::start_node(true))
            .collect::<Option<Vec<_>>>()?;
        const SLOTS: usize = 16_384;
        for (i, server) in servers.iter().enumerate() {
            let (first, last) = (i * SLOTS / masters, (i + 1) * SLOTS / masters - 1);
            let slots: Vec<String> = (first..=last).map(|s| s.to_string()).collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            expect_ok(server.command(&args), "CLUSTER ADDSLOTS");
            // Distinct epochs from the start, so the nodes need not settle a collision.
            let epoch = (i + 1).to_string();
            expect_ok(
                server.command(&["CLUSTER", "SET-CONFIG-EPOCH", &epoch]),
                "CLUSTER SET-CONFIG-EPOCH",
            );
        }
        for server in &servers[1..] {
            let port = server.port.to_string();
            expect_ok(
                servers[0].command(&["CLUSTER", "MEET", "127.0.0.1", &port]),
                "CLUSTER MEET",
            );
        }
        let cluster = RedisCluster { servers };
        let deadline = Instant::now() + START_DEADLINE;
        while !cluster.is_ready() {
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready within {START_DEADLINE:?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
        Some(cluster)
    }

    /// Whether every node says the cluster is ok and lists every master in `CLUSTER SLOTS`.
    fn is_ready(&self) -> bool {
        self.servers.iter().all(|server| {
            let info = server.command(&["CLUSTER", "INFO"]).text();
            let slots = server.command(&["CLUSTER", "SLOTS"]);
            info.contains("cluster_state:ok") && slots.array().len() == self.servers.len()
        })
    }

    /// The URLs of the masters.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The masters, in the order of their slots.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The `i`-th master, to kill or restart it (a restarted master keeps its node id and
    /// slots, from its cluster config file, but not its data).
    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// The master serving `slot`, as `start` assigned the slots.
    pub fn server_of_slot(&self, slot: u16) -> &RedisServer {
        let masters = self.servers.len();
        let i = (0..masters)
            .find(|i| usize::from(slot) < (i + 1) * 16_384 / masters)
            .expect("a slot below 16384");
        &self.servers[i]
    }

    /// The slot of `key`, as the cluster computes it.
    pub fn keyslot(&self, key: &str) -> u16 {
        let slot = self.servers[0].command(&["CLUSTER", "KEYSLOT", key]).int();
        u16::try_from(slot).expect("a slot")
    }
}

fn expect_ok(reply: Reply, what: &str) {
    assert_eq!(reply, Reply::Simple("OK".into()), "{what}");
}
