//! Runs the proxy binary on 127.0.0.1 in front of a tiny origin, floods one host through it
//! and checks what the flood and a quiet host get back.
//!
//! Everything stays on loopback, every loop is bounded in requests and in time, and the proxy
//! process is killed and reaped when the test ends, pass or fail.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The proxy's limits in this test: per host, 50 requests per 1 s window and 4 in flight.
const MAX_RATE: usize = 50;
const WINDOW: Duration = Duration::from_secs(1);
const MAX_INFLIGHT: usize = 4;

/// The flood: more concurrent clients than `MAX_INFLIGHT`, each sending at least
/// `FLOOD_MIN` requests and at most `FLOOD_MAX`.
const FLOOD_WORKERS: usize = 8;
const FLOOD_MIN: usize = 25;
const FLOOD_MAX: usize = 150;
/// Spellings of the flooded host: the proxy must count them as one host.
const FLOODED: [&str; 6] = [
    "flooded.test",
    "FLOODED.TEST:80",
    "Flooded.Test:8080",
    "flooded.TEST",
    "fLOODED.test:1",
    "FlOoDeD.tEsT",
];
/// The quiet host's requests, one at a time: more than `MAX_INFLIGHT` (so the permits must be
/// given back) and fewer than `MAX_RATE`.
const QUIET: &str = "Quiet.Test:8080";
const QUIET_REQUESTS: usize = 20;

/// How long any one socket operation, and the proxy's start, may take before the test fails.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The origin: answers `200 ok` to every request and counts them per host (lower-cased, port
/// dropped), so the test can tell which requests reached it. Requests for [`HELD`] are
/// announced on `arrivals` and held until the test opens `gate`.
struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<HashMap<String, usize>>>,
    gate: Arc<Gate>,
    arrivals: mpsc::Receiver<()>,
}

/// The host whose requests the origin holds.
const HELD: &str = "held.test";

impl Origin {
    fn start() -> Origin {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind the origin");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let gate = Arc::new(Gate::default());
        let (arrived, arrivals) = mpsc::channel();
        let (counts, held) = (Arc::clone(&seen), Arc::clone(&gate));
        // Accepts until the test process exits.
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (counts, held, arrived) =
                    (Arc::clone(&counts), Arc::clone(&held), arrived.clone());
                thread::spawn(move || {
                    let _ = serve_one(stream, &counts, &held, &arrived);
                });
            }
        });
        Origin {
            addr,
            seen,
            gate,
            arrivals,
        }
    }

    fn requests_for(&self, host: &str) -> usize {
        self.seen.lock().unwrap().get(host).copied().unwrap_or(0)
    }
}

/// Closed until opened, once; waiting for it gives up after [`IO_TIMEOUT`].
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let open = self.open.lock().unwrap();
        let _ = self
            .opened
            .wait_timeout_while(open, IO_TIMEOUT, |open| !*open);
    }
}

/// One request on one connection: read its head, count its host, answer and close.
fn serve_one(
    stream: TcpStream,
    counts: &Mutex<HashMap<String, usize>>,
    gate: &Gate,
    arrived: &mpsc::Sender<()>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(&stream);
    let (_, headers) = read_head(&mut reader)?;
    let host = headers.get("host").cloned().unwrap_or_default();
    let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
    *counts.lock().unwrap().entry(host.clone()).or_default() += 1;
    if host == HELD {
        let _ = arrived.send(());
        gate.wait();
    }
    (&stream).write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
}

/// Reads an HTTP/1 message head: its first line and its headers, names lower-cased.
fn read_head(reader: &mut impl BufRead) -> std::io::Result<(String, HashMap<String, String>)> {
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((first.trim_end().to_string(), headers));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
}

/// The tests run one at a time: each picks free ports and starts a proxy, and two doing so at
/// once can be handed the same port (it is free again once the first has let it go, until
/// its proxy binds it).
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The proxy binary as a child process, killed and reaped on drop.
struct Proxy {
    child: Child,
    addr: SocketAddr,
}

/// The host of the request that checks a new proxy is ours.
const PROBE: &str = "probe.test";

