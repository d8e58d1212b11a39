//! The real `kubectl` binary against kube-local.

use serde_json::json;

use crate::common::*;

const STS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: nginx:1.25
        ports:
        - containerPort: 80
"#;

#[tokio::test]
async fn get_namespaces_prints_table() {
    let env = env().await;
    let out = kubectl(&env, &["get", "ns"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "STATUS", "AGE"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("kube-system") && l.contains("Active")),
        "{text}"
    );
}

#[tokio::test]
async fn api_resources_lists_groups_from_aggregated_discovery() {
    let env = env().await;
    let out = kubectl(&env, &["api-resources", "-o", "name"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for r in [
        "pods",
        "statefulsets.apps",
        "leases.coordination.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "events.events.k8s.io",
    ] {
        assert!(text.lines().any(|l| l == r), "{r} missing in {text}");
    }
}

#[tokio::test]
async fn client_side_apply_creates_then_configures() {
    let env = env().await;
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(STS)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "statefulset.apps/web created");
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(STS)).await;
    assert_eq!(
        stdout(&out).trim(),
        "statefulset.apps/web unchanged",
        "{}",
        stderr(&out)
    );
    let changed = STS.replace("nginx:1.25", "nginx:1.26");
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(&changed)).await;
    assert_eq!(
        stdout(&out).trim(),
        "statefulset.apps/web configured",
        "{}",
        stderr(&out)
    );
    let out = kubectl(&env, &["get", "sts", "web", "-o", "json"]).await;
    let obj: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.26"
    );
    assert_eq!(obj["metadata"]["generation"], 2);
    // Defaults the operator compares against.
    assert_eq!(obj["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        obj["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    );
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );
    // Server-side apply of the same manifest after client-side apply co-owns the fields (same values, no conflict).
    let out = kubectl_in(&env, &["apply", "--server-side", "-f", "-"], Some(&changed)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "statefulset.apps/web serverside-applied"
    );
}

#[tokio::test]
async fn server_side_apply_conflict_needs_force() {
    let env = env().await;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"1\"\n";
    let out = kubectl_in(
        &env,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "one",
            "-f",
            "-",
        ],
        Some(cm),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let other = cm.replace("\"1\"", "\"2\"");
    let out = kubectl_in(
        &env,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "two",
            "-f",
            "-",
        ],
        Some(&other),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("conflict with \"one\""),
        "{}",
        stderr(&out)
    );
    let out = kubectl_in(
        &env,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "two",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&other),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn scale_and_wide_output() {
    let env = env().await;
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(STS)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl(&env, &["scale", "statefulset", "web", "--replicas=4"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "statefulset.apps/web scaled");
    let out = kubectl(
        &env,
        &["get", "sts", "web", "-o", "jsonpath={.spec.replicas}"],
    )
    .await;
    assert_eq!(stdout(&out), "4");
    let out = kubectl(&env, &["get", "svc", "-o", "wide"]).await;
    let text = stdout(&out);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR"
        ]
    );
}

#[tokio::test]
async fn delete_wait_returns_once_gone() {
    let env = env().await;
    configmap(&env, "gone", json!({})).await;
    let out = kubectl(
        &env,
        &[
            "delete",
            "configmap",
            "gone",
            "--wait=true",
            "--timeout=10s",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "configmap \"gone\" deleted");
    let out = kubectl(&env, &["get", "configmap", "gone"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("NotFound"), "{}", stderr(&out));
}

#[tokio::test]
async fn explain_builtin_field() {
    let env = env().await;
    let out = kubectl(&env, &["explain", "statefulset.spec.replicas"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("FIELD: replicas <integer>"), "{text}");
}

#[tokio::test]
async fn get_yaml_has_type_meta() {
    let env = env().await;
    configmap(&env, "y", json!({"k": "v"})).await;
    let out = kubectl(&env, &["get", "cm", "y", "-o", "yaml"]).await;
    let text = stdout(&out);
    assert!(text.starts_with("apiVersion: v1\n"), "{text}");
    assert!(text.contains("kind: ConfigMap"), "{text}");
}
