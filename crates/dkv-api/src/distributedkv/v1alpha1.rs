//! `dkv.io/v1alpha1` `DistributedKV`: the first served version.
//!
//! Validation that the schema can express lives here (ranges, patterns, enums, CEL transition
//! rules); what it cannot express is checked by the operator's validate step
//! and by the admission webhook.

// Several `printcolumn(...)` entries repeat the same keys (`type_`,
// `json_path`), which clippy mistakes for duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::encryption::{BackupEncryption, KeySecretReference};
pub use super::secret_reference::SecretReference;

pub use super::join::{AdoptionPhase, AdoptionStatus, JoinSource, OldMemberStatus, OldMembers};
pub use super::standby::{StandbyPhase, StandbySource, StandbySpec, StandbyStatus};

distributedkv_spec!("v1alpha1", BackupSpec);

/// Opt-in recovery from permanent quorum loss.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    /// `Manual`: report `Degraded/QuorumLost` and wait for a human.
    /// `ForceNewCluster`: restart the most up-to-date reachable member alone
    /// with etcd's `--force-new-cluster`, then grow back to `size`; only
    /// writes that just the lost members held are lost. `RestoreFromBackup`:
    /// recreate every member from the newest completed backup
    /// (`status.lastBackup`); writes made after it are lost, and nothing
    /// happens without such a backup. Either way the old members' data is
    /// moved aside on their volumes, never deleted. Defaults to `Manual`
    /// (so that `lostNode` can be set alone).
    #[serde(default)]
    pub policy: RecoveryPolicy,
    /// How long quorum must have been lost before the operator acts. Members
    /// that come back within this time rejoin with their data instead.
    #[serde(default = "default_recovery_after_seconds")]
    #[schemars(range(min = 10))]
    pub after_seconds: i32,
    /// What the operator does with a member whose node is lost (the Node's
    /// `Ready` condition is not `True`, it carries the
    /// `node.kubernetes.io/unreachable` taint, or the Node object is gone).
    /// Without it the member is reported (`Degraded/MemberNodeLost`) and
    /// left for its node to come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_node: Option<LostNodeRecovery>,
    /// What the operator does with a member whose data differs from its
    /// peers' (etcd's corruption checks: the CORRUPT alarm raised on it, or
    /// its initial check refusing to start it). `Report` (the default):
    /// `Degraded/MemberCorrupt` names it, and a human decides. `Replace`:
    /// the member is replaced from its healthy peers — removed from etcd,
    /// its data moved aside on its volume (never deleted), added again as
    /// an empty learner, promoted once caught up — one member at a time,
    /// only while the other members are healthy and keep quorum without it.
    /// Needs `size` 3 or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt_member: Option<CorruptMemberPolicy>,
}

/// What happens to a member whose data differs from its peers'.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CorruptMemberPolicy {
    /// Report it (`Degraded/MemberCorrupt`) and wait for a human.
    #[default]
    Report,
    /// Replace it from its healthy peers (see `corruptMember`).
    Replace,
}

fn default_recovery_after_seconds() -> i32 {
    300
}

/// Opt-in replacement of a member whose node is lost.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LostNodeRecovery {
    /// `Wait` (the default): report the member and wait for its node to come
    /// back, or for a human. `Replace`: once the node has been lost for
    /// `afterSeconds`, the member is not healthy in etcd, the other members
    /// keep quorum and no other operation is under way, the operator moves
    /// the member off the node. A member whose volume is bound to the lost
    /// node (a local disk), or that has no volume, is removed from etcd, its
    /// pod force-deleted, its PersistentVolumeClaim deleted, and a new empty
    /// member joins as a learner and is promoted once caught up. A member
    /// whose volume can attach elsewhere (a network disk) keeps its data and
    /// identity: only its pod is force-deleted, to start on another node.
    #[serde(default)]
    pub policy: LostNodePolicy,
    /// How long the member's node must have been lost, counted from when the
    /// operator first saw it lost (`status.members[].nodeLostSince`), before
    /// `Replace` acts. A node back within this time keeps its member and
    /// data.
    #[serde(default = "default_lost_node_after_seconds")]
    #[schemars(range(min = 0, max = 86400))]
    pub after_seconds: i32,
}

