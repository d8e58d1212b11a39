//! etcd administration for dkv, with no knowledge of Kubernetes.
//!
//! [`EtcdAdmin`] is everything the operator asks of an etcd cluster:
//! membership (learners, promotion, removal), per-member status, leadership
//! transfer, alarms, defragmentation and snapshots. [`GrpcAdmin`] speaks etcd's
//! v3 gRPC API with a timeout on every call; [`FakeEtcd`] is an in-memory
//! cluster that refuses what real etcd refuses, for unit tests of the
//! operator's decisions.

#![forbid(unsafe_code)]

mod admin;
mod error;
pub mod fake;
mod grpc;
mod model;

pub use admin::{EtcdAdmin, SnapshotStream};
pub use error::{Error, Result};
pub use fake::FakeEtcd;
pub use grpc::{ClientTls, GrpcAdmin, UserCredentials};
pub use model::{Alarm, AlarmKind, EndpointStatus, Member, MemberId};
