//! The Markdown of the report: `docs/comparison.md`, the summary for the README, and the
//! panels of `ns_per_op.svg`.

use std::collections::HashMap;

use crate::ids::{self, estimator as est, inflight as inf, limiter as lim, limiter_sim as sim};
use crate::ids::{rate, Structure};
use crate::inputs::{AccuracyRow, Inputs, Printed};
use crate::parts::{self, Bench, Part, PARTS};
use crate::plots::Panel;

pub const README_BEGIN: &str = "<!-- comparison:begin (scripts/compare writes this table) -->";
pub const README_END: &str = "<!-- comparison:end -->";

/// A ratio: two significant digits, more decimals for tiny ones (a map's few bytes against a
/// fixed sketch).
fn ratio(value: f64) -> String {
    if value < 0.01 && value > 0.0 {
        let decimals = (1 - value.log10().floor() as i32) as usize;
        format!("{value:.decimals$}×")
    } else if value < 1.0 {
        format!("{value:.2}×")
    } else if value < 10.0 {
        format!("{value:.1}×")
    } else {
        format!("{value:.0}×")
    }
}

/// Bytes in decimal units, as the benches print them.
fn bytes(b: i64) -> String {
    let f = b as f64;
    if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} KB", f / 1e3)
    } else {
        format!("{b} B")
    }
}

/// A share in percent, two significant digits below 1% (a few wrong decisions in millions
/// must not print as zero).
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "—".to_string();
    }
    let p = 100.0 * part as f64 / whole as f64;
    if p == 0.0 {
        "0%".to_string()
    } else if p < 1.0 {
        let decimals = (1 - p.log10().floor() as i32) as usize;
        format!("{p:.decimals$}%")
    } else {
        format!("{p:.2}%")
    }
}

/// A count and its share, or `0`.
fn count_of(part: u64, whole: u64) -> String {
    if part == 0 {
        "0".to_string()
    } else {
        format!("{} ({})", crate::thousands(part), percent(part, whole))
    }
}

fn threads_title(threads: usize) -> String {
    if threads == 1 {
        "1 thread".to_string()
    } else {
        format!("{threads} threads")
    }
}

fn row(cells: &[String]) -> String {
    format!("| {} |", cells.join(" | "))
}

/// `|---|---:|…`: the first `left` columns left-aligned, the rest right-aligned.
fn rule(left: usize, columns: usize) -> String {
    format!("|{}{}", "---|".repeat(left), "---:|".repeat(columns - left))
}

// ---- the summary (README) ----

#[derive(Clone, Copy, PartialEq, Eq)]
enum Column {
    Floor,
    Floodgate,
    Pingora,
    DashMap,
    Mutex,
    Governor,
}

const COLUMNS: [(Column, &str); 6] = [
    (Column::Floor, "floor"),
    (Column::Floodgate, "floodgate"),
    (Column::Pingora, "pingora-limits"),
    (Column::DashMap, "DashMap"),
    (Column::Mutex, "Mutex<HashMap>"),
    (Column::Governor, "governor keyed"),
];

/// The simulated workloads of the summary, at 1M requests/s, and their row titles: healthy
/// traffic first, then the floods.
const SUMMARY_SIM: [(&str, &str); 5] = [
    (
        sim::UNIFORM,
        "healthy origins (uniform, a tenth of their limit)",
    ),
    (sim::ZIPF, "Zipf s = 1.1"),
    (sim::SINGLE_KEY, "single-key flood"),
    (sim::ROTATING, "rotating-key flood"),
    (sim::MIXED, "mixed (healthy origins and both floods)"),
];

