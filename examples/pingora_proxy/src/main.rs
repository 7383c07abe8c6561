//! Runs [`LimitedProxy`]: a pingora HTTP proxy that limits requests per host or per client and
//! answers those over their limits as floodgate's tower layer does.
//!
//! Settings come from flags, then from environment variables (`FLOODGATE_` and the flag's
//! name in capitals, `-` as `_`: `--max-rate` is `FLOODGATE_MAX_RATE`), then from the
//! defaults; `--help` lists them. A setting that cannot be used is an error at start, never a
//! surprise later.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use floodgate::fields::client::{ClientAddr, Forwarding};
use floodgate::fields::cost::UnknownLength;
use floodgate::fields::ratelimit::PolicyNames;
use floodgate::{AdaptiveInflight, Limiter};
use floodgate_pingora_proxy::admin::Admin;
use floodgate_pingora_proxy::{
    problem_json, words, CostBy, KeyBy, LimitedProxy, RefusalBody, Settings, Unidentified,
};
use pingora::prelude::Server;
use pingora::proxy::http_proxy_service;
use pingora::server::configuration::ServerConf;
use pingora::services::listening::Service;

const USAGE: &str = "usage: floodgate-pingora-proxy [FLAG VALUE | FLAG=VALUE]...
  --listen ADDR            where the proxy accepts HTTP (default 127.0.0.1:6188)
  --upstream ADDR          the origin it forwards to (default 127.0.0.1:8080)
  --max-inflight N         requests (or cost units) in flight per key (default 100)
  --max-rate N             requests (or cost units) per second per key (default 1000)
  --adaptive-inflight on|off
                           each hot key learns its in-flight limit from its latency, under
                           --max-inflight (default off)
  --key host|client        key requests by their host, or by their client's address (default host)
  --trust CIDR[,CIDR...]   with --key client: proxies trusted to forward the client's address
                           (may be given more than once; default none)
  --forwarding x-forwarded-for|forwarded
                           the field trusted proxies forward it in (default x-forwarded-for)
  --unidentified refuse|serve
                           a request whose client cannot be told: 500, or served unlimited
                           (default refuse)
  --cost unit|body-bytes   what a request counts: 1, or its body's bytes (default unit)
  --unknown-length refuse|BYTES
                           with --cost body-bytes, a body without a length (chunked): 411, or
                           charged BYTES and cut past them (default refuse)
  --refusal-status 503|429 the status of a refusal over a limit (default 503)
  --cost-over-limit-status N
                           the status of a cost over its limit, 400 to 599 (default 413)
  --refusal-body words|json|none|text:TEXT
                           a refusal's body: the refusal in words, a JSON problem, nothing, or
                           TEXT (default words)
  --ratelimit-fields on|off
                           RateLimit-Policy and RateLimit on refusals (default on)
  --ratelimit-on-admitted on|off
                           RateLimit-Policy and RateLimit on admitted responses (default off)
  --policy-names RATE,INFLIGHT
                           the policies' names in those fields (default rate,inflight)
  --retry-after-jitter SECS
                           up to SECS random seconds added to Retry-After, at most 3600 (default 0)
  --admin ADDR             the admin listener: GET /metrics, GET and PUT /limits (default off;
                           keep it on loopback)
  --shutdown-grace SECS    after SIGTERM, how long requests in flight may take to finish, at
                           most 300 (default 1)
Every flag can be set by its variable instead: FLOODGATE_ and its name in capitals, - as _.";

/// Every flag, and its default (`None`: off unless given).
const FLAGS: &[(&str, Option<&str>)] = &[
    ("--listen", Some("127.0.0.1:6188")),
    ("--upstream", Some("127.0.0.1:8080")),
    ("--max-inflight", Some("100")),
    ("--max-rate", Some("1000")),
    ("--adaptive-inflight", Some("off")),
    ("--key", Some("host")),
    ("--trust", None),
    ("--forwarding", Some("x-forwarded-for")),
    ("--unidentified", Some("refuse")),
    ("--cost", Some("unit")),
    ("--unknown-length", Some("refuse")),
    ("--refusal-status", Some("503")),
    ("--cost-over-limit-status", Some("413")),
    ("--refusal-body", Some("words")),
    ("--ratelimit-fields", Some("on")),
    ("--ratelimit-on-admitted", Some("off")),
    ("--policy-names", Some("rate,inflight")),
    ("--retry-after-jitter", Some("0")),
    ("--admin", None),
    ("--shutdown-grace", Some("1")),
];

#[derive(Debug)]
struct Config {
    listen: SocketAddr,
    upstream: SocketAddr,
    max_inflight: u32,
    max_rate: u32,
    adaptive_inflight: bool,
    settings: Settings,
    admin: Option<SocketAddr>,
    shutdown_grace: u64,
}

