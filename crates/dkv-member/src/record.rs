//! The membership record: the operator's statement of which members a
//! cluster has, written to a ConfigMap that every member pod mounts, so that
//! `dkv member-init` decides how its member starts from the operator's
//! knowledge instead of guessing (`member-init` answers with its
//! termination message, [`crate::message`]).
//!
//! The record is updated *before* the pods it concerns change (membership
//! first): a learner is listed before its pod exists, a removed member is
//! dropped after etcd forgot it.

use serde::{Deserialize, Serialize};

/// How members without data start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterState {
    /// The cluster is being created: the listed members bootstrap together.
    New,
    /// The cluster exists: a member without data joins it (as the learner
    /// the operator added), it never bootstraps.
    Existing,
}

/// One member as the operator knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedMember {
    pub name: String,
    #[serde(rename = "peerURL")]
    pub peer_url: String,
    /// The member has run and held data. Such a member starting with an
    /// empty volume lost its data and must be replaced, not restarted.
    pub started: bool,
    /// While the member is being replaced (`ReplaceMember`: its data lost,
    /// or found to differ from its peers'): the replacement's token. Data on
    /// the member's volume from before the replacement is moved aside
    /// (never deleted) by `member-init`, which notes the token beside the
    /// data directory, so that the data the new member writes stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
}

/// The record as stored under [`RECORD_KEY`] in the ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MembershipRecord {
    /// The contract version the record was written in
    /// ([`crate::contract`]); records written before versioning have none
    /// and are version 1.
    #[serde(default = "unversioned")]
    pub contract: u32,
    pub state: ClusterState,
    pub members: Vec<RecordedMember>,
    /// Set by a quorum recovery: the generation of the cluster's data. A
    /// member whose data was written under another epoch belongs to the
    /// cluster as it was before the recovery; `member-init` moves that data
    /// aside (never deletes it) and the member joins afresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// During a quorum recovery: the survivor that restarts alone with
    /// `--force-new-cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recover_from: Option<String>,
}

fn unversioned() -> u32 {
    crate::contract::UNVERSIONED
}

/// Key of the record in the ConfigMap (and file name in the mount).
pub const RECORD_KEY: &str = "members.json";

impl MembershipRecord {
    pub fn member(&self, name: &str) -> Option<&RecordedMember> {
        self.members.iter().find(|m| m.name == name)
    }

    /// etcd's `--initial-cluster` for the recorded members.
    pub fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",")
    }
}
