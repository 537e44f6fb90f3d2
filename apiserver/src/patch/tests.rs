use serde_json::json;

use super::*;

fn widget() -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
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
        &widget(),
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
    let patched = apply_patch(PatchType::Merge, &widget(), body, &Limits::default()).unwrap();
    assert_eq!(patched["metadata"]["labels"], json!({"b": "2", "c": "3"}));
    assert_eq!(patched["spec"], json!({"replicas": 1, "steps": ["y", "z"]}));
}

#[test]
fn malformed_merge_patches_are_400() {
    for body in [&b"{not json"[..], b"[1,2]", b"\"x\""] {
        let err = apply_patch(PatchType::Merge, &widget(), body, &Limits::default()).unwrap_err();
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
    let patched = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap();
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
        {"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}
    ]"#;
    let patched = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap();
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["example.com/cleanup"])
    );

    let mut with_null = widget();
    with_null["metadata"]["finalizers"] = Value::Null;
    let patched = apply_patch(PatchType::Json, &with_null, body, &Limits::default()).unwrap();
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["example.com/cleanup"])
    );
}

#[test]
fn json_patch_test_null_fails_against_a_value_or_a_missing_parent() {
    let mut with_finalizer = widget();
    with_finalizer["metadata"]["finalizers"] = json!(["x"]);
    let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null}]"#;
    let err = apply_patch(PatchType::Json, &with_finalizer, body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);

    let body = br#"[{"op":"test","path":"/status/phase","value":null}]"#;
    let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
}

#[test]
fn failed_json_patch_test_is_422_invalid_and_changes_nothing() {
    let body = br#"[
        {"op":"replace","path":"/spec/replicas","value":5},
        {"op":"test","path":"/metadata/finalizers/0","value":"other"}
    ]"#;
    let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 422);
    assert_eq!(err.reason(), "Invalid");
    let status = err.status();
    assert_eq!(status["details"]["kind"], "Widget");
    assert_eq!(status["details"]["name"], "web");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "/metadata/finalizers/0"
    );

    let body = br#"[{"op":"test","path":"/spec/replicas","value":2}]"#;
    let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
    assert_eq!(
        err.status()["details"]["causes"][0]["message"],
        "testing value /spec/replicas failed: test failed"
    );
}

#[test]
fn json_patch_on_missing_path_is_422() {
    let body = br#"[{"op":"replace","path":"/spec/nothing/here","value":1}]"#;
    let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
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
        let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
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
    let err = apply_patch(PatchType::Json, &widget(), body, &Limits::default()).unwrap_err();
    assert_eq!(err.code().as_u16(), 400);
}

#[test]
fn apply_bodies_parse_as_yaml_or_json() {
    let yaml = b"apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  steps: [a, b]\n";
    let parsed = parse_apply_body(yaml).unwrap();
    assert_eq!(parsed["spec"], json!({"replicas": 2, "steps": ["a", "b"]}));
    let json_body = serde_json::to_vec(&widget()).unwrap();
    assert_eq!(parse_apply_body(&json_body).unwrap(), widget());
}

