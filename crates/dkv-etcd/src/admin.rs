//! The administration interface the operator uses.

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

use crate::error::Result;
use crate::model::{
    Alarm, ContentDigest, DowngradeAction, EndpointStatus, KvHash, Member, MemberId,
};

/// A snapshot of the backend database, as a stream of chunks.
pub type SnapshotStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// Everything dkv asks of an etcd cluster. Every call has a deadline; none
/// blocks forever on an unreachable member.
#[async_trait]
pub trait EtcdAdmin: Send + Sync {
    /// The current member list, learners included.
    async fn member_list(&self) -> Result<Vec<Member>>;

    /// Adds a non-voting learner with these peer URLs. It must be started
    /// (with `initial-cluster-state=existing`) after this returns.
    async fn add_learner(&self, peer_urls: &[String]) -> Result<Member>;

    /// Makes a learner a voter once it has caught up.
    async fn promote(&self, id: MemberId) -> Result<()>;

    /// Removes a member from the cluster.
    async fn remove(&self, id: MemberId) -> Result<()>;

    /// Status of the member serving `endpoint` (a client URL).
    async fn status(&self, endpoint: &str) -> Result<EndpointStatus>;

    /// Hands leadership to `target`. `leader_endpoint` must be the current
    /// leader's client URL: only the leader can transfer leadership.
    async fn move_leader(&self, leader_endpoint: &str, target: MemberId) -> Result<()>;

    /// Active alarms across the cluster.
    async fn alarms(&self) -> Result<Vec<Alarm>>;

    /// Clears one alarm (after its cause was fixed).
    async fn disarm(&self, alarm: Alarm) -> Result<()>;

    /// Discards the key-value history before `revision` (cluster-wide),
    /// physically, so a following defragment can return the space.
    async fn compact(&self, revision: i64) -> Result<()>;

    /// Defragments the backend of the member serving `endpoint`. Blocks that
    /// member for the duration: one member at a time.
    async fn defragment(&self, endpoint: &str) -> Result<()>;

    /// Streams a snapshot of the member serving `endpoint`.
    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream>;

    /// etcd's downgrade API (3.6 and later): validate, enable or cancel a
    /// downgrade of the whole cluster by one minor version. Returns the
    /// cluster version etcd reports (before the action takes effect).
    /// etcd refuses (`Error::Refused`, with its message) a target it cannot
    /// reach, e.g. more than one minor down or while a downgrade to another
    /// version is enabled. Test doubles that model no downgrades refuse.
    async fn downgrade(&self, action: DowngradeAction) -> Result<String> {
        Err(crate::Error::Refused {
            operation: action.name(),
            message: "this client does not implement etcd's downgrade API".to_owned(),
        })
    }

    /// Turns on authentication: the user `root` (with `root_password` and
    /// the `root` role) is created if missing, then auth is enabled. Safe to
    /// repeat; once it has succeeded, clients need credentials. Data that
    /// has authentication on already (restored) is accepted when
    /// `root_password` opens it, and refused with
    /// [`crate::Error::AuthenticationFailed`] when it does not.
    async fn enable_auth(&self, root_password: &str) -> Result<()>;

    /// What the member serving `endpoint` holds at `revision`, as a key
    /// count and etcd's own hash of its key-value history (`HashKV`);
    /// `None` where the implementation cannot tell (test doubles).
    async fn content_digest(&self, endpoint: &str, revision: i64) -> Result<Option<ContentDigest>> {
        let _ = (endpoint, revision);
        Ok(None)
    }

    /// etcd's hash of the key-value history of the member serving
    /// `endpoint`, at its latest revision (`HashKV`, a maintenance call that
    /// a CORRUPT alarm does not stop); `None` where the implementation
    /// cannot tell (test doubles).
    async fn kv_hash(&self, endpoint: &str) -> Result<Option<KvHash>> {
        let _ = endpoint;
        Ok(None)
    }
}
