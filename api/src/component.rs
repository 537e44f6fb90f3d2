//! `Component`: one deployable of an App, of one `type`, with the source
//! block matching that type.

use crate::drift::DriftSettings;
use crate::operation::{EntityKind, Operation};
use crate::registry_auth::RegistryAuth;
use crate::role::validate_role_name;
use crate::validation::{
    FieldError, NameRule, Validate, duplicates, validate_identifier, validate_name,
    validate_object_name, validate_required,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Spec of a `Component`. Exactly the source block named by `type` is set
/// (`helm` for `helm_chart`, `terraform` for `terraform_module`, ...).
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "outpost.dev",
    version = "v1alpha1",
    kind = "Component",
    namespaced,
    status = "ComponentStatus",
    derive = "PartialEq",
    shortname = "comp",
    category = "outpost",
    selectable = ".spec.app",
    selectable = ".spec.type",
    doc = "One deployable part of an App.",
    printcolumn(name = "App", type_ = "string", json_path = ".spec.app"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSpec {
    /// Name of the App this component belongs to.
    pub app: String,
    /// What kind of deployable this is.
    #[serde(rename = "type")]
    pub type_: ComponentType,
    /// Source for `kubernetes_manifest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ManifestSource>,
    /// Source for `helm_chart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmSource>,
    /// Source for `terraform_module`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terraform: Option<TerraformSource>,
    /// Source for `cloudformation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloudformation: Option<CloudFormationSource>,
    /// Source for `container_image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageSource>,
    /// Source for `job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobSource>,
    /// The cluster a `kubernetes_manifest` or `helm_chart` goes into when the runner has
    /// no kubeconfig: its Plans reach it with an EKS token of their role. Templates,
    /// usually of the sandbox's outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterAccess>,
    /// Components (of the same App) deployed before this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// Role per operation (`deploy`, `teardown`): a role name template of the App.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub operation_roles: BTreeMap<String, String>,
    /// Drift schedule; the App's when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSettings>,
}

/// Status of a `Component`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStatus {
    /// `Ready` and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `metadata.generation` the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// What kind of deployable a component is.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ComponentType {
    /// Kubernetes manifests applied to the install's cluster.
    KubernetesManifest,
    /// A Helm chart released into the install's cluster.
    HelmChart,
    /// A Terraform module applied in the customer's account.
    TerraformModule,
    /// A CloudFormation stack in the customer's account.
    Cloudformation,
    /// A container image copied into the customer's registry.
    ContainerImage,
    /// A one-off container run to completion.
    Job,
}

impl ComponentType {
    /// Field name of the source block this type requires.
    pub fn source_field(self) -> &'static str {
        match self {
            Self::KubernetesManifest => "manifest",
            Self::HelmChart => "helm",
            Self::TerraformModule => "terraform",
            Self::Cloudformation => "cloudformation",
            Self::ContainerImage => "image",
            Self::Job => "job",
        }
    }
}

/// Kubernetes manifests, as one multi-document YAML template.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestSource {
    /// Namespace objects without one go into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The manifests, a template rendered before parsing.
    pub content: String,
    /// Outputs reported once the manifests are applied, each a template: what other
    /// components need to reach these objects (a Service's in-cluster address), as
    /// `components.<name>.outputs.<output>`. `objects` (the applied objects'
    /// references) is always reported and cannot be declared.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

impl ManifestSource {
    /// The output every applied manifest reports: the applied objects' references.
    pub const OBJECTS_OUTPUT: &'static str = "objects";
}

/// An EKS cluster a component's Plans reach with a token of their role (what
/// `aws eks get-token` mints), by name: the runner reads its API server's endpoint and
/// CA from EKS `DescribeCluster` under the Plan's role, never from the vendor.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAccess {
    /// The cluster's name, signed into each token and looked up in EKS; empty for a
    /// cluster reached by `kubeconfig`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The API server URL the vendor expects (optional): a Plan fails, before any token
    /// is minted, when it is not the one EKS reports.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    /// The base64 PEM CA bundle the vendor expects (optional), checked as `endpoint`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub certificate_authority_data: String,
    /// A cluster the customer brings (instead of `name`): `{{ secrets.NAME }}`, one of
    /// the App's secrets, holding a kubeconfig the runner reads from the customer's
    /// secret store under the Plan's role and keeps in memory. Never the kubeconfig
    /// itself: the control plane does not hold it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kubeconfig: String,
}

