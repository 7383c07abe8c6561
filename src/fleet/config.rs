//! [`FleetConfig`]: where the fleet's Redis is, how its keys are named there and how often a
//! node syncs, with the checks of what it is given.

use std::fmt;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::ConfigError;

/// Where the fleet's Redis is, how the fleet's keys are named there, and how often a node syncs.
///
/// Built with [`new`](FleetConfig::new) (one Redis server) or [`cluster`](FleetConfig::cluster)
/// (a Redis Cluster, found from any of its nodes), then adjusted with the builder methods. The
/// checks run in [`validate`](FleetConfig::validate), which the limiter's builder calls too:
///
/// - every URL is a `redis://` or `valkey://` URL (`redis://[user:password@]host[:port][/db]`),
///   or, for one server, a Unix socket (`unix:///path` or `redis+unix:///path`); TLS
///   (`rediss://`) is not built in. A cluster uses database 0 and TCP.
/// - the prefix is not empty and has no `{` or `}` (they would change which Cluster slot a
///   key lands in).
/// - the sync interval is at least one tick of the coarse clock (10 ms) and at most
///   [`MAX_SYNC_INTERVAL`](FleetConfig::MAX_SYNC_INTERVAL) (a minute); the limiter's builder
///   also refuses one longer than its rate window.
/// - the timeout is at least a millisecond and at most
///   [`MAX_TIMEOUT`](FleetConfig::MAX_TIMEOUT) (a minute).
/// - the expected size is at least 1 and at most
///   [`MAX_EXPECTED_NODES`](FleetConfig::MAX_EXPECTED_NODES).
///
/// `Debug` shows the URLs with their passwords masked.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{fleet::FleetConfig, ConfigError};
///
/// let config = FleetConfig::new("redis://127.0.0.1:6379/");
/// assert_eq!(config.get_prefix(), "floodgate");
/// assert_eq!(config.get_sync_interval(), Duration::from_millis(100));
/// assert!(!config.is_cluster());
///
/// let too_fast = config.clone().sync_interval(Duration::from_millis(5));
/// let err = too_fast.validate().unwrap_err();
/// assert!(matches!(err, ConfigError::Fleet(_)));
/// assert!(err.to_string().contains("at least one tick"), "{err}");
///
/// assert!(config.clone().prefix("").validate().is_err());
/// assert!(config.clone().prefix("a{b}").validate().is_err());
/// assert!(FleetConfig::new("http://127.0.0.1/").validate().is_err());
/// // TLS is not built in, and floodgate says so (not the redis crate's feature advice).
/// let tls = FleetConfig::new("rediss://10.0.0.5:6380/").validate().unwrap_err();
/// assert!(tls.to_string().contains("floodgate does not build in"), "{tls}");
///
/// let secret = FleetConfig::new("redis://user:hunter2@10.0.0.5:6379/");
/// assert!(!format!("{secret:?}").contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct FleetConfig {
    urls: Vec<String>,
    cluster: bool,
    prefix: String,
    sync_interval: Duration,
    timeout: Option<Duration>,
    expected_nodes: usize,
}

