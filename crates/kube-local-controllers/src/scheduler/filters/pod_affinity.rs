//! InterPodAffinity: required pod affinity and anti-affinity over any topology key, both ways.
//!
//! Checked in kube-scheduler's order: a placed pod's required anti-affinity that selects this pod keeps it out of
//! that pod's domain; then each of this pod's required affinity terms needs, in the node's domain, a pod that
//! matches all of them (the first pod of a group whose terms select itself may go anywhere carrying the keys, when no
//! pod matches yet); then no pod selected by one of its anti-affinity terms may be in the node's domain.
//!
//! A term looks in its `namespaces`, plus the namespaces its `namespaceSelector` selects, or only in its owner's
//! namespace when it has neither. Namespace objects are not part of the snapshot, so a namespaceSelector sees each
//! namespace's `kubernetes.io/metadata.name` label only (the one the API server puts on every namespace); an empty
//! namespaceSelector selects all namespaces.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm};

use super::Snapshot;
use crate::scheduler::message::Reason;
use crate::scheduler::selectors::{label_selector_selects, node_labels, pod_labels};

/// Whether `term`, written in a pod of `owner_namespace`, selects `candidate`.
pub(crate) fn affinity_term_selects(
    term: &PodAffinityTerm,
    owner_namespace: &str,
    candidate: &Pod,
) -> bool {
    let namespace = candidate.metadata.namespace.as_deref().unwrap_or("default");
    let listed = term.namespaces.as_deref().unwrap_or_default();
    let in_namespace = if listed.is_empty() && term.namespace_selector.is_none() {
        namespace == owner_namespace
    } else {
        let namespace_labels = BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            namespace.to_string(),
        )]);
        listed.iter().any(|n| n == namespace)
            || label_selector_selects(term.namespace_selector.as_ref(), &namespace_labels)
    };
    in_namespace && label_selector_selects(term.label_selector.as_ref(), pod_labels(candidate))
}

