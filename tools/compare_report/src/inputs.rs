//! Everything the report reads from one run's directory, checked before anything is written.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::ids::{self, limiter_sim};
use crate::parts::{self, Bench};

/// Criterion's figures for one bench, ns per operation.
#[derive(Clone, Copy, Debug)]
pub struct Estimate {
    pub median: f64,
    /// The median's 95% confidence interval.
    pub low: f64,
    pub high: f64,
    pub mean: f64,
}

/// Every expected result, in the report's order.
pub struct Results {
    rows: Vec<(Bench, Estimate)>,
    index: HashMap<Bench, usize>,
}

impl Results {
    /// Reads `new/estimates.json` of every expected bench under `criterion`; fails listing
    /// every missing file. Results nothing expects (a bench added without an id in
    /// `test-support/src/bench_ids.rs`) are named on stderr.
    fn read(criterion: &Path) -> Result<Results, String> {
        let mut rows = Vec::new();
        let mut missing = Vec::new();
        for bench in parts::expected() {
            let path = criterion.join(bench.path()).join("new/estimates.json");
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let estimate = parse_estimates(&text).map_err(|e| {
                        format!("{}: not criterion's estimates ({e})", path.display())
                    })?;
                    rows.push((bench, estimate));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing.push(path.display().to_string())
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        if !missing.is_empty() {
            return Err(format!(
                "{} result file(s) missing; did a bench fail, or its ids change outside \
                 test-support/src/bench_ids.rs?\n  {}",
                missing.len(),
                missing.join("\n  ")
            ));
        }
        let known: HashSet<String> = rows.iter().map(|(b, _)| b.path()).collect();
        for found in estimates_under(criterion, criterion) {
            if !known.contains(&found) {
                eprintln!(
                    "compare_report: warning: {found} is not in the report (give it an id in \
                     test-support/src/bench_ids.rs and a place in \
                     tools/compare_report/src/parts.rs)"
                );
            }
        }
        let index = rows.iter().enumerate().map(|(i, (b, _))| (*b, i)).collect();
        Ok(Results { rows, index })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Bench, Estimate)> {
        self.rows.iter()
    }

    /// The estimate of an expected bench (all of them were read).
    pub fn get(&self, bench: &Bench) -> Estimate {
        match self.index.get(bench) {
            Some(&i) => self.rows[i].1,
            None => panic!("{} is not among the expected results", bench.path()),
        }
    }

    pub fn median(&self, bench: &Bench) -> f64 {
        self.get(bench).median
    }

    /// One row per result.
    pub fn to_csv(&self) -> String {
        let mut csv = String::from(
            "part,part_title,workload,rate,threads,structure,label,median_ns,median_low_ns,\
             median_high_ns,mean_ns\n",
        );
        for (b, e) in &self.rows {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{},{},{}",
                b.part,
                csv_field(b.title()),
                b.workload,
                b.rate.unwrap_or(""),
                // The simulated groups run on one thread.
                ids::threads(b.threads.unwrap_or(1)),
                b.structure.id,
                csv_field(b.structure.label),
                e.median,
                e.low,
                e.high,
                e.mean
            );
        }
        csv
    }
}

/// A CSV field, quoted when it holds a comma or a quote.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn parse_estimates(text: &str) -> Result<Estimate, String> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let number = |pointer: &str| {
        json.pointer(pointer)
            .and_then(serde_json::Value::as_f64)
            .ok_or(format!("no number at {pointer}"))
    };
    Ok(Estimate {
        median: number("/median/point_estimate")?,
        low: number("/median/confidence_interval/lower_bound")?,
        high: number("/median/confidence_interval/upper_bound")?,
        mean: number("/mean/point_estimate")?,
    })
}

/// The bench ids (paths relative to `root`) of every `new/estimates.json` under `dir`.
fn estimates_under(root: &Path, dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") && path.join("estimates.json").is_file() {
            if let Ok(rel) = dir.strip_prefix(root) {
                let parts: Vec<_> = rel.iter().map(|p| p.to_string_lossy()).collect();
                found.push(parts.join("/"));
            }
        } else {
            found.extend(estimates_under(root, &path));
        }
    }
    found
}

