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
fn bench_api_prints_http_and_store_rates_and_fan_out_percentiles() {
    let mut command = outpost();
    command.args([
        "bench",
        "api",
        "--ops",
        "100",
        "--concurrency",
        "1,4",
        "--watchers",
        "20",
        "--events",
        "5",
    ]);
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
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let mut figures = vec![("raw-etcd", "client", "put")];
    for backend in ["etcd", "embedded"] {
        for (path, operation) in [
            ("store", "create"),
            ("store", "cas"),
            ("http", "create"),
            ("http", "update"),
        ] {
            figures.push((backend, path, operation));
        }
    }
    for (backend, path, operation) in figures {
        for conc in ["1", "4"] {
            let row = rows
                .iter()
                .find(|c| c.len() == 7 && c[..4] == [backend, path, operation, conc])
                .unwrap_or_else(|| {
                    panic!("no {backend} {path} {operation} row at {conc}:\n{stdout}")
                });
            let to_raw_etcd: f64 = row[6].parse().unwrap();
            assert!(to_raw_etcd > 0.0, "{row:?}");
            if path == "http" {
                let to_store: f64 = row[5].parse().unwrap();
                assert!(to_store > 0.0, "{row:?}");
            }
        }
    }
    for backend in ["etcd", "embedded"] {
        for operation in ["create", "update"] {
            let goal = format!("goal: {backend} {operation} over HTTP at concurrency 4 >= 0.50");
            assert!(stdout.contains(&goal), "no {goal:?}:\n{stdout}");
        }
    }
    assert!(
        stdout.contains("watch fan-out: 20 watchers, 5 updates"),
        "{stdout}"
    );
    for backend in ["etcd", "embedded"] {
        let row = rows
            .iter()
            .find(|c| c.first() == Some(&backend) && c.len() == 12)
            .unwrap_or_else(|| panic!("no fan-out row for {backend}:\n{stdout}"));
        assert_eq!(
            row[1..3],
            ["100", "0"],
            "every watcher gets every event: {row:?}"
        );
        let percentiles: Vec<f64> = row[3..7].iter().map(|p| p.parse().unwrap()).collect();
        assert!(
            percentiles.windows(2).all(|w| w[0] <= w[1]) && percentiles[0] > 0.0,
            "p50 <= p90 <= p99 <= max: {row:?}"
        );
    }
}