/// Whether both nodes carry `key` with the same value.
pub(crate) fn same_domain(a: &Node, b: &Node, key: &str) -> bool {
    match (node_labels(a).get(key), node_labels(b).get(key)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

fn required_terms(pod: &Pod, anti: bool) -> &[PodAffinityTerm] {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    };
    terms.unwrap_or_default()
}

fn existing_anti_affinity_forbids(snapshot: &Snapshot<'_>, node: &Node) -> bool {
    snapshot.placed.iter().any(|(p, placed_on)| {
        let owner = p.metadata.namespace.as_deref().unwrap_or("default");
        required_terms(p, true).iter().any(|t| {
            same_domain(node, placed_on, &t.topology_key)
                && affinity_term_selects(t, owner, snapshot.pod)
        })
    })
}

fn affinity_satisfied(snapshot: &Snapshot<'_>, node: &Node) -> bool {
    let terms = required_terms(snapshot.pod, false);
    if terms.is_empty() {
        return true;
    }
    let labels = node_labels(node);
    if terms.iter().any(|t| !labels.contains_key(&t.topology_key)) {
        return false;
    }
    let ns = snapshot.namespace;
    let matching: Vec<&(&Pod, &Node)> = snapshot
        .placed
        .iter()
        .filter(|(p, _)| terms.iter().all(|t| affinity_term_selects(t, ns, p)))
        .collect();
    let found = terms.iter().all(|t| {
        matching
            .iter()
            .any(|(_, placed_on)| same_domain(node, placed_on, &t.topology_key))
    });
    found
        || (matching.is_empty()
            && terms
                .iter()
                .all(|t| affinity_term_selects(t, ns, snapshot.pod)))
}

fn anti_affinity_forbids(snapshot: &Snapshot<'_>, node: &Node) -> bool {
    required_terms(snapshot.pod, true).iter().any(|t| {
        snapshot.placed.iter().any(|(p, placed_on)| {
            same_domain(node, placed_on, &t.topology_key)
                && affinity_term_selects(t, snapshot.namespace, p)
        })
    })
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    if existing_anti_affinity_forbids(snapshot, node) {
        vec![Reason::ExistingPodsAntiAffinity]
    } else if !affinity_satisfied(snapshot, node) {
        vec![Reason::PodAffinity]
    } else if anti_affinity_forbids(snapshot, node) {
        vec![Reason::PodAntiAffinity]
    } else {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{labelled, on, pod, selector, zoned};
    use crate::scheduler::volumes::VolumeFacts;
    use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAntiAffinity};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    const HOST: &str = "kubernetes.io/hostname";
    const ZONE: &str = "topology.kubernetes.io/zone";

    fn term(app: &str, key: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(selector(&[("app", app)])),
            topology_key: key.into(),
            ..PodAffinityTerm::default()
        }
    }

    fn with_required(
        mut p: Pod,
        affinity: Vec<PodAffinityTerm>,
        anti: Vec<PodAffinityTerm>,
    ) -> Pod {
        if let Some(s) = p.spec.as_mut() {
            s.affinity = Some(Affinity {
                pod_affinity: (!affinity.is_empty()).then(|| PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(affinity),
                    ..PodAffinity::default()
                }),
                pod_anti_affinity: (!anti.is_empty()).then(|| PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(anti),
                    ..PodAntiAffinity::default()
                }),
                ..Affinity::default()
            });
        }
        p
    }

    fn nodes() -> [Node; 3] {
        [
            zoned("a", "zone-a"),
            zoned("b", "zone-a"),
            zoned("c", "zone-b"),
        ]
    }

    fn verdicts(p: &Pod, placed: &[Pod]) -> Vec<Vec<Reason>> {
        let nodes = nodes();
        let volumes = VolumeFacts::new();
        let snap = Snapshot::new(p, &nodes, placed, &volumes);
        nodes.iter().map(|n| filter(&snap, n)).collect()
    }

    #[test]
    fn anti_affinity_on_hostname_and_on_zone() {
        let placed = [on(labelled(pod("x"), &[("app", "db")]), "a")];
        let by_host = with_required(pod("p"), vec![], vec![term("db", HOST)]);
        assert_eq!(
            verdicts(&by_host, &placed),
            vec![vec![Reason::PodAntiAffinity], vec![], vec![]]
        );
        let by_zone = with_required(pod("p"), vec![], vec![term("db", ZONE)]);
        assert_eq!(
            verdicts(&by_zone, &placed),
            vec![
                vec![Reason::PodAntiAffinity],
                vec![Reason::PodAntiAffinity],
                vec![]
            ]
        );
    }

    #[test]
    fn affinity_needs_a_matching_pod_in_the_domain() {
        let placed = [on(labelled(pod("x"), &[("app", "cache")]), "c")];
        let p = with_required(pod("p"), vec![term("cache", ZONE)], vec![]);
        assert_eq!(
            verdicts(&p, &placed),
            vec![vec![Reason::PodAffinity], vec![Reason::PodAffinity], vec![]]
        );
    }

    #[test]
    fn the_first_pod_of_a_self_affine_group_goes_anywhere() {
        let p = with_required(
            labelled(pod("p"), &[("app", "db")]),
            vec![term("db", ZONE)],
            vec![],
        );
        assert_eq!(verdicts(&p, &[]), vec![vec![], vec![], vec![]]);
        let stranger = with_required(pod("q"), vec![term("db", ZONE)], vec![]);
        assert_eq!(verdicts(&stranger, &[]), vec![vec![Reason::PodAffinity]; 3]);
    }

    #[test]
    fn a_placed_pods_anti_affinity_keeps_the_pod_away() {
        let guard = with_required(
            labelled(pod("x"), &[("app", "guard")]),
            vec![],
            vec![term("db", HOST)],
        );
        let placed = [on(guard, "a")];
        let p = labelled(pod("p"), &[("app", "db")]);
        assert_eq!(
            verdicts(&p, &placed),
            vec![vec![Reason::ExistingPodsAntiAffinity], vec![], vec![]]
        );
    }

    #[test]
    fn terms_look_in_their_namespaces() {
        let mut elsewhere = on(labelled(pod("x"), &[("app", "db")]), "a");
        elsewhere.metadata.namespace = Some("other".into());
        let placed = [elsewhere];
        let own_namespace = with_required(pod("p"), vec![], vec![term("db", HOST)]);
        assert_eq!(
            verdicts(&own_namespace, &placed),
            vec![vec![], vec![], vec![]]
        );

        let mut listed = term("db", HOST);
        listed.namespaces = Some(vec!["other".into()]);
        let p = with_required(pod("p"), vec![], vec![listed]);
        assert_eq!(verdicts(&p, &placed)[0], vec![Reason::PodAntiAffinity]);

        let mut all = term("db", HOST);
        all.namespace_selector = Some(LabelSelector::default());
        let p = with_required(pod("p"), vec![], vec![all]);
        assert_eq!(verdicts(&p, &placed)[0], vec![Reason::PodAntiAffinity]);

        let mut by_name = term("db", HOST);
        by_name.namespace_selector = Some(selector(&[("kubernetes.io/metadata.name", "other")]));
        let p = with_required(pod("p"), vec![], vec![by_name]);
        assert_eq!(verdicts(&p, &placed)[0], vec![Reason::PodAntiAffinity]);
    }
}
