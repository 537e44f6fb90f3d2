//! Server-side apply and the bookkeeping of non-apply writes, after
//! structured-merge-diff's `Updater.Apply` and `Updater.Update`.

use serde_json::{Map, Value};

use super::fields::{
    FieldPath, FieldSet, ListShape, PathElement, fields_v1_insert, fields_v1_remove,
};
use super::managed::{
    APPLY, EncodedEntry, ManagedEntry, Manager, UPDATE, decode_managed_fields,
    encode_managed_fields, encoded_managed_fields, strip_server_fields, strip_server_fields_mut,
    take_encoded_managed_fields, write_managed_fields,
};
use crate::status::{ApiError, Subject};

/// The manager kube records for an object's fields when it is first applied and
/// carries no `managedFields` yet.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// One field another manager owns with a different value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldConflict {
    /// The manager that owns it.
    pub manager: Manager,
    /// The field.
    pub field: FieldPath,
}

/// An apply that would change fields other managers own; retry with `force` to
/// take them over.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", conflict_message(.conflicts))]
pub struct ApplyConflict {
    /// The conflicts, ordered by manager then field.
    pub conflicts: Vec<FieldConflict>,
}

impl ApplyConflict {
    /// The 409 `Conflict` answered for this apply of the object `subject`.
    ///
    /// # Warning
    /// [`ApiError::Conflict`] prefixes its message with `Operation cannot be fulfilled
    /// on ...:`; kube's apply conflicts carry the bare message and
    /// `FieldManagerConflict` causes, which `status.rs` does not model yet.
    pub fn into_api_error(self, subject: Subject) -> ApiError {
        ApiError::Conflict {
            subject,
            reason: self.to_string(),
        }
    }
}

