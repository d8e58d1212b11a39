//! Members on lost nodes: where each member pod is placed (node and
//! zone), which of those nodes Kubernetes has lost, since when the operator
//! has seen each member lost, and whether `spec.recovery.lostNode` lets the
//! operator move it off its node now.
//!
//! A node is lost when its `Ready` condition is not `True` (`Unknown`: the
//! kubelet stopped reporting; `False`: it reports itself unwell), when it
//! carries the `node.kubernetes.io/unreachable` taint, or when the Node
//! object is gone. Kubernetes alone does not move a StatefulSet pod off such
//! a node: the pod stays (Terminating, once its toleration runs out) until
//! the node returns or someone force-deletes it.
//!
//! "Since when" is kept in `status.members[].nodeLostSince`, so that an
//! operator restart does not restart the count.
//!
//! All of it is pure but [`pod_facts`], which reads the one volume whose
//! node affinity decides how a member is moved (only for members being
//! moved: a rare event does not warrant a watch on every volume).

use dkv_api::conditions::status as condition_status;
use dkv_api::distributedkv::v1beta1::{LostNodePolicy, LostNodeRecovery, MemberStatus};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;

use crate::cluster::error::{Error, Result};
use crate::cluster::membership::{DataPlacement, Stranded};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use crate::parts::naming::volume_claim;
use crate::parts::naming::{HOSTNAME_LABEL, ZONE_LABEL};

/// The taint the node lifecycle controller puts on a node whose kubelet
/// stopped reporting.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Why a node counts as lost.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NodeLoss {
    /// Its `Ready` condition has this status (`Unknown` or `False`), or none.
    NotReady(String),
    /// It carries [`UNREACHABLE_TAINT`] (while `Ready` still says `True`).
    Unreachable,
    /// The Node object does not exist.
    Gone,
}

impl std::fmt::Display for NodeLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeLoss::NotReady(status) => write!(f, "Ready={status}"),
            NodeLoss::Unreachable => write!(f, "tainted {UNREACHABLE_TAINT}"),
            NodeLoss::Gone => f.write_str("its Node object is gone"),
        }
    }
}

/// Where one member pod runs, as far as the API says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub ordinal: i32,
    /// `spec.nodeName`; `None` while the pod is not scheduled.
    pub node: Option<String>,
    /// The node's zone label.
    pub zone: Option<String>,
    /// Set when the node is lost.
    pub loss: Option<NodeLoss>,
}

/// Whether `node` (the Node named by a pod, `None` when it does not exist)
/// is lost, and why.
pub fn node_loss(node: Option<&Node>) -> Option<NodeLoss> {
    let Some(node) = node else {
        return Some(NodeLoss::Gone);
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    if ready.as_deref() != Some(condition_status::TRUE) {
        return Some(NodeLoss::NotReady(
            ready.unwrap_or_else(|| condition_status::UNKNOWN.to_owned()),
        ));
    }
    let unreachable = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == UNREACHABLE_TAINT));
    unreachable.then_some(NodeLoss::Unreachable)
}

/// The placement of each member pod of `cluster` among `pods` (terminating
/// ones included: a pod stuck Terminating on a dead node is exactly the
/// case), looking nodes up with `node_named`. Sorted by ordinal.
pub fn placements(
    cluster: &str,
    pods: &[std::sync::Arc<Pod>],
    node_named: impl Fn(&str) -> Option<std::sync::Arc<Node>>,
) -> Vec<Placement> {
    let mut out: Vec<Placement> = pods
        .iter()
        .filter_map(|pod| {
            let ordinal = naming::ordinal_of(cluster, &pod.name_any())?;
            let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let Some(name) = node_name else {
                return Some(Placement {
                    ordinal,
                    node: None,
                    zone: None,
                    loss: None,
                });
            };
            let node = node_named(&name);
            Some(Placement {
                ordinal,
                zone: node
                    .as_ref()
                    .and_then(|n| n.labels().get(ZONE_LABEL).cloned()),
                loss: node_loss(node.as_deref()),
                node: Some(name),
            })
        })
        .collect();
    out.sort_by_key(|p| p.ordinal);
    out
}

/// A member whose node is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostMember {
    pub ordinal: i32,
    pub node: String,
    pub loss: NodeLoss,
    /// When the operator first saw it lost.
    pub since: jiff::Timestamp,
}

