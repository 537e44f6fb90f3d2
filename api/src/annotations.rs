//! Annotation keys Outpost sets on the objects it makes.

/// On a drift remediation Plan: the DriftReport it answers.
pub const DRIFT_REPORT: &str = "outpost.dev/drift-report";

/// On a Kubernetes Secret the runner writes from an install's inputs: the inputs it holds.
pub const SECRETS: &str = "outpost.dev/secrets";
