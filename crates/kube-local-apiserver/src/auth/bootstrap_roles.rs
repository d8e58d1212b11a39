//! The ClusterRoles and ClusterRoleBindings a cluster's API server bootstraps
//! (upstream's `bootstrappolicy`), reduced to the resources this server
//! serves: `cluster-admin` (bound to `system:masters`), the user-facing
//! `admin`, `edit` and `view`, `system:auth-delegator`, and the roles every
//! authenticated user gets (`system:basic-user`, `system:discovery`,
//! `system:public-info-viewer`).
//!
//! Upstream composes `admin`, `edit` and `view` by aggregation; here their
//! rules are written out (the labels are upstream's, but no controller
//! aggregates other roles into them).

use serde_json::{Value, json};

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(paths: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": paths, "verbs": verbs})
}

fn metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/bootstrapping".into(), json!("rbac-defaults"));
    for (k, v) in extra_labels {
        labels.insert((*k).into(), json!(v));
    }
    json!({
        "name": name,
        "labels": labels,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(name, labels),
        "rules": rules,
    })
}

fn binding_to_groups(role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(role, &[]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// `view`: read access to the namespaced workload objects, not Secrets or RBAC.
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            READ,
        ),
    ]
}

/// `edit`: `view` plus writing those objects, Secrets and service account tokens.
fn edit_rules() -> Vec<Value> {
    let mut rules = vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            READ,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(&["discovery.k8s.io"], &["endpointslices"], WRITE),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            WRITE,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
    ];
    rules.extend(view_rules());
    rules
}

/// `admin`: `edit` plus Roles and RoleBindings in the namespace.
fn admin_rules() -> Vec<Value> {
    let mut rules = vec![
        rule(
            &["authorization.k8s.io"],
            &["localsubjectaccessreviews"],
            &["create"],
        ),
        rule(
            &["rbac.authorization.k8s.io"],
            &["rolebindings", "roles"],
            crate::registry::ALL_VERBS,
        ),
    ];
    rules.extend(edit_rules());
    rules
}

/// The objects to create at start: `(resource, object)`, ClusterRoles before their bindings.
pub fn objects() -> Vec<(&'static str, Value)> {
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    let roles = vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role("admin", &[], admin_rules()),
        cluster_role(
            "edit",
            &[("rbac.authorization.k8s.io/aggregate-to-admin", "true")],
            edit_rules(),
        ),
        cluster_role(
            "view",
            &[("rbac.authorization.k8s.io/aggregate-to-edit", "true")],
            view_rules(),
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![urls(&discovery_urls, &["get"])],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![urls(&public_urls, &["get"])],
        ),
    ];
    let bindings = vec![
        binding_to_groups("cluster-admin", &["system:masters"]),
        binding_to_groups("system:basic-user", &[AUTHENTICATED]),
        binding_to_groups("system:discovery", &[AUTHENTICATED]),
        binding_to_groups(
            "system:public-info-viewer",
            &[AUTHENTICATED, UNAUTHENTICATED],
        ),
    ];
    roles
        .into_iter()
        .map(|r| ("clusterroles", r))
        .chain(bindings.into_iter().map(|b| ("clusterrolebindings", b)))
        .collect()
}
