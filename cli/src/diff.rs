//! `outpost diff PLAN`: the real change a Plan makes (`status.diff`, computed by the
//! runner against live state), printed the way `terraform plan` prints one, with the
//! policies' verdicts on it.

use outpost_api::Plan;
use outpost_api::plan_lifecycle::PlanDiff;

use crate::approval::get_plan;
use crate::client::Common;
use crate::output;

/// Arguments of `outpost diff`.
#[derive(clap::Args)]
pub struct DiffArgs {
    /// The Plan.
    plan: String,
    #[command(flatten)]
    common: Common,
}

/// Prints the Plan's diff (`-o json|yaml`: the `status.diff` object).
pub async fn run(args: DiffArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    let api = kube_client::Api::<Plan>::namespaced(client, &namespace);
    let plan = get_plan(&api, &namespace, &args.plan).await?;
    let diff = plan.status.as_ref().and_then(|s| s.diff.as_ref());
    match args.common.output {
        output::Format::Table => {
            print!("{}", describe(&plan));
            Ok(())
        }
        format => output::print(format, &diff, Vec::new()),
    }
}

/// The Plan's diff as text, or why there is none yet.
pub fn describe(plan: &Plan) -> String {
    match plan.status.as_ref().and_then(|s| s.diff.as_ref()) {
        Some(diff) => render(diff),
        None => {
            let phase = plan
                .status
                .as_ref()
                .and_then(|s| s.phase)
                .map_or("Pending".to_owned(), |p| format!("{p:?}"));
            format!("no diff yet: the Plan is {phase} and its runner has not planned it\n")
        }
    }
}

/// `diff` as `terraform plan` prints one: a line per resource (`+`, `~`, `-/+`, `-`) with
/// its changed fields, the counts, then the policies' verdicts and the hash an approval
/// binds to.
pub fn render(diff: &PlanDiff) -> String {
    let mut out = String::new();
    for resource in &diff.resources {
        let note = resource
            .note
            .as_ref()
            .map(|note| format!(" ({note})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} {}{note}\n",
            resource.action.sign(),
            resource.address
        ));
        for field in &resource.fields {
            out.push_str(&format!(
                "      {}: {} → {}\n",
                field.path,
                field.before.as_deref().unwrap_or("(none)"),
                field.after.as_deref().unwrap_or("(none)")
            ));
        }
    }
    if diff.truncated {
        out.push_str("  … more changes than shown (the counts cover them all)\n");
    }
    if !diff.resources.is_empty() {
        out.push('\n');
    }
    if diff.has_changes() {
        out.push_str(&format!(
            "Plan: {} to add, {} to change, {} to destroy.\n",
            diff.add, diff.change, diff.destroy
        ));
    } else {
        out.push_str("No changes.\n");
    }
    for verdict in &diff.verdicts {
        let said = if verdict.denied {
            "denies"
        } else if verdict.approval_required {
            "asks for approval"
        } else if verdict.messages.is_empty() {
            "passes"
        } else {
            "warns"
        };
        let whose = if verdict.local { " (local)" } else { "" };
        out.push_str(&format!("policy {}{whose} {said}", verdict.policy));
        if verdict.messages.is_empty() {
            out.push('\n');
        } else {
            out.push_str(&format!(": {}\n", verdict.messages.join("; ")));
        }
    }
    out.push_str(&format!("diff {}\n", diff.hash));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use outpost_api::Verdict;
    use outpost_api::plan_lifecycle::{ChangeAction, FieldChange, ResourceChange};

    #[test]
    fn diffs_print_like_terraform_plan() {
        let mut diff = PlanDiff::new("sha256:abc".into(), 1, 1, 0);
        diff.resources = vec![
            ResourceChange {
                address: "terraform_data.network".into(),
                action: ChangeAction::Create,
                fields: vec![],
                note: None,
            },
            ResourceChange {
                address: "Deployment/shop/web".into(),
                action: ChangeAction::Update,
                fields: vec![FieldChange {
                    path: "spec.replicas".into(),
                    before: Some("2".into()),
                    after: Some("3".into()),
                }],
                note: None,
            },
        ];
        diff.verdicts = vec![Verdict {
            policy: "no-big-scale".into(),
            approval_required: true,
            messages: vec!["replicas grow".into()],
            ..Verdict::default()
        }];
        assert_eq!(
            render(&diff),
            "  + terraform_data.network\n  ~ Deployment/shop/web\n      spec.replicas: 2 → 3\n\n\
             Plan: 1 to add, 1 to change, 0 to destroy.\n\
             policy no-big-scale asks for approval: replicas grow\ndiff sha256:abc\n"
        );
        assert_eq!(
            render(&PlanDiff::new("sha256:0".into(), 0, 0, 0)),
            "No changes.\ndiff sha256:0\n"
        );
    }
}
