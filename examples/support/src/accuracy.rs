//! The exact models the accuracy example (examples/accuracy.rs) holds each decision procedure
//! to: per origin, what the procedure admitted in the current and the previous window, and
//! the over-rejections and violations that makes of its decisions; and per origin what was
//! offered, which tells a collision from the sketch counting offered load.

use std::collections::HashMap;

/// Slack for the floating-point sliding counts.
const EPS: f64 = 1e-9;

/// Requests of one origin in its latest window and the one before.
#[derive(Default, Clone, Copy)]
struct Window {
    bucket: u64,
    prev: isize,
    curr: isize,
}

/// Requests per origin per window.
#[derive(Default)]
struct Exact {
    keys: HashMap<u64, Window>,
}

impl Exact {
    /// The sliding count of `key` with one more, at `bucket`, `fraction`.
    fn with_one_more(&mut self, key: u64, bucket: u64, fraction: f64) -> f64 {
        let w = self.keys.entry(key).or_default();
        if bucket > w.bucket {
            w.prev = if bucket == w.bucket + 1 { w.curr } else { 0 };
            w.curr = 0;
            w.bucket = bucket;
        }
        w.prev as f64 * (1.0 - fraction) + (w.curr + 1) as f64
    }

    fn add(&mut self, key: u64) {
        if let Some(w) = self.keys.get_mut(&key) {
            w.curr += 1;
        }
    }

    /// Forgets origins with nothing in the last two windows, so the model stays small.
    fn forget_before(&mut self, bucket: u64) {
        self.keys.retain(|_, w| w.bucket + 1 >= bucket);
    }
}

/// One decision procedure held to an exact model of what it admitted: an over-rejection is a
/// rejected request that the model would have admitted (its sliding count of admitted
/// requests, this one included, at or under the limit); a violation is an admitted request
/// the model says is over the limit.
pub struct Judge {
    limit: f64,
    admitted: Exact,
    pub rejected: u64,
    pub over_rejected: u64,
    pub violations: u64,
}

impl Judge {
    pub fn new(limit: u32) -> Judge {
        Judge {
            limit: f64::from(limit),
            admitted: Exact::default(),
            rejected: 0,
            over_rejected: 0,
            violations: 0,
        }
    }

    /// Judges the decision on a request of `key`, made `fraction` into window `bucket`.
    pub fn judge(&mut self, key: u64, bucket: u64, fraction: f64, admitted: bool) {
        let sliding = self.admitted.with_one_more(key, bucket, fraction);
        if admitted {
            self.admitted.add(key);
            if sliding > self.limit + EPS {
                self.violations += 1;
            }
        } else {
            self.rejected += 1;
            if sliding <= self.limit - EPS {
                self.over_rejected += 1;
            }
        }
    }

    /// Window `bucket` has begun.
    pub fn new_window(&mut self, bucket: u64) {
        self.admitted.forget_before(bucket);
    }
}

/// Every request offered per origin, admitted or not.
pub struct Offered {
    limit: f64,
    offered: Exact,
}

impl Offered {
    pub fn new(limit: u32) -> Offered {
        Offered {
            limit: f64::from(limit),
            offered: Exact::default(),
        }
    }

    /// Counts a request of `key`, made `fraction` into window `bucket`: whether its origin's
    /// sliding count of offered requests, this one included, is at or under the limit.
    pub fn offer(&mut self, key: u64, bucket: u64, fraction: f64) -> bool {
        let sliding = self.offered.with_one_more(key, bucket, fraction);
        self.offered.add(key);
        sliding <= self.limit - EPS
    }

    /// Window `bucket` has begun.
    pub fn new_window(&mut self, bucket: u64) {
        self.offered.forget_before(bucket);
    }
}
