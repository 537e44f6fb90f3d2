//! Kubernetes diffs: changed fields, moved objects planned again.

use super::*;

fn deployment(replicas: u32) -> Value {
    let content = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: web\n  template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n        - name: web\n          image: registry.example/web:1\n"
    );
    json!({"app": "shop", "type": "kubernetes_manifest",
           "manifest": {"namespace": "shop", "content": content}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_diffs_show_changed_fields_and_moved_objects_are_planned_again() {
    let runner = start(true).await;
    let cluster = runner.cluster.as_ref().unwrap().kubectl();
    let replicas = || cluster.jsonpath(&["deployment", "web", "-n", "shop"], "{.spec.replicas}");

    // approve-all: planned and applied in one claim, the diff reported with the result.
    runner.ready("web-1", "web", deployment(2), json!([])).await;
    let created = runner
        .reaches("web-1", PlanPhase::Succeeded, |_| true)
        .await;
    let addresses: Vec<(String, ChangeAction)> = diff(&created)
        .resources
        .iter()
        .map(|r| (r.address.clone(), r.action))
        .collect();
    assert!(
        addresses.contains(&("Deployment/shop/web".into(), ChangeAction::Create)),
        "{addresses:?}"
    );
    assert_eq!(replicas(), "2");

    // prompt: the diff names the field, before and after.
    runner.approval_mode("prompt").await;
    runner.ready("web-2", "web", deployment(3), json!([])).await;
    let waiting = runner
        .reaches("web-2", PlanPhase::AwaitingApproval, |_| true)
        .await;
    let first = diff(&waiting);
    assert_eq!(
        first.summary, "0 to add, 1 to change, 0 to destroy",
        "{first:?}"
    );
    let web = &first.resources[0];
    assert_eq!(
        (web.address.as_str(), web.action),
        ("Deployment/shop/web", ChangeAction::Update)
    );
    let fields: Vec<(&str, Option<&str>, Option<&str>)> = web
        .fields
        .iter()
        .map(|f| (f.path.as_str(), f.before.as_deref(), f.after.as_deref()))
        .collect();
    assert_eq!(fields, [("spec.replicas", Some("2"), Some("3"))]);
    assert_eq!(replicas(), "2");

    // The dashboard's approval page shows that field-level change above the buttons,
    // and the install page lists the waiting Plan before a newer one.
    runner.pending("zz-later", "web", deployment(4)).await;
    let browser = Browser::start(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plan-apply")).await;
    let base = runner.cp.url.clone();
    browser.log_in(&base, &runner.cp.approver_token).await;
    assert_eq!(browser.text("#who").await, "approver · approver");
    browser
        .client
        .goto(&format!("{base}/ui/installs/default/{INSTALL}"))
        .await
        .unwrap();
    let rows = browser.text("#plans tbody").await;
    let (waits, later) = (rows.find("web-2"), rows.find("zz-later"));
    assert!(
        waits.is_some() && later.is_some() && waits < later,
        "the Plan awaiting approval is listed first: {rows}"
    );
    browser
        .client
        .goto(&format!("{base}/ui/plans/default/web-2"))
        .await
        .unwrap();
    let shown = browser.text("#diff-text").await;
    assert!(
        shown.contains("~ Deployment/shop/web") && shown.contains("spec.replicas: 2 → 3"),
        "{shown}"
    );
    assert!(
        shown.contains("Plan: 0 to add, 1 to change, 0 to destroy."),
        "{shown}"
    );
    assert_eq!(browser.text("#diff-hash").await, first.hash);
    let above = browser
        .client
        .execute(
            "return !!(document.querySelector('#diff-text').compareDocumentPosition(\
             document.querySelector('#approve')) & Node.DOCUMENT_POSITION_FOLLOWING);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        above,
        json!(true),
        "the diff is shown above the Approve button"
    );
    // The runner's audit of the diff says it asked a person, and for which diff.
    let page = browser.text("body").await;
    assert!(
        page.contains(&format!(
            "asked for a person's approval of the diff {}",
            first.hash
        )),
        "{page}"
    );
    browser.screenshot("kubernetes-approval").await;

    // Edited out of band before the approval: the runner asks again.
    cluster.ok(&["label", "deployment", "web", "-n", "shop", "edited=by-hand"]);
    approve(&runner.plans, &waiting).await.unwrap();
    let asked = runner
        .reaches("web-2", PlanPhase::AwaitingApproval, |p| {
            reason(p).as_deref() == Some("Replanned")
        })
        .await;
    assert_ne!(diff(&asked).hash, first.hash);
    assert_eq!(replicas(), "2", "nothing applied on a moved object");
    // The approver approves the new diff on the dashboard, by clicking.
    browser
        .client
        .goto(&format!("{base}/ui/plans/default/web-2"))
        .await
        .unwrap();
    assert_eq!(browser.text("#diff-hash").await, diff(&asked).hash);
    browser.find("#approve").await.click().await.unwrap();
    let approval = browser.text("#approval").await;
    assert!(approval.contains("by approver"), "{approval}");
    let done = runner
        .reaches("web-2", PlanPhase::Succeeded, |_| true)
        .await;
    let approved = done.status.unwrap().approval.unwrap();
    assert_eq!(
        (approved.by.as_str(), approved.diff_hash.as_deref()),
        ("approver", Some(diff(&asked).hash.as_str()))
    );
    assert_eq!(replicas(), "3");
    browser.client.clone().close().await.unwrap();
}
