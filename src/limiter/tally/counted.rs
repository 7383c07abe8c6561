//! With the `metrics` feature: the decisions counted per thread, and published with the
//! gauges through the `metrics` facade by the limiter's clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crossbeam_utils::CachePadded;
use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use super::gauges::Gauges;
use super::slot::{self, SHARED, SLOTS};
use crate::limiter::{Reason, Rejected};

/// Counters of one thread: admitted, near the limit, then refused and refused in shadow by
/// reason, then the requests the tower layer could not key, refused and served.
const ADMITTED: usize = 0;
const NEAR: usize = 1;
const REFUSED: usize = 2;
const SHADOW: usize = REFUSED + REASONS.len();
const UNKEYED_REFUSED: usize = SHADOW + REASONS.len();
const UNKEYED_SERVED: usize = UNKEYED_REFUSED + 1;
const KINDS: usize = UNKEYED_SERVED + 1;

type Counts = [AtomicU64; KINDS];

/// The counters of every thread's slot, the totals published so far, and the limiter's
/// label.
pub(crate) struct Tally {
    slots: Box<[CachePadded<Counts>]>,
    /// What `publish` has added to the recorder's counters, per kind: it adds the difference
    /// (not `absolute`, which recorders keep as a maximum, so that a limiter rebuilt under
    /// the same name, or two sharing one, would publish the larger total instead of the sum).
    /// Only the limiter's clock publishes; the lock is never contended.
    published: Mutex<[u64; KINDS]>,
    name: String,
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tally")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Tally {
    /// Whether anything is counted: near-limit admissions are worked out only if so.
    pub(crate) const ON: bool = true;

    /// Counters for the limiter labelled `name`, and the metrics' descriptions.
    pub(crate) fn new(name: &str) -> Self {
        describe();
        let slots = (0..=SLOTS)
            .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect();
        Tally {
            slots,
            published: Mutex::new([0; KINDS]),
            name: name.to_owned(),
        }
    }

    /// Counts one in this thread's slot.
    #[inline]
    fn count(&self, kind: usize) {
        let slot = slot::current();
        let counter = &self.slots[slot][kind];
        if slot == SHARED {
            counter.fetch_add(1, Ordering::Relaxed);
        } else {
            // Only this thread writes its slot (see `slot`): a plain load and store lose
            // nothing, and cost no locked instruction. Relaxed: the clock only sums totals.
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
        }
    }

    /// An admitted request.
    #[inline]
    pub(crate) fn admitted(&self) {
        self.count(ADMITTED);
    }

    /// An admitted request whose key's count reached [`super::NEAR_LIMIT`] of a limit.
    pub(crate) fn near(&self) {
        self.count(NEAR);
    }

    /// A refused request, or in `shadow` one admitted that its limits refuse.
    #[inline]
    pub(crate) fn refused(&self, rejected: &Rejected, shadow: bool) {
        let base = if shadow { SHADOW } else { REFUSED };
        self.count(base + reason_index(rejected.reason));
    }

    /// A request the tower layer could not key, refused or `served` unlimited (it never
    /// reached a decision).
    pub(crate) fn unkeyed(&self, served: bool) {
        self.count(if served {
            UNKEYED_SERVED
        } else {
            UNKEYED_REFUSED
        });
    }

    /// The total of one kind over every slot.
    fn total(&self, kind: usize) -> u64 {
        let sum = self.slots.iter().map(|s| s[kind].load(Ordering::Relaxed));
        sum.fold(0, u64::wrapping_add)
    }

