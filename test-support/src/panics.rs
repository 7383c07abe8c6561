//! The message a panic carries: for the tests that check what a panic says, and for the hooks
//! and reports that print one (tests/common/serial.rs, tests/common/fork.rs, tests/faults.rs).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message of a panic payload: the `&str` or `String` that `panic!` was given, or a
/// placeholder for a payload of any other type (which no expected message can equal).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic payload that is not a string)".to_owned()
    }
}

/// Runs `f`, which must panic, and returns its panic's message.
pub fn panic_message_of(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("did not panic");
    panic_message(&*payload)
}
