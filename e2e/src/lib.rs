//! What the end-to-end tests need beyond the fixtures of `outpost-testing` because it
//! uses the runner or the API server's storage (which `outpost-testing` must not depend
//! on, since their own tests use it): the example image pushed to a test registry
//! ([`PushTestImage`]), the runner's work dirs ([`work_dirs`]), the store opened around
//! the API ([`EditStore`]), and the test runner binary (`src/bin/outpost-test-runner.rs`).
//! Nothing depends on this crate, so it may depend on both.
//!
//! What the tests prove, by design rule: `docs/ARCHITECTURE.md` and `SECURITY.md`.

use outpost_testing::{ControlPlane, Registry};

pub use outpost_runner::example_image::{PushedImage as TestImage, sha256};

/// The work dirs' directory of a runner started with `--state-dir state` (and no
/// `--work-dir`).
pub fn work_dirs(state: &std::path::Path) -> std::path::PathBuf {
    outpost_runner::settings::default_work_dir(state)
}

/// Pushes the example's two-platform image to a test [`Registry`].
pub trait PushTestImage {
    /// Builds and pushes the example's image ([`outpost_runner::example_image::push`])
    /// as `repository:tag`.
    fn push_test_image(
        &self,
        repository: &str,
        tag: &str,
        version: &str,
    ) -> impl Future<Output = TestImage>;
}

impl PushTestImage for Registry {
    async fn push_test_image(&self, repository: &str, tag: &str, version: &str) -> TestImage {
        outpost_runner::example_image::push(
            &self.client().await,
            &self.host,
            repository,
            tag,
            version,
        )
        .await
        .unwrap_or_else(|e| panic!("pushing {repository}:{tag} to {}: {e}", self.host))
    }
}

/// Opens a control plane's store directly, around the API.
pub trait EditStore {
    /// Stops the server, runs `edit` on the store it runs on, opened directly as someone
    /// with access to it (the vendor, or an attacker on the vendor's side) would, going
    /// around the API, and starts the server again. Stopped, because the embedded
    /// store's file is locked while open (it is closed again before the restart) and a
    /// running server's watch cache would hide the edit.
    fn edit_store(
        &mut self,
        edit: impl AsyncFnOnce(&dyn outpost_apiserver::storage::Store),
    ) -> impl Future<Output = ()>;
}

impl EditStore for ControlPlane {
    async fn edit_store(&mut self, edit: impl AsyncFnOnce(&dyn outpost_apiserver::storage::Store)) {
        use outpost_apiserver::storage::{EmbeddedStore, StoreLocation};
        self.stop();
        let location: StoreLocation = self.store().parse().expect("the server's --store parses");
        match location {
            StoreLocation::Embedded(dir) => {
                let store = EmbeddedStore::open(&dir, Default::default())
                    .await
                    .expect("the embedded store opens (is the server stopped?)");
                edit(&store).await;
                store.close().await.expect("the embedded store closes");
            }
            etcd => {
                let store = etcd
                    .open(Default::default())
                    .await
                    .expect("etcd is reachable");
                edit(store.as_ref()).await;
            }
        }
        self.start_again().await;
    }
}
