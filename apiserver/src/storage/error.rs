use super::Revision;

/// Why a store operation failed.
///
/// The variants map one-to-one onto Kubernetes statuses: `NotFound` → 404,
/// `AlreadyExists` and `Conflict` → 409, `Expired` → 410, `FutureRevision` → 504.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The key does not exist.
    #[error("key {key} not found")]
    NotFound {
        /// The key that was asked for.
        key: String,
    },
    /// A create found the key already present.
    #[error("key {key} already exists")]
    AlreadyExists {
        /// The key that was to be created.
        key: String,
    },
    /// A compare-and-swap found another revision than the one expected.
    #[error("key {key} was modified: expected revision {expected}, found {actual}")]
    Conflict {
        /// The key that was to be written.
        key: String,
        /// The revision the caller expected.
        expected: Revision,
        /// The key's current modification revision.
        actual: Revision,
    },
    /// The revision asked for has been compacted away (Kubernetes 410 Gone).
    #[error("revision {requested} has been compacted")]
    Expired {
        /// The revision the read or watch wanted.
        requested: Revision,
    },
    /// The revision asked for is newer than the store's current revision.
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision the read wanted.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// A continue token that this store did not issue for this prefix.
    #[error("invalid continue token: {reason}")]
    InvalidContinue {
        /// What is wrong with it.
        reason: String,
    },
    /// The backend failed (I/O, network, corruption).
    #[error("storage backend failed")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// Wraps a backend error.
    pub fn backend(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        StoreError::Backend(err.into())
    }
}
