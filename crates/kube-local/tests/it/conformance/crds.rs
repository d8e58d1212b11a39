//! Custom resources: schema validation, pruning, defaults, CEL, scale, printer columns, kubectl.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::common::*;

pub fn database_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "databases.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "databases", "singular": "database", "kind": "Database", "shortNames": ["db"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}},
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine", "priority": 1},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "description": "DatabaseSpec is the desired state of a database.",
                            "required": ["engine"],
                            "properties": {
                                "engine": {"type": "string", "enum": ["etcd", "postgres"], "description": "Engine to run."},
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 7, "default": 1},
                                "storage": {"type": "string", "x-kubernetes-validations": [
                                    {"rule": "self == oldSelf", "message": "storage is immutable"}
                                ]},
                                "version": {"type": "string", "pattern": "^3\\.[0-9]+$"}
                            },
                            "x-kubernetes-validations": [
                                {"rule": "self.replicas % 2 == 1 || self.replicas == 0", "message": "replicas must be odd"}
                            ]
                        },
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                            "replicas": {"type": "integer"},
                            "selector": {"type": "string"},
                            "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                        }}
                    }
                }}
            }]
        }
    }))
    .unwrap()
}

pub async fn db_env() -> kube_local::Environment {
    kube_local::Environment::builder()
        .crds(vec![database_crd()])
        .build()
        .await
        .unwrap()
}

pub fn dbs(env: &kube_local::Environment) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
    };
    Api::namespaced_with(env.client(), "default", &ar)
}

fn db(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": name}, "spec": spec})).unwrap()
}

fn causes(e: kube::Error) -> (u16, Vec<(String, String)>) {
    match e {
        kube::Error::Api(s) => (
            s.code,
            s.details
                .map(|d| d.causes.into_iter().map(|c| (c.field, c.message)).collect())
                .unwrap_or_default(),
        ),
        other => panic!("expected API error: {other:?}"),
    }
}

#[tokio::test]
async fn crd_is_established_with_conditions() {
    let env = db_env().await;
    let api: Api<CustomResourceDefinition> = Api::all(env.client());
    let crd = api.get("databases.example.com").await.unwrap();
    let status = crd.status.unwrap();
    let types: Vec<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert!(
        types.contains(&("Established".into(), "True".into())),
        "{types:?}"
    );
    assert!(
        types.contains(&("NamesAccepted".into(), "True".into())),
        "{types:?}"
    );
    assert_eq!(status.stored_versions, Some(vec!["v1".to_string()]));
    assert_eq!(status.accepted_names.unwrap().kind, "Database");
}

#[tokio::test]
async fn crd_created_through_the_api_is_served() {
    let env = env().await;
    let api: Api<CustomResourceDefinition> = Api::all(env.client());
    api.create(&PostParams::default(), &database_crd())
        .await
        .unwrap();
    let created = dbs(&env)
        .create(&PostParams::default(), &db("a", json!({"engine": "etcd"})))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["replicas"], 1, "default applied");
    let (code, _, body) = raw(&env, "GET", "/apis/example.com/v1", None, None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["databases", "databases/status", "databases/scale"]);
}

