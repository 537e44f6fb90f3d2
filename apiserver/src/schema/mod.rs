//! Structural schemas, handled the way kube-apiserver handles a CRD's
//! `openAPIV3Schema`: [`validate`] an object against it, list its
//! [`unknown_fields`] (for `fieldValidation=Strict`/`Warn`) and [`prune`] them
//! (what the server stores with `fieldValidation=Ignore` or `Warn`).
//!
//! The schema is the one of the whole object, as in [`ResourceType::schema`]. At
//! its root `apiVersion` and `kind` are never checked, and `metadata` is only
//! checked to be an object whose fields are the ones `ObjectMeta` has: the
//! server validates metadata itself.
//!
//! A schemaless kind ([`ResourceType::schema`] is `None`) accepts and keeps every
//! field: callers skip these functions for it rather than passing an empty
//! schema (an empty schema `{}` keeps no field at all, as in Kubernetes).
//!
//! [`ResourceType::schema`]: crate::registry::ResourceType::schema

mod unknown;
mod validate;

pub use unknown::{prune, strict_decoding_message, unknown_fields};
pub use validate::validate;

/// The fields of `ObjectMeta` a client may send; anything else under
/// `metadata` is an unknown field.
pub const OBJECT_META_FIELDS: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// Where a walk is in an object: a path kept on the stack, one link per level, and
/// written out (`spec.inputs[0].name`, `spec.variables[key]`) only for what is
/// reported. The walks visit every node of every object written, and most objects have
/// nothing to report: a `String` built per node was most of their cost.
#[derive(Clone, Copy)]
enum Path<'a> {
    /// The object itself (an empty path).
    Root,
    /// `.name` under `parent` (`name` at the root).
    Field(&'a Path<'a>, &'a str),
    /// `[i]` under `parent`: an item of a list.
    Index(&'a Path<'a>, usize),
    /// `[key]` under `parent`: a value of a map (`additionalProperties`).
    Key(&'a Path<'a>, &'a str),
}

impl<'a> Path<'a> {
    fn field(&'a self, name: &'a str) -> Path<'a> {
        Path::Field(self, name)
    }

    fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    /// The dotted path, as [`child`] and `format!("{path}[{i}]")` spell it.
    fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match *self {
            Path::Root => {}
            Path::Field(parent, name) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            Path::Index(parent, i) => {
                parent.write(out);
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
            Path::Key(parent, key) => {
                parent.write(out);
                out.push('[');
                out.push_str(key);
                out.push(']');
            }
        }
    }
}

/// `parent.name`, or `name` at the root.
fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

/// The schemas a node's sub-schemas (`allOf`, `anyOf`, `oneOf`) list.
fn sub_schemas<'a>(
    schema: &'a serde_json::Value,
    keyword: &str,
) -> impl Iterator<Item = &'a serde_json::Value> {
    schema
        .get(keyword)
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
}

/// Whether a boolean extension or keyword is `true`.
fn flag(schema: &serde_json::Value, keyword: &str) -> bool {
    schema.get(keyword).and_then(|v| v.as_bool()) == Some(true)
}
