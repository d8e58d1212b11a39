//! Conformance suite: asserts what a real API server answers, through `kube::Client` and the real `kubectl`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod crud;
mod kubectl;
mod lifecycle;
mod patching;
mod watching;
