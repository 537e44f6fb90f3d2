//! Terraform state in the customer's account: the install stack's S3 bucket
//! (`--state-bucket`), one object per entity, locked with S3-native lock files.
//!
//! The runner writes [`BACKEND_FILE`] into the module directory before every `terraform
//! init`: a `backend "s3"` block with the bucket, the entity's key and `use_lockfile`.
//! Terraform's S3 backend takes the credentials and region from its environment, which
//! holds the Plan's assumed role, so the state is read and written under that role and
//! nothing else (the bucket policy refuses every other principal). The same code runs
//! against an emulator; only [`StateBackend::endpoint`] (`--aws-endpoint`) adds the
//! `endpoints` override and path-style addressing.
//!
//! A module directory that still holds local state (a runner given `--state-bucket`
//! after it kept state on its disk) is refused, naming the file and how to move it
//! (`terraform init -migrate-state` there, under a lifecycle role): copying it
//! unasked over whatever the bucket holds could replace newer state with older.

use super::TerraformError;
use outpost_api::Operation;
use serde_json::{Value, json};
use std::path::Path;

/// The generated backend configuration in the module directory (JSON syntax, so no
/// value needs HCL quoting). Inline files may not use the name.
pub const BACKEND_FILE: &str = "outpost_backend.tf.json";

/// The install's state bucket, as the runner was told (`--state-bucket`,
/// `--aws-endpoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateBackend {
    /// The bucket's name (the install stack's `StateBucketName`).
    pub bucket: String,
    /// An endpoint for S3 and STS other than AWS's (an emulator); `None` in production.
    pub endpoint: Option<String>,
}

impl StateBackend {
    /// The object holding one entity's state: `sandbox/terraform.tfstate` for the
    /// sandbox's operations (provision, reprovision, deprovision),
    /// `components/NAME/terraform.tfstate` for a component's.
    pub fn key(operation: Operation, entity: &str) -> String {
        match operation {
            Operation::Provision | Operation::Reprovision | Operation::Deprovision => {
                "sandbox/terraform.tfstate".to_owned()
            }
            _ => format!("components/{entity}/terraform.tfstate"),
        }
    }

    /// The contents of [`BACKEND_FILE`] for state object `key`.
    pub fn document(&self, key: &str) -> Value {
        let mut s3 = json!({
            "bucket": self.bucket,
            "key": key,
            "encrypt": true,
            "use_lockfile": true,
        });
        if let Some(endpoint) = &self.endpoint {
            s3["endpoints"] = json!({"s3": endpoint, "sts": endpoint});
            s3["use_path_style"] = json!(true);
        }
        json!({"terraform": {"backend": {"s3": s3}}})
    }

    /// Writes [`BACKEND_FILE`] for `key` into the module directory `dir`, then refuses
    /// a `dir` that holds local state ([`TerraformError::LocalState`]): the bucket would
    /// hide it. (Terraform empties the local file when it migrates it.)
    pub async fn configure(&self, dir: &Path, key: &str) -> Result<(), TerraformError> {
        let io = |what: String| move |source| TerraformError::Io { what, source };
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(io(format!("creating {}", dir.display())))?;
        let path = dir.join(BACKEND_FILE);
        let text = serde_json::to_vec_pretty(&self.document(key)).unwrap_or_default();
        tokio::fs::write(&path, text)
            .await
            .map_err(io(format!("writing {}", path.display())))?;
        let local = dir.join("terraform.tfstate");
        match tokio::fs::metadata(&local).await {
            Ok(meta) if meta.len() > 0 => Err(TerraformError::LocalState {
                path: local.display().to_string(),
                bucket: self.bucket.clone(),
                key: key.to_owned(),
            }),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(format!("reading {}", local.display()))(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_entity_has_its_object_and_only_an_emulator_changes_the_endpoints() {
        assert_eq!(
            StateBackend::key(Operation::Deploy, "database"),
            "components/database/terraform.tfstate"
        );
        assert_eq!(
            StateBackend::key(Operation::Teardown, "database"),
            "components/database/terraform.tfstate"
        );
        for operation in [
            Operation::Provision,
            Operation::Reprovision,
            Operation::Deprovision,
        ] {
            assert_eq!(
                StateBackend::key(operation, "sandbox"),
                "sandbox/terraform.tfstate"
            );
        }
        let aws = StateBackend {
            bucket: "outpost-acme-statebucket-1x2y".into(),
            endpoint: None,
        };
        assert_eq!(
            aws.document("sandbox/terraform.tfstate"),
            json!({"terraform": {"backend": {"s3": {
                "bucket": "outpost-acme-statebucket-1x2y",
                "key": "sandbox/terraform.tfstate",
                "encrypt": true,
                "use_lockfile": true,
            }}}})
        );
        let emulator = StateBackend {
            endpoint: Some("http://127.0.0.1:5000".into()),
            ..aws
        };
        let document = emulator.document("k");
        let s3 = &document["terraform"]["backend"]["s3"];
        assert_eq!(
            s3["endpoints"],
            json!({"s3": "http://127.0.0.1:5000", "sts": "http://127.0.0.1:5000"})
        );
        assert_eq!(s3["use_path_style"], true);
        assert_eq!(s3["use_lockfile"], true);
    }
}