/// One row of the limiter bench's accuracy table (see `benches/limiter.rs`).
#[derive(Clone, Debug, Default)]
pub struct AccuracyRow {
    pub requests: u64,
    pub admitted: u64,
    pub healthy: u64,
    pub wrong_refusals: u64,
    pub wrong_refusals_after_2s: u64,
    pub over_admissions: u64,
    pub origin_requests: u64,
    pub origin_refused: u64,
    pub origin_requests_after_2s: u64,
    pub origin_refused_after_2s: u64,
    pub peak_heap: i64,
    pub notes: String,
}

/// The accuracy table, by (workload, rate, limiter id).
pub struct Accuracy {
    rows: HashMap<(String, String, String), AccuracyRow>,
}

impl Accuracy {
    /// Reads the table; fails naming the file and every expected row that is missing.
    fn read(path: &Path) -> Result<Accuracy, String> {
        let text = read(path, "the limiter bench's accuracy pass")?;
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header = split_csv(lines.next().ok_or(format!("{}: empty", path.display()))?);
        let column = |name: &str| {
            header.iter().position(|h| h == name).ok_or(format!(
                "{}: no column {name:?} (the columns are limiter_sim::ACCURACY_COLUMNS in \
                 test-support/src/bench_ids.rs)",
                path.display()
            ))
        };
        let columns = limiter_sim::ACCURACY_COLUMNS
            .iter()
            .map(|c| column(c))
            .collect::<Result<Vec<usize>, String>>()?;
        let mut rows = HashMap::new();
        for (n, line) in lines.enumerate() {
            let fields = split_csv(line);
            let field = |name: &str| -> Result<&str, String> {
                let i = limiter_sim::ACCURACY_COLUMNS
                    .iter()
                    .position(|c| *c == name)
                    .expect("a column of ids");
                fields.get(columns[i]).map(String::as_str).ok_or(format!(
                    "{} line {}: no field {name:?}",
                    path.display(),
                    n + 2
                ))
            };
            let count = |name: &str| -> Result<u64, String> {
                let value = field(name)?;
                value.parse().map_err(|e| {
                    format!("{} line {}: {name} {value:?}: {e}", path.display(), n + 2)
                })
            };
            let row = AccuracyRow {
                requests: count("requests")?,
                admitted: count("admitted")?,
                healthy: count("healthy")?,
                wrong_refusals: count("wrong_refusals")?,
                wrong_refusals_after_2s: count("wrong_refusals_after_2s")?,
                over_admissions: count("over_admissions")?,
                origin_requests: count("origin_requests")?,
                origin_refused: count("origin_refused")?,
                origin_requests_after_2s: count("origin_requests_after_2s")?,
                origin_refused_after_2s: count("origin_refused_after_2s")?,
                peak_heap: {
                    let value = field("peak_heap_bytes")?;
                    value.parse().map_err(|e| {
                        format!(
                            "{} line {}: peak_heap_bytes {value:?}: {e}",
                            path.display(),
                            n + 2
                        )
                    })?
                },
                notes: field("notes")?.to_string(),
            };
            let key = (
                field("workload")?.to_string(),
                field("rate")?.to_string(),
                field("limiter")?.to_string(),
            );
            rows.insert(key, row);
        }
        let mut missing = Vec::new();
        for workload in limiter_sim::WORKLOADS {
            for (_, rate) in limiter_sim::RATES {
                for limiter in limiter_sim::STRUCTURES {
                    let key = (
                        workload.to_string(),
                        rate.to_string(),
                        limiter.id.to_string(),
                    );
                    if !rows.contains_key(&key) {
                        missing.push(format!("{workload},{rate},{}", limiter.id));
                    }
                }
            }
        }
        if !missing.is_empty() {
            return Err(format!(
                "{}: {} row(s) missing (workload,rate,limiter):\n  {}",
                path.display(),
                missing.len(),
                missing.join("\n  ")
            ));
        }
        Ok(Accuracy { rows })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// A row of the table (all expected rows were read).
    pub fn get(&self, workload: &str, rate: &str, limiter: &str) -> &AccuracyRow {
        let key = (workload.to_string(), rate.to_string(), limiter.to_string());
        self.rows
            .get(&key)
            .unwrap_or_else(|| panic!("no accuracy row {key:?}"))
    }
}

/// A CSV line's fields; a field in double quotes may hold commas (`""` is a quote).
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().expect("one field").push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            _ => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

/// A table a bench printed: the line that starts it, the lines before the table, the rows.
pub struct Printed {
    pub head: Vec<String>,
    pub table: Vec<String>,
}

/// The Markdown table after the first line of `text` that starts with `heading`.
fn printed_table(text: &str, heading: &str, what: &str, path: &Path) -> Result<Printed, String> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(heading))
        .ok_or(format!(
            "{}: no {what} table (no line starting {heading:?}); did the bench fail?",
            path.display()
        ))?;
    let mut head = vec![lines[start].trim().to_string()];
    let mut j = start + 1;
    while j < lines.len() && !lines[j].starts_with('|') {
        if !lines[j].trim().is_empty() {
            head.push(lines[j].trim().to_string());
        }
        j += 1;
    }
    let table: Vec<String> = lines[j..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_end().to_string())
        .collect();
    if table.len() < 3 {
        return Err(format!(
            "{}: the {what} table after {:?} has no rows",
            path.display(),
            lines[start].trim()
        ));
    }
    Ok(Printed { head, table })
}

