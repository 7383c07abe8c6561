//! libFuzzer target: `harness::estimator::run` (see `fuzz/harness/estimator.rs` for what it checks).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

use harness::estimator::EstimatorInput;

libfuzzer_sys::fuzz_target!(|input: EstimatorInput| harness::estimator::run(&input));
