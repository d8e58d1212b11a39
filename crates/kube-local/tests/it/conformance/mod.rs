//! Conformance suite: asserts what a real API server answers, through `kube::Client` and the real `kubectl`.

mod common;

mod access_control;
mod api_services;
mod auth;
mod certificates;
mod conversion;
mod crds;
mod crud;
mod delete_answers;
mod discovery;
mod kubectl;
mod lifecycle;
mod patching;
mod persistence;
mod protobuf;
mod runtime;
mod traffic;
mod watching;
mod webhooks;
