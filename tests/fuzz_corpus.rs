#![cfg(not(floodgate_loom))]
//! The fuzz harnesses of `fuzz/harness.rs`, run as ordinary tests over the committed corpus
//! in `fuzz/corpus/<target>/`: every seed, and every input a fuzz run found and kept, is
//! replayed on stable Rust, without libFuzzer. `scripts/fuzz` runs the same harnesses under
//! cargo-fuzz to look for new inputs.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::panic::{catch_unwind, resume_unwind};
use std::path::PathBuf;

/// Runs `harness` on every file of `fuzz/corpus/<target>/`, naming the file that fails.
fn replay(target: &str, harness: fn(&[u8])) {
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
        if let Err(panic) = catch_unwind(|| harness(&data)) {
            let file = file.display();
            eprintln!("fuzz corpus input {file} failed; under libFuzzer:");
            eprintln!("  cd fuzz && cargo +nightly fuzz run {target} {file}");
            resume_unwind(panic);
        }
    }
}

#[test]
fn estimator_corpus() {
    replay("estimator", harness::estimator);
}

#[test]
fn inflight_corpus() {
    replay("inflight", harness::inflight);
}

#[test]
fn rate_corpus() {
    replay("rate", harness::rate);
}

#[test]
fn limiter_corpus() {
    replay("limiter", harness::limiter);
}

#[test]
fn construction_corpus() {
    replay("construction", harness::construction);
}
