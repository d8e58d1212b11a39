//! Readouts: the facts the operator and `kubectl dkv` both take from
//! objects that are not dkv's own API types — when a certificate in a TLS
//! Secret expires, whether a pod is ready — and how both print a size.
//!
//! One copy of each, so that the operator's status, metrics and Events and
//! the plugin's pages agree. What belongs to the `dkv.io` API itself (its
//! schedules, member names) is in `dkv-api` instead.

pub mod certificate;
pub mod pod;
pub mod size;