/// The flags given, then the environment.
struct Given<E> {
    flags: Vec<(String, String)>,
    env: E,
}

impl<E: Fn(&str) -> Option<String>> Given<E> {
    /// The variable of `flag`: `--max-rate` is `FLOODGATE_MAX_RATE`.
    fn var(flag: &str) -> String {
        format!("FLOODGATE_{}", flag[2..].to_uppercase().replace('-', "_"))
    }

    /// Every value of `flag` given (the last wins where one is kept), else its variable's.
    fn all(&self, flag: &str) -> Vec<String> {
        let given: Vec<String> = (self.flags.iter())
            .filter(|(name, _)| name == flag)
            .map(|(_, value)| value.clone())
            .collect();
        if !given.is_empty() {
            return given;
        }
        (self.env)(&Self::var(flag)).into_iter().collect()
    }

    fn get(&self, flag: &str) -> Option<String> {
        let value = self.all(flag).pop();
        let default = FLAGS.iter().find(|(name, _)| *name == flag);
        value.or_else(|| default.and_then(|(_, d)| d.map(str::to_owned)))
    }

    fn text(&self, flag: &str) -> String {
        self.get(flag).unwrap_or_default()
    }

    fn address(&self, flag: &str) -> Result<SocketAddr, String> {
        let value = self.text(flag);
        value
            .parse()
            .map_err(|e| format!("{flag} {value:?} is not an IP address and port: {e}"))
    }

    fn number(&self, flag: &str, range: std::ops::RangeInclusive<u64>) -> Result<u64, String> {
        let value = self.text(flag);
        match value.parse::<u64>() {
            Ok(n) if range.contains(&n) => Ok(n),
            _ => Err(format!(
                "{flag} {value:?} is not a whole number from {} to {}",
                range.start(),
                range.end()
            )),
        }
    }

    fn limit(&self, flag: &str) -> Result<u32, String> {
        Ok(self.number(flag, 1..=u64::from(u32::MAX))? as u32)
    }

    fn switch(&self, flag: &str) -> Result<bool, String> {
        match &*self.text(flag) {
            "on" => Ok(true),
            "off" => Ok(false),
            other => Err(format!("{flag} {other:?} is not on or off")),
        }
    }

    fn choice<T: Copy>(&self, flag: &str, choices: &[(&str, T)]) -> Result<T, String> {
        let value = self.text(flag);
        let found = choices.iter().find(|(name, _)| *name == value);
        found.map(|(_, t)| *t).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            format!("{flag} {value:?} is not one of {}", names.join(", "))
        })
    }
}

