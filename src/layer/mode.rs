//! What a [`LimitService`] does with a request over a limit: the markers its fourth type
//! parameter (`W`) takes.

use std::time::Duration;

#[cfg(doc)]
use super::{LimitLayer, LimitService};

/// A request over a limit is refused at once: the default of [`LimitLayer`] and
/// [`LimitService`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAtOnce;

/// A request over a limit waits up to this long for room before it is refused: see
/// [`LimitLayer::wait`].
#[derive(Debug, Clone, Copy)]
pub struct WaitUpTo(pub Duration);
