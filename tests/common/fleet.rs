//! Traffic for the fleet's tests (feature `redis`): paced requests through several nodes on
//! threads of their own while the test does something else (kills Redis, stalls it, drops a
//! node), and what each node decided, sliced by Unix time so that the tally lines up with the
//! fleet's windows (aligned to the Unix epoch).
//!
//! The tally is allocated in full before the traffic starts, so that the traffic threads
//! allocate nothing while they run: a test can watch the process's heap for growth.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate::{Limiter, Reason};

/// The rate window of the fleet's tests.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The tally's resolution: what a node decided is summed over slices of this much Unix time.
pub const SLICE_MS: u64 = 100;

/// The longest traffic a tally has room for.
const MAX_RUN: Duration = Duration::from_secs(60);

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// The number of the Unix-aligned window of [`WINDOW`] in progress: the one a fleet names it by.
pub fn unix_window() -> u64 {
    unix_ms() / WINDOW.as_millis() as u64
}

/// The Unix time (ms) at which window `window` begins.
pub fn window_start_ms(window: u64) -> u64 {
    window * WINDOW.as_millis() as u64
}

/// Sleeps until window `window` has begun (pacing: the traffic runs meanwhile).
pub fn sleep_until_window(window: u64) {
    let start = window_start_ms(window);
    let now = unix_ms();
    if start > now {
        thread::sleep(Duration::from_millis(start - now));
    }
    // SystemTime and the sleep's clock may differ by a hair: finish on the Unix clock.
    while unix_window() < window {
        thread::sleep(Duration::from_millis(1));
    }
}

/// One stream of requests: `per_second` requests of `key`, evenly spaced, through the node at
/// index `node` of the nodes given to [`Traffic::start`].
#[derive(Debug, Clone)]
pub struct Flow {
    pub node: usize,
    pub key: String,
    pub per_second: u32,
}

impl Flow {
    pub fn new(node: usize, key: &str, per_second: u32) -> Flow {
        Flow {
            node,
            key: key.to_owned(),
            per_second,
        }
    }
}

/// What one flow's requests met during one slice of Unix time.
#[derive(Debug, Clone, Copy, Default)]
pub struct Slice {
    /// Requests decided (admitted or refused).
    pub decided: u32,
    pub admitted: u32,
    /// Refusals for another reason than the rate: an error on the request path.
    pub errors: u32,
    /// The slowest `try_acquire`.
    pub slowest: Duration,
}

/// One flow's slices, from the slice of the traffic's start on.
#[derive(Debug, Clone)]
pub struct FlowTally {
    pub flow: Flow,
    /// The Unix slice (ms ÷ [`SLICE_MS`]) of `slices[0]`.
    pub first: u64,
    pub slices: Vec<Slice>,
}

impl FlowTally {
    /// The slices overlapping `[from_ms, to_ms]` of Unix time.
    fn between(&self, from_ms: u64, to_ms: u64) -> impl Iterator<Item = &Slice> {
        let (from, to) = (from_ms / SLICE_MS, to_ms / SLICE_MS);
        let first = self.first;
        self.slices
            .iter()
            .enumerate()
            .map(move |(i, s)| (first + i as u64, s))
            .filter(move |&(n, _)| n >= from && n <= to)
            .map(|(_, s)| s)
    }
}

/// Paced traffic running on one thread per node until [`Traffic::stop`].
pub struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<FlowTally>>>,
}

impl Traffic {
    /// Starts the `flows` through `nodes` (a flow's `node` is an index into `nodes`), each
    /// node's flows interleaved on one thread by their due times. A thread that falls behind
    /// (a busy machine) catches up as fast as it can, as a proxy under a backlog would.
    pub fn start(nodes: &[Limiter<String>], flows: &[Flow]) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, limiter)| {
                let mine: Vec<Flow> = flows.iter().filter(|f| f.node == i).cloned().collect();
                if mine.is_empty() {
                    return None;
                }
                let (limiter, stop) = (limiter.clone(), Arc::clone(&stop));
                Some(thread::spawn(move || run(&limiter, mine, &stop)))
            })
            .collect();
        Traffic { stop, threads }
    }

    /// Stops the traffic and returns what it met, flow by flow; panics (with the thread's
    /// message) if a traffic thread panicked, that is if a decision panicked.
    pub fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let mut flows = Vec::new();
        for thread in self.threads {
            match thread.join() {
                Ok(tallies) => flows.extend(tallies),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Tally { flows }
    }
}

