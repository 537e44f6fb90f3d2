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
fn bench_fleet_prints_every_figure_against_its_goal_on_both_stores() {
    let stdout = bench(&[
        "fleet",
        "--installs",
        "12",
        "--components",
        "3",
        "--dispatch-samples",
        "6",
        "--dispatch-gap-ms",
        "5",
        "--timeout-seconds",
        "120",
    ]);
    // The figure after `prefix` on the line that starts with it (after indentation).
    let figure = |section: &str, prefix: &str| -> f64 {
        section
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{section}"))
            .trim_end_matches(',')
            .parse()
            .unwrap_or_else(|e| panic!("{prefix:?}: {e}\n{section}"))
    };
    let ratio = |line: &str| -> f64 {
        let (_, r) = line
            .split_once("ratio ")
            .unwrap_or_else(|| panic!("{line}"));
        r.split_whitespace().next().unwrap().parse().unwrap()
    };
    let line = |section: &str, needle: &str| -> String {
        section
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} line:\n{section}"))
            .to_owned()
    };
    for store in ["embedded", "etcd"] {
        let start = stdout
            .find(&format!("[{store} store]"))
            .unwrap_or_else(|| panic!("no {store} section:\n{stdout}"));
        let section = &stdout[start..];
        let section = &section[..section[1..].find("\n[").map_or(section.len(), |i| i + 1)];
        // 12 installs x (sandbox + 3 components) to admit, one Plan each to roll out.
        assert!(
            line(section, "every install Active").contains("(48 plans)"),
            "{section}"
        );
        assert!(
            section.contains("one-component rollout (12 plans)"),
            "{section}"
        );
        let created = figure(section, "created, seen by runners");
        let gated = figure(section, "created, gated, seen by runners");
        let rolled = figure(section, "every install on the release");
        assert!(
            0.0 < created && created <= gated && gated <= rolled,
            "{section}"
        );
        let gated_line = line(section, "created, gated, seen by runners");
        assert!(
            (ratio(&gated_line) - gated / 10.0).abs() < 0.01,
            "{gated_line}"
        );
        // Every Plan is at least created, gated, claimed and finished.
        let writes = figure(section, "store writes per plan");
        let writes_line = line(section, "store writes per plan");
        assert!(writes >= 4.0, "{writes_line}");
        assert!(
            (ratio(&writes_line) - writes / 5.0).abs() < 0.01,
            "{writes_line}"
        );
        assert!(section.contains("create plans 12"), "{section}");
        let rate = line(section, "store writes per second");
        let raw: f64 = rate
            .split_once("raw etcd create txn/s ")
            .and_then(|(_, r)| r.split(':').next())
            .unwrap()
            .parse()
            .unwrap();
        assert!(raw > 0.0 && ratio(&rate) > 0.0, "{rate}");
        assert!(
            section.contains("dispatch (6 approvals, 12 runners watching)"),
            "{section}"
        );
        let dispatch = line(section, "p99 goal");
        let cols: Vec<&str> = dispatch.split_whitespace().collect();
        assert_eq!(
            (cols[0], cols[3], cols[6]),
            ("p50", "p99", "max"),
            "{dispatch}"
        );
        let (p50, p99, max): (f64, f64, f64) = (
            cols[1].parse().unwrap(),
            cols[4].parse().unwrap(),
            cols[7].parse().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{dispatch}");
        assert!((ratio(&dispatch) - p99 / 100.0).abs() < 0.01, "{dispatch}");
        assert!(figure(section, "apiserver RSS") > 0.0, "{section}");
        assert!(figure(section, "controllers RSS") > 0.0, "{section}");
        assert!(
            section
                .contains("checks: plans applied twice 0, claims lost 0, runner call failures 0"),
            "{section}"
        );
    }
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

/// What one `outpost up` printed until "press Ctrl-C", and the process.
struct Up {
    child: std::process::Child,
    printed: Vec<String>,
    rest: std::sync::mpsc::Receiver<String>,
}

impl Up {
    /// Starts `outpost up` on `dir` with free ports and reads its output until it is
    /// ready (or fails the test after `secs`).
    fn start(dir: &std::path::Path, secs: u64) -> Up {
        let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests");
        let customer_inputs = concat!(env!("CARGO_MANIFEST_DIR"), "/../customer/inputs");
        let mut command = outpost();
        command
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--cluster-listen",
                "127.0.0.1:0",
                "--manifests",
                manifests,
                "--customer-inputs",
                customer_inputs,
                "--data-dir",
            ])
            .arg(dir);
        Up::spawn(command, secs)
    }

    /// Runs `command` (an `outpost up`) and reads its output until it is ready.
    fn spawn(mut command: Command, secs: u64) -> Up {
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rest) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut printed = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rest.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains("press Ctrl-C");
                    printed.push(line);
                    if done {
                        break;
                    }
                }
                Err(e) => {
                    // Dropping it stops it the way Ctrl-C does, children included.
                    drop(Up {
                        child,
                        printed: Vec::new(),
                        rest,
                    });
                    panic!("outpost up not ready ({e}): {printed:#?}");
                }
            }
        }
        Up {
            child,
            printed,
            rest,
        }
    }

    /// The first word after `prefix` on a printed line.
    fn find(&self, prefix: &str) -> String {
        self.printed
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in {:#?}", self.printed))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }

    /// The process ids of the children it says it runs (runner, registries).
    fn children(&self) -> Vec<u32> {
        self.printed
            .iter()
            .filter(|l| {
                l.starts_with("outpost: runner pid ") || l.starts_with("outpost: registry ")
            })
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let at = words.iter().position(|w| *w == "pid").unwrap();
                words[at + 1].parse().unwrap()
            })
            .collect()
    }

    /// SIGINT (what Ctrl-C sends); waits for a clean exit and returns what it printed.
    fn interrupt(mut self) -> Vec<String> {
        Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "outpost up exited with {status}");
        self.rest.iter().collect()
    }
}

