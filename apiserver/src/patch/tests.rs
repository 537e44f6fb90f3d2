use serde_json::json;

use super::*;

fn install() -> Value {
    json!({
        "apiVersion": "outpost.dev/v1alpha1",
        "kind": "Install",
        "metadata": {"name": "web", "namespace": "default", "labels": {"a": "1", "b": "2"}},
        "spec": {"replicas": 1, "steps": ["x"]},
    })
}

#[test]
fn content_types_map_to_patch_types() {
    let cases = [
        ("application/merge-patch+json", PatchType::Merge),
        ("application/json-patch+json", PatchType::Json),
        ("application/apply-patch+yaml", PatchType::Apply),
        ("application/apply-patch+json", PatchType::Apply),
        (
            "application/strategic-merge-patch+json",
            PatchType::StrategicMerge,
        ),
        (
            "Application/Merge-Patch+JSON; charset=utf-8",
            PatchType::Merge,
        ),
    ];
    for (content_type, want) in cases {
        assert_eq!(
            PatchType::from_content_type(content_type).unwrap(),
            want,
            "{content_type}"
        );
    }
}

#[test]
fn unknown_content_types_and_strategic_merge_are_415_with_kube_wording() {
    let want = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml";
    let err = PatchType::from_content_type("application/json").unwrap_err();
    assert_eq!(err.code().as_u16(), 415);
    assert_eq!(err.to_string(), want);
    let err = apply_patch(
        PatchType::StrategicMerge,
        &install(),
        b"{}",
        &Limits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code().as_u16(), 415);
    assert_eq!(err.reason(), "UnsupportedMediaType");
    assert_eq!(err.to_string(), want);
}

#[test]
fn merge_patch_follows_rfc_7386() {
    let body = br#"{"metadata":{"labels":{"a":null,"c":"3"}},"spec":{"steps":["y","z"]}}"#;
    let patched = apply_patch(PatchType::Merge, &install(), body, &Limits::default()).unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    assert_eq!(patched["spec"], json!({"replicas": 1, "steps": ["y", "z"]}));
}

#[test]
fn malformed_merge_patches_are_400() {
    for body in [&b"{not json"[..], b"[1,2]", b"\"x\""] {
        let err = apply_patch(PatchType::Merge, &install(), body, &Limits::default()).unwrap_err();
        assert_eq!(
            err.code().as_u16(),
            400,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn json_patch_follows_rfc_6902() {
    let body = br#"[
        {"op":"test","path":"/spec/replicas","value":1},
        {"op":"replace","path":"/spec/replicas","value":3},
        {"op":"add","path":"/spec/steps/-","value":"y"},
        {"op":"remove","path":"/metadata/labels/a"},
        {"op":"copy","from":"/spec/replicas","path":"/spec/copy"},
        {"op":"move","from":"/spec/copy","path":"/spec/moved"}
    ]"#;
    let patched = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap();
    assert_eq!(
        patched["spec"],
        json!({"replicas": 3, "steps": ["x", "y"], "moved": 3})
    );
    assert_eq!(patched["metadata"]["labels"], json!({"b": "2"}));
}

/// kube-rs adds the first finalizer with `test /metadata/finalizers null` + `add`.
#[test]
fn json_patch_test_null_passes_for_missing_and_null_fields() {
    let body = br#"[
        {"op":"test","path":"/metadata/finalizers","value":null},
        {"op":"add","path":"/metadata/finalizers","value":["outpost.dev/cleanup"]}
    ]"#;
    let patched = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap();
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["outpost.dev/cleanup"])
    );

    let mut with_null = install();
    with_null["metadata"]["finalizers"] = Value::Null;
    let patched = apply_patch(PatchType::Json, &with_null, body, &Limits::default()).unwrap();
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["outpost.dev/cleanup"])
    );
}

#[test]
fn json_patch_test_null_fails_against_a_value_or_a_missing_parent() {
    let mut with_finalizer = install();
    with_finalizer["metadata"]["finalizers"] = json!(["x"]);
    let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null}]"#;
    let err = apply_patch(PatchType::Json, &with_finalizer, body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);

    let body = br#"[{"op":"test","path":"/status/phase","value":null}]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
}

#[test]
fn failed_json_patch_test_is_422_invalid_and_changes_nothing() {
    let body = br#"[
        {"op":"replace","path":"/spec/replicas","value":5},
        {"op":"test","path":"/metadata/finalizers/0","value":"other"}
    ]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
    assert_eq!(err.reason(), "Invalid");
    let status = err.status();
    assert_eq!(status["details"]["kind"], "Install");
    assert_eq!(status["details"]["name"], "web");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "/metadata/finalizers/0"
    );

    let body = br#"[{"op":"test","path":"/spec/replicas","value":2}]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
    assert_eq!(
        err.status()["details"]["causes"][0]["message"],
        "testing value /spec/replicas failed: test failed"
    );
}

#[test]
fn json_patch_on_missing_path_is_422() {
    let body = br#"[{"op":"replace","path":"/spec/nothing/here","value":1}]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
}

