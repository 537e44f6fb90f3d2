//! Finalizers Outpost's controllers put on objects whose removal needs their work first.

/// On every Install: its teardown and deprovision Plans run before it goes.
pub const INSTALL: &str = "outpost.dev/install";