fn default_lost_node_after_seconds() -> i32 {
    300
}

/// What happens to a member on a lost node.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LostNodePolicy {
    /// Report it and wait for the node (or a human).
    #[default]
    Wait,
    /// Move the member off the node (see `policy`).
    Replace,
}

/// How a cluster that lost quorum for good is brought back.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoveryPolicy {
    /// Report `QuorumLost` and wait for a human.
    #[default]
    Manual,
    /// Restart the most up-to-date reachable member alone with etcd's
    /// `--force-new-cluster` (it keeps what it had: writes only the lost
    /// members held are gone), then grow back to `size`.
    ForceNewCluster,
    /// Recreate the cluster from its newest completed backup
    /// (`status.lastBackup`): every member's data is moved aside (never
    /// deleted) and all members start from the backup, as a new cluster.
    /// Writes made after that backup are lost; for clusters whose data can
    /// be rebuilt or whose last backup is recent enough.
    RestoreFromBackup,
}

/// Persistent volumes for members.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// The StorageClass of every member's volume. Immutable.
    #[schemars(length(min = 1))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("storage.storageClassName is immutable; create a new cluster with the new class and restore a backup into it"))]
    pub storage_class_name: String,

    /// Volume size of each member (a Kubernetes quantity such as `1Gi`). May
    /// grow; never below what the members' volumes hold (the admission
    /// webhook compares with their claims, not with the previous spec, so a
    /// growth that never happened can be taken back).
    pub size: Quantity,

    /// What happens to the member volumes when the cluster is deleted:
    /// `Retain` (the default) keeps the PersistentVolumeClaims and their
    /// data; `Delete` deletes them once the member pods have stopped. May
    /// change at any time; it is read at deletion.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
}

/// The fate of member volumes when their cluster is deleted.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Keep the PersistentVolumeClaims (the safe default).
    #[default]
    Retain,
    /// Delete the PersistentVolumeClaims with the cluster.
    Delete,
}

/// Scheduled backups.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Where snapshots go: `s3://bucket/prefix/`.
    #[schemars(regex(pattern = r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$"))]
    pub s3_path: String,

    /// When to take a backup, in cron syntax (five fields, UTC).
    #[schemars(length(min = 1))]
    pub schedule: String,

    /// The image that runs the backup agent; defaults to the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_image: Option<String>,

    /// Delete backups older than this many days (the newest successful backup
    /// is always kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub retention_days: Option<i32>,

    /// Secret (same namespace) holding `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and optionally `AWS_SESSION_TOKEN`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,

    /// Take one last backup before the cluster is deleted. Deletion waits
    /// for it; if it fails, deletion is blocked (`Degraded/BackupFailed`)
    /// until a retry succeeds or the annotation
    /// `dkv.io/skip-final-backup: "true"` waives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_backup_on_delete: Option<bool>,
}

/// Routine care of the members' data.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// Scheduled defragmentation: etcd's database file keeps the space that
    /// compaction frees until the member is defragmented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag: Option<DefragSpec>,
}

/// When and how much to defragment.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefragSpec {
    /// When to look (cron, five fields, UTC, as a CronJob's schedule), e.g.
    /// `0 3 * * *`. At each run every member whose database file is
    /// fragmented past `thresholdPercent` is defragmented, one at a time,
    /// followers first and the leader last, and only while every member is
    /// healthy and no other operation is under way (a run that finds the
    /// cluster busy waits until it is not).
    #[schemars(length(min = 1))]
    pub schedule: String,
    /// Defragment a member only when at least this share of its database
    /// file is free space: (DB size - DB size in use) / DB size, in percent.
    #[serde(default = "default_defrag_threshold_percent")]
    #[schemars(range(min = 1, max = 99))]
    pub threshold_percent: i32,
}