impl Proxy {
    /// Starts the proxy on a free loopback port in front of `origin`, and returns once it
    /// answers there.
    fn start(origin: &Origin) -> Proxy {
        Proxy::start_with(origin, &[])
    }

    /// As [`start`](Self::start), with more flags.
    fn start_with(origin: &Origin, flags: &[&str]) -> Proxy {
        for _attempt in 0..3 {
            // A free port: bound by us, then let go for the proxy to bind. Another process can
            // take it in between (pingora then retries its bind for a while, and our probe
            // reaches the other server): check that the proxy answering is ours, by a request
            // that must reach our origin, and try another port if not.
            let addr = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("find a free port");
            let child = Command::new(env!("CARGO_BIN_EXE_floodgate-pingora-proxy"))
                .arg("--listen")
                .arg(addr.to_string())
                .arg("--upstream")
                .arg(origin.addr.to_string())
                .arg("--max-inflight")
                .arg(MAX_INFLIGHT.to_string())
                .arg("--max-rate")
                .arg(MAX_RATE.to_string())
                .args(flags)
                .spawn()
                .expect("start the proxy");
            let mut proxy = Proxy { child, addr };
            proxy.wait_until_listening();
            let before = origin.requests_for(PROBE);
            let reply = get(addr, PROBE);
            if reply.status == 200 && origin.requests_for(PROBE) == before + 1 {
                return proxy;
            }
            eprintln!("{addr} is answered by another server ({reply:?}); trying another port");
        }
        panic!("three free ports in a row were taken by another server");
    }

    /// Polls until the proxy accepts connections; fails if it exits or takes too long.
    fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the proxy exited before listening: {status}");
            }
            // A connection to a port nobody listens on yet can land on itself (a TCP
            // "self-connect", when the kernel picks that very port as the source): not ready.
            if let Ok(probe) = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)) {
                if probe.local_addr().ok() != probe.peer_addr().ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the proxy is not listening on {} after {START_TIMEOUT:?}",
                self.addr
            );
            thread::sleep(Duration::from_millis(20)); // the poll's pace, not a wait for it
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            eprintln!("the proxy on {} had exited by itself: {status}", self.addr);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    retry_after: Option<String>,
    headers: HashMap<String, String>,
    body: String,
}

/// One GET through the proxy, on its own connection, with `host` as its Host header.
fn get(proxy: SocketAddr, host: &str) -> Reply {
    send(proxy, "GET / HTTP/1.1", host, &[], "")
}