    /// Publishes the totals and `gauges` to the installed recorder (none: nothing happens).
    /// Registered anew each time, so a recorder installed after the limiter was built gets
    /// what is counted from then on; off the request path (the clock's thread, once a sweep).
    pub(crate) fn publish(&self, gauges: &Gauges) {
        let name = self.name.clone();
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        // What kind `kind` counted since the last publication (totals only grow).
        let mut delta = |kind: usize| {
            let total = self.total(kind);
            let new = total.wrapping_sub(published[kind]);
            published[kind] = total;
            new
        };
        let requests = |decision: &'static str, reason: &'static str, value: u64| {
            counter!(
                "floodgate_requests_total",
                "limiter" => name.clone(),
                "decision" => decision,
                "reason" => reason,
            )
            .increment(value);
        };
        requests("admitted", "none", delta(ADMITTED));
        for (i, (_, reason)) in REASONS.iter().enumerate() {
            // The two reasons every limiter can have are published from 0, so that a rate
            // over them exists before the first refusal; the misconfiguration ones once seen.
            let always = i < 2;
            for (decision, base) in [("refused", REFUSED), ("shadow_refused", SHADOW)] {
                let value = delta(base + i);
                if always || value > 0 || self.total(base + i) > 0 {
                    requests(decision, reason, value);
                }
            }
        }
        counter!("floodgate_near_limit_total", "limiter" => name.clone()).increment(delta(NEAR));
        // Published once seen, as the misconfiguration reasons are.
        for (then, kind) in [("refused", UNKEYED_REFUSED), ("served", UNKEYED_SERVED)] {
            let value = delta(kind);
            if value > 0 || self.total(kind) > 0 {
                counter!(
                    "floodgate_unkeyed_requests_total",
                    "limiter" => name.clone(),
                    "then" => then,
                )
                .increment(value);
            }
        }
        drop(published);
        let set = |metric: &'static str, value: f64| {
            gauge!(metric, "limiter" => name.clone()).set(value);
        };
        set("floodgate_exact_keys", gauges.exact_keys as f64);
        set("floodgate_exact_capacity", gauges.exact_capacity as f64);
        set("floodgate_waiting", gauges.waiting as f64);
        set("floodgate_learning_keys", gauges.learning as f64);
        set("floodgate_learning_keys_held", gauges.learning_held as f64);
        for (kind, saturation) in [
            ("rate", gauges.rate_saturation),
            ("inflight", gauges.inflight_saturation),
        ] {
            if let Some(value) = saturation {
                gauge!("floodgate_saturation", "limiter" => name.clone(), "kind" => kind)
                    .set(value);
            }
        }
        if let Some(fleet) = gauges.fleet {
            set(
                "floodgate_fleet_connected",
                f64::from(u8::from(fleet.connected)),
            );
            set("floodgate_fleet_nodes", fleet.nodes as f64);
            if let Some(age) = fleet.last_sync_age {
                set("floodgate_fleet_last_sync_age_seconds", age);
            }
        }
    }
}

/// The counters' index of a refusal's reason, and its label.
const REASONS: [(Reason, &str); 6] = [
    (Reason::Inflight, "inflight"),
    (Reason::Rate, "rate"),
    (Reason::InflightNotCounted, "inflight_not_counted"),
    (Reason::RateNotCounted, "rate_not_counted"),
    (Reason::LimitTooLarge, "limit_too_large"),
    (Reason::CostOverLimit, "cost_over_limit"),
];

/// The index of `reason` in [`REASONS`].
#[inline]
fn reason_index(reason: Reason) -> usize {
    match reason {
        Reason::Inflight => 0,
        Reason::Rate => 1,
        Reason::InflightNotCounted => 2,
        Reason::RateNotCounted => 3,
        Reason::LimitTooLarge => 4,
        Reason::CostOverLimit => 5,
    }
}

/// The metrics' descriptions, for exporters that show them (Prometheus's `# HELP`).
fn describe() {
    describe_counter!(
        "floodgate_requests_total",
        "Requests decided, by decision (admitted, refused, shadow_refused) and reason"
    );
    describe_counter!(
        "floodgate_unkeyed_requests_total",
        "Requests the tower layer could not key (a client that cannot be told), by what it \
         did with them (refused, served unlimited)"
    );
    describe_counter!(
        "floodgate_near_limit_total",
        "Admitted requests of promoted keys whose count reached 80% of a limit"
    );
    describe_gauge!("floodgate_exact_keys", "Keys the exact stage holds");
    describe_gauge!("floodgate_exact_capacity", "Keys the exact stage can hold");
    describe_gauge!("floodgate_waiting", "Requests waiting for a permit");
    describe_gauge!(
        "floodgate_learning_keys",
        "Keys whose in-flight limit is learnt from their latency"
    );
    describe_gauge!(
        "floodgate_learning_keys_held",
        "Keys whose learnt in-flight limit is below their max_inflight"
    );
    describe_gauge!(
        "floodgate_saturation",
        "A sketch's noise against its promotion threshold: keys stop being told apart at 0.5"
    );
    describe_gauge!(
        "floodgate_fleet_connected",
        "1 while the fleet's Redis answers, 0 while it does not"
    );
    describe_gauge!("floodgate_fleet_nodes", "Nodes the fleet counts");
    describe_gauge!(
        "floodgate_fleet_last_sync_age_seconds",
        Unit::Seconds,
        "Time since the last sync with Redis"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_index_and_label() {
        for (i, (reason, _)) in REASONS.iter().enumerate() {
            assert_eq!(reason_index(*reason), i);
        }
        let mut labels: Vec<_> = REASONS.iter().map(|(_, l)| l).collect();
        labels.dedup();
        assert_eq!(labels.len(), REASONS.len());
    }
}
