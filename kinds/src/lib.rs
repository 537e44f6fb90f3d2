//! Outpost's kinds plugged into the generic API server (`outpost-apiserver`): the
//! CustomResourceDefinitions of `outpost-api`, and the rules that make them a BYOC
//! control plane, registered at start-up through the server's interfaces
//! ([`register`]):
//!
//! * a [`Strategy`](outpost_apiserver::strategy::Strategy) per kind: its own validation
//!   ([`validation`]), a Plan's immutable spec;
//! * admission plugins: a Rollout's component must be one of its App's
//!   ([`references`]), an Install's inputs must hold against its App ([`inputs`]), the
//!   audit log is append-only ([`audit`]), a Plan's status follows its lifecycle
//!   ([`plan`], [`approval`]);
//! * runner tokens: minted on `installs/NAME/token` ([`mint`]), authenticated against
//!   the Install's stored hash ([`runner_token`]) and authorized to their own install
//!   only ([`runner_access`]);
//! * people's groups: admins, viewers, approvers who decide on Plans
//!   (`plans/NAME/approval`, [`groups`]);
//! * the watch caches index every object by the install it names
//!   ([`INSTALL_LABEL`], [`SCOPE_FIELD`]).
//!
//! Why the install index: a fleet of 10,000 installs has 10,000 runners, each listing
//! and watching its own install's Plans, and well over 100,000 Plans. Without it a
//! runner's list read every Plan of the namespace and every change woke every watcher:
//! both grew with fleet size squared. With it, a list or watch whose selector names one
//! install, and every request of a runner (its scope, [`runner_access`], pins its
//! install), reads only that install's objects, and a change reaches only the watchers
//! of the installs it names. A runner token is checked against the cached Install;
//! minting answers once the cache has the new hash, so the old token is refused from
//! then on. How the caches work: `apiserver/src/watch_cache/README.md`.
//!
//! `docs/ARCHITECTURE.md` ("The generic core and Outpost's kinds") has the design.

// Plugins answer with the core's `ApiError` as it is (the one type every HTTP error
// is); its size is the core's choice, and a refusal is not a hot path.
#![allow(clippy::result_large_err)]

pub mod approval;
pub mod audit;
pub mod groups;
pub mod inputs;
pub mod mint;
pub mod plan;
pub mod references;
pub mod runner_access;
pub mod runner_token;
pub mod validation;

#[cfg(test)]
mod schema_tests;

use std::sync::Arc;

use outpost_apiserver::auth::{GroupAuthorizer, TokenFile};
use outpost_apiserver::registry::{Compressed, IndexBy, PluginSubresource, Registry, ResourceType};
use outpost_apiserver::server::ServerConfig;

pub use groups::{ADMINS, APPROVERS, VIEWERS};
pub use runner_access::{INSTALL_LABEL, SCOPE_FIELD};
pub use runner_token::{RUNNERS, RunnerToken};

/// The registry of Outpost's kinds, each with its strategy and subresources, and
/// `coordination.k8s.io/v1` Leases for controllers' leader election.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    add_kinds(&mut registry);
    registry
}

fn add_kinds(registry: &mut Registry) {
    for crd in outpost_api::crds() {
        for mut rt in ResourceType::from_crd(&crd) {
            rt.strategy = Arc::new(validation::KindRules::of(&rt.kind));
            match rt.plural.as_str() {
                "plans" => {
                    rt.subresources.push(approval::subresource());
                    // Finished Plans are most of a fleet's objects (10 or more per
                    // install) and are read only by lists and watches that start; a
                    // Plan on its way is served on every dispatch without a copy.
                    rt.compressed = Some(Compressed::Settled {
                        field: "status.phase".into(),
                        values: outpost_api::PlanPhase::TERMINAL
                            .iter()
                            .map(|phase| match serde_json::to_value(phase) {
                                Ok(serde_json::Value::String(name)) => name,
                                other => unreachable!("a phase is a name: {other:?}"),
                            })
                            .collect(),
                    });
                }
                "installs" => {
                    rt.subresources.push(PluginSubresource {
                        name: mint::SUBRESOURCE.into(),
                        described: None,
                    });
                    // One per install, alike but for the install's own values (2.8 KiB
                    // held in ≈ 0.4); a runner's token is checked against its Install on
                    // each request, which decompresses it (≈ 0.4 µs).
                    rt.compressed = Some(Compressed::All);
                }
                // One per install, its rendered template alike in every install (20 KiB
                // held in ≈ 1.4), read rarely.
                "installstacks" => rt.compressed = Some(Compressed::All),
                _ => {}
            }
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
}

/// Registers Outpost's kinds and rules on `config`: its types (beside those already
/// there, e.g. the stand-in cluster's), the install index on every type, the runner
/// token authenticator, the group, approver and runner authorizers, the admission
/// plugins and the `token` and `approval` subresources.
pub fn register(config: &mut ServerConfig) {
    add_kinds(&mut config.registry);
    config.registry.update_all(|rt| {
        rt.index = Some(IndexBy {
            label: INSTALL_LABEL.into(),
            field: SCOPE_FIELD.into(),
        });
    });
    config
        .authenticators
        .push(Arc::new(runner_token::RunnerTokens));
    config.authorizers.push(Arc::new(GroupAuthorizer {
        admins: ADMINS.into(),
        viewers: VIEWERS.into(),
    }));
    config.authorizers.push(Arc::new(groups::Approvers));
    config
        .authorizers
        .push(Arc::new(runner_access::RunnerAuthorizer));
    config
        .admission
        .push(Arc::new(references::ComponentReferences));
    config.admission.push(Arc::new(inputs::InstallInputs));
    config.admission.push(Arc::new(audit::AppendOnlyAuditLog));
    config.admission.push(Arc::new(approval::PlanLifecycle));
    config.subresources.push(Arc::new(mint::MintRunnerToken));
    config.subresources.push(Arc::new(approval::Approvals));
}

/// A server of Outpost's kinds (and nothing else) for the users of `tokens`.
pub fn server_config(tokens: TokenFile) -> ServerConfig {
    let mut config = ServerConfig::new(Registry::new(), tokens);
    register(&mut config);
    config
}

/// A server of Outpost's kinds whose only user is an admin with bearer `token` (what
/// benchmarks serve).
pub fn admin_server_config(token: &str) -> ServerConfig {
    let mut tokens = TokenFile::default();
    tokens.insert(
        token,
        outpost_apiserver::auth::User {
            name: "bench".into(),
            uid: "bench".into(),
            groups: vec![ADMINS.into()],
        },
    );
    server_config(tokens)
}
