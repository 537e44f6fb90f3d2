use serde_json::{Value, json};

use super::*;
use crate::registry::Registry;

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}
                }}}
            }]
        }
    })
}

fn standin() -> Registry {
    Registry::new().with_standin_cluster()
}

/// The fields the causes name, sorted.
fn fields(causes: &[outpost_meta::FieldError]) -> Vec<&str> {
    let mut fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
    fields.sort();
    fields
}

#[test]
fn a_well_formed_crd_passes_and_its_types_are_served() {
    let crd = widget_crd();
    assert!(validate::definition(&crd).is_empty());
    let base = standin();
    assert!(validate(&base, &base, &crd, None).is_empty());
    let served = served_registry(&base, &[crd]);
    let widgets = served.get("example.com", "v1", "widgets").expect("served");
    assert!(widgets.namespaced);
    assert_eq!(widgets.kind, "Widget");
    assert_eq!(widgets.short_names, vec!["wd"]);
    assert!(widgets.schema.is_some(), "validated by its schema");
}

#[test]
fn malformed_crds_are_refused_naming_the_field() {
    let mut crd = widget_crd();
    crd["metadata"]["name"] = json!("gadgets.example.com");
    crd["spec"]["scope"] = json!("Galaxy");
    crd["spec"]["names"]["plural"] = json!("Widgets");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] =
        json!({"description": "no type"});
    let causes = validate::definition(&crd);
    let named = fields(&causes);
    for expected in [
        "metadata.name",
        "spec.scope",
        "spec.names.plural",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type",
    ] {
        assert!(named.contains(&expected), "{expected} in {named:?}");
    }

    let mut two_storage = widget_crd();
    let version = two_storage["spec"]["versions"][0].clone();
    let mut v2 = version.clone();
    v2["name"] = json!("v2");
    two_storage["spec"]["versions"] = json!([version, v2]);
    assert_eq!(
        fields(&validate::definition(&two_storage)),
        vec!["spec.versions"]
    );

    let mut no_schema = widget_crd();
    no_schema["spec"]["versions"][0]
        .as_object_mut()
        .unwrap()
        .remove("schema");
    assert_eq!(
        fields(&validate::definition(&no_schema)),
        vec!["spec.versions[0].schema.openAPIV3Schema"]
    );
}

#[test]
fn names_that_clash_with_a_served_type_are_refused() {
    let base = standin();
    let served = served_registry(&base, &[widget_crd()]);
    // The same kind in the same group under another plural.
    let mut gizmos = widget_crd();
    gizmos["metadata"]["name"] = json!("gizmos.example.com");
    gizmos["spec"]["names"]["plural"] = json!("gizmos");
    gizmos["spec"]["names"]["shortNames"] = json!(["cm"]);
    let causes = validate(&served, &base, &gizmos, None);
    assert_eq!(
        fields(&causes),
        vec!["spec.names.kind", "spec.names.shortNames[0]"],
        "{causes:?}"
    );
    // A built-in type's group and plural.
    let mut secrets = widget_crd();
    secrets["spec"]["group"] = json!("apps");
    secrets["spec"]["names"]["plural"] = json!("deployments");
    secrets["spec"]["names"]["kind"] = json!("Deployment");
    let causes = validate(&served, &base, &secrets, None);
    assert!(fields(&causes).contains(&"spec.names.plural"), "{causes:?}");
    // Its own types are no clash: writing it again is fine.
    assert!(validate(&served, &base, &widget_crd(), Some(&widget_crd())).is_empty());
}

#[test]
fn an_update_keeps_group_scope_and_names() {
    let base = standin();
    let served = served_registry(&base, &[widget_crd()]);
    let mut moved = widget_crd();
    moved["spec"]["scope"] = json!("Cluster");
    moved["spec"]["names"]["kind"] = json!("Gadget");
    moved["spec"]["names"]["shortNames"] = json!(["wdg"]);
    let causes = validate(&served, &base, &moved, Some(&widget_crd()));
    assert_eq!(fields(&causes), vec!["spec.names.kind", "spec.scope"]);
    assert!(
        causes
            .iter()
            .all(|c| c.message.contains("field is immutable"))
    );
}

#[test]
fn the_older_of_two_clashing_crds_is_served() {
    let base = standin();
    let mut newer = widget_crd();
    newer["metadata"]["name"] = json!("gizmos.example.com");
    newer["metadata"]["creationTimestamp"] = json!("2026-02-01T00:00:00Z");
    newer["spec"]["names"] = json!({"plural": "gizmos", "kind": "Widget"});
    let served = served_registry(&base, &[newer, widget_crd()]);
    assert!(served.get("example.com", "v1", "widgets").is_some());
    assert!(served.get("example.com", "v1", "gizmos").is_none());
    assert!(defined_by(&[widget_crd()], "example.com", "widgets"));
    assert!(!defined_by(&[widget_crd()], "example.com", "gizmos"));
}

#[test]
fn an_accepted_crd_is_established_and_writing_it_again_changes_nothing() {
    let mut first = widget_crd();
    accept(&mut first, None);
    let conditions = first["status"]["conditions"].as_array().unwrap();
    for type_ in ["NamesAccepted", "Established"] {
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True"),
            "{type_}: {conditions:?}"
        );
    }
    assert_eq!(first["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(first["status"]["acceptedNames"]["kind"], "Widget");
    let mut again = widget_crd();
    again["status"] = first["status"].clone();
    accept(&mut again, Some(&first));
    assert_eq!(again, first);
}