/// The members among `placements` whose node is lost, each with the time
/// it was first seen lost: kept from `previous` (the members in status),
/// else `now`.
pub fn lost_members(
    cluster: &str,
    placements: &[Placement],
    previous: &[MemberStatus],
    now: jiff::Timestamp,
) -> Vec<LostMember> {
    placements
        .iter()
        .filter_map(|p| {
            let loss = p.loss.clone()?;
            let node = p.node.clone()?;
            let name = naming::member(cluster, p.ordinal);
            let since = previous
                .iter()
                .find(|m| m.name == name && m.node.as_deref() == Some(node.as_str()))
                .and_then(|m| m.node_lost_since.as_ref())
                .map_or(now, |t| t.0);
            // Whole seconds, as status stores it: the time read back after
            // a restart is the same, and so is the message quoting it.
            let since = jiff::Timestamp::from_second(since.as_second()).unwrap_or(since);
            Some(LostMember {
                ordinal: p.ordinal,
                node,
                loss,
                since,
            })
        })
        .collect()
}

/// `spec.recovery.lostNode`, when it asks for replacement.
pub fn replace_policy(lost_node: Option<&LostNodeRecovery>) -> Option<&LostNodeRecovery> {
    lost_node.filter(|l| l.policy == LostNodePolicy::Replace)
}

/// When `lost` may be replaced under `policy`: `afterSeconds` after it was
/// first seen lost. `None` without the opt-in.
pub fn replace_at(policy: Option<&LostNodeRecovery>, lost: &LostMember) -> Option<jiff::Timestamp> {
    let policy = policy?;
    Some(lost.since + jiff::SignedDuration::from_secs(i64::from(policy.after_seconds)))
}

/// Where the data of a member pod's volume lives: bound to a node when the
/// claim's volume may only be used on one node (its required node affinity
/// names nodes by hostname or name: a local disk), else it follows the pod
/// (a network disk, zonal ones included). An unbound claim, or a volume the
/// operator cannot see, counts as bound to the node: replacing the member
/// with an empty volume is always correct, only slower.
pub fn data_placement(storage: bool, volume: Option<&PersistentVolume>) -> DataPlacement {
    if !storage {
        return DataPlacement::Ephemeral;
    }
    let Some(spec) = volume.and_then(|v| v.spec.as_ref()) else {
        return DataPlacement::NodeBound;
    };
    let terms = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let names_a_node = terms.iter().any(|term| {
        term.match_expressions
            .iter()
            .flatten()
            .any(|e| e.key == HOSTNAME_LABEL)
            || term
                .match_fields
                .iter()
                .flatten()
                .any(|f| f.key == "metadata.name")
    });
    if names_a_node {
        DataPlacement::NodeBound
    } else {
        DataPlacement::FollowsPod
    }
}

/// What is known of one member's pod and claim, for [`stranded`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: Option<String>,
    pub created: Option<jiff::Timestamp>,
    pub claim_uid: Option<String>,
    pub data: DataPlacement,
}

/// What the planner learns of the members to move off a node: each lost
/// member, with whether its replacement is due now (`replace_at` has
/// passed); and, while a relocation is pinned (`relocating`: its target and
/// when it was pinned), its target's pod if that pod predates the pin,
/// wherever it runs now: if its node came back before the pod went, the pod
/// still holds the data of a member that may have left etcd, and it must go
/// all the same. `facts` answers for an ordinal.
pub fn stranded(
    lost: &[LostMember],
    policy: Option<&LostNodeRecovery>,
    relocating: Option<(i32, jiff::Timestamp)>,
    facts: impl Fn(i32) -> Option<PodFacts>,
    now: jiff::Timestamp,
) -> Vec<Stranded> {
    let entry = |ordinal: i32, replace: bool| {
        let facts = facts(ordinal);
        Stranded {
            ordinal,
            replace,
            data: facts.as_ref().map_or(DataPlacement::NodeBound, |f| f.data),
            pod_uid: facts.as_ref().and_then(|f| f.uid.clone()),
            claim_uid: facts.and_then(|f| f.claim_uid),
        }
    };
    let mut out: Vec<Stranded> = lost
        .iter()
        .map(|l| entry(l.ordinal, replace_at(policy, l).is_some_and(|at| at <= now)))
        .collect();
    if let Some((target, pinned_at)) = relocating
        && !out.iter().any(|s| s.ordinal == target)
        && facts(target)
            .and_then(|f| f.created)
            .is_some_and(|created| created + CLOCK_SKEW_MARGIN < pinned_at)
    {
        out.push(entry(target, false));
    }
    out
}