/// One request on its own connection: its first line, `host`, more fields, and `body` (sent
/// as is: with a `content-length` field, or chunked, as the fields say).
fn send(proxy: SocketAddr, first: &str, host: &str, fields: &[(&str, &str)], body: &str) -> Reply {
    let stream = TcpStream::connect_timeout(&proxy, IO_TIMEOUT).expect("connect to the proxy");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut head = format!("{first}\r\nhost: {host}\r\nconnection: close\r\n");
    for (name, value) in fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    write!(&stream, "{head}\r\n{body}").expect("send the request");
    let mut reader = BufReader::new(&stream);
    let (status_line, headers) = read_head(&mut reader).expect("read the response head");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {status_line:?}"));
    let mut body = Vec::new();
    match headers.get("content-length") {
        Some(length) => {
            body.resize(length.parse().expect("a numeric content-length"), 0);
            reader.read_exact(&mut body).expect("read the body");
        }
        None => {
            reader.read_to_end(&mut body).expect("read the body");
        }
    }
    Reply {
        status,
        retry_after: headers.get("retry-after").cloned(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

#[test]
fn a_flooded_host_gets_503_and_a_quiet_host_is_still_served() {
    let _serial = one_at_a_time();
    let origin = Origin::start();
    let proxy = Proxy::start(&origin);
    let proxy_addr = proxy.addr;

    let quiet_done = Arc::new(AtomicBool::new(false));
    let flooding = Arc::new(AtomicUsize::new(FLOOD_WORKERS));
    let (first_503_tx, first_503) = mpsc::channel::<()>();

    let started = Instant::now();
    let workers: Vec<_> = (0..FLOOD_WORKERS)
        .map(|w| {
            let (quiet_done, flooding) = (Arc::clone(&quiet_done), Arc::clone(&flooding));
            let first_503_tx = first_503_tx.clone();
            thread::spawn(move || {
                let mut replies = Vec::new();
                // Keep flooding until the quiet host is done, within FLOOD_MIN..=FLOOD_MAX.
                while replies.len() < FLOOD_MAX
                    && (replies.len() < FLOOD_MIN || !quiet_done.load(Ordering::SeqCst))
                {
                    let host = FLOODED[(w + replies.len()) % FLOODED.len()];
                    let reply = get(proxy_addr, host);
                    if reply.status == 503 {
                        let _ = first_503_tx.send(());
                    }
                    replies.push(reply);
                }
                flooding.fetch_sub(1, Ordering::SeqCst);
                replies
            })
        })
        .collect();
    drop(first_503_tx);

    // The quiet host starts once the flood is being refused, and must be served throughout.
    let flood_refused = first_503.recv_timeout(IO_TIMEOUT).is_ok();
    let quiet: Vec<Reply> = (0..QUIET_REQUESTS)
        .map(|_| get(proxy_addr, QUIET))
        .collect();
    let flood_still_running = flooding.load(Ordering::SeqCst) > 0;
    quiet_done.store(true, Ordering::SeqCst);

    let flood: Vec<Reply> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("a flood worker panicked"))
        .collect();
    let elapsed = started.elapsed();

    let ok = flood.iter().filter(|r| r.status == 200).count();
    let refused: Vec<&Reply> = flood.iter().filter(|r| r.status == 503).collect();
    eprintln!(
        "flood: {} requests in {elapsed:?}: {ok} × 200, {} × 503; quiet: {:?}",
        flood.len(),
        refused.len(),
        quiet.iter().map(|r| r.status).collect::<Vec<_>>()
    );

    assert!(flood_refused, "no 503 within {IO_TIMEOUT:?} of flooding");
    assert!(
        flood_still_running,
        "the flood ended before the quiet host's requests did"
    );
    let others: Vec<&Reply> = flood
        .iter()
        .filter(|r| r.status != 200 && r.status != 503)
        .collect();
    assert!(others.is_empty(), "neither 200 nor 503: {others:?}");

    // Every rate 503 says when to come back: a whole number of seconds, at least 1. An
    // in-flight one does not (a slot frees when another request ends, at no known time).
    for reply in &refused {
        assert!(
            reply.body.contains("would exceed the limit"),
            "a 503 not from the limiter: {reply:?}"
        );
        if reply.body.contains("in flight") {
            assert_eq!(reply.retry_after, None, "{reply:?}");
            continue;
        }
        let secs: u64 = reply
            .retry_after
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("a rate 503 without a numeric Retry-After: {reply:?}"));
        assert!(secs >= 1, "Retry-After {secs} in {reply:?}");
    }

    // The limiter admits a request only if its host's sliding-window count, which is at least
    // the count of the current fixed window, stays within MAX_RATE: so each fixed window admits
    // at most MAX_RATE requests. Its windows follow a coarse clock that lags real time by
    // about one 10 ms tick; allowing it a whole window of lag, a run of `elapsed` touches at
    // most ceil(elapsed / WINDOW) + 2 windows. All spellings of the flooded host count as one
    // (counted apart, FLOODED.len() × MAX_RATE could be admitted in a short run).
    let windows = elapsed.as_nanos().div_ceil(WINDOW.as_nanos()) as usize + 2;
    assert!(ok >= 1, "the flooded host was never served");
    assert!(
        ok <= MAX_RATE * windows,
        "{ok} requests admitted in {elapsed:?}, over {MAX_RATE} × {windows} windows"
    );
    // The admitted requests, and only they, reached the origin.
    assert_eq!(origin.requests_for("flooded.test"), ok);

    // The quiet host was served every time, though the flood was being refused meanwhile and
    // though it sent more requests than MAX_INFLIGHT (each permit was given back).
    for reply in &quiet {
        assert_eq!(reply.status, 200, "the quiet host was refused: {reply:?}");
        assert_eq!(reply.body, "ok");
    }
    assert_eq!(origin.requests_for("quiet.test"), QUIET_REQUESTS);

    drop(proxy);
}

#[test]
fn a_request_holds_its_inflight_slot_until_it_is_answered() {
    let _serial = one_at_a_time();
    let origin = Origin::start();
    let proxy = Proxy::start(&origin);
    let proxy_addr = proxy.addr;

    // MAX_INFLIGHT requests for one host, held at the origin: the host is at its limit.
    let held: Vec<_> = (0..MAX_INFLIGHT)
        .map(|_| thread::spawn(move || get(proxy_addr, HELD)))
        .collect();
    for n in 0..MAX_INFLIGHT {
        let arrived = origin.arrivals.recv_timeout(IO_TIMEOUT);
        assert!(arrived.is_ok(), "only {n} held requests reached the origin");
    }

    // One more is refused without reaching the origin, without a Retry-After (no time is
    // known at which a slot frees) ...
    let refused = get(proxy_addr, HELD);
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.retry_after, None, "{refused:?}");
    assert!(refused.body.contains("in flight"), "{refused:?}");
    assert_eq!(origin.requests_for(HELD), MAX_INFLIGHT);
    // ... while another host is served.
    assert_eq!(get(proxy_addr, "other.test").status, 200);

    // Once the held requests are answered, their slots are free again. pingora drops a
    // request's context (and its permit) just after the response is sent, so poll a little,
    // slower than MAX_RATE, rather than expect the slot back at the very moment.
    origin.gate.open();
    for request in held {
        assert_eq!(request.join().unwrap().status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = get(proxy_addr, HELD);
        if reply.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the held requests' slots were not given back: {reply:?}"
        );
        thread::sleep(Duration::from_millis(50)); // the poll's pace
    }

    drop(proxy);
}