impl ClusterAccess {
    /// `spec.cluster`'s errors: a cluster is named by its EKS `name` or by a
    /// `kubeconfig` secret reference, not both and not neither.
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if self.kubeconfig.trim().is_empty() {
            errors.extend(validate_required("spec.cluster.name", &self.name));
            return errors;
        }
        if crate::registry_auth::secret_reference(&self.kubeconfig).is_none() {
            errors.push(FieldError::invalid(
                "spec.cluster.kubeconfig",
                "<redacted>",
                "must be a secret reference, {{ secrets.NAME }}: a kubeconfig is never \
                 stored in the control plane",
            ));
        }
        for (field, value) in [
            ("spec.cluster.name", &self.name),
            ("spec.cluster.endpoint", &self.endpoint),
            (
                "spec.cluster.certificateAuthorityData",
                &self.certificate_authority_data,
            ),
        ] {
            if !value.is_empty() {
                errors.push(FieldError::forbidden(
                    field,
                    "a cluster reached by a kubeconfig secret is named by that kubeconfig",
                ));
            }
        }
        errors
    }
}

/// A Helm chart.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelmSource {
    /// A local chart directory (an absolute path or a `file://` URL), a chart in an
    /// OCI registry, `oci://HOST/REPOSITORY` (its version in `version`), or the name of
    /// a chart of `repository`.
    pub chart: String,
    /// An HTTP chart repository's URL (where its `index.yaml` is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Chart version: an OCI chart's tag, optionally pinned (`1.2.0@sha256:…`), or a
    /// repository chart's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A registry or repository chart's repository in the install's registry
    /// (`registry/name`), a
    /// template: the chart is copied there by digest and pulled from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// How the runner authenticates to the vendor's registry (`chart`), as
    /// `image.sourceAuth`. Anonymous when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_auth: Option<RegistryAuth>,
    /// How the runner authenticates to the install's registry (`destination`), as
    /// `image.destinationAuth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_auth: Option<RegistryAuth>,
    /// Release namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Values as dotted paths (like `helm --set`), each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,
}

/// A Terraform module: exactly one of `source` (an address) or `files` (the module
/// inline) is set.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TerraformSource {
    /// Module source address. The runner copies local directories (an absolute path or
    /// a `file://` URL).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The module inline: file name (`main.tf`, `outputs.tf.json`, no directories)
    /// to content.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Module version, for registry sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Module variables, each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
}

/// A CloudFormation stack: exactly one of `templateUrl` (where CloudFormation reads the
/// template) or `template` (the template inline) is set.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CloudFormationSource {
    /// URL of the template (an S3 URL: CloudFormation itself reads it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template_url: String,
    /// The template inline (JSON or YAML), passed to CloudFormation as the template body.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub template: String,
    /// Stack name template; derived from install and component when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_name: Option<String>,
    /// Stack parameters, each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// A container image copied into the customer's registry.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageSource {
    /// Source image repository (`registry/name`).
    pub repository: String,
    /// Tag or digest, a template.
    pub tag: String,
    /// Destination repository in the customer's account, a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// How the runner authenticates to the vendor registry (`repository`): a pull
    /// credential from the customer's secret store. Anonymous when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_auth: Option<RegistryAuth>,
    /// How the runner authenticates to the install's registry (`destination`): a
    /// credential from the customer's secret store, or `ecr`. Omitted: an ECR
    /// destination (`ACCOUNT.dkr.ecr.REGION.amazonaws.com`) uses `ecr`, any other is
    /// reached anonymously.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_auth: Option<RegistryAuth>,
}

/// A container run to completion.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSource {
    /// Image reference, a template.
    pub image: String,
    /// Command and arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Environment variables, each a template.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl TerraformSource {
    /// Checks that exactly one of `source` and `files` is set and that inline file
    /// names are plain file names.
    fn validate_at(&self, field: &str) -> Vec<FieldError> {
        validate_module_source(field, &self.source, &self.files)
    }
}

/// Checks a module given either by address (`source`) or inline (`files`): exactly
/// one of them is set, and inline file names are plain file names. Shared by
/// components' `terraform` block and the App's sandbox.
pub(crate) fn validate_module_source(
    field: &str,
    source: &str,
    files: &BTreeMap<String, String>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match (source.trim().is_empty(), files.is_empty()) {
        (true, true) => errors.push(FieldError::required(
            format!("{field}.source"),
            "one of source or files",
        )),
        (false, false) => errors.push(FieldError::forbidden(
            format!("{field}.files"),
            "set only one of source and files",
        )),
        _ => {}
    }
    for name in files.keys() {
        let plain = !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\', '\0']);
        if !plain {
            errors.push(FieldError::invalid(
                format!("{field}.files"),
                name,
                "must be a plain file name (no directories, not starting with '.')",
            ));
        }
    }
    errors
}