fn default_defrag_threshold_percent() -> i32 {
    25
}

/// etcd authentication.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// Turn etcd authentication on: once the cluster has formed, dkv creates
    /// the user `root` (role `root`) with a generated password, kept in the
    /// Secret `<name>-etcd-root` (`username`, `password`), and enables
    /// authentication; clients then need those credentials (or a user the
    /// root user creates for them). Can be turned on later, never off.
    #[serde(default)]
    pub enabled: bool,
}

/// TLS for the cluster's two kinds of traffic.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.peer.clientSecretRef)")
        .message("spec.tls.peer.clientSecretRef is not a peer setting: the client certificate dkv uses belongs in spec.tls.client.clientSecretRef"),
    validation = Rule::new("self.client.mode == 'Provided' ? has(self.client.clientSecretRef) : !has(self.client.clientSecretRef)")
        .message("spec.tls.client.clientSecretRef is required with mode Provided (a client certificate, signed by a CA the members trust, that dkv's operator and backup agents present) and allowed only with it")
)]
pub struct TlsSpec {
    /// Member-to-member traffic (port 2380).
    #[serde(default)]
    pub peer: TlsTransport,
    /// Client traffic (port 2379): the operator, backup agents and
    /// applications. With TLS on, clients authenticate with a certificate
    /// signed by a CA the members trust. In modes `Auto` and `CertManager`
    /// the Secret `<name>-tls-client` holds one (`tls.crt`, `tls.key`) and
    /// the CA that signed the members' certificate (`ca.crt`).
    #[serde(default)]
    pub client: TlsTransport,
}

/// TLS for one kind of traffic.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("self.mode == 'Provided' ? has(self.secretRef) : !has(self.secretRef)")
        .message("secretRef is required with mode Provided and allowed only with it"),
    validation = Rule::new("self.mode == 'CertManager' ? has(self.issuerRef) : !has(self.issuerRef)")
        .message("issuerRef is required with mode CertManager and allowed only with it")
)]
pub struct TlsTransport {
    /// Where this transport's certificates come from. `Auto` (default): dkv
    /// runs a CA for the cluster and issues and renews the certificates.
    /// `Provided`: your Secrets (`secretRef`, and on `client` also
    /// `clientSecretRef`). `CertManager`: cert-manager issues them, signed
    /// by `issuerRef`. `Disabled`: plaintext; anyone who reaches the port
    /// can read and write.
    #[serde(default)]
    pub mode: TlsMode,
    /// Mode `Provided`: the Secret (same namespace) with the certificate
    /// every member presents on this transport (`tls.crt`, `tls.key`) and
    /// the CAs it trusts for the other side (`ca.crt`), with server and
    /// client usage. For `peer` it must be valid for every member's name,
    /// `<member>.<name>-peer.<namespace>.svc`, and for the name a member's
    /// address resolves back to, `<member>.<name>-peer.<namespace>.svc.cluster.local`
    /// (etcd checks a connecting peer's certificate against it): the
    /// wildcards `*.<name>-peer.<namespace>.svc` and
    /// `*.<name>-peer.<namespace>.svc.cluster.local` cover every size. For
    /// `client`, valid for `<name>-client.<namespace>.svc`. dkv checks the
    /// certificates before members use them; to rotate, update the Secret:
    /// members restart onto it one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretReference>,
    /// Only on `client`, and required there in mode `Provided`: the Secret
    /// with the client certificate dkv's operator and backup agents present (`tls.crt`, `tls.key`,
    /// client usage, signed by a CA in the members' `ca.crt`) and the CA
    /// they verify members by (`ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_ref: Option<SecretReference>,
    /// Mode `CertManager`: the cert-manager issuer that signs this
    /// transport's certificates. It must put the CA into the Secrets it
    /// writes (`ca.crt`), as the CA, Vault and self-signed issuers do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_ref: Option<IssuerReference>,
}

