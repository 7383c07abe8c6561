//! Runs [`LimitedProxy`]: a pingora HTTP proxy that answers 503 for hosts over their limits.
//!
//! Settings come from flags, then from environment variables, then from the defaults:
//!
//! | flag | variable | default |
//! | --- | --- | --- |
//! | `--listen ADDR` | `FLOODGATE_LISTEN` | `127.0.0.1:6188` |
//! | `--upstream ADDR` | `FLOODGATE_UPSTREAM` | `127.0.0.1:8080` |
//! | `--max-inflight N` | `FLOODGATE_MAX_INFLIGHT` | 100 requests in flight per host |
//! | `--max-rate N` | `FLOODGATE_MAX_RATE` | 1000 requests per second per host |

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{AdaptiveInflight, Limiter};
use floodgate_pingora_proxy::LimitedProxy;
use pingora::prelude::Server;
use pingora::proxy::http_proxy_service;

const USAGE: &str = "usage: floodgate-pingora-proxy [--listen ADDR] [--upstream ADDR] \
[--max-inflight N] [--max-rate N] [--adaptive-inflight on|off]
  --listen ADDR       where the proxy accepts HTTP (env FLOODGATE_LISTEN, default 127.0.0.1:6188)
  --upstream ADDR     the origin it forwards to (env FLOODGATE_UPSTREAM, default 127.0.0.1:8080)
  --max-inflight N    requests in flight per host (env FLOODGATE_MAX_INFLIGHT, default 100)
  --max-rate N        requests per second per host (env FLOODGATE_MAX_RATE, default 1000)
  --adaptive-inflight on|off
                      each hot host learns its in-flight limit from its latency, under
                      --max-inflight (env FLOODGATE_ADAPTIVE_INFLIGHT, default off)";

#[derive(Debug, PartialEq)]
struct Config {
    listen: SocketAddr,
    upstream: SocketAddr,
    max_inflight: u32,
    max_rate: u32,
    adaptive_inflight: bool,
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
            let known = [
                "--listen",
                "--upstream",
                "--max-inflight",
                "--max-rate",
                "--adaptive-inflight",
            ];
            if !known.contains(&&*name) {
                return Err(format!("unknown argument {name:?}"));
            }
            let value = match inline.or_else(|| args.next()) {
                Some(value) => value,
                None => return Err(format!("{name} needs a value")),
            };
            flags.push((name, value));
        }
        let setting = |flag: &str, var: &str, default: &str| -> String {
            flags
                .iter()
                .rev()
                .find(|(name, _)| name == flag)
                .map(|(_, value)| value.clone())
                .or_else(|| env(var))
                .unwrap_or_else(|| default.to_string())
        };
        let address = |flag: &str, var: &str, default: &str| -> Result<SocketAddr, String> {
            let value = setting(flag, var, default);
            value
                .parse()
                .map_err(|e| format!("{flag} {value:?} is not an IP address and port: {e}"))
        };
        let limit = |flag: &str, var: &str, default: &str| -> Result<u32, String> {
            let value = setting(flag, var, default);
            match value.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "{flag} {value:?} is not a whole number of at least 1"
                )),
            }
        };
        Ok(Config {
            listen: address("--listen", "FLOODGATE_LISTEN", "127.0.0.1:6188")?,
            upstream: address("--upstream", "FLOODGATE_UPSTREAM", "127.0.0.1:8080")?,
            max_inflight: limit("--max-inflight", "FLOODGATE_MAX_INFLIGHT", "100")?,
            max_rate: limit("--max-rate", "FLOODGATE_MAX_RATE", "1000")?,
            adaptive_inflight: match &*setting(
                "--adaptive-inflight",
                "FLOODGATE_ADAPTIVE_INFLIGHT",
                "off",
            ) {
                "on" => true,
                "off" => false,
                other => return Err(format!("--adaptive-inflight {other:?} is not on or off")),
            },
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
    // Each hot host learns its in-flight limit from its latency, under --max-inflight.
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

    // No pingora command line or configuration file: its defaults (no daemon, one thread).
    let mut server = match Server::new(None) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("cannot create the pingora server: {e}");
            return ExitCode::FAILURE;
        }
    };
    server.bootstrap();
    let mut proxy = http_proxy_service(
        &server.configuration,
        LimitedProxy::new(limiter, config.upstream),
    );
    proxy.add_tcp(&config.listen.to_string());
    server.add_service(proxy);

    println!(
        "floodgate pingora proxy: listening on http://{}, forwarding to http://{}, \
         at most {} requests in flight and {} per second per host",
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
    fn bad_settings_are_refused() {
        assert!(parse(&["--max-rate", "0"], &[]).is_err());
        assert!(parse(&["--max-inflight"], &[]).is_err());
        assert!(parse(&["--listen", "localhost"], &[]).is_err());
        assert!(parse(&["--bogus", "1"], &[]).is_err());
        assert!(parse(&[], &[("FLOODGATE_MAX_INFLIGHT", "-3")]).is_err());
    }
}
