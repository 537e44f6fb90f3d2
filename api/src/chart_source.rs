//! Admission of a `helm_chart` component's source ([`HelmSource`]): a local chart
//! directory, a chart in an OCI registry (`oci://HOST/REPOSITORY` at `version`), or a
//! chart of an HTTP chart repository (`repository` URL, `chart` its name, `version`).
//! The runner copies a chart of a registry or repository into the install's registry
//! (`destination`) by digest and pulls it from there, authenticating as
//! `container_image` does (`sourceAuth`, `destinationAuth`).
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
        let oci = self.chart.strip_prefix(OCI_SCHEME);
        if oci.is_none()
            && let Some(url) = &self.repository
        {
            if let Some(why) = url_error(url) {
                errors.push(FieldError::invalid(format!("{field}.repository"), url, why));
            }
            if let Some(why) = chart_name_error(&self.chart) {
                errors.push(FieldError::invalid(
                    format!("{field}.chart"),
                    &self.chart,
                    why,
                ));
            }
            if self.version.as_deref().is_some_and(|v| v.contains('@')) {
                errors.push(FieldError::invalid(
                    format!("{field}.version"),
                    self.version.as_deref().unwrap_or_default(),
                    "a repository's chart is checked against its index's digest: name a version only",
                ));
            }
            if self.source_auth.as_ref().is_some_and(|a| a.ecr) {
                errors.push(FieldError::forbidden(
                    format!("{field}.sourceAuth.ecr"),
                    "ecr is for registries, not chart repositories",
                ));
            }
            errors.extend(self.copied_at(field));
            return errors;
        }
        let Some(repository) = oci else {
            for (name, set) in [
                ("destination", self.destination.is_some()),
                ("sourceAuth", self.source_auth.is_some()),
                ("destinationAuth", self.destination_auth.is_some()),
            ] {
                if set {
                    errors.push(FieldError::forbidden(
                        format!("{field}.{name}"),
                        "only a chart from an OCI registry (oci://…) or a chart repository is \
                         copied into the install's registry",
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
        errors.extend(self.copied_at(field));
        errors
    }

    /// Field errors of what a chart copied into the install's registry needs: a
    /// version, a destination, credentials by reference.
    fn copied_at(&self, field: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        match &self.version {
            None => errors.push(FieldError::required(
                format!("{field}.version"),
                "a chart from a registry or repository is pulled at a version",
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

/// Why `url` is not an `https://` or `http://` URL with a host; `None` when it is (or is
/// a template).
pub fn url_error(url: &str) -> Option<&'static str> {
    if is_template(url) {
        return None;
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !rest.contains(char::is_whitespace) =>
        {
            None
        }
        _ => Some("must be an https:// (or, on loopback, http://) URL"),
    }
}

/// Why `name` is not a chart name of a repository (`[a-z0-9]`, `.`, `_`, `-`, no `/`).
pub fn chart_name_error(name: &str) -> Option<&'static str> {
    let ok = !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        });
    (!ok && !is_template(name)).then_some(
        "a repository's chart is named by its name in the index (a-z, 0-9, `.`, `_`, `-`)",
    )
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
    fn a_repository_chart_names_a_version_and_a_destination() {
        let mut http = oci();
        http.chart = "shop".into();
        http.repository = Some("https://charts.vendor.example/stable".into());
        assert_eq!(errors(&http), []);
        http.chart = "stable/shop".into();
        http.repository = Some("ftp://charts.vendor.example".into());
        http.version = Some(format!("1.2.0@sha256:{}", "a".repeat(64)));
        http.destination = None;
        http.source_auth = Some(RegistryAuth {
            ecr: true,
            ..RegistryAuth::default()
        });
        assert_eq!(
            errors(&http),
            [
                ("spec.helm.repository".into(), FieldErrorKind::Invalid),
                ("spec.helm.chart".into(), FieldErrorKind::Invalid),
                ("spec.helm.version".into(), FieldErrorKind::Invalid),
                ("spec.helm.sourceAuth.ecr".into(), FieldErrorKind::Forbidden),
                ("spec.helm.destination".into(), FieldErrorKind::Required),
            ]
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
