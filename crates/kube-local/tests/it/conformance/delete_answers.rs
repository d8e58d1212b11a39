//! What DELETE answers, per resource, compared with kube-apiserver's registries: a `Status` of `Success` naming the
//! deleted object (`details.kind` is the resource) when it is gone at once, except where upstream returns the
//! object itself (pods, services, serviceaccounts, storageclasses; namespaces and CRDs, which it deletes through a
//! finalizer); and the object, with its `deletionTimestamp`, while a finalizer keeps it.

use serde_json::{Value, json};

use super::common::*;
use super::crds::db_env;

/// How upstream answers an immediate delete of one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Status,
    Object,
}

struct Case {
    /// The collection's path (namespaced ones in `default`).
    collection: &'static str,
    group: &'static str,
    resource: &'static str,
    kind: &'static str,
    body: Value,
    answer: Answer,
}

fn case(
    collection: &'static str,
    group: &'static str,
    resource: &'static str,
    kind: &'static str,
    body: Value,
    answer: Answer,
) -> Case {
    Case {
        collection,
        group,
        resource,
        kind,
        body,
        answer,
    }
}

fn pod_template() -> Value {
    json!({"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
}

fn cases() -> Vec<Case> {
    use Answer::{Object, Status};
    let selector = json!({"matchLabels": {"app": "d"}});
    let job_template =
        json!({"spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}});
    let role_ref =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"});
    vec![
        case(
            "/api/v1/namespaces/default/pods",
            "",
            "pods",
            "Pod",
            json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}),
            Object,
        ),
        case(
            "/api/v1/namespaces/default/services",
            "",
            "services",
            "Service",
            json!({"spec": {"ports": [{"port": 80}]}}),
            Object,
        ),
        case(
            "/api/v1/namespaces/default/serviceaccounts",
            "",
            "serviceaccounts",
            "ServiceAccount",
            json!({}),
            Object,
        ),
        case(
            "/apis/storage.k8s.io/v1/storageclasses",
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            json!({"provisioner": "example.com/none"}),
            Object,
        ),
        case(
            "/api/v1/namespaces/default/configmaps",
            "",
            "configmaps",
            "ConfigMap",
            json!({"data": {"a": "b"}}),
            Status,
        ),
        case(
            "/api/v1/namespaces/default/secrets",
            "",
            "secrets",
            "Secret",
            json!({}),
            Status,
        ),
        case(
            "/api/v1/namespaces/default/endpoints",
            "",
            "endpoints",
            "Endpoints",
            json!({}),
            Status,
        ),
        case(
            "/api/v1/namespaces/default/events",
            "",
            "events",
            "Event",
            json!({"involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "R", "message": "m"}),
            Status,
        ),
        case(
            "/api/v1/namespaces/default/persistentvolumeclaims",
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
            // Protected from creation on (the kubernetes.io/pvc-protection
            // finalizer): the answer is the claim, being deleted.
            Object,
        ),
        case(
            "/api/v1/persistentvolumes",
            "",
            "persistentvolumes",
            "PersistentVolume",
            json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/d"}}}),
            Status,
        ),
        case("/api/v1/nodes", "", "nodes", "Node", json!({}), Status),
        case(
            "/apis/apps/v1/namespaces/default/deployments",
            "apps",
            "deployments",
            "Deployment",
            json!({"spec": {"selector": selector, "template": pod_template()}}),
            Status,
        ),
        case(
            "/apis/apps/v1/namespaces/default/replicasets",
            "apps",
            "replicasets",
            "ReplicaSet",
            json!({"spec": {"selector": selector, "template": pod_template()}}),
            Status,
        ),
        case(
            "/apis/apps/v1/namespaces/default/statefulsets",
            "apps",
            "statefulsets",
            "StatefulSet",
            json!({"spec": {"selector": selector, "serviceName": "s", "template": pod_template()}}),
            Status,
        ),
        case(
            "/apis/apps/v1/namespaces/default/daemonsets",
            "apps",
            "daemonsets",
            "DaemonSet",
            json!({"spec": {"selector": selector, "template": pod_template()}}),
            Status,
        ),
        case(
            "/apis/apps/v1/namespaces/default/controllerrevisions",
            "apps",
            "controllerrevisions",
            "ControllerRevision",
            json!({"revision": 1}),
            Status,
        ),
        case(
            "/apis/batch/v1/namespaces/default/jobs",
            "batch",
            "jobs",
            "Job",
            json!({"spec": {"template": job_template}}),
            // batch/v1 Jobs orphan their pods unless told otherwise: the
            // `orphan` finalizer keeps the Job, which the answer is (as
            // kube-apiserver 1.37 answers, dkv-operator's
            // kube_local_against_kubernetes test).
            Object,
        ),
        case(
            "/apis/batch/v1/namespaces/default/cronjobs",
            "batch",
            "cronjobs",
            "CronJob",
            json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": job_template}}}}),
            Status,
        ),
        case(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            json!({"spec": {"minAvailable": 1, "selector": selector}}),
            Status,
        ),
        case(
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            "coordination.k8s.io",
            "leases",
            "Lease",
            json!({}),
            Status,
        ),
        case(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices",
            "discovery.k8s.io",
            "endpointslices",
            "EndpointSlice",
            json!({"addressType": "IPv4", "endpoints": []}),
            Status,
        ),
        case(
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            json!({}),
            Status,
        ),
        case(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            json!({}),
            Status,
        ),
        case(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            json!({"rules": []}),
            Status,
        ),
        case(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            json!({"roleRef": role_ref}),
            Status,
        ),
        case(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            "rbac.authorization.k8s.io",
            "roles",
            "Role",
            json!({"rules": []}),
            Status,
        ),
        case(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            json!({"roleRef": role_ref}),
            Status,
        ),
        case(
            "/apis/example.com/v1/namespaces/default/databases",
            "example.com",
            "databases",
            "Database",
            json!({"spec": {"engine": "etcd"}}),
            Status,
        ),
        case(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            Value::Null,
            Object,
        ),
    ]
}

/// Creates the case's object (`name`, plus `finalizers` when given) and returns its uid.
async fn create(
    env: &kube_local::Environment,
    c: &Case,
    name: &str,
    finalizers: &[&str],
) -> String {
    let mut body = if c.body.is_null() {
        // A CRD of its own: its name must be `<plural>.<group>`.
        json!({
            "spec": {
                "group": "delete.example.com", "scope": "Namespaced",
                "names": {"plural": name, "singular": name, "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}],
            }
        })
    } else {
        c.body.clone()
    };
    let full_name = if c.body.is_null() {
        format!("{name}.delete.example.com")
    } else {
        name.to_string()
    };
    body["metadata"] = json!({"name": full_name, "finalizers": finalizers});
    let (code, _, created) = raw(
        env,
        "POST",
        c.collection,
        Some("application/json"),
        Some(body),
    )
    .await;
    assert_eq!(code, 201, "creating {}: {created}", c.resource);
    created["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn delete_path(c: &Case, name: &str) -> String {
    if c.body.is_null() {
        format!("{}/{name}.delete.example.com", c.collection)
    } else {
        format!("{}/{name}", c.collection)
    }
}

#[tokio::test]
async fn immediate_deletes_answer_as_upstreams_registries() {
    let env = db_env().await;
    for c in cases() {
        let uid = create(&env, &c, "gone", &[]).await;
        let (code, _, answer) = raw(&env, "DELETE", &delete_path(&c, "gone"), None, None).await;
        assert_eq!(code, 200, "{}: {answer}", c.resource);
        let name = answer["details"]["name"].as_str().map(String::from);
        match c.answer {
            Answer::Status => {
                let mut expected = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": "gone", "kind": c.resource, "uid": uid},
                });
                // Omitted when empty, as every StatusDetails field (the core group).
                if !c.group.is_empty() {
                    expected["details"]["group"] = json!(c.group);
                }
                assert_eq!(answer, expected, "{}", c.resource);
            }
            Answer::Object => {
                assert_eq!(answer["kind"], c.kind, "{}: {answer}", c.resource);
                assert_eq!(
                    answer["metadata"]["uid"],
                    uid.as_str(),
                    "{}: {answer}",
                    c.resource
                );
                assert_eq!(name, None, "{}", c.resource);
            }
        }
    }
}

#[tokio::test]
async fn a_delete_kept_by_a_finalizer_answers_with_the_terminating_object() {
    let env = db_env().await;
    for c in cases().into_iter().filter(|c| !c.body.is_null()) {
        let uid = create(&env, &c, "kept", &["example.com/hold"]).await;
        let (code, _, answer) = raw(&env, "DELETE", &delete_path(&c, "kept"), None, None).await;
        assert_eq!(code, 200, "{}: {answer}", c.resource);
        assert_eq!(answer["kind"], c.kind, "{}: {answer}", c.resource);
        assert_eq!(answer["metadata"]["uid"], uid.as_str(), "{}", c.resource);
        assert!(
            answer["metadata"]["deletionTimestamp"].is_string(),
            "{}: {answer}",
            c.resource
        );
    }
    // Namespaces are always deleted through their finalizer: the answer is the Terminating namespace.
    let (code, _, _) = raw(
        &env,
        "POST",
        "/api/v1/namespaces",
        Some("application/json"),
        Some(json!({"metadata": {"name": "doomed"}})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _, answer) = raw(&env, "DELETE", "/api/v1/namespaces/doomed", None, None).await;
    assert_eq!(code, 200);
    assert_eq!(answer["kind"], "Namespace");
    assert_eq!(answer["status"]["phase"], "Terminating");
    assert!(
        answer["metadata"]["deletionTimestamp"].is_string(),
        "{answer}"
    );
}