#[test]
fn invalid_apply_bodies_are_400() {
    for body in [
        &b"- a\n- b\n"[..],
        b"kind: Widget\nmetadata: {name: x}\n",
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

/// Asserts that the JSON patch `ops` is refused with 422 for the bytes its `what`
/// (`copy`, `move`) operations add, with kube's message.
fn assert_over_growth_limit(existing: &Value, ops: &[Value], limits: &Limits, what: &str) {
    let body = serde_json::to_vec(ops).unwrap();
    let err = apply_patch(PatchType::Json, existing, &body, limits).unwrap_err();
    assert_eq!(err.code(), 422);
    let message = err.status()["details"]["causes"][0]["message"].clone();
    let expected =
        format!("Unable to complete the {what}, the accumulated size increase of {what} is ");
    assert!(
        message.as_str().unwrap().starts_with(&expected),
        "{message}"
    );
}

#[test]
fn json_patch_copies_are_bounded_by_the_request_body_limit() {
    // Each copy doubles a map: 7 copies of 1 KiB take it past 64 KiB of copied bytes.
    let limits = Limits {
        max_request_body_bytes: 64 * 1024,
        ..Limits::default()
    };
    let mut existing = widget();
    existing["spec"]["m"] = json!({"k0": "x".repeat(1024)});
    let ops: Vec<Value> = (0..16)
        .map(|i| json!({"op": "copy", "from": "/spec/m", "path": format!("/spec/m/k{}", i + 1)}))
        .collect();
    assert_over_growth_limit(&existing, &ops, &limits, "copy");
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
    let err = apply_patch(PatchType::Json, &widget(), body, &limits).unwrap_err();
    assert_eq!(err.code(), 422);
    assert_eq!(err.status()["details"]["causes"][0]["field"], "spec.a");
    let fits = br#"[{"op": "add", "path": "/spec/a", "value": {"b": {"c": {}}}}]"#;
    assert!(apply_patch(PatchType::Json, &widget(), fits, &limits).is_ok());
    // Copying a value into itself nests it deeper each time.
    let copies = br#"[{"op": "add", "path": "/spec/a", "value": {"b": {}}},
                      {"op": "copy", "from": "/spec/a", "path": "/spec/a/b/c"}]"#;
    let err = apply_patch(PatchType::Json, &widget(), copies, &limits).unwrap_err();
    assert_eq!(err.status()["details"]["causes"][0]["field"], "spec.a.b.c");
}

#[test]
fn json_patches_over_ten_thousand_operations_are_too_large() {
    let ops = vec![json!({"op": "test", "path": "/kind", "value": "Widget"}); 10_001];
    let body = serde_json::to_vec(&ops).unwrap();
    let err = apply_patch(PatchType::Json, &widget(), &body, &Limits::default()).unwrap_err();
    assert_eq!(
        (err.code().as_u16(), err.reason()),
        (413, "RequestEntityTooLarge")
    );
    assert_eq!(
        err.to_string(),
        "The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}

/// An object whose field set (every leaf's whole path, keys included) would take
/// `leaves × depth × key` bytes: 60 levels of 2,000-byte keys over 5,000 leaves is
/// about 600 MB to track from a body of 170 KB (and it grows as the product).
fn fields_bomb() -> Value {
    let leaves: serde_json::Map<String, Value> =
        (0..5_000).map(|i| (format!("k{i}"), json!(0))).collect();
    let mut value = Value::Object(leaves);
    for level in 0..60 {
        value = json!({ format!("{level}{}", "x".repeat(2_000)): value });
    }
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": value,
    })
}

fn assert_untrackable(err: ApiError) {
    let ApiError::Invalid { subject, causes } = err else {
        panic!("expected 422 Invalid, got {err:?}");
    };
    assert_eq!(
        (subject.kind.as_str(), subject.name.as_str()),
        ("Widget", "web")
    );
    assert_eq!(causes[0].field, "metadata.managedFields");
    assert!(
        causes[0]
            .message
            .contains("tracking the object's fields would take more than"),
        "{}",
        causes[0].message
    );
}

/// Found while writing the fuzz targets (their 64 KiB inputs make megabytes, not
/// gigabytes, so the fuzzer cannot show it): a small body whose field set (built
/// for managedFields and server-side apply) takes gigabytes exhausted the server's
/// memory. Apply bodies, patch results and create/update bodies are now refused first.
#[test]
fn objects_whose_field_sets_would_take_gigabytes_are_refused_before_tracking() {
    let bomb = fields_bomb();
    assert!(field_set_cost(&bomb, usize::MAX) > 1 << 29);
    let body = serde_json::to_vec(&bomb).unwrap();
    assert!(body.len() < 200_000, "{}", body.len());
    assert_untrackable(parse_apply_body(&body).unwrap_err());
    let merge = serde_json::to_vec(&json!({"spec": bomb["spec"]})).unwrap();
    assert_untrackable(
        apply_patch(PatchType::Merge, &widget(), &merge, &Limits::default()).unwrap_err(),
    );
    assert_untrackable(apply_strategic_merge(&widget(), &merge).unwrap_err());

    // `managedFields` sent with an object are decoded into field sets too.
    let leaves: serde_json::Map<String, Value> =
        (0..5_000).map(|i| (format!("f:k{i}"), json!({}))).collect();
    let mut tree = Value::Object(leaves);
    for level in 0..60 {
        tree = json!({ format!("f:{level}{}", "x".repeat(2_000)): tree });
    }
    let mut managed = widget();
    managed["metadata"]["managedFields"] = json!([{
        "manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": tree,
    }]);
    assert_untrackable(check_trackable(&managed).unwrap_err());
}

/// Realistic objects stay far below the field-set budget: the cost is a small multiple
/// of their size.
#[test]
fn field_set_cost_of_ordinary_objects_is_a_small_multiple_of_their_size() {
    let object = widget();
    let cost = field_set_cost(&object, usize::MAX);
    let exact: usize = FieldSet::of_object(&object)
        .0
        .iter()
        .map(|p| 48 + p.0.len() * std::mem::size_of::<PathElement>())
        .sum();
    assert!(
        cost >= exact,
        "estimate {cost} below the paths' own size {exact}"
    );
    assert!(cost < 20 * serde_json::to_vec(&object).unwrap().len());
    assert!(check_trackable(&object).is_ok());
}

/// Found while writing the fuzz targets: every `move` was walked to check its depth, so
/// ten thousand moves of a large value down a level and back up walked it five thousand
/// times (minutes of CPU for one request). Moves deeper now count their bytes against
/// the request body limit like copies; moves to the same depth or up are not walked.
#[test]
fn json_patch_moves_deeper_are_bounded_like_copies_and_reorders_are_free() {
    let limits = Limits {
        max_request_body_bytes: 64 * 1024,
        ..Limits::default()
    };
    let mut existing = widget();
    existing["spec"]["big"] = json!({"k": "x".repeat(10 * 1024)});
    existing["spec"]["box"] = json!({});
    let down_and_up: Vec<Value> = (0..10)
        .flat_map(|_| {
            [
                json!({"op": "move", "from": "/spec/big", "path": "/spec/box/big"}),
                json!({"op": "move", "from": "/spec/box/big", "path": "/spec/big"}),
            ]
        })
        .collect();
    assert_over_growth_limit(&existing, &down_and_up, &limits, "move");
    // Five moves down (50 KiB) fit.
    let few = serde_json::to_vec(&down_and_up[..10]).unwrap();
    let patched = apply_patch(PatchType::Json, &existing, &few, &limits).unwrap();
    assert_eq!(patched["spec"]["big"], existing["spec"]["big"]);

    // Reordering a list moves at the same depth: unbounded by the copy limit.
    existing["spec"]["list"] = json!([{"k": "x".repeat(10 * 1024)}, {"k": "y"}]);
    let swaps: Vec<Value> = (0..20)
        .map(|_| json!({"op": "move", "from": "/spec/list/0", "path": "/spec/list/1"}))
        .collect();
    let body = serde_json::to_vec(&swaps).unwrap();
    let patched = apply_patch(PatchType::Json, &existing, &body, &limits).unwrap();
    assert_eq!(patched["spec"]["list"], existing["spec"]["list"]);
}
