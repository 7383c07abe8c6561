//! The `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11,
//! for the limits a decision was judged against, as field values (strings), with the names of
//! their policies ([`PolicyNames`]).
//!
//! Every value is built from integers and names checked when they were given: valid field
//! values, so `http::HeaderValue::try_from` (or any other HTTP stack's) takes them as they are.

use std::fmt::Write as _;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::retry::whole_secs;
use crate::{ConfigError, Estimate, Limiter, Limits, Reason, Rejected};

/// The default name of the rate limit's policy: at most `q` requests per `w` seconds.
const RATE_POLICY: &str = "rate";
/// The default name of the in-flight limit's policy: at most `q` requests at once.
const INFLIGHT_POLICY: &str = "inflight";
/// The draft's quota unit for limits on requests at once (§3.1.2).
const CONCURRENT_REQUESTS: &str = "concurrent-requests";
/// The largest Integer a Structured Field can carry (RFC 9651 §3.3.1: 15 digits). Larger
/// counts are sent as this; a serializer must not send more digits.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// The names of the two policies the RateLimit fields describe: `"rate"` and `"inflight"`
/// unless told otherwise.
///
/// A client reads `RateLimit` by its policy's name, so two sets of limits whose fields can
/// meet in one response (stacked layers, an origin's own fields) need names of their own: with
/// the default names, a host's `"rate"` and a client's `"rate"` are one name for two policies.
/// The draft makes a policy's name a Structured Field String (RFC 9651 §3.3.3): printable
/// ASCII, sent between quotes, with `"` and `\` escaped. Names are checked when they are
/// given, so no field is ever built with a name a client cannot parse.
///
/// The limiter's [`name`](crate::LimiterBuilder::name) is not used: it labels metrics for the
/// operator, and is not for every client to read.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::fields::ratelimit::{Policies, PolicyNames};
/// use floodgate::Limits;
///
/// let names = PolicyNames::new("client-rate", "client-inflight")?;
/// let policies = Policies::new(Limits::new().max_rate(5), Some(Duration::from_secs(1)));
/// assert_eq!(policies.policy_named(&names).unwrap(), r#""client-rate";q=5;w=1"#);
/// assert_eq!(policies.policy().unwrap(), r#""rate";q=5;w=1"#);
///
/// assert!(PolicyNames::new("rate", "rate").is_err(), "two policies, one name");
/// assert!(PolicyNames::new("débit", "inflight").is_err(), "not ASCII");
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PolicyNames {
    /// `None`: the default names, so that the default costs no allocation nor reference
    /// count.
    named: Option<Arc<Named>>,
}

/// Policy names of the operator's, and their Structured Field Strings.
#[derive(PartialEq, Eq)]
struct Named {
    rate: String,
    inflight: String,
    rate_item: String,
    inflight_item: String,
}

impl PolicyNames {
    /// The default names, `"rate"` and `"inflight"`.
    pub const DEFAULT: PolicyNames = PolicyNames { named: None };

    /// The rate limit's policy named `rate` and the in-flight limit's `inflight`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::PolicyName`] for a name that is empty or has a character a
    /// Structured Field String cannot carry (anything but printable ASCII, space included),
    /// or for two names alike.
    pub fn new(rate: &str, inflight: &str) -> Result<PolicyNames, ConfigError> {
        let rate_item = sf_string(rate)?;
        let inflight_item = sf_string(inflight)?;
        if rate == inflight {
            return Err(ConfigError::PolicyName {
                name: rate.to_owned(),
                why: "names both policies: a client could not tell their RateLimit items apart",
            });
        }
        Ok(PolicyNames {
            named: Some(Arc::new(Named {
                rate: rate.to_owned(),
                inflight: inflight.to_owned(),
                rate_item,
                inflight_item,
            })),
        })
    }

    /// The rate limit's policy name.
    pub fn rate(&self) -> &str {
        self.named.as_ref().map_or(RATE_POLICY, |n| &n.rate)
    }

    /// The in-flight limit's policy name.
    pub fn inflight(&self) -> &str {
        self.named.as_ref().map_or(INFLIGHT_POLICY, |n| &n.inflight)
    }

