//! The customer's provider allow-list (`--terraform-providers`, `--terraform-provider-mirror`)
//! and the terraform CLI configuration that enforces it at install time.
//!
//! Two locks, one list:
//! * before `terraform init`, the runner reads the module's static configuration
//!   ([`super::configuration`]) and refuses a Plan that needs a provider not on the list
//!   ([`ProviderAllowList::check`]);
//! * terraform itself runs with a CLI configuration of the runner's
//!   ([`ProviderAllowList::cli_config`], `TF_CLI_CONFIG_FILE`) whose
//!   `provider_installation` names only the listed providers: from the customer's
//!   filesystem mirrors when any are given, else downloaded from their registries
//!   (`direct`). An empty list installs nothing (an empty `provider_installation`
//!   block: terraform treats an empty `include` as "everything", so none is written).
//!
//! The built-in provider (`terraform.io/builtin/terraform`: `terraform_data`) is part of
//! the terraform binary and always allowed.

use super::configuration::{BUILTIN, Configuration, normalise};
use std::path::{Path, PathBuf};

/// The providers terraform may install, and where from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderAllowList {
    /// Normalised source addresses; `HOST/NAMESPACE/*` allows a namespace.
    allowed: Vec<String>,
    /// Filesystem mirrors (terraform's packed or unpacked layout) to install from.
    mirrors: Vec<PathBuf>,
}

/// A provider the allow-list does not name.
#[derive(Debug)]
pub struct NotAllowed {
    /// The providers not allowed.
    pub denied: Vec<String>,
    /// The allow-list.
    pub allowed: Vec<String>,
}

impl std::fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = if self.denied.len() == 1 { "" } else { "s" };
        let allowed = match self.allowed.is_empty() {
            true => "none".to_owned(),
            false => self.allowed.join(", "),
        };
        write!(
            f,
            "the module needs provider{plural} {} which the runner's allow-list \
             (--terraform-providers: {allowed}) does not name; nothing was run",
            self.denied.join(", ")
        )
    }
}

impl std::error::Error for NotAllowed {}

impl ProviderAllowList {
    /// An allow-list of `providers` (`hashicorp/aws`, `registry.terraform.io/acme/*`),
    /// installed from `mirrors` when there are any.
    ///
    /// # Errors
    /// When an entry is not a provider source address.
    pub fn new(providers: &[String], mirrors: Vec<PathBuf>) -> Result<Self, String> {
        let mut allowed = Vec::new();
        for entry in providers.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
            let (address, wildcard) = match entry.strip_suffix("/*") {
                Some(namespace) => (format!("{namespace}/any"), true),
                None => (entry.to_owned(), false),
            };
            let normalised = normalise(&address)
                .filter(|a| !wildcard || a.split('/').count() == 3)
                .ok_or_else(|| {
                    format!(
                        "{entry:?} is not a provider source address (NAMESPACE/TYPE, \
                         HOST/NAMESPACE/TYPE or NAMESPACE/*)"
                    )
                })?;
            allowed.push(match normalised.strip_suffix("/any") {
                Some(namespace) if wildcard => format!("{namespace}/*"),
                _ => normalised,
            });
        }
        allowed.sort();
        allowed.dedup();
        Ok(Self { allowed, mirrors })
    }

    /// The filesystem mirrors providers are installed from.
    pub fn mirrors(&self) -> impl Iterator<Item = &Path> {
        self.mirrors.iter().map(PathBuf::as_path)
    }

    /// Whether terraform may install and run the provider `source` (normalised).
    pub fn allows(&self, source: &str) -> bool {
        source == BUILTIN
            || self.allowed.iter().any(|a| match a.strip_suffix('*') {
                Some(namespace) => source.starts_with(namespace),
                None => a == source,
            })
    }

    /// Refuses a configuration that needs a provider not on the list.
    ///
    /// # Errors
    /// [`NotAllowed`], naming every such provider.
    pub fn check(&self, config: &Configuration) -> Result<(), NotAllowed> {
        let denied: Vec<String> = config
            .installed_providers()
            .filter(|p| !self.allows(p))
            .map(str::to_owned)
            .collect();
        if denied.is_empty() {
            Ok(())
        } else {
            Err(NotAllowed {
                denied,
                allowed: self.allowed.clone(),
            })
        }
    }

    /// The terraform CLI configuration that installs only the listed providers.
    pub fn cli_config(&self) -> String {
        if self.allowed.is_empty() {
            return "provider_installation {\n}\n".to_owned();
        }
        let include = serde_json::to_string(&self.allowed).unwrap_or_default();
        let mut config = "provider_installation {\n".to_owned();
        for mirror in &self.mirrors {
            let path = serde_json::to_string(&mirror.to_string_lossy()).unwrap_or_default();
            config.push_str(&format!(
                "  filesystem_mirror {{\n    path    = {path}\n    include = {include}\n  }}\n"
            ));
        }
        if self.mirrors.is_empty() {
            config.push_str(&format!("  direct {{\n    include = {include}\n  }}\n"));
        }
        config.push_str("}\n");
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_normalised_and_namespaces_match() {
        let list = ProviderAllowList::new(
            &[
                "hashicorp/aws".into(),
                "Example.com/Acme/*".into(),
                " ".into(),
            ],
            Vec::new(),
        )
        .unwrap();
        assert!(list.allows("registry.terraform.io/hashicorp/aws"));
        assert!(list.allows("example.com/acme/db"));
        assert!(list.allows(BUILTIN));
        assert!(!list.allows("registry.terraform.io/hashicorp/awscc"));
        assert!(!list.allows("registry.terraform.io/acme/db"));
        assert_eq!(
            list.cli_config(),
            "provider_installation {\n  direct {\n    include = \
             [\"example.com/acme/*\",\"registry.terraform.io/hashicorp/aws\"]\n  }\n}\n"
        );
        assert!(ProviderAllowList::new(&["a/b/c/d".into()], Vec::new()).is_err());
        assert!(ProviderAllowList::new(&["*".into()], Vec::new()).is_err());
    }

    #[test]
    fn an_empty_list_installs_nothing_and_a_mirror_is_the_only_source() {
        assert_eq!(
            ProviderAllowList::default().cli_config(),
            "provider_installation {\n}\n"
        );
        let mirrored = ProviderAllowList::new(
            &["hashicorp/aws".into()],
            vec!["/opt/tf plugins".into(), "/srv/more".into()],
        )
        .unwrap();
        let block = |path: &str| {
            format!(
                "  filesystem_mirror {{\n    path    = \"{path}\"\n    \
                 include = [\"registry.terraform.io/hashicorp/aws\"]\n  }}\n"
            )
        };
        assert_eq!(
            mirrored.cli_config(),
            format!(
                "provider_installation {{\n{}{}}}\n",
                block("/opt/tf plugins"),
                block("/srv/more")
            )
        );
    }
}
