//! Terraform: the approved plan is applied; moved state asks again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_plans_first_applies_the_approved_plan_and_asks_again_when_state_moved() {
    let runner = start(false).await;
    runner.approval_mode("prompt").await;
    let source = module(runner.dir.path());
    let work = runner.module_dir("thing");

    // Planned, shown, waiting: nothing applied yet.
    let waiting = runner
        .ready_until(
            "thing-1",
            "thing",
            terraform_component(&source, None),
            json!([]),
            PlanPhase::AwaitingApproval,
        )
        .await;
    let shown = diff(&waiting);
    assert_eq!(shown.summary, "1 to add, 0 to change, 0 to destroy");
    assert_eq!(shown.resources.len(), 1, "{shown:?}");
    assert_eq!(shown.resources[0].address, "terraform_data.thing");
    assert_eq!(shown.resources[0].action, ChangeAction::Create);
    let input = shown.resources[0].fields.iter().find(|f| f.path == "input");
    assert_eq!(input.and_then(|f| f.after.as_deref()), Some("\"one\""));
    assert!(outpost_api::is_content_hash(&shown.hash), "{}", shown.hash);
    assert_eq!(
        thing_input(&work),
        None,
        "nothing is applied before approval"
    );

    // Approved: the saved plan is applied, the diff stays the approved one.
    approve(&runner.plans, &waiting).await.unwrap();
    let done = runner
        .reaches("thing-1", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(diff(&done).hash, shown.hash);
    assert_eq!(reason(&done), None);
    assert_eq!(thing_input(&work).as_deref(), Some("one"));

    // (c) The same deploy again changes nothing: Succeeded, NoChanges, not asked, not
    // applied (the state is not written).
    let serial = state_serial(&work);
    let noop = runner
        .ready_until(
            "thing-2",
            "thing",
            terraform_component(&source, None),
            json!([]),
            PlanPhase::Succeeded,
        )
        .await;
    assert_eq!(reason(&noop).as_deref(), Some("NoChanges"));
    assert_eq!(diff(&noop).summary, "0 to add, 0 to change, 0 to destroy");
    assert!(noop.status.as_ref().unwrap().approval.is_none());
    assert_eq!(state_serial(&work), serial, "a no-op diff applies nothing");

    // A change, approved only after the state moved out of band: terraform refuses the
    // stale saved plan, and the runner plans again and asks again.
    let waiting = runner
        .ready_until(
            "thing-3",
            "thing",
            terraform_component(&source, Some("two")),
            json!([]),
            PlanPhase::AwaitingApproval,
        )
        .await;
    let first = diff(&waiting);
    assert_eq!(first.resources[0].address, "terraform_data.thing");
    let input = first.resources[0].fields.iter().find(|f| f.path == "input");
    assert_eq!(
        input.map(|f| (f.before.as_deref(), f.after.as_deref())),
        Some((Some("\"one\""), Some("\"two\""))),
        "{first:?}"
    );
    let moved = Command::new(on_path("terraform"))
        .current_dir(&work)
        .args([
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var",
            "note=three",
        ])
        .env("TF_IN_AUTOMATION", "1")
        .output()
        .unwrap();
    assert!(moved.status.success(), "{moved:?}");
    assert_eq!(thing_input(&work).as_deref(), Some("three"));
    approve(&runner.plans, &waiting).await.unwrap();
    let asked = runner
        .reaches("thing-3", PlanPhase::AwaitingApproval, |p| {
            reason(p).as_deref() == Some("Replanned")
        })
        .await;
    let second = diff(&asked);
    assert_ne!(second.hash, first.hash, "a new diff, bound to a new hash");
    let input = second.resources[0]
        .fields
        .iter()
        .find(|f| f.path == "input");
    assert_eq!(
        input.map(|f| (f.before.as_deref(), f.after.as_deref())),
        Some((Some("\"three\""), Some("\"two\""))),
        "{second:?}"
    );
    assert_eq!(
        thing_input(&work).as_deref(),
        Some("three"),
        "the stale plan was not applied"
    );
    approve(&runner.plans, &asked).await.unwrap();
    let done = runner
        .reaches("thing-3", PlanPhase::Succeeded, |_| true)
        .await;
    assert_eq!(diff(&done).hash, second.hash);
    assert_eq!(thing_input(&work).as_deref(), Some("two"));
}