/// The summary's rows: one-thread uniform-workload results of each part, then the simulated
/// floods at 1M requests/s.
fn summary_rows() -> Vec<(String, Vec<(Column, Bench)>)> {
    use Column::*;
    let uniform = |part, s| Bench::threaded(part, ids::UNIFORM, 1, s);
    let mut rows = vec![
        (
            "`Estimator::incr`, 4×8192".to_string(),
            vec![
                (Floor, uniform(est::PART, est::FLOOR_4X8192)),
                (Floodgate, uniform(est::PART, est::FLOODGATE_4X8192)),
                (Pingora, uniform(est::PART, est::PINGORA_4X8192)),
                (DashMap, uniform(est::PART, est::DASHMAP)),
                (Mutex, uniform(est::PART, est::MUTEX_HASHMAP)),
            ],
        ),
        (
            "`Estimator::incr`, 3×1024".to_string(),
            vec![
                (Floor, uniform(est::PART, est::FLOOR_3X1024)),
                (Floodgate, uniform(est::PART, est::FLOODGATE_3X1024)),
                (Pingora, uniform(est::PART, est::PINGORA_3X1024)),
            ],
        ),
        (
            "`Inflight::incr` + guard drop, 4×8192".to_string(),
            vec![
                (Floor, uniform(inf::PART, inf::FLOOR_4X8192)),
                (Floodgate, uniform(inf::PART, inf::FLOODGATE_GUARD)),
                (Pingora, uniform(inf::PART, inf::PINGORA)),
            ],
        ),
        (
            "the same, `incr_borrowed` (`BorrowedGuard`)".to_string(),
            vec![
                (Floor, uniform(inf::PART, inf::FLOOR_4X8192)),
                (Floodgate, uniform(inf::PART, inf::FLOODGATE_BORROWED_GUARD)),
                (Pingora, uniform(inf::PART, inf::PINGORA)),
            ],
        ),
        (
            "`Rate::observe`, 4×1024".to_string(),
            vec![
                (Floodgate, uniform(rate::OBSERVE, rate::FLOODGATE)),
                (Pingora, uniform(rate::OBSERVE, rate::PINGORA)),
            ],
        ),
        (
            "`Rate::rate_with`, 4×1024".to_string(),
            vec![
                (Floodgate, uniform(rate::WITH, rate::FLOODGATE)),
                (Pingora, uniform(rate::WITH, rate::PINGORA)),
            ],
        ),
        (
            "rate limit per key, real clock (DashMap: exact fixed window)".to_string(),
            vec![
                (Floodgate, uniform(lim::PART, lim::FLOODGATE)),
                (DashMap, uniform(lim::PART, lim::DASHMAP_EXACT)),
                (Governor, uniform(lim::PART, lim::GOVERNOR_KEYED)),
            ],
        ),
    ];
    for (i, (workload, title)) in SUMMARY_SIM.into_iter().enumerate() {
        let simulated = |s| Bench::simulated(workload, sim::RATE_1M, s);
        let title = if i == 0 {
            format!("rate limit, simulated 1M requests/s: {title}")
        } else {
            format!("the same, {title}")
        };
        rows.push((
            title,
            vec![
                (Floodgate, simulated(sim::FLOODGATE)),
                (DashMap, simulated(sim::DASHMAP_EXACT)),
                (Governor, simulated(sim::GOVERNOR_KEYED)),
            ],
        ));
    }
    rows
}

// ---- the report ----

pub struct Report<'a> {
    inputs: &'a Inputs,
    overestimate: (String, Vec<String>),
    quick: bool,
    machine: String,
}

impl<'a> Report<'a> {
    pub fn new(inputs: &'a Inputs, overestimate: (String, Vec<String>)) -> Report<'a> {
        Report {
            inputs,
            overestimate,
            quick: inputs.env("quick") == "1",
            machine: inputs.machine.line(),
        }
    }

    fn median(&self, bench: &Bench) -> f64 {
        self.inputs.results.median(bench)
    }

    fn accuracy(&self, workload: &str, rate: &str, limiter: Structure) -> &AccuracyRow {
        self.inputs.accuracy.get(workload, rate, limiter.id)
    }

    fn kind_of_run(&self) -> &'static str {
        if self.quick {
            "a quick run (`COMPARE_QUICK=1`: 0.5 s warm-up, 1 s measurement per bench), for \
             checking the tooling, not for quoting"
        } else {
            "a full run"
        }
    }

