//! What the reconcilers read instead of listing: in-memory views kept up to date by a
//! watch each (App releases with their objects, Installs, Plans and DriftReports by
//! install).

pub mod app_cache;
pub mod installs;
pub mod plan_index;
