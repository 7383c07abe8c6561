//! The ids of every criterion group and bench that `scripts/compare` reports, in one place.
//!
//! The benches take their names from here (as `common::ids`), and the report
//! (`tools/compare_report`, which depends on this crate) looks for exactly these results, so
//! renaming a bench renames it in the report too, and a bench that stops producing a result
//! fails the report by name. Plain data only, in a crate with no dependencies, so that the
//! report gets it without the benches' machinery.

/// A structure timed in a part: its bench id and its name in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Structure {
    pub id: &'static str,
    pub label: &'static str,
}

/// Thread counts of the one/two-thread groups.
pub const THREADS: [usize; 2] = [1, 2];

/// The last part of a one/two-thread bench id: `1t`, `2t`.
pub fn threads(n: usize) -> String {
    format!("{n}t")
}

/// The criterion group of one part and workload.
pub fn group(part: &str, workload: &str) -> String {
    format!("{part}_{workload}")
}

// The workloads of `Workload` in benches/common/mod.rs.
pub const UNIFORM: &str = "uniform";
pub const ZIPF: &str = "zipf";
pub const HOT_KEY: &str = "hot_key";

/// `benches/estimator.rs`: groups `estimator_<workload>`, ids `<structure>/<threads>`.
pub mod estimator {
    use super::Structure;
    pub use super::{HOT_KEY, UNIFORM, ZIPF};

    pub const PART: &str = "estimator";
    pub const WORKLOADS: [&str; 3] = [UNIFORM, ZIPF, HOT_KEY];

    pub const FLOOR_3X1024: Structure = Structure {
        id: "floor_3x1024",
        label: "floor 3×1024",
    };
    pub const FLOODGATE_3X1024: Structure = Structure {
        id: "floodgate_3x1024",
        label: "floodgate 3×1024",
    };
    pub const PINGORA_3X1024: Structure = Structure {
        id: "pingora_3x1024",
        label: "pingora-limits 3×1024",
    };
    pub const FLOOR_4X8192: Structure = Structure {
        id: "floor_4x8192",
        label: "floor 4×8192",
    };
    pub const FLOODGATE_4X8192: Structure = Structure {
        id: "floodgate_4x8192",
        label: "floodgate 4×8192",
    };
    pub const PINGORA_4X8192: Structure = Structure {
        id: "pingora_4x8192",
        label: "pingora-limits 4×8192",
    };
    pub const DASHMAP: Structure = Structure {
        id: "dashmap",
        label: "DashMap",
    };
    pub const MUTEX_HASHMAP: Structure = Structure {
        id: "mutex_hashmap",
        label: "Mutex<HashMap>",
    };
    pub const STRUCTURES: [Structure; 8] = [
        FLOOR_3X1024,
        FLOODGATE_3X1024,
        PINGORA_3X1024,
        FLOOR_4X8192,
        FLOODGATE_4X8192,
        PINGORA_4X8192,
        DASHMAP,
        MUTEX_HASHMAP,
    ];
}

/// `benches/inflight.rs`: groups `inflight_<workload>`, ids `<structure>/<threads>`.
pub mod inflight {
    use super::Structure;
    pub use super::{HOT_KEY, UNIFORM, ZIPF};

    pub const PART: &str = "inflight";
    pub const WORKLOADS: [&str; 3] = [UNIFORM, ZIPF, HOT_KEY];

    pub const FLOOR_4X8192: Structure = Structure {
        id: "floor_4x8192",
        label: "floor 4×8192",
    };
    pub const FLOODGATE_GUARD: Structure = Structure {
        id: "floodgate_guard",
        label: "floodgate Guard",
    };
    pub const FLOODGATE_BORROWED_GUARD: Structure = Structure {
        id: "floodgate_borrowed_guard",
        label: "floodgate BorrowedGuard",
    };
    pub const PINGORA: Structure = Structure {
        id: "pingora",
        label: "pingora-limits",
    };
    pub const STRUCTURES: [Structure; 4] = [
        FLOOR_4X8192,
        FLOODGATE_GUARD,
        FLOODGATE_BORROWED_GUARD,
        PINGORA,
    ];
}

/// `benches/rate.rs`: groups `rate_observe_<workload>` and `rate_with_<workload>`, ids
/// `<structure>/<threads>`; both parts time the same two structures.
pub mod rate {
    use super::Structure;
    pub use super::{UNIFORM, ZIPF};

