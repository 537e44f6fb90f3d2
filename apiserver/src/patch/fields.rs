//! Field paths and field sets as server-side apply tracks them, with the `FieldsV1`
//! encoding of `metadata.managedFields` (`{"f:spec":{"f:replicas":{}}}`).
//!
//! The server serves objects without per-field schema knowledge, so list shapes are
//! inferred (see [`ListShape`]): this approximates kube's list-map-keys.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::map::Entry;
use serde_json::{Map, Value};

/// One step of a [`FieldPath`], ordered like structured-merge-diff orders them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:name`).
    Field(String),
    /// An item of a list-map, by its key fields as compact JSON (`k:{"name":"a"}`).
    Key(String),
    /// An item of a set-list, by its value as compact JSON (`v:"a"`).
    Value(String),
    /// An item of a list by position (`i:0`).
    Index(usize),
}

/// A path to one field, displayed as kube displays it: `.spec.containers[name="a"].image`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<PathElement>);

impl FieldPath {
    /// The path of the field `name` under `self`.
    pub fn child(&self, element: PathElement) -> FieldPath {
        let mut elements = self.0.clone();
        elements.push(element);
        FieldPath(elements)
    }

    /// A path made of object fields only, e.g. `["spec", "replicas"]`.
    pub fn fields(names: &[&str]) -> FieldPath {
        FieldPath(
            names
                .iter()
                .map(|n| PathElement::Field((*n).to_owned()))
                .collect(),
        )
    }

