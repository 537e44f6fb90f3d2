use std::sync::Arc;

use outpost_apiserver::storage::{EmbeddedOptions, EmbeddedStore, EtcdStore, Store};
use outpost_testing::ThrowawayEtcd;

/// A store under test, a key prefix of its own, and whatever keeps the backend alive.
pub struct Backend {
    pub store: Arc<dyn Store>,
    pub prefix: String,
    _keep: Box<dyn std::any::Any + Send + Sync>,
}

fn unique_prefix() -> String {
    format!("/conformance/{:016x}/", rand::random::<u64>())
}

impl Backend {
    pub async fn embedded() -> Backend {
        let dir = tempfile::tempdir().expect("a temp dir can be created");
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default())
            .await
            .expect("the embedded store opens in a fresh directory");
        Backend {
            store: Arc::new(store),
            prefix: unique_prefix(),
            _keep: Box::new(dir),
        }
    }

    /// The etcd from `OUTPOST_TEST_ETCD` (started by `./x test`), or a private throwaway
    /// etcd when `private` is set or no shared one is given.
    pub async fn etcd(private: bool) -> Backend {
        let shared = std::env::var("OUTPOST_TEST_ETCD")
            .ok()
            .filter(|e| !e.is_empty());
        match shared {
            Some(endpoint) if !private => Backend {
                store: Arc::new(
                    EtcdStore::connect(std::slice::from_ref(&endpoint))
                        .await
                        .unwrap_or_else(|e| panic!("cannot reach etcd at {endpoint}: {e:?}")),
                ),
                prefix: unique_prefix(),
                _keep: Box::new(()),
            },
            _ => {
                let etcd = ThrowawayEtcd::start()
                    .await
                    .expect("etcd starts (run `./x deps` to install it)");
                Backend {
                    store: Arc::new(
                        EtcdStore::connect(&[etcd.endpoint().to_owned()])
                            .await
                            .expect("etcd answers"),
                    ),
                    prefix: unique_prefix(),
                    _keep: Box::new(etcd),
                }
            }
        }
    }

    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}
