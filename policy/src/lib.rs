//! Outpost's policies: OPA-compatible Rego v1 modules with `deny` and `warn` sets
//! (conftest's convention), evaluated with `regorus`.
//!
//! Compile a module once with [`compile`], then evaluate it against as many input
//! documents as needed with [`evaluate`]. What each [`PolicyInput`] kind looks like
//! to a policy is described in [`input`].
//!
//! Where policies are enforced in the design: `docs/ARCHITECTURE.md` ("Where policy is
//! enforced").
//!
//! ```no_run
//! use outpost_api::{Enforcement, PolicyInput};
//! use outpost_policy::{PolicyMeta, compile, evaluate};
//!
//! let module = "package outpost.example\n\ndeny contains \"no\" if input.bad\n";
//! let compiled = compile("example.rego", module)?;
//! let meta = PolicyMeta {
//!     name: "example".into(),
//!     inputs: vec![PolicyInput::Terraform],
//!     enforcement: Enforcement::Deny,
//! };
//! let verdicts = evaluate(
//!     &[(&meta, &compiled)],
//!     PolicyInput::Terraform,
//!     &serde_json::json!({"bad": true}),
//! );
//! assert!(verdicts[0].denied());
//! # Ok::<(), outpost_policy::CompileError>(())
//! ```

mod compile;
mod evaluate;
pub mod input;
mod scope;

pub use compile::{CompileError, CompiledPolicy, EvaluationError, Findings, compile};
pub use evaluate::{PolicyMeta, PolicyVerdict, evaluate};
pub use outpost_api::{Enforcement, PolicyInput};
pub use scope::{applies_to_install, selects};
