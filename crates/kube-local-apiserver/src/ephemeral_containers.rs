//! A pod's ephemeral containers (`kubectl debug`): what a write through `pods/{name}/ephemeralcontainers` keeps of
//! its body, and the validation of `spec.ephemeralContainers` on create, on every write of a pod, and on an update
//! through the subresource — the rules of upstream's pod validation, with its field paths and messages.
//!
//! Ephemeral containers only ever grow: the subresource may add one, never remove or change one, and nothing else
//! of the pod changes through it; the main endpoint may not touch them at all (the pod's general "pod updates may
//! not change fields" rule in `strategy` refuses that).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::api_error::FieldCause;
use crate::meta;

/// Where a pod keeps them.
const FIELD: &str = "spec.ephemeralContainers";

/// The annotation of a static pod's mirror, which upstream gives no ephemeral containers.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The fields of a container an ephemeral container may not set, in the order of the API type (the order upstream
/// reports them in). Ephemeral containers serve no traffic, hold no resources and are never restarted, so ports,
/// probes, lifecycle hooks, resources and restart settings have no meaning for them.
const FORBIDDEN_FIELDS: [&str; 9] = [
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

const FORBIDDEN_DETAIL: &str = "cannot be set for an Ephemeral Container";

fn list(pod: &Value) -> &[Value] {
    pod.pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn name_of(container: &Value) -> &str {
    container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn names_at<'a>(pod: &'a Value, pointer: &str) -> impl Iterator<Item = &'a str> {
    pod.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(name_of)
}

/// Whether a field of a container holds something other than its type's zero value, as upstream tells a set field
/// from an unset one: any present value counts (an empty list or an empty probe too), except that `resources` is a
/// plain struct whose empty form (`{}`, what defaulting writes) is its zero value.
fn is_set(container: &Value, field: &str) -> bool {
    match container.get(field) {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) if field == "resources" => m.values().any(|v| !v.is_null()),
        Some(_) => true,
    }
}

/// A pod is created without ephemeral containers; they are added later through the subresource.
pub fn validate_create(pod: &Value) -> Vec<FieldCause> {
    if list(pod).is_empty() {
        Vec::new()
    } else {
        vec![FieldCause::forbidden(FIELD, "cannot be set on create")]
    }
}

/// The checks of `spec.ephemeralContainers` that hold for any pod: names (valid, and unique among all the pod's
/// containers), an image, a target that is one of the pod's containers or init containers, and none of the fields
/// an ephemeral container may not have.
pub fn validate_spec(pod: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let ephemeral = list(pod);
    if ephemeral.is_empty() {
        return causes;
    }
    let others: HashSet<&str> = names_at(pod, "/spec/containers")
        .chain(names_at(pod, "/spec/initContainers"))
        .collect();
    let mut all = others.clone();
    for (i, c) in ephemeral.iter().enumerate() {
        let at = format!("{FIELD}[{i}]");
        let name = name_of(c);
        if name.is_empty() {
            causes.push(FieldCause::required(format!("{at}.name"), ""));
        } else if let Some(why) = meta::dns_label_error(name) {
            causes.push(FieldCause::invalid(format!("{at}.name"), &json!(name), why));
        }
        if c.get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(FieldCause::required(format!("{at}.image"), ""));
        }
        if !name.is_empty() && !all.insert(name) {
            causes.push(FieldCause::duplicate(format!("{at}.name"), &json!(name)));
        }
        if let Some(target) = c
            .get("targetContainerName")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            && !others.contains(target)
        {
            causes.push(FieldCause::not_found(
                format!("{at}.targetContainerName"),
                &json!(target),
            ));
        }
        for field in FORBIDDEN_FIELDS {
            if is_set(c, field) {
                causes.push(FieldCause::forbidden(
                    format!("{at}.{field}"),
                    FORBIDDEN_DETAIL,
                ));
            }
        }
        // A subPath could make a runtime mount parts of the host's or the container's root; upstream refuses both.
        for (j, mount) in c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            for field in ["subPath", "subPathExpr"] {
                if mount
                    .get(field)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
                {
                    causes.push(FieldCause::forbidden(
                        format!("{at}.volumeMounts[{j}].{field}"),
                        FORBIDDEN_DETAIL,
                    ));
                }
            }
        }
    }
    causes
}