/// How much earlier than the pin a pod must have been created to count as
/// predating it: the pin is stamped by the operator's clock, a pod's
/// creation by the API server's, and a pod the StatefulSet re-created just
/// after the pin must never be taken for the old one. (The pod left on a
/// lost node has been there for the node's grace period and `afterSeconds`
/// at least.)
const CLOCK_SKEW_MARGIN: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// What [`stranded`] needs of member `ordinal` of `cluster`: its pod's uid
/// and creation time (from `pods`, terminating ones included), its claim's
/// uid (from `claims`) and where its data lives, for which the claim's
/// volume is read. `None` without a pod.
pub async fn pod_facts(
    client: &kube::Client,
    cluster: &ValidatedCluster,
    ordinal: i32,
    pods: &[std::sync::Arc<Pod>],
    claims: &[std::sync::Arc<PersistentVolumeClaim>],
) -> Result<Option<PodFacts>> {
    let name = naming::member(&cluster.name, ordinal);
    let Some(pod) = pods.iter().find(|p| p.name_any() == name) else {
        return Ok(None);
    };
    let claim_name = volume_claim(&cluster.name, ordinal);
    let claim = claims.iter().find(|c| c.name_any() == claim_name);
    let volume_name = claim
        .and_then(|c| c.spec.as_ref())
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty());
    let volume = match &volume_name {
        Some(volume) => kube::Api::<PersistentVolume>::all(client.clone())
            .get_opt(volume)
            .await
            .map_err(|source| Error::Read {
                kind: "PersistentVolume",
                name: volume.clone(),
                source,
            })?,
        None => None,
    };
    Ok(Some(PodFacts {
        uid: pod.uid(),
        created: pod.creation_timestamp().map(|t| t.0),
        claim_uid: claim.and_then(|c| c.uid()),
        data: data_placement(cluster.storage.is_some(), volume.as_ref()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, ready: &str, taints: &[&str]) -> Arc<Node> {
        let taints: Vec<_> = taints
            .iter()
            .map(|k| json!({"key": k, "effect": "NoExecute"}))
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {ZONE_LABEL: "zone-a"}},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn pod(name: &str, node: Option<&str>) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_node_is_lost_when_not_ready_unreachable_or_gone() {
        assert_eq!(node_loss(Some(&node("n", "True", &[]))), None);
        assert_eq!(
            node_loss(Some(&node("n", "Unknown", &[UNREACHABLE_TAINT]))),
            Some(NodeLoss::NotReady("Unknown".into()))
        );
        assert_eq!(
            node_loss(Some(&node("n", "False", &[]))),
            Some(NodeLoss::NotReady("False".into()))
        );
        assert_eq!(
            node_loss(Some(&node("n", "True", &[UNREACHABLE_TAINT]))),
            Some(NodeLoss::Unreachable)
        );
        // Another NoExecute taint is not a loss (a drain, a dedicated node).
        assert_eq!(
            node_loss(Some(&node(
                "n",
                "True",
                &["node.kubernetes.io/unschedulable"]
            ))),
            None
        );
        assert_eq!(node_loss(None), Some(NodeLoss::Gone));
    }

    #[test]
    fn placements_name_node_and_zone_and_skip_other_pods() {
        let nodes = [node("node-1", "True", &[]), node("node-2", "Unknown", &[])];
        let pods = [
            pod("orders-1", Some("node-2")),
            pod("orders-0", Some("node-1")),
            pod("orders-2", None),
            pod("orders-3", Some("node-9")),
            pod("payments-0", Some("node-2")),
        ];
        let found = placements("orders", &pods, |name| {
            nodes.iter().find(|n| n.name_any() == name).cloned()
        });
        assert_eq!(
            found,
            [
                Placement {
                    ordinal: 0,
                    node: Some("node-1".into()),
                    zone: Some("zone-a".into()),
                    loss: None
                },
                Placement {
                    ordinal: 1,
                    node: Some("node-2".into()),
                    zone: Some("zone-a".into()),
                    loss: Some(NodeLoss::NotReady("Unknown".into()))
                },
                Placement {
                    ordinal: 2,
                    node: None,
                    zone: None,
                    loss: None
                },
                Placement {
                    ordinal: 3,
                    node: Some("node-9".into()),
                    zone: None,
                    loss: Some(NodeLoss::Gone)
                },
            ]
        );
    }

    fn lost_on(ordinal: i32, node: &str) -> Placement {
        Placement {
            ordinal,
            node: Some(node.into()),
            zone: None,
            loss: Some(NodeLoss::Unreachable),
        }
    }

    #[test]
    fn the_time_first_seen_lost_survives_passes_and_restarts_of_the_operator() {
        let placements = [
            lost_on(0, "node-1"),
            lost_on(1, "node-2"),
            lost_on(2, "node-3"),
        ];
        let previous = [
            MemberStatus {
                name: "orders-0".into(),
                node: Some("node-1".into()),
                node_lost_since: Some(Time(at(0))),
                ..MemberStatus::default()
            },
            // Lost before on another node: this is a new loss.
            MemberStatus {
                name: "orders-1".into(),
                node: Some("node-7".into()),
                node_lost_since: Some(Time(at(0))),
                ..MemberStatus::default()
            },
        ];
        let now = at(100) + jiff::SignedDuration::from_millis(250);
        let lost = lost_members("orders", &placements, &previous, now);
        let since: Vec<_> = lost.iter().map(|l| (l.ordinal, l.since)).collect();
        assert_eq!(since, [(0, at(0)), (1, at(100)), (2, at(100))]);
        let healthy = Placement {
            loss: None,
            ..lost_on(0, "node-1")
        };
        assert!(lost_members("orders", &[healthy], &previous, at(100)).is_empty());
    }

    fn policy(policy: LostNodePolicy, after_seconds: i32) -> LostNodeRecovery {
        LostNodeRecovery {
            policy,
            after_seconds,
        }
    }

    fn facts(created: i64) -> PodFacts {
        PodFacts {
            uid: Some("pod-uid".into()),
            created: Some(at(created)),
            claim_uid: Some("claim-uid".into()),
            data: DataPlacement::NodeBound,
        }
    }

    #[test]
    fn replacement_is_due_only_with_the_opt_in_and_after_its_grace() {
        let lost = lost_members("orders", &[lost_on(1, "node-2")], &[], at(0));
        let replace = policy(LostNodePolicy::Replace, 60);
        let due = |recovery: Option<&LostNodeRecovery>, now| {
            stranded(
                &lost,
                replace_policy(recovery),
                None,
                |_| Some(facts(-10)),
                now,
            )[0]
            .replace
        };
        assert!(!due(None, at(10_000)), "no recovery spec: never");
        let wait = policy(LostNodePolicy::Wait, 60);
        assert!(!due(Some(&wait), at(10_000)), "Wait: never");
        assert!(!due(Some(&replace), at(59)));
        assert!(due(Some(&replace), at(60)));
        assert_eq!(
            replace_at(replace_policy(Some(&replace)), &lost[0]),
            Some(at(60))
        );
    }

    #[test]
    fn a_relocated_pod_that_predates_the_pin_is_moved_even_off_a_node_that_came_back() {
        let stranded_at = |created: i64| {
            stranded(
                &[],
                None,
                Some((1, at(0))),
                |_| Some(facts(created)),
                at(100),
            )
        };
        assert_eq!(
            stranded_at(-61),
            [Stranded {
                ordinal: 1,
                replace: false,
                data: DataPlacement::NodeBound,
                pod_uid: Some("pod-uid".into()),
                claim_uid: Some("claim-uid".into()),
            }]
        );
        // The pod the StatefulSet created since is the new member's, even
        // with the API server's clock behind the operator's.
        assert!(stranded_at(5).is_empty());
        assert!(stranded_at(-30).is_empty());
        // No pod at all: nothing to move.
        assert!(stranded(&[], None, Some((1, at(0))), |_| None, at(100)).is_empty());
        // Lost and pinned: listed once.
        let lost = lost_members("orders", &[lost_on(1, "node-2")], &[], at(0));
        let both = stranded(
            &lost,
            None,
            Some((1, at(500))),
            |_| Some(facts(-5)),
            at(600),
        );
        assert_eq!(both.len(), 1);
    }

    #[test]
    fn only_a_volume_pinned_to_one_node_stays_with_it() {
        let pv = |affinity: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(
                json!({"metadata": {"name": "pv"}, "spec": {"nodeAffinity": affinity}}),
            )
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let local = pv(
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}
            ]}]}}),
        );
        let by_name = pv(json!({"required": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
        ]}]}}));
        let zonal = pv(
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE_LABEL, "operator": "In", "values": ["zone-a"]}
            ]}]}}),
        );
        let network = pv(serde_json::Value::Null);
        assert_eq!(data_placement(true, Some(&local)), DataPlacement::NodeBound);
        assert_eq!(
            data_placement(true, Some(&by_name)),
            DataPlacement::NodeBound
        );
        assert_eq!(
            data_placement(true, Some(&zonal)),
            DataPlacement::FollowsPod
        );
        assert_eq!(
            data_placement(true, Some(&network)),
            DataPlacement::FollowsPod
        );
        assert_eq!(data_placement(true, None), DataPlacement::NodeBound);
        assert_eq!(data_placement(false, None), DataPlacement::Ephemeral);
    }
}