fn run(limiter: &Limiter<String>, flows: Vec<Flow>, stop: &AtomicBool) -> Vec<FlowTally> {
    let began = Instant::now();
    let first = unix_ms() / SLICE_MS;
    let room = (MAX_RUN.as_millis() as u64 / SLICE_MS) as usize;
    let mut tallies: Vec<FlowTally> = flows
        .into_iter()
        .map(|flow| FlowTally {
            flow,
            first,
            slices: vec![Slice::default(); room],
        })
        .collect();
    let gaps: Vec<Duration> = tallies
        .iter()
        .map(|t| Duration::from_secs(1) / t.flow.per_second.max(1))
        .collect();
    // The number of requests each flow has sent; the next is due at `began + gap × sent`.
    let mut sent = vec![0u32; tallies.len()];
    while !stop.load(Ordering::Relaxed) && began.elapsed() < MAX_RUN {
        let (f, due) = (0..tallies.len())
            .map(|f| (f, began + gaps[f] * sent[f]))
            .min_by_key(|&(_, due)| due)
            .expect("at least one flow");
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let tally = &mut tallies[f];
        let before = Instant::now();
        let decision = limiter.try_acquire(&tally.flow.key);
        let took = before.elapsed();
        let slice = (unix_ms() / SLICE_MS).saturating_sub(first) as usize;
        if let Some(s) = tally.slices.get_mut(slice) {
            s.decided += 1;
            s.slowest = s.slowest.max(took);
            match &decision {
                Ok(_) => s.admitted += 1,
                Err(rejected) if rejected.reason == Reason::Rate => {}
                Err(_) => s.errors += 1,
            }
        }
        drop(decision);
        sent[f] += 1;
    }
    tallies
}

/// What a [`Traffic`] met, flow by flow.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub flows: Vec<FlowTally>,
}

impl Tally {
    /// Both tallies' flows (traffic through different nodes, stopped at different times).
    pub fn merged(mut self, other: Tally) -> Tally {
        self.flows.extend(other.flows);
        self
    }

    fn matching<'a>(
        &'a self,
        key: &'a str,
        node: Option<usize>,
    ) -> impl Iterator<Item = &'a FlowTally> + 'a {
        self.flows
            .iter()
            .filter(move |t| t.flow.key == key && node.map_or(true, |n| t.flow.node == n))
    }

    /// Requests of `key` decided and admitted in Unix window `window`, through node `node` or
    /// (`None`) through every node.
    pub fn counts(&self, key: &str, node: Option<usize>, window: u64) -> (u64, u64) {
        let (from, to) = (
            window_start_ms(window),
            window_start_ms(window + 1) - SLICE_MS,
        );
        self.matching(key, node)
            .flat_map(|t| t.between(from, to))
            .fold((0, 0), |(decided, admitted), s| {
                (
                    decided + u64::from(s.decided),
                    admitted + u64::from(s.admitted),
                )
            })
    }

    /// Requests of `key` admitted in Unix window `window` (`node`: as in
    /// [`counts`](Self::counts)).
    pub fn admitted(&self, key: &str, node: Option<usize>, window: u64) -> u64 {
        self.counts(key, node, window).1
    }

    /// The admissions of `key` (`node`: as in [`admitted`](Self::admitted)) in each window of
    /// `windows`, for messages.
    pub fn per_window(
        &self,
        key: &str,
        node: Option<usize>,
        windows: impl IntoIterator<Item = u64>,
    ) -> Vec<(u64, u64)> {
        windows
            .into_iter()
            .map(|w| (w, self.admitted(key, node, w)))
            .collect()
    }

    /// The Unix windows the traffic ran through, its first and last partial ones included.
    pub fn windows(&self) -> RangeInclusive<u64> {
        let slices_per_window = WINDOW.as_millis() as u64 / SLICE_MS;
        let used = |t: &FlowTally| {
            let last = t.slices.iter().rposition(|s| s.decided > 0).unwrap_or(0);
            (t.first, t.first + last as u64)
        };
        let first = self.flows.iter().map(|t| used(t).0).min().unwrap_or(0);
        let last = self.flows.iter().map(|t| used(t).1).max().unwrap_or(0);
        first / slices_per_window..=last / slices_per_window
    }

    /// Requests decided through node `node` (every flow of it) in the slices overlapping
    /// `[from_ms, to_ms]` of Unix time.
    pub fn decided(&self, node: usize, from_ms: u64, to_ms: u64) -> u64 {
        self.flows
            .iter()
            .filter(|t| t.flow.node == node)
            .flat_map(|t| t.between(from_ms, to_ms))
            .map(|s| u64::from(s.decided))
            .sum()
    }

    /// The slowest decision of any flow in the slices overlapping `[from_ms, to_ms]`, and the
    /// number of decisions there.
    pub fn slowest(&self, from_ms: u64, to_ms: u64) -> (Duration, u64) {
        self.flows
            .iter()
            .flat_map(|t| t.between(from_ms, to_ms))
            .fold((Duration::ZERO, 0), |(slowest, n), s| {
                (slowest.max(s.slowest), n + u64::from(s.decided))
            })
    }

    /// Decisions that were neither an admission nor a rate refusal, over the whole run.
    pub fn errors(&self) -> u64 {
        self.flows
            .iter()
            .flat_map(|t| &t.slices)
            .map(|s| u64::from(s.errors))
            .sum()
    }
}

/// Live threads of this process whose name starts with `prefix` (Linux keeps the first 15
/// bytes), or `None` where /proc is not available.
pub fn threads_named(prefix: &str) -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with(prefix))
            .count(),
    )
}

/// Open file descriptors of this process, or `None` where /proc is not available.
pub fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}
