//! libFuzzer target: the fuzz harness's `rate::run`, whose file
//! (`fuzz/harness/src/rate.rs`) says what it checks.
#![no_main]

use floodgate_fuzz_harness::rate::{run, RateInput};

libfuzzer_sys::fuzz_target!(|input: RateInput| run(&input));
