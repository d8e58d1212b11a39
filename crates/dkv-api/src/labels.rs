//! Labels and annotations dkv puts on (or reads from) Kubernetes objects.

use std::collections::BTreeMap;

/// `app.kubernetes.io/name` value on every child object.
pub const APP_NAME: &str = "distributedkv";
/// `app.kubernetes.io/managed-by` value on every child object.
pub const MANAGER: &str = "dkv-operator";

pub const NAME_KEY: &str = "app.kubernetes.io/name";
pub const INSTANCE_KEY: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";
pub const COMPONENT_KEY: &str = "app.kubernetes.io/component";
/// The cluster a child belongs to; the one label every dkv selector uses.
pub const CLUSTER_KEY: &str = "dkv.io/cluster";

/// Set to `"true"` on a DistributedKV to stop all changes to it; status is
/// still reported.
pub const RECONCILE_PAUSED: &str = "dkv.io/reconcile-paused";

/// Set on a DistributedKV (any value, by convention an RFC 3339 time) to
/// restart every member, one at a time, as `kubectl rollout restart` does
/// for a Deployment: changing it changes the members' pod template.
pub const RESTARTED_AT: &str = "dkv.io/restartedAt";

/// On a scratch cluster the operator restores a backup into to verify it:
/// the name of that backup.
pub const VERIFIES: &str = "dkv.io/verifies";

/// Label selector matching every object the operator manages, whatever the
/// cluster: used to scope the operator's watches of child kinds.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_KEY}={MANAGER}")
}

/// The labels every child object of cluster `name` carries.
pub fn cluster_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_KEY.to_owned(), APP_NAME.to_owned()),
        (INSTANCE_KEY.to_owned(), name.to_owned()),
        (MANAGED_BY_KEY.to_owned(), MANAGER.to_owned()),
        (CLUSTER_KEY.to_owned(), name.to_owned()),
    ])
}

/// The subset of [`cluster_labels`] used as a pod selector. It must never
/// change for the life of a cluster (StatefulSet selectors are immutable), so
/// it holds only identity labels.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_KEY.to_owned(), APP_NAME.to_owned()),
        (INSTANCE_KEY.to_owned(), name.to_owned()),
    ])
}

/// [`selector_labels`] rendered as a label-selector string (for `status.selector`,
/// which the scale subresource reports).
pub fn selector_string(name: &str) -> String {
    selector_labels(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `annotations` (a DistributedKV's) pause the operator:
/// [`RECONCILE_PAUSED`] set to a true value.
pub fn is_paused(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(RECONCILE_PAUSED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
