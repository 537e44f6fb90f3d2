//! The component dependency graph of an App: a component depends on the
//! components in its `dependencies` and on every component its templates read
//! outputs of (`{{ components.database.outputs.endpoint }}`).
//!
//! Orders are stable: among components whose dependencies are all placed, the
//! one with the smallest name comes first.

use crate::logic::app_objects::name_of;
use crate::logic::template::{Reference, references, templates_in};
use outpost_api::Component;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A dependency cycle, e.g. `web -> ingress -> web` (web depends on ingress,
/// which depends on web).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("dependency cycle {}", self.path())]
pub struct Cycle {
    /// The components on the cycle, starting and ending with the same one.
    pub components: Vec<String>,
}

impl Cycle {
    /// `web -> ingress -> web`.
    pub fn path(&self) -> String {
        self.components.join(" -> ")
    }
}

/// An acyclic component dependency graph and its deploy order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentGraph {
    /// Each component and the components it depends on.
    dependencies: BTreeMap<String, BTreeSet<String>>,
    /// Dependencies first, ties by name.
    order: Vec<String>,
}

impl ComponentGraph {
    /// The graph of `components`. Edges to components that are not in
    /// `components`, and templates that do not parse, are left out:
    /// `check_app` reports them.
    ///
    /// # Errors
    /// The first cycle found, from the smallest name on it.
    pub fn new(components: &[Component]) -> Result<Self, Cycle> {
        let names: BTreeSet<&str> = components.iter().map(name_of).collect();
        let dependencies: BTreeMap<String, BTreeSet<String>> = components
            .iter()
            .map(|c| {
                let deps = component_dependencies(c)
                    .into_iter()
                    .filter(|d| names.contains(d.as_str()))
                    .collect();
                (name_of(c).to_owned(), deps)
            })
            .collect();
        let order = topological_order(&dependencies)?;
        Ok(Self {
            dependencies,
            order,
        })
    }

    /// Components in deploy order: each after everything it depends on.
    pub fn deploy_order(&self) -> &[String] {
        &self.order
    }

    /// Components in teardown order: the exact reverse of
    /// [`deploy_order`](Self::deploy_order).
    pub fn teardown_order(&self) -> Vec<String> {
        self.order.iter().rev().cloned().collect()
    }

    /// What `component` depends on directly; empty for an unknown name.
    pub fn dependencies_of(&self, component: &str) -> impl Iterator<Item = &str> {
        self.dependencies
            .get(component)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Every component that depends, directly or transitively, on one of
    /// `changed`, in deploy order: what must be re-planned after `changed`
    /// moved. A member of `changed` is included only if it depends on another.
    pub fn dependents_of<'s>(&self, changed: impl IntoIterator<Item = &'s str>) -> Vec<String> {
        let changed: BTreeSet<&str> = changed.into_iter().collect();
        let mut affected: BTreeSet<&str> = BTreeSet::new();
        // Deploy order visits dependencies before dependents, so one pass
        // sees every transitive edge.
        for name in &self.order {
            if self
                .dependencies_of(name)
                .any(|d| changed.contains(d) || affected.contains(d))
            {
                affected.insert(name);
            }
        }
        self.order
            .iter()
            .filter(|n| affected.contains(n.as_str()))
            .cloned()
            .collect()
    }
}

impl fmt::Display for ComponentGraph {
    /// `database -> cache -> ...` in deploy order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.order.join(", "))
    }
}

/// The names `component` depends on: its `dependencies` and the components
/// its templates refer to (itself included, which makes a cycle).
pub fn component_dependencies(component: &Component) -> BTreeSet<String> {
    let mut deps: BTreeSet<String> = component.spec.dependencies.iter().cloned().collect();
    let spec = serde_json::to_value(&component.spec).unwrap_or_default();
    for (_, template) in templates_in(&spec) {
        for reference in references(template).unwrap_or_default() {
            if let Reference::Component { name, .. } = reference {
                deps.insert(name);
            }
        }
    }
    deps
}

