//! TaintToleration: a node's NoSchedule and NoExecute taints keep off pods that do not tolerate them;
//! PreferNoSchedule taints only lower the node's score.
//!
//! A node that is not Ready is treated as the node lifecycle controller leaves it: `Ready=False` carries
//! `node.kubernetes.io/not-ready:NoSchedule`, `Ready=Unknown` (or no Ready condition yet)
//! `node.kubernetes.io/unreachable:NoSchedule`. kube-scheduler itself reads only taints, so deriving them here keeps a
//! snapshot whose controller has not caught up yet answering as the cluster will; when the taint is already on the
//! node it is not counted twice. Pods get only NoExecute tolerations for these keys by default, so such a node
//! rejects them with `node(s) had untolerated taint(s)`.

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};

use super::Snapshot;
use crate::scheduler::message::Reason;

/// Whether one toleration tolerates one taint (an empty key with `Exists` tolerates every taint; an empty effect
/// every effect; `Equal`, the default operator, compares the values).
fn toleration_tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    let key_ok = (key.is_empty() && operator == "Exists") || key == taint.key;
    let value_ok = match operator {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    };
    effect_ok && key_ok && value_ok
}

/// Whether any of the pod's tolerations tolerates the taint.
pub(crate) fn tolerates(pod: &Pod, taint: &Taint) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| toleration_tolerates(t, taint)))
}

/// The node's taints, with the one its readiness implies.
fn effective_taints(node: &Node) -> Vec<Taint> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    let implied = match ready {
        Some("True") => None,
        Some("False") => Some("node.kubernetes.io/not-ready"),
        _ => Some("node.kubernetes.io/unreachable"),
    };
    if let Some(key) = implied
        && !taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule")
    {
        taints.push(Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    }
    taints
}

/// Whether the pod tolerates every NoSchedule and NoExecute taint of the node.
pub(crate) fn taints_tolerated(pod: &Pod, node: &Node) -> bool {
    effective_taints(node)
        .iter()
        .all(|t| !matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") || tolerates(pod, t))
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    if !taints_tolerated(snapshot.pod, node) {
        vec![Reason::UntoleratedTaint]
    } else {
        vec![]
    }
}

/// How many PreferNoSchedule taints of the node the pod does not tolerate.
pub(crate) fn untolerated_prefer_no_schedule(pod: &Pod, node: &Node) -> usize {
    effective_taints(node)
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule" && !tolerates(pod, t))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{node, plain, pod, taint, toleration};
    use crate::scheduler::volumes::VolumeFacts;

    fn with_tolerations(tolerations: Vec<Toleration>) -> Pod {
        let mut p = pod("p");
        if let Some(s) = p.spec.as_mut() {
            s.tolerations = Some(tolerations);
        }
        p
    }

    fn verdict(p: &Pod, n: &Node) -> Vec<Reason> {
        let volumes = VolumeFacts::new();
        let nodes = [n.clone()];
        filter(&Snapshot::new(p, &nodes, &[], &volumes), n)
    }

    #[test]
    fn no_schedule_and_no_execute_reject_prefer_no_schedule_does_not() {
        let p = pod("p");
        for effect in ["NoSchedule", "NoExecute"] {
            let n = node("a", &[], vec![taint("dedicated", "db", effect)], "1", "1Gi");
            assert_eq!(verdict(&p, &n), vec![Reason::UntoleratedTaint], "{effect}");
        }
        let soft = node(
            "a",
            &[],
            vec![taint("dedicated", "db", "PreferNoSchedule")],
            "1",
            "1Gi",
        );
        assert!(verdict(&p, &soft).is_empty());
        assert_eq!(untolerated_prefer_no_schedule(&p, &soft), 1);
        assert!(verdict(&p, &plain("b")).is_empty());
    }

    #[test]
    fn tolerations_by_operator_key_value_and_effect() {
        let n = node(
            "a",
            &[],
            vec![taint("dedicated", "db", "NoSchedule")],
            "1",
            "1Gi",
        );
        let passes = |t: Toleration| verdict(&with_tolerations(vec![t]), &n).is_empty();
        assert!(passes(toleration("dedicated", "Equal", "db", "NoSchedule")));
        assert!(
            passes(toleration("dedicated", "Equal", "db", "")),
            "empty effect: all"
        );
        assert!(!passes(toleration(
            "dedicated",
            "Equal",
            "web",
            "NoSchedule"
        )));
        assert!(passes(toleration("dedicated", "Exists", "", "NoSchedule")));
        assert!(!passes(toleration("dedicated", "Exists", "", "NoExecute")));
        assert!(
            passes(toleration("", "Exists", "", "")),
            "empty key with Exists: everything"
        );
        assert!(!passes(toleration("other", "Exists", "", "")));
    }

    #[test]
    fn a_node_that_is_not_ready_carries_its_taint() {
        let mut not_ready = plain("a");
        if let Some(c) = not_ready
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|cs| cs.first_mut())
        {
            c.status = "Unknown".into();
        }
        assert_eq!(
            verdict(&pod("p"), &not_ready),
            vec![Reason::UntoleratedTaint]
        );
        // The default NoExecute tolerations do not cover the NoSchedule taint.
        let defaults = with_tolerations(vec![toleration(
            "node.kubernetes.io/unreachable",
            "Exists",
            "",
            "NoExecute",
        )]);
        assert_eq!(
            verdict(&defaults, &not_ready),
            vec![Reason::UntoleratedTaint]
        );
        let tolerant = with_tolerations(vec![toleration(
            "node.kubernetes.io/unreachable",
            "Exists",
            "",
            "",
        )]);
        assert!(verdict(&tolerant, &not_ready).is_empty());
    }
}
