//! `spec.standby` and `status.standby`: a `DistributedKV` that follows
//! another cluster through that cluster's continuous backup — in the same
//! Kubernetes cluster or another one — serving reads, refusing writes, and
//! becoming an ordinary cluster when promoted. Shared by both API versions
//! (re-exported by [`super::v1alpha1`] and [`super::v1beta1`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::encryption::BackupEncryption;

/// Follow a source cluster through its continuous backup. Set at creation,
/// the cluster is created from the newest point the source recorded, then
/// applies each change the source records after it, in order, one
/// transaction per source revision. While it follows, clients can read
/// and every write is refused (`spec.auth.enabled` is required: etcd's
/// roles are what refuse it). Set `enabled` to `false` to promote it
/// (`kubectl dkv promote`): it applies everything the source stored,
/// stops following and takes writes.
///
/// Set on a running cluster (or `enabled: true` again on a promoted one),
/// it demotes that cluster, for a switchover: writes are refused at once,
/// its last changes are made durable in its own continuous backup
/// (`status.standby.demotedAtRevision`), and once the source named here —
/// a standby of this cluster — is promoted holding exactly that revision,
/// this cluster follows it. `source` may change only in that edit.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StandbySpec {
    /// `true` while the cluster follows its source; `false` promotes it.
    pub enabled: bool,
    /// Where the source records its changes.
    pub source: StandbySource,
}

/// A source cluster's continuous backup, as `spec.bootstrap.restore` names
/// one.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StandbySource {
    /// The source cluster's backup destination, e.g. `s3://bucket/prefix/`
    /// (its `spec.backup.destination.uri`); its continuous backup must be
    /// on (`spec.backup.continuous.enabled`).
    #[schemars(length(min = 1))]
    pub uri: String,
    /// Secret (this cluster's namespace) with the object store
    /// credentials, with the same keys as a backup destination's. Only
    /// read access is needed: a standby never writes to its source's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// The source cluster, `NAMESPACE/NAME` as it is named in its own
    /// Kubernetes cluster, or `NAME` for one in this cluster's namespace.
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    ))]
    pub cluster: String,
    /// The key the source's backup is encrypted with, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,
}

/// Where a standby stands.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StandbyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<StandbyPhase>,
    /// The source, `NAMESPACE/NAME in URI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The newest source revision this cluster holds: every change the
    /// source made up to it, and none after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<i64>,
    /// When the source's backup agent received the newest change applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_time: Option<Time>,
    /// Source revisions stored and not applied yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_revisions: Option<i64>,
    /// How long ago the source's backup agent received the oldest stored
    /// change not applied yet; 0 when everything stored is applied. The
    /// recovery point adds the source's own continuous-backup interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    /// When the source's store was last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
    /// The source revision the cluster held when it was promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_at_revision: Option<i64>,
    /// When it was promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_time: Option<Time>,
    /// When its promotion was recorded in its own backup destination,
    /// where a cluster demoted in a switchover reads it to follow it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion_recorded_time: Option<Time>,
    /// The cluster's own revision less the source revision it holds,
    /// recorded when a demoted cluster starts to follow its new primary
    /// (for a standby seeded at creation it is on its StatefulSet only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_offset: Option<i64>,
    /// A demoted cluster's own revision when it stopped taking writes and
    /// had made every change up to it durable: the revision its new
    /// primary must hold when promoted (`kubectl dkv promote NAME
    /// --at-revision` on the new primary's cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_at_revision: Option<i64>,
    /// When it was demoted (stopped taking writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demoted_time: Option<Time>,
    /// What is wrong, when the phase is `Failing` or `Stopped`; what a
    /// demotion waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The phases of a standby.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandbyPhase {
    /// Created from the source's newest point; not following yet.
    Seeding,
    /// Applying the source's changes as they are stored.
    Following,
    /// Reading or applying fails; retried with backoff (see `message`).
    Failing,
    /// Cannot go on: the source's store no longer holds the next change
    /// (its retention deleted it, or its recording broke). Create a new
    /// standby to seed again from the newest point.
    Stopped,
    /// Asked to promote: applying what is left, then taking writes.
    Promoting,
    /// An ordinary cluster now; `promotedAtRevision` says what it holds.
    Promoted,
    /// Demoted: writes are refused; its last changes are being made
    /// durable in its own continuous backup.
    Demoting,
    /// Demoted, every change up to `demotedAtRevision` durable: waiting
    /// for its source (the standby to take over) to be promoted holding
    /// exactly that revision, then it follows it.
    Demoted,
}

impl std::fmt::Display for StandbyPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
