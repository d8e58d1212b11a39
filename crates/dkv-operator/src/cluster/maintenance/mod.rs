//! Scheduled and requested upkeep of a running cluster: defragmentation
//! ([`defrag`]) and member volumes that follow `spec.storage.size`
//! ([`volumes`]).

pub(crate) mod defrag;
pub mod volumes;
