//! The small pieces every layer of kube-local shares: errors as Kubernetes `Status` objects, accessors for object
//! metadata, label and field selectors, clocks tests move, the throw-away CA and HTTPS serving, owner-only files,
//! the identity of a caller, the watch-backed caches of the API's clients, and Events about pods.

pub mod api_error;
pub mod clock;
pub mod https;
pub mod identity;
pub mod informer;
pub mod meta;
pub mod pod_events;
pub mod private_files;
pub mod selector;
pub mod tls;