impl Drop for Up {
    /// A failed test leaves no `outpost up` behind: SIGINT, so it stops its children,
    /// and SIGKILL if it has not exited after 15 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
            while matches!(self.child.try_wait(), Ok(None)) && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The parent pid of a process, `None` once it is gone.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

fn kubectl(kubeconfig: &str, home: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The install's Plans as `name uid` lines, sorted.
fn plans_of_globex(kubeconfig: &str, home: &std::path::Path) -> Vec<String> {
    let out = kubectl(
        kubeconfig,
        home,
        &[
            "get",
            "plans",
            "-l",
            "outpost.dev/install=globex",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.phase}{"\n"}{end}"#,
        ],
    );
    let mut plans: Vec<String> = out.lines().map(str::to_owned).collect();
    plans.sort();
    plans
}

/// How many `apply` steps the runner's local audit log holds.
fn applies(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("runner/state/audit.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains(r#""type":"apply""#))
        .count()
}

#[test]
fn up_drives_the_example_install_to_active_stops_its_children_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let data = dir.path().join("outpost");

    // First run: everything is created, and the install's Plans run to Active.
    let started = std::time::Instant::now();
    let up = Up::start(&data, 300);
    let to_active = started.elapsed();
    eprintln!("outpost up: install Active and URL printed after {to_active:?}");
    let printed = up.printed.join("\n");
    for line in [
        "outpost: minted the runner token of default/globex",
        "outpost: install default/globex is Active",
        "outpost: applied 21 objects",
        ", pushed now)",
    ] {
        assert!(printed.contains(line), "{line:?} not in:\n{printed}");
    }
    assert!(!printed.contains("skipped"), "{printed}");
    for component in ["web-image", "web", "database", "cache", "ingress"] {
        assert!(
            up.printed
                .iter()
                .any(|l| l.starts_with(&format!("outpost: plan deploy {component} Succeeded in "))),
            "no finished deploy of {component}:\n{printed}"
        );
    }
    let url = up.find("outpost: API server at ");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    assert_eq!(up.find("outpost: dashboard at "), format!("{url}/ui"));
    let token = up.find("outpost: admin token ");
    let kubeconfig = up.find("outpost: kubeconfig ");
    let cluster = up.find("outpost: stand-in cluster kubeconfig ");
    assert_eq!(
        kubectl(
            &kubeconfig,
            &home,
            &["get", "install", "globex", "-o", "jsonpath={.status.phase}"]
        ),
        "Active"
    );
    // The printed token works on its own, with the CA in the data dir.
    let ca = data.join("pki/ca.crt");
    let by_token = kubectl(
        "/dev/null",
        &home,
        &[
            "--server",
            &url,
            "--token",
            &token,
            "--certificate-authority",
            ca.to_str().unwrap(),
            "get",
            "installs",
            "-o",
            "name",
        ],
    );
    assert_eq!(
        by_token.lines().collect::<Vec<_>>(),
        ["install.outpost.dev/acme", "install.outpost.dev/globex"]
    );
    // web runs in the stand-in cluster, from the install's registry, by digest.
    let image = kubectl(
        &cluster,
        &home,
        &[
            "get",
            "deployment",
            "web",
            "-n",
            "shopfront",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    let registry = up.printed[..]
        .iter()
        .find_map(|l| l.split("install registry at ").nth(1))
        .unwrap()
        .to_owned();
    assert!(
        image.starts_with(&format!("{registry}/shopfront@sha256:")),
        "{image}"
    );
    let plans = plans_of_globex(&kubeconfig, &home);
    assert_eq!(plans.len(), 7, "{plans:?}");
    let applied = applies(&data);
    assert_eq!(applied, 7);
    let children = up.children();
    assert_eq!(children.len(), 3, "runner and two registries: {printed}");
    // The runner gets its token from the environment, read from a 0600 file, never on
    // its command line.
    let runner_token = data.join("runner/token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&runner_token).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let runner_token = std::fs::read_to_string(&runner_token).unwrap();
    for child in &children {
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(runner_token.trim()),
            "the runner token is on the command line of {child}"
        );
    }
    let pid = up.child.id();
    for child in &children {
        assert_eq!(
            parent_of(*child),
            Some(pid),
            "{child} is a child of outpost up"
        );
    }
    let rest = up.interrupt();
    assert!(rest.iter().any(|l| l == "outpost: stopped"), "{rest:?}");
    for child in &children {
        assert_eq!(parent_of(*child), None, "child {child} is still running");
    }

    // Second run: resumes. Same token, same Plans, nothing minted, pushed or applied.
    let started = std::time::Instant::now();
    let up = Up::start(&data, 120);
    eprintln!(
        "outpost up (resumed): Active and URL printed after {:?}",
        started.elapsed()
    );
    let printed = up.printed.join("\n");
    assert_eq!(up.find("outpost: admin token "), token);
    assert!(
        printed.contains("outpost: 7 Plans of default/globex finished in an earlier run"),
        "{printed}"
    );
    for absent in ["minted", "pushed now", "outpost: plan "] {
        assert!(!printed.contains(absent), "{absent:?} in:\n{printed}");
    }
    let kubeconfig = up.find("outpost: kubeconfig ");
    assert_eq!(plans_of_globex(&kubeconfig, &home), plans);
    assert_eq!(applies(&data), applied, "nothing was applied again");
    let children = up.children();
    assert_eq!(children.len(), 3);
    up.interrupt();
    for child in &children {
        assert_eq!(parent_of(*child), None, "child {child} is still running");
    }
}

/// Whether process `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat[stat.rfind(')')? + 2..].chars().next())
        .is_some_and(|state| state != 'Z')
}

#[test]
fn up_stops_what_a_killed_up_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("outpost");
    let mut up = Up::start(&data, 300);
    let children = up.children();
    assert_eq!(children.len(), 3, "{:#?}", up.printed);
    // SIGKILL: `outpost up` gets no chance to stop its children.
    up.child.kill().unwrap();
    up.child.wait().unwrap();
    for child in &children {
        assert!(running(*child), "child {child} outlived its killed parent");
    }
    let again = Up::start(&data, 120);
    for child in &children {
        assert!(
            !running(*child),
            "child {child} was stopped by the next run"
        );
    }
    let stopped = again
        .printed
        .iter()
        .filter(|l| l.contains("an earlier run left running"))
        .count();
    assert_eq!(stopped, 3, "{:#?}", again.printed);
    assert!(
        again
            .printed
            .iter()
            .any(|l| l == "outpost: install default/globex is Active"),
        "{:#?}",
        again.printed
    );
    let children = again.children();
    again.interrupt();
    for child in &children {
        assert!(!running(*child), "child {child} is still running");
    }
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
    let output = outpost().args(["up", "--help"]).output().unwrap();
    let up = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen",
        "--data-dir",
        "--cluster-listen",
        "--install",
        "--manifests",
        "--customer-inputs",
        "Ctrl-C",
    ] {
        assert!(up.contains(flag), "{flag} missing:\n{up}");
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

/// README's walkthrough, run verbatim: every `sh` block of its "Walkthrough" section, in
/// order, as one `bash -e` script, in a directory laid out like the repository (with
/// `manifests/`, `customer/`, and `target/up/` holding the `outpost` this test built) in which
/// `outpost up` runs as `./x up` would start it (its defaults, free ports by environment).
#[test]
fn the_readme_walkthrough_works_verbatim() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme
        .split("\n## Walkthrough\n")
        .nth(1)
        .expect("README has a Walkthrough section")
        .split("\n## ")
        .next()
        .unwrap();
    let blocks: Vec<&str> = section
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 5, "walkthrough blocks: {blocks:#?}");
    assert!(
        blocks
            .iter()
            .any(|b| b.contains("kubectl patch install globex"))
    );

