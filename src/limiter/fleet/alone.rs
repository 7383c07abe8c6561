//! The seam without the `redis` feature: no fleet. Every type is of size zero and every
//! answer a constant, so that the request path's fleet branches compile away.

use std::marker::PhantomData;

use super::state::FleetState;
use crate::rate::{Rate, WindowView};
use crate::ConfigError;

/// A limiter's fleet: none.
#[derive(Clone, Default)]
pub(crate) struct Fleet;

impl Fleet {
    #[inline(always)]
    pub(crate) fn state(&self) -> Option<FleetState> {
        None
    }

    #[inline(always)]
    pub(crate) fn is_joined(&self) -> bool {
        false
    }

    /// The fleet's gauges for the metrics: none.
    pub(crate) fn gauges(&self) -> Option<crate::limiter::tally::FleetGauges> {
        None
    }
}

/// A builder's fleet: none.
pub(crate) struct FleetSetup<S>(PhantomData<fn() -> S>);

impl<S> Clone for FleetSetup<S> {
    fn clone(&self) -> Self {
        FleetSetup(PhantomData)
    }
}

impl<S> FleetSetup<S> {
    pub(crate) fn none() -> Self {
        FleetSetup(PhantomData)
    }

    pub(crate) fn aligns_windows(&self) -> bool {
        false
    }

    pub(crate) fn join(&self, _rate: Option<&Rate>) -> Result<Fleet, ConfigError> {
        Ok(Fleet)
    }

    pub(crate) fn start(&self, _shared: &std::sync::Arc<S>, _fleet: &Fleet) {}
}

/// A rate threshold's fleet part: none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FleetRate;

impl FleetRate {
    /// Out of a fleet.
    pub(crate) const NONE: FleetRate = FleetRate;

    /// Never called without a fleet (the state it follows from is never there).
    #[inline(always)]
    pub(crate) fn new(_share: Option<isize>, _judges_view: bool, _sync_nanos: u64) -> Self {
        FleetRate
    }

    #[inline(always)]
    pub(crate) fn judges_view(&self) -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn share(&self) -> Option<isize> {
        None
    }

    #[inline(always)]
    pub(crate) fn sync_nanos(&self) -> u64 {
        0
    }

    #[inline(always)]
    pub(crate) fn held_for(&self, retry: u64) -> u64 {
        retry
    }
}

/// A promoted key's view of the fleet: none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct FleetView;

impl FleetView {
    #[inline(always)]
    pub(crate) fn judged(
        &self,
        _local: &WindowView,
        _window: u64,
        _own_now: u64,
        _own_previous: u64,
        _cost: isize,
    ) -> Option<WindowView> {
        None
    }

    #[inline(always)]
    pub(crate) fn is_first_word(&self, _sync: u64) -> bool {
        false
    }

    #[inline(always)]
    pub(crate) fn note_refusal(&mut self, _window: u64) {}
}
