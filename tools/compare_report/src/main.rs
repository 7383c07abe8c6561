//! The comparison report of `scripts/compare`, from one run of the benches.
//!
//! ```text
//! cargo run --release --manifest-path tools/compare_report/Cargo.toml -- RUN_DIR [--docs DIR] [--readme README.md]
//! ```
//!
//! RUN_DIR is what `scripts/compare` left in `target/compare`: `criterion/` (the run's
//! `CRITERION_HOME`), `bench.log` (the criterion benches' output, with the rate bench's latency
//! table), `memory.txt` (the memory bench's table), `limiter-accuracy.csv` (the limiter
//! bench's untimed accuracy pass) and `run.env` (command, date, timings, load). Writes
//! `RUN_DIR/results.csv` (one row per result), `DIR/comparison.md`, `DIR/ns_per_op.svg` and
//! `DIR/overestimate.svg` (DIR: `docs`), and with `--readme`, the summary between the README's
//! markers; the summary (the README's tables) also goes to standard output.
//!
//! `compare_report --overestimate-only [--docs DIR]` needs no run: it draws
//! `DIR/overestimate.svg` alone and prints its table. `compare_report --adaptive FILE [--docs
//! DIR]` draws `DIR/<FILE's stem>.svg` from what `cargo run --release --example adaptive --
//! --json FILE` wrote.
//!
//! Which results to expect comes from `test-support/src/bench_ids.rs`, the module the benches
//! take their ids from. Every input is read and every expected result checked before anything is
//! written: a missing one fails the report, naming the file or the row.

mod adaptive;
mod inputs;
mod parts;
mod plots;
mod report;

use std::path::PathBuf;
use std::process::ExitCode;

// The benches' ids, as `crate::ids` for the modules above.
use floodgate_test_support::bench_ids as ids;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare_report: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut run_dir: Option<PathBuf> = None;
    let mut docs = PathBuf::from("docs");
    let mut readme: Option<PathBuf> = None;
    let mut overestimate_only = false;
    let mut adaptive: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    let usage = "usage: compare_report RUN_DIR [--docs DIR] [--readme README.md]\n       \
                 compare_report --overestimate-only [--docs DIR]\n       \
                 compare_report --adaptive FILE [--docs DIR]";
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--docs" => docs = args.next().ok_or(usage)?.into(),
            "--overestimate-only" => overestimate_only = true,
            "--adaptive" => adaptive = Some(args.next().ok_or(usage)?.into()),
            "--readme" => readme = Some(args.next().ok_or(usage)?.into()),
            _ if run_dir.is_none() && !arg.starts_with('-') => run_dir = Some(arg.into()),
            _ => return Err(format!("unknown argument {arg:?}\n{usage}")),
        }
    }
    if let Some(json) = adaptive {
        // Named after the JSON file: adaptive-24.json draws DIR/adaptive-24.svg.
        let stem = json.file_stem().ok_or("--adaptive FILE: a file name")?;
        let svg = docs.join(stem).with_extension("svg");
        adaptive::draw(&json, &svg).map_err(|e| format!("{}: {e}", json.display()))?;
        eprintln!("compare_report: wrote {}", svg.display());
        return Ok(());
    }
    if overestimate_only {
        return draw_overestimates(&docs).map(|rows| {
            let (heading, table) = plots::overestimate_table(&rows);
            println!("{heading}\n\n{}", table.join("\n"));
        });
    }
    let run_dir = run_dir.ok_or(usage)?;

    let inputs = inputs::Inputs::read(&run_dir)?;
    eprintln!(
        "compare_report: {} results and {} accuracy rows read from {}",
        inputs.results.len(),
        inputs.accuracy.len(),
        run_dir.display()
    );

    let csv = run_dir.join("results.csv");
    write(&csv, &inputs.results.to_csv())?;

    let overestimates = draw_overestimates(&docs)?;
    let figure = docs.join("ns_per_op.svg");
    plots::draw_ns_per_op(&report::panels(&inputs.results), &figure)
        .map_err(|e| format!("{}: {e}", figure.display()))?;
    eprintln!("compare_report: wrote {}", figure.display());

    let report = report::Report::new(&inputs, plots::overestimate_table(&overestimates));
    let doc = docs.join("comparison.md");
    write(&doc, &report.document())?;
    println!("{}", report.summary(false));
    if let Some(readme) = readme {
        let text =
            std::fs::read_to_string(&readme).map_err(|e| format!("{}: {e}", readme.display()))?;
        let text = report::replace_readme_block(&text, &report.summary(true))
            .map_err(|e| format!("{}: {e}", readme.display()))?;
        write(&readme, &text)?;
    }
    Ok(())
}

/// Measures the over-estimates and draws `DIR/overestimate.svg`.
fn draw_overestimates(docs: &std::path::Path) -> Result<Vec<plots::Overestimate>, String> {
    std::fs::create_dir_all(docs).map_err(|e| format!("{}: {e}", docs.display()))?;
    let overestimates = plots::overestimates();
    let figure = docs.join("overestimate.svg");
    plots::draw_overestimates(&overestimates, &figure)
        .map_err(|e| format!("{}: {e}", figure.display()))?;
    eprintln!("compare_report: wrote {}", figure.display());
    Ok(overestimates)
}

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("compare_report: wrote {}", path.display());
    Ok(())
}

/// `1234567` as `1,234,567`: the figures' and the tables' counts.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// A median in ns: three significant digits at most (the tables' cells, the figures' labels).
fn ns(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.2}")
    } else if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}
