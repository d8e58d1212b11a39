//! Errors of the backup data path, each with a category the caller turns
//! into a retry decision, a condition reason or an exit status.
//!
//! No variant carries a credential: messages from store clients pass
//! through the [`crate::credentials`] redactor before they are stored here.
//!
//! Each message is the whole story (the underlying error included), so
//! variants expose their cause as a field, not as an error `source()`:
//! printing a chain would repeat it.

use std::path::PathBuf;

use crate::encoding::CodecError;
use crate::encryption::EncryptionError;

/// What the caller should do about an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Likely to pass when repeated (network, timeouts, an etcd election).
    Transient,
    /// Wrong input or configuration: a bad URI, missing or wrong
    /// credentials, a missing bucket. Repeating will not help.
    Configuration,
    /// Data does not match what was recorded (checksum, size, a truncated
    /// snapshot). Never retried silently: someone must look.
    Integrity,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid object storage URI {uri:?}: {reason}")]
    InvalidUri { uri: String, reason: String },

    /// A store client could not be built (bad option values).
    #[error("cannot open object storage for {uri}: {message}")]
    Open { uri: String, message: String },

    /// A store operation failed. `message` is already scrubbed of secrets.
    #[error("object storage {operation} of {uri} failed{}: {message}", kind.in_parentheses())]
    Store {
        operation: &'static str,
        uri: String,
        kind: StoreErrorKind,
        message: String,
    },

    /// Refusing to overwrite an artifact: two backups named the same.
    #[error("{uri} already exists; a backup of this cluster was taken in the same second")]
    AlreadyExists { uri: String },

    #[error("etcd {operation} failed: {cause}")]
    Etcd {
        operation: &'static str,
        cause: dkv_etcd::Error,
    },

    /// The chains in the destination record another etcd cluster of the
    /// same name (one that was deleted and created again): continuing them
    /// would mix two histories.
    #[error(
        "{location} holds the continuous backup of another etcd cluster named like this one (cluster ID {recorded}; this one is {running}): record this cluster elsewhere (another spec.backup.destination.uri, such as a new prefix) or move the old chains away; they stay restorable with spec.bootstrap.restore"
    )]
    ForeignChain {
        location: String,
        recorded: String,
        running: String,
    },

    #[error("no etcd member can serve a snapshot: {}", reasons.join("; "))]
    NoHealthyMember { reasons: Vec<String> },

    /// A snapshot that does not end with the sha256 of its own content:
    /// streamed by etcd (truncated or corrupted in flight; nothing was
    /// stored), or fetched for a restore (not an etcd snapshot, or damaged
    /// before it was stored; nothing was kept).
    #[error("the snapshot from {origin} is not intact: {reason}")]
    CorruptSnapshot { origin: String, reason: String },

    #[error(
        "sha256 of {uri} is {actual}, expected {expected}; the artifact is corrupt or not the recorded one"
    )]
    ChecksumMismatch {
        uri: String,
        expected: String,
        actual: String,
    },

    /// A continuous backup segment that cannot be read as one.
    #[error("continuous backup segment {uri} is unreadable: {reason}")]
    InvalidSegment { uri: String, reason: String },

    /// No expected checksum was given and the artifact has no sidecar to
    /// read it from.
    #[error(
        "no expected sha256 for {uri}: pass the one recorded in its DistributedKVBackup, or restore an artifact dkv wrote (it has a {uri}.json sidecar)"
    )]
    NoChecksum { uri: String },

    /// An object that could not be encoded or decoded: a missing or wrong
    /// key, or content that does not decrypt or decompress.
    #[error("{uri}: {cause}")]
    Codec { uri: String, cause: CodecError },

    #[error("the artifact record {uri} is unreadable: {message}")]
    BadSidecar { uri: String, message: String },

    #[error("{operation} {}: {cause}", path.display())]
    Io {
        operation: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error("{tool} snapshot restore failed ({status}): {stderr}")]
    RestoreTool {
        tool: String,
        status: String,
        stderr: String,
    },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Asked to stop (the pod is terminating) before the backup completed;
    /// the upload was aborted.
    #[error("stopped before the backup completed; the upload was aborted and nothing was stored")]
    Cancelled,
}

/// The store failures callers treat differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    NotFound,
    /// Credentials missing, wrong or lacking permission.
    AccessDenied,
    Other,
}

impl StoreErrorKind {
    /// The kind as error messages show it: " (access denied)"; nothing for
    /// [`StoreErrorKind::Other`], whose message says it all.
    fn in_parentheses(self) -> &'static str {
        match self {
            StoreErrorKind::NotFound => " (not found)",
            StoreErrorKind::AccessDenied => " (access denied)",
            StoreErrorKind::Other => "",
        }
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::InvalidUri { .. }
            | Error::Open { .. }
            | Error::AlreadyExists { .. }
            | Error::NoChecksum { .. }
            | Error::InvalidArgument(_)
            | Error::ForeignChain { .. } => Category::Configuration,
            Error::Store { kind, .. } => match kind {
                StoreErrorKind::NotFound | StoreErrorKind::AccessDenied => Category::Configuration,
                StoreErrorKind::Other => Category::Transient,
            },
            Error::Etcd { cause, .. } => {
                if cause.is_retryable() {
                    Category::Transient
                } else {
                    Category::Configuration
                }
            }
            Error::Codec { cause, .. } => match cause {
                CodecError::Encryption(
                    EncryptionError::MissingKey { .. } | EncryptionError::BadKey(_),
                ) => Category::Configuration,
                CodecError::Encryption(EncryptionError::Random) => Category::Transient,
                _ => Category::Integrity,
            },
            Error::NoHealthyMember { .. } | Error::Io { .. } | Error::Cancelled => {
                Category::Transient
            }
            Error::CorruptSnapshot { .. }
            | Error::ChecksumMismatch { .. }
            | Error::InvalidSegment { .. }
            | Error::BadSidecar { .. }
            | Error::RestoreTool { .. } => Category::Integrity,
        }
    }

    pub(crate) fn codec(uri: impl ToString) -> impl FnOnce(CodecError) -> Self {
        let uri = uri.to_string();
        move |cause| Error::Codec { uri, cause }
    }

    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |cause| Error::Io {
            operation,
            path,
            cause,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
