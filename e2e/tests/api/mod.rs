//! The Kubernetes wire conventions, checked request by request on both stores.

use std::time::Duration;

use futures::StreamExt as _;
use outpost_testing::{Backend, ControlPlane, on_both_backends};
use serde_json::{Value, json};

const INSTALLS: &str = "/apis/outpost.dev/v1alpha1/namespaces/default/installs";
const JSON: (&str, &str) = ("content-type", "application/json");

fn install(name: &str) -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": name, "labels": {"ring": "1"}},
        "spec": {"app": "shopfront", "approvalMode": "prompt",
                 "cloud": {"provider": "aws", "accountId": "123456789012", "region": "eu-west-1"}},
    })
}

async fn create(cp: &ControlPlane, object: &Value) -> Value {
    let reply = cp
        .raw(
            Some(&cp.admin_token),
            "POST",
            INSTALLS,
            &[JSON],
            object.to_string(),
        )
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text);
    reply.json
}

async fn count_installs(cp: &ControlPlane) -> usize {
    let reply = cp
        .raw(Some(&cp.admin_token), "GET", INSTALLS, &[], "")
        .await;
    reply.json["items"]
        .as_array()
        .map(Vec::len)
        .unwrap_or_default()
}

async fn next_event(lines: &mut (impl futures::Stream<Item = Value> + Unpin)) -> Value {
    tokio::time::timeout(Duration::from_secs(10), lines.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream is open")
}

mod reads;
mod requests;
mod writes;
