//! kube-local's integration tests, in one binary: the conformance suite
//! (`conformance::`) and the process kubelet with the workload controllers
//! (`workloads::`), with what both use in `shared`.
//!
//! kube-local depends on no dkv crate, so these tests do not use
//! `dkv-test-support`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod conformance;
mod shared;
mod workloads;
