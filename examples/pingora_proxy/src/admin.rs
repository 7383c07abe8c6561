//! The admin listener (`--admin ADDR`, off by default; keep it on loopback): the proxy's
//! counts and the limiter's figures, and its limits read and changed while it runs.
//!
//! - `GET /metrics`: the proxy's [`Counters`] and the limiter's limits and figures
//!   ([`Limiter::stats`]), in Prometheus' text format.
//! - `GET /limits`: the limits in force, as `max-inflight=N max-rate=N` (`off` for a kind
//!   turned off).
//! - `PUT /limits` (or `POST`) with a body in that form: new limits, through
//!   [`Limiter::set_limits`]. A kind left out keeps its limit. Answered `200` with the limits
//!   now in force, or `400` with why they were refused (the old ones stay).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use floodgate::{Limiter, Limits};
use http::{Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;

use crate::Counters;

/// The longest body `PUT /limits` reads.
const MAX_BODY: usize = 4096;

/// The admin listener's application.
pub struct Admin {
    limiter: Limiter<String>,
    counters: Arc<Counters>,
}

impl Admin {
    /// The admin of `limiter`, showing `counters`.
    pub fn new(limiter: Limiter<String>, counters: Arc<Counters>) -> Self {
        Admin { limiter, counters }
    }

    /// The answer to `method` on `path` with `body`: its status and text.
    pub fn answer(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        match (method, path) {
            ("GET", "/metrics") => (200, self.metrics()),
            ("GET", "/limits") => (200, show(self.limiter.limits())),
            ("PUT" | "POST", "/limits") => {
                let asked = std::str::from_utf8(body).map_err(|_| "not UTF-8".to_owned());
                let limits = asked.and_then(|text| parse_limits(text, self.limiter.limits()));
                let set = limits.and_then(|limits| {
                    self.limiter
                        .set_limits(limits)
                        .map_err(|e| format!("refused: {e}"))
                });
                match set {
                    Ok(()) => (200, show(self.limiter.limits())),
                    Err(why) => (400, format!("{why}\n")),
                }
            }
            (_, "/metrics" | "/limits") => (405, "method not allowed\n".to_owned()),
            _ => (
                404,
                "not found: GET /metrics, GET or PUT /limits\n".to_owned(),
            ),
        }
    }

    /// The counts and figures, in Prometheus' text format.
    pub fn metrics(&self) -> String {
        let c = &self.counters;
        let mut out = String::with_capacity(1024);
        out.push_str(
            "# HELP floodgate_proxy_requests_total Requests by what became of them.\n\
             # TYPE floodgate_proxy_requests_total counter\n",
        );
        for (outcome, counter) in [
            ("admitted", &c.admitted),
            ("rate", &c.rate),
            ("inflight", &c.inflight),
            ("cost_over_limit", &c.cost_over_limit),
            ("misconfigured", &c.misconfigured),
            ("unkeyed_refused", &c.unkeyed_refused),
            ("unkeyed_served", &c.unkeyed_served),
            ("length_required", &c.length_required),
            ("charge_exceeded", &c.charge_exceeded),
        ] {
            let n = counter.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "floodgate_proxy_requests_total{{outcome=\"{outcome}\"}} {n}"
            );
        }
        let limits = self.limiter.limits();
        out.push_str(
            "# HELP floodgate_proxy_limit The default limits in force (absent: off).\n\
             # TYPE floodgate_proxy_limit gauge\n",
        );
        for (kind, limit) in [
            ("inflight", limits.inflight_limit()),
            ("rate", limits.rate_limit()),
        ] {
            if let Some(limit) = limit {
                let _ = writeln!(out, "floodgate_proxy_limit{{kind=\"{kind}\"}} {limit}");
            }
        }
        let stats = self.limiter.stats();
        out.push_str(
            "# HELP floodgate_proxy_exact_keys Keys in the limiter's exact stage.\n\
             # TYPE floodgate_proxy_exact_keys gauge\n",
        );
        let _ = writeln!(out, "floodgate_proxy_exact_keys {}", stats.promoted);
        out.push_str(
            "# HELP floodgate_proxy_saturated 1 when the limiter's sketches are too noisy for \
             the traffic.\n# TYPE floodgate_proxy_saturated gauge\n",
        );
        let _ = writeln!(
            out,
            "floodgate_proxy_saturated {}",
            u8::from(stats.saturated)
        );
        out
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let method = session.req_header().method.as_str().to_owned();
        let path = session.req_header().uri.path().to_owned();
        let mut body = Vec::new();
        let (status, text) = loop {
            match session.read_request_body().await {
                Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_BODY => {
                    body.extend_from_slice(&chunk)
                }
                Ok(Some(_)) => break (413, "body too long\n".to_owned()),
                Ok(None) => break self.answer(&method, &path, &body),
                Err(e) => break (400, format!("cannot read the body: {e}\n")),
            }
        };
        let length = text.len();
        let mut response = Response::new(text.into_bytes());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        let fields = response.headers_mut();
        fields.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(crate::TEXT_PLAIN),
        );
        fields.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(length),
        );
        response
    }
}