    /// The policy name of a refusal's limit: `None` for a refusal that is not over the rate
    /// nor the in-flight limit.
    pub fn of(&self, reason: Reason) -> Option<&str> {
        match reason {
            Reason::Rate => Some(self.rate()),
            Reason::Inflight => Some(self.inflight()),
            _ => None,
        }
    }

    /// The rate policy's name as a field item: a String.
    fn rate_item(&self) -> &str {
        self.named.as_ref().map_or("\"rate\"", |n| &n.rate_item)
    }

    /// The in-flight policy's name as a field item: a String.
    fn inflight_item(&self) -> &str {
        self.named
            .as_ref()
            .map_or("\"inflight\"", |n| &n.inflight_item)
    }
}

impl std::fmt::Debug for PolicyNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyNames")
            .field("rate", &self.rate())
            .field("inflight", &self.inflight())
            .finish()
    }
}

/// `name` as a Structured Field String (RFC 9651 §4.1.6): between quotes, `"` and `\`
/// escaped; refused if it is empty or has a character a String cannot carry.
fn sf_string(name: &str) -> Result<String, ConfigError> {
    let refuse = |why| {
        Err(ConfigError::PolicyName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return refuse("is empty: a client reads a policy by its name");
    }
    if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return refuse(
            "has a character a Structured Field String cannot carry: printable ASCII only",
        );
    }
    let mut item = String::with_capacity(name.len() + 2);
    item.push('"');
    for c in name.chars() {
        if matches!(c, '"' | '\\') {
            item.push('\\');
        }
        item.push(c);
    }
    item.push('"');
    Ok(item)
}

/// The limits one decision was judged against (the request's own, or the limiter's defaults
/// at that moment) and the rate's interval: what the RateLimit fields describe.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::fields::ratelimit::Policies;
/// use floodgate::{Limits, Reason, Limiter};
///
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_rate(2, Duration::from_secs(1))
///     .build()
///     .unwrap();
/// let policies = Policies::of(&limiter, None);
/// assert_eq!(policies.policy().unwrap(), "\"rate\";q=2;w=1");
/// let _ = limiter.try_acquire("k").unwrap();
/// let _ = limiter.try_acquire("k").unwrap();
/// let refused = limiter.try_acquire("k").unwrap_err();
/// assert_eq!(refused.reason, Reason::Rate);
/// assert!(policies.refused(&refused).unwrap().starts_with("\"rate\";r=0;t="));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policies {
    limits: Limits,
    interval: Option<Duration>,
}

impl Policies {
    /// The policies of `limits`, for a limiter whose rate interval is `interval`.
    pub const fn new(limits: Limits, interval: Option<Duration>) -> Policies {
        Policies { limits, interval }
    }

    /// The limits these policies describe.
    pub const fn limits(&self) -> Limits {
        self.limits
    }

    /// The rate limit's interval, which `w` is in whole seconds.
    pub const fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The policies of a request's own limits, or of `limiter`'s defaults as they are now.
    pub fn of<K>(limiter: &Limiter<K>, own: Option<Limits>) -> Policies
    where
        K: Hash + Eq + Send + Sync,
    {
        Policies {
            limits: own.unwrap_or_else(|| limiter.limits()),
            interval: limiter.rate_interval(),
        }
    }

    /// `RateLimit-Policy`: one item per limit kind, the rate first; `None` when the request
    /// had no limit at all (the field must not be empty). Its policies have the default
    /// names ([`policy_named`](Self::policy_named) names them).
    pub fn policy(&self) -> Option<String> {
        self.policy_named(&PolicyNames::DEFAULT)
    }

    /// `RateLimit-Policy` as [`policy`](Self::policy) says, its policies named `names`.
    pub fn policy_named(&self, names: &PolicyNames) -> Option<String> {
        let mut value = String::with_capacity(64);
        if let Some(quota) = self.limits.rate_limit() {
            let _ = write!(value, "{};q={}", names.rate_item(), sf_count(quota));
            if let Some(interval) = self.interval {
                // The draft's window is whole seconds and never 0: rounding up understates
                // the rate (q per a longer window), which only ever makes clients slower.
                let _ = write!(value, ";w={}", sf_integer(whole_secs(interval)));
            }
        }
        if let Some(quota) = self.limits.inflight_limit() {
            if !value.is_empty() {
                value.push_str(", ");
            }
            let _ = write!(
                value,
                "{};q={};qu=\"{CONCURRENT_REQUESTS}\"",
                names.inflight_item(),
                sf_count(quota)
            );
        }
        non_empty(value)
    }

