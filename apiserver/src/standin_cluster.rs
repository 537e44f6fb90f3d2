//! The stand-in cluster (the server's `--standin-cluster`): the common Kubernetes
//! kinds served as schemaless objects, so that clients deploying manifests (server-side
//! apply), `kubectl apply --server-side`, `kubectl edit` and watches have a real API
//! to talk to in tests and in a local control plane.
//!
//! # Warning
//! It is an API-only stand-in: objects are stored, validated only as Kubernetes objects
//! (name, namespace, metadata), patched, applied and watched like in Kubernetes, but
//! nothing acts on them. No pod runs, no Service gets an address, no Deployment rolls
//! out, and no status is ever written but by clients.

use crate::registry::{PrinterColumn, ResourceType};

/// The RBAC API group.
pub const RBAC: &str = "rbac.authorization.k8s.io";

/// The served kinds: core `v1` ConfigMap, Secret, Service and Namespace (cluster
/// scoped), `apps/v1` Deployment and StatefulSet, `networking.k8s.io/v1` Ingress and NetworkPolicy,
/// `policy/v1` PodDisruptionBudget (what a Helm chart commonly ships beside its workloads),
/// and `rbac.authorization.k8s.io/v1` ClusterRole, ClusterRoleBinding, Role and
/// RoleBinding (what EKS-token users are authorized by, [`crate::auth::rbac`]).
pub fn kinds() -> Vec<ResourceType> {
    let kind = |group: &str, kind: &str, plural: &str, namespaced: bool, short: &[&str]| {
        let mut rt = ResourceType::schemaless(group, "v1", kind, plural, namespaced);
        rt.short_names = short.iter().map(|s| (*s).to_owned()).collect();
        rt.strategic_merge = true;
        if group == "apps" {
            rt.categories = vec!["all".into()];
            rt.printer_columns = vec![
                column("Replicas", "integer", ".spec.replicas"),
                column("Age", "date", ".metadata.creationTimestamp"),
            ];
        }
        rt
    };
    vec![
        kind("", "ConfigMap", "configmaps", true, &["cm"]),
        kind("", "Secret", "secrets", true, &[]),
        kind("", "Service", "services", true, &["svc"]),
        kind("", "Namespace", "namespaces", false, &["ns"]),
        kind("apps", "Deployment", "deployments", true, &["deploy"]),
        kind("apps", "StatefulSet", "statefulsets", true, &["sts"]),
        kind("networking.k8s.io", "Ingress", "ingresses", true, &["ing"]),
        kind(
            "networking.k8s.io",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
        ),
        kind(
            "policy",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
        ),
        kind(RBAC, "ClusterRole", "clusterroles", false, &[]),
        kind(
            RBAC,
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
        ),
        kind(RBAC, "Role", "roles", true, &[]),
        kind(RBAC, "RoleBinding", "rolebindings", true, &[]),
    ]
}

fn column(name: &str, type_: &str, json_path: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: None,
        description: String::new(),
        json_path: json_path.into(),
        priority: 0,
    }
}
