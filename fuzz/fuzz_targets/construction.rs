//! libFuzzer target: the fuzz harness's `construction::run`, whose file
//! (`fuzz/harness/src/construction.rs`) says what it checks.
#![no_main]

use floodgate_fuzz_harness::construction::{run, ConstructionInput};

libfuzzer_sys::fuzz_target!(|input: ConstructionInput| run(&input));
