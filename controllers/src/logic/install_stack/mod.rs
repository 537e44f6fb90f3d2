#![doc = include_str!("README.md")]

mod audit_anchor;
mod inputs;
mod logical_id;
mod render;
mod roles;
mod runner;
mod runner_token;
mod secrets;
mod stack_template;
mod state_bucket;

pub use render::{
    RenderRoleName, StackError, StackOptions, render_install_stack, role_external_id,
};
pub use runner::{
    DEFAULT_TERRAFORM_PROVIDERS, RUNNER_STATE_DIR, SERVER_URL_PATTERN, TERRAFORM_PROVIDERS_PATTERN,
};
pub use runner_token::TOKEN_PATTERN;

#[cfg(test)]
mod tests;
