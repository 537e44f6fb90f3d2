//! Test fixtures every Outpost test uses (the end-to-end suite, the runner's, the CLI's,
//! the API server's and the benchmarks): a throwaway etcd ([`ThrowawayEtcd`]), an etcd
//! cluster ([`EtcdCluster`]) and one speaking TLS ([`TlsEtcd`]); the AWS emulator
//! ([`Moto`]); waits and pollers ([`eventually`], [`wait_for`], [`phase`],
//! their blocking twins, and a child's output read line by line: [`Lines`]) and free
//! ports ([`free_port`]). Start the real `outpost server` on
//! the embedded store, on a throwaway etcd or, in replicas, on an etcd cluster,
//! with TLS and a token file ([`ControlPlane`]), and talk to it
//! with the machine's `kubectl` or a kube-rs client; run OCI registries
//! (`docker-registry`) with a test image in them; record every API response a test's
//! clients get, or stand for a server that dies right after a write
//! ([`RecordingProxy`]), or lose the answer of one etcd request ([`LostAnswerProxy`]);
//! run Helm 4 on the chart ([`helm`]); give the real runner job
//! Plans to run ([`job_plans`]).
//!
//! It depends on no Outpost crate but `outpost-api`, so the API server's and the
//! runner's own tests can use it without a dependency cycle; what needs the runner (the
//! test runner binary, the example image) stays in `outpost-e2e`. The design the tests
//! prove: [`docs/ARCHITECTURE.md`](../../docs/ARCHITECTURE.md).

pub mod approve;
pub mod browser;
mod cluster;
mod etcd;
mod etcd_cluster;
pub mod helm;
pub mod job_plans;
mod kubectl;
mod lines;
mod lost_answer;
mod moto;
mod pki;
pub mod providers;
mod raw;
mod recording;
mod registry;
pub mod shop;
pub mod tls_etcd;
mod waits;

pub use cluster::{Backend, ControlPlane, Process, ServingCert, outpost_binary, runner_binary};
pub use etcd::ThrowawayEtcd;
pub use etcd_cluster::EtcdCluster;
pub use kubectl::{Kubectl, Run, Watch};
pub use lines::Lines;
pub use lost_answer::LostAnswerProxy;
pub use moto::{Moto, moto_binary};
pub use raw::Reply;
pub use recording::RecordingProxy;
pub use registry::Registry;
pub use tls_etcd::TlsEtcd;
pub use waits::{eventually, eventually_blocking, phase, wait_for, wait_for_blocking};

/// The repository's `manifests/` directory (the example app).
pub fn manifests() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

/// A free TCP port on 127.0.0.1 (bound, read and released: another process may take
/// it before the caller does, which loopback tests on one machine accept).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// A binary on `PATH`, as an absolute path (so a spawned process is told exactly which
/// one); panics when the machine lacks it.
pub fn on_path(name: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{name} is not on PATH; the test needs the real one"))
}

/// The repository's `customer/inputs/INSTALL.yaml`: what the example's customer of
/// `install` sets in its install stack (the App's `source: customer` inputs).
pub fn customer_inputs(install: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../customer/inputs/{install}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).expect("customer inputs are a map")
}

/// The example's manifests (`manifests/*.yaml`) copied into `dir`, with install
/// globex's images coming from `vendor` (its Install's `vendor_registry`) and copied into
/// `registry`: the customer's `image_registry`, in `dir/customer-inputs.yaml` (the
/// runner's `--customer-inputs`) and returned as the customer's inputs.
pub fn example_with_registries(
    dir: &std::path::Path,
    vendor: &Registry,
    registry: &Registry,
) -> (
    std::path::PathBuf,
    std::collections::BTreeMap<String, serde_json::Value>,
) {
    let example = dir.join("manifests");
    std::fs::create_dir_all(&example).unwrap();
    for entry in std::fs::read_dir(manifests()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(&path, example.join(path.file_name().unwrap())).unwrap();
        }
    }
    let installs = example.join("installs.yaml");
    let text = std::fs::read_to_string(&installs).unwrap();
    let globex = "    domain: store.globex.example\n";
    assert!(text.contains(globex), "installs.yaml sets globex's domain");
    let text = text.replace(
        globex,
        &format!("{globex}    vendor_registry: {}\n", vendor.host),
    );
    std::fs::write(&installs, text).unwrap();
    let mut inputs = customer_inputs("globex");
    inputs.insert("image_registry".into(), registry.host.clone().into());
    std::fs::write(
        dir.join("customer-inputs.yaml"),
        serde_json::to_string(&inputs).unwrap(),
    )
    .unwrap();
    (example, inputs)
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
