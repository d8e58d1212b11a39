//! The `dkv.io` API: the custom resources users write, and the labels and
//! condition vocabulary shared by everything that reads or writes them.
//!
//! This crate depends on nothing else of dkv so that clients, the operator and
//! tests can all agree on one definition of the API.

pub mod backup;
pub mod conditions;
pub mod distributedkv;
pub mod labels;
pub mod schedule;

/// The API group of every dkv resource.
pub const GROUP: &str = "dkv.io";

pub use backup::v1alpha1::{
    DistributedKVBackup, DistributedKVBackupSpec, DistributedKVBackupStatus,
};
/// The version dkv works in: the storage version.
pub use distributedkv::v1beta1::{DistributedKV, DistributedKVSpec, DistributedKVStatus};
