//! What the scheduler knows of a pod's PersistentVolumeClaims: whether each exists, and the node affinity of the
//! volume it is bound to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;

/// One claim as placement sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimFact {
    /// Not bound yet. Claims of `WaitForFirstConsumer` classes wait for the pod to be placed, so they impose nothing
    /// on the node; the binder follows the scheduler's choice.
    Unbound,
    /// Not bound yet, of a class that binds immediately: kube-scheduler waits for the binder and rejects every node.
    UnboundImmediate,
    /// Bound to a PersistentVolume; `node_affinity` is that volume's `spec.nodeAffinity.required`, if any.
    Bound { node_affinity: Option<NodeSelector> },
}

/// The claims of the cluster by namespace and name. A claim the pod names that is absent here does not exist.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VolumeFacts {
    claims: BTreeMap<(String, String), ClaimFact>,
}

impl VolumeFacts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what is known of claim `namespace/name`.
    pub fn insert(&mut self, namespace: &str, name: &str, fact: ClaimFact) -> &mut Self {
        self.claims
            .insert((namespace.to_string(), name.to_string()), fact);
        self
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&ClaimFact> {
        self.claims.get(&(namespace.to_string(), name.to_string()))
    }
}