impl Config {
    /// Flags first, then `env`, then the defaults.
    fn parse(
        args: impl IntoIterator<Item = String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, String> {
        let mut flags: Vec<(String, String)> = Vec::new();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let (name, inline) = match flag.split_once('=') {
                Some((name, value)) => (name.to_string(), Some(value.to_string())),
                None => (flag, None),
            };
            if !FLAGS.iter().any(|(known, _)| *known == name) {
                return Err(format!("unknown argument {name:?}"));
            }
            let value = match inline.or_else(|| args.next()) {
                Some(value) => value,
                None => return Err(format!("{name} needs a value")),
            };
            flags.push((name, value));
        }
        let given = Given { flags, env };

        let key = match given.choice("--key", &[("host", false), ("client", true)])? {
            false => KeyBy::Host,
            true => {
                let forwarding = given.choice(
                    "--forwarding",
                    &[
                        ("x-forwarded-for", Forwarding::XForwardedFor),
                        ("forwarded", Forwarding::Forwarded),
                    ],
                )?;
                let mut addrs = ClientAddr::new().forwarding(forwarding);
                for list in given.all("--trust") {
                    for network in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                        let net = network
                            .parse()
                            .or_else(|_| network.parse::<std::net::IpAddr>().map(Into::into))
                            .map_err(|_| {
                                format!("--trust {network:?} is not an IP network or address")
                            })?;
                        addrs = addrs.trust(net);
                    }
                }
                let unidentified = given.choice(
                    "--unidentified",
                    &[
                        ("refuse", Unidentified::Refuse),
                        ("serve", Unidentified::Serve),
                    ],
                )?;
                KeyBy::Client(addrs, unidentified)
            }
        };
        if matches!(key, KeyBy::Host) && !given.all("--trust").is_empty() {
            return Err("--trust is for --key client".to_owned());
        }
        let cost = match given.choice("--cost", &[("unit", false), ("body-bytes", true)])? {
            false => CostBy::Unit,
            true => CostBy::BodyBytes(match &*given.text("--unknown-length") {
                "refuse" => UnknownLength::Refuse,
                bytes => match bytes.parse::<u32>() {
                    Ok(n) if n >= 1 => UnknownLength::Charge(n),
                    _ => {
                        return Err(format!(
                            "--unknown-length {bytes:?} is not refuse or a number of bytes of at \
                             least 1"
                        ))
                    }
                },
            }),
        };
        let body = match given.text("--refusal-body").as_str() {
            "words" => RefusalBody::Made(words),
            "json" => RefusalBody::Made(problem_json),
            "none" => RefusalBody::Empty,
            other => match other.strip_prefix("text:") {
                Some(text) => RefusalBody::Text(Bytes::from(text.to_owned())),
                None => {
                    return Err(format!(
                        "--refusal-body {other:?} is not words, json, none or text:TEXT"
                    ))
                }
            },
        };
        let names = given.text("--policy-names");
        let names = match names.split_once(',') {
            Some((rate, inflight)) => PolicyNames::new(rate, inflight)
                .map_err(|e| format!("--policy-names {names:?}: {e}"))?,
            None => return Err(format!("--policy-names {names:?} is not RATE,INFLIGHT")),
        };
        let settings = Settings {
            key,
            cost,
            status: given.choice("--refusal-status", &[("503", 503), ("429", 429)])?,
            cost_over_limit: given.number("--cost-over-limit-status", 400..=599)? as u16,
            body,
            ratelimit_fields: given.switch("--ratelimit-fields")?,
            ratelimit_on_admitted: given.switch("--ratelimit-on-admitted")?,
            names,
            jitter_secs: given.number("--retry-after-jitter", 0..=3600)?,
        };
        let admin = match given.get("--admin") {
            Some(_) => Some(given.address("--admin")?),
            None => None,
        };
        Ok(Config {
            listen: given.address("--listen")?,
            upstream: given.address("--upstream")?,
            max_inflight: given.limit("--max-inflight")?,
            max_rate: given.limit("--max-rate")?,
            adaptive_inflight: given.switch("--adaptive-inflight")?,
            settings,
            admin,
            shutdown_grace: given.number("--shutdown-grace", 0..=300)?,
        })
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let config = match Config::parse(args, |var| std::env::var(var).ok()) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let builder = Limiter::<String>::builder()
        .max_inflight(config.max_inflight)
        .max_rate(config.max_rate, Duration::from_secs(1));
    // Each hot key learns its in-flight limit from its latency, under --max-inflight.
    let builder = if config.adaptive_inflight {
        builder.adaptive_inflight(AdaptiveInflight::new())
    } else {
        builder
    };
    let limiter = match builder.build() {
        Ok(limiter) => limiter,
        Err(e) => {
            eprintln!("cannot build the limiter: {e}");
            return ExitCode::FAILURE;
        }
    };

    // No pingora command line or configuration file: its defaults (no daemon, one thread),
    // but a short grace after SIGTERM. pingora stops accepting at once, then waits its grace
    // period (5 minutes unless told) for the requests in flight before it stops its runtimes.
    let Some(mut conf) = ServerConf::new() else {
        eprintln!("cannot make pingora's default configuration");
        return ExitCode::FAILURE;
    };
    conf.grace_period_seconds = Some(config.shutdown_grace);
    conf.graceful_shutdown_timeout_seconds = Some(1);
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let proxy = LimitedProxy::with_settings(limiter.clone(), config.upstream, config.settings);
    let counters = proxy.counters();
    let mut service = http_proxy_service(&server.configuration, proxy);
    service.add_tcp(&config.listen.to_string());
    server.add_service(service);
    if let Some(admin) = config.admin {
        let mut service = Service::new("floodgate admin".to_owned(), Admin::new(limiter, counters));
        service.add_tcp(&admin.to_string());
        server.add_service(service);
    }