    /// `RateLimit` on a refusal: the policy that refused, nothing left (`r=0`), and for a rate
    /// refusal the seconds until the request would fit (`t`, as `Retry-After` before any
    /// jitter). No `t` where that time is unknown: an in-flight refusal waits for other
    /// requests to finish, a rate limit of 0 never lets anything through. Its policies have
    /// the default names ([`refused_named`](Self::refused_named) names them).
    pub fn refused(&self, rejected: &Rejected) -> Option<String> {
        self.refused_named(rejected, &PolicyNames::DEFAULT)
    }

    /// `RateLimit` on a refusal as [`refused`](Self::refused) says, its policies named
    /// `names`.
    pub fn refused_named(&self, rejected: &Rejected, names: &PolicyNames) -> Option<String> {
        let mut value = String::with_capacity(32);
        match rejected.reason {
            Reason::Rate => {
                let _ = write!(value, "{};r=0", names.rate_item());
                if let Some(wait) = rejected.retry_after {
                    let _ = write!(value, ";t={}", sf_integer(whole_secs(wait)));
                }
            }
            Reason::Inflight => {
                let _ = write!(value, "{};r=0", names.inflight_item());
            }
            // Not a limit the client went over (a limit kind the limiter does not count is
            // the server's configuration error), or a reason this layer does not know yet.
            _ => return None,
        }
        non_empty(value)
    }

    /// `RateLimit` on an admitted response, from the key's counts just after admission (this
    /// request included): the policy closest to its limit (the smallest share of its quota
    /// left), with `r` the requests it still lets through now.
    ///
    /// For the rate, `t` is two intervals (whole seconds, rounded up): the sliding window
    /// forgets a request at most two intervals after it was counted (it weighs on the rest of
    /// its own interval and fades out over the next), so after `t` seconds without requests
    /// the whole quota is back. Quota comes back gradually before that, and a client that
    /// spends only `r` at any time within `t` stays within the limit. The in-flight policy
    /// has no `t`: its quota comes back as requests finish, not with time. Its policies have
    /// the default names ([`admitted_named`](Self::admitted_named) names them).
    pub fn admitted(&self, estimate: &Estimate) -> Option<String> {
        self.admitted_named(estimate, &PolicyNames::DEFAULT)
    }

