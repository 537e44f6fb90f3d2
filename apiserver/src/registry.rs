//! The registry of resource types the server serves: a generic object server, like kcp.
//! Types are registered from CustomResourceDefinitions at start-up, each with its
//! [`Strategy`]; schemaless kinds can be registered too.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

use crate::strategy::{NoRules, Strategy};

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

/// How the watch cache files the objects of a type for lookups by one value (the owner
/// they name), so that a list or watch that selects it reads only its objects: by the
/// value of a label, and of a field the server keeps for every object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexBy {
    /// The label, e.g. `example.com/owner`.
    pub label: String,
    /// The dotted field, e.g. `spec.owner`.
    pub field: String,
}

/// Which of a type's objects the watch cache holds LZ4-compressed against a dictionary
/// made of the type's first such objects: objects of one type share most of their text
/// (keys, managers' field sets, label names, a rendered template), so against each other
/// they shrink to a fraction (a fleet's Install from 2.8 KiB to ≈ 0.4, its rendered stack
/// from 20 KiB to ≈ 1.4), and each read that serves one decompresses it (≈ 0.4 µs for an
/// Install).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compressed {
    /// Every object.
    All,
    /// The objects that no longer move (a finished Plan; it may still get a label or a
    /// log, and is then compressed again): those whose `field` (dotted, e.g.
    /// `status.phase`) has one of `values`. The others are served as the shared bytes
    /// they are held in, without a copy.
    Settled {
        /// The dotted field, e.g. `status.phase`.
        field: String,
        /// Its values that mean the object is settled, e.g. `Succeeded`.
        values: Vec<String>,
    },
}

impl Compressed {
    /// The field it reads, if any (the cache keeps its text).
    pub fn field(&self) -> Option<&str> {
        match self {
            Compressed::All => None,
            Compressed::Settled { field, .. } => Some(field),
        }
    }
}

/// A subresource served by a plugin ([`crate::server::Subresource`]), as the type
/// declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct PluginSubresource {
    /// Its name in paths, e.g. `scale`.
    pub name: String,
    /// How discovery and the OpenAPI document show it (`get`, `patch` and `update` of
    /// the object); `None` keeps it out of both.
    pub described: Option<SubresourceBody>,
}

/// The body that `PATCH` and `PUT` of a described subresource take.
#[derive(Clone, Debug, PartialEq)]
pub struct SubresourceBody {
    /// What a write does, e.g. `scale the specified` (the kind follows).
    pub summary: String,
    /// The body's OpenAPI schema.
    pub schema: Value,
    /// The media types it may be sent as.
    pub content_types: Vec<String>,
}

/// One served resource type (one group/version/kind).
#[derive(Clone, Debug)]
pub struct ResourceType {
    /// API group; empty for the core group served under `/api`.
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind, e.g. `Widget`.
    pub kind: String,
    /// Kind of its lists, e.g. `WidgetList`.
    pub list_kind: String,
    /// Plural resource name used in paths, e.g. `widgets`.
    pub plural: String,
    /// Singular name, e.g. `widget`.
    pub singular: String,
    /// Short names for kubectl, e.g. `wd`.
    pub short_names: Vec<String>,
    /// Categories for kubectl, e.g. `all`.
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
    /// `metadata.namespace`, as dotted paths, e.g. `spec.owner`.
    pub selectable_fields: Vec<String>,
    /// The type's own rules (validation, immutability), run after the schema.
    pub strategy: Arc<dyn Strategy>,
    /// How the watch cache indexes its objects, if it does.
    pub index: Option<IndexBy>,
    /// Which of its objects the watch cache holds compressed against each other, if any.
    pub compressed: Option<Compressed>,
    /// Subresources served by plugins.
    pub subresources: Vec<PluginSubresource>,
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

    /// The plugin subresource `name`, if the type has it.
    pub fn subresource(&self, name: &str) -> Option<&PluginSubresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// The plugin subresources discovery and the OpenAPI document show.
    pub fn described_subresources(&self) -> impl Iterator<Item = (&str, &SubresourceBody)> {
        self.subresources
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.described.as_ref()?)))
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
                strategy: Arc::new(NoRules),
                index: None,
                compressed: None,
                subresources: Vec::new(),
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
            strategy: Arc::new(NoRules),
            index: None,
            compressed: None,
            subresources: Vec::new(),
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

    /// Adds every served version of a CRD, each with `strategy`.
    pub fn register_crd(&mut self, crd: &CustomResourceDefinition, strategy: Arc<dyn Strategy>) {
        for mut rt in ResourceType::from_crd(crd) {
            rt.strategy = strategy.clone();
            self.register(rt);
        }
    }

    /// Changes every registered type with `change` (e.g. to index them all).
    pub fn update_all(&mut self, mut change: impl FnMut(&mut ResourceType)) {
        for rt in self.types.values_mut() {
            change(Arc::make_mut(rt));
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_crd_is_served_with_its_names_scope_columns_and_fields() {
        let registry = crate::testing::test_registry();
        let widgets = registry
            .get("example.com", "v1", "widgets")
            .expect("widgets are served");
        assert_eq!(
            (widgets.kind.as_str(), widgets.list_kind.as_str()),
            ("Widget", "WidgetList")
        );
        assert_eq!(widgets.singular, "widget");
        assert_eq!(widgets.short_names, ["wd"]);
        assert_eq!(widgets.categories, ["example"]);
        assert!(widgets.namespaced && widgets.status_subresource);
        assert_eq!(widgets.selectable_fields, ["spec.tenant"]);
        let columns: Vec<(&str, &str, &str)> = widgets
            .printer_columns
            .iter()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Tenant", "string", ".spec.tenant"),
                ("Phase", "string", ".status.phase"),
                ("Age", "date", ".metadata.creationTimestamp")
            ]
        );
        let schema = widgets.schema.as_ref().expect("the version's schema");
        assert_eq!(
            schema["properties"]["spec"]["required"],
            serde_json::json!(["tenant"])
        );
        assert_eq!(
            widgets.key(Some("shop"), "w"),
            "/registry/example.com/widgets/shop/w"
        );

        let tenants = registry
            .get("example.com", "v1", "tenants")
            .expect("tenants are served");
        assert!(!tenants.namespaced && !tenants.status_subresource);
        assert!(tenants.printer_columns.is_empty() && tenants.selectable_fields.is_empty());
        assert_eq!(
            tenants.key(Some("shop"), "t"),
            "/registry/example.com/tenants/t"
        );
        assert_eq!(tenants.qualified_resource(), "tenants.example.com");
    }
}