    let root = tempfile::tempdir().unwrap();
    let repo = root.path();
    std::os::unix::fs::symlink(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests"),
        repo.join("manifests"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../customer"),
        repo.join("customer"),
    )
    .unwrap();
    std::fs::create_dir(repo.join("target")).unwrap();
    let built = std::path::Path::new(env!("CARGO_BIN_EXE_outpost"))
        .parent()
        .unwrap();
    std::os::unix::fs::symlink(built, repo.join("target/up")).unwrap();
    let home = repo.join("home");
    std::fs::create_dir(&home).unwrap();
    // What the reader does in the editor: spec.replicas from 2 to 5.
    let editor = repo.join("edit-replicas");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  replicas: 2$/  replicas: 5/' \"$1\"\n",
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&editor, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let mut up = outpost();
    up.arg("up")
        .current_dir(repo)
        .env("OUTPOST_LISTEN", "127.0.0.1:0")
        .env("OUTPOST_CLUSTER_LISTEN", "127.0.0.1:0")
        .env_remove("OUTPOST_DATA_DIR");
    let up = Up::spawn(up, 300);

    let script = format!("set -euo pipefail\nset -x\n{}", blocks.join("\n"));
    let started = std::time::Instant::now();
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(repo)
        .env("HOME", &home)
        .env("KUBE_EDITOR", &editor)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "walkthrough took {:?}\n{stdout}\n{stderr}",
        started.elapsed()
    );
    assert!(output.status.success(), "the walkthrough failed");
    for expected in [
        // The input change reached the stand-in cluster through Plans.
        "shop.globex.example",
        "plan deploy ingress Succeeded",
        // The edit was reported as drift of that field.
        "Drifted",
        "spec.replicas",
        // The action ran.
        "Succeeded",
        // The audit log verifies.
        "events verified",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    let printed = up.interrupt();
    assert!(
        !printed.iter().any(|l| l.contains("panicked")),
        "{printed:#?}"
    );
}