/// A free loopback port, let go for the proxy to bind.
fn free_port() -> SocketAddr {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("find a free port")
}

/// Polls until something accepts connections on `addr`, for at most [`START_TIMEOUT`].
fn wait_for(addr: SocketAddr) {
    let deadline = Instant::now() + START_TIMEOUT;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        thread::sleep(Duration::from_millis(20)); // the poll's pace
    }
}

#[test]
fn sigterm_stops_the_proxy_promptly() {
    let _serial = one_at_a_time();
    let origin = Origin::start();
    let mut proxy = Proxy::start(&origin);
    let pid = proxy.child.id().to_string();
    let sent = Instant::now();
    let kill = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(kill.expect("run kill").success(), "kill -TERM {pid}");
    // Its grace for requests in flight is 1 s by default, and its runtimes get 1 s more.
    let bound = Duration::from_secs(5);
    let status = loop {
        if let Some(status) = proxy.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < bound,
            "the proxy still runs {bound:?} after SIGTERM"
        );
        thread::sleep(Duration::from_millis(20)); // the poll's pace
    };
    eprintln!("stopped {:?} after SIGTERM: {status}", sent.elapsed());
    assert!(status.success(), "{status}");
}

#[test]
fn limits_change_while_running_through_the_admin_listener_and_metrics_count() {
    let _serial = one_at_a_time();
    let origin = Origin::start();
    let admin = free_port();
    let proxy = Proxy::start_with(&origin, &["--admin", &admin.to_string()]);
    wait_for(admin);
    let proxy_addr = proxy.addr;

    // MAX_INFLIGHT held at the origin: one more is refused.
    let held: Vec<_> = (0..MAX_INFLIGHT)
        .map(|_| thread::spawn(move || get(proxy_addr, HELD)))
        .collect();
    for _ in 0..MAX_INFLIGHT {
        origin.arrivals.recv_timeout(IO_TIMEOUT).expect("held");
    }
    assert_eq!(get(proxy_addr, HELD).status, 503);

    // Bad limits are refused with why, and change nothing.
    let put = |body: &str| {
        let length = body.len().to_string();
        let fields = [("content-length", length.as_str())];
        send(admin, "PUT /limits HTTP/1.1", "admin", &fields, body)
    };
    let bad = put("max-inflight=0");
    assert_eq!(bad.status, 400, "{bad:?}");
    assert!(bad.body.contains("refused"), "{bad:?}");
    assert_eq!(put("max-inflight=lots").status, 400);
    assert_eq!(get(proxy_addr, HELD).status, 503);

    // One more slot: the next request goes through to the origin.
    let more = (MAX_INFLIGHT + 1).to_string();
    let set = put(&format!("max-inflight={more}"));
    assert_eq!(set.status, 200, "{set:?}");
    assert_eq!(
        set.body,
        format!("max-inflight={more} max-rate={MAX_RATE}\n")
    );
    let one_more = thread::spawn(move || get(proxy_addr, HELD));
    let arrived = origin.arrivals.recv_timeout(IO_TIMEOUT);
    assert!(arrived.is_ok(), "the new limit let no request through");

    let metrics = send(admin, "GET /metrics HTTP/1.1", "admin", &[], "");
    assert_eq!(metrics.status, 200);
    for line in [
        "floodgate_proxy_requests_total{outcome=\"inflight\"} 2\n",
        &format!("floodgate_proxy_limit{{kind=\"inflight\"}} {more}\n"),
    ] {
        assert!(metrics.body.contains(line), "{line} in {}", metrics.body);
    }
    origin.gate.open();
    for request in held.into_iter().chain([one_more]) {
        assert_eq!(request.join().unwrap().status, 200);
    }
    drop(proxy);
}

