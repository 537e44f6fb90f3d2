//! Admission of a `helm_chart` component's source ([`HelmSource`]): a local chart
//! directory, or a chart in an OCI registry (`oci://HOST/REPOSITORY` at `version`)
//! that the runner copies into the install's registry (`destination`) by digest and
//! pulls from there, authenticating as `container_image` does (`sourceAuth`,
//! `destinationAuth`).
//!
//! Fields holding a template (`{{ … }}`) are checked once rendered, by the runner.

use crate::FieldError;
use crate::component::HelmSource;

/// The scheme of a chart in an OCI registry.
pub const OCI_SCHEME: &str = "oci://";

impl HelmSource {
    /// Field errors of the source at `field` (`spec.helm`).
    pub fn validate_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let Some(repository) = self.chart.strip_prefix(OCI_SCHEME) else {
            for (name, set) in [
                ("destination", self.destination.is_some()),
                ("sourceAuth", self.source_auth.is_some()),
                ("destinationAuth", self.destination_auth.is_some()),
            ] {
                if set {
                    errors.push(FieldError::forbidden(
                        format!("{field}.{name}"),
                        "only a chart from an OCI registry (oci://…) is copied into the \
                         install's registry",
                    ));
                }
            }
            return errors;
        };
        if let Some(why) = repository_error(repository) {
            errors.push(FieldError::invalid(
                format!("{field}.chart"),
                &self.chart,
                why,
            ));
        }
        if self.repository.is_some() {
            errors.push(FieldError::forbidden(
                format!("{field}.repository"),
                "an oci:// chart names its registry itself",
            ));
        }
        match &self.version {
            None => errors.push(FieldError::required(
                format!("{field}.version"),
                "an oci:// chart is pulled at a version (its tag)",
            )),
            Some(version) => {
                if let Some(why) = version_error(version) {
                    errors.push(FieldError::invalid(
                        format!("{field}.version"),
                        version,
                        why,
                    ));
                }
            }
        }
        match &self.destination {
            None => errors.push(FieldError::required(
                format!("{field}.destination"),
                "an oci:// chart is copied into the install's registry, and pulled from there",
            )),
            Some(destination) => {
                if let Some(why) = repository_error(destination) {
                    errors.push(FieldError::invalid(
                        format!("{field}.destination"),
                        destination,
                        why,
                    ));
                }
            }
        }
        for (name, auth) in [
            ("sourceAuth", &self.source_auth),
            ("destinationAuth", &self.destination_auth),
        ] {
            if let Some(auth) = auth {
                errors.extend(auth.validate_at(&format!("{field}.{name}")));
            }
        }
        errors
    }
}

fn is_template(text: &str) -> bool {
    text.contains("{{")
}

/// Why `text` is not `HOST[:PORT]/NAME` (NAME: lower-case path components joined by
/// `.`, `_`, `-`), with no tag or digest; `None` when it is (or is a template).
pub fn repository_error(text: &str) -> Option<&'static str> {
    if is_template(text) {
        return None;
    }
    let Some((host, name)) = text.split_once('/') else {
        return Some("must be HOST/REPOSITORY");
    };
    let (hostname, port) = match host.rsplit_once(':') {
        Some((hostname, port)) => (hostname, Some(port)),
        None => (host, None),
    };
    let host_ok = !hostname.is_empty()
        && hostname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !host_ok {
        return Some("the registry must be a host name or address, with an optional :port");
    }
    if name.contains(['@', ':']) {
        return Some("names no tag or digest: the version goes in `version`");
    }
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            })
            && c.starts_with(|ch: char| ch.is_ascii_alphanumeric())
            && c.ends_with(|ch: char| ch.is_ascii_alphanumeric())
    };
    if !name.split('/').all(component_ok) || name.len() > 255 {
        return Some("the repository must be lower-case path components (a-z, 0-9, `.`, `_`, `-`)");
    }
    None
}

