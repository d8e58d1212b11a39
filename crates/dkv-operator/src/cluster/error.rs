//! Errors of the cluster controller, each with the category that decides
//! what happens next.

use std::time::Duration;

use kube::runtime::finalizer;

use super::validate::InvalidSpec;

/// What the controller does after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// Might succeed on retry (API hiccup, conflict): requeue with
    /// exponential backoff and jitter.
    Transient,
    /// Needs a human (an invalid spec): report in status, wait for a change.
    Permanent,
    /// Expected to clear by itself soon (a cache not yet synced): short,
    /// bounded requeue.
    Waiting,
}

impl Category {
    /// Label value for metrics and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Transient => "transient",
            Category::Permanent => "permanent",
            Category::Waiting => "waiting",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] InvalidSpec),

    #[error("{what} not synced yet")]
    CacheNotReady { what: &'static str },

    /// The result of a backup verification could not be recorded.
    #[error("recording a backup verification: {0}")]
    Verification(String),

    /// Deletion waits for something to finish first (its finalizer stays).
    #[error("waiting for {what}")]
    CleanupWaiting { what: String },

    /// The StatefulSet deleted to be re-created has not gone yet.
    #[error("waiting for StatefulSet {name} to release its pods before it is re-created")]
    Recreating { name: String },

    #[error("failed to apply {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("failed to read {kind} {name}: {source}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },

    /// NOSPACE came back soon after dkv recovered from it: the live data
    /// itself fills the quota, and compacting and defragmenting again would
    /// only block the members.
    #[error("{message}")]
    NoSpaceRecurring { message: String },

    /// The running cluster a `spec.bootstrap.join` names refused what the
    /// take-over needs of it, for a reason the spec must fix (its
    /// authentication, say).
    #[error("{message}")]
    JoinRefused { message: String },

    /// `spec.bootstrap.restore` names a backup that cannot be restored (yet).
    #[error("{message}")]
    RestoreSource {
        message: String,
        /// The backup is still being taken: the restore starts when it is done.
        waiting: bool,
    },

    /// A standby's roles, leases or revision could not be read or changed,
    /// or its promotion recorded (`transient`); or what it keeps of its
    /// roles cannot be read back.
    #[error("standby: {message}")]
    Standby { message: String, transient: bool },

    /// The cluster's PodDisruptionBudget allows no disruption now (a member
    /// is away: a node drain, an eviction, a member not Ready), so a member
    /// that is serving is not restarted until it does.
    #[error(
        "waiting to restart member pod {pod}: PodDisruptionBudget {budget} allows no disruption now ({why}); the restart goes on once every member is back"
    )]
    DisruptionBudget {
        pod: String,
        budget: String,
        why: String,
    },

    #[error("failed to delete {kind} {name}: {source}")]
    Delete {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("failed to update status of {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("failed to clean up {name}: {source}")]
    Cleanup {
        name: String,
        #[source]
        source: kube::Error,
    },

    #[error("etcd refused {step} for member {member}: {source}")]
    Etcd {
        step: &'static str,
        member: String,
        #[source]
        source: dkv_etcd::Error,
    },

    /// The cluster runs with TLS but its CA Secret is gone: a new CA would
    /// make the members refuse each other, so it is not replaced.
    #[error(
        "the TLS CA Secret {secret} is missing; restore it (e.g. from your Secret backups) — dkv does not issue a new CA for running members, which would then refuse each other"
    )]
    TlsCaMissing { secret: String },

    #[error("the Secret {secret} has no valid {key:?}; {fix}")]
    SecretInvalid {
        secret: String,
        key: &'static str,
        fix: &'static str,
    },

    /// A certificate dkv did not issue (`Provided`, or cert-manager's)
    /// cannot be used: members would refuse it, or it them.
    #[error(
        "the TLS Secret {secret} ({setting}) cannot be used: {problem}; dkv looks at it again every 30 s"
    )]
    TlsSecretUnusable {
        secret: String,
        setting: String,
        problem: String,
    },

    /// cert-manager has not written a Certificate's Secret yet.
    #[error("waiting for cert-manager to issue Certificate {certificate} (Secret {secret})")]
    CertificatePending { certificate: String, secret: String },

    /// A transport's mode is `CertManager` but the API server does not
    /// serve cert-manager's Certificates.
    #[error(
        "spec.tls uses mode CertManager, but this cluster does not serve cert-manager's API ({api}): install cert-manager, or create the cluster with mode Auto or Provided"
    )]
    CertManagerMissing { api: &'static str },

    #[error(transparent)]
    Pki(#[from] crate::pki::PkiError),

    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),

    #[error("object has no namespace")]
    MissingNamespace,

    /// `finalBackupOnDelete`: the final backup failed; deletion is blocked
    /// until it succeeds or the user waives it.
    #[error(
        "the final backup {backup} failed ({message}); the cluster is kept. Fix the cause and delete {backup} to retry, or annotate the DistributedKV {annotation}=true to delete without a final backup"
    )]
    FinalBackupFailed {
        backup: String,
        message: String,
        annotation: &'static str,
    },

    /// `finalBackupOnDelete` on a hibernated cluster: no member runs to
    /// take it, and a cluster being deleted is not woken.
    #[error(
        "the final backup cannot be taken: cluster {cluster} is hibernated, its members are stopped (and a cluster being deleted is not woken); the cluster is kept. Annotate the DistributedKV {annotation}=true to delete it without a final backup (its volumes follow storage.reclaimPolicy); to keep a final backup, wake a cluster before deleting it"
    )]
    FinalBackupWhileHibernated {
        cluster: String,
        annotation: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<crate::parts::credentials::CopyError> for Error {
    fn from(err: crate::parts::credentials::CopyError) -> Self {
        use crate::parts::credentials::CopyError;
        match err {
            CopyError::Read { name, source } => Error::Read {
                kind: "Secret",
                name,
                source,
            },
            CopyError::Create { name, source } => Error::Apply {
                kind: "Secret".to_owned(),
                name,
                source,
            },
        }
    }
}

/// Whether a Kubernetes API error can succeed on retry.
fn api_error_category(err: &kube::Error) -> Category {
    match err {
        // 4xx other than conflict/timeout/throttling mean our request is
        // wrong for this object; retrying the same request cannot help, but
        // a spec change can.
        kube::Error::Api(status) => match status.code {
            409 | 408 | 429 => Category::Transient,
            400..=499 => Category::Permanent,
            _ => Category::Transient,
        },
        _ => Category::Transient,
    }
}

impl Error {
    pub fn category(&self) -> Category {
        match self {
            Error::InvalidSpec(_)
            | Error::MissingNamespace
            | Error::FinalBackupFailed { .. }
            | Error::FinalBackupWhileHibernated { .. }
            | Error::NoSpaceRecurring { .. }
            | Error::JoinRefused { .. } => Category::Permanent,
            Error::CacheNotReady { .. }
            | Error::CleanupWaiting { .. }
            | Error::Recreating { .. } => Category::Waiting,
            // etcd asking to wait (cluster settling, learner catching up) is
            // expected mid-operation; anything else is retried with backoff
            // and reported, never given up on (the step is pinned).
            Error::Etcd { source, .. } if source.is_waiting() => Category::Waiting,
            Error::Etcd { .. } => Category::Transient,
            Error::RestoreSource { waiting: true, .. } => Category::Waiting,
            Error::RestoreSource { waiting: false, .. } => Category::Permanent,
            Error::Standby {
                transient: true, ..
            } => Category::Transient,
            Error::Standby {
                transient: false, ..
            } => Category::Permanent,
            // Secrets are not watched: looked at again now and then.
            Error::TlsCaMissing { .. }
            | Error::SecretInvalid { .. }
            | Error::TlsSecretUnusable { .. }
            | Error::CertManagerMissing { .. } => Category::Permanent,
            Error::CertificatePending { .. } | Error::DisruptionBudget { .. } => Category::Waiting,
            Error::Pki(_) | Error::Verification(_) => Category::Transient,
            Error::Apply { source, .. }
            | Error::Read { source, .. }
            | Error::Delete { source, .. }
            | Error::Status { source, .. }
            | Error::Cleanup { source, .. } => api_error_category(source),
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => {
                    e.category()
                }
                finalizer::Error::AddFinalizer(e) | finalizer::Error::RemoveFinalizer(e) => {
                    api_error_category(e)
                }
                finalizer::Error::UnnamedObject | finalizer::Error::InvalidFinalizer => {
                    Category::Permanent
                }
            },
        }
    }

    /// The step of the pipeline that failed, for metrics labels.
    pub fn step(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) | Error::MissingNamespace => "validate",
            Error::CacheNotReady { .. } | Error::Read { .. } | Error::RestoreSource { .. } => {
                "dereference"
            }
            Error::Apply { .. }
            | Error::Delete { .. }
            | Error::DisruptionBudget { .. }
            | Error::Etcd { .. }
            | Error::NoSpaceRecurring { .. }
            | Error::JoinRefused { .. }
            | Error::Standby { .. }
            | Error::Recreating { .. } => "apply",
            Error::TlsCaMissing { .. }
            | Error::SecretInvalid { .. }
            | Error::TlsSecretUnusable { .. }
            | Error::CertificatePending { .. }
            | Error::CertManagerMissing { .. }
            | Error::Pki(_) => "secrets",
            Error::Status { .. } | Error::Verification(_) => "status",
            Error::Cleanup { .. }
            | Error::CleanupWaiting { .. }
            | Error::FinalBackupFailed { .. }
            | Error::FinalBackupWhileHibernated { .. } => "cleanup",
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e.step(),
                _ => "finalizer",
            },
        }
    }
}

/// Requeue delay for [`Category::Waiting`] (a pod starting, a member not
/// answering yet): as often as an operation in flight is looked at.
pub const WAITING_DELAY: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_are_categorised_by_status_code() {
        let api = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            }))
        };
        assert_eq!(api_error_category(&api(409)), Category::Transient);
        assert_eq!(api_error_category(&api(500)), Category::Transient);
        assert_eq!(api_error_category(&api(422)), Category::Permanent);
        assert_eq!(api_error_category(&api(403)), Category::Permanent);
    }
}