impl ComponentSpec {
    /// Field names of the source blocks that are set.
    fn sources_set(&self) -> Vec<&'static str> {
        [
            ("manifest", self.manifest.is_some()),
            ("helm", self.helm.is_some()),
            ("terraform", self.terraform.is_some()),
            ("cloudformation", self.cloudformation.is_some()),
            ("image", self.image.is_some()),
            ("job", self.job.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

impl Validate for Component {
    fn validate(&self) -> Vec<FieldError> {
        let mut errors = validate_object_name(&self.metadata, NameRule::Label);
        let spec = &self.spec;
        errors.extend(validate_name("spec.app", &spec.app, NameRule::Label));
        let wanted = spec.type_.source_field();
        let set = spec.sources_set();
        if !set.contains(&wanted) {
            errors.push(FieldError::required(
                format!("spec.{wanted}"),
                format!(
                    "spec.type is {:?}",
                    serde_json::to_value(spec.type_).unwrap_or_default()
                ),
            ));
        }
        for other in set.into_iter().filter(|s| *s != wanted) {
            errors.push(FieldError::forbidden(
                format!("spec.{other}"),
                format!("only spec.{wanted} may be set for this spec.type"),
            ));
        }
        let in_a_cluster = matches!(
            spec.type_,
            ComponentType::KubernetesManifest | ComponentType::HelmChart
        );
        if spec.cluster.is_some() && !in_a_cluster {
            errors.push(FieldError::forbidden(
                "spec.cluster",
                "only a kubernetes_manifest or helm_chart component names a cluster",
            ));
        }
        errors.extend(spec.cluster.iter().flat_map(ClusterAccess::validate));
        let required = [
            spec.manifest
                .as_ref()
                .map(|m| ("spec.manifest.content", m.content.as_str())),
            spec.helm
                .as_ref()
                .map(|h| ("spec.helm.chart", h.chart.as_str())),
            spec.image
                .as_ref()
                .map(|i| ("spec.image.repository", i.repository.as_str())),
            spec.image
                .as_ref()
                .map(|i| ("spec.image.tag", i.tag.as_str())),
            spec.job
                .as_ref()
                .map(|j| ("spec.job.image", j.image.as_str())),
        ];
        for (field, value) in required.into_iter().flatten() {
            errors.extend(validate_required(field, value));
        }
        if let Some(terraform) = &spec.terraform {
            errors.extend(terraform.validate_at("spec.terraform"));
        }
        if let Some(helm) = &spec.helm {
            errors.extend(helm.validate_at("spec.helm"));
        }
        if let Some(image) = &spec.image {
            for (field, auth) in [
                ("spec.image.sourceAuth", &image.source_auth),
                ("spec.image.destinationAuth", &image.destination_auth),
            ] {
                if let Some(auth) = auth {
                    errors.extend(auth.validate_at(field));
                }
            }
        }
        if let Some(stack) = &spec.cloudformation {
            match (
                stack.template_url.trim().is_empty(),
                stack.template.trim().is_empty(),
            ) {
                (true, true) => errors.push(FieldError::required(
                    "spec.cloudformation.templateUrl",
                    "one of templateUrl or template",
                )),
                (false, false) => errors.push(FieldError::forbidden(
                    "spec.cloudformation.template",
                    "set only one of templateUrl and template",
                )),
                _ => {}
            }
        }
        if let Some(manifest) = &spec.manifest {
            for name in manifest.outputs.keys() {
                let field = format!("spec.manifest.outputs.{name}");
                if name == ManifestSource::OBJECTS_OUTPUT {
                    errors.push(FieldError::forbidden(
                        field,
                        "`objects` is reported by the runner: the applied objects' references",
                    ));
                } else {
                    errors.extend(validate_identifier(&field, name));
                }
            }
        }
        for (i, dep) in spec.dependencies.iter().enumerate() {
            let field = format!("spec.dependencies[{i}]");
            errors.extend(validate_name(&field, dep, NameRule::Label));
            if self.metadata.name.as_deref() == Some(dep.as_str()) {
                errors.push(FieldError::invalid(
                    field,
                    dep,
                    "a component cannot depend on itself",
                ));
            }
        }
        errors.extend(duplicates(
            spec.dependencies.iter().map(String::as_str),
            |i| format!("spec.dependencies[{i}]"),
        ));
        errors.extend(validate_operation_roles(
            "spec.operationRoles",
            &spec.operation_roles,
            EntityKind::Component,
        ));
        if let Some(drift) = &spec.drift {
            errors.extend(drift.validate_at("spec.drift"));
        }
        errors
    }
}

/// Checks an inline `operationRoles` map of an entity of `kind`: keys are
/// operations that apply to that kind, values valid role name templates.
pub(crate) fn validate_operation_roles(
    field: &str,
    roles: &BTreeMap<String, String>,
    kind: EntityKind,
) -> Vec<FieldError> {
    let supported: Vec<&str> = Operation::ALL
        .into_iter()
        .filter(|op| op.entity_kind() == kind)
        .map(Operation::as_str)
        .collect();
    let mut errors = Vec::new();
    for (op, role) in roles {
        let at = format!("{field}.{op}");
        if !supported.contains(&op.as_str()) {
            errors.push(FieldError::not_supported(&at, op, &supported));
        }
        errors.extend(validate_role_name(&at, role));
    }
    errors
}

#[cfg(test)]
#[path = "component_tests.rs"]
mod tests;
