//! VolumeBinding, as far as placement needs it: every claim the pod mounts must exist, and a claim bound to a
//! PersistentVolume with node affinity keeps the pod on the nodes that volume admits. Unbound `WaitForFirstConsumer`
//! claims impose nothing: they follow the pod; unbound `Immediate` ones hold the pod until the binder has bound them.

use k8s_openapi::api::core::v1::Node;

use super::Snapshot;
use crate::scheduler::message::Reason;
use crate::scheduler::selectors::node_selector_matches;
use crate::scheduler::volumes::ClaimFact;

fn claim_names<'a>(snapshot: &Snapshot<'a>) -> impl Iterator<Item = &'a str> {
    snapshot
        .pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// The reason every node is rejected before any is looked at: a claim that does not exist, or one that waits for
/// immediate binding.
pub(super) fn prefilter(snapshot: &Snapshot<'_>) -> Option<String> {
    if let Some(missing) = claim_names(snapshot)
        .find(|name| snapshot.volumes.claim(snapshot.namespace, name).is_none())
    {
        return Some(format!("persistentvolumeclaim \"{missing}\" not found"));
    }
    claim_names(snapshot)
        .any(|name| {
            snapshot.volumes.claim(snapshot.namespace, name) == Some(&ClaimFact::UnboundImmediate)
        })
        .then(|| "pod has unbound immediate PersistentVolumeClaims".to_string())
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    let conflict = claim_names(snapshot).any(|name| {
        matches!(
            snapshot.volumes.claim(snapshot.namespace, name),
            Some(ClaimFact::Bound { node_affinity: Some(required) })
                if !node_selector_matches(required, node)
        )
    });
    if conflict {
        vec![Reason::VolumeNodeAffinity]
    } else {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{plain, pod};
    use crate::scheduler::volumes::VolumeFacts;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
        Pod, Volume,
    };

    fn mounting(claims: &[&str]) -> Pod {
        let mut p = pod("p");
        if let Some(s) = p.spec.as_mut() {
            s.volumes = Some(
                claims
                    .iter()
                    .map(|c| Volume {
                        name: c.to_string(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: c.to_string(),
                            read_only: None,
                        }),
                        ..Volume::default()
                    })
                    .collect(),
            );
        }
        p
    }

    fn on_host(host: &str) -> NodeSelector {
        NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    operator: "In".into(),
                    values: Some(vec![host.into()]),
                }]),
                match_fields: None,
            }],
        }
    }

    #[test]
    fn a_bound_volume_keeps_the_pod_on_its_node_and_an_unbound_one_imposes_nothing() {
        let nodes = [plain("a"), plain("b")];
        let mut volumes = VolumeFacts::new();
        volumes
            .insert(
                "default",
                "data",
                ClaimFact::Bound {
                    node_affinity: Some(on_host("a")),
                },
            )
            .insert("default", "scratch", ClaimFact::Unbound)
            .insert(
                "default",
                "net",
                ClaimFact::Bound {
                    node_affinity: None,
                },
            );
        let p = mounting(&["data", "scratch", "net"]);
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert_eq!(prefilter(&snap), None);
        assert!(filter(&snap, &nodes[0]).is_empty());
        assert_eq!(filter(&snap, &nodes[1]), vec![Reason::VolumeNodeAffinity]);
    }

    #[test]
    fn a_missing_claim_rejects_every_node() {
        let nodes = [plain("a")];
        let volumes = VolumeFacts::new();
        let p = mounting(&["data"]);
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert_eq!(
            prefilter(&snap).as_deref(),
            Some("persistentvolumeclaim \"data\" not found")
        );
    }

    #[test]
    fn an_unbound_immediate_claim_holds_the_pod() {
        let nodes = [plain("a")];
        let mut volumes = VolumeFacts::new();
        volumes.insert("default", "data", ClaimFact::UnboundImmediate);
        let p = mounting(&["data"]);
        let snap = Snapshot::new(&p, &nodes, &[], &volumes);
        assert_eq!(
            prefilter(&snap).as_deref(),
            Some("pod has unbound immediate PersistentVolumeClaims")
        );
    }
}