#[test]
fn client_keys_costs_and_fields_over_loopback() {
    let _serial = one_at_a_time();
    let origin = Origin::start();

    // Keyed by client, trusting no proxy: a client that spoofs X-Forwarded-For is still one
    // client (the probe, and then ours, all from 127.0.0.1), answered 429 with its body.
    let proxy = Proxy::start_with(
        &origin,
        &[
            "--key=client",
            "--refusal-status=429",
            "--refusal-body=text:slow down",
            "--max-rate=3",
        ],
    );
    let replies: Vec<Reply> = (0..6)
        .map(|n| {
            let spoofed = format!("192.0.2.{n}");
            send(
                proxy.addr,
                "GET / HTTP/1.1",
                "a.test",
                &[("x-forwarded-for", &spoofed)],
                "",
            )
        })
        .collect();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert!(refused.len() >= 3, "{replies:?}");
    assert!(refused.iter().all(|r| r.body == "slow down"), "{refused:?}");
    drop(proxy);

    // Trusting the loopback proxy: each forwarded client has its own limit.
    let proxy = Proxy::start_with(
        &origin,
        &["--key=client", "--trust=127.0.0.1", "--max-rate=3"],
    );
    for n in 0..6 {
        let client = format!("192.0.2.{n}");
        let reply = send(
            proxy.addr,
            "GET / HTTP/1.1",
            "a.test",
            &[("x-forwarded-for", &client)],
            "",
        );
        assert_eq!(reply.status, 200, "{client}: {reply:?}");
    }
    drop(proxy);

    // Body bytes, at most MAX_RATE a second; the fields on admitted responses.
    let proxy = Proxy::start_with(
        &origin,
        &[
            "--cost=body-bytes",
            "--ratelimit-on-admitted=on",
            "--policy-names=bytes,bytes-in-flight",
        ],
    );
    let post = |fields: &[(&str, &str)], body: &str| {
        send(proxy.addr, "POST / HTTP/1.1", "b.test", fields, body)
    };
    let small = post(&[("content-length", "2")], "hi");
    assert_eq!(small.status, 200, "{small:?}");
    let policy = small
        .headers
        .get("ratelimit-policy")
        .cloned()
        .unwrap_or_default();
    assert!(policy.starts_with("\"bytes\";q=50;w=1"), "{small:?}");
    let large = "x".repeat(MAX_RATE + 1);
    let too_large = post(&[("content-length", &large.len().to_string())], &large);
    assert_eq!(too_large.status, 413, "{too_large:?}");
    assert_eq!(too_large.retry_after, None);
    assert!(
        too_large.body.contains("retrying it will not help"),
        "{too_large:?}"
    );
    let chunked = post(&[("transfer-encoding", "chunked")], "2\r\nhi\r\n0\r\n\r\n");
    assert_eq!(chunked.status, 411, "{chunked:?}");
    assert!(chunked.body.contains("Content-Length"), "{chunked:?}");
    drop(proxy);
}
