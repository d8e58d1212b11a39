//! What etcd reports, in the operator's terms.

use std::fmt;

/// An etcd member ID. etcd prints them in hexadecimal, and so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u64);

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// One entry of the member list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: MemberId,
    /// Empty until the member has started once (etcd learns the name from
    /// the member itself).
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// Whether the member process has ever started and announced itself.
    pub fn has_started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// The status one member reports about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    pub endpoint: String,
    pub member_id: MemberId,
    pub cluster_id: u64,
    /// The leader this member follows; 0 when it knows none.
    pub leader: MemberId,
    pub version: String,
    pub db_size: i64,
    pub db_size_in_use: i64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub raft_term: u64,
    /// The key-value store's current revision as this member sees it.
    pub revision: i64,
    pub is_learner: bool,
    /// Errors the member reports (e.g. an active alarm).
    pub errors: Vec<String>,
    /// The version of the member's data files (`storageVersion`, etcd 3.6
    /// and later; empty before). During a downgrade it drops to the target
    /// once the member has rewritten its data for it.
    pub storage_version: String,
    /// The version a downgrade is enabled to, as this member knows it
    /// (etcd 3.6 and later; `None` when no downgrade is enabled).
    pub downgrade_target: Option<String>,
}

impl EndpointStatus {
    pub fn is_leader(&self) -> bool {
        self.leader == self.member_id && self.leader.0 != 0
    }
}

/// A call to etcd's downgrade API (etcd 3.6 and later), with the target
/// as `MAJOR.MINOR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DowngradeAction {
    /// Asks whether the cluster could be downgraded to the target.
    Validate(String),
    /// Lowers the cluster version to the target: members then rewrite their
    /// data for it, after which each may be restarted on the older binary.
    Enable(String),
    /// Stops an enabled downgrade (the cluster version rises again once
    /// every member runs the newer binary).
    Cancel,
}

impl DowngradeAction {
    /// etcd's name for the action, as `etcdctl downgrade` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Validate(_) => "downgrade validate",
            Self::Enable(_) => "downgrade enable",
            Self::Cancel => "downgrade cancel",
        }
    }
}

/// The kinds of alarm etcd raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AlarmKind {
    /// The backend reached its quota: writes are refused until space is
    /// reclaimed (compact + defragment) and the alarm disarmed.
    NoSpace,
    /// A member detected data corruption.
    Corrupt,
}

impl AlarmKind {
    /// The alarm's name as etcd and `etcdctl alarm list` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
}

impl fmt::Display for AlarmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An alarm raised by one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Alarm {
    pub member: MemberId,
    pub kind: AlarmKind,
}

/// A member's hash of its key-value history at its latest revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvHash {
    pub revision: i64,
    /// The compaction the hash starts after.
    pub compact_revision: i64,
    pub hash: u32,
}

/// What a member holds at one revision: the number of keys and etcd's
/// `HashKV` of the key-value history up to it. A copy of the same data
/// (a member restored from a snapshot of it) gives the same numbers at the
/// same revision, as long as both were compacted at the same revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentDigest {
    pub revision: i64,
    pub keys: i64,
    pub hash: u32,
    /// The compaction the hash starts after.
    pub compact_revision: i64,
}
