//! etcd administration for dkv, with no knowledge of Kubernetes.
//!
//! [`EtcdAdmin`] is everything the operator asks of an etcd cluster:
//! membership (learners, promotion, removal), per-member status, leadership
//! transfer, alarms, defragmentation, snapshots and downgrades. [`GrpcAdmin`] speaks etcd's
//! v3 gRPC API with a timeout on every call; `FakeEtcd` (feature `fake`,
//! for tests only) is an in-memory cluster that refuses what real etcd
//! refuses, for unit tests of the operator's decisions. [`EtcdData`] reads and writes the
//! data itself, for continuous backup and point-in-time restore; both
//! implement it.

#![forbid(unsafe_code)]

mod admin;
mod changes;
mod error;
#[cfg(feature = "fake")]
pub mod fake;
mod grpc;
mod model;

pub use admin::{EtcdAdmin, SnapshotStream};
pub use changes::{
    Change, ChangeKind, ChangeWatch, Condition, EtcdData, Guard, REPLAY_TRANSACTION_BYTES,
    REPLAY_TRANSACTION_OPERATIONS, WatchedChanges, replay_transactions,
};
pub use error::{Error, Result};
#[cfg(feature = "fake")]
pub use fake::FakeEtcd;
pub use grpc::{ClientTls, GrpcAdmin, UserCredentials};
pub use model::{
    Alarm, AlarmKind, ContentDigest, DowngradeAction, EndpointStatus, KvHash, Member, MemberId,
};