    /// Whether `self` is `other` or one of its ancestors.
    pub fn is_prefix_of(&self, other: &FieldPath) -> bool {
        other.0.starts_with(&self.0)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for element in &self.0 {
            match element {
                PathElement::Field(name) => write!(f, ".{name}")?,
                PathElement::Key(json) => {
                    let keys: Map<String, Value> = serde_json::from_str(json).unwrap_or_default();
                    let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    write!(f, "[{}]", parts.join(","))?
                }
                PathElement::Value(json) => write!(f, "[={json}]")?,
                PathElement::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// How a list is merged and tracked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListShape {
    /// Replaced as a whole; one field.
    Atomic,
    /// A set of scalars (`metadata.finalizers`); each value is a field.
    Set,
    /// Objects identified by key fields (`name`, or `uid` for `metadata.ownerReferences`).
    Map(Vec<String>),
}

impl ListShape {
    /// The shape of the list at `path` holding `items` (items of both sides when merging).
    pub fn of<'a>(
        path: &FieldPath,
        items: impl IntoIterator<Item = &'a Value> + Clone,
    ) -> ListShape {
        let is_path = |names: &[&str]| *path == FieldPath::fields(names);
        let keyed_by = |key: &str| {
            items
                .clone()
                .into_iter()
                .all(|item| item.get(key).is_some_and(Value::is_string))
        };
        let any = items.clone().into_iter().next().is_some();
        if is_path(&["metadata", "finalizers"]) && items.clone().into_iter().all(|i| i.is_string())
        {
            ListShape::Set
        } else if is_path(&["metadata", "ownerReferences"]) && keyed_by("uid") {
            ListShape::Map(vec!["uid".into()])
        } else if any && keyed_by("name") {
            ListShape::Map(vec!["name".into()])
        } else {
            ListShape::Atomic
        }
    }

    /// The path element naming `item` in a list of this shape (`None` for atomic lists).
    pub fn element(&self, item: &Value) -> Option<PathElement> {
        match self {
            ListShape::Atomic => None,
            ListShape::Set => Some(PathElement::Value(item.to_string())),
            ListShape::Map(keys) => {
                let fields: Map<String, Value> = keys
                    .iter()
                    .map(|k| (k.clone(), item.get(k).cloned().unwrap_or(Value::Null)))
                    .collect();
                Some(PathElement::Key(Value::Object(fields).to_string()))
            }
        }
    }
}

/// A set of field paths: what one manager owns, or what changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(pub BTreeSet<FieldPath>);

impl FieldSet {
    /// The fields set in `object` (its leaves, list items and empty containers), as
    /// structured-merge-diff's `ToFieldSet` computes them.
    pub fn of_object(object: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Value::Object(map) = object {
            for (key, value) in map {
                set.collect_at(
                    &FieldPath::default().child(PathElement::Field(key.clone())),
                    value,
                );
            }
        }
        set
    }

    /// Adds the fields of `value` found at `path` (list shapes depend on the path).
    pub fn collect_at(&mut self, path: &FieldPath, value: &Value) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, child) in map {
                    self.collect_at(&path.child(PathElement::Field(key.clone())), child);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                let shape = ListShape::of(path, items);
                if shape == ListShape::Atomic {
                    self.insert(path.clone());
                }
                for item in items {
                    if let Some(element) = shape.element(item) {
                        let item_path = path.child(element);
                        self.insert(item_path.clone());
                        if let Value::Object(fields) = item {
                            for (key, child) in fields {
                                self.collect_at(
                                    &item_path.child(PathElement::Field(key.clone())),
                                    child,
                                );
                            }
                        }
                    }
                }
            }
            _ => {
                self.insert(path.clone());
            }
        }
    }

    /// Adds `path`.
    pub fn insert(&mut self, path: FieldPath) {
        self.0.insert(path);
    }

    /// Whether `path` is in the set.
    pub fn contains(&self, path: &FieldPath) -> bool {
        self.0.contains(path)
    }

    /// Whether the set holds `path` or anything under it.
    pub fn covers(&self, path: &FieldPath) -> bool {
        self.0
            .range(path.clone()..)
            .next()
            .is_some_and(|p| path.is_prefix_of(p))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&other.0).cloned().collect())
    }

    /// Paths in `self` but not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    /// The set with every path under `prefix` (and `prefix` itself) removed.
    pub fn without_subtree(&self, prefix: &FieldPath) -> FieldSet {
        FieldSet(
            self.0
                .iter()
                .filter(|p| !prefix.is_prefix_of(p))
                .cloned()
                .collect(),
        )
    }

    /// The set plus the object-field ancestors of its paths (structured-merge-diff's
    /// `EnsureNamedFieldsAreMembers`): owning `.spec.a` counts as owning `.spec`.
    pub fn with_field_ancestors(&self) -> FieldSet {
        let mut set = self.clone();
        for path in &self.0 {
            for len in 1..path.0.len() {
                if matches!(path.0[len - 1], PathElement::Field(_)) {
                    set.insert(FieldPath(path.0[..len].to_vec()));
                }
            }
        }
        set
    }

    /// The `fieldsV1` encoding: nested objects keyed `f:`, `k:`, `v:`, `i:`, with
    /// `".": {}` marking a container that is itself a member.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut node = &mut root;
            for element in &path.0 {
                let entry = node
                    .entry(encode_element(element))
                    .or_insert_with(|| Value::Object(Map::new()));
                node = entry
                    .as_object_mut()
                    .expect("fieldsV1 nodes are objects by construction");
            }
            // Mark membership; resolved below into `{}` or `".": {}`.
            node.insert(MEMBER.into(), Value::Object(Map::new()));
        }
        Value::Object(tidy(root))
    }

    /// Decodes `fieldsV1`.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let mut set = FieldSet::default();
        let map = value.as_object().ok_or("fieldsV1 must be an object")?;
        decode_node(&FieldPath::default(), map, &mut set)?;
        Ok(set)
    }
}

const MEMBER: &str = ".";

/// What one [`FieldPath`] in a [`FieldSet`] costs in memory, beyond its elements: the
/// vector and the set's node.
const PATH_COST: usize = 48;
/// What one [`PathElement`] of a [`FieldPath`] costs, beyond the bytes of its text.
const ELEMENT_COST: usize = std::mem::size_of::<PathElement>();

