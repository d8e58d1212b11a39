//! The real `kubectl` binary against kube-local.

use serde_json::json;

use super::common::*;

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

const WORKLOAD_OBJECTS: &str = r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: quorum}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: db}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-a}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: standard
  hostPath: {path: /tmp/pv-a}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: standard
  resources: {requests: {storage: 1Gi}}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: backup}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: b, image: busybox:1}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: once}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: j, image: busybox:1}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: db}
subsets:
- addresses: [{ip: 10.0.0.1}, {ip: 10.0.0.2}, {ip: 10.0.0.3}, {ip: 10.0.0.4}]
  ports: [{port: 2379}]
"#;

/// `kubectl get` shows upstream's columns (and their values) for the built-in kinds dkv uses.
#[tokio::test]
async fn get_shows_upstream_columns_for_workload_kinds() {
    let env = env().await;
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(WORKLOAD_OBJECTS)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(STS)).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let table = |args: &'static [&'static str]| {
        let env = &env;
        async move {
            let out = kubectl(env, args).await;
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            let text = stdout(&out);
            let mut lines = text.lines();
            // Columns are separated by at least two spaces (header names contain single spaces).
            let split = |l: &str| -> Vec<String> {
                l.split("  ")
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(String::from)
                    .collect()
            };
            let header = split(lines.next().unwrap_or_default());
            let rows: Vec<Vec<String>> = lines.map(split).collect();
            (header, rows)
        }
    };

    let (header, rows) = table(&["get", "pdb"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "MIN AVAILABLE",
            "MAX UNAVAILABLE",
            "ALLOWED DISRUPTIONS",
            "AGE"
        ]
    );
    assert_eq!(rows[0][..4], ["quorum", "2", "N/A", "0"]);

    let (header, rows) = table(&["get", "pv"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE"
        ]
    );
    assert_eq!(rows[0][..4], ["pv-a", "1Gi", "RWO", "Delete"]);

    let (header, _) = table(&["get", "pvc"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE"
        ]
    );

    let (header, rows) = table(&["get", "cronjobs", "-o", "wide"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "SCHEDULE",
            "TIMEZONE",
            "SUSPEND",
            "ACTIVE",
            "LAST SCHEDULE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(
        rows[0][..6],
        ["backup", "*/5 * * * *", "<none>", "False", "0", "<none>"]
    );

    let (header, rows) = table(&["get", "jobs", "-o", "wide"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert_eq!(rows[0][..3], ["once", "Running", "0/1"]);
    assert!(
        rows[0]
            .last()
            .unwrap()
            .starts_with("batch.kubernetes.io/controller-uid="),
        "{rows:?}"
    );

    let (header, rows) = table(&["get", "endpoints", "db"]).await;
    assert_eq!(header, ["NAME", "ENDPOINTS", "AGE"]);
    assert_eq!(
        rows[0][1],
        "10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 + 1 more..."
    );

    let (header, rows) = table(&["get", "sts", "-o", "wide"]).await;
    assert_eq!(header, ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]);
    assert_eq!(rows[0][3..], ["c", "nginx:1.25"]);

    let (header, rows) = table(&["get", "svc", "kubernetes"]).await;
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(
        rows[0][..5],
        ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    );
}
