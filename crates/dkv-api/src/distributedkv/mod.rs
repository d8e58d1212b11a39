//! The `DistributedKV` resource: one replicated etcd cluster.
//!
//! Served as [`v1alpha1`] and [`v1beta1`] (the storage version); [`convert`]
//! turns one into the other for the conversion webhook.

pub mod convert;
pub mod v1alpha1;
pub mod v1beta1;