/// An estimate of the bytes [`FieldSet::of_object`] of `object` takes; counting stops
/// past `budget`. A field set holds every leaf's whole path, so an object with many
/// leaves under a deep chain of long keys costs far more than its own size (a 3 MiB
/// body could ask for tens of gigabytes): callers check this before computing the set.
pub fn field_set_cost(object: &Value, budget: usize) -> usize {
    /// Where a value is: list shapes depend on it (`metadata.finalizers`, ...).
    #[derive(Clone, Copy)]
    enum Place<'a> {
        Metadata,
        InMetadata(&'a str),
        /// A node of a `managedFields` entry's `fieldsV1`: each is a path when decoded.
        FieldsV1,
        Other,
    }
    let Value::Object(root) = object else {
        return 0;
    };
    let mut total = 0usize;
    let mut stack: Vec<(&Value, usize, Place)> = root
        .iter()
        .map(|(key, value)| {
            let place = if key == "metadata" {
                Place::Metadata
            } else {
                Place::Other
            };
            (value, PATH_COST + ELEMENT_COST + key.len(), place)
        })
        .collect();
    while let Some((value, cost, place)) = stack.pop() {
        match value {
            Value::Object(map) if !map.is_empty() => {
                if matches!(place, Place::FieldsV1) {
                    total = total.saturating_add(cost);
                }
                for (key, child) in map {
                    let child_place = match place {
                        Place::Metadata => Place::InMetadata(key),
                        Place::FieldsV1 => Place::FieldsV1,
                        _ => Place::Other,
                    };
                    let child_cost = cost.saturating_add(ELEMENT_COST + key.len());
                    stack.push((child, child_cost, child_place));
                }
            }
            Value::Array(items) if !items.is_empty() => {
                let path = match place {
                    Place::InMetadata(field) => FieldPath::fields(&["metadata", field]),
                    _ => FieldPath::default(),
                };
                let shape = ListShape::of(&path, items);
                if shape == ListShape::Atomic {
                    total = total.saturating_add(cost);
                }
                if matches!(place, Place::InMetadata("managedFields")) {
                    // Decoded into field sets too (`decode_managed_fields`).
                    let trees = items.iter().filter_map(|entry| entry.get("fieldsV1"));
                    stack.extend(trees.map(|tree| (tree, PATH_COST, Place::FieldsV1)));
                }
                for item in items {
                    let Some(element) = shape.element(item) else {
                        continue;
                    };
                    let text = match &element {
                        PathElement::Field(t) | PathElement::Key(t) | PathElement::Value(t) => {
                            t.len()
                        }
                        PathElement::Index(_) => 0,
                    };
                    let item_cost = cost.saturating_add(ELEMENT_COST + text);
                    total = total.saturating_add(item_cost);
                    if let Value::Object(fields) = item {
                        for (key, child) in fields {
                            let child_cost = item_cost.saturating_add(ELEMENT_COST + key.len());
                            stack.push((child, child_cost, Place::Other));
                        }
                    }
                }
            }
            _ => total = total.saturating_add(cost),
        }
        if total > budget {
            break;
        }
    }
    total
}

/// The key under which `map` (a node of a `FieldsV1` tree) holds `element`: its
/// encoding or, for list items, a key written differently that decodes to it.
fn node_key(map: &Map<String, Value>, element: &PathElement) -> Option<String> {
    let encoded = encode_element(element);
    if map.contains_key(&encoded) {
        return Some(encoded);
    }
    match element {
        PathElement::Key(_) | PathElement::Value(_) => map
            .keys()
            .find(|key| decode_element(key).is_ok_and(|e| e == *element))
            .cloned(),
        _ => None,
    }
}

/// Adds `path` to the `FieldsV1` tree `tree` in place, as decoding the tree, adding
/// `path` and encoding the set again would (up to how untouched nodes were written).
/// A write usually adds a few fields to what its manager owns: this touches their
/// nodes only, where a decode and an encode rebuild every path the manager owns.
pub fn fields_v1_insert(tree: &mut Value, path: &FieldPath) {
    let Some((last, parents)) = path.0.split_last() else {
        return;
    };
    let Some(mut node) = tree.as_object_mut() else {
        return;
    };
    for element in parents {
        let key = node_key(node, element).unwrap_or_else(|| encode_element(element));
        let child = match node.entry(key) {
            Entry::Vacant(vacant) => vacant.insert(Value::Object(Map::new())),
            Entry::Occupied(occupied) => {
                let child = occupied.into_mut();
                match &mut *child {
                    // A leaf member gaining a child stays a member: `".": {}`.
                    Value::Object(map) if map.is_empty() => {
                        map.insert(MEMBER.into(), Value::Object(Map::new()));
                    }
                    Value::Object(_) => {}
                    other => *other = Value::Object(Map::new()),
                }
                child
            }
        };
        node = child.as_object_mut().expect("an object by construction");
    }
    let key = node_key(node, last).unwrap_or_else(|| encode_element(last));
    match node.entry(key) {
        Entry::Vacant(vacant) => {
            vacant.insert(Value::Object(Map::new()));
        }
        Entry::Occupied(mut occupied) => match occupied.get_mut() {
            Value::Object(map) => {
                if !map.is_empty() {
                    map.insert(MEMBER.into(), Value::Object(Map::new()));
                }
            }
            other => *other = Value::Object(Map::new()),
        },
    }
}

