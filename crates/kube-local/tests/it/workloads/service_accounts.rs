//! Pods run as their service account: with authentication on, the token the
//! kubelet mounts at `/var/run/secrets/kubernetes.io/serviceaccount` and the
//! `KUBERNETES_SERVICE_*` variables let a process call the API server as an
//! in-cluster client does, and RBAC decides what it may do.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use serde_json::json;

use super::common::{Cluster, TESTAPP, eventually};

const NS: &str = "accounts";

/// Lists the namespace's pods with the mounted credentials; the termination message is the HTTP status.
const LIST_PODS: &str = "d=/var/run/secrets/kubernetes.io/serviceaccount; \
    test -s $d/token || exit 3; \
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert $d/ca.crt \
      -H \"Authorization: Bearer $(cat $d/token)\" \
      https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $d/namespace)/pods) || exit 4; \
    printf '%s' \"$code\" > /dev/termination-log";

async fn run_to_end(c: &Cluster, name: &str, spec: serde_json::Value) -> (i32, String) {
    c.create::<Pod>(NS, json!({"metadata": {"name": name}, "spec": spec}))
        .await;
    let pod = eventually("the pod to finish", Duration::from_secs(30), || async {
        c.pod(NS, name).await.filter(|p| {
            matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
    })
    .await;
    let terminated = pod
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .unwrap();
    (terminated.exit_code, terminated.message.unwrap_or_default())
}

fn client_pod(account: Option<&str>, script: &str) -> serde_json::Value {
    json!({
        "restartPolicy": "Never",
        "serviceAccountName": account,
        "containers": [{"name": "client", "image": TESTAPP, "command": ["sh", "-c", script]}],
    })
}

#[tokio::test]
async fn pods_call_the_api_server_with_their_service_account_token() {
    if !std::path::Path::new("/usr/bin/curl").exists() {
        eprintln!("skipped: needs /usr/bin/curl");
        return;
    }
    let c = Cluster::with_authentication(NS).await;
    c.create::<ServiceAccount>(NS, json!({"metadata": {"name": "lister"}}))
        .await;
    c.create::<RoleBinding>(
        NS,
        json!({
            "metadata": {"name": "lister-view"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "lister"}],
        }),
    )
    .await;

    let (code, message) = run_to_end(&c, "bound", client_pod(Some("lister"), LIST_PODS)).await;
    assert_eq!((code, message.as_str()), (0, "200"));
    // The namespace's `default` account has no grants.
    let (code, message) = run_to_end(&c, "unbound", client_pod(None, LIST_PODS)).await;
    assert_eq!((code, message.as_str()), (0, "403"));
    let refused = c.env.forbidden();
    assert!(
        refused
            .iter()
            .any(|r| r.user == "system:serviceaccount:accounts:default"
                && r.verb == "list"
                && r.resource == "pods"
                && r.namespace == NS),
        "{refused:?}"
    );
    assert!(
        c.env.allowed()["system:serviceaccount:accounts:lister"]
            .iter()
            .any(|a| a.verb == "list" && a.resource == "pods")
    );

    // Opting out leaves the directory out.
    let mut opted_out = client_pod(
        Some("lister"),
        "test -e /var/run/secrets/kubernetes.io/serviceaccount/token && exit 5; exit 0",
    );
    opted_out["automountServiceAccountToken"] = json!(false);
    let (code, _) = run_to_end(&c, "opted-out", opted_out).await;
    assert_eq!(code, 0);
}