/// Where a transport's certificates come from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// dkv runs a CA for the cluster (Secret `<name>-tls-ca`) and issues the
    /// member certificate (`<name>-tls-member`) and a client certificate
    /// (`<name>-tls-client`); peers and clients must present a certificate
    /// signed by that CA. dkv renews them before they expire.
    #[default]
    Auto,
    /// You provide the certificates in Secrets (`secretRef`, and for
    /// `client` also `clientSecretRef`); dkv checks them before any member
    /// uses them and restarts members one at a time when they change.
    Provided,
    /// cert-manager issues the certificates: dkv creates `Certificate`
    /// objects (cert-manager.io/v1) signed by `issuerRef`, named
    /// `<name>-peer` (Secret `<name>-tls-peer`), `<name>-server`
    /// (`<name>-tls-server`) and `<name>-client` (`<name>-tls-client`), and
    /// restarts members one at a time when cert-manager renews them.
    /// Without cert-manager installed the cluster reports `TLSFailed`.
    CertManager,
    /// Plaintext: anyone who reaches the port can read and write.
    Disabled,
}

/// A cert-manager `Issuer` (same namespace) or `ClusterIssuer`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IssuerReference {
    /// Name of the `Issuer` or `ClusterIssuer`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (default) or `ClusterIssuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// API group of the issuer; default `cert-manager.io` (external issuers
    /// have their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Where a new cluster's data comes from: a backup (`restore`), a running
/// etcd cluster it joins and takes over (`join`), or neither (empty).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.restore) && has(self.join))").message("bootstrap takes one of restore or join: a cluster that joins a running one takes its data from it")
)]
pub struct BootstrapSpec {
    /// Restore the new cluster from a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSource>,
    /// Join a running etcd cluster that dkv did not create and take it
    /// over, without downtime (see [`JoinSource`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinSource>,
}

/// A backup to restore from: a `DistributedKVBackup` in the same namespace,
/// the URI of a snapshot artifact, or the backup destination of a cluster
/// with continuous backup (to its newest point or to `pointInTime`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.backupName) != has(self.uri)").message("restore needs exactly one of backupName or uri"),
    validation = Rule::new("!has(self.pointInTime) || (has(self.uri) && !self.uri.matches('[.]db([.]zst)?([.]enc)?$'))").message("pointInTime restores continuous backup: set uri to the source cluster's backup destination (its spec.backup.destination.uri), not to a .db snapshot or a backupName"),
    validation = Rule::new("!has(self.sourceCluster) || (has(self.uri) && !self.uri.matches('[.]db([.]zst)?([.]enc)?$'))").message("sourceCluster names whose continuous backup to restore: set uri to that cluster's backup destination (its spec.backup.destination.uri), not to a .db snapshot or a backupName")
)]
pub struct RestoreSource {
    /// Name of a `DistributedKVBackup` in the cluster's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// Either the URI of a snapshot artifact, e.g.
    /// `s3://bucket/prefix/shop/orders/orders-20261122-060012.db.zst` (its
    /// sha256 is read from the `.json` record dkv wrote beside it), or the
    /// source cluster's backup destination, e.g. `s3://bucket/prefix/`
    /// (its `spec.backup.destination.uri`): the cluster is then restored
    /// from that cluster's continuous backup, to the newest point recorded
    /// or to `pointInTime`. Works after the source cluster and its
    /// `DistributedKVBackup` objects are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Secret with the object store credentials, with the same keys as a
    /// backup destination's. When not set: this cluster's own backup
    /// credentials Secret, else (with `backupName`) the Secret that backup
    /// was written with, as its record or its cluster names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// With `uri` set to a backup destination: the cluster whose continuous
    /// backup to restore, `NAME` (in this cluster's namespace) or
    /// `NAMESPACE/NAME`. Default: this cluster's own namespace and name (a
    /// cluster recreated under its old name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    ))]
    pub source_cluster: Option<String>,
    /// Restore continuous backup to this point instead of the newest one:
    /// the latest full snapshot at or before it, then every recorded change
    /// up to it. Keys and values equal the source's at that point; the
    /// restored cluster numbers its revisions anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,
    /// The key(s) the backup was encrypted with. Default: this cluster's
    /// own `spec.backup.encryption`. An encrypted backup restored without
    /// its key fails before anything is written, naming the key's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<BackupEncryption>,
}