/// Removes `path` from the `FieldsV1` tree `tree` in place, as decoding the tree,
/// removing `path` and encoding the set again would (up to how untouched nodes were
/// written): a container that owned nothing else goes with it.
pub fn fields_v1_remove(tree: &mut Value, path: &FieldPath) {
    /// Removes `path` under `node`; whether anything was removed.
    fn remove_under(node: &mut Map<String, Value>, path: &[PathElement]) -> bool {
        let Some((first, rest)) = path.split_first() else {
            return false;
        };
        let Some(key) = node_key(node, first) else {
            return false;
        };
        let Some(Value::Object(child)) = node.get_mut(&key) else {
            return false;
        };
        if rest.is_empty() {
            if child.keys().any(|k| k != MEMBER) {
                // Its children stay; it is no longer a member itself.
                return child.remove(MEMBER).is_some();
            }
            node.remove(&key);
            return true;
        }
        if !remove_under(child, rest) {
            return false;
        }
        if child.is_empty() {
            // A container that was not a member and lost its last child.
            node.remove(&key);
        } else if child.len() == 1 && child.contains_key(MEMBER) {
            // A member container that lost its last child: a leaf member.
            child.clear();
        }
        true
    }
    if let Some(root) = tree.as_object_mut() {
        remove_under(root, &path.0);
    }
}

/// A leaf member is `{}`; a container member keeps `".": {}` beside its children.
fn tidy(node: Map<String, Value>) -> Map<String, Value> {
    let has_children = node.keys().any(|k| k != MEMBER);
    if !has_children {
        return Map::new();
    }
    node.into_iter()
        .map(|(k, v)| match v {
            Value::Object(child) if k != MEMBER => (k, Value::Object(tidy(child))),
            other => (k, other),
        })
        .collect()
}

fn encode_element(element: &PathElement) -> String {
    match element {
        PathElement::Field(name) => format!("f:{name}"),
        PathElement::Key(json) => format!("k:{json}"),
        PathElement::Value(json) => format!("v:{json}"),
        PathElement::Index(i) => format!("i:{i}"),
    }
}

fn decode_element(key: &str) -> Result<PathElement, String> {
    let canonical = |json: &str| {
        serde_json::from_str::<Value>(json)
            .map(|v| v.to_string())
            .map_err(|e| format!("invalid fieldsV1 key {key:?}: {e}"))
    };
    match key.split_at_checked(2) {
        Some(("f:", name)) => Ok(PathElement::Field(name.to_owned())),
        Some(("k:", json)) => Ok(PathElement::Key(canonical(json)?)),
        Some(("v:", json)) => Ok(PathElement::Value(canonical(json)?)),
        Some(("i:", index)) => index
            .parse()
            .map(PathElement::Index)
            .map_err(|e| format!("invalid fieldsV1 key {key:?}: {e}")),
        _ => Err(format!("invalid fieldsV1 key {key:?}")),
    }
}

