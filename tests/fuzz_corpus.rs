#![cfg(not(floodgate_loom))]
//! The fuzz harnesses of `fuzz/harness/`, run as ordinary tests: every file of the committed
//! corpus `fuzz/corpus/<target>/` (seeds found by fuzzing and kept by `cargo fuzz cmin`),
//! decoded as libFuzzer decodes it, and the named seed inputs of each harness (the scenarios
//! worth keeping by name). On stable Rust, without libFuzzer; `scripts/fuzz` runs the same
//! harnesses under cargo-fuzz to look for new inputs.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use arbitrary::Arbitrary;
use floodgate_fuzz_harness as harness;

/// Runs `run` on every file of `fuzz/corpus/<target>/` that decodes (libFuzzer skips the
/// others too), naming the file that fails.
fn replay<T: for<'a> Arbitrary<'a>>(target: &str, run: fn(&T)) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("a corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus {} is empty: nothing would be tested",
        dir.display()
    );
    for file in &files {
        let data =
            std::fs::read(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let Some(input) = harness::decode::<T>(&data) else {
            continue;
        };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(&input))) {
            let file = file.display();
            eprintln!("fuzz corpus input {file} failed; under libFuzzer:");
            eprintln!("  cd fuzz && cargo +nightly fuzz run {target} {file}");
            resume_unwind(panic);
        }
    }
}

/// Runs the named seeds of one harness, naming the one that fails.
fn seeds<T: std::fmt::Debug>(seeds: Vec<(&str, T)>, run: fn(&T)) {
    for (name, input) in &seeds {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(input))) {
            eprintln!("named seed {name} failed: {input:?}");
            resume_unwind(panic);
        }
    }
}

#[test]
fn estimator_corpus() {
    replay("estimator", harness::estimator::run);
}

#[test]
fn inflight_corpus() {
    replay("inflight", harness::inflight::run);
}

#[test]
fn rate_corpus() {
    replay("rate", harness::rate::run);
}

#[test]
fn limiter_corpus() {
    replay("limiter", harness::limiter::run);
}

#[test]
fn construction_corpus() {
    replay("construction", harness::construction::run);
}

#[test]
fn wait_corpus() {
    replay("wait", harness::wait::run);
}

#[test]
fn estimator_named_seeds() {
    seeds(harness::estimator::seeds(), harness::estimator::run);
}

#[test]
fn rate_named_seeds() {
    seeds(harness::rate::seeds(), harness::rate::run);
}

#[test]
fn limiter_named_seeds() {
    seeds(harness::limiter::seeds(), harness::limiter::run);
}

#[test]
fn construction_named_seeds() {
    seeds(harness::construction::seeds(), harness::construction::run);
}

#[test]
fn wait_named_seeds() {
    seeds(harness::wait::seeds(), harness::wait::run);
}
