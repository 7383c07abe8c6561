//! libFuzzer target: the fuzz harness's `wait::run`, whose file (`fuzz/harness/src/wait.rs`)
//! says what it checks.
#![no_main]

use floodgate_fuzz_harness::wait::{run, WaitInput};

libfuzzer_sys::fuzz_target!(|input: WaitInput| run(&input));
