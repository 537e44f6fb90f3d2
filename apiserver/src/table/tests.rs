use serde_json::json;

use super::*;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const YEAR: u64 = 365 * DAY;

fn now() -> jiff::Timestamp {
    "2024-06-01T12:00:00Z".parse().unwrap()
}

fn widget(name: &str, phase: Option<&str>, created: &str) -> Value {
    let mut object = json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created, "resourceVersion": "12"},
        "spec": {"app": "web", "replicas": 2, "paused": false, "ratio": 0.5},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    });
    if let Some(phase) = phase {
        object["status"]["phase"] = json!(phase);
    }
    object
}

fn column(name: &str, type_: &str, json_path: &str, priority: i32) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: None,
        description: String::new(),
        json_path: json_path.into(),
        priority,
    }
}

fn with_columns() -> ResourceType {
    let mut rt = ResourceType::schemaless("example.com", "v1", "Widget", "widgets", true);
    rt.printer_columns = vec![
        column("Phase", "string", ".status.phase", 0),
        column(
            "Ready",
            "string",
            r#".status.conditions[?(@.type=="Ready")].status"#,
            0,
        ),
        column("Replicas", "integer", ".spec.replicas", 1),
        column("Paused", "boolean", ".spec.paused", 1),
        column("Ratio", "number", ".spec.ratio", 1),
        column("Age", "date", ".metadata.creationTimestamp", 0),
    ];
    rt
}

/// apimachinery's `TestHumanDuration` and `TestHumanDurationBoundaries` (the
/// non-negative cases; negatives are covered by the date-cell tests).
#[test]
fn human_duration_matches_apimachinery() {
    let ms = Duration::from_millis;
    let s = Duration::from_secs;
    let cases = [
        (s(1), "1s"),
        (s(70), "70s"),
        (s(190), "3m10s"),
        (s(70 * MINUTE), "70m"),
        (s(47 * HOUR), "47h"),
        (s(49 * HOUR), "2d1h"),
        (s((8 * 24 + 2) * HOUR), "8d"),
        (s(367 * DAY), "367d"),
        (s(365 * 2 * DAY + 25 * HOUR), "2y1d"),
        (s(365 * 8 * DAY + 2 * HOUR), "8y"),
        (s(0), "0s"),
        (ms(999), "0s"),
        (s(2 * MINUTE) - ms(1), "119s"),
        (s(2 * MINUTE), "2m"),
        (s(2 * MINUTE + 1), "2m1s"),
        (s(10 * MINUTE) - ms(1), "9m59s"),
        (s(10 * MINUTE), "10m"),
        (s(10 * MINUTE + 1), "10m"),
        (s(3 * HOUR) - ms(1), "179m"),
        (s(3 * HOUR), "3h"),
        (s(3 * HOUR + MINUTE), "3h1m"),
        (s(8 * HOUR) - ms(1), "7h59m"),
        (s(8 * HOUR), "8h"),
        (s(8 * HOUR + 59 * MINUTE), "8h"),
        (s(2 * DAY) - ms(1), "47h"),
        (s(2 * DAY), "2d"),
        (s(2 * DAY + HOUR), "2d1h"),
        (s(8 * DAY) - ms(1), "7d23h"),
        (s(8 * DAY), "8d"),
        (s(8 * DAY + 23 * HOUR), "8d"),
        (s(2 * YEAR) - ms(1), "729d"),
        (s(2 * YEAR), "2y"),
        (s(2 * YEAR + 23 * HOUR), "2y"),
        (s(2 * YEAR + 23 * HOUR + 59 * MINUTE), "2y"),
        (s(2 * YEAR + DAY) - ms(1), "2y"),
        (s(2 * YEAR + DAY), "2y1d"),
        (s(3 * YEAR), "3y"),
        (s(4 * YEAR), "4y"),
        (s(5 * YEAR), "5y"),
        (s(6 * YEAR), "6y"),
        (s(7 * YEAR), "7y"),
        (s(8 * YEAR) - ms(1), "7y364d"),
        (s(8 * YEAR), "8y"),
        (s(8 * YEAR + 364 * DAY), "8y"),
        (s(9 * YEAR), "9y"),
        (s(3 * YEAR + 120 * DAY), "3y120d"),
    ];
    for (d, want) in cases {
        assert_eq!(human_duration(d), want, "{d:?}");
    }
}

#[test]
fn wants_table_recognises_what_kubectl_sends() {
    assert!(wants_table(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    ));
    assert!(wants_table(
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    ));
    assert!(wants_table(
        "application/json; as=Table; g=meta.k8s.io; v=v1"
    ));
    assert!(!wants_table("application/json"));
    assert!(!wants_table(
        "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
    ));
    assert!(!wants_table("application/json;as=Table;v=v2;g=meta.k8s.io"));
    assert!(!wants_table("application/yaml;as=Table;v=v1;g=meta.k8s.io"));
    assert!(!wants_table(""));
}