/// A point in a source cluster's history: exactly one of `revision` or
/// `time`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.revision) != has(self.time)").message("pointInTime needs exactly one of revision or time"))]
pub struct PointInTime {
    /// The state right after this revision of the source cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
    /// The state as of this time (RFC 3339, e.g. `2026-11-25T20:15:00Z`):
    /// every change the backup agent received at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
}

/// etcd tuning knobs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdTuning {
    /// Backend quota in bytes (etcd's `--quota-backend-bytes`): default 2 GiB,
    /// at most 8 GiB. When the backend reaches it etcd refuses writes; dkv
    /// then compacts, defragments and clears the alarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 8_589_934_592_i64))]
    pub quota_backend_bytes: Option<i64>,
    /// etcd's auto-compaction mode: `periodic` (the default) or `revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_mode: Option<AutoCompactionMode>,
    /// What auto-compaction keeps: a duration in `periodic` mode (default
    /// `1h`; a bare number counts hours), a number of revisions in
    /// `revision` mode (default `1000`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$|^[0-9]+$"))]
    pub auto_compaction_retention: Option<String>,
    /// How often the leader compares every member's hash of the keyspace
    /// (etcd's periodic corruption check), a duration from `5s` to `24h`;
    /// default `5m`. Each check hashes the whole keyspace on every member.
    /// A member found to differ gets etcd's CORRUPT alarm (see
    /// `spec.recovery.corruptMember`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub corrupt_check_interval: Option<String>,
    /// How often the leader sends heartbeats (etcd's `--heartbeat-interval`),
    /// a duration in whole milliseconds such as `"100ms"`; etcd's default
    /// `100ms`. Raise it with the round-trip time between members, e.g.
    /// across zones. `electionTimeout` must stay at least 5 times it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub heartbeat_interval: Option<String>,
    /// How long a follower waits without hearing from the leader before it
    /// calls an election (etcd's `--election-timeout`), a duration in whole
    /// milliseconds such as `"1s"`; etcd's default `1s`. At least 5 times
    /// `heartbeatInterval` and at most `50s`, as etcd requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub election_timeout: Option<String>,
    /// Committed entries between two snapshots of the raft log (etcd's
    /// `--snapshot-count`); etcd's default: 100000 up to 3.5, 10000 from 3.6.
    /// Lower keeps less log in memory and on disk, at the cost of more
    /// frequent snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub snapshot_count: Option<i64>,
    /// The largest client request etcd accepts, in bytes (etcd's
    /// `--max-request-bytes`); etcd's default 1.5 MiB. From 1024 to
    /// `quotaBackendBytes`. etcd refuses larger requests with "request is
    /// too large".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024, max = 8_589_934_592_i64))]
    pub max_request_bytes: Option<i64>,
    /// The most operations one transaction may hold (etcd's
    /// `--max-txn-ops`); etcd's default 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4_294_967_295_i64))]
    pub max_txn_ops: Option<i64>,
    /// etcd's log level (`--log-level`): `debug`, `info` (etcd's default),
    /// `warn`, `error`, `panic` or `fatal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<EtcdLogLevel>,
    /// Any other etcd flag, by name without the leading `--`, and its value
    /// as on etcd's command line (e.g. `grpc-keepalive-interval: "1h"`).
    /// Unsupported territory: dkv does not check what a flag does. It
    /// refuses the flags it sets itself (membership, names, directories,
    /// URLs, TLS, logging output, the settings above) and malformed names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<BTreeMap<String, String>>,
}

/// The levels etcd logs at (3.4 to 3.7 accept the same six).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum EtcdLogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Panic,
    Fatal,
}

/// etcd's auto-compaction modes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum AutoCompactionMode {
    Periodic,
    Revision,
}

