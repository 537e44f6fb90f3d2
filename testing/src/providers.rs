//! Terraform provider mirrors for tests of the runner's hold on vendor code: providers
//! whose code, when terraform starts it, appends a line to [`MARKER`] in its working
//! directory (the module directory, the one place the sandbox lets it write), so a test
//! can tell whether vendor code ran.
//!
//! * `acme/evil` 1.0.0: appends and exits: it is no provider, a `terraform plan` that
//!   starts it fails;
//! * `acme/marked` 1.0.0: appends, then runs the real `hashicorp/aws` provider of the
//!   machine's mirror ([`aws_plugins`]), so a module whose `aws` local name is sourced
//!   from `acme/marked` plans and applies offline (`aws_partition` and a provider with
//!   `skip_*` settings call no API).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// The file the providers append to, in their working directory.
pub const MARKER: &str = "provider-ran";

/// The machine's filesystem mirror holding `hashicorp/aws`: `$OUTPOST_TF_PLUGINS`, else
/// `/opt/tf-plugins`. Panics when it holds no aws provider: the tests need it.
pub fn aws_plugins() -> PathBuf {
    let mirror = PathBuf::from(
        std::env::var("OUTPOST_TF_PLUGINS").unwrap_or_else(|_| "/opt/tf-plugins".into()),
    );
    assert!(
        mirror.join("registry.terraform.io/hashicorp/aws").is_dir(),
        "{} holds no hashicorp/aws provider (set OUTPOST_TF_PLUGINS to a mirror that does)",
        mirror.display()
    );
    mirror
}

/// The aws provider's executable in [`aws_plugins`].
fn aws_binary() -> PathBuf {
    let mut pending = vec![aws_plugins().join("registry.terraform.io/hashicorp/aws")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("the mirror is readable")
            .flatten()
        {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                pending.push(path);
            } else if name.starts_with("terraform-provider-aws") {
                return path;
            }
        }
    }
    panic!(
        "no terraform-provider-aws executable in {}",
        aws_plugins().display()
    );
}

fn provider(mirror: &Path, name: &str, script: &str) {
    let dir = mirror.join(format!(
        "registry.terraform.io/acme/{name}/1.0.0/linux_amd64"
    ));
    std::fs::create_dir_all(&dir).expect("mirror directory");
    let path = dir.join(format!("terraform-provider-{name}_v1.0.0"));
    std::fs::write(&path, script).expect("provider script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Makes the mirror of `acme/evil` and `acme/marked` in `dir/mirror`. The runner needs
/// [`aws_plugins`] as a mirror too, for `acme/marked` to run the aws provider.
pub fn marker_mirror(dir: &Path) -> PathBuf {
    let mirror = dir.join("mirror");
    let append = format!("echo \"vendor code ran\" >> \"$PWD/{MARKER}\"");
    provider(&mirror, "evil", &format!("#!/bin/sh\n{append}\nexit 1\n"));
    provider(
        &mirror,
        "marked",
        &format!("#!/bin/sh\n{append}\nexec {:?} \"$@\"\n", aws_binary()),
    );
    mirror
}

/// How many times vendor code ran in `module_dir`.
pub fn marker_lines(module_dir: &Path) -> usize {
    std::fs::read_to_string(module_dir.join(MARKER))
        .unwrap_or_default()
        .lines()
        .count()
}

/// A module using `acme/evil`.
pub const EVIL_MODULE: &str = r#"
terraform {
  required_providers {
    evil = { source = "acme/evil", version = "1.0.0" }
  }
}
resource "evil_thing" "x" {}
resource "terraform_data" "y" {}
"#;

/// A module using the aws provider from `source` (`hashicorp/aws`, or `acme/marked`
/// under the local name `aws`): output `partition` is `aws` once applied.
pub fn aws_module(source: &str) -> String {
    format!(
        r#"
terraform {{
  required_providers {{
    aws = {{ source = "{source}" }}
  }}
}}
provider "aws" {{
  region                      = "eu-west-1"
  access_key                  = "AKIDEXAMPLE"
  secret_key                  = "not-a-real-secret"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}}
data "aws_partition" "current" {{}}
resource "terraform_data" "partition" {{
  input = data.aws_partition.current.partition
}}
output "partition" {{
  value = terraform_data.partition.output
}}
"#
    )
}

/// A customer's local policy file (input `static`) in package `outpost.PACKAGE` denying
/// every provider but the built-in one and `allowed` (full source addresses), with the
/// message `provider SOURCE is not on the customer's list`.
pub fn provider_policy(package: &str, allowed: &[&str]) -> String {
    let allowed = serde_json::to_string(allowed).expect("strings serialise");
    let allowed = format!(
        "{{{}}}",
        allowed.trim_start_matches('[').trim_end_matches(']')
    );
    format!(
        r#"# outpost:inputs static
package outpost.{package}

allowed := {allowed}

deny contains msg if {{
  some p in input.providers
  not p.builtin
  not allowed[p.source]
  msg := sprintf("provider %s is not on the customer's list", [p.source])
}}
"#
    )
}