/// Limits as `GET /limits` shows them.
pub fn show(limits: Limits) -> String {
    let kind = |limit: Option<u32>| limit.map_or_else(|| "off".to_owned(), |n| n.to_string());
    format!(
        "max-inflight={} max-rate={}\n",
        kind(limits.inflight_limit()),
        kind(limits.rate_limit())
    )
}

/// New limits from `max-inflight=N|off` and `max-rate=N|off` words (separated by spaces, `&`
/// or lines), a kind left out keeping its limit in `now`.
///
/// # Errors
///
/// An unknown word, a value that is neither a whole number nor `off`, or no word at all.
pub fn parse_limits(text: &str, now: Limits) -> Result<Limits, String> {
    let mut inflight = now.inflight_limit();
    let mut rate = now.rate_limit();
    let mut said = false;
    for word in text.split(|c: char| c.is_whitespace() || c == '&') {
        if word.is_empty() {
            continue;
        }
        let (name, value) = word
            .split_once('=')
            .ok_or_else(|| format!("{word:?} is not NAME=VALUE"))?;
        let value = match value {
            "off" => None,
            n => Some(
                n.parse::<u32>()
                    .map_err(|_| format!("{name} {n:?} is not a whole number or off"))?,
            ),
        };
        match name {
            "max-inflight" => inflight = value,
            "max-rate" => rate = value,
            other => return Err(format!("unknown limit {other:?}: max-inflight or max-rate")),
        }
        said = true;
    }
    if !said {
        return Err("no limit given: max-inflight=N|off max-rate=N|off".to_owned());
    }
    let limits = match inflight {
        Some(n) => Limits::new().max_inflight(n),
        None => Limits::new().no_inflight(),
    };
    Ok(match rate {
        Some(n) => limits.max_rate(n),
        None => limits.no_rate(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn admin() -> Admin {
        let limiter = Limiter::builder()
            .max_inflight(4)
            .max_rate(50, Duration::from_secs(1))
            .build()
            .unwrap();
        Admin::new(limiter, Arc::default())
    }

    #[test]
    fn limits_change_while_running_and_bad_ones_are_refused_with_why() {
        let admin = admin();
        assert_eq!(
            admin.answer("GET", "/limits", b""),
            (200, "max-inflight=4 max-rate=50\n".to_owned())
        );
        let (status, text) = admin.answer("PUT", "/limits", b"max-rate=7");
        assert_eq!(
            (status, text.as_str()),
            (200, "max-inflight=4 max-rate=7\n")
        );
        let (status, text) = admin.answer("PUT", "/limits", b"max-inflight=off&max-rate=off");
        assert_eq!(status, 400, "a limiter with no limit at all: {text}");
        assert_eq!(admin.limiter.limits().rate_limit(), Some(7), "unchanged");
        for bad in [&b"max-rate=-1"[..], b"speed=3", b"", b"max-rate", b"\xff"] {
            let (status, text) = admin.answer("PUT", "/limits", bad);
            assert_eq!(status, 400, "{bad:?}: {text}");
        }
        let (status, _) = admin.answer("PUT", "/limits", b"max-inflight=0");
        assert_eq!(status, 400, "a limit below 1 refuses every key");
        assert_eq!(admin.answer("DELETE", "/limits", b"").0, 405);
        assert_eq!(admin.answer("GET", "/", b"").0, 404);
    }

    #[test]
    fn metrics_show_the_counts_and_the_limits() {
        let admin = admin();
        admin.counters.rate.fetch_add(3, Ordering::Relaxed);
        let text = admin.metrics();
        assert!(
            text.contains("floodgate_proxy_requests_total{outcome=\"rate\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("floodgate_proxy_limit{kind=\"rate\"} 50\n"),
            "{text}"
        );
    }
}
