//! Resolving a manifest's objects against the cluster: discovery of each kind (one
//! request per group/version/kind), the namespace each object goes into, Namespaces the
//! cluster lacks (created first, never torn down), and the dry-run and live reads that
//! plan compares.

use super::*;

impl KubernetesExecutor {
    /// The objects `desired` declares, resolved against the cluster's discovery, with
    /// a Namespace object first for each namespace that does not exist yet.
    pub(super) async fn targets(&self, desired: &Value) -> anyhow::Result<Vec<Target>> {
        self.targets_with(desired, &[]).await
    }

    /// [`KubernetesExecutor::targets`], also ensuring the namespaces of `secrets`.
    pub(super) async fn targets_with(
        &self,
        desired: &Value,
        secrets: &[SecretObject],
    ) -> anyhow::Result<Vec<Target>> {
        let source = desired
            .get("manifest")
            .or_else(|| desired.pointer("/component/manifest"))
            .context("the desired state has no `manifest` (a kubernetes_manifest component)")?;
        let content = source
            .get("content")
            .and_then(Value::as_str)
            .context("the manifest has no `content`")?;
        let namespace = source
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(self.client.default_namespace())
            .to_owned();
        let mut objects = parse_manifest(content)?;
        // CRDs, then Namespaces first, so that what needs them finds them.
        objects.sort_by_key(crds::install_order);
        let defined: Vec<Value> = objects
            .iter()
            .filter(|o| crds::is_crd(o))
            .cloned()
            .collect();
        let mut discovery = Discovery::default();
        let mut targets = Vec::new();
        for object in objects {
            targets.push(
                self.target(&mut discovery, object, &namespace, &defined)
                    .await?,
            );
        }
        let declared: Vec<String> = targets
            .iter()
            .filter(|t| t.resource.kind == "Namespace")
            .map(|t| t.name.clone())
            .collect();
        let mut missing: Vec<String> = Vec::new();
        let secret_namespaces = secrets.iter().map(|s| s.namespace.clone());
        for ns in targets
            .iter()
            .filter_map(|t| t.namespace.clone())
            .chain(secret_namespaces)
        {
            if declared.contains(&ns) || missing.contains(&ns) {
                continue;
            }
            let namespaces = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("", "v1", "Namespace"),
                "namespaces",
            );
            let namespaces: Api<DynamicObject> = Api::all_with(self.client.clone(), &namespaces);
            if namespaces
                .get_opt(&ns)
                .await
                .with_context(|| format!("cannot read namespace {ns}"))?
                .is_none()
            {
                missing.push(ns);
            }
        }
        let mut created = Vec::new();
        for ns in missing {
            let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let mut target = self.target(&mut discovery, object, &namespace, &[]).await?;
            target.ensured = true;
            created.push(target);
        }
        created.extend(targets);
        Ok(created)
    }

    /// The target of `object`; a kind the cluster does not serve is resolved from one
    /// of `defined` (the manifest's CRDs) if one defines it.
    pub(super) async fn target(
        &self,
        discovery: &mut Discovery,
        mut object: Value,
        default_namespace: &str,
        defined: &[Value],
    ) -> anyhow::Result<Target> {
        let (resource, scope, pending_crd) = match discovery.resolve(&self.client, &object).await {
            Ok((resource, caps)) => (resource, caps.scope, None),
            Err(err) => {
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let kind = object["kind"].as_str().unwrap_or_default();
                match crds::defined_by(defined, api_version, kind) {
                    Some((resource, scope, crd)) => (resource, scope, Some(crd)),
                    None => return Err(err),
                }
            }
        };
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .with_context(|| format!("a {} in the manifest has no metadata.name", resource.kind))?
            .to_owned();
        let namespace = match scope {
            Scope::Cluster => None,
            Scope::Namespaced => {
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(default_namespace)
                    .to_owned();
                object["metadata"]["namespace"] = json!(ns);
                Some(ns)
            }
        };
        Ok(Target {
            ensured: false,
            pending_crd,
            object,
            resource,
            namespace,
            name,
        })
    }

    /// The targets of a teardown: the manifest's objects if the Plan carries one, else
    /// those the last apply recorded.
    pub(super) async fn teardown_targets(&self, ctx: &StepContext) -> anyhow::Result<Vec<Target>> {
        if ctx.desired.get("manifest").is_some()
            || ctx.desired.pointer("/component/manifest").is_some()
        {
            return self.targets(&ctx.desired).await;
        }
        let recorded = read_references(&ctx.work_dir)?;
        self.referenced(&recorded).await
    }

    /// Targets for object references or objects (`apiVersion`, `kind`, `metadata` or
    /// flat `namespace`/`name`).
    pub(super) async fn referenced(&self, objects: &[Value]) -> anyhow::Result<Vec<Target>> {
        let mut discovery = Discovery::default();
        let mut targets = Vec::new();
        for object in objects.iter().filter(|o| !o.is_null()) {
            let name = object
                .pointer("/metadata/name")
                .or_else(|| object.get("name"))
                .cloned()
                .unwrap_or(Value::Null);
            let namespace = object
                .pointer("/metadata/namespace")
                .or_else(|| object.get("namespace"))
                .cloned()
                .unwrap_or(Value::Null);
            let mut metadata = json!({"name": name});
            if !namespace.is_null() {
                metadata["namespace"] = namespace;
            }
            let shaped = json!({"apiVersion": object["apiVersion"], "kind": object["kind"], "metadata": metadata});
            targets.push(self.target(&mut discovery, shaped, "default", &[]).await?);
        }
        Ok(targets)
    }

    /// The target of one Secret the Plan writes.
    pub(super) async fn secret_target(&self, secret: &SecretObject) -> anyhow::Result<Target> {
        let mut discovery = Discovery::default();
        self.target(&mut discovery, secret.object(), &secret.namespace, &[])
            .await
    }

    pub(super) async fn dry_run(&self, target: &Target) -> anyhow::Result<Value> {
        let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let result = target
            .api(&self.client)
            .patch(&target.name, &params, &Patch::Apply(&target.object))
            .await
            .with_context(|| format!("dry-run apply of {} failed", describe(target)))?;
        Ok(serde_json::to_value(result)?)
    }

    pub(super) async fn live(&self, target: &Target) -> anyhow::Result<Option<Value>> {
        let live = target
            .api(&self.client)
            .get_opt(&target.name)
            .await
            .with_context(|| format!("cannot read {}", describe(target)))?;
        Ok(live.map(serde_json::to_value).transpose()?)
    }
}

/// Discovery of the kinds a manifest uses, one request per group/version/kind.
#[derive(Default)]
pub(super) struct Discovery {
    known: HashMap<(String, String), (ApiResource, ApiCapabilities)>,
}

impl Discovery {
    async fn resolve(
        &mut self,
        client: &kube_client::Client,
        object: &Value,
    ) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.known.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = pinned_kind(client, &gvk)
            .await
            .with_context(|| format!("the cluster does not serve {kind} in {api_version}"))?;
        self.known.insert(key, found.clone());
        Ok(found)
    }
}
