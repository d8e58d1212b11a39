//! kube-local's API server: the store and its persistence, the registry of served types, the per-kind strategies,
//! admission and conversion webhooks, create/update/patch/apply/delete semantics, list and watch, authentication
//! and authorization, discovery and OpenAPI, Table output, and the HTTP server that routes requests to them.
//!
//! The shared pieces of [`kube_local_base`] are imported at the root, so that `crate::meta`, `crate::api_error`, …
//! name them here as they do in every layer.

use kube_local_base::{api_error, clock, meta, private_files, selector, tls};

mod admission;
pub mod api_traffic;
pub mod auth;
mod builtin_schemas;
mod certificate_signing;
mod conversion;
pub mod core;
mod crd;
mod discovery;
mod ephemeral_containers;
mod field_set;
pub mod kubelet_client;
mod list;
mod managed_fields;
pub mod namespace_finalize;
mod openapi;
mod output;
mod patch;
mod pod_exec;
mod pod_log;
pub mod registry;
mod scale;
mod schema;
pub mod server;
pub mod service_account_tokens;
pub mod store;
mod strategic_merge;
mod strategy;
mod subresource;
mod table;
mod type_info;
mod typed;
pub mod views;
mod watch;
mod webhook_client;