/// What users may set on member pods. Any change restarts the members
/// one at a time onto the new pod template.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodOverrides {
    /// Labels added to every member pod; dkv's own labels win on a clash.
    /// Labels removed here are removed from the pods too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to every member pod. Annotations removed here are
    /// removed from the pods too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Replaces the default affinity, a preferred pod anti-affinity that
    /// keeps members on distinct nodes where it can. The default spread
    /// over zones and nodes (`topologySpreadConstraints`) stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations of the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Node labels a member pod's node must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// How member pods spread across topology domains (zones, nodes).
    /// Replaces the default constraints (at most one member more in any
    /// zone, then on any node, than in another, `ScheduleAnyway`); an empty
    /// list removes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// PriorityClass of the member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// The observed state of a cluster, written only by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DistributedKVStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Member pods the StatefulSet runs.
    #[serde(default)]
    pub replicas: i32,
    /// Voting members that etcd reports healthy and whose pods are Ready
    /// (so the client Service routes to them). Before etcd can be asked,
    /// the Ready member pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the member pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The etcd version every voting member reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// etcd's cluster ID, hexadecimal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// Name of the member that currently leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// etcd's member list, as the operator last saw it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The one disruptive step in flight. It is recorded before it starts,
    /// so that an operator restart or a spec edit resumes it instead of
    /// starting another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// When the newest completed backup finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_time: Option<Time>,
    /// When the last scheduled defragmentation run (`spec.maintenance.defrag`)
    /// finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_defrag_time: Option<Time>,
    /// The newest completed backup: the one `RestoreFromBackup` recovery
    /// would use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupArtifactRef>,
    /// What continuous backup (`spec.backup.continuous`) makes
    /// recoverable, as the operator's agent last reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_backup: Option<ContinuousBackupStatus>,
    /// Where the adoption of a running cluster stands
    /// (`spec.bootstrap.join`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adoption: Option<AdoptionStatus>,
    /// Where a standby stands (`spec.standby`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<StandbyStatus>,
    /// The spec that last ran on every member, and the rollback of a
    /// failed rollout (`spec.rollout`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// `Available`, `Progressing` and `Degraded`, each with a reason and a
    /// message; every change is also an Event on the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Coarse life-cycle phase, for humans; automation should read conditions.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Creating,
    Running,
    Scaling,
    Upgrading,
    Restoring,
    Degraded,
    Deleting,
    /// `spec.hibernation`: the members are stopped, their data kept.
    Hibernated,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One etcd member as the operator last saw it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// The member's name, which is its pod's name.
    pub name: String,
    /// etcd member ID, hexadecimal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A learner: a new member that receives the log but does not vote
    /// until it has caught up and is promoted.
    #[serde(default)]
    pub learner: bool,
    /// The member answered its status without errors and follows a leader
    /// that answered too.
    #[serde(default)]
    pub healthy: bool,
    /// The etcd version the member reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The node its pod is bound to (`spec.nodeName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The zone of that node (its `topology.kubernetes.io/zone` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// When the operator first saw the member's node lost (`Ready` not
    /// `True`, the `node.kubernetes.io/unreachable` taint, or the Node
    /// gone); cleared once the node is back. `spec.recovery.lostNode`
    /// counts its `afterSeconds` from here, across operator restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_lost_since: Option<Time>,
}

/// A disruptive step in flight.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Operation {
    /// The step: `AddLearner`, `PromoteLearner`, `RemoveMember`,
    /// `UpgradeMember`, `ReplaceMember`, `RestartMember`,
    /// `RenewCertificate`, `RecoverQuorum`, `RestoreFromBackup` or
    /// `RelocateMember`.
    pub kind: OperationKind,
    /// The member (pod name) the step acts on.
    pub target: String,
    /// When the step was recorded.
    pub started_at: Time,
}

