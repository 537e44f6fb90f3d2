//! The AWS emulator, `moto_server`, on a free loopback port in a temporary directory,
//! stopped when dropped. It comes from `OUTPOST_MOTO_SERVER` (set by `./x test`), else
//! the repository's `.venv/` (made by `./x deps`).
//!
//! [`Moto::start_with_eks_endpoints`] runs the same server through
//! `testing/moto/eks_endpoints.py` (with the Python beside `moto_server`), so that an EKS
//! cluster the test creates reports the stand-in cluster's address and CA in
//! `DescribeCluster` ([`Moto::create_eks_cluster`]) instead of moto's made-up ones.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `moto_server`.
pub struct Moto {
    child: Child,
    /// Its loopback port.
    pub port: u16,
    dir: tempfile::TempDir,
}

/// The `moto_server` binary: `OUTPOST_MOTO_SERVER`, else `.venv/bin/moto_server`.
pub fn moto_binary() -> PathBuf {
    let path = std::env::var_os("OUTPOST_MOTO_SERVER")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/moto_server"),
            PathBuf::from,
        );
    assert!(
        path.is_file(),
        "{} not found (set OUTPOST_MOTO_SERVER or run `./x deps`)",
        path.display()
    );
    path
}

impl Moto {
    /// Starts the emulator, which accepts any credentials, and waits until its port
    /// accepts connections.
    pub fn start() -> Moto {
        Moto::start_with_env(&[])
    }

    /// Starts the emulator with `env` (`INITIAL_NO_AUTH_ACTION_COUNT`: IAM is enforced
    /// after that many calls) and waits until its port accepts connections, without
    /// a request (each would count towards the unauthenticated ones).
    pub fn start_with_env(env: &[(&str, &str)]) -> Moto {
        Moto::spawn(Command::new(moto_binary()), env)
    }

    /// [`Moto::start_with_env`] through `testing/moto/eks_endpoints.py`: EKS clusters
    /// created by [`Moto::create_eks_cluster`] report the endpoint and CA given there.
    pub fn start_with_eks_endpoints(env: &[(&str, &str)]) -> Moto {
        let python = moto_binary().with_file_name("python");
        assert!(
            python.is_file(),
            "{} not found: the Python of moto_server's environment runs the EKS launcher",
            python.display()
        );
        let mut command = Command::new(python);
        command.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("moto/eks_endpoints.py"));
        Moto::spawn(command, env)
    }

    /// Starts `command` on port 0 (the kernel picks a free one as moto binds it, so no
    /// other process can take it in between, as a port found free beforehand could be)
    /// and reads the port from the line moto logs, "Running on http://127.0.0.1:PORT".
    fn spawn(mut command: Command, env: &[(&str, &str)]) -> Moto {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = std::fs::File::create(dir.path().join("moto.log")).expect("moto.log");
        let child = command
            .args(["-H", "127.0.0.1", "-p", "0"])
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("moto_server starts");
        let mut moto = Moto {
            child,
            port: 0,
            dir,
        };
        let port = crate::eventually_blocking(60, "moto_server to listen", || {
            if let Some(port) = listening_port(&moto.log())
                && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                return Some(port);
            }
            if let Some(status) = moto.child.try_wait().expect("moto_server can be polled") {
                panic!("moto_server exited with {status}: {}", moto.log());
            }
            None
        });
        moto.port = port;
        moto
    }

    /// `http://127.0.0.1:PORT`: the endpoint for every service.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Plays AWS creating EKS cluster `name` in `region` whose API server is at
    /// `endpoint` with the base64 PEM CA bundle `ca` (a [`Moto::start_with_eks_endpoints`]
    /// emulator reports them in `DescribeCluster`).
    pub async fn create_eks_cluster(&self, region: &str, name: &str, endpoint: &str, ca: &str) {
        use aws_sdk_eks::config::{BehaviorVersion, Credentials, Region};
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let config = aws_sdk_eks::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .endpoint_url(self.endpoint())
            .credentials_provider(Credentials::new("AKIDTEST", "test", None, None, "e2e"))
            .http_client(http)
            .build();
        aws_sdk_eks::Client::from_conf(config)
            .create_cluster()
            .name(name)
            .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
            .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().build())
            .tags("outpost.test/endpoint", endpoint)
            .tags("outpost.test/ca", ca)
            .send()
            .await
            .expect("moto creates the EKS cluster");
    }

    /// What the emulator logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("moto.log")).unwrap_or_default()
    }
}

/// The port of moto's "Running on http://127.0.0.1:PORT" line in `log`.
fn listening_port(log: &str) -> Option<u16> {
    let (_, rest) = log.split_once("Running on http://127.0.0.1:")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl Drop for Moto {
    fn drop(&mut self) {
        // A test failing with the emulator running shows what the emulator saw last (a
        // failure under load once came with nothing but its test's name).
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "moto_server's last lines ({} in all):\n{}",
                lines.len(),
                lines[lines.len().saturating_sub(30)..].join("\n")
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_port_is_read_from_the_line_moto_logs() {
        let log = "\u{1b}[31mWARNING: This is a development server.\u{1b}[0m\n * Running on http://127.0.0.1:46699\n\u{1b}[33mPress CTRL+C to quit\u{1b}[0m\n";
        assert_eq!(super::listening_port(log), Some(46699));
        assert_eq!(
            super::listening_port(" * Running on http://127.0.0.1:"),
            None
        );
        assert_eq!(super::listening_port(""), None);
    }
}
