//! Storage with etcd semantics: a revisioned key-value store with compare-and-swap,
//! consistent paged reads at a fixed revision, watches from a revision, and compaction.
//!
//! The API server keeps every object as JSON under `/registry/<group>/<plural>/<ns>/<name>`
//! and uses the store revision as the object's `resourceVersion`. See `STORAGE.md` next to
//! this file for the exact contract both backends implement.

mod compactor;
mod continue_token;
mod embedded;
mod error;
mod etcd;
mod instrumented;
mod location;
mod store;

pub use compactor::spawn_compactor;
pub use continue_token::ContinueToken;
pub use embedded::{EmbeddedOptions, EmbeddedStore};
pub use error::StoreError;
pub use etcd::{EtcdStore, EtcdTls};
pub use instrumented::{InstrumentedStore, Observation, Observer};
pub use location::StoreLocation;
pub use store::{KeyValue, ListOptions, ListPage, Revision, Store, WatchEvent, WatchStream};
