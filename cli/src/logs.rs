//! `outpost logs PLAN [-f]`: what the runner reported while executing a Plan
//! (`status.log`), and the phase changes of a Plan until it finishes.

use std::io::Write as _;
use std::time::Duration;

use kube_client::api::Api;
use outpost_api::{Plan, PlanPhase};

use crate::approval::get_plan;
use crate::client::Common;

/// How often a followed Plan is read again.
const POLL: Duration = Duration::from_millis(300);

/// Arguments of `outpost logs`.
#[derive(clap::Args)]
pub struct LogsArgs {
    /// The Plan.
    plan: String,
    /// Keep printing the log as it grows until the Plan finishes.
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    common: Common,
}

/// Prints the Plan's log; with `-f`, follows it until the Plan finishes.
pub async fn run(args: LogsArgs) -> anyhow::Result<()> {
    let (client, namespace) = args.common.client().await?;
    if args.common.output != crate::output::Format::Table {
        let format = format!("{:?}", args.common.output).to_lowercase();
        anyhow::bail!(
            "logs prints plan {}'s log as text, so -o does not apply: for the Plan as {format} use `kubectl get plan {} -n {namespace} -o {format}`",
            args.plan,
            args.plan,
        );
    }
    let api = Api::<Plan>::namespaced(client, &namespace);
    let mut plan = get_plan(&api, &namespace, &args.plan).await?;
    let mut printed = String::new();
    let mut phase = None;
    loop {
        let status = plan.status.clone().unwrap_or_default();
        let log = status.log.unwrap_or_default();
        print!("{}", unseen(&printed, &log));
        std::io::stdout().flush()?;
        printed = log;
        if status.phase != phase {
            phase = status.phase;
            eprintln!("{}", describe(&args.plan, &plan));
        }
        if !args.follow || phase.is_some_and(PlanPhase::is_terminal) {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
        plan = get_plan(&api, &namespace, &args.plan).await?;
    }
}

/// The part of `log` not printed yet. The log keeps only its last 64 KiB, so when the
/// front was cut, what was printed last is found again inside it.
fn unseen<'a>(printed: &str, log: &'a str) -> &'a str {
    if let Some(rest) = log.strip_prefix(printed) {
        return rest;
    }
    // log = printed[cut..] + new, for the smallest cut that fits.
    (1..printed.len())
        .filter(|cut| printed.is_char_boundary(*cut))
        .find(|cut| log.starts_with(&printed[*cut..]))
        .map_or(log, |cut| &log[printed.len() - cut..])
}

/// `plan NAME: Phase (message)`, with what to do next where the phase calls for it.
pub fn describe(name: &str, plan: &Plan) -> String {
    let status = plan.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or(PlanPhase::Pending);
    let mut line = format!("plan {name}: {phase:?}");
    if let Some(role) = &status.role {
        line.push_str(&format!(" (role {}, {:?})", role.name, role.level));
    }
    if let Some(diff) = &status.diff {
        line.push_str(&format!(" [{}]", diff.summary));
    }
    if let Some(reason) = &status.reason {
        line.push_str(&format!(" ({reason})"));
    }
    if let Some(message) = &status.message {
        line.push_str(&format!(": {message}"));
    }
    match phase {
        PlanPhase::AwaitingApproval => line.push_str(&format!(
            " — approve the diff with `outpost approve {name}` or deny it with `outpost deny {name} --reason WHY`"
        )),
        PlanPhase::Failed => {
            line.push_str(&format!(" — see what it printed with `outpost logs {name}`"))
        }
        _ => {}
    }
    line
}

/// Prints the Plan's phase changes (on standard error) until it finishes; an error when
/// it was denied or failed.
pub async fn wait(api: &Api<Plan>, namespace: &str, name: &str) -> anyhow::Result<Plan> {
    let mut shown = None;
    loop {
        let plan = get_plan(api, namespace, name).await?;
        let now = plan.status.as_ref().and_then(|s| s.phase);
        if shown != Some(now) {
            eprintln!("{}", describe(name, &plan));
            shown = Some(now);
        }
        match now {
            Some(PlanPhase::Succeeded) => return Ok(plan),
            Some(PlanPhase::Failed | PlanPhase::Denied) => {
                anyhow::bail!("{}", describe(name, &plan))
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unseen;

    #[test]
    fn unseen_is_what_the_log_gained() {
        assert_eq!(unseen("", "a\n"), "a\n");
        assert_eq!(unseen("a\n", "a\nb\n"), "b\n");
        // The front was cut (64 KiB cap): continue after what was printed last.
        assert_eq!(unseen("xxa\nb\n", "a\nb\nc\n"), "c\n");
        // Nothing in common: print it all.
        assert_eq!(unseen("q", "a\n"), "a\n");
    }
}