fn conflict_message(conflicts: &[FieldConflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager, only.field
        );
    }
    let mut lines = Vec::new();
    let mut current: Option<&Manager> = None;
    for c in conflicts {
        if current != Some(&c.manager) {
            lines.push(format!("conflicts with {}:", c.manager));
            current = Some(&c.manager);
        }
        lines.push(format!("- {}", c.field));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Applies `applied` (a parsed apply configuration) for `field_manager` onto
/// `existing` (`None` to create), returning the new object with its
/// `metadata.managedFields` updated; `now` (RFC 3339) stamps the applier's entry.
///
/// Maps merge recursively, lists of objects with a `name` merge by name,
/// `metadata.finalizers` merges as a set, other lists are replaced. Fields the
/// manager applied before and no longer applies are removed unless another manager
/// owns them. Changing a field another manager owns is a conflict unless `force`,
/// which takes ownership over.
///
/// The caller checks the identity (kind, name, namespace) and preconditions.
pub fn server_side_apply(
    existing: Option<&Value>,
    applied: &Value,
    field_manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, ApplyConflict> {
    let nothing = Value::Object(Map::new());
    let live = existing.unwrap_or(&nothing);
    let applier = Manager {
        name: field_manager.to_owned(),
        operation: APPLY.to_owned(),
        api_version: api_version(applied, live),
        subresource: String::new(),
    };
    let mut entries = decode_managed_fields(live);
    if existing.is_some() && entries.is_empty() {
        entries.push(ManagedEntry {
            manager: Manager {
                name: BEFORE_FIRST_APPLY.to_owned(),
                operation: UPDATE.to_owned(),
                api_version: applier.api_version.clone(),
                subresource: String::new(),
            },
            time: Some(now.to_owned()),
            fields: strip_server_fields(&FieldSet::of_object(live)),
        });
    }
    let position = entries.iter().position(|e| e.manager.same_as(&applier));
    let (last, previous_time) = match position {
        Some(i) => {
            let entry = entries.remove(i);
            (entry.fields, entry.time)
        }
        None => (FieldSet::default(), None),
    };
    let applied_set = strip_server_fields(&FieldSet::of_object(applied));

    let mut merged = merge(&FieldPath::default(), live, applied);
    // Prune what the applier dropped from its configuration and nobody else owns.
    let managed = entries
        .iter()
        .fold(applied_set.clone(), |acc, e| acc.union(&e.fields));
    let dropped = strip_server_fields(&last.with_field_ancestors());
    for path in &dropped.0 {
        if !managed.covers(path) {
            remove(&mut merged, &path.0);
        }
    }

    let diff = Diff::between(live, &merged);
    let changed = diff.added.union(&diff.modified);
    let mut conflicts = Vec::new();
    for entry in &mut entries {
        let owned = entry.fields.intersection(&changed);
        conflicts.extend(owned.0.iter().map(|field| FieldConflict {
            manager: entry.manager.clone(),
            field: field.clone(),
        }));
        entry.fields = entry.fields.difference(&owned).difference(&diff.removed);
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort_by(|a, b| (&a.manager, &a.field).cmp(&(&b.manager, &b.field)));
        return Err(ApplyConflict { conflicts });
    }
    let object_changed = strip_meta(live) != strip_meta(&merged);
    entries.push(ManagedEntry {
        manager: applier,
        time: if object_changed || previous_time.is_none() {
            Some(now.to_owned())
        } else {
            previous_time
        },
        fields: applied_set,
    });
    encode_managed_fields(&mut merged, entries);
    Ok(merged)
}

/// Records in `updated`'s `metadata.managedFields` that `field_manager` wrote the
/// fields a non-apply write (`operation` `Update`: create, update, merge or JSON
/// patch) changed from `existing` (`None` for a create). Other managers lose the
/// fields changed or removed.
///
/// Like kube, `managedFields` sent in `updated` replace the live ones when they are
/// set (`[{}]` clears them), and an existing object without managed fields stays
/// untracked until it is first applied.
pub fn record_update(
    existing: Option<&Value>,
    updated: &mut Value,
    field_manager: &str,
    operation: &str,
    now: &str,
) {
    let nothing = Value::Object(Map::new());
    let live = existing.unwrap_or(&nothing);
    let reset = updated
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|list| list.len() == 1 && list[0].as_object().is_some_and(Map::is_empty));
    // A patch carries the live managedFields along: only different ones were sent.
    let sent = updated.pointer("/metadata/managedFields");
    let carried = sent.is_some() && sent == live.pointer("/metadata/managedFields");
    if sent.is_some() && !carried {
        let from_request = decode_managed_fields(updated);
        if !from_request.is_empty() {
            record_update_over(from_request, live, updated, field_manager, operation, now);
            return;
        }
    }
    // The live entries: moved out of `updated` when it carries them (most updates
    // do), cloned from `live` otherwise (sent entries that do not decode are ignored,
    // as kube ignores them).
    let mut entries = if carried {
        take_encoded_managed_fields(updated)
    } else {
        encoded_managed_fields(live)
    };
    if reset || (existing.is_some() && entries.is_empty()) {
        encode_managed_fields(updated, Vec::new());
        return;
    }
    let Update {
        updater,
        changed,
        removed,
    } = Update::of(field_manager, operation, live, updated);
    let own = entries
        .iter()
        .position(|entry| entry.manager.same_as(&updater))
        .map(|i| entries.remove(i));
    // Other managers lose what was changed or removed; their trees are edited in
    // place, not decoded and encoded again, and one that owned none of it is untouched.
    for entry in &mut entries {
        for path in changed.0.iter().chain(&removed.0) {
            fields_v1_remove(&mut entry.fields_v1, path);
        }
    }
    let (own_time, own_fields) = own.map_or((None, None), |e| (e.time, Some(e.fields_v1)));
    let time = if changed.is_empty() && own_time.is_some() {
        own_time
    } else {
        Some(now.to_owned())
    };
    let mut fields_v1 = own_fields
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Map::new()));
    for path in &removed.0 {
        fields_v1_remove(&mut fields_v1, path);
    }
    for path in &changed.0 {
        fields_v1_insert(&mut fields_v1, path);
    }
    entries.push(EncodedEntry {
        manager: updater,
        time,
        fields_v1,
    });
    write_managed_fields(updated, entries);
}

/// An update of `live` to `updated` by one manager: the fields it changed (added or
/// modified) and removed. It takes both from other managers.
struct Update {
    updater: Manager,
    changed: FieldSet,
    removed: FieldSet,
}

impl Update {
    fn of(field_manager: &str, operation: &str, live: &Value, updated: &Value) -> Update {
        let updater = Manager {
            name: field_manager.to_owned(),
            operation: operation.to_owned(),
            api_version: api_version(updated, live),
            subresource: String::new(),
        };
        let Diff {
            added: mut changed,
            modified,
            removed,
        } = Diff::between(live, updated);
        changed.0.extend(modified.0);
        Update {
            updater,
            changed,
            removed,
        }
    }
}

