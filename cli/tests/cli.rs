//! The `outpost` binary, run as a user would.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn outpost() -> Command {
    Command::new(env!("CARGO_BIN_EXE_outpost"))
}

#[test]
fn bench_store_prints_both_backends_and_ratios_to_raw_etcd() {
    let mut command = outpost();
    command.args(["bench", "store", "--ops", "200", "--concurrency", "1,8"]);
    if let Ok(etcd) = std::env::var("OUTPOST_TEST_ETCD") {
        command.args(["--etcd", &etcd]);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (backend, operation) in [
        ("raw-etcd", "put"),
        ("raw-etcd", "txn"),
        ("etcd", "create"),
        ("etcd", "cas"),
        ("embedded", "create"),
        ("embedded", "cas"),
    ] {
        for conc in ["1", "8"] {
            let row = stdout
                .lines()
                .find(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() == 5 && cols[0] == backend && cols[1] == operation && cols[2] == conc
                })
                .unwrap_or_else(|| panic!("no {backend} {operation} row at {conc}:\n{stdout}"));
            let ratio: f64 = row.split_whitespace().last().unwrap().parse().unwrap();
            assert!(ratio > 0.0, "{row}");
        }
    }
}

#[test]
fn up_opens_the_embedded_store_and_resumes_it() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let mut child = outpost()
            .args(["up", "--data-dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().unwrap().unwrap();
        assert!(ready.contains("embedded store ready"), "{ready}");
        assert!(dir.path().join("store/outpost.redb").exists());
        // SIGINT is what Ctrl-C sends; the process must stop cleanly.
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "outpost up exited with {status}");
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
    }
}

#[test]
fn help_explains_every_command() {
    let output = outpost().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("up") && help.contains("bench"), "{help}");
    let output = outpost()
        .args(["bench", "store", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("--concurrency"));
}
