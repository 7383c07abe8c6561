//! The origins behind the limiter, chosen by the Host header: 10,000 healthy ones, a slow one,
//! a flooded one, and the hosts a key-rotating attacker invents.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HOST;
use hyper::{Request, Response};

pub const HEALTHY_ORIGINS: usize = 10_000;
pub const SLOW_HOST: &str = "slow.example";
pub const FLOODED_HOST: &str = "flooded.example";
/// Where the demo's key-rotating attacker invents its hosts.
const ROTATING_SUFFIX: &str = ".rotating.example";
const SLOW_RESPONSE: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Healthy,
    Slow,
    Flooded,
    /// Invented hosts, each sent a request or two: an attacker rotating keys.
    Rotating,
    /// A Host that is none of the above (seen only by the soak server, from a misconfigured
    /// client).
    Other,
}

pub fn healthy_host(i: usize) -> String {
    format!("site-{i:05}.example")
}

/// The `n`th host of the rotating attacker (n: any number; the demo draws them at random).
pub fn rotating_host(n: u64) -> String {
    format!("{n:016x}{ROTATING_SUFFIX}")
}

/// The class of a Host header value, and for a healthy origin its number.
pub fn classify(host: &[u8]) -> (Class, Option<usize>) {
    if host == SLOW_HOST.as_bytes() {
        return (Class::Slow, None);
    }
    if host == FLOODED_HOST.as_bytes() {
        return (Class::Flooded, None);
    }
    if host.ends_with(ROTATING_SUFFIX.as_bytes()) {
        return (Class::Rotating, None);
    }
    let healthy = std::str::from_utf8(host)
        .ok()
        .and_then(|h| h.strip_prefix("site-")?.strip_suffix(".example"))
        .filter(|n| n.len() == 5)
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|&i| i < HEALTHY_ORIGINS);
    match healthy {
        Some(i) => (Class::Healthy, Some(i)),
        None => (Class::Other, None),
    }
}

/// The origins behind the limiter: the slow one takes its time, everyone else answers at once.
pub async fn origin(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let slow = req
        .headers()
        .get(HOST)
        .is_some_and(|h| h.as_bytes() == SLOW_HOST.as_bytes());
    if slow {
        tokio::time::sleep(SLOW_RESPONSE).await;
    }
    Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}
