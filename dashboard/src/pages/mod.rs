//! The dashboard's pages.

pub mod fleet;
pub mod install;
pub mod layout;
pub mod login;
pub mod plan;
pub mod policies;
pub mod rollouts;
