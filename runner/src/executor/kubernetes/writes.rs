//! The writes around a manifest's own apply: the App Secrets first, CRDs waited for
//! until `Established`, objects a new revision of the manifest dropped pruned, and the
//! component's teardown (planned as one delete per recorded object, last first).

use super::*;

impl KubernetesExecutor {
    /// Server-side applies each Secret; returns their references (for teardown and the
    /// `objects` output). Not part of the drift baseline: its data is not compared, so
    /// it is never reported.
    pub(super) async fn apply_secrets(
        &self,
        secrets: &[SecretObject],
        log: &mut String,
    ) -> anyhow::Result<Vec<Value>> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut references = Vec::new();
        for secret in secrets {
            let target = self.secret_target(secret).await?;
            // The error names the Secret; the API server's message does not carry data.
            let result = target
                .api(&self.client)
                .patch(&target.name, &params, &Patch::Apply(&target.object))
                .await
                .with_context(|| format!("server-side apply of {} failed", secret.describe()))?;
            log.push_str(&format!("{} serverside-applied\n", secret.describe()));
            references.push(target.reference(result.metadata.uid.as_deref()));
        }
        Ok(references)
    }

    /// The live objects the last apply recorded (its inventory) that the desired state
    /// no longer has: an upgrade prunes them. An object recreated since (another uid)
    /// is not the one applied, and is left alone.
    pub(super) async fn prunable(
        &self,
        ctx: &StepContext,
        secrets: &[SecretObject],
    ) -> anyhow::Result<Vec<Value>> {
        let wanted: Vec<Value> = self
            .targets_with(&ctx.desired, secrets)
            .await?
            .iter()
            .map(|t| t.reference(None))
            .chain(
                secrets
                    .iter()
                    .map(|s| json!({"kind": "Secret", "namespace": s.namespace, "name": s.name})),
            )
            .collect();
        let mut live_objects = Vec::new();
        for recorded in dropped(&read_references(&ctx.work_dir)?, &wanted) {
            let target = self.referenced(std::slice::from_ref(&recorded)).await?;
            let Some(target) = target.first() else {
                continue;
            };
            if let Some(live) = self.live(target).await?
                && (recorded["uid"].is_null()
                    || live.pointer("/metadata/uid") == Some(&recorded["uid"]))
            {
                live_objects.push(without_secret_data(without_managed_fields(live)));
            }
        }
        Ok(live_objects)
    }

    /// Deletes what the last apply recorded and `applied` (this apply's references) no
    /// longer has, each only if it is still the object applied then (uid precondition);
    /// the references of what was deleted.
    pub(super) async fn prune(
        &self,
        ctx: &StepContext,
        applied: &[Value],
        log: &mut String,
    ) -> anyhow::Result<Vec<Value>> {
        let mut pruned = Vec::new();
        for recorded in dropped(&read_references(&ctx.work_dir)?, applied) {
            let targets = self.referenced(std::slice::from_ref(&recorded)).await?;
            let Some(target) = targets.first() else {
                continue;
            };
            let mut params = DeleteParams::background();
            if let Some(uid) = recorded["uid"].as_str() {
                params = params.preconditions(kube_client::api::Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: None,
                });
            }
            match target.api(&self.client).delete(&target.name, &params).await {
                Ok(_) => {
                    log.push_str(&format!("{} pruned\n", describe(target)));
                    pruned.push(recorded);
                }
                // Gone already, or another object of that name since (not ours).
                Err(kube_client::Error::Api(status)) if [404, 409].contains(&status.code) => {}
                Err(err) => {
                    return Err(err).with_context(|| format!("cannot prune {}", describe(target)));
                }
            }
        }
        Ok(pruned)
    }

    /// Waits until the CRDs `names` are `Established` ([`crds::await_established`]).
    pub(super) async fn await_established(
        &self,
        names: &[String],
        log: &mut String,
    ) -> anyhow::Result<()> {
        let definitions = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        );
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &definitions);
        crds::await_established(names, crds::ESTABLISHED_TIMEOUT, |name| {
            let api = api.clone();
            async move {
                let live = api
                    .get_opt(&name)
                    .await
                    .with_context(|| format!("cannot read CustomResourceDefinition {name}"))?;
                Ok(live.map(serde_json::to_value).transpose()?)
            }
        })
        .await?;
        log.push_str(&format!("{} established\n", names.join(", ")));
        Ok(())
    }

    pub(super) async fn plan_teardown(&self, ctx: &StepContext) -> anyhow::Result<Diff> {
        let mut document = Vec::new();
        for target in self.teardown_targets(ctx).await?.iter().rev() {
            if let Some(live) = self.live(target).await? {
                document.push(without_secret_data(without_managed_fields(live)));
            }
        }
        let resources = document
            .iter()
            .map(|object| ResourceChange {
                address: object_address(object),
                action: ChangeAction::Delete,
                fields: Vec::new(),
                note: None,
            })
            .collect();
        Ok(Diff {
            input: PolicyInput::Kubernetes,
            summary: format!("{} objects: {} to delete", document.len(), document.len()),
            changes: !document.is_empty(),
            document: Value::Array(document),
            resources: Some(resources),
            basis: Value::Null,
        })
    }

    pub(super) async fn apply_teardown(&self, ctx: &StepContext) -> anyhow::Result<Applied> {
        let mut deleted = Vec::new();
        for target in self.teardown_targets(ctx).await?.iter().rev() {
            let gone = target
                .api(&self.client)
                .delete(&target.name, &DeleteParams::background())
                .await;
            match gone {
                Ok(_) => deleted.push(target.reference(None)),
                Err(kube_client::Error::Api(status)) if status.code == 404 => {}
                Err(err) => {
                    return Err(err).with_context(|| format!("cannot delete {}", describe(target)));
                }
            }
        }
        let log = format!("{} objects deleted", deleted.len());
        write_references(&ctx.work_dir, &[])?;
        Ok(Applied {
            outputs: [("deleted".to_owned(), Value::Array(deleted))].into(),
            log,
            last_applied: Value::Array(Vec::new()),
            audit: Default::default(),
        })
    }
}
