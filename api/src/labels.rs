//! Label keys Outpost sets on the objects it makes, and selects them by. Every crate
//! (controllers, runner, API server, CLI, tests) uses these; none declares its own.

/// The Install an object belongs to: on Plans, Runners, DriftReports and AuditEvents.
/// The API server scopes a runner's reads and watches by it.
pub const INSTALL: &str = "outpost.dev/install";

/// The component a DriftReport is about.
pub const COMPONENT: &str = "outpost.dev/component";
