//! Outpost's controllers: independent reconcilers, one concern each, built on
//! `kube::runtime::Controller` against Outpost's API server, and the pure logic they
//! share (templates, the role precedence chain, app validation, install stacks).

pub mod install_stack;