/// Why `version` is not a chart version (`1.2.0`, `1.2.0+build`: Helm stores `+` as
/// `_` in the tag), optionally pinned `@sha256:<64 hex>`; `None` when it is.
pub fn version_error(version: &str) -> Option<&'static str> {
    if is_template(version) {
        return None;
    }
    let (tag, digest) = match version.split_once('@') {
        Some((tag, digest)) => (tag, Some(digest)),
        None => (version, None),
    };
    let tag_ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'));
    if !tag_ok {
        return Some("must be a chart version (letters, digits, `.`, `_`, `-`, `+`)");
    }
    if let Some(digest) = digest {
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some("pins a digest that is not sha256:<64 hex>");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FieldErrorKind, RegistryAuth};

    fn oci() -> HelmSource {
        HelmSource {
            chart: "oci://registry.vendor.example/charts/shop".into(),
            repository: None,
            version: Some("1.2.0".into()),
            namespace: None,
            values: Default::default(),
            destination: Some("{{ inputs.registry }}/acme/shop".into()),
            source_auth: None,
            destination_auth: None,
        }
    }

    fn errors(source: &HelmSource) -> Vec<(String, FieldErrorKind)> {
        source
            .validate_at("spec.helm")
            .into_iter()
            .map(|e| (e.field, e.kind))
            .collect()
    }

    #[test]
    fn an_oci_chart_names_a_version_and_a_destination() {
        assert_eq!(errors(&oci()), []);
        let mut pinned = oci();
        pinned.version = Some(format!("1.2.0+b1@sha256:{}", "a".repeat(64)));
        pinned.destination = Some("127.0.0.1:5000/acme/shop".into());
        assert_eq!(errors(&pinned), []);
        let mut missing = oci();
        missing.version = None;
        missing.destination = None;
        missing.repository = Some("https://charts.example".into());
        assert_eq!(
            errors(&missing),
            [
                ("spec.helm.repository".into(), FieldErrorKind::Forbidden),
                ("spec.helm.version".into(), FieldErrorKind::Required),
                ("spec.helm.destination".into(), FieldErrorKind::Required),
            ]
        );
    }

    #[test]
    fn malformed_references_are_refused_naming_the_field() {
        for chart in [
            "oci://",
            "oci://registry.example",
            "oci://registry.example/Charts/shop",
            "oci://registry.example/charts/shop:1.2.0",
            "oci://registry.example/charts//shop",
            "oci://bad host/charts/shop",
            "oci://registry.example:port/shop",
        ] {
            let mut source = oci();
            source.chart = chart.into();
            assert_eq!(
                errors(&source),
                [("spec.helm.chart".into(), FieldErrorKind::Invalid)],
                "{chart}"
            );
        }
        for version in ["", "1.2 0", "-1", "1.2.0@sha256:abc", "1.2.0@md5:x"] {
            let mut source = oci();
            source.version = Some(version.into());
            assert_eq!(
                errors(&source),
                [("spec.helm.version".into(), FieldErrorKind::Invalid)],
                "{version}"
            );
        }
        let mut source = oci();
        source.destination = Some("acme-shop".into());
        assert_eq!(
            errors(&source),
            [("spec.helm.destination".into(), FieldErrorKind::Invalid)]
        );
        source.destination = Some("127.0.0.1:5000/acme/shop".into());
        source.source_auth = Some(RegistryAuth {
            username: Some("vendor".into()),
            password: Some("hunter2".into()),
            ..RegistryAuth::default()
        });
        assert_eq!(
            errors(&source),
            [(
                "spec.helm.sourceAuth.password".into(),
                FieldErrorKind::Invalid
            )]
        );
    }

    #[test]
    fn a_local_chart_has_no_registry_fields() {
        let mut local = oci();
        local.chart = "/charts/shop".into();
        local.version = None;
        local.source_auth = Some(RegistryAuth {
            ecr: true,
            ..RegistryAuth::default()
        });
        assert_eq!(
            errors(&local),
            [
                ("spec.helm.destination".into(), FieldErrorKind::Forbidden),
                ("spec.helm.sourceAuth".into(), FieldErrorKind::Forbidden),
            ]
        );
    }
}
