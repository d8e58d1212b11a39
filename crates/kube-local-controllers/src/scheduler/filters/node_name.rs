//! NodeName: a pod that names its node fits only there.

use k8s_openapi::api::core::v1::Node;

use super::Snapshot;
use crate::scheduler::message::Reason;

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    match snapshot.requested_node_name() {
        Some(wanted) if node.metadata.name.as_deref() != Some(wanted) => vec![Reason::NodeName],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{plain, pod};
    use crate::scheduler::volumes::VolumeFacts;

    #[test]
    fn only_the_named_node_passes() {
        let mut p = pod("p");
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some("b".into());
        }
        let nodes = [plain("a"), plain("b")];
        let volumes = VolumeFacts::new();
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert_eq!(filter(&snap, &nodes[0]), vec![Reason::NodeName]);
        assert!(filter(&snap, &nodes[1]).is_empty());
    }
}
