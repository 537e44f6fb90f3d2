//! What the reconcilers read instead of listing: in-memory views kept up to date by a
//! watch each (App releases with their objects, Plans and DriftReports by install).

pub mod app_cache;
pub mod plan_index;
