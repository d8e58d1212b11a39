//! kube-local: a local Kubernetes-API-compatible control plane that the real `kube::Client`, kube-runtime and `kubectl` use unmodified.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_local::Error> {
//! let env = kube_local::Environment::builder().build().await?;
//! let client = env.client();
//! println!("KUBECONFIG={}", env.kubeconfig_path().display());
//! # drop(client); Ok(()) }
//! ```
//!
//! This crate is the facade over kube-local's layers, one crate each: [`kube_local_base`] (the pieces they share),
//! [`kube_local_apiserver`] (store, registry, strategies, apply, HTTP), [`kube_local_kubelet`] (the node agent) and
//! [`kube_local_controllers`] (the built-in loops, the scheduler, the workload controllers). It keeps the
//! [`Environment`] that starts them together, the node power socket ([`node_control`]) and the binary, and
//! re-exports each layer's public modules under the paths they have always had.

mod environment;
pub mod node_control;

pub use kube_local_apiserver::{api_traffic, core};
pub use kube_local_base::{api_error, clock, meta, private_files, tls};
pub use kube_local_controllers::{scheduler, workloads};
pub use kube_local_kubelet::kubelet;

use kube_local_apiserver::{auth, kubelet_client, server, service_account_tokens, store};
use kube_local_base::https;

pub use auth::access_log::{AllowedRequest, ForbiddenRequest};
pub use auth::rbac::Grant;
pub use environment::{Environment, EnvironmentBuilder, Error, PKI_DIR};
