//! Test support for Outpost's end-to-end tests: start the real `outpost server` on
//! the embedded store or on a throwaway etcd, with TLS and a token file, and talk to it
//! with the machine's `kubectl` or a kube-rs client; run OCI registries
//! (`docker-registry`) with a test image in them.

mod cluster;
mod kubectl;
mod raw;
mod registry;

pub use cluster::{Backend, ControlPlane, Process, outpost_binary, runner_binary};
pub use kubectl::{Kubectl, Run};
pub use raw::Reply;
pub use registry::{Registry, TestImage, sha256};

/// The repository's `manifests/` directory (the example app).
pub fn manifests() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// Declares each listed `async fn NAME(backend: Backend)` as two tests,
/// `embedded::NAME` and `etcd::NAME`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Embedded).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Etcd).await;
                }
            )*
        }
    };
}
