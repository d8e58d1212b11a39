//! The selectors placement reads: node selector terms (node affinity, volume node affinity) against a node, and pod
//! label selectors (pod affinity, topology spread) where an absent selector selects nothing.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::selector::selector_matches;

/// Whether one requirement holds for a value (`None`: the label or field is absent).
fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    // Gt and Lt take exactly one integer; anything else never matches, as the API would have refused it.
    let compare = |ordering: std::cmp::Ordering| {
        let mine = value.and_then(|v| v.parse::<i64>().ok());
        let theirs = match values {
            [only] => only.parse::<i64>().ok(),
            _ => None,
        };
        mine.zip(theirs).is_some_and(|(a, b)| a.cmp(&b) == ordering)
    };
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|x| x != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

/// Whether a node selector term admits the node: its matchExpressions on labels and its matchFields (only
/// `metadata.name` exists) all hold. A term with neither matches no node, as in kube-scheduler.
pub fn node_selector_term_matches(
    term: &NodeSelectorTerm,
    node_name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| requirement_holds(r, (r.key == "metadata.name").then_some(node_name)))
}

/// Whether a required node selector (terms ORed) admits the node.
pub(super) fn node_selector_matches(selector: &NodeSelector, node: &Node) -> bool {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let labels = node_labels(node);
    selector
        .node_selector_terms
        .iter()
        .any(|t| node_selector_term_matches(t, name, labels))
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

pub(super) fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    node.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

pub(super) fn pod_labels(pod: &k8s_openapi::api::core::v1::Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// A pod label selector as affinity terms and spread constraints use it: absent selects nothing, empty selects all.
pub(super) fn label_selector_selects(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|s| selector_matches(s, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(expressions),
            match_fields: None,
        }
    }

    #[test]
    fn every_operator_of_a_node_selector_requirement() {
        let l = labels(&[("zone", "a"), ("cores", "8")]);
        let holds = |r| node_selector_term_matches(&term(vec![r]), "n1", &l);
        assert!(holds(requirement("zone", "In", &["a", "b"])));
        assert!(!holds(requirement("zone", "In", &["b"])));
        assert!(!holds(requirement("missing", "In", &["a"])));
        assert!(holds(requirement("zone", "NotIn", &["b"])));
        assert!(holds(requirement("missing", "NotIn", &["b"])));
        assert!(!holds(requirement("zone", "NotIn", &["a"])));
        assert!(holds(requirement("zone", "Exists", &[])));
        assert!(!holds(requirement("missing", "Exists", &[])));
        assert!(holds(requirement("missing", "DoesNotExist", &[])));
        assert!(!holds(requirement("zone", "DoesNotExist", &[])));
        assert!(holds(requirement("cores", "Gt", &["4"])));
        assert!(!holds(requirement("cores", "Gt", &["8"])));
        assert!(holds(requirement("cores", "Lt", &["16"])));
        assert!(!holds(requirement("zone", "Lt", &["16"])), "not a number");
        assert!(
            !holds(requirement("cores", "Gt", &["1", "2"])),
            "two values"
        );
        assert!(
            !holds(requirement("zone", "Like", &["a"])),
            "unknown operator"
        );
    }

    #[test]
    fn expressions_are_anded_and_fields_match_the_node_name() {
        let l = labels(&[("zone", "a"), ("disk", "ssd")]);
        let both = term(vec![
            requirement("zone", "In", &["a"]),
            requirement("disk", "In", &["hdd"]),
        ]);
        assert!(!node_selector_term_matches(&both, "n1", &l));
        let by_name = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![requirement("metadata.name", "In", &["n1"])]),
        };
        assert!(node_selector_term_matches(&by_name, "n1", &l));
        assert!(!node_selector_term_matches(&by_name, "n2", &l));
        let empty = NodeSelectorTerm::default();
        assert!(!node_selector_term_matches(&empty, "n1", &l));
    }

    #[test]
    fn an_absent_pod_selector_selects_nothing_and_an_empty_one_everything() {
        let l = labels(&[("app", "x")]);
        assert!(!label_selector_selects(None, &l));
        assert!(label_selector_selects(Some(&LabelSelector::default()), &l));
    }
}