/// An update through the subresource: every ephemeral container the pod had is still there, unchanged (the list
/// is matched by name, as a patch may reorder it). Static pods get none.
pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldCause> {
    if old
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_POD_ANNOTATION))
        .is_some()
    {
        return vec![FieldCause::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )];
    }
    let added = list(new);
    list(old)
        .iter()
        .filter_map(|before| {
            let name = name_of(before);
            match added.iter().find(|c| name_of(c) == name) {
                None => Some(FieldCause::forbidden(
                    FIELD,
                    format!("existing ephemeral containers {name:?} may not be removed"),
                )),
                Some(now) if now != before => Some(FieldCause::forbidden(
                    FIELD,
                    format!("existing ephemeral containers {name:?} may not be changed"),
                )),
                Some(_) => None,
            }
        })
        .collect()
}

/// What a write through the subresource stores: the pod as it was (`old`), with the client's
/// `spec.ephemeralContainers` and managed fields. Everything else in the body is ignored, as upstream's
/// ephemeral-containers strategy does.
pub fn keep_only_ephemeral_containers(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    let wanted = new.pointer("/spec/ephemeralContainers").cloned();
    let root = meta::object_mut(&mut out);
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        match wanted {
            Some(list) if !list.is_null() => spec.insert("ephemeralContainers".into(), list),
            _ => spec.remove("ephemeralContainers"),
        };
    }
    if let Some(managed) = new.pointer("/metadata/managedFields").cloned() {
        meta::set_meta(&mut out, "managedFields", managed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ephemeral: Value) -> Value {
        json!({
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "init", "image": "i"}],
                "containers": [{"name": "app", "image": "a"}],
                "ephemeralContainers": ephemeral,
            },
        })
    }

    fn fields(causes: &[FieldCause]) -> Vec<(&str, &str)> {
        causes
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect()
    }

    #[test]
    fn a_debug_container_targeting_a_container_is_valid() {
        let p = pod(json!([{
            "name": "debugger", "image": "busybox", "targetContainerName": "app",
            "stdin": true, "resources": {}, "terminationMessagePolicy": "File",
        }]));
        assert_eq!(validate_spec(&p), vec![]);
    }

    #[test]
    fn names_are_unique_across_every_kind_of_container() {
        let p = pod(json!([
            {"name": "app", "image": "b"},
            {"name": "init", "image": "b"},
            {"name": "d", "image": "b"},
            {"name": "d", "image": "b"},
        ]));
        assert_eq!(
            fields(&validate_spec(&p)),
            vec![
                (
                    "spec.ephemeralContainers[0].name",
                    "Duplicate value: \"app\""
                ),
                (
                    "spec.ephemeralContainers[1].name",
                    "Duplicate value: \"init\""
                ),
                ("spec.ephemeralContainers[3].name", "Duplicate value: \"d\""),
            ]
        );
    }

    #[test]
    fn the_target_must_be_a_container_or_init_container_of_the_pod() {
        let p = pod(json!([
            {"name": "a", "image": "b", "targetContainerName": "nope"},
            {"name": "b", "image": "b", "targetContainerName": "a"},
            {"name": "c", "image": "b", "targetContainerName": "init"},
        ]));
        assert_eq!(
            fields(&validate_spec(&p)),
            vec![
                (
                    "spec.ephemeralContainers[0].targetContainerName",
                    "Not found: \"nope\""
                ),
                (
                    "spec.ephemeralContainers[1].targetContainerName",
                    "Not found: \"a\""
                ),
            ]
        );
    }

    #[test]
    fn fields_without_meaning_for_a_debug_container_are_forbidden() {
        let p = pod(json!([{
            "name": "d", "image": "b",
            "ports": [{"containerPort": 80}],
            "readinessProbe": {},
            "lifecycle": {"preStop": {"exec": {"command": ["x"]}}},
            "resources": {"limits": {"cpu": "1"}},
            "restartPolicy": "Always",
            "resizePolicy": [],
            "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"}],
        }]));
        let forbidden = FieldCause::forbidden("", FORBIDDEN_DETAIL).message;
        let at = |f: &str| format!("spec.ephemeralContainers[0].{f}");
        let expected: Vec<String> = [
            "ports",
            "resources",
            "resizePolicy",
            "restartPolicy",
            "readinessProbe",
            "lifecycle",
            "volumeMounts[0].subPath",
        ]
        .iter()
        .map(|f| at(f))
        .collect();
        let causes = validate_spec(&p);
        assert_eq!(
            causes.iter().map(|c| c.field.clone()).collect::<Vec<_>>(),
            expected
        );
        assert!(causes.iter().all(|c| c.message == forbidden), "{causes:?}");
    }

    #[test]
    fn a_name_and_an_image_are_required_and_the_name_is_a_label() {
        let p = pod(json!([{"image": ""}, {"name": "Bad_Name", "image": "b"}]));
        let causes = validate_spec(&p);
        let got: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            got,
            vec![
                "spec.ephemeralContainers[0].name",
                "spec.ephemeralContainers[0].image",
                "spec.ephemeralContainers[1].name",
            ]
        );
        assert_eq!(causes[2].reason, "FieldValueInvalid");
    }

    #[test]
    fn they_cannot_be_set_on_create() {
        assert_eq!(
            fields(&validate_create(&pod(json!([{"name": "d", "image": "b"}])))),
            vec![(FIELD, "Forbidden: cannot be set on create")]
        );
        assert_eq!(validate_create(&pod(json!([]))), vec![]);
    }

    #[test]
    fn existing_ones_may_not_be_removed_or_changed_but_others_added() {
        let d = json!({"name": "d", "image": "b"});
        let e = json!({"name": "e", "image": "b"});
        let old = pod(json!([d.clone(), e.clone()]));
        let reordered_and_added = pod(json!([e.clone(), d.clone(), {"name": "f", "image": "b"}]));
        assert_eq!(validate_update(&reordered_and_added, &old), vec![]);
        let removed = pod(json!([e.clone()]));
        assert_eq!(
            fields(&validate_update(&removed, &old)),
            vec![(
                FIELD,
                "Forbidden: existing ephemeral containers \"d\" may not be removed"
            )]
        );
        let changed = pod(json!([{"name": "d", "image": "other"}, e]));
        assert_eq!(
            fields(&validate_update(&changed, &old)),
            vec![(
                FIELD,
                "Forbidden: existing ephemeral containers \"d\" may not be changed"
            )]
        );
    }

    #[test]
    fn static_pods_get_none() {
        let mut old = pod(json!([]));
        meta::set_meta(&mut old, "annotations", json!({MIRROR_POD_ANNOTATION: "x"}));
        let new = pod(json!([{"name": "d", "image": "b"}]));
        assert_eq!(
            fields(&validate_update(&new, &old)),
            vec![(
                "",
                "Forbidden: static pods do not support ephemeral containers"
            )]
        );
    }

    #[test]
    fn only_the_ephemeral_containers_of_the_body_are_kept() {
        let old = json!({
            "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "app", "image": "a"}]},
            "status": {"phase": "Running"},
        });
        let new = json!({
            "metadata": {"name": "p", "labels": {"a": "2"}, "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "containers": [{"name": "app", "image": "changed"}],
                "ephemeralContainers": [{"name": "d", "image": "b"}],
            },
            "status": {"phase": "Failed"},
        });
        let kept = keep_only_ephemeral_containers(&old, &new);
        assert_eq!(
            kept,
            json!({
                "metadata": {"name": "p", "labels": {"a": "1"}, "managedFields": [{"manager": "kubectl"}]},
                "spec": {
                    "containers": [{"name": "app", "image": "a"}],
                    "ephemeralContainers": [{"name": "d", "image": "b"}],
                },
                "status": {"phase": "Running"},
            })
        );
    }
}