/// The disruptive steps the operator takes one at a time.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationKind {
    AddLearner,
    PromoteLearner,
    RemoveMember,
    UpgradeMember,
    ReplaceMember,
    /// Restart the target (the most up-to-date survivor) alone with
    /// `--force-new-cluster` after permanent quorum loss.
    RecoverQuorum,
    /// Recreate every member from the newest backup after permanent quorum
    /// loss (the target is member 0; the step concerns them all).
    RestoreFromBackup,
    /// Restart the target so that it loads the reissued member certificate
    /// (`spec.tls` rotation before expiry), one member at a time.
    RenewCertificate,
    /// Restart the target onto the StatefulSet's current pod template (a
    /// spec edit that changes what members run, or `dkv.io/restartedAt`),
    /// one member at a time.
    RestartMember,
    /// Move the target off its lost node (`spec.recovery.lostNode:
    /// Replace`): removed from etcd, its pod force-deleted and its claim
    /// deleted, then added again empty as a learner, when its data is bound
    /// to the node; only its pod force-deleted when its volume follows it.
    RelocateMember,
}

impl OperationKind {
    /// Its value in `status.operation.kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::AddLearner => "AddLearner",
            OperationKind::PromoteLearner => "PromoteLearner",
            OperationKind::RemoveMember => "RemoveMember",
            OperationKind::UpgradeMember => "UpgradeMember",
            OperationKind::ReplaceMember => "ReplaceMember",
            OperationKind::RecoverQuorum => "RecoverQuorum",
            OperationKind::RestoreFromBackup => "RestoreFromBackup",
            OperationKind::RenewCertificate => "RenewCertificate",
            OperationKind::RestartMember => "RestartMember",
            OperationKind::RelocateMember => "RelocateMember",
        }
    }

    /// What the operation does to member pod `target`, in words for
    /// condition messages and `kubectl dkv status`: "restarting member
    /// orders-2 onto the current pod template".
    pub fn describe(self, target: &str) -> String {
        match self {
            OperationKind::AddLearner => format!("adding member {target} as a learner"),
            OperationKind::PromoteLearner => {
                format!("promoting learner {target} to a voting member")
            }
            OperationKind::RemoveMember => format!("removing member {target}"),
            OperationKind::UpgradeMember => {
                format!("restarting member {target} on the spec's etcd version")
            }
            OperationKind::ReplaceMember => {
                format!("replacing member {target} with an empty member that catches up")
            }
            OperationKind::RecoverQuorum => {
                format!("recovering quorum: restarting {target} alone as a new cluster")
            }
            OperationKind::RestoreFromBackup => {
                "recreating every member from the newest backup".to_owned()
            }
            OperationKind::RenewCertificate => {
                format!("restarting member {target} onto its renewed certificate")
            }
            OperationKind::RestartMember => {
                format!("restarting member {target} onto the current pod template")
            }
            OperationKind::RelocateMember => format!("moving member {target} off its lost node"),
        }
    }
}

impl std::fmt::Display for OperationKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The recoverable window of continuous backup: a new cluster can be
/// restored to any revision or time from `oldest` to `newest`, except
/// inside a gap.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContinuousBackupStatus {
    /// The chain being recorded: named after its full snapshot's time and
    /// revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<String>,
    /// The oldest point a restore can reach: the oldest full snapshot that
    /// starts a chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest: Option<RecoveryPoint>,
    /// The newest point a restore can reach: the end of the newest durable
    /// segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<RecoveryPoint>,
    /// When a segment was last stored, as of this status (refreshed at
    /// most every 30 s). `kubectl get dkv -o wide` shows its age; the
    /// operator's metric `dkv_continuous_backup_newest_point_timestamp_seconds`
    /// has the exact recovery point lag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_segment_time: Option<Time>,
    /// Revisions between chains that no chain covers (the agent could not
    /// continue a chain, for example because etcd compacted revisions it
    /// still needed): no restore can reach into them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<RevisionGap>,
}

/// A point in a cluster's history: a revision and the time it was written.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryPoint {
    pub revision: i64,
    pub time: Time,
}