    println!(
        "floodgate pingora proxy: listening on http://{}, forwarding to http://{}, \
         at most {} in flight and {} per second per key",
        config.listen, config.upstream, config.max_inflight, config.max_rate
    );
    server.run_forever()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Config, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::parse(args.iter().map(|a| a.to_string()), move |var| {
            env.iter().find(|(k, _)| k == var).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn defaults() {
        let config = parse(&[], &[]).unwrap();
        assert_eq!(config.listen, "127.0.0.1:6188".parse().unwrap());
        assert_eq!(config.upstream, "127.0.0.1:8080".parse().unwrap());
        assert_eq!((config.max_inflight, config.max_rate), (100, 1000));
        assert!(!config.adaptive_inflight);
        let s = &config.settings;
        assert!(matches!(s.key, KeyBy::Host));
        assert_eq!(s.cost, CostBy::Unit);
        assert_eq!((s.status, s.cost_over_limit), (503, 413));
        assert!(matches!(s.body, RefusalBody::Made(_)));
        assert!(s.ratelimit_fields && !s.ratelimit_on_admitted);
        assert_eq!((s.names.rate(), s.names.inflight()), ("rate", "inflight"));
        assert_eq!(config.admin, None);
        assert_eq!(config.shutdown_grace, 1);
    }

    #[test]
    fn adaptive_inflight_is_on_or_off() {
        let on = parse(&["--adaptive-inflight", "on"], &[]).unwrap();
        assert!(on.adaptive_inflight);
        let env = [("FLOODGATE_ADAPTIVE_INFLIGHT", "on")];
        assert!(parse(&[], &env).unwrap().adaptive_inflight);
        let err = parse(&["--adaptive-inflight=yes"], &[]).unwrap_err();
        assert!(err.contains("not on or off"), "{err}");
    }

    #[test]
    fn flags_win_over_the_environment() {
        let env = [
            ("FLOODGATE_MAX_RATE", "7"),
            ("FLOODGATE_UPSTREAM", "127.0.0.1:9"),
        ];
        let config = parse(&["--max-rate", "50", "--listen=127.0.0.1:1"], &env).unwrap();
        assert_eq!(config.max_rate, 50);
        assert_eq!(config.listen, "127.0.0.1:1".parse().unwrap());
        assert_eq!(config.upstream, "127.0.0.1:9".parse().unwrap());
    }

    #[test]
    fn the_layers_settings_are_flags() {
        let config = parse(
            &[
                "--key=client",
                "--trust",
                "10.0.0.0/8,127.0.0.1",
                "--trust=::1",
                "--forwarding=forwarded",
                "--unidentified=serve",
                "--cost=body-bytes",
                "--unknown-length=4096",
                "--refusal-status=429",
                "--cost-over-limit-status=422",
                "--refusal-body=text:slow down",
                "--ratelimit-fields=off",
                "--ratelimit-on-admitted=on",
                "--policy-names=host-rate,host-inflight",
                "--retry-after-jitter=3",
                "--admin=127.0.0.1:9901",
                "--shutdown-grace=0",
            ],
            &[],
        )
        .unwrap();
        let s = &config.settings;
        let KeyBy::Client(addrs, unidentified) = &s.key else {
            panic!("{:?}", s.key)
        };
        assert_eq!(*unidentified, Unidentified::Serve);
        assert_eq!(addrs.forwarding_field(), Forwarding::Forwarded);
        let lines: [&[u8]; 1] = [b"for=192.0.2.1"];
        let peer = Some("127.0.0.1".parse().unwrap());
        assert_eq!(addrs.key(peer, lines).unwrap(), "192.0.2.1/32", "trusted");
        assert_eq!(s.cost, CostBy::BodyBytes(UnknownLength::Charge(4096)));
        assert_eq!((s.status, s.cost_over_limit), (429, 422));
        assert!(matches!(&s.body, RefusalBody::Text(t) if &t[..] == b"slow down"));
        assert!(!s.ratelimit_fields && s.ratelimit_on_admitted);
        assert_eq!(s.names.rate(), "host-rate");
        assert_eq!(s.jitter_secs, 3);
        assert_eq!(config.admin, Some("127.0.0.1:9901".parse().unwrap()));
        assert_eq!(config.shutdown_grace, 0);
        let env = [("FLOODGATE_REFUSAL_STATUS", "429")];
        assert_eq!(parse(&[], &env).unwrap().settings.status, 429);
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(parse(&["--max-rate", "0"], &[]).is_err());
        assert!(parse(&["--max-inflight"], &[]).is_err());
        assert!(parse(&["--listen", "localhost"], &[]).is_err());
        assert!(parse(&["--bogus", "1"], &[]).is_err());
        assert!(parse(&[], &[("FLOODGATE_MAX_INFLIGHT", "-3")]).is_err());
        for bad in [
            &["--refusal-status", "500"][..],
            &["--cost-over-limit-status", "200"],
            &["--key", "cookie"],
            &["--key", "client", "--trust", "10.0.0.0/33"],
            &["--trust", "10.0.0.0/8"],
            &["--cost", "body-bytes", "--unknown-length", "0"],
            &["--refusal-body", "html"],
            &["--policy-names", "same,same"],
            &["--policy-names", "one"],
            &["--retry-after-jitter", "3601"],
            &["--admin", "nowhere"],
            &["--shutdown-grace", "301"],
        ] {
            let err = parse(bad, &[]).unwrap_err();
            let named = bad
                .iter()
                .any(|f| f.starts_with("--") && err.starts_with(f));
            assert!(named, "the error names the flag: {bad:?}: {err}");
        }
    }
}