impl FleetConfig {
    /// The prefix of the fleet's Redis keys unless [`prefix`](FleetConfig::prefix) sets one.
    pub const DEFAULT_PREFIX: &'static str = "floodgate";
    /// How often a node syncs unless [`sync_interval`](FleetConfig::sync_interval) says.
    pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);
    /// The shortest sync interval: one tick of the coarse clock.
    pub const MIN_SYNC_INTERVAL: Duration = crate::clock::TICK;
    /// The longest sync interval: a minute. A fleet that syncs less often holds no common
    /// limit worth the name (its excess over the limit is about `L · S ÷ W` per window), and
    /// the limiter's builder refuses an interval longer than the rate window anyway.
    pub const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(60);
    /// The longest timeout of a sync: a minute. Past it the sync thread would wait on a
    /// stalled Redis for longer than any view stays fresh.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
    /// The largest expected fleet: 10,000 nodes (fleets are tens of proxies). With more
    /// nodes than a limit has units, each node's share is 1.
    pub const MAX_EXPECTED_NODES: usize = 10_000;
    /// How long a node counts as alive after its last sync, at the least (see
    /// [`node_ttl`](FleetConfig::node_ttl)).
    pub const MIN_NODE_TTL: Duration = Duration::from_secs(1);

    /// A fleet syncing through the one Redis (or Valkey) server at `url`.
    pub fn new(url: impl Into<String>) -> FleetConfig {
        FleetConfig {
            urls: vec![url.into()],
            cluster: false,
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            sync_interval: Self::DEFAULT_SYNC_INTERVAL,
            timeout: None,
            expected_nodes: 1,
        }
    }

    /// A fleet syncing through a Redis Cluster, found from any of the nodes at `urls` (one is
    /// enough; the others are tried when it cannot be reached). The masters serving the keys
    /// are learnt from the cluster itself, and learnt anew when it reshards or fails over.
    pub fn cluster<I>(urls: I) -> FleetConfig
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        FleetConfig {
            urls: urls.into_iter().map(Into::into).collect(),
            cluster: true,
            ..FleetConfig::new(String::new())
        }
    }

    /// Sets the prefix of the fleet's Redis keys (default `"floodgate"`), so that fleets (or
    /// limiters) sharing one Redis keep apart: nodes with the same prefix share their counts.
    pub fn prefix(mut self, prefix: &str) -> FleetConfig {
        self.prefix = prefix.to_owned();
        self
    }

    /// Sets how often a node syncs (default 100 ms; at least one tick, 10 ms, at most
    /// [`MAX_SYNC_INTERVAL`](FleetConfig::MAX_SYNC_INTERVAL) and the rate window; a tenth of
    /// the window or less keeps the fleet near its limit). Checked by
    /// [`validate`](FleetConfig::validate) and the limiter's builder.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::fleet::FleetConfig;
    ///
    /// let config = FleetConfig::new("redis://10.0.0.5:6379/");
    /// assert!(config.clone().sync_interval(Duration::from_millis(50)).validate().is_ok());
    /// let err = config.sync_interval(Duration::from_secs(86_400 * 365)).validate().unwrap_err();
    /// assert!(err.to_string().contains("at most 60s"), "{err}");
    /// ```
    pub fn sync_interval(mut self, interval: Duration) -> FleetConfig {
        self.sync_interval = interval;
        self
    }

    /// Sets how long one sync may wait on Redis, connecting included (default: the sync
    /// interval). A sync that has not finished by then fails; the node keeps its last view of
    /// the fleet for three sync intervals (or this timeout and one interval, when longer; at
    /// most a window) after its last good sync, and then decides on its local share until a
    /// sync succeeds again. At least a millisecond, at most
    /// [`MAX_TIMEOUT`](FleetConfig::MAX_TIMEOUT).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::fleet::FleetConfig;
    ///
    /// let config = FleetConfig::new("redis://10.0.0.5:6379/");
    /// assert!(config.clone().timeout(Duration::from_millis(300)).validate().is_ok());
    /// let err = config.timeout(Duration::MAX).validate().unwrap_err();
    /// assert!(err.to_string().contains("at most 60s"), "{err}");
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> FleetConfig {
        self.timeout = Some(timeout);
        self
    }

    /// Sets how many nodes the fleet is expected to have (default 1): until a node first
    /// reaches Redis and learns the fleet's size, it decides on its share of each limit,
    /// `⌈L ÷ expected⌉`, rather than on the whole limit.
    ///
    /// With the default, a node that never reaches Redis (a wrong host or port, a firewall)
    /// admits a whole limit by itself, and a fleet of N such nodes N limits: set the size you
    /// run so that a broken configuration fails safe. Once a sync succeeds, the size Redis
    /// reports counts instead. At least 1, at most
    /// [`MAX_EXPECTED_NODES`](FleetConfig::MAX_EXPECTED_NODES).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::fleet::FleetConfig;
    ///
    /// let config = FleetConfig::new("redis://10.0.0.5:6379/").expected_nodes(4);
    /// assert_eq!(config.get_expected_nodes(), 4);
    /// assert!(config.clone().expected_nodes(0).validate().is_err());
    /// assert!(config.clone().expected_nodes(usize::MAX).validate().is_err());
    /// ```
    pub fn expected_nodes(mut self, nodes: usize) -> FleetConfig {
        self.expected_nodes = nodes;
        self
    }

    /// The fleet's expected size (see [`expected_nodes`](FleetConfig::expected_nodes)).
    pub fn get_expected_nodes(&self) -> usize {
        self.expected_nodes
    }

    /// The URLs given.
    pub fn get_urls(&self) -> &[String] {
        &self.urls
    }

    /// Whether the URLs name a Redis Cluster ([`cluster`](FleetConfig::cluster)).
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The prefix of the fleet's Redis keys.
    pub fn get_prefix(&self) -> &str {
        &self.prefix
    }

    /// How often a node syncs.
    pub fn get_sync_interval(&self) -> Duration {
        self.sync_interval
    }

    /// How long one sync may wait on Redis: the timeout set, or else the sync interval.
    pub fn get_timeout(&self) -> Duration {
        self.timeout.unwrap_or(self.sync_interval)
    }

    /// How long a node counts as alive after its last sync: three sync intervals, and at
    /// least [`MIN_NODE_TTL`](FleetConfig::MIN_NODE_TTL).
    pub fn node_ttl(&self) -> Duration {
        self.sync_interval.saturating_mul(3).max(Self::MIN_NODE_TTL)
    }

    /// Checks the configuration (see [`FleetConfig`] for what is checked). Does no I/O: an
    /// unreachable Redis is not a configuration error, only a failed sync.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.prefix.is_empty() {
            return Err(fleet_error("the fleet's key prefix must not be empty"));
        }
        if self.prefix.contains(['{', '}']) {
            return Err(fleet_error(format!(
                "the fleet's key prefix {:?} must not contain '{{' or '}}': they would make \
                 every key share one Redis Cluster slot",
                self.prefix
            )));
        }
        if self.sync_interval < Self::MIN_SYNC_INTERVAL {
            return Err(fleet_error(format!(
                "a fleet sync interval of {:?} is too short: it must be at least one tick of \
                 the coarse clock ({:?})",
                self.sync_interval,
                Self::MIN_SYNC_INTERVAL
            )));
        }
        if self.sync_interval > Self::MAX_SYNC_INTERVAL {
            return Err(fleet_error(format!(
                "a fleet sync interval of {:?} is too long: it must be at most {:?} (and at \
                 most the rate window; a tenth of it or less keeps the fleet near its limit)",
                self.sync_interval,
                Self::MAX_SYNC_INTERVAL
            )));
        }
        if self.expected_nodes == 0 {
            return Err(fleet_error(
                "a fleet's expected size must be at least 1 (this node)",
            ));
        }
        if self.expected_nodes > Self::MAX_EXPECTED_NODES {
            return Err(fleet_error(format!(
                "a fleet's expected size of {} nodes is too large: it must be at most {}",
                self.expected_nodes,
                Self::MAX_EXPECTED_NODES
            )));
        }
        if self.get_timeout() < Duration::from_millis(1) {
            return Err(fleet_error(format!(
                "a fleet Redis timeout of {:?} is too short: it must be at least 1ms",
                self.get_timeout()
            )));
        }
        if self.get_timeout() > Self::MAX_TIMEOUT {
            return Err(fleet_error(format!(
                "a fleet Redis timeout of {:?} is too long: it must be at most {:?}",
                self.get_timeout(),
                Self::MAX_TIMEOUT
            )));
        }
        self.connection_infos().map(|_| ())
    }

    /// The URLs with their passwords masked, for messages.
    pub(crate) fn redacted_urls(&self) -> Vec<String> {
        self.urls.iter().map(|u| redact(u)).collect()
    }

    /// The parsed URLs.
    pub(crate) fn connection_infos(&self) -> Result<Vec<ConnectionInfo>, ConfigError> {
        if self.urls.is_empty() {
            return Err(fleet_error(
                "a fleet cluster needs the URL of at least one of its nodes",
            ));
        }
        self.urls
            .iter()
            .map(|url| {
                let shown = redact(url);
                // Told here, before the redis crate's parser, whose message asks for a TLS
                // feature of its own that floodgate does not have.
                let scheme = url.split("://").next().unwrap_or("").to_ascii_lowercase();
                if matches!(scheme.as_str(), "rediss" | "valkeys") {
                    return Err(fleet_error(format!(
                        "the fleet's Redis URL {shown} asks for TLS, which floodgate does not \
                         build in: reach Redis over a private network or a local TLS tunnel \
                         with redis:// (or valkey://)"
                    )));
                }
                let info = url.as_str().into_connection_info().map_err(|e| {
                    fleet_error(format!("the fleet's Redis URL {shown} is not valid: {e}"))
                })?;
                match &info.addr {
                    ConnectionAddr::TcpTls { .. } => Err(fleet_error(format!(
                        "the fleet's Redis URL {shown} asks for TLS, which floodgate does not build in"
                    ))),
                    ConnectionAddr::Unix(_) if self.cluster => Err(fleet_error(format!(
                        "the fleet's Redis URL {shown} is a Unix socket: a cluster's nodes are \
                         reached over TCP"
                    ))),
                    _ if self.cluster && info.redis.db != 0 => Err(fleet_error(format!(
                        "the fleet's Redis URL {shown} selects database {}: a cluster has only \
                         database 0",
                        info.redis.db
                    ))),
                    _ => Ok(info),
                }
            })
            .collect()
    }
}

impl fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetConfig")
            .field("urls", &self.redacted_urls())
            .field("cluster", &self.cluster)
            .field("prefix", &self.prefix)
            .field("sync_interval", &self.sync_interval)
            .field("timeout", &self.get_timeout())
            .field("expected_nodes", &self.expected_nodes)
            .finish()
    }
}

fn fleet_error(message: impl Into<String>) -> ConfigError {
    ConfigError::Fleet(message.into())
}

/// A URL with its password (if any) replaced by `***`, for messages and `Debug`.
fn redact(url: &str) -> String {
    match redis::parse_redis_url(url) {
        Some(mut parsed) if parsed.password().is_some() => {
            // Setting a password fails only for URLs that cannot have one, and this one has.
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Some(_) => url.to_owned(),
        // Not a Redis URL: shown whole unless it might hold a password, then its scheme only.
        None if !url.contains('@') => url.to_owned(),
        None => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => "(a URL with its credentials left out)".to_owned(),
        },
    }
}