    /// The ns/op summary table.
    fn summary_table(&self) -> Vec<String> {
        let mut head = vec!["1 thread, median ns/op".to_string()];
        for (column, name) in COLUMNS {
            head.push(name.to_string());
            if column == Column::Floodgate {
                head.push("floodgate × floor".to_string());
            }
        }
        let mut lines = vec![row(&head), rule(1, head.len())];
        for (title, cells) in summary_rows() {
            let of = |c: Column| cells.iter().find(|(col, _)| *col == c).map(|(_, b)| b);
            let ours = self.median(of(Column::Floodgate).expect("a floodgate cell"));
            let mut line = vec![title];
            for (column, _) in COLUMNS {
                let value = of(column).map(|b| self.median(b));
                match (column, value) {
                    (Column::Floodgate, _) => {
                        line.push(format!("**{}**", crate::ns(ours)));
                        line.push(
                            of(Column::Floor).map_or("—".to_string(), |floor| {
                                ratio(ours / self.median(floor))
                            }),
                        );
                    }
                    (_, None) => line.push("—".to_string()),
                    (Column::Floor, Some(v)) => line.push(crate::ns(v)),
                    (_, Some(v)) => line.push(format!("{} ({})", crate::ns(v), ratio(v / ours))),
                }
            }
            lines.push(row(&line));
        }
        lines
    }

    /// Decision quality and memory of the simulated floods at 1M requests/s.
    fn summary_quality(&self) -> Vec<String> {
        let limiters = sim::STRUCTURES;
        let mut head = vec!["simulated 1M requests/s, one pass from a fresh limiter".to_string()];
        head.extend(limiters.iter().map(|s| s.label.to_string()));
        let mut lines = vec![row(&head), rule(1, head.len())];
        let rate = sim::RATE_1M;
        for (workload, title) in SUMMARY_SIM {
            let ours = self.accuracy(workload, rate, sim::FLOODGATE).peak_heap;
            let mut line = vec![format!("{title}: peak heap")];
            for limiter in limiters {
                let heap = self.accuracy(workload, rate, limiter).peak_heap;
                line.push(if limiter == sim::FLOODGATE {
                    format!("**{}**", bytes(heap))
                } else {
                    format!("{} ({})", bytes(heap), ratio(heap as f64 / ours as f64))
                });
            }
            lines.push(row(&line));
        }
        let mut line = vec!["mixed: healthy origins' requests refused".to_string()];
        for limiter in limiters {
            let a = self.accuracy(sim::MIXED, rate, limiter);
            line.push(percent(a.origin_refused, a.origin_requests));
        }
        lines.push(row(&line));
        let mut line =
            vec!["all five: healthy requests refused (after 2 s) / over-limit admissions".into()];
        for limiter in limiters {
            let (mut wrong, mut steady, mut over) = (0, 0, 0);
            for (workload, _) in SUMMARY_SIM {
                let a = self.accuracy(workload, rate, limiter);
                wrong += a.wrong_refusals;
                steady += a.wrong_refusals_after_2s;
                over += a.over_admissions;
            }
            line.push(format!("{wrong} ({steady}) / {over}"));
        }
        lines.push(row(&line));
        lines
    }

    fn captions(&self) -> (String, String) {
        let run = if self.quick {
            "a quick run"
        } else {
            "a full run"
        };
        let load = self.inputs.env("load_before");
        let load = load.split(' ').next().unwrap_or("?");
        let ns_caption = format!(
            "{}Median ns per operation, one thread: uniform keys over 1,000,000, except the last \
             five rows, which replay the limiter bench's traces at a simulated 1,000,000 \
             requests per second (limit 100 per second per key, floodgate sized for that \
             rate); {run} of {} on {}, load \
             average {load} at the start. In parentheses: the peer's time ÷ floodgate's (above \
             1: floodgate is faster). floodgate × floor: floodgate's time ÷ the floor's, H \
             relaxed `fetch_add`s on pre-computed columns.",
            if self.quick {
                format!("**From {}.** ", self.kind_of_run())
            } else {
                String::new()
            },
            self.inputs.env("date"),
            self.machine,
        );
        let quality_caption = "The same traces, from the limiter bench's untimed pass: each fed \
            once to a fresh limiter. Peak heap is the limiter's own; in parentheses, the peer's \
            ÷ floodgate's (floodgate's sketches are sized once for its peak rate, the maps grow \
            with the keys they see). A healthy request is one whose key, this request included, \
            offered no more than the limit in the limiter's own kind of window; an over-limit \
            admission is one that the limiter's window, counting what it admitted, should have \
            refused."
            .to_string();
        (ns_caption, quality_caption)
    }