    /// `RateLimit` on an admitted response as [`admitted`](Self::admitted) says, its
    /// policies named `names`.
    pub fn admitted_named(&self, estimate: &Estimate, names: &PolicyNames) -> Option<String> {
        let rate = self
            .limits
            .rate_limit()
            .zip(estimate.rate)
            .map(|(limit, sliding)| (limit, rate_remaining(limit, sliding)));
        let inflight = self
            .limits
            .inflight_limit()
            .zip(estimate.inflight)
            .map(|(limit, count)| (limit, inflight_remaining(limit, count)));
        let share = |(limit, left): (u32, u32)| f64::from(left) / f64::from(limit.max(1));
        let rate_is_closest = match (rate, inflight) {
            (Some(r), Some(i)) => share(r) <= share(i),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        let mut value = String::with_capacity(32);
        match (rate_is_closest, rate, inflight) {
            (true, Some((_, left)), _) => {
                let _ = write!(value, "{};r={}", names.rate_item(), sf_count(left));
                if let Some(interval) = self.interval {
                    let t = whole_secs(interval.saturating_mul(2));
                    let _ = write!(value, ";t={}", sf_integer(t));
                }
            }
            (_, _, Some((_, left))) => {
                let _ = write!(value, "{};r={}", names.inflight_item(), sf_count(left));
            }
            _ => return None,
        }
        non_empty(value)
    }
}

/// The requests a rate limit still lets through when the key's sliding count (this request
/// included) is `sliding`: one more fits while the count stays at or below the limit.
fn rate_remaining(limit: u32, sliding: f64) -> u32 {
    let left = (f64::from(limit) - sliding).floor();
    if left.is_nan() || left <= 0.0 {
        0
    } else {
        // `as` saturates; never more than the limit.
        (left as u32).min(limit)
    }
}

/// The requests an in-flight limit still lets through when the key has `count` in flight
/// (this request included).
fn inflight_remaining(limit: u32, count: isize) -> u32 {
    let left = i64::from(limit).saturating_sub(count as i64);
    u32::try_from(left.clamp(0, i64::from(limit))).unwrap_or(0)
}

/// A count as a Structured Field Integer: not above the field's maximum.
fn sf_count(n: u32) -> u64 {
    sf_integer(u64::from(n))
}

fn sf_integer(n: u64) -> u64 {
    n.min(SF_INTEGER_MAX)
}

/// A field's value, or `None` (the field left out) when there is nothing to say: a field
/// must not be empty.
fn non_empty(value: String) -> Option<String> {
    (!value.is_empty()).then_some(value)
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn policies(limits: Limits, interval_ms: Option<u64>) -> Policies {
        Policies::new(limits, interval_ms.map(Duration::from_millis))
    }

    fn rejected(reason: Reason, limit: u32, retry_after: Option<Duration>) -> Rejected {
        Rejected {
            reason,
            estimate: limit + 1,
            limit,
            retry_after,
        }
    }

    fn estimate(inflight: Option<isize>, rate: Option<f64>) -> Estimate {
        Estimate { inflight, rate }
    }

    #[test]
    fn policy_field_lists_each_limit_kind_with_its_quota_window_and_unit() {
        let both = policies(Limits::new().max_inflight(64).max_rate(100), Some(1000));
        assert_eq!(
            both.policy().unwrap(),
            "\"rate\";q=100;w=1, \"inflight\";q=64;qu=\"concurrent-requests\""
        );
        let rate = policies(Limits::new().max_rate(5), Some(60_000));
        assert_eq!(rate.policy().unwrap(), "\"rate\";q=5;w=60");
        let inflight = policies(Limits::new().max_inflight(3), None);
        assert_eq!(
            inflight.policy().unwrap(),
            "\"inflight\";q=3;qu=\"concurrent-requests\""
        );
        assert_eq!(policies(Limits::new(), Some(1000)).policy(), None);
    }

    #[test]
    fn windows_round_up_to_whole_seconds_and_are_never_zero() {
        for (ms, w) in [
            (1, 1),
            (100, 1),
            (1000, 1),
            (1001, 2),
            (1500, 2),
            (60_000, 60),
        ] {
            let p = policies(Limits::new().max_rate(10), Some(ms));
            assert_eq!(p.policy().unwrap(), format!("\"rate\";q=10;w={w}"));
        }
    }

    #[test]
    fn integers_stay_within_what_a_structured_field_can_carry() {
        let huge = Policies {
            limits: Limits::new().max_rate(u32::MAX),
            interval: Some(Duration::MAX),
        };
        // A limit is a `u32`, within the field's 15 digits; the window is clamped.
        assert_eq!(
            huge.policy().unwrap(),
            "\"rate\";q=4294967295;w=999999999999999"
        );
        let refused = rejected(Reason::Rate, 1, Some(Duration::MAX));
        assert_eq!(
            huge.refused(&refused).unwrap(),
            "\"rate\";r=0;t=999999999999999"
        );
        let zero = policies(Limits::new().max_rate(0).max_inflight(0), Some(1000));
        assert_eq!(
            zero.policy().unwrap(),
            "\"rate\";q=0;w=1, \"inflight\";q=0;qu=\"concurrent-requests\""
        );
    }

    #[test]
    fn ratelimit_on_a_refusal_names_the_policy_that_refused() {
        let p = policies(Limits::new().max_inflight(2).max_rate(10), Some(1000));
        let rate = rejected(Reason::Rate, 10, Some(Duration::from_millis(1500)));
        assert_eq!(p.refused(&rate).unwrap(), "\"rate\";r=0;t=2");
        let inflight = rejected(Reason::Inflight, 2, None);
        assert_eq!(p.refused(&inflight).unwrap(), "\"inflight\";r=0");
        let never = rejected(Reason::Rate, 0, None);
        assert_eq!(p.refused(&never).unwrap(), "\"rate\";r=0");
        let misconfigured = rejected(Reason::InflightNotCounted, 2, None);
        assert_eq!(p.refused(&misconfigured), None);
    }

    #[test]
    fn policies_are_named_as_the_operator_says_and_a_name_a_string_cannot_carry_is_refused() {
        let names = PolicyNames::new("per-host", "say \"hi\" \\o/").unwrap();
        let p = policies(Limits::new().max_inflight(2).max_rate(10), Some(1000));
        assert_eq!(
            p.policy_named(&names).unwrap(),
            "\"per-host\";q=10;w=1, \"say \\\"hi\\\" \\\\o/\";q=2;qu=\"concurrent-requests\""
        );
        let rate = rejected(Reason::Rate, 10, Some(Duration::from_millis(1500)));
        assert_eq!(
            p.refused_named(&rate, &names).unwrap(),
            "\"per-host\";r=0;t=2"
        );
        let value = p.admitted_named(&estimate(Some(1), Some(0.0)), &names);
        assert_eq!(value.unwrap(), "\"say \\\"hi\\\" \\\\o/\";r=1");
        assert_eq!(names.of(Reason::Inflight), Some("say \"hi\" \\o/"));
        assert_eq!(names.of(Reason::CostOverLimit), None);
        // The default names, whether asked for or not.
        assert_eq!(p.policy_named(&PolicyNames::default()), p.policy());
        assert_eq!(PolicyNames::DEFAULT.rate(), "rate");
        assert_eq!(PolicyNames::DEFAULT.inflight(), "inflight");

        for (rate, inflight) in [
            ("", "inflight"),
            ("rate", ""),
            ("débit", "inflight"),
            ("rate", "in\tflight"),
            ("rate\n", "inflight"),
            ("rate", "inflight\u{7f}"),
            ("same", "same"),
        ] {
            let error = PolicyNames::new(rate, inflight).unwrap_err();
            assert!(
                matches!(error, ConfigError::PolicyName { .. }),
                "{rate:?}, {inflight:?}: {error:?}"
            );
        }
    }

    #[test]
    fn ratelimit_on_an_admission_reports_the_policy_closest_to_its_limit() {
        let p = policies(Limits::new().max_inflight(4).max_rate(10), Some(1000));
        // 3 of 4 in flight (1/4 left) against 2 of 10 this interval (8/10 left).
        let value = p.admitted(&estimate(Some(3), Some(2.0))).unwrap();
        assert_eq!(value, "\"inflight\";r=1");
        // 1 of 4 in flight (3/4 left) against 7.5 of 10 (2 left: 2/10).
        let value = p.admitted(&estimate(Some(1), Some(7.5))).unwrap();
        assert_eq!(value, "\"rate\";r=2;t=2");
        // Counts above a limit (another request came in meanwhile) leave nothing, never less.
        let value = p.admitted(&estimate(Some(9), Some(0.0))).unwrap();
        assert_eq!(value, "\"inflight\";r=0");
        let value = p.admitted(&estimate(Some(0), Some(12.0))).unwrap();
        assert_eq!(value, "\"rate\";r=0;t=2");
        let value = p.admitted(&estimate(Some(0), Some(f64::NAN))).unwrap();
        assert_eq!(value, "\"rate\";r=0;t=2");
        // A kind without a limit is not reported, even when the limiter counts it.
        let rate_only = policies(Limits::new().max_rate(10), Some(30_000));
        let value = rate_only.admitted(&estimate(Some(3), Some(4.0))).unwrap();
        assert_eq!(value, "\"rate\";r=6;t=60");
        let none = policies(Limits::new(), Some(1000));
        assert_eq!(none.admitted(&estimate(Some(3), Some(4.0))), None);
    }
}
