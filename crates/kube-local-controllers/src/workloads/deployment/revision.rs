//! Which ReplicaSet is a Deployment's new one, its name and labels, and the annotations that record revisions and
//! sizes, after upstream's `deployment/util`.
//!
//! The new ReplicaSet is the oldest one whose template equals the Deployment's apart from the `pod-template-hash`
//! label; one is made as `<deployment>-<hash>`, the hash being FNV-1a of the template (as JSON, empty fields dropped)
//! plus `status.collisionCount`. Revisions count up from 1: a new ReplicaSet gets one more than the highest old one.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

use crate::workloads::hashing::content_hash;

/// The label that tells the pods of a Deployment's ReplicaSets apart.
pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// Deployment annotations a ReplicaSet does not copy.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// `value` without nulls, empty objects and empty arrays, at any depth (upstream compares templates semantically,
/// where an empty map equals a missing one).
fn pruned(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Object(m) => {
            let m: serde_json::Map<String, Value> = m
                .into_iter()
                .filter_map(|(k, v)| Some((k, pruned(v)?)))
                .collect();
            (!m.is_empty()).then_some(Value::Object(m))
        }
        Value::Array(a) => {
            let a: Vec<Value> = a
                .into_iter()
                .map(|v| pruned(v).unwrap_or(Value::Null))
                .collect();
            (!a.is_empty()).then_some(Value::Array(a))
        }
        v => Some(v),
    }
}

/// A template as compared and hashed: without the hash label, without empty fields.
fn canonical(template: &PodTemplateSpec) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
    }
    pruned(serde_json::to_value(&t).unwrap_or(Value::Null)).unwrap_or(Value::Null)
}

/// The `pod-template-hash` of a Deployment's template.
pub fn template_hash(template: &PodTemplateSpec, collision_count: i32) -> String {
    content_hash(
        serde_json::to_vec(&canonical(template)).unwrap_or_default(),
        collision_count,
    )
}

/// Upstream's `EqualIgnoreHash`.
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    canonical(a) == canonical(b)
}

/// A ReplicaSet's `deployment.kubernetes.io/revision` (0 when missing or not a number).
pub fn revision_of(rs: &ReplicaSet) -> i64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// The Deployment's new ReplicaSet among `sorted` (oldest first): the first with the Deployment's template.
pub fn find_new<'a>(d: &Deployment, sorted: &[&'a ReplicaSet]) -> Option<&'a ReplicaSet> {
    let template = &d.spec.template;
    sorted.iter().copied().find(|rs| {
        rs.spec
            .template
            .as_ref()
            .is_some_and(|t| equal_ignore_hash(t, template))
    })
}

/// Sets the replica annotations (the Deployment's size and its size plus surge); whether they changed.
pub fn set_replicas_annotations(
    annotations: &mut BTreeMap<String, String>,
    desired: i32,
    max: i32,
) -> bool {
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.to_string(), value);
            changed = true;
        }
    }
    changed
}

/// Upstream's `SetNewReplicaSetAnnotations`: copies the Deployment's own annotations, raises the revision to
/// `revision` if lower, and (for a ReplicaSet about to be made) sets the replica annotations. Whether anything
/// changed.
pub fn set_new_rs_annotations(
    d: &Deployment,
    annotations: &mut BTreeMap<String, String>,
    revision: i64,
    sizes: Option<(i32, i32)>,
) -> bool {
    let mut changed = false;
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) || annotations.get(k) == Some(v) {
            continue;
        }
        annotations.insert(k.clone(), v.clone());
        changed = true;
    }
    let current = match annotations.get(REVISION) {
        None => Some(0),
        Some(r) => r.parse::<i64>().ok(),
    };
    // A revision that is not a number is left alone, as upstream does.
    let Some(current) = current else {
        return changed;
    };
    if current < revision {
        annotations.insert(REVISION.into(), revision.to_string());
        changed = true;
    }
    if let Some((desired, max)) = sizes {
        changed |= set_replicas_annotations(annotations, desired, max);
    }
    changed
}

/// The template, selector labels and name of the ReplicaSet a Deployment's template makes.
pub struct NewReplicaSet {
    pub name: String,
    pub hash: String,
    pub template: PodTemplateSpec,
}

/// Names and labels the new ReplicaSet of `d` (hash label on the template; the caller adds it to the selector).
pub fn new_replicaset(d: &Deployment, collision_count: i32) -> Option<NewReplicaSet> {
    let template = d.spec.template.clone();
    let hash = template_hash(&template, collision_count);
    let mut template = template;
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_LABEL.into(), hash.clone());
    Some(NewReplicaSet {
        name: format!("{}-{hash}", d.metadata.name.as_deref()?),
        hash,
        template,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str, labels: Value) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "app", "image": image}]},
        }))
        .expect("a template")
    }

    #[test]
    fn hashes_are_stable_and_ignore_the_hash_label_and_empty_fields() {
        let a = template("app:1", json!({"app": "web"}));
        let b = template("app:1", json!({"app": "web", "pod-template-hash": "xyz"}));
        let mut c = a.clone();
        if let Some(m) = c.metadata.as_mut() {
            m.annotations = Some(BTreeMap::new());
        }
        assert_eq!(template_hash(&a, 0), template_hash(&b, 0));
        assert_eq!(template_hash(&a, 0), template_hash(&c, 0));
        assert!(equal_ignore_hash(&a, &b) && equal_ignore_hash(&a, &c));
        let other = template("app:2", json!({"app": "web"}));
        assert_ne!(template_hash(&a, 0), template_hash(&other, 0));
        assert!(!equal_ignore_hash(&a, &other));
        assert_ne!(template_hash(&a, 0), template_hash(&a, 1));
    }

    #[test]
    fn new_replicasets_are_named_and_labelled_by_hash() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template("app:1", json!({"app": "web"}))},
        }))
        .expect("a deployment");
        let made = new_replicaset(&d, 0).expect("a replicaset");
        assert_eq!(made.name, format!("web-{}", made.hash));
        assert_eq!(
            made.template
                .metadata
                .and_then(|m| m.labels)
                .and_then(|l| l.get(HASH_LABEL).cloned()),
            Some(made.hash)
        );
    }

    #[test]
    fn revisions_only_go_up_and_annotations_are_copied() {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web", "annotations": {"team": "a", "deployment.kubernetes.io/revision": "7"}},
            "spec": {"selector": {}, "template": {}},
        }))
        .expect("a deployment");
        let mut a = BTreeMap::new();
        assert!(set_new_rs_annotations(&d, &mut a, 3, Some((2, 3))));
        assert_eq!(a.get(REVISION).map(String::as_str), Some("3"));
        assert_eq!(a.get("team").map(String::as_str), Some("a"));
        assert_eq!(a.get(MAX_REPLICAS).map(String::as_str), Some("3"));
        assert!(!set_new_rs_annotations(&d, &mut a, 2, None));
        assert_eq!(a.get(REVISION).map(String::as_str), Some("3"));
    }
}
