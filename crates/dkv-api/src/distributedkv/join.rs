//! `spec.bootstrap.join` and `status.adoption`: a `DistributedKV` that
//! joins a running etcd cluster dkv did not create, takes it over member by
//! member, and lets the members that were there before leave when the user
//! says so. Shared by both API versions (re-exported by
//! [`super::v1alpha1`] and [`super::v1beta1`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::secret_reference::SecretReference;

/// A running etcd cluster for the new cluster's members to join instead of
/// forming their own. dkv checks it first and touches nothing if a check
/// fails; then its members join one at a time as learners and are promoted
/// once caught up, under a quorum with one failure to spare. The cluster
/// keeps its ID, data and revisions. The members that were there before
/// are never changed until `oldMembers` is `Leave`.
///
/// Their hosts must resolve and reach dkv's members' peer URLs
/// (`<member>.<name>-peer.<namespace>.svc:2380`), and dkv's pods theirs.
/// With TLS between members (`https` peer URLs), `spec.tls.peer` must be
/// `Provided` (or `CertManager`) with a certificate issued by the CA the
/// running members trust.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JoinSource {
    /// Client URLs of the running cluster's members, e.g.
    /// `https://10.0.0.11:2379`; the operator reaches the cluster through
    /// them until its own members have taken over.
    #[schemars(length(min = 1, max = 16))]
    pub endpoints: Vec<String>,
    /// Secret (same namespace) with what the operator presents to those
    /// endpoints: `tls.crt` and `tls.key` (a client certificate the running
    /// members accept) and `ca.crt` (the CA that signed their serving
    /// certificates). Required when an endpoint is `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_ref: Option<SecretReference>,
    /// When the running cluster has authentication on: the Secret (same
    /// namespace) with `username` and `password` of a user with the
    /// `root` role. The data keeps authentication on, so
    /// `spec.auth.enabled` must be true; dkv copies these credentials into
    /// the cluster's root Secret `<name>-etcd-root` and uses them from then
    /// on, as for a cluster it created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretReference>,
    /// The members that were there before dkv. `Keep` (default): they
    /// stay voters beside dkv's. `Leave`: once every member of dkv's is a
    /// voter, leadership moves to one of dkv's and they are removed one at
    /// a time; `status.adoption.oldMembers` says after each which process
    /// may now be stopped (dkv never stops a process it did not start).
    /// The one field of `bootstrap` that may change after creation.
    #[serde(default)]
    pub old_members: OldMembers,
    /// How long each of dkv's members may take, as a learner, to catch up
    /// with the running cluster before it is removed again and added anew:
    /// seconds, minutes or hours, from `10s` to `24h`, e.g. `30m`. Default
    /// `10m`; a large database over a slow network may need more (a
    /// learner catches up from a snapshot of the whole database, then the
    /// changes since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up_timeout: Option<String>,
}

/// What becomes of the members that were there before dkv.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OldMembers {
    /// They stay voters.
    #[default]
    Keep,
    /// They are removed, one at a time, once dkv's members have taken over.
    Leave,
}

/// Where the adoption of a running cluster stands (`spec.bootstrap.join`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AdoptionStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AdoptionPhase>,
    /// What is happening or why it waits, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The running cluster's ID, hexadecimal: it keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The members that were there before dkv, as last seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub old_members: Vec<OldMemberStatus>,
    /// How many of them are still in the cluster (`kubectl get dkv -o
    /// wide` shows it beside dkv's own READY members).
    #[serde(default)]
    pub old_members_left: i32,
    /// When dkv's member that is a learner now was added (it is removed
    /// again if it has not caught up within `spec.bootstrap.join.catchUpTimeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner_since: Option<Time>,
}

/// The steps of an adoption.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdoptionPhase {
    /// dkv refused to join: `message` says what is wrong and the fix.
    /// Nothing was changed; it checks again.
    Refused,
    /// dkv's members are joining, one at a time.
    TakingOver,
    /// Every member of dkv's is a voter; the old members stay
    /// (`oldMembers: Keep`).
    TakenOver,
    /// The old members are being removed, one at a time.
    OldMembersLeaving,
    /// Only dkv's members are left: an ordinary dkv cluster.
    Adopted,
    /// The DistributedKV is being deleted before it was adopted: dkv's
    /// members leave the running cluster, one at a time.
    BackingOut,
    /// dkv's members have left: the running cluster has the members it had.
    BackedOut,
}

impl std::fmt::Display for AdoptionPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// One member that was there before dkv.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OldMemberStatus {
    /// etcd's name for it.
    pub name: String,
    /// etcd member ID, hexadecimal.
    pub id: String,
    #[serde(default, rename = "peerURLs", skip_serializing_if = "Vec::is_empty")]
    pub peer_urls: Vec<String>,
    /// It answered and followed the leader when last seen.
    #[serde(default)]
    pub healthy: bool,
    /// It was removed from the cluster: its process may now be stopped.
    #[serde(default)]
    pub removed: bool,
}
