//! The object machinery the generic API server and Outpost's API types share, like
//! Kubernetes' `apimachinery`: field errors and the `Validate` trait ([`validation`],
//! with DNS-name and identifier rules), content hashes ([`hash`]), fencing tokens for
//! leader-elected writers ([`fence`]) and files only their owner may read
//! ([`secret_file`]). It knows no resource kind. The design: `docs/ARCHITECTURE.md`.

pub mod fence;
pub mod hash;
pub mod secret_file;
pub mod validation;

pub use hash::{content_hash, is_content_hash};
pub use validation::{FieldError, FieldErrorKind, Validate};
