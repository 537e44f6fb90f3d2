//! `outpost up`: the example install driven to Active, its children stopped and resumed.

use super::*;

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
