//! The `DistributedKV` resource: one replicated etcd cluster.

pub mod v1alpha1;
