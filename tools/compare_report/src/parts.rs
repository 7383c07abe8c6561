//! What the report shows of each bench: titles, floors and peer pairs, over the ids of
//! `test-support/src/bench_ids.rs`. The results it expects are exactly these ids.

use crate::ids::{self, estimator as est, inflight as inf, limiter as lim, rate, Structure};

/// A part timed with one and two threads: groups `<part>_<workload>`, ids
/// `<structure>/<threads>`.
pub struct Part {
    pub part: &'static str,
    pub title: &'static str,
    /// What one operation is, for the report.
    pub what: &'static str,
    pub workloads: &'static [&'static str],
    pub structures: &'static [Structure],
    /// (structure, the floor its "× floor" divides by); a part without floors has no such
    /// column.
    pub floors: &'static [(Structure, Structure)],
    /// (floodgate, peer), shown as the peer's median ÷ floodgate's.
    pub peers: &'static [(Structure, Structure)],
    pub note: &'static str,
}

impl Part {
    pub fn floor_of(&self, structure: Structure) -> Option<Structure> {
        self.floors
            .iter()
            .find(|&&(s, _)| s == structure)
            .map(|&(_, floor)| floor)
    }

    pub fn is_floor(&self, structure: Structure) -> bool {
        self.floors.iter().any(|&(_, floor)| floor == structure)
    }
}

pub const PARTS: [Part; 5] = [
    Part {
        part: est::PART,
        title: "Estimator::incr",
        what: "one `incr(key, 1)`; sketches of 3×1024 and 4×8192 counters; the maps hold every \
               key already (steady state, no growth)",
        workloads: &est::WORKLOADS,
        structures: &est::STRUCTURES,
        floors: &[
            (est::FLOODGATE_3X1024, est::FLOOR_3X1024),
            (est::PINGORA_3X1024, est::FLOOR_3X1024),
            (est::FLOODGATE_4X8192, est::FLOOR_4X8192),
            (est::PINGORA_4X8192, est::FLOOR_4X8192),
            (est::DASHMAP, est::FLOOR_4X8192),
            (est::MUTEX_HASHMAP, est::FLOOR_4X8192),
        ],
        peers: &[
            (est::FLOODGATE_3X1024, est::PINGORA_3X1024),
            (est::FLOODGATE_4X8192, est::PINGORA_4X8192),
            (est::FLOODGATE_4X8192, est::DASHMAP),
            (est::FLOODGATE_4X8192, est::MUTEX_HASHMAP),
        ],
        note: "DashMap and Mutex<HashMap> are divided by the 4×8192 floor, the size of \
               floodgate's default `Inflight`.",
    },
    Part {
        part: inf::PART,
        title: "Inflight::incr + guard drop",
        what: "`incr(key, 1)` (a `Guard`, one `Arc` reference count per request, like \
               pingora-limits') or `incr_borrowed(key, 1)` (a `BorrowedGuard`) and dropping the \
               guard, 4×8192 counters; the floor is H `fetch_add`s and H `fetch_sub`s",
        workloads: &inf::WORKLOADS,
        structures: &inf::STRUCTURES,
        floors: &[
            (inf::FLOODGATE_GUARD, inf::FLOOR_4X8192),
            (inf::FLOODGATE_BORROWED_GUARD, inf::FLOOR_4X8192),
            (inf::PINGORA, inf::FLOOR_4X8192),
        ],
        peers: &[
            (inf::FLOODGATE_GUARD, inf::PINGORA),
            (inf::FLOODGATE_BORROWED_GUARD, inf::PINGORA),
        ],
        note: "",
    },
    Part {
        part: rate::OBSERVE,
        title: "Rate::observe",
        what: "`observe(&key, 1)`, 4×1024 sketches, one-second windows",
        workloads: &rate::WORKLOADS,
        structures: &rate::STRUCTURES,
        floors: &[],
        peers: &[(rate::FLOODGATE, rate::PINGORA)],
        note: "",
    },
    Part {
        part: rate::WITH,
        title: "Rate::rate_with",
        what: "`rate_with(&key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`, 4×1024 sketches",
        workloads: &rate::WORKLOADS,
        structures: &rate::STRUCTURES,
        floors: &[],
        peers: &[(rate::FLOODGATE, rate::PINGORA)],
        note: "",
    },
    Part {
        part: lim::PART,
        title: "Limiter, real clock",
        what: "a rate limit of 100 per second per key, real clock: floodgate `try_acquire` + \
               permit drop (the default limiter with `peak_rate(10_000_000)`, about what \
               these loops drive), governor 0.10 keyed `check_key`, and an exact fixed-window \
               DashMap limiter; zipf is s=1.1 over 1M keys, flood_10m cycles through \
               10,000,000 distinct keys, flood_1key sends 90% of the requests to one key; \
               uniform_past_peak is the uniform traffic through floodgate's default limiter, \
               sized for a peak of 1M requests/s, a tenth of it",
        workloads: &lim::WORKLOADS,
        structures: &lim::STRUCTURES,
        floors: &[],
        peers: &[
            (lim::FLOODGATE, lim::GOVERNOR_KEYED),
            (lim::FLOODGATE, lim::DASHMAP_EXACT),
        ],
        note: "",
    },
];

