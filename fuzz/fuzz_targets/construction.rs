//! libFuzzer target: `harness::construction::run` (see `fuzz/harness/construction.rs` for what it checks).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

use harness::construction::ConstructionInput;

libfuzzer_sys::fuzz_target!(|input: ConstructionInput| harness::construction::run(&input));
