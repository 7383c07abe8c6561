//! The requests per origin class and their outcomes, and per healthy origin its requests and
//! how many it had in flight at most.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};

use hyper::StatusCode;

use crate::origins::{Class, HEALTHY_ORIGINS};

/// The requests of one class and their outcomes: as its clients saw them (the demo), or as
/// the server answered them (the soak server).
#[derive(Default)]
pub struct Tally {
    pub requests: AtomicU64,
    pub ok: AtomicU64,
    /// 503 for the rate limit (clients tell it by its `Retry-After`).
    pub rejected_rate: AtomicU64,
    /// 503 for the in-flight limit.
    pub rejected_inflight: AtomicU64,
    /// Anything else: other statuses, and for clients transport errors and timeouts.
    pub errors: AtomicU64,
}

impl Tally {
    pub fn record(&self, status: StatusCode, rate_limited: bool) {
        let counter = match status {
            StatusCode::OK => &self.ok,
            StatusCode::SERVICE_UNAVAILABLE if rate_limited => &self.rejected_rate,
            StatusCode::SERVICE_UNAVAILABLE => &self.rejected_inflight,
            _ => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Requests, 200s, 503s for the rate, 503s for in-flight, errors.
    pub fn counts(&self) -> [u64; 5] {
        let counters = [
            &self.requests,
            &self.ok,
            &self.rejected_rate,
            &self.rejected_inflight,
            &self.errors,
        ];
        counters.map(|n| n.load(Relaxed))
    }

    pub fn rejected(&self) -> u64 {
        self.rejected_rate.load(Relaxed) + self.rejected_inflight.load(Relaxed)
    }
}

pub struct Stats {
    pub healthy: Tally,
    pub slow: Tally,
    pub flooded: Tally,
    pub rotating: Tally,
    pub other: Tally,
    /// Per healthy origin: requests sent, and in flight now / at most, to show that each
    /// stayed far under both limits.
    pub healthy_requests: Vec<AtomicU32>,
    healthy_inflight: Vec<AtomicI64>,
    pub healthy_peak_inflight: AtomicI64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            healthy: Tally::default(),
            slow: Tally::default(),
            flooded: Tally::default(),
            rotating: Tally::default(),
            other: Tally::default(),
            healthy_requests: (0..HEALTHY_ORIGINS).map(|_| AtomicU32::new(0)).collect(),
            healthy_inflight: (0..HEALTHY_ORIGINS).map(|_| AtomicI64::new(0)).collect(),
            healthy_peak_inflight: AtomicI64::new(0),
        }
    }
}

impl Stats {
    pub fn tally(&self, class: Class) -> &Tally {
        match class {
            Class::Healthy => &self.healthy,
            Class::Slow => &self.slow,
            Class::Flooded => &self.flooded,
            Class::Rotating => &self.rotating,
            Class::Other => &self.other,
        }
    }

    pub fn total(&self, f: impl Fn(&Tally) -> u64) -> u64 {
        [
            &self.healthy,
            &self.slow,
            &self.flooded,
            &self.rotating,
            &self.other,
        ]
        .into_iter()
        .map(f)
        .sum()
    }

    /// A request for healthy origin `i` starts.
    pub fn healthy_start(&self, i: usize) {
        self.healthy_requests[i].fetch_add(1, Relaxed);
        let now = self.healthy_inflight[i].fetch_add(1, Relaxed) + 1;
        self.healthy_peak_inflight.fetch_max(now, Relaxed);
    }

    /// A request for healthy origin `i` has its answer.
    pub fn healthy_end(&self, i: usize) {
        self.healthy_inflight[i].fetch_sub(1, Relaxed);
    }

    /// Requests sent to the busiest healthy origin.
    pub fn busiest_healthy(&self) -> u32 {
        let requests = self.healthy_requests.iter().map(|n| n.load(Relaxed));
        requests.max().unwrap_or(0)
    }
}