#[test]
fn without_printer_columns_columns_are_name_and_age() {
    let rt = ResourceType::schemaless("example.com", "v1", "Thing", "things", true);
    let t = table(
        &rt,
        &[widget("a", None, "2024-06-01T11:56:48Z")],
        json!({"resourceVersion": "42"}),
        IncludeObject::Metadata,
        now(),
    );
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(t["metadata"], json!({"resourceVersion": "42"}));
    let names: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Age"]);
    assert_eq!(t["columnDefinitions"][0]["format"], "name");
    assert_eq!(t["columnDefinitions"][1]["type"], "date");
    assert_eq!(t["rows"][0]["cells"], json!(["a", "3m12s"]));
    assert_eq!(
        t["rows"][0]["object"],
        json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": widget("a", None, "2024-06-01T11:56:48Z")["metadata"],
        })
    );
}

#[test]
fn printer_columns_give_typed_cells() {
    let t = table(
        &with_columns(),
        &[
            widget("a", Some("Ready"), "2024-05-30T09:00:00Z"),
            widget("b", None, "2024-06-01T11:59:15Z"),
        ],
        json!({}),
        IncludeObject::None,
        now(),
    );
    let columns = t["columnDefinitions"].as_array().unwrap();
    assert_eq!(
        columns.len(),
        7,
        "no Age is added when columns are declared"
    );
    assert_eq!(columns[3]["priority"], 1);
    assert_eq!(
        columns[1]["description"],
        "Custom resource definition column (in JSONPath format): .status.phase"
    );
    assert_eq!(
        t["rows"][0]["cells"],
        json!(["a", "Ready", "True", 2, false, 0.5, "2d3h"])
    );
    assert_eq!(
        t["rows"][1]["cells"],
        json!(["b", null, "True", 2, false, 0.5, "45s"])
    );
    assert_eq!(t["rows"][0]["object"], Value::Null);
}

#[test]
fn cells_of_the_wrong_type_are_null_and_strings_print_anything() {
    let now = now();
    assert_eq!(cell("integer", &json!("3"), now), Value::Null);
    assert_eq!(cell("integer", &json!(3.7), now), json!(3));
    assert_eq!(cell("number", &json!(3), now), json!(3));
    assert_eq!(cell("boolean", &json!("true"), now), Value::Null);
    assert_eq!(cell("string", &json!(5), now), json!("5"));
    assert_eq!(cell("string", &json!({"a": 1}), now), json!("{\"a\":1}"));
    assert_eq!(cell("date", &json!(5), now), Value::Null);
    assert_eq!(cell("date", &json!("yesterday"), now), json!("<invalid>"));
    assert_eq!(
        cell("date", &json!("0001-01-01T00:00:00Z"), now),
        json!("<unknown>")
    );
    assert_eq!(
        cell("date", &json!("2024-06-01T12:00:01Z"), now),
        json!("0s")
    );
    assert_eq!(
        cell("date", &json!("2024-06-01T12:00:05Z"), now),
        json!("<invalid>")
    );
    assert_eq!(
        cell("date", &json!("2021-02-01T12:00:00Z"), now),
        json!("3y121d")
    );
}

#[test]
fn include_object_selects_the_row_object() {
    assert_eq!(
        IncludeObject::from_query(None).unwrap(),
        IncludeObject::Metadata
    );
    assert_eq!(
        IncludeObject::from_query(Some("Object")).unwrap(),
        IncludeObject::Object
    );
    assert_eq!(
        IncludeObject::from_query(Some("None")).unwrap(),
        IncludeObject::None
    );
    assert_eq!(
        IncludeObject::from_query(Some("All"))
            .unwrap_err()
            .code()
            .as_u16(),
        400
    );
    let object = widget("a", None, "2024-06-01T11:00:00Z");
    let t = table(
        &with_columns(),
        std::slice::from_ref(&object),
        json!({}),
        IncludeObject::Object,
        now(),
    );
    assert_eq!(t["rows"][0]["object"], object);
}

#[test]
fn watch_tables_carry_one_row_and_headers_only_when_asked() {
    let object = widget("a", Some("Ready"), "2024-06-01T11:00:00Z");
    let first = table_row_for_watch(
        &with_columns(),
        &object,
        IncludeObject::Metadata,
        true,
        now(),
    );
    assert_eq!(first["metadata"], json!({"resourceVersion": "12"}));
    assert_eq!(first["rows"].as_array().unwrap().len(), 1);
    assert_eq!(first["rows"][0]["cells"][0], "a");
    assert_eq!(first["columnDefinitions"].as_array().unwrap().len(), 7);
    let later = table_row_for_watch(
        &with_columns(),
        &object,
        IncludeObject::Metadata,
        false,
        now(),
    );
    assert_eq!(later["columnDefinitions"], json!([]));
    assert_eq!(later["rows"], first["rows"]);
}
