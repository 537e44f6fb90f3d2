use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::{EmbeddedOptions, EmbeddedStore, EtcdStore, EtcdTls, Store, StoreError};

/// Where the store lives, as given on the command line:
/// `embedded:DIR` or `etcd://HOST:PORT[,HOST:PORT...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded, durable single-node store in a directory.
    Embedded(PathBuf),
    /// An etcd cluster, by its client endpoints (`http://host:port`).
    Etcd(Vec<String>),
}

impl FromStr for StoreLocation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(dir) = s.strip_prefix("embedded:") {
            if dir.is_empty() {
                return Err("embedded store needs a directory: embedded:DIR".into());
            }
            return Ok(StoreLocation::Embedded(PathBuf::from(dir)));
        }
        if let Some(hosts) = s.strip_prefix("etcd://") {
            let endpoints: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("http://{h}"))
                .collect();
            if endpoints.is_empty() {
                return Err("etcd store needs endpoints: etcd://HOST:PORT[,HOST:PORT...]".into());
            }
            return Ok(StoreLocation::Etcd(endpoints));
        }
        Err(format!(
            "unknown store {s:?}: use embedded:DIR or etcd://HOST:PORT[,HOST:PORT...]"
        ))
    }
}

impl StoreLocation {
    /// Opens the store (`options` apply to the embedded store only).
    pub async fn open(&self, options: EmbeddedOptions) -> Result<Arc<dyn Store>, StoreError> {
        self.open_with(options, None).await
    }

    /// Opens the store; an etcd store over TLS when `etcd_tls` is given.
    pub async fn open_with(
        &self,
        options: EmbeddedOptions,
        etcd_tls: Option<&EtcdTls>,
    ) -> Result<Arc<dyn Store>, StoreError> {
        Ok(match self {
            StoreLocation::Embedded(dir) => Arc::new(EmbeddedStore::open(dir, options).await?),
            StoreLocation::Etcd(endpoints) => {
                Arc::new(EtcdStore::connect_with(endpoints, etcd_tls).await?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(
            "embedded:/var/lib/apiserver"
                .parse::<StoreLocation>()
                .unwrap(),
            StoreLocation::Embedded("/var/lib/apiserver".into())
        );
        assert_eq!(
            "etcd://a:2379,b:2379".parse::<StoreLocation>().unwrap(),
            StoreLocation::Etcd(vec!["http://a:2379".into(), "http://b:2379".into()])
        );
        assert!("etcd://".parse::<StoreLocation>().is_err());
        assert!("embedded:".parse::<StoreLocation>().is_err());
        assert!("redis://x".parse::<StoreLocation>().is_err());
    }
}