fn decode_node(
    path: &FieldPath,
    node: &Map<String, Value>,
    set: &mut FieldSet,
) -> Result<(), String> {
    for (key, child) in node {
        if key == MEMBER {
            set.insert(path.clone());
            continue;
        }
        let child_path = path.child(decode_element(key)?);
        let child = child
            .as_object()
            .ok_or_else(|| format!("fieldsV1 entry {key:?} must be an object"))?;
        if child.is_empty() {
            set.insert(child_path);
        } else {
            decode_node(&child_path, child, set)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_in_kube_format() {
        let encoded = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}},
            },
            "f:metadata2": {"f:finalizers": {"v:\"a\"": {}}},
        });
        let set = FieldSet::from_fields_v1(&encoded).unwrap();
        assert!(set.contains(&FieldPath::fields(&["metadata", "labels"])));
        assert!(set.contains(&FieldPath::fields(&["spec", "replicas"])));
        assert!(!set.contains(&FieldPath::fields(&["spec"])));
        assert_eq!(set.to_fields_v1(), encoded);
    }

    /// Every path of one to three steps over a few elements of each kind.
    fn universe() -> Vec<FieldPath> {
        let elements = [
            PathElement::Field("a".into()),
            PathElement::Field("b".into()),
            PathElement::Key("{\"name\":\"x\"}".into()),
            PathElement::Value("\"s\"".into()),
        ];
        let mut paths = vec![FieldPath::default()];
        let mut all = Vec::new();
        for _ in 0..3 {
            paths = paths
                .iter()
                .flat_map(|p| elements.iter().map(|e| p.child(e.clone())))
                .collect();
            all.extend(paths.iter().cloned());
        }
        all
    }

    #[test]
    fn fields_v1_edits_in_place_match_decoding_editing_and_encoding() {
        let universe = universe();
        // A fixed xorshift sequence: the same sets on every run.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        for _ in 0..2_000 {
            let mut set = FieldSet::default();
            for _ in 0..next(8) {
                set.insert(universe[next(universe.len())].clone());
            }
            let path = if set.is_empty() || next(2) == 0 {
                universe[next(universe.len())].clone()
            } else {
                set.0.iter().nth(next(set.0.len())).cloned().unwrap()
            };
            let tree = set.to_fields_v1();

            let mut inserted = tree.clone();
            fields_v1_insert(&mut inserted, &path);
            let mut with = set.clone();
            with.insert(path.clone());
            assert_eq!(inserted, with.to_fields_v1(), "{set:?} + {path}");

            let mut removed = tree.clone();
            fields_v1_remove(&mut removed, &path);
            let mut without = set.clone();
            without.0.remove(&path);
            assert_eq!(removed, without.to_fields_v1(), "{set:?} - {path}");
            assert_eq!(FieldSet::from_fields_v1(&removed).unwrap(), without);
        }
    }

    #[test]
    fn fields_v1_edits_find_list_items_written_differently() {
        // A client may send `managedFields` with list-item keys not in compact form.
        let containers = FieldPath::fields(&["spec", "containers"]);
        let nginx = containers.child(PathElement::Key("{\"name\":\"nginx\"}".into()));
        let mut tree = json!({
            "f:spec": {"f:containers": {"k:{\"name\": \"nginx\"}": {".": {}, "f:image": {}}}},
        });
        fields_v1_insert(&mut tree, &nginx.child(PathElement::Field("name".into())));
        assert_eq!(
            tree,
            json!({"f:spec": {"f:containers": {
                "k:{\"name\": \"nginx\"}": {".": {}, "f:image": {}, "f:name": {}},
            }}})
        );
        fields_v1_remove(&mut tree, &nginx);
        fields_v1_remove(&mut tree, &nginx.child(PathElement::Field("image".into())));
        fields_v1_remove(&mut tree, &nginx.child(PathElement::Field("name".into())));
        assert_eq!(tree, json!({}));
    }

    #[test]
    fn of_object_lists_leaves_and_list_map_items() {
        let set = FieldSet::of_object(&json!({
            "spec": {"replicas": 2, "args": ["a", "b"], "empty": {},
                     "containers": [{"name": "web", "image": "nginx"}]},
            "metadata": {"finalizers": ["x"]},
        }));
        let shown: Vec<String> = set.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                ".metadata.finalizers[=\"x\"]",
                ".spec.args",
                ".spec.containers[name=\"web\"]",
                ".spec.containers[name=\"web\"].image",
                ".spec.containers[name=\"web\"].name",
                ".spec.empty",
                ".spec.replicas",
            ]
        );
    }

    #[test]
    fn covers_and_ancestors() {
        let set = FieldSet::of_object(&json!({"spec": {"a": {"b": 1}}}));
        assert!(set.covers(&FieldPath::fields(&["spec"])));
        assert!(set.covers(&FieldPath::fields(&["spec", "a", "b"])));
        assert!(!set.covers(&FieldPath::fields(&["status"])));
        let ensured = set.with_field_ancestors();
        assert!(ensured.contains(&FieldPath::fields(&["spec", "a"])));
        assert!(ensured.contains(&FieldPath::fields(&["spec"])));
    }

    #[test]
    fn rejects_malformed_fields_v1() {
        assert!(FieldSet::from_fields_v1(&json!({"x:spec": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:spec": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:{bad": {}})).is_err());
    }

    #[test]
    fn list_shapes() {
        let p = FieldPath::fields(&["spec", "steps"]);
        let named = [json!({"name": "a"}), json!({"name": "b"})];
        assert_eq!(
            ListShape::of(&p, &named),
            ListShape::Map(vec!["name".into()])
        );
        let mixed = [json!({"name": "a"}), json!({"x": 1})];
        assert_eq!(ListShape::of(&p, &mixed), ListShape::Atomic);
        let owners = [json!({"uid": "u1", "name": "a"})];
        let owner_path = FieldPath::fields(&["metadata", "ownerReferences"]);
        assert_eq!(
            ListShape::of(&owner_path, &owners),
            ListShape::Map(vec!["uid".into()])
        );
    }
}
