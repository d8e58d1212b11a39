//! kube-local: a local Kubernetes-API-compatible control plane that the real `kube::Client`, kube-runtime and `kubectl` use unmodified.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_local::Error> {
//! let env = kube_local::Environment::builder().build().await?;
//! let client = env.client();
//! println!("KUBECONFIG={}", env.kubeconfig_path().display());
//! # drop(client); Ok(()) }
//! ```

mod admission;
pub mod api_error;
pub mod api_traffic;
mod auth;
mod builtin_schemas;
mod certificate_signing;
pub mod clock;
mod controllers;
mod conversion;
pub mod core;
mod crd;
mod discovery;
mod environment;
mod ephemeral_containers;
mod field_set;
mod garbage_collector;
mod https;
mod informer;
pub mod kubelet;
mod kubelet_client;
mod list;
mod managed_fields;
pub mod meta;
mod namespace_lifecycle;
pub mod node_control;
mod openapi;
mod output;
mod patch;
mod pod_events;
mod pod_exec;
mod pod_log;
pub mod private_files;
mod registry;
mod scale;
pub mod scheduler;
mod schema;
mod selector;
mod server;
mod service_account_tokens;
mod service_accounts;
mod store;
mod strategic_merge;
mod strategy;
mod streaming;
mod subresource;
mod table;
pub mod tls;
mod type_info;
mod typed;
mod views;
mod watch;
mod webhook_client;
pub mod workloads;

pub use auth::access_log::{AllowedRequest, ForbiddenRequest};
pub use auth::rbac::Grant;
pub use environment::{Environment, EnvironmentBuilder, Error, PKI_DIR};
