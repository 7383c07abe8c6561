//! `Retry-After` (RFC 9110 §10.2.3) for a refusal: whole seconds, never early, with an
//! optional jitter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use crate::Rejected;

/// `Retry-After` for `rejected`, in seconds: its `retry_after` rounded up to whole seconds
/// (at least 1), plus a random 0 to `jitter_secs` seconds; `None` when the wait is unknown
/// (an in-flight refusal waits for other requests to finish; a rate limit of 0 lets nothing
/// through), where the field is best left out.
///
/// Never earlier than the exact time, so a client that obeys it finds room; the jitter
/// spreads clients refused together over several seconds, as the RateLimit draft recommends
/// (§8.5), instead of sending them back all at once.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::fields::retry::retry_after_secs;
/// use floodgate::Limiter;
///
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_rate(1, Duration::from_secs(1))
///     .build()
///     .unwrap();
/// let _ = limiter.try_acquire("k").unwrap();
/// let refused = limiter.try_acquire("k").unwrap_err();
/// assert!(matches!(retry_after_secs(&refused, 0), Some(1..=2)));
/// ```
pub fn retry_after_secs(rejected: &Rejected, jitter_secs: u64) -> Option<u64> {
    let wait = rejected.retry_after?;
    Some(whole_secs(wait).saturating_add(jitter(jitter_secs)))
}

/// `d` in whole seconds, rounded up, at least 1.
pub(super) fn whole_secs(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

/// A uniformly random whole number from 0 to `max`.
///
/// The randomness comes from std's `RandomState`: each one is made with fresh random keys
/// (seeded once per thread from the OS), so hashing nothing with a new one gives a fresh
/// pseudo-random number with no lock, no shared state and no extra dependency. Ample for
/// spreading retries; it is only drawn for rate refusals when jitter is on.
fn jitter(max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let random = RandomState::new().build_hasher().finish();
    // Multiply and shift rather than `%`: no bias towards small values, and no overflow for
    // `max == u64::MAX` in 128 bits. The result is at most `max`.
    ((u128::from(random) * (u128::from(max) + 1)) >> 64) as u64
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::Reason;

    fn after(ms: u64, jitter_secs: u64) -> Option<u64> {
        let rejected = Rejected {
            reason: Reason::Rate,
            estimate: 2,
            limit: 1,
            retry_after: Some(Duration::from_millis(ms)),
        };
        retry_after_secs(&rejected, jitter_secs)
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_never_zero() {
        assert_eq!(after(0, 0), Some(1));
        assert_eq!(after(1, 0), Some(1));
        assert_eq!(after(1000, 0), Some(1));
        assert_eq!(after(1001, 0), Some(2));
        assert_eq!(after(1500, 0), Some(2));
        assert_eq!(whole_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn no_retry_after_where_the_wait_is_unknown() {
        let inflight = Rejected {
            reason: Reason::Inflight,
            estimate: 2,
            limit: 1,
            retry_after: None,
        };
        assert_eq!(retry_after_secs(&inflight, 5), None);
    }

    #[test]
    fn jitter_stays_within_its_bound_and_varies() {
        assert_eq!(jitter(0), 0);
        let draws: Vec<u64> = (0..1000).map(|_| jitter(3)).collect();
        assert!(draws.iter().all(|&j| j <= 3));
        for value in 0..=3 {
            // Each of 4 values has a (3/4)^1000 chance to be missing: never, in practice.
            assert!(draws.contains(&value), "{value} never drawn");
        }
        // The widest range does not overflow, and spreads over all of it.
        assert_ne!(jitter(u64::MAX), jitter(u64::MAX));
        for _ in 0..100 {
            let secs = after(2500, 5).unwrap();
            assert!((3..=8).contains(&secs), "{secs}");
        }
        let far = Rejected {
            reason: Reason::Rate,
            estimate: 2,
            limit: 1,
            retry_after: Some(Duration::MAX),
        };
        assert_eq!(
            retry_after_secs(&far, u64::MAX),
            Some(u64::MAX),
            "saturates, never wraps"
        );
    }
}
