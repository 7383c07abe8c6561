//! How every loom model (tests/loom_*.rs) is explored. Compiled only under
//! `--cfg floodgate_loom`, the cfg the models run with, as loom itself is.

use ::loom::model::Builder;

/// Explores the interleavings of `model` with at most 3 preemptions per execution, whatever
/// `LOOM_MAX_PREEMPTIONS` says (`Builder::new` reads it; the bound set here replaces it).
pub fn check(model: impl Fn() + Sync + Send + 'static) {
    let mut builder = Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(model);
}