    /// The summary: both tables and their captions; for the README, with a link to the
    /// full report.
    pub fn summary(&self, for_readme: bool) -> String {
        let (ns_caption, quality_caption) = self.captions();
        let link = if for_readme {
            " Full tables: [docs/comparison.md](docs/comparison.md)."
        } else {
            ""
        };
        let mut lines = self.summary_table();
        lines.push(String::new());
        lines.push(ns_caption);
        lines.push(String::new());
        lines.extend(self.summary_quality());
        lines.push(String::new());
        lines.push(quality_caption + link);
        lines.push(String::new());
        lines.join("\n")
    }

    /// The full tables of one part: ns/op and × floor per structure, then floodgate vs peers.
    fn part_tables(&self, part: &Part) -> Vec<String> {
        let has_floor = !part.floors.is_empty();
        let mut lines = vec![
            format!("### {}", part.title),
            String::new(),
            format!("{}.", capitalised(part.what)),
            String::new(),
        ];
        for threads in ids::THREADS {
            let mut head = vec!["structure".to_string()];
            for w in part.workloads {
                head.push(format!("{w} ns/op"));
                if has_floor {
                    head.push("× floor".to_string());
                }
            }
            lines.push(format!(
                "**{}**{}",
                threads_title(threads),
                if threads > 1 {
                    " (ns per operation of the aggregate throughput)"
                } else {
                    ""
                }
            ));
            lines.push(String::new());
            lines.push(row(&head));
            lines.push(rule(1, head.len()));
            for &structure in part.structures {
                let mut cells = vec![structure.label.to_string()];
                for &w in part.workloads {
                    let value = self.median(&Bench::threaded(part.part, w, threads, structure));
                    cells.push(crate::ns(value));
                    if has_floor {
                        cells.push(match part.floor_of(structure) {
                            Some(floor) => ratio(
                                value / self.median(&Bench::threaded(part.part, w, threads, floor)),
                            ),
                            None if part.is_floor(structure) => "1".to_string(),
                            None => "—".to_string(),
                        });
                    }
                }
                lines.push(row(&cells));
            }
            lines.push(String::new());
        }
        let mut head = vec!["floodgate".to_string(), "peer".to_string()];
        for w in part.workloads {
            for threads in ids::THREADS {
                head.push(format!("{w} {}", ids::threads(threads)));
            }
        }
        lines.push(
            "**floodgate vs peers**: the peer's median ÷ floodgate's (above 1: floodgate is \
             faster)"
                .to_string(),
        );
        lines.push(String::new());
        lines.push(row(&head));
        lines.push(rule(2, head.len()));
        for &(ours, peer) in part.peers {
            let mut cells = vec![ours.label.to_string(), peer.label.to_string()];
            for &w in part.workloads {
                for threads in ids::THREADS {
                    let of = |s| self.median(&Bench::threaded(part.part, w, threads, s));
                    cells.push(ratio(of(peer) / of(ours)));
                }
            }
            lines.push(row(&cells));
        }
        lines.push(String::new());
        if !part.note.is_empty() {
            lines.push(part.note.to_string());
            lines.push(String::new());
        }
        lines
    }