/// Kahn's algorithm with the ready set ordered by name.
fn topological_order(
    dependencies: &BTreeMap<String, BTreeSet<String>>,
) -> Result<Vec<String>, Cycle> {
    let mut waiting: BTreeMap<&str, usize> = dependencies
        .iter()
        .map(|(name, deps)| (name.as_str(), deps.len()))
        .collect();
    let mut ready: BTreeSet<&str> = waiting
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(name, _)| *name)
        .collect();
    let mut order = Vec::with_capacity(dependencies.len());
    while let Some(next) = ready.pop_first() {
        waiting.remove(next);
        order.push(next.to_owned());
        for (name, deps) in dependencies {
            if deps.contains(next)
                && let Some(count) = waiting.get_mut(name.as_str())
            {
                *count -= 1;
                if *count == 0 {
                    ready.insert(name);
                }
            }
        }
    }
    match waiting.keys().next() {
        None => Ok(order),
        Some(start) => Err(find_cycle(dependencies, &waiting, start)),
    }
}

/// A cycle among `stuck` (components Kahn's algorithm could not place): every
/// one of them has a dependency in `stuck`, so following the smallest such
/// dependency from `start` must come back to a component already visited.
fn find_cycle(
    dependencies: &BTreeMap<String, BTreeSet<String>>,
    stuck: &BTreeMap<&str, usize>,
    start: &str,
) -> Cycle {
    let mut path: Vec<&str> = vec![start];
    loop {
        let last = path[path.len() - 1];
        let next = dependencies[last]
            .iter()
            .map(String::as_str)
            .find(|d| stuck.contains_key(d))
            .unwrap_or(start);
        if let Some(at) = path.iter().position(|p| *p == next) {
            let mut components: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
            components.push(next.to_owned());
            return Cycle { components };
        }
        path.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn component(name: &str, deps: &[&str], content: &str) -> Component {
        serde_json::from_value(json!({
            "apiVersion": "outpost.dev/v1alpha1",
            "kind": "Component",
            "metadata": {"name": name},
            "spec": {
                "app": "shopfront",
                "type": "kubernetes_manifest",
                "manifest": {"content": content},
                "dependencies": deps,
            }
        }))
        .expect("test Component is well-formed")
    }

    #[test]
    fn order_follows_dependencies_and_template_references() {
        let graph = ComponentGraph::new(&[
            component("web", &["db"], "{{ components.api-gw.outputs.url }}"),
            component("db", &[], ""),
            component("api-gw", &[], ""),
            component("b-lonely", &["missing"], ""),
            component("ingress", &["web"], ""),
        ])
        .unwrap();
        assert_eq!(
            graph.deploy_order(),
            ["api-gw", "b-lonely", "db", "web", "ingress"]
        );
        assert_eq!(
            graph.teardown_order(),
            ["ingress", "web", "db", "b-lonely", "api-gw"]
        );
        assert_eq!(
            graph.dependencies_of("web").collect::<Vec<_>>(),
            ["api-gw", "db"]
        );
        assert_eq!(graph.dependents_of(["db"]), ["web", "ingress"]);
        assert_eq!(graph.dependents_of(["db", "web"]), ["web", "ingress"]);
        assert_eq!(graph.dependents_of(["ingress"]), Vec::<String>::new());
    }

    #[test]
    fn cycles_are_named() {
        let err = ComponentGraph::new(&[
            component("web", &["ingress"], ""),
            component("ingress", &[], "{{ components.web.outputs.host }}"),
            component("db", &[], ""),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dependency cycle ingress -> web -> ingress"
        );
        let err = ComponentGraph::new(&[component("a", &[], "{{ components.a.outputs.x }}")])
            .unwrap_err();
        assert_eq!(err.path(), "a -> a");
        // A component stuck only behind a cycle is not part of it.
        let err = ComponentGraph::new(&[
            component("a", &["b"], ""),
            component("b", &["c"], ""),
            component("c", &["b"], ""),
        ])
        .unwrap_err();
        assert_eq!(err.path(), "b -> c -> b");
    }
}
