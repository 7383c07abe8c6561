//! libFuzzer target: the fuzz harness's `estimator::run`, whose file
//! (`fuzz/harness/src/estimator.rs`) says what it checks.
#![no_main]

use floodgate_fuzz_harness::estimator::{run, EstimatorInput};

libfuzzer_sys::fuzz_target!(|input: EstimatorInput| run(&input));
