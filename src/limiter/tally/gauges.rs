//! What the metrics read besides the decisions: the gauges, and what counts as near a limit.

/// The ratio of its limit at which an admission counts as near it (envoy's near-limit ratio).
pub(crate) const NEAR_LIMIT: f64 = 0.8;

/// What the clock reads besides the decisions, for the gauges (read only where metrics are
/// published).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gauges {
    /// Keys the exact stage holds now, and how many it can.
    pub(crate) exact_keys: usize,
    pub(crate) exact_capacity: usize,
    /// Requests waiting for a permit.
    pub(crate) waiting: usize,
    /// Keys learning their in-flight limit, and of them those held below their ceiling.
    pub(crate) learning: usize,
    pub(crate) learning_held: usize,
    /// A sketch's noise against its promotion threshold (saturated at 0.5), per kind counted.
    pub(crate) rate_saturation: Option<f64>,
    pub(crate) inflight_saturation: Option<f64>,
    /// In a fleet: whether Redis answers, the nodes it counts, the age of the last sync.
    pub(crate) fleet: Option<FleetGauges>,
}

/// A fleet's gauges.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FleetGauges {
    pub(crate) connected: bool,
    pub(crate) nodes: usize,
    pub(crate) last_sync_age: Option<f64>,
}