    /// The simulated-rate groups and the accuracy pass.
    fn simulated_tables(&self) -> Vec<String> {
        let mut lines = vec![
            format!("### {}", parts::sim::TITLE),
            String::new(),
            "From the `limiter_sim_<workload>_<rate>` groups of `benches/limiter.rs`: one thread \
             replays a pre-generated trace of 4 simulated seconds, cyclically, through each \
             limiter (100 requests per second per key: floodgate's default limiter, governor \
             keyed, the exact DashMap limiter); the clock moves 10 ms every rate/100 requests, \
             floodgate's on a `ManualClock` whose `advance` also does the window clearing that \
             the ticker thread does in production, governor's a `FakeRelativeClock`. Workloads: \
             `uniform`, healthy keys each at a tenth of its limit; `zipf`, s = 1.1 over \
             1,000,000 keys (the first ranks go over their limits); `single_key`, every request \
             for one key; `rotating`, a flood of invented keys, each sent twice; `mixed`, 100 \
             healthy origins at a tenth of their limit, a single-key flood taking 20% of the \
             requests and a rotating flood the rest."
                .to_string(),
            String::new(),
            "**Median ns per operation**, one thread; in parentheses, the peer's ÷ floodgate's \
             (above 1: floodgate is faster). The floor is what floodgate's rate decision must \
             do on the lines it must touch: 2 locked adds on one line of the current window's \
             table and 2 loads on one line of the previous window's, on indexes worked out \
             before timing, tables as large as floodgate's; in parentheses, floodgate ÷ floor. \
             A request of floodgate's touches one line of each window's table and one line \
             holding both its over-limit cache slot and its exact stage filter cell: 3 lines, \
             and a 4th, a word of the window's dirty bitmap, when its add takes a counter up \
             from zero."
                .to_string(),
            String::new(),
        ];
        let mut head = vec!["workload".to_string(), "requests/s".to_string()];
        head.extend(sim::STRUCTURES.iter().map(|s| s.label.to_string()));
        head.push(sim::FLOOR.label.to_string());
        lines.push(row(&head));
        lines.push(rule(1, head.len()));
        for workload in sim::WORKLOADS {
            for (rate, rate_id) in sim::RATES {
                let ours = self.median(&Bench::simulated(workload, rate_id, sim::FLOODGATE));
                let mut cells = vec![format!("`{workload}`"), crate::thousands(rate)];
                for structure in sim::STRUCTURES {
                    let value = self.median(&Bench::simulated(workload, rate_id, structure));
                    cells.push(if structure == sim::FLOODGATE {
                        crate::ns(value)
                    } else {
                        format!("{} ({})", crate::ns(value), ratio(value / ours))
                    });
                }
                let floor = self.median(&Bench::simulated(workload, rate_id, sim::FLOOR));
                cells.push(format!("{} ({})", crate::ns(floor), ratio(ours / floor)));
                lines.push(row(&cells));
            }
        }
        lines.extend([
            String::new(),
            format!(
                "**Decision quality and memory**, from the bench's untimed pass \
                 (`target/{}`): each trace fed once to a fresh limiter, every decision checked \
                 against an exact model of the window that limiter implements (floodgate: its \
                 sliding window `prev·(1−f) + curr` over one-second buckets; governor: GCRA, a \
                 request being healthy with at most 100 offered in the trailing second; \
                 DashMap: its fixed one-second window). A request is healthy when its key's \
                 offered requests in that window, this one included, are within the limit; \
                 refusing it is a wrong refusal. An admitted request is an over-limit admission \
                 when the requests that limiter admitted, this one included, are over the \
                 limit in that window. Origins refused: the share of the `mixed` trace's \
                 healthy origins' requests refused. After 2 s: from the third simulated second \
                 on, past the first windows' warm-up. Peak heap: the limiter's own, its clock \
                 included; in parentheses, the peer's ÷ floodgate's.",
                sim::ACCURACY_FILE
            ),
            String::new(),
        ]);
        let head = [
            "workload",
            "requests/s",
            "limiter",
            "requests",
            "admitted",
            "wrong refusals (% of healthy)",
            "after 2 s",
            "over-limit admissions (% of admitted)",
            "origins refused (after 2 s)",
            "peak heap",
            "floodgate's stats at the end",
        ]
        .map(String::from);
        lines.push(row(&head));
        lines.push(format!("{}---|", rule(3, head.len() - 1)));
        for workload in sim::WORKLOADS {
            for (rate, rate_id) in sim::RATES {
                let ours = self.accuracy(workload, rate_id, sim::FLOODGATE).peak_heap;
                for limiter in sim::STRUCTURES {
                    let a = self.accuracy(workload, rate_id, limiter);
                    let heap = if limiter == sim::FLOODGATE {
                        bytes(a.peak_heap)
                    } else {
                        format!(
                            "{} ({})",
                            bytes(a.peak_heap),
                            ratio(a.peak_heap as f64 / ours as f64)
                        )
                    };
                    lines.push(row(&[
                        format!("`{workload}`"),
                        crate::thousands(rate),
                        limiter.label.to_string(),
                        crate::thousands(a.requests),
                        crate::thousands(a.admitted),
                        count_of(a.wrong_refusals, a.healthy),
                        crate::thousands(a.wrong_refusals_after_2s),
                        count_of(a.over_admissions, a.admitted),
                        if a.origin_requests == 0 {
                            "—".to_string()
                        } else {
                            format!(
                                "{} ({})",
                                percent(a.origin_refused, a.origin_requests),
                                percent(a.origin_refused_after_2s, a.origin_requests_after_2s)
                            )
                        },
                        heap,
                        a.notes.clone(),
                    ]));
                }
            }
        }
        lines.push(String::new());
        lines
    }