/// [`record_update`] with the `managedFields` a request sent (which replace the live
/// ones), decoded.
fn record_update_over(
    mut entries: Vec<ManagedEntry>,
    live: &Value,
    updated: &mut Value,
    field_manager: &str,
    operation: &str,
    now: &str,
) {
    let Update {
        updater,
        changed,
        removed,
    } = Update::of(field_manager, operation, live, updated);
    let taken = changed.union(&removed);
    let mut own = FieldSet::default();
    let mut own_time = None;
    entries.retain_mut(|entry| {
        if entry.manager.same_as(&updater) {
            own = entry.fields.clone();
            own_time = entry.time.take();
            return false;
        }
        entry.fields = entry.fields.difference(&taken);
        true
    });
    let own = own.difference(&removed).union(&changed);
    if !changed.is_empty() || own_time.is_none() {
        own_time = Some(now.to_owned());
    }
    entries.push(ManagedEntry {
        manager: updater,
        time: own_time,
        fields: own,
    });
    encode_managed_fields(updated, entries);
}

fn api_version(object: &Value, fallback: &Value) -> String {
    object
        .get("apiVersion")
        .or_else(|| fallback.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strip_meta(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    object
}

/// `live` with `config` merged in: objects recursively, lists by their [`ListShape`];
/// `null` in `config` removes the field.
fn merge(path: &FieldPath, live: &Value, config: &Value) -> Value {
    match (live, config) {
        (Value::Object(live), Value::Object(config)) => {
            let mut out = live.clone();
            for (key, value) in config {
                let child = path.child(PathElement::Field(key.clone()));
                match (live.get(key), value) {
                    (_, Value::Null) => {
                        out.remove(key);
                    }
                    (Some(old), new) => {
                        out.insert(key.clone(), merge(&child, old, new));
                    }
                    (None, new) => {
                        out.insert(key.clone(), merge(&child, &Value::Null, new));
                    }
                }
            }
            Value::Object(out)
        }
        (Value::Array(live), Value::Array(config)) => {
            let shape = ListShape::of(path, live.iter().chain(config));
            if shape == ListShape::Atomic {
                return Value::Array(config.clone());
            }
            let mut out: Vec<Value> = live
                .iter()
                .map(|item| {
                    let element = shape.element(item);
                    match config.iter().find(|c| shape.element(c) == element) {
                        Some(c) => merge(path, item, c),
                        None => item.clone(),
                    }
                })
                .collect();
            for item in config {
                let element = shape.element(item);
                if !live.iter().any(|l| shape.element(l) == element) {
                    out.push(item.clone());
                }
            }
            Value::Array(out)
        }
        // A new object still drops the `null`s of its configuration.
        (_, Value::Object(_)) => merge(path, &Value::Object(Map::new()), config),
        _ => config.clone(),
    }
}

/// Removes the field at `path` from `object`, if present.
fn remove(object: &mut Value, path: &[PathElement]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    let mut walked = FieldPath::default();
    for element in parents {
        let next = match (element, node) {
            (PathElement::Field(name), Value::Object(map)) => map.get_mut(name),
            (PathElement::Index(i), Value::Array(items)) => items.get_mut(*i),
            (element, Value::Array(items)) => {
                let shape = ListShape::of(&walked, items.iter());
                items
                    .iter_mut()
                    .find(|item| shape.element(item).as_ref() == Some(element))
            }
            _ => None,
        };
        let Some(next) = next else { return };
        node = next;
        walked = walked.child(element.clone());
    }
    match (last, node) {
        (PathElement::Field(name), Value::Object(map)) => {
            map.remove(name);
        }
        (PathElement::Index(i), Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
        }
        (element, Value::Array(items)) => {
            let shape = ListShape::of(&walked, items.iter());
            items.retain(|item| shape.element(item).as_ref() != Some(element));
        }
        _ => {}
    }
}

/// What changed between two objects, as structured-merge-diff's `Compare`: an
/// added container counts with everything under it.
#[derive(Default)]
struct Diff {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

impl Diff {
    fn between(old: &Value, new: &Value) -> Diff {
        let mut diff = Diff::default();
        let empty = Map::new();
        diff.children(
            &FieldPath::default(),
            old.as_object().unwrap_or(&empty),
            new.as_object().unwrap_or(&empty),
            true,
        );
        strip_server_fields_mut(&mut diff.added);
        strip_server_fields_mut(&mut diff.modified);
        strip_server_fields_mut(&mut diff.removed);
        diff
    }

    /// Compares two objects field by field; at the top (`root`), `metadata` is compared
    /// without its `managedFields`, which no manager owns.
    fn children(
        &mut self,
        path: &FieldPath,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        root: bool,
    ) {
        for key in old
            .keys()
            .chain(new.keys().filter(|k| !old.contains_key(*k)))
        {
            let (before, after) = (old.get(key), new.get(key));
            if before == after {
                // Most of an object, mostly: no path is built for it.
                continue;
            }
            let child = path.child(PathElement::Field(key.clone()));
            if root
                && key == "metadata"
                && let (Some(Value::Object(before)), Some(Value::Object(after))) = (before, after)
            {
                for key in before
                    .keys()
                    .chain(after.keys().filter(|k| !before.contains_key(*k)))
                    .filter(|k| *k != "managedFields")
                {
                    let (before, after) = (before.get(key), after.get(key));
                    if before != after {
                        let grandchild = child.child(PathElement::Field(key.clone()));
                        self.compare(&grandchild, before, after);
                    }
                }
                continue;
            }
            self.compare(&child, before, after);
        }
    }

    fn compare(&mut self, path: &FieldPath, old: Option<&Value>, new: Option<&Value>) {
        match (old, new) {
            (None, None) => {}
            // Nothing under an unchanged field changed: most of an object, mostly.
            (Some(old), Some(new)) if old == new => {}
            (None, Some(new)) => {
                self.added.0.insert(path.clone());
                self.added.0.extend(subtree(path, new).0);
            }
            (Some(old), None) => {
                self.removed.0.insert(path.clone());
                self.removed.0.extend(subtree(path, old).0);
            }
            (Some(Value::Object(o)), Some(Value::Object(n))) if !(o.is_empty() && n.is_empty()) => {
                self.children(path, o, n, false);
            }
            (Some(Value::Array(o)), Some(Value::Array(n))) => {
                let shape = ListShape::of(path, o.iter().chain(n));
                if shape == ListShape::Atomic {
                    self.modified.0.insert(path.clone());
                    return;
                }
                // Each item's element once: matching items by elements computed
                // anew for every pair made the diff of a list quadratic in allocations.
                let old_elements: Vec<Option<PathElement>> =
                    o.iter().map(|item| shape.element(item)).collect();
                let new_elements: Vec<Option<PathElement>> =
                    n.iter().map(|item| shape.element(item)).collect();
                fn find<'a>(
                    elements: &[Option<PathElement>],
                    items: &'a [Value],
                    element: &PathElement,
                ) -> Option<&'a Value> {
                    let i = elements.iter().position(|e| e.as_ref() == Some(element))?;
                    items.get(i)
                }
                let added = new_elements.iter().filter(|e| {
                    e.as_ref()
                        .is_some_and(|e| find(&old_elements, o, e).is_none())
                });
                for element in old_elements.iter().chain(added).flatten() {
                    let before = find(&old_elements, o, element);
                    let after = find(&new_elements, n, element);
                    if before == after {
                        continue;
                    }
                    let item_path = path.child(element.clone());
                    match (before, after) {
                        (Some(Value::Object(b)), Some(Value::Object(a))) => {
                            self.children(&item_path, b, a, false);
                        }
                        (Some(b), Some(a)) => {
                            let empty = Map::new();
                            self.children(
                                &item_path,
                                b.as_object().unwrap_or(&empty),
                                a.as_object().unwrap_or(&empty),
                                false,
                            );
                        }
                        _ => self.compare(&item_path, before, after),
                    }
                }
            }
            (Some(_), Some(_)) => {
                self.modified.0.insert(path.clone());
            }
        }
    }
}

/// Every field at or under `path` holding `value`, containers included.
fn subtree(path: &FieldPath, value: &Value) -> FieldSet {
    let mut set = FieldSet::default();
    set.collect_at(path, value);
    let containers: Vec<FieldPath> = set
        .with_field_ancestors()
        .0
        .into_iter()
        .filter(|p| path.is_prefix_of(p))
        .collect();
    set.0.extend(containers);
    set
}

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
