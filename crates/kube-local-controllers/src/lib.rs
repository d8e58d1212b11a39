//! kube-local's controllers: the built-in loops that act on the API server's store directly ([`builtin`]: the
//! garbage collector, namespace lifecycle and the `default` ServiceAccounts), the [`scheduler`], and the
//! [`workloads`] controllers, which are clients of the API like any controller and start together with the kubelet.
//!
//! The shared pieces of [`kube_local_base`] and the API server modules the built-in loops use are imported at the
//! root, so that `crate::meta`, `crate::core`, … name them here as they do in every layer.

use kube_local_apiserver::{core, namespace_finalize, registry, store, views};
use kube_local_base::{clock, informer, meta, pod_events, selector};
use kube_local_kubelet::kubelet;

pub mod builtin;
mod garbage_collector;
mod namespace_lifecycle;
pub mod scheduler;
mod service_accounts;
pub mod workloads;