    pub const OBSERVE: &str = "rate_observe";
    pub const WITH: &str = "rate_with";
    pub const WORKLOADS: [&str; 2] = [UNIFORM, ZIPF];

    pub const FLOODGATE: Structure = Structure {
        id: "floodgate",
        label: "floodgate",
    };
    pub const PINGORA: Structure = Structure {
        id: "pingora",
        label: "pingora-limits",
    };
    pub const STRUCTURES: [Structure; 2] = [FLOODGATE, PINGORA];

    /// The latency run's table follows the line that starts with this.
    pub const LATENCY_HEADING: &str = "rate observe latency across";
}

/// `benches/limiter.rs`, real clock: groups `limiter_<workload>`, ids `<structure>/<threads>`.
pub mod limiter {
    use super::Structure;
    pub use super::{UNIFORM, ZIPF};

    pub const PART: &str = "limiter";
    pub const FLOOD_10M: &str = "flood_10m";
    pub const FLOOD_1KEY: &str = "flood_1key";
    /// The uniform traffic through a limiter sized for a tenth of it.
    pub const UNIFORM_PAST_PEAK: &str = "uniform_past_peak";
    pub const WORKLOADS: [&str; 5] = [UNIFORM, UNIFORM_PAST_PEAK, ZIPF, FLOOD_10M, FLOOD_1KEY];

    pub const FLOODGATE: Structure = Structure {
        id: "floodgate",
        label: "floodgate",
    };
    pub const GOVERNOR_KEYED: Structure = Structure {
        id: "governor_keyed",
        label: "governor keyed",
    };
    pub const DASHMAP_EXACT: Structure = Structure {
        id: "dashmap_exact",
        label: "DashMap exact",
    };
    pub const STRUCTURES: [Structure; 3] = [FLOODGATE, GOVERNOR_KEYED, DASHMAP_EXACT];
}

/// `benches/limiter.rs`, simulated request rates: groups `limiter_sim_<workload>_<rate>`, ids
/// `<structure>` (one thread, no thread suffix), the three limiters of [`limiter`]; and the
/// accuracy table of its untimed pass, one row per workload, rate and limiter.
pub mod limiter_sim {
    pub use super::limiter::{DASHMAP_EXACT, FLOODGATE, GOVERNOR_KEYED, STRUCTURES};
    use super::Structure;
    pub use super::{UNIFORM, ZIPF};

    /// The floor of floodgate's rate decision (timed beside the three limiters, not in the
    /// accuracy table): the atomics a request must do on the lines it must touch.
    pub const FLOOR: Structure = Structure {
        id: "floor",
        label: "floor",
    };

    pub const PART: &str = "limiter_sim";
    pub const SINGLE_KEY: &str = "single_key";
    pub const ROTATING: &str = "rotating";
    pub const MIXED: &str = "mixed";
    pub const WORKLOADS: [&str; 5] = [UNIFORM, ZIPF, SINGLE_KEY, ROTATING, MIXED];

    /// Simulated requests per second, and their names in the group ids.
    pub const RATES: [(u64, &str); 3] = [(10_000, "10k"), (100_000, "100k"), (1_000_000, "1m")];
    pub const RATE_1M: &str = "1m";

    pub fn group(workload: &str, rate: &str) -> String {
        format!("{PART}_{workload}_{rate}")
    }

    /// The accuracy table's file, in the target directory, and its columns in order; its
    /// `limiter` column holds the structure ids above.
    pub const ACCURACY_FILE: &str = "limiter-accuracy.csv";
    pub const ACCURACY_COLUMNS: [&str; 16] = [
        "workload",
        "rate",
        "limiter",
        "requests",
        "admitted",
        "healthy",
        "wrong_refusals",
        "wrong_refusals_after_2s",
        "over_admissions",
        "origin_requests",
        "origin_refused",
        "origin_requests_after_2s",
        "origin_refused_after_2s",
        "peak_heap_bytes",
        "live_heap_bytes",
        "notes",
    ];
}

/// `benches/memory.rs` (not criterion): its table follows the line that starts with this.
pub mod memory {
    pub const HEADING: &str = "Peak heap bytes";
}
