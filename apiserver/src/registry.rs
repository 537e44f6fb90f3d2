//! The registry of resource types the server serves: a generic object server, like kcp.
//! Outpost's kinds are registered from their CustomResourceDefinitions (generated from
//! the Rust types); schemaless kinds can be registered too.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// A printer column, as in a CRD's `additionalPrinterColumns`.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: String,
    /// OpenAPI format, if any.
    pub format: Option<String>,
    /// What the column shows.
    pub description: String,
    /// JSONPath of the value, e.g. `.status.phase`.
    pub json_path: String,
    /// 0 is shown by default; higher only with `-o wide`.
    pub priority: i32,
}

/// One served resource type (one group/version/kind).
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group served under `/api`.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind, e.g. `Install`.
    pub kind: String,
    /// Kind of its lists, e.g. `InstallList`.
    pub list_kind: String,
    /// Plural resource name used in paths, e.g. `installs`.
    pub plural: String,
    /// Singular name, e.g. `install`.
    pub singular: String,
    /// Short names for kubectl, e.g. `inst`.
    pub short_names: Vec<String>,
    /// Categories for kubectl, e.g. `outpost`.
    pub categories: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// The OpenAPI v3 schema of the whole object; `None` for a schemaless kind, which
    /// accepts any fields.
    pub schema: Option<Value>,
    /// Columns for `kubectl get`.
    pub printer_columns: Vec<PrinterColumn>,
    /// Whether `/status` is a subresource (then the main resource ignores status
    /// changes and `/status` ignores everything else).
    pub status_subresource: bool,
    /// Extra fields usable in field selectors besides `metadata.name` and
    /// `metadata.namespace`, as dotted paths, e.g. `spec.install`.
    pub selectable_fields: Vec<String>,
    /// The kind's own validation (admission), run after the schema.
    pub validate: Option<fn(&Value) -> Vec<outpost_api::FieldError>>,
    /// Whether `spec` may not change after creation.
    pub immutable_spec: bool,
    /// Whether strategic merge patches are served (the stand-in cluster's built-in
    /// kinds); custom resources refuse them with 415, as in Kubernetes.
    pub strategic_merge: bool,
}

impl ResourceType {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` in the core group), as Kubernetes messages name it.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The store prefix of every object of this type, or of those in one namespace.
    pub fn key_prefix(&self, namespace: Option<&str>) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        match namespace.filter(|_| self.namespaced) {
            Some(ns) => format!("/registry/{group}/{}/{ns}/", self.plural),
            None => format!("/registry/{group}/{}/", self.plural),
        }
    }

    /// The store key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.key_prefix(namespace))
    }

    /// One resource type per served version of a CRD.
    pub fn from_crd(crd: &CustomResourceDefinition) -> Vec<ResourceType> {
        let spec = &crd.spec;
        let names = &spec.names;
        let selectable_fields_of = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            v.selectable_fields
                .iter()
                .flatten()
                .map(|f| f.json_path.trim_start_matches('.').to_owned())
                .collect::<Vec<_>>()
        };
        spec.versions
            .iter()
            .filter(|v| v.served)
            .map(|v| ResourceType {
                group: spec.group.clone(),
                version: v.name.clone(),
                kind: names.kind.clone(),
                list_kind: names
                    .list_kind
                    .clone()
                    .unwrap_or_else(|| format!("{}List", names.kind)),
                plural: names.plural.clone(),
                singular: names
                    .singular
                    .clone()
                    .unwrap_or_else(|| names.kind.to_lowercase()),
                short_names: names.short_names.clone().unwrap_or_default(),
                categories: names.categories.clone().unwrap_or_default(),
                namespaced: spec.scope == "Namespaced",
                schema: v
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok()),
                printer_columns: v
                    .additional_printer_columns
                    .iter()
                    .flatten()
                    .map(|c| PrinterColumn {
                        name: c.name.clone(),
                        type_: c.type_.clone(),
                        format: c.format.clone(),
                        description: c.description.clone().unwrap_or_default(),
                        json_path: c.json_path.clone(),
                        priority: c.priority.unwrap_or(0),
                    })
                    .collect(),
                status_subresource: v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
                selectable_fields: selectable_fields_of(v),
                validate: None,
                immutable_spec: false,
                strategic_merge: false,
            })
            .collect()
    }

    /// A schemaless kind: any fields are accepted and kept.
    pub fn schemaless(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
    ) -> ResourceType {
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            short_names: Vec::new(),
            categories: Vec::new(),
            namespaced,
            schema: None,
            printer_columns: Vec::new(),
            status_subresource: false,
            selectable_fields: Vec::new(),
            validate: None,
            immutable_spec: false,
            strategic_merge: false,
        }
    }
}

/// Every served resource type, looked up by group, version and plural.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    types: BTreeMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// The registry with every Outpost kind, and `coordination.k8s.io/v1` Leases for
    /// controllers' leader election.
    pub fn outpost() -> Self {
        let mut registry = Registry::new();
        for crd in outpost_api::crds() {
            for mut rt in ResourceType::from_crd(&crd) {
                rt.validate = crate::admission::validator(&rt.kind);
                rt.immutable_spec = rt.kind == "Plan";
                registry.register(rt);
            }
        }
        registry.register(ResourceType::schemaless(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
        ));
        registry
    }

    /// Adds the common Kubernetes kinds the stand-in cluster serves
    /// ([`crate::standin_cluster`]) and CustomResourceDefinitions
    /// ([`crate::apiextensions`]).
    pub fn with_standin_cluster(mut self) -> Self {
        for rt in crate::standin_cluster::kinds() {
            self.register(rt);
        }
        self.register(crate::apiextensions::resource_type());
        self
    }

    /// Adds (or replaces) a resource type.
    pub fn register(&mut self, rt: ResourceType) {
        let key = (rt.group.clone(), rt.version.clone(), rt.plural.clone());
        self.types.insert(key, Arc::new(rt));
    }

    /// The type served at `group/version/plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_owned(), version.to_owned(), plural.to_owned()))
            .cloned()
    }

    /// Every type, ordered by group, version, plural.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Every type of one group/version.
    pub fn in_group_version<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceType>> + 'a {
        self.all()
            .filter(move |rt| rt.group == group && rt.version == version)
    }

    /// Every non-core group with its versions, in order.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for rt in self.all().filter(|rt| !rt.group.is_empty()) {
            let versions = groups.entry(rt.group.clone()).or_default();
            if !versions.contains(&rt.version) {
                versions.push(rt.version.clone());
            }
        }
        groups
    }

    /// Versions served in the core group (`/api`).
    pub fn core_versions(&self) -> Vec<String> {
        let mut versions: Vec<String> = self
            .all()
            .filter(|rt| rt.group.is_empty())
            .map(|rt| rt.version.clone())
            .collect();
        versions.dedup();
        versions
    }
}
