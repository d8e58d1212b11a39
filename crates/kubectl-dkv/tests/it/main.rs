//! kubectl-dkv's tests: the plugin as users run it, `kubectl dkv …` with
//! the binary on the PATH, against kube-local running real etcd clusters.

// Test code: a failed step fails the test, with the step's message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bundle;
mod hibernate;
mod kubectl;
mod plugin;
mod secured;
mod standby;