/// Revisions after `afterRevision` and before `untilRevision` were not
/// recorded: a restore can reach `afterRevision` (the end of one chain) and
/// `untilRevision` (the full snapshot that starts the next), nothing between.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RevisionGap {
    pub after_revision: i64,
    pub until_revision: i64,
}

/// Where the newest successful backup went.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupArtifactRef {
    /// The `DistributedKVBackup` that recorded it.
    pub name: String,
    /// Where the snapshot is.
    pub uri: String,
    /// Size of the snapshot in bytes.
    #[serde(default)]
    pub size_bytes: i64,
    /// Hex sha256 of the snapshot, verified before any restore.
    #[serde(default)]
    pub sha256: String,
}

// `spec.rollout` (what dkv does when a rollout stops making progress) and
// `status.rollout` (the spec that last ran on every member, and the
// rollback, if any).

/// How a rollout (members restarting one at a time onto a changed pod
/// template: a new image or version, resources, pod overrides, etcd
/// settings, `dkv.io/restartedAt`) is watched.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// What dkv does once a member restarted onto the new spec has not
    /// become Ready and healthy in etcd within `progressDeadline`:
    /// `Pause` (the default) stops the rollout there and reports it;
    /// `Rollback` moves the members already restarted back onto the spec
    /// that last ran on every member, one at a time. The spec itself is
    /// never rewritten: the next edit starts a new rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<RolloutFailurePolicy>,
    /// How long a member restarted onto the new spec may take to become
    /// Ready and healthy in etcd: a duration from `30s` to `24h`, default
    /// `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"))]
    pub progress_deadline: Option<String>,
}

/// What a rollout that missed its deadline leads to.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutFailurePolicy {
    /// Stop where the rollout is: the failed member keeps the new spec, the
    /// others the old one, until the spec is edited.
    #[default]
    Pause,
    /// Move the members on the new spec back, one at a time.
    Rollback,
}

/// What the operator knows of rollouts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The spec that last ran on every member (recorded each time the
    /// cluster converges): what a rollback returns to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<RunningSpec>,
    /// Set when a rollout of the spec of generation `generation` was rolled
    /// back; cleared by the next edit of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
    /// How far etcd 3.5 (or older) wrote the cluster's log: set while a
    /// voter runs 3.5, and completed with the log's index once every voter
    /// runs 3.6 or later. etcd 3.7 cannot replay such an entry, so a member
    /// moves from 3.6 to 3.7 only once it has taken a snapshot past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd35_log: Option<Etcd35Log>,
}

/// The part of a cluster's raft log that etcd 3.5 (or older) may have
/// written (see [`RolloutStatus::etcd35_log`]).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Etcd35Log {
    /// etcd's cluster ID (hexadecimal) the log belongs to: a restore starts
    /// a new cluster, whose log holds nothing older.
    pub cluster_id: String,
    /// The highest index of that log once every voter ran 3.6 or later
    /// (entries up to it may be 3.5's); absent while a voter still runs 3.5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through_index: Option<u64>,
}

/// The fields of a spec the members' pod template is built from, as they
/// were when it ran on every member.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunningSpec {
    /// The `metadata.generation` of that spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The StatefulSet revision (ControllerRevision) of that template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    // The three below are recorded as the spec had them; their schema is
    // the spec's, not repeated here (it would double the CRD's size).
    /// `spec.resources` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub resources: Option<ResourceRequirements>,
    /// `spec.etcd` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub etcd: Option<EtcdTuning>,
    /// `spec.pod` as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "recorded_object")]
    pub pod: Option<PodOverrides>,
    /// The annotations of the cluster that go into the template
    /// (`dkv.io/restartedAt`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The schema of a spec section recorded in status: an object kept as it
/// is (the spec's own schema checked it when it was written).
fn recorded_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A rollout that was rolled back.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolledBack {
    /// The `metadata.generation` whose rollout failed.
    pub generation: i64,
    /// The member pod that did not become Ready and healthy in time.
    pub pod: String,
    /// Why, as its status said.
    pub reason: String,
    /// When dkv decided to roll back.
    pub at: Time,
}