#[tokio::test]
async fn schema_violations_are_422_with_field_paths() {
    let env = db_env().await;
    let (code, mut got) = causes(
        dbs(&env)
            .create(
                &PostParams::default(),
                &db(
                    "bad",
                    json!({"engine": "mysql", "replicas": 9, "version": "4.0"}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    got.sort();
    let fields: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        ["spec.engine", "spec.replicas", "spec.version"],
        "{got:?}"
    );
    let (code, got) = causes(
        dbs(&env)
            .create(&PostParams::default(), &db("bad", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(got[0].0, "spec.engine");
    assert!(got[0].1.starts_with("Required value"), "{got:?}");
}

#[tokio::test]
async fn unknown_fields_are_pruned_and_strict_validation_rejects_them() {
    let env = db_env().await;
    let created = dbs(&env)
        .create(
            &PostParams::default(),
            &db("p", json!({"engine": "etcd", "bogus": 1})),
        )
        .await
        .unwrap();
    assert!(created.data["spec"].get("bogus").is_none());
    let (code, headers, _) = raw(&env, "POST", "/apis/example.com/v1/namespaces/default/databases", Some("application/json"), Some(json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "w"}, "spec": {"engine": "etcd", "bogus": 1}}))).await;
    assert_eq!(code, 201);
    let warning = headers.get("warning").unwrap().to_str().unwrap();
    assert!(
        warning.starts_with("299 - ") && warning.contains("unknown field \\\"spec.bogus\\\""),
        "{warning}"
    );
    let (code, _, body) = raw(&env, "POST", "/apis/example.com/v1/namespaces/default/databases?fieldValidation=Strict", Some("application/json"), Some(json!({"apiVersion": "example.com/v1", "kind": "Database", "metadata": {"name": "s"}, "spec": {"engine": "etcd", "bogus": 1}}))).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"spec.bogus\""),
        "{body}"
    );
}

#[tokio::test]
async fn cel_rules_reject_invalid_objects() {
    let env = db_env().await;
    let (code, got) = causes(
        dbs(&env)
            .create(
                &PostParams::default(),
                &db("even", json!({"engine": "etcd", "replicas": 2})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(got[0].0, "spec");
    assert!(got[0].1.contains("replicas must be odd"), "{got:?}");
}

#[tokio::test]
async fn cel_transition_rules_use_old_self() {
    let env = db_env().await;
    let api = dbs(&env);
    api.create(
        &PostParams::default(),
        &db("t", json!({"engine": "etcd", "storage": "1Gi"})),
    )
    .await
    .unwrap();
    // Unchanged storage passes the transition rule; other changes go through.
    api.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    let (code, got) = causes(
        api.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"storage": "2Gi"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert_eq!(got[0].0, "spec.storage");
    assert!(got[0].1.contains("storage is immutable"), "{got:?}");
}

#[tokio::test]
async fn scale_subresource_maps_through_crd_paths() {
    let env = db_env().await;
    let api = dbs(&env);
    api.create(
        &PostParams::default(),
        &db("s", json!({"engine": "etcd", "replicas": 3})),
    )
    .await
    .unwrap();
    api.patch_status(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"replicas": 3, "selector": "app=s"}})),
    )
    .await
    .unwrap();
    let scale = api.get_scale("s").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    let status = scale.status.unwrap();
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (3, Some("app=s"))
    );
    api.patch_scale(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 5}})),
    )
    .await
    .unwrap();
    assert_eq!(api.get("s").await.unwrap().data["spec"]["replicas"], 5);
    // CEL still applies to writes through /scale.
    let (code, _) = causes(
        api.patch_scale(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422);
}

