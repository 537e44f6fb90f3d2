//! What a template refers to: the variables of the template module's context,
//! classified so validation and the dependency graph can check them.

use std::fmt;

/// Something a template refers to. Displays as the path a template uses.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reference {
    /// A field of the install: `id`, `name`, `namespace`, `cloud`,
    /// `cloud.region`, ...; empty for `install` itself, `inputs` for all inputs.
    Install {
        /// Dotted path under `install`.
        field: String,
    },
    /// `inputs.<name>` or `install.inputs.<name>`.
    Input {
        /// Input name.
        name: String,
    },
    /// `secrets.<name>`, or a literal `${outpost-secret:<name>}`.
    Secret {
        /// Secret name.
        name: String,
    },
    /// `components.<name>`, `components.<name>.outputs[.<output>]`.
    Component {
        /// Component name (with dashes).
        name: String,
        /// Output name, `None` for all outputs.
        output: Option<String>,
    },
    /// `sandbox.outputs[.<output>]`.
    Sandbox {
        /// Output name, `None` for all outputs.
        output: Option<String>,
    },
    /// A field of the App: `name`, `release`; empty for `app` itself.
    App {
        /// Dotted path under `app`.
        field: String,
    },
    /// `components` or `secrets` as a whole (e.g. `components[name]`), which
    /// cannot be checked or put in the dependency graph.
    Collection {
        /// `components` or `secrets`.
        root: String,
    },
    /// A variable the context does not have.
    Unknown {
        /// The dotted path as written.
        path: String,
    },
}

/// Fields of `install` a template may use.
const INSTALL_FIELDS: [&str; 8] = [
    "id",
    "name",
    "namespace",
    "inputs",
    "cloud",
    "cloud.provider",
    "cloud.accountId",
    "cloud.region",
];

impl Reference {
    /// Classifies a dotted path as minijinja reports it (`components.web_image.outputs.image`).
    pub(crate) fn from_path(path: &str) -> Self {
        let parts: Vec<&str> = path.split('.').collect();
        let unknown = || Self::Unknown {
            path: path.to_owned(),
        };
        let output = |rest: &[&str]| match rest {
            [] | ["outputs"] => Some(None),
            ["outputs", name, ..] => Some(Some((*name).to_owned())),
            _ => None,
        };
        match parts.as_slice() {
            ["inputs"] | ["install", "inputs"] => Self::Install {
                field: "inputs".into(),
            },
            ["inputs", name, ..] | ["install", "inputs", name, ..] => Self::Input {
                name: (*name).to_owned(),
            },
            ["install", rest @ ..] => {
                let field = rest.join(".");
                if field.is_empty() || INSTALL_FIELDS.contains(&field.as_str()) {
                    Self::Install { field }
                } else {
                    unknown()
                }
            }
            ["secrets", name, ..] => Self::Secret {
                name: (*name).to_owned(),
            },
            ["components", name, rest @ ..] => match output(rest) {
                Some(output) => Self::Component {
                    name: name.replace('_', "-"),
                    output,
                },
                None => unknown(),
            },
            [root @ ("secrets" | "components")] => Self::Collection {
                root: (*root).to_owned(),
            },
            ["sandbox", rest @ ..] => match output(rest) {
                Some(output) => Self::Sandbox { output },
                None => unknown(),
            },
            ["app"] | ["app", "name" | "release"] => Self::App {
                field: parts[1..].join("."),
            },
            _ => unknown(),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = |root: &str, field: &str| {
            if field.is_empty() {
                root.to_owned()
            } else {
                format!("{root}.{field}")
            }
        };
        match self {
            Self::Install { field } => f.write_str(&joined("install", field)),
            Self::Input { name } => write!(f, "inputs.{name}"),
            Self::Secret { name } => write!(f, "secrets.{name}"),
            Self::Component { name, output: None } => write!(f, "components.{name}.outputs"),
            Self::Component {
                name,
                output: Some(output),
            } => write!(f, "components.{name}.outputs.{output}"),
            Self::Sandbox { output: None } => f.write_str("sandbox.outputs"),
            Self::Sandbox {
                output: Some(output),
            } => write!(f, "sandbox.outputs.{output}"),
            Self::App { field } => f.write_str(&joined("app", field)),
            Self::Collection { root } => f.write_str(root),
            Self::Unknown { path } => f.write_str(path),
        }
    }
}
