//! NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes only pods that tolerate the
//! `node.kubernetes.io/unschedulable:NoSchedule` taint the node lifecycle controller puts on it.

use k8s_openapi::api::core::v1::{Node, Taint};

use super::Snapshot;
use super::taints::tolerates;
use crate::scheduler::message::Reason;

pub(super) const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let taint = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    if cordoned && !tolerates(snapshot.pod, &taint) {
        vec![Reason::Unschedulable]
    } else {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{plain, pod, toleration};
    use crate::scheduler::volumes::VolumeFacts;

    #[test]
    fn a_cordoned_node_is_rejected_unless_tolerated() {
        let mut cordoned = plain("a");
        if let Some(s) = cordoned.spec.as_mut() {
            s.unschedulable = Some(true);
        }
        let nodes = [cordoned, plain("b")];
        let volumes = VolumeFacts::new();
        let p = pod("p");
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::Unschedulable]);
        assert!(filter(&snap, &nodes[1]).is_empty());

        let mut tolerant = pod("t");
        if let Some(s) = tolerant.spec.as_mut() {
            s.tolerations = Some(vec![toleration(
                UNSCHEDULABLE_TAINT,
                "Exists",
                "",
                "NoSchedule",
            )]);
        }
        let snap = Snapshot::new(&tolerant, &nodes, &[], &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }
}
