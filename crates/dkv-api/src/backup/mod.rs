//! The `DistributedKVBackup` resource: one backup, on demand or from the schedule.

pub mod v1alpha1;
