//! One limit held across a fleet of proxies, through Redis or Redis Cluster (feature `redis`).
//!
//! Each node keeps deciding locally; a sync thread pushes the node's counts of the keys that
//! matter to Redis and pulls the fleet's totals, in one pipelined round trip per sync interval.
//! [`FleetConfig`] says where Redis is and how often to sync; [`FleetStatus`] is what a node
//! reports about its syncing. How the keys are laid out in Redis is in `docs/fleet.md`.
//!
//! The client is the `redis` crate's blocking one: no async runtime is needed, and the sync
//! runs on a thread of its own. TCP (`redis://`, `valkey://`) or, for one server, a Unix socket; TLS is not built in.
//!
//! What to expect (the derivation and the measurements are in `docs/fleet.md`):
//!
//! - **The rate limit is the fleet's**; in-flight limits stay per node. Windows are aligned to
//!   the Unix epoch, so the nodes' clocks must agree within a sync interval (NTP does): a
//!   skew `d` costs about `L · d ÷ W` more per window.
//! - **Bound.** A key flooding every node is admitted at most about
//!   `L · (1 + (S + J) ÷ W) + N` per window (`S` the sync interval, `J` a sync's lateness,
//!   `W` the window, `N` the nodes): about 1.1 × the limit at 100 ms and 1 s. A key is not
//!   refused while its fleet-wide count stays below the limit less the other nodes'
//!   admissions of one sync interval. A node holds a key to its share `⌈L ÷ N⌉` until the
//!   fleet has spoken of it twice (its first word cannot show the nodes holding the key
//!   unseen), so a key new to a formed fleet is held from its first window. In the window a
//!   fleet forms (or a node starts into a flood) more is admitted: a node knows no fleet
//!   before its first sync.
//! - **Redis away or slow.** Decisions never wait on Redis. After three sync intervals
//!   without a sync (or the timeout and one interval, at most a window) a node decides on
//!   its share `⌈L ÷ N⌉` of each limit (`N` the fleet it last saw, or, for a node that never
//!   reached Redis, the size it was told to expect, [`FleetConfig::expected_nodes`]: set it,
//!   or a fleet whose URL is wrong admits N limits), says so in
//!   [`FleetStatus::on_local_share`], logs the outage once (at error level when Redis was
//!   never reached), and resumes when a sync succeeds. Until Redis counts the fleet it
//!   knew again (every node synced since: a restarted Redis lost them all), or for a nodes'
//!   time to live at most, it keeps that fleet's size and holds its keys to its share as
//!   well, so the window Redis comes back in stays within the bound.
//! - **Fixed memory.** Only the keys of the exact stage are synced; the Redis keys expire two
//!   windows and a margin (a second, or a sync interval when longer) after their last write.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use floodgate::fleet::FleetConfig;
//!
//! let config = FleetConfig::new("redis://10.0.0.5:6379/")
//!     .prefix("edge-eu")
//!     .sync_interval(Duration::from_millis(50));
//! assert!(config.validate().is_ok());
//! assert_eq!(config.get_prefix(), "edge-eu");
//! // The Redis I/O timeout follows the sync interval unless set.
//! assert_eq!(config.get_timeout(), Duration::from_millis(50));
//!
//! let cluster = FleetConfig::cluster(["redis://10.0.0.5:7000/", "redis://10.0.0.6:7000/"]);
//! assert!(cluster.is_cluster());
//! assert_eq!(cluster.get_urls().len(), 2);
//! ```

mod config;
mod key;
mod keys;
mod node;
mod store;
mod sync;
mod view;

pub use config::FleetConfig;
pub use key::FleetKey;
pub(crate) use node::FleetNode;
pub use node::FleetStatus;
pub(crate) use store::{KeyTotals, Push, Store};
pub(crate) use sync::{check_interval, spawn, Member, Tracked};
pub(crate) use view::FleetView;