/// The machine the run was on, for the report's header.
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    /// ", KVM VM" on a virtual machine, else empty.
    pub virtual_machine: String,
    pub kernel: String,
    pub rustc: String,
}

impl Machine {
    fn read() -> Machine {
        let output = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let lscpu = output("lscpu", &[]);
        let field = |name: &str| {
            lscpu
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        let rustc = output("rustc", &["--version"]);
        Machine {
            cpu: field("Model name:").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            virtual_machine: field("Hypervisor vendor:")
                .map(|v| format!(", {v} VM"))
                .unwrap_or_default(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            rustc: Some(rustc.trim().to_string())
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "unknown".into()),
        }
    }

    pub fn line(&self) -> String {
        format!(
            "{}, {} cores{}, Linux {}, {}",
            self.cpu, self.cores, self.virtual_machine, self.kernel, self.rustc
        )
    }
}

/// Everything one run left, read and checked.
pub struct Inputs {
    pub results: Results,
    pub accuracy: Accuracy,
    pub latency: Printed,
    pub memory: Printed,
    /// `run.env`: what scripts/compare recorded (command, date, timings, load).
    pub env: HashMap<String, String>,
    pub machine: Machine,
}

impl Inputs {
    pub fn read(run_dir: &Path) -> Result<Inputs, String> {
        let file = |name: &str| -> PathBuf { run_dir.join(name) };
        // The criterion results first: a failed or renamed bench shows there.
        let results = Results::read(&file("criterion"))?;
        let accuracy = Accuracy::read(&file(limiter_sim::ACCURACY_FILE))?;
        let bench_log = file("bench.log");
        let latency = printed_table(
            &read(&bench_log, "the benches' output")?,
            ids::rate::LATENCY_HEADING,
            "rate latency",
            &bench_log,
        )?;
        let memory_txt = file("memory.txt");
        let memory = printed_table(
            &read(&memory_txt, "the memory bench's output")?,
            ids::memory::HEADING,
            "peak memory",
            &memory_txt,
        )?;
        let env = read(&file("run.env"), "the run's settings")?
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Inputs {
            results,
            accuracy,
            latency,
            memory,
            env,
            machine: Machine::read(),
        })
    }

    /// A `run.env` value, `?` when the run did not record it.
    pub fn env(&self, key: &str) -> &str {
        self.env.get(key).map_or("?", String::as_str)
    }
}

fn read(path: &Path, what: &str) -> Result<String, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{} is missing ({what})", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}