#[test]
fn malformed_json_patches_are_400() {
    for body in [
        &br#"{"op":"add"}"#[..],
        br#"[{"op":"frobnicate","path":"/a"}]"#,
        br#"[{"op":"add","value":1}]"#,
        b"not json",
    ] {
        let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
        assert_eq!(
            err.code().as_u16(),
            400,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn json_patch_may_not_replace_the_object_with_a_non_object() {
    let body = br#"[{"op":"replace","path":"","value":[1]}]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 400);
}

#[test]
fn apply_bodies_parse_as_yaml_or_json() {
    let yaml = b"apiVersion: outpost.dev/v1alpha1\nkind: Install\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  steps: [a, b]\n";
    let parsed = parse_apply_body(yaml).unwrap();
    assert_eq!(parsed["spec"], json!({"replicas": 2, "steps": ["a", "b"]}));
    let json_body = serde_json::to_vec(&install()).unwrap();
    assert_eq!(parse_apply_body(&json_body).unwrap(), install());
}

#[test]
fn invalid_apply_bodies_are_400() {
    for body in [
        &b"- a\n- b\n"[..],
        b"kind: Install\nmetadata: {name: x}\n",
        b"apiVersion: v1\nkind: [unclosed\n",
        b"apiVersion: v1\nkind: X\nmetadata:\n  managedFields: []\n",
    ] {
        let err = parse_apply_body(body).unwrap_err();
        assert_eq!(
            err.code().as_u16(),
            400,
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn patch_options_are_validated_like_kube() {
    let err = validate_patch_options(PatchType::Apply, None, None).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
    assert_eq!(
        err.to_string(),
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let err = validate_patch_options(PatchType::Merge, Some("m"), Some(true)).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("force: Forbidden: may not be specified for non-apply patch")
    );
    validate_patch_options(PatchType::Apply, Some("kubectl"), Some(true)).unwrap();
    validate_patch_options(PatchType::Json, None, None).unwrap();
}

#[test]
fn json_patch_copies_are_bounded_by_the_request_body_limit() {
    // Each copy doubles a map: 7 copies of 1 KiB take it past 64 KiB of copied bytes.
    let limits = Limits {
        max_request_body_bytes: 64 * 1024,
        ..Limits::default()
    };
    let mut existing = install();
    existing["spec"]["m"] = json!({"k0": "x".repeat(1024)});
    let ops: Vec<Value> = (0..16)
        .map(|i| json!({"op": "copy", "from": "/spec/m", "path": format!("/spec/m/k{}", i + 1)}))
        .collect();
    let body = serde_json::to_vec(&ops).unwrap();
    let err = apply_patch(PatchType::Json, &existing, &body, &limits).unwrap_err();
    assert_eq!(err.code(), 422);
    let message = err.status()["details"]["causes"][0]["message"].clone();
    assert!(
        message
            .as_str()
            .unwrap()
            .starts_with("Unable to complete the copy, the accumulated size increase of copy is "),
        "{message}"
    );
    // Four copies (15 KiB in all) fit.
    let few = serde_json::to_vec(&ops[..4]).unwrap();
    let patched = apply_patch(PatchType::Json, &existing, &few, &limits).unwrap();
    assert_eq!(patched["spec"]["m"].as_object().unwrap().len(), 5);
}

#[test]
fn json_patches_may_not_nest_values_deeper_than_the_limit() {
    let limits = Limits {
        max_object_depth: 5,
        ..Limits::default()
    };
    // `/spec/a` is at depth 2; a value 4 deep there makes 6.
    let body = br#"[{"op": "add", "path": "/spec/a", "value": {"b": {"c": {"d": {}}}}}]"#;
    let err = apply_patch(PatchType::Json, &install(), body, &limits).unwrap_err();
    assert_eq!(err.code(), 422);
    assert_eq!(err.status()["details"]["causes"][0]["field"], "spec.a");
    let fits = br#"[{"op": "add", "path": "/spec/a", "value": {"b": {"c": {}}}}]"#;
    assert!(apply_patch(PatchType::Json, &install(), fits, &limits).is_ok());
    // Copying a value into itself nests it deeper each time.
    let copies = br#"[{"op": "add", "path": "/spec/a", "value": {"b": {}}},
                      {"op": "copy", "from": "/spec/a", "path": "/spec/a/b/c"}]"#;
    let err = apply_patch(PatchType::Json, &install(), copies, &limits).unwrap_err();
    assert_eq!(err.status()["details"]["causes"][0]["field"], "spec.a.b.c");
}

#[test]
fn json_patches_over_ten_thousand_operations_are_too_large() {
    let ops = vec![json!({"op": "test", "path": "/kind", "value": "Install"}); 10_001];
    let body = serde_json::to_vec(&ops).unwrap();
    let err = apply_patch(PatchType::Json, &install(), &body, &Limits::default()).unwrap_err();
    assert_eq!(
        (err.code().as_u16(), err.reason()),
        (413, "RequestEntityTooLarge")
    );
    assert_eq!(
        err.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}
