//! Why a sync failed.

use std::fmt;

/// Why a sync failed. When a sync fails its pushes may have been applied in part or in whole
/// (a timeout cannot tell whether Redis ran what it was sent); since counts are absolute, the
/// next sync pushes the same keys' counts again (grown, or not) without counting anything twice.
#[derive(Debug)]
pub(crate) struct StoreError {
    what: String,
    source: Option<redis::RedisError>,
    /// The sync's deadline passed before this step could start. Read only by the store's
    /// tests (`is_timeout`), which tell running out of time from an error; the operator sees
    /// it in the message.
    #[cfg_attr(not(test), allow(dead_code))]
    out_of_time: bool,
}

impl StoreError {
    pub(super) fn new(what: impl Into<String>) -> StoreError {
        StoreError {
            what: what.into(),
            source: None,
            out_of_time: false,
        }
    }

    pub(super) fn client(what: impl Into<String>, source: redis::RedisError) -> StoreError {
        StoreError {
            what: what.into(),
            source: Some(source),
            out_of_time: false,
        }
    }

    pub(super) fn timeout(addr: &str) -> StoreError {
        StoreError {
            out_of_time: true,
            ..StoreError::new(format!("{addr}: out of time"))
        }
    }

    /// Whether the sync ran out of time (its deadline passed, or a read or a connection
    /// attempt timed out), rather than meeting an error.
    #[cfg(test)]
    pub(crate) fn is_timeout(&self) -> bool {
        self.out_of_time || self.source.as_ref().is_some_and(|e| e.is_timeout())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fleet sync: ")?;
        f.write_str(&self.what)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
