//! HTTP chart repositories: checked against the index, deployed from the install registry.

use super::*;

/// [`REPOSITORY_SERVER`] serving `dir`: the process and its `host:port`.
fn serve(dir: &std::path::Path) -> (Process, String) {
    let port = outpost_testing::free_port();
    let child = std::process::Command::new(outpost_testing::on_path("python3"))
        .args(["-c", REPOSITORY_SERVER, &port.to_string()])
        .arg(dir)
        .args([VENDOR_USER, VENDOR_PASSWORD])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the chart repository starts");
    (Process::new(child), format!("127.0.0.1:{port}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_repository_chart_is_checked_against_its_index_and_deployed_from_the_install_registry()
 {
    let stand = start().await;
    let repo = stand.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let chart = stand.dir.path().join("http").join("shop");
    copy_shop_chart(&chart, &[]);
    let archive = stand.helm.package(&chart, &repo);
    let digest = outpost_runner::example_image::sha256(&std::fs::read(&archive).unwrap());
    let index = format!(
        "apiVersion: v1\nentries:\n  shop:\n    - apiVersion: v2\n      name: shop\n      version: {VERSION}\n      appVersion: \"1.0\"\n      type: application\n      digest: {}\n      urls:\n        - shop-{VERSION}.tgz\ngenerated: \"2026-01-01T00:00:00Z\"\n",
        digest.trim_start_matches("sha256:")
    );
    std::fs::write(repo.join("index.yaml"), index).unwrap();
    let (_server, host) = serve(&repo);
    eventually(30, "the chart repository to answer", async || {
        tokio::net::TcpStream::connect(&host).await.ok().map(|_| ())
    })
    .await;
    let component = |source_auth: bool| {
        let mut component = json!({"app": "shop", "type": "helm_chart", "helm": {
            "chart": "shop", "repository": format!("http://{host}"), "version": VERSION,
            "destination": format!("{}/acme/shop-http", stand.install.host),
            "destinationAuth": credentials()["destinationAuth"],
            "namespace": "shop", "values": {"greeting": "from-the-repository"}}});
        if source_auth {
            component["helm"]["sourceAuth"] = credentials()["sourceAuth"].clone();
        }
        component
    };

    // Without the repository's credentials: fails closed, nothing applied.
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-0",
        "shop",
        component(false),
        json!([]),
    )
    .await;
    let message = stand.fails("http-0").await;
    assert!(
        message.contains(&format!(
            "cannot read http://{host}/index.yaml from the chart repository http://{host} \
             anonymously (helm.sourceAuth is not set): unauthorized: HTTP 401"
        )),
        "{message}"
    );
    assert_eq!(stand.config_maps(), Vec::<String>::new());

    ready_plan(
        &stand.plans,
        INSTALL,
        "http-1",
        "shop",
        component(true),
        json!([]),
    )
    .await;
    let waiting = stand.reaches("http-1", PlanPhase::AwaitingApproval).await;
    let planned_from = source(&waiting).expect("the diff names the chart");
    let prefix = format!("{}/acme/shop-http@sha256:", stand.install.host);
    assert!(planned_from.starts_with(&prefix), "{planned_from}");
    let manifest = planned_from.trim_start_matches(&format!("{}/", stand.install.host));
    let (repository, manifest_digest) = manifest.split_once('@').unwrap();
    assert!(
        stand
            .install
            .has_manifest(repository, manifest_digest)
            .await
    );
    assert_eq!(
        stand.config_maps(),
        Vec::<String>::new(),
        "nothing applied yet"
    );
    approve(&stand.plans, &waiting).await.unwrap();
    let applied = stand.reaches("http-1", PlanPhase::Succeeded).await;
    let outputs = json!(applied.status.clone().unwrap_or_default().outputs);
    assert_eq!(outputs["chart"], json!(planned_from), "{outputs}");
    assert_eq!(
        outputs["chartSource"],
        json!(format!("http://{host}/shop-{VERSION}.tgz@{digest}"))
    );
    let greeting = stand.greeting();
    assert_eq!(greeting, "from-the-repository");

    // The archive no longer matches the index's digest: refused, nothing copied or applied.
    copy_shop_chart(
        &chart,
        &[(
            "v2.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop-v2\ndata: {}\n",
        )],
    );
    stand.helm.package(&chart, &repo);
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-2",
        "shop",
        component(true),
        json!([]),
    )
    .await;
    let message = stand.fails("http-2").await;
    assert!(
        message.contains(&format!(
            "digest mismatch: http://{host}/shop-{VERSION}.tgz has sha256:"
        )) && message.contains(&format!("the index says {digest}")),
        "{message}"
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);

    // An archive (its digest right) with an entry outside the chart: nothing is
    // unpacked onto the runner's disk, and Helm's loader refuses it.
    let evil = repo.join("evil-0.1.0.tgz");
    let made = std::process::Command::new(outpost_testing::on_path("python3"))
        .args(["-c", EVIL_ARCHIVE])
        .arg(&evil)
        .status()
        .unwrap();
    assert!(made.success());
    let evil_digest = outpost_runner::example_image::sha256(&std::fs::read(&evil).unwrap());
    let index = std::fs::read_to_string(repo.join("index.yaml")).unwrap();
    let index = index.replacen(
        "entries:\n",
        &format!(
            "entries:\n  evil:\n    - apiVersion: v2\n      name: evil\n      version: 0.1.0\n      digest: {}\n      urls:\n        - evil-0.1.0.tgz\n",
            evil_digest.trim_start_matches("sha256:")
        ),
        1,
    );
    std::fs::write(repo.join("index.yaml"), index).unwrap();
    let mut component = component(true);
    component["helm"]["chart"] = json!("evil");
    component["helm"]["version"] = json!("0.1.0");
    ready_plan(
        &stand.plans,
        INSTALL,
        "http-3",
        "shop",
        component,
        json!([]),
    )
    .await;
    let message = stand.fails("http-3").await;
    assert!(
        message.contains("helm template of ")
            && message.contains("failed to load chart: unable to load chart archive"),
        "{message}"
    );
    assert!(
        !stand.dir.path().join("escaped.yaml").exists()
            && !stand.dir.path().join("state/escaped.yaml").exists()
    );
    assert_eq!(stand.config_maps(), ["shop-extra", "shop-web"]);
}