/// The simulated-rate groups: `limiter_sim_<workload>_<rate>`, ids `<structure>`; each
/// peer is shown against floodgate.
pub mod sim {
    pub const TITLE: &str = "Limiter, simulated request rates";
}

/// One result the report reads: a bench id of one of the groups above.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bench {
    pub part: &'static str,
    pub workload: &'static str,
    /// The simulated rate's name (`limiter_sim` groups only).
    pub rate: Option<&'static str>,
    /// The thread count (one/two-thread groups only; the simulated groups run one thread
    /// and their ids have no thread suffix).
    pub threads: Option<usize>,
    pub structure: Structure,
}

impl Bench {
    pub fn threaded(
        part: &'static str,
        workload: &'static str,
        threads: usize,
        structure: Structure,
    ) -> Bench {
        Bench {
            part,
            workload,
            rate: None,
            threads: Some(threads),
            structure,
        }
    }

    pub fn simulated(workload: &'static str, rate: &'static str, structure: Structure) -> Bench {
        Bench {
            part: ids::limiter_sim::PART,
            workload,
            rate: Some(rate),
            threads: None,
            structure,
        }
    }

    /// Criterion's directory for this bench under `CRITERION_HOME`, `/`-separated.
    pub fn path(&self) -> String {
        let group = match self.rate {
            Some(rate) => ids::limiter_sim::group(self.workload, rate),
            None => ids::group(self.part, self.workload),
        };
        match self.threads {
            Some(n) => format!("{group}/{}/{}", self.structure.id, ids::threads(n)),
            None => format!("{group}/{}", self.structure.id),
        }
    }

    pub fn title(&self) -> &'static str {
        PARTS
            .iter()
            .find(|p| p.part == self.part)
            .map_or(sim::TITLE, |p| p.title)
    }
}

/// Every result the report expects, in the report's order.
pub fn expected() -> Vec<Bench> {
    let mut benches = Vec::new();
    for part in &PARTS {
        for &workload in part.workloads {
            for threads in ids::THREADS {
                for &structure in part.structures {
                    benches.push(Bench::threaded(part.part, workload, threads, structure));
                }
            }
        }
    }
    for workload in ids::limiter_sim::WORKLOADS {
        for (_, rate) in ids::limiter_sim::RATES {
            for structure in ids::limiter_sim::STRUCTURES {
                benches.push(Bench::simulated(workload, rate, structure));
            }
            benches.push(Bench::simulated(workload, rate, ids::limiter_sim::FLOOR));
        }
    }
    benches
}