    /// Medians whose 95% confidence interval is wider than ±10%: the noise of a busy machine.
    fn noise(&self) -> String {
        let results = &self.inputs.results;
        let mut wide: Vec<String> = results
            .iter()
            .filter_map(|(bench, e)| {
                let half = (e.high - e.low) / 2.0 / e.median;
                (half > 0.10).then(|| format!("{} ±{:.0}%", bench.path(), 100.0 * half))
            })
            .collect();
        wide.sort();
        if wide.is_empty() {
            format!(
                "All {} medians have a 95% confidence interval within ±10%.",
                results.len()
            )
        } else {
            format!(
                "{} of {} medians have a 95% confidence interval wider than ±10%: {}.",
                wide.len(),
                results.len(),
                wide.join(", ")
            )
        }
    }

    pub fn document(&self) -> String {
        let env = |key| self.inputs.env(key);
        let (ns_caption, quality_caption) = self.captions();
        let mut doc = vec![
            "# floodgate vs its peers: the comparison report".to_string(),
            String::new(),
            "Written by `scripts/compare`; do not edit by hand. Re-run it to regenerate this \
             file, `docs/overestimate.svg` and `docs/ns_per_op.svg`."
                .to_string(),
            String::new(),
            format!("- **Machine**: {}.", self.machine),
            format!("- **Date**: {}.", env("date")),
            format!(
                "- **Command**: `{}`, which ran `{}`, then `{}`, then `{}`.",
                env("command"),
                env("bench_command"),
                env("memory_command"),
                env("report_command")
            ),
            format!("- **Kind of run**: {}.", self.kind_of_run()),
            format!(
                "- **Load average** (1, 5, 15 min) before: {}; after: {}. Wall time: benches \
                 {} s, memory {} s.",
                env("load_before"),
                env("load_after"),
                env("bench_secs"),
                env("memory_secs")
            ),
            format!("- **Commit**: {}.", env("commit")),
            String::new(),
            "The machines are shared and noisy: compare ratios within this run, never absolute \
             times across runs. Times are criterion's median per operation; with two threads, \
             both threads work on one shared instance and the figure is the wall time over \
             both threads' operations (the cost per operation of the aggregate throughput; \
             per-thread latency is twice that)."
                .to_string(),
            String::new(),
            "## Summary".to_string(),
            String::new(),
        ];
        doc.extend(self.summary_table());
        doc.extend([String::new(), ns_caption, String::new()]);
        doc.extend(self.summary_quality());
        doc.extend([
            String::new(),
            quality_caption,
            String::new(),
            "![ns per operation by workload](ns_per_op.svg)".to_string(),
            String::new(),
            "## Every part, workload and thread count".to_string(),
            String::new(),
            "The floor is the cost no count-min sketch with H rows can go under: H relaxed \
             `fetch_add`s (and a `min`) on columns computed before timing, no hashing \
             (`benches/common/mod.rs`). `× floor` divides a structure's median by the floor of \
             its size in the same run."
                .to_string(),
            String::new(),
        ]);
        for part in &PARTS {
            doc.extend(self.part_tables(part));
        }
        doc.extend(self.simulated_tables());
        doc.extend([
            "## Rate: latency across window changes".to_string(),
            String::new(),
            "From `benches/rate.rs`, after its criterion groups: one thread, every call timed. \
             pingora-limits clears a window on the request that finds it expired; floodgate's \
             ticker clears ahead of time on its own thread."
                .to_string(),
            String::new(),
        ]);
        doc.extend(printed(&self.inputs.latency));
        doc.extend([
            "## Peak memory".to_string(),
            String::new(),
            "From `benches/memory.rs`: peak heap bytes through a counting global allocator."
                .to_string(),
            String::new(),
        ]);
        doc.extend(printed(&self.inputs.memory));
        let (heading, table) = &self.overestimate;
        doc.extend([
            "## Over-estimation against the count-min bound".to_string(),
            String::new(),
            "From `tools/compare_report/src/plots.rs` (`docs/overestimate.svg`). Hash keys are \
             random per instance, so these figures vary a little from run to run."
                .to_string(),
            String::new(),
            heading.clone(),
            String::new(),
        ]);
        doc.extend(table.iter().cloned());
        doc.extend([
            String::new(),
            "![over-estimation against sketch width](overestimate.svg)".to_string(),
            String::new(),
            "## Noise".to_string(),
            String::new(),
            self.noise(),
            String::new(),
        ]);
        doc.join("\n")
    }
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A table a bench printed, with the lines that introduce it.
fn printed(p: &Printed) -> Vec<String> {
    let mut lines: Vec<String> = p.head.clone();
    lines.push(String::new());
    lines.extend(p.table.iter().cloned());
    lines.push(String::new());
    lines
}

/// `readme` with the text between the markers replaced by `summary`.
pub fn replace_readme_block(readme: &str, summary: &str) -> Result<String, String> {
    let (Some(begin), Some(end)) = (readme.find(README_BEGIN), readme.find(README_END)) else {
        return Err(format!(
            "no '{README_BEGIN}' ... '{README_END}' block to replace"
        ));
    };
    if end < begin {
        return Err(format!("'{README_END}' comes before '{README_BEGIN}'"));
    }
    Ok(format!(
        "{}{README_BEGIN}\n\n{summary}\n{}",
        &readme[..begin],
        &readme[end..]
    ))
}

// ---- the panels of ns_per_op.svg ----

/// One panel per part (categories: workload × threads), then one per simulated rate
/// (categories: workloads).
pub fn panels(results: &crate::inputs::Results) -> Vec<Panel> {
    let mut panels = Vec::new();
    for part in &PARTS {
        let mut categories = Vec::new();
        let mut median_ns = HashMap::new();
        for &w in part.workloads {
            for threads in ids::THREADS {
                let c = categories.len();
                categories.push((w.to_string(), format!("{w}, {}", threads_title(threads))));
                for (s, &structure) in part.structures.iter().enumerate() {
                    let bench = Bench::threaded(part.part, w, threads, structure);
                    median_ns.insert((c, s), results.median(&bench));
                }
            }
        }
        panels.push(Panel {
            title: part.title.to_string(),
            categories,
            structures: structures(part.structures),
            median_ns,
        });
    }
    for (rate, rate_id) in sim::RATES {
        let mut median_ns = HashMap::new();
        for (c, w) in sim::WORKLOADS.iter().enumerate() {
            for (s, &structure) in sim::STRUCTURES.iter().enumerate() {
                median_ns.insert(
                    (c, s),
                    results.median(&Bench::simulated(w, rate_id, structure)),
                );
            }
        }
        panels.push(Panel {
            title: format!(
                "{}: {} requests/s, one thread",
                parts::sim::TITLE,
                crate::thousands(rate)
            ),
            categories: sim::WORKLOADS
                .iter()
                .map(|w| (w.to_string(), w.to_string()))
                .collect(),
            structures: structures(&sim::STRUCTURES),
            median_ns,
        });
    }
    panels
}

fn structures(structures: &[Structure]) -> Vec<(String, String)> {
    structures
        .iter()
        .map(|s| (s.id.to_string(), s.label.to_string()))
        .collect()
}