#[tokio::test]
async fn deleting_the_crd_removes_its_objects_and_endpoints() {
    let env = db_env().await;
    dbs(&env)
        .create(&PostParams::default(), &db("x", json!({"engine": "etcd"})))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    crds.delete("databases.example.com", &Default::default())
        .await
        .unwrap();
    let (code, _, _) = raw(
        &env,
        "GET",
        "/apis/example.com/v1/namespaces/default/databases",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn kubectl_get_shows_printer_columns_and_wide() {
    let env = db_env().await;
    dbs(&env)
        .create(
            &PostParams::default(),
            &db("one", json!({"engine": "etcd", "replicas": 3})),
        )
        .await
        .unwrap();
    dbs(&env)
        .patch_status(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    let out = kubectl(&env, &["get", "databases"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAME", "REPLICAS", "PHASE", "AGE"]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["one", "3", "Ready"]);
    let out = kubectl(&env, &["get", "db", "-o", "wide"]).await;
    let text = stdout(&out);
    assert_eq!(
        text.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "REPLICAS", "PHASE", "ENGINE", "AGE"],
        "{text}"
    );
}

#[tokio::test]
async fn kubectl_explain_custom_resource_spec() {
    let env = db_env().await;
    let out = kubectl(&env, &["explain", "databases.spec"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("KIND:       Database"), "{text}");
    assert!(
        text.contains("DatabaseSpec is the desired state of a database."),
        "{text}"
    );
    assert!(
        text.contains("engine\t<string> -required-") || text.contains("engine"),
        "{text}"
    );
}

#[tokio::test]
async fn kubectl_apply_custom_resource_client_and_server_side() {
    let env = db_env().await;
    let manifest = "apiVersion: example.com/v1\nkind: Database\nmetadata:\n  name: k\nspec:\n  engine: etcd\n  replicas: 3\n";
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(manifest)).await;
    assert_eq!(
        stdout(&out).trim(),
        "database.example.com/k created",
        "{}",
        stderr(&out)
    );
    let out = kubectl_in(
        &env,
        &["apply", "-f", "-"],
        Some(&manifest.replace("replicas: 3", "replicas: 5")),
    )
    .await;
    assert_eq!(
        stdout(&out).trim(),
        "database.example.com/k configured",
        "{}",
        stderr(&out)
    );
    let out = kubectl_in(
        &env,
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&manifest.replace("replicas: 3", "replicas: 7")),
    )
    .await;
    assert_eq!(
        stdout(&out).trim(),
        "database.example.com/k serverside-applied",
        "{}",
        stderr(&out)
    );
    assert_eq!(
        dbs(&env).get("k").await.unwrap().data["spec"]["replicas"],
        7
    );
    // Invalid objects are rejected with the field path in kubectl's message.
    let out = kubectl_in(
        &env,
        &["apply", "-f", "-"],
        Some(
            &manifest
                .replace("replicas: 3", "replicas: 4")
                .replace("name: k", "name: k2"),
        ),
    )
    .await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec: Invalid value"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn kubectl_scale_custom_resource() {
    let env = db_env().await;
    dbs(&env)
        .create(
            &PostParams::default(),
            &db("sc", json!({"engine": "etcd", "replicas": 1})),
        )
        .await
        .unwrap();
    let out = kubectl(&env, &["scale", "database", "sc", "--replicas=3"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        dbs(&env).get("sc").await.unwrap().data["spec"]["replicas"],
        3
    );
}

#[tokio::test]
async fn kubectl_wait_for_condition() {
    let env = db_env().await;
    dbs(&env)
        .create(&PostParams::default(), &db("w", json!({"engine": "etcd"})))
        .await
        .unwrap();
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let waiter = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(kubeconfig.parent().unwrap().join("kubectl-cache"))
            .args([
                "wait",
                "--for=condition=Ready",
                "database/w",
                "--timeout=10s",
            ])
            .output()
            .unwrap()
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    dbs(&env)
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        )
        .await
        .unwrap();
    let out = waiter.await.unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "database.example.com/w condition met");
}

#[tokio::test]
async fn kubectl_get_watch_streams_rows() {
    let env = db_env().await;
    dbs(&env)
        .create(
            &PostParams::default(),
            &db("first", json!({"engine": "etcd"})),
        )
        .await
        .unwrap();
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    // Rows are read as kubectl prints them: the second object is created only
    // once the watch shows the first (a loaded machine may take seconds to
    // start kubectl), and kubectl is stopped once the second row arrives.
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.parent().unwrap().join("kubectl-cache"))
        .args(["get", "databases", "-w"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rows) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut names = Vec::new();
    for _ in 0..2 {
        names.push(next_row(&mut rows).await);
    }
    dbs(&env)
        .create(
            &PostParams::default(),
            &db("second", json!({"engine": "etcd"})),
        )
        .await
        .unwrap();
    names.push(next_row(&mut rows).await);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let names: Vec<&str> = names
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        ["NAME", "first", "second"],
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The next line kubectl printed (empty after 30 s without one).
async fn next_row(rows: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(30), rows.recv())
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn two_version_crd(strategy: Value) -> CustomResourceDefinition {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "conversion": strategy,
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false, "schema": schema},
                {"name": "v1", "served": true, "storage": true, "schema": schema}
            ]}
    }))
    .unwrap()
}

#[tokio::test]
async fn multiple_versions_with_none_conversion_rewrite_api_version() {
    let env = kube_local::Environment::builder()
        .crds(vec![two_version_crd(json!({"strategy": "None"}))])
        .build()
        .await
        .unwrap();
    let (code, _, created) = raw(&env, "POST", "/apis/example.com/v1beta1/namespaces/default/gadgets", Some("application/json"), Some(json!({"apiVersion": "example.com/v1beta1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"x": 1}}))).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["apiVersion"], "example.com/v1beta1");
    let (_, _, v1) = raw(
        &env,
        "GET",
        "/apis/example.com/v1/namespaces/default/gadgets/g",
        None,
        None,
    )
    .await;
    assert_eq!(v1["apiVersion"], "example.com/v1");
    assert_eq!(v1["spec"]["x"], 1);
    let (_, _, group) = raw(&env, "GET", "/apis/example.com", None, None).await;
    assert_eq!(group["preferredVersion"]["version"], "v1");
}
