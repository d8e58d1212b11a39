//! The `node.kubernetes.io/unschedulable:NoSchedule` taint of cordoned nodes, as kube-controller-manager's node
//! lifecycle controller keeps it: present while `spec.unschedulable` is true (`kubectl cordon`, `drain`), gone
//! when it is not (`kubectl uncordon`). Other taints are left as they are.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::Context;

pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

fn is_unschedulable_taint(t: &Taint) -> bool {
    t.key == UNSCHEDULABLE_TAINT && t.effect == "NoSchedule"
}

/// The node's taints as they should be, or `None` when they already are.
pub(crate) fn wanted_taints(node: &Node) -> Option<Vec<Taint>> {
    let spec = node.spec.clone().unwrap_or_default();
    let cordoned = spec.unschedulable == Some(true);
    let mut taints = spec.taints.unwrap_or_default();
    let tainted = taints.iter().any(is_unschedulable_taint);
    match (cordoned, tainted) {
        (true, false) => taints.push(Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }),
        (false, true) => taints.retain(|t| !is_unschedulable_taint(t)),
        _ => return None,
    }
    Some(taints)
}

pub async fn reconcile(ctx: &Context) -> Option<Duration> {
    for node in ctx.caches.nodes.state() {
        let Some(taints) = wanted_taints(&node) else {
            continue;
        };
        let name = node.metadata.name.clone().unwrap_or_default();
        // The cached resourceVersion is a precondition: a node changed since is looked at again on its change.
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": taints},
        });
        let api: Api<Node> = Api::all(ctx.client.clone());
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(node = %name, error = %e, "updating the unschedulable taint");
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node(spec: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec})).unwrap()
    }

    #[test]
    fn a_cordoned_node_gets_the_taint_and_an_uncordoned_one_loses_it() {
        let other = json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"});
        let added =
            wanted_taints(&node(json!({"unschedulable": true, "taints": [other]}))).unwrap();
        assert_eq!(added.len(), 2);
        assert!(added.iter().any(is_unschedulable_taint));
        let kept = json!({"unschedulable": true, "taints": [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]});
        assert_eq!(wanted_taints(&node(kept)), None);
        let removed = wanted_taints(&node(
            json!({"taints": [other, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]}),
        ))
        .unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].key, "dedicated");
        assert_eq!(wanted_taints(&node(json!({}))), None);
    }
}
