//! The controllers' modules form no cycle, and their layers point one way:
//! `reconcilers` → `caches` → `logic` (see the crate doc). Read from the sources: every
//! `crate::GROUP::MODULE` path a file names is an edge from the file's module to
//! `GROUP::MODULE`; a file's own submodules (`install_controller/deploy.rs`,
//! `template_tests.rs`) count as that module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const GROUPS: [&str; 3] = ["reconcilers", "caches", "logic"];

/// Which group may name which: each only those after it.
fn layer(group: &str) -> usize {
    GROUPS
        .iter()
        .position(|g| *g == group)
        .expect("a known group")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `GROUP::MODULE` of a source file, or `None` for `lib.rs` and a group's `mod.rs`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    let [group, module, ..] = parts.as_slice() else {
        return None;
    };
    if module == "mod" {
        return None;
    }
    let module = module.strip_suffix("_tests").unwrap_or(module);
    Some(format!("{group}::{module}"))
}

/// Every `crate::…` path in `text` (comments included: a doc link is a dependency of
/// the reader too), as the segments after `crate::`.
fn crate_paths(text: &str) -> Vec<Vec<&str>> {
    text.match_indices("crate::")
        .filter(|(at, _)| {
            // Not `outpost_crate::`, `$crate::`.
            !text[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, _)| {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].split("::").filter(|s| !s.is_empty()).collect()
        })
        .collect()
}

/// The module graph: each module and the modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(from) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("readable source");
        let entry = edges.entry(from.clone()).or_default();
        for path in crate_paths(&text) {
            match path.as_slice() {
                [group, module, ..] if GROUPS.contains(group) => {
                    let to = format!("{group}::{module}");
                    if to != from {
                        entry.insert(to);
                    }
                }
                // The crate root's own items (`crate::watch_config`).
                [item, ..] if !GROUPS.contains(item) => {
                    assert!(
                        matches!(*item, "watch_config" | "controller_config" | "CONCURRENCY"),
                        "{}: `crate::{}` goes through a re-export; name the module's full path",
                        file.display(),
                        path.join("::")
                    );
                }
                _ => {}
            }
        }
    }
    edges
}

/// A cycle through `node`, if the graph has one reachable from it.
fn cycle_from(
    node: &str,
    edges: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|n| n == node) {
        let mut cycle = path[start..].to_vec();
        cycle.push(node.to_owned());
        return Some(cycle);
    }
    if done.contains(node) {
        return None;
    }
    path.push(node.to_owned());
    for next in edges.get(node).into_iter().flatten() {
        if let Some(cycle) = cycle_from(next, edges, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(node.to_owned());
    None
}

#[test]
fn no_module_cycle_among_the_controllers() {
    let edges = graph();
    assert!(edges.len() > 20, "read too few modules: {:?}", edges.keys());
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = cycle_from(node, &edges, &mut Vec::new(), &mut done) {
            panic!("module cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn layers_point_one_way_and_no_reconciler_uses_another() {
    let edges = graph();
    let mut wrong = Vec::new();
    for (from, tos) in &edges {
        let from_group = from.split("::").next().expect("GROUP::MODULE");
        for to in tos {
            let to_group = to.split("::").next().expect("GROUP::MODULE");
            let backwards = layer(to_group) < layer(from_group);
            // `run` starts every reconciler and takes part in `leader` election.
            let sideways = from_group == "reconcilers"
                && to_group == "reconcilers"
                && from != "reconcilers::run";
            if backwards || sideways {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(wrong.is_empty(), "edges against the layering: {wrong:#?}");
}

#[test]
fn the_checker_sees_a_cycle_and_a_backwards_edge() {
    // The checks above pass on an empty answer too; this makes sure they can fail.
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("logic::a", vec!["logic::b"]),
        ("logic::b", vec!["logic::c"]),
        ("logic::c", vec!["logic::a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    let cycle = cycle_from("logic::a", &edges, &mut Vec::new(), &mut BTreeSet::new());
    assert_eq!(
        cycle.expect("a cycle"),
        ["logic::a", "logic::b", "logic::c", "logic::a"]
    );
    assert!(layer("logic") > layer("reconcilers"));
    let paths = crate_paths(
        "use crate::logic::template::{A, B};\n// [`x`](crate::caches::app_cache)\n$crate::no",
    );
    assert_eq!(
        paths,
        [vec!["logic", "template"], vec!["caches", "app_cache"]]
    );
}
