//! libFuzzer target: `harness::rate::run` (see `fuzz/harness/rate.rs` for what it checks).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

use harness::rate::RateInput;

libfuzzer_sys::fuzz_target!(|input: RateInput| harness::rate::run(&input));
