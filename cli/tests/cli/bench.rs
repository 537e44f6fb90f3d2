//! `outpost bench ...` (the `outpost-bench` crate) at the smallest sizes: each prints its figures and ratios.

use super::*;

#[test]
fn bench_store_prints_both_backends_and_ratios_to_raw_etcd() {
    let stdout = bench_with_etcd(&["store", "--ops", "200", "--concurrency", "1,8"]);
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
    let stdout = bench_with_etcd(&[
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

/// [`bench`], given `--etcd` with the etcd in `OUTPOST_TEST_ETCD` when that is set.
fn bench_with_etcd(args: &[&str]) -> String {
    let etcd = std::env::var("OUTPOST_TEST_ETCD");
    let mut all = args.to_vec();
    if let Ok(etcd) = &etcd {
        all.extend(["--etcd", etcd]);
    }
    bench(&all)
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
        // Every Plan is created with its gate's decision, claimed and finished (three
        // writes on the Plan); its install goes Deploying and Active: five in all, plus
        // the release itself (the bench's change of the component, the App's new
        // `status.release`), two writes shared by the 12 Plans.
        let writes = figure(section, "store writes per plan");
        let writes_line = line(section, "store writes per plan");
        let on_plan: f64 = writes_line
            .split_once("(on the Plan itself: ")
            .and_then(|(_, r)| r.trim_end_matches(')').parse().ok())
            .unwrap_or_else(|| panic!("{writes_line}"));
        assert!((on_plan - 3.0).abs() < 0.01, "{writes_line}");
        assert!(
            (3.0..=5.0 + 2.0 / 12.0 + 0.01).contains(&writes),
            "{writes_line}\n{section}"
        );
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
        assert!((ratio(&dispatch) - p99 / 10.0).abs() < 0.01, "{dispatch}");
        let admitted = figure(section, "every install Active");
        let admitted_line = line(section, "every install Active");
        assert!(
            admitted > 0.0 && (ratio(&admitted_line) - admitted / 120.0).abs() < 0.01,
            "{admitted_line}"
        );
        // CPU per Plan: the three processes' sum, against 2 ms.
        let cpu_line = line(section, "CPU ms per plan");
        let cpu = figure(section, "CPU ms per plan");
        let parts: f64 = ["apiserver ", "controllers ", "runners "]
            .iter()
            .map(|name| {
                cpu_line
                    .split_once(name)
                    .and_then(|(_, r)| r.split([',', ' ']).next())
                    .unwrap_or_else(|| panic!("{name} in {cpu_line}"))
                    .parse::<f64>()
                    .unwrap()
            })
            .sum();
        assert!(cpu > 0.0 && (cpu - parts).abs() < 0.02, "{cpu_line}");
        assert!((ratio(&cpu_line) - cpu / 2.0).abs() < 0.01, "{cpu_line}");
        assert!(figure(section, "apiserver RSS") > 0.0, "{section}");
        let controllers = line(section, "controllers RSS");
        assert!(figure(section, "controllers RSS") > 0.0, "{section}");
        assert!(ratio(&controllers) > 0.0, "{controllers}");
        // Quiet runners resume from their BOOKMARKs: no 410, no relist.
        assert!(
            section
                .contains("runner watch errors (410s that made a runner relist)   0   goal 0: met"),
            "{section}"
        );
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
