//! `apiregistration.k8s.io/v1` APIServices: one per served group version, every one local (kube-local aggregates no
//! other API server), as kube-apiserver's aggregator registers them: built-in groups at start with their priorities
//! from upstream's table (label `kube-aggregator.kubernetes.io/automanaged: onstart`), CRD group versions while a CRD
//! serves them (priority 1000/100, label `true`). Clients read them; writes are refused (see
//! [`crate::registry::ResourceType::is_read_only`]).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::Core;
use crate::meta;
use crate::registry::StorageResource;
use crate::store::{ObjectKey, rv_of};

pub const GROUP: &str = "apiregistration.k8s.io";
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Upstream's `groupPriorityMinimum` and `versionPriority` for the built-in group versions kube-local serves.
fn builtin_priority(group: &str, version: &str) -> Option<(i64, i64)> {
    Some(match (group, version) {
        ("", "v1") => (18000, 1),
        ("apiregistration.k8s.io", "v1") => (18000, 15),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v1") => (17500, 15),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("node.k8s.io", "v1") => (16300, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        _ => return None,
    })
}

fn storage() -> StorageResource {
    StorageResource {
        group: GROUP.into(),
        resource: "apiservices".into(),
    }
}

/// The APIService's name: `VERSION.GROUP` (`v1.` for the core group).
pub fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// The APIServices the registry calls for, by name: (automanaged label, spec).
fn wanted(core: &Core) -> BTreeMap<String, (&'static str, Value)> {
    let mut out = BTreeMap::new();
    for t in core.registry.all() {
        let name = name_of(&t.group, &t.version);
        if out.contains_key(&name) {
            continue;
        }
        let (label, (group_priority, version_priority)) =
            match (&t.custom, builtin_priority(&t.group, &t.version)) {
                (None, Some(p)) => ("onstart", p),
                (None, None) => continue,
                (Some(_), _) => ("true", (1000, 100)),
            };
        let spec = json!({
            "group": t.group, "version": t.version,
            "groupPriorityMinimum": group_priority, "versionPriority": version_priority,
        });
        out.insert(name, (label, spec));
    }
    out
}

/// Brings the stored APIServices in step with the served group versions: adds the missing ones, removes those of
/// group versions no longer served (only automanaged ones), and corrects changed specs.
pub(crate) fn sync(core: &Core) {
    let wanted = wanted(core);
    let stored = core.store.list(&storage(), None).objects;
    for obj in &stored {
        let name = meta::name(obj);
        let automanaged = meta::labels(obj).is_some_and(|l| l.contains_key(AUTOMANAGED));
        let key = ObjectKey {
            storage: storage(),
            namespace: String::new(),
            name: name.to_string(),
        };
        match wanted.get(name) {
            None if automanaged => {
                let _ = core.store.delete(&key, Some(rv_of(obj)));
            }
            Some((_, spec)) if obj.get("spec") != Some(spec) => {
                let mut updated = (**obj).clone();
                meta::object_mut(&mut updated).insert("spec".into(), spec.clone());
                let _ = core.store.update(&key, rv_of(obj), updated);
            }
            _ => {}
        }
    }
    for (name, (label, spec)) in wanted {
        if stored.iter().any(|o| meta::name(o) == name) {
            continue;
        }
        let now = meta::now_time();
        let object = json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {
                "name": name, "uid": meta::new_uid(), "creationTimestamp": now,
                "labels": {AUTOMANAGED: label},
            },
            "spec": spec,
            "status": {"conditions": [{
                "type": "Available", "status": "True", "lastTransitionTime": now,
                "reason": "Local", "message": "Local APIServices are always available",
            }]},
        });
        let key = ObjectKey {
            storage: storage(),
            namespace: String::new(),
            name,
        };
        let _ = core.store.create(key, object);
    }
}