/// Runs `outpost bench ARGS` (the runner benches need `outpost-runner` built next to
/// `outpost`, as `./x test` and `./x bench` build it) and returns its standard output.
fn bench(args: &[&str]) -> String {
    let output = outpost().arg("bench").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn bench_runner_prints_the_dispatch_distribution_and_its_ratio_to_the_goal() {
    let stdout = bench(&[
        "runner", "--plans", "10", "--gap-ms", "20", "--burst", "3", "--bursts", "2",
    ]);
    for (mode, plans) in [
        ("one at a time", "10"),
        ("burst of 3: first Plan", "2"),
        ("burst of 3: every Plan", "6"),
    ] {
        let row = stdout
            .lines()
            .find_map(|l| l.strip_prefix(mode))
            .unwrap_or_else(|| panic!("no {mode:?} row:\n{stdout}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols.len(), 8, "{row}");
        assert_eq!(cols[0], plans, "{row}");
        let (p50, p99, max): (f64, f64, f64) = (
            cols[2].parse().unwrap(),
            cols[4].parse().unwrap(),
            cols[5].parse().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{row}");
        assert_eq!(cols[6], format!("{plans}/0"), "every Plan succeeded: {row}");
        let ratio: f64 = cols[7].parse().unwrap();
        assert!((ratio - p99 / 100.0).abs() < 0.01, "p99/100ms: {row}");
        assert!(
            stdout.contains(&format!("{mode} histogram (ms): <2: ")),
            "{stdout}"
        );
    }
}

#[test]
fn bench_controllers_rolls_a_new_release_out_and_counts_the_store_writes() {
    let stdout = bench(&["controllers", "--installs", "3", "--components", "4"]);
    // 3 installs x (sandbox provision + 4 deploys) the first time, 4 deploys each after.
    for (phase, plans) in [("first release", 15), ("new release", 12)] {
        let row = stdout
            .lines()
            .find_map(|l| l.strip_prefix(phase))
            .unwrap_or_else(|| panic!("no {phase:?} row:\n{stdout}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols.len(), 9, "{row}");
        let n = |i: usize| -> f64 { cols[i].parse().unwrap() };
        assert_eq!(n(0), f64::from(plans), "plans: {row}");
        assert!(0.0 < n(1) && n(1) <= n(2), "planned <= rolled out: {row}");
        // Every Plan is one create; the writes per install and per Plan add up.
        assert!(n(3) >= n(0), "creates: {row}");
        assert_eq!(n(6), 0.0, "no refused writes: {row}");
        let writes = n(3) + n(4) + n(5);
        assert!((n(7) - writes / 3.0).abs() < 0.1, "writes/inst: {row}");
        assert!((n(8) - writes / n(0)).abs() < 0.01, "writes/plan: {row}");
    }
    assert!(
        stdout.contains("new release: create plans: 12,"),
        "{stdout}"
    );
}

#[test]
fn bench_runner_footprint_prints_size_and_idle_memory_against_the_goals() {
    let stdout = bench(&["runner-footprint", "--idle-seconds", "1"]);
    let figure = |prefix: &str| -> (f64, f64) {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{stdout}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        let mib = cols.iter().position(|c| *c == "MiB").unwrap();
        let value: f64 = cols[mib - 1].parse().unwrap();
        let ratio: f64 = cols.last().unwrap().parse().unwrap();
        (value, ratio)
    };
    let (size, ratio) = figure("stripped:");
    assert!(size > 1.0 && (ratio - size / 25.0).abs() < 0.01, "{stdout}");
    for runner in ["outpost-runner   VmRSS", "outpost runner   VmRSS"] {
        let (rss, ratio) = figure(runner);
        assert!(rss > 1.0 && (ratio - rss / 20.0).abs() < 0.01, "{stdout}");
    }
}

#[test]
fn up_serves_the_example_app_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");
    let mut tokens = Vec::new();
    for run in 0..2 {
        let mut child = outpost()
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--manifests",
                manifests,
                "--data-dir",
            ])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut printed = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            let done = line.contains("press Ctrl-C");
            printed.push(line);
            if done {
                break;
            }
        }
        let find = |prefix: &str| {
            printed
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("run {run}: no {prefix:?} line in {printed:?}"))
                .split_whitespace()
                .next()
                .unwrap()
                .to_owned()
        };
        assert!(find("outpost: API server at ").starts_with("https://127.0.0.1:"));
        assert!(
            printed.iter().any(|l| l.contains("applied 20 objects")),
            "{printed:?}"
        );
        tokens.push(find("outpost: admin token "));
        let kubeconfig = find("outpost: kubeconfig ");
        let installs = Command::new("kubectl")
            .args(["get", "installs", "-o", "name"])
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let names = String::from_utf8_lossy(&installs.stdout);
        assert_eq!(
            names.lines().collect::<Vec<_>>(),
            ["install.outpost.dev/acme", "install.outpost.dev/globex"],
            "{}",
            String::from_utf8_lossy(&installs.stderr)
        );
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
    assert_eq!(
        tokens[0], tokens[1],
        "a second run resumes with the same state and token"
    );
}

#[test]
fn help_explains_every_command() {
    let output = outpost().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("up") && help.contains("bench"), "{help}");
    for verb in [
        "status", "stack", "deploy", "trigger", "approve", "deny", "drift", "logs", "audit",
    ] {
        assert!(
            help.lines()
                .any(|l| l.split_whitespace().next() == Some(verb)),
            "{verb} is not in --help:\n{help}"
        );
        let output = outpost().args([verb, "--help"]).output().unwrap();
        assert!(output.status.success(), "{verb} --help");
    }
    let output = outpost().args(["trigger", "--help"]).output().unwrap();
    let trigger = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--install",
        "--role",
        "--wait",
        "--server",
        "--token",
        "--kubeconfig",
        "--namespace",
        "--output",
    ] {
        assert!(trigger.contains(flag), "{flag} missing:\n{trigger}");
    }
    let output = outpost()
        .args(["bench", "store", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("--concurrency"));
}
