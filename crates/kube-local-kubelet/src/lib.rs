//! kube-local's node agent: the process kubelet ([`kubelet`]), which registers nodes and runs their pods as
//! processes against any Kubernetes API server it is given a client for, and serves the kubelet endpoint (logs,
//! exec, attach, port-forward) with the SPDY and WebSocket streaming of [`streaming`]. It knows the API server
//! only through `kube::Client`.
//!
//! The shared pieces of [`kube_local_base`] are imported at the root, so that `crate::meta`, `crate::informer`, …
//! name them here as they do in every layer.

use kube_local_base::{https, informer, meta, pod_events, tls};

pub mod kubelet;
pub mod streaming;
