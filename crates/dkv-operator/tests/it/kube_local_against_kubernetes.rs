//! kube-local measured against the real thing: the same requests sent to
//! kube-local (`dkv local up --no-operator`) and to kube-apiserver 1.37
//! (`dkv local up --no-operator --kubernetes 1.37`), each as its admin, and
//! the answers compared by what clients read of them: the status code; the
//! body's kind and apiVersion; for a Status its status, reason, code and
//! details (name, group, kind, causes); for an object whether it is marked
//! for deletion and its finalizers; for a watch the types and codes of its
//! first events. Covered: DELETE answers per resource, error Statuses,
//! server-side apply conflicts, resourceVersion semantics and expired
//! watches, the served groups and resources, and an image no registry has.
//!
//! Every difference fails the test unless [`KNOWN`] lists it with the reason
//! it stays (crates/kube-local/README.md lists the same).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use http_body_util::BodyExt as _;
use kube::Client;
use serde_json::{Value, json};

use super::real_control_plane::{client_of, local_up};

/// Probes whose answers differ on purpose, with the reason.
const KNOWN: &[(&str, &str)] = &[
    (
        "POST api/v1/namespaces/probe/replicationcontrollers",
        "kube-local serves no ReplicationController (ReplicaSet replaced it; nothing dkv runs creates one)",
    ),
    (
        "DELETE api/v1/namespaces/probe/replicationcontrollers/rc",
        "kube-local serves no ReplicationController",
    ),
    (
        "POST apis/apiregistration.k8s.io/v1/apiservices",
        "kube-local aggregates no API servers: its APIServices are the built-in groups, read-only",
    ),
    (
        "DELETE apis/apiregistration.k8s.io/v1/apiservices/v1.probe.example.com",
        "kube-local's APIServices are read-only",
    ),
    (
        "WATCH from resourceVersion 1 (long compacted)",
        "no root CA publisher: kube-local writes no kube-root-ca.crt ConfigMap into each namespace (its kubelet mounts the CA itself)",
    ),
    (
        "served API groups",
        "kube-local serves the groups dkv and kubectl use; not autoscaling, flowcontrol, networking, node, resource, scheduling, storagemigration",
    ),
    (
        "served core resources",
        "not served: bindings, componentstatuses, limitranges, podtemplates, replicationcontrollers, resourcequotas, pods/binding, pods/resize and the proxy subresources",
    ),
];

/// One request's answer: its status code and body (JSON, or the text).
#[derive(Debug, Clone)]
struct Answer {
    code: u16,
    body: Value,
}

async fn send(
    client: &Client,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> Answer {
    let bytes = match &body {
        Value::Null => Vec::new(),
        Value::String(s) => s.clone().into_bytes(),
        other => serde_json::to_vec(other).unwrap(),
    };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(kube::client::Body::from(bytes))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer { code, body }
}

async fn get(client: &Client, path: &str) -> Answer {
    send(client, "GET", path, "application/json", Value::Null).await
}

async fn post(client: &Client, path: &str, body: Value) -> Answer {
    send(client, "POST", path, "application/json", body).await
}

async fn delete(client: &Client, path: &str) -> Answer {
    send(client, "DELETE", path, "application/json", Value::Null).await
}

/// What clients read of an answer.
fn shape(answer: &Answer) -> Value {
    let b = &answer.body;
    let kind = b["kind"].as_str().unwrap_or_default();
    let mut out = json!({"code": answer.code, "kind": kind});
    if kind.is_empty() {
        // Not an API object: whether it was text at all.
        out["text"] = json!(b.is_string());
        return out;
    }
    out["apiVersion"] = b["apiVersion"].clone();
    if kind == "Status" {
        out["status"] = b["status"].clone();
        out["reason"] = b["reason"].clone();
        out["statusCode"] = b["code"].clone();
        let d = &b["details"];
        if !d.is_null() {
            let causes: Vec<Value> = d["causes"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .map(|c| json!({"reason": c["reason"], "field": c["field"]}))
                        .collect()
                })
                .unwrap_or_default();
            out["details"] = json!({"name": d["name"], "group": d["group"], "kind": d["kind"], "causes": causes});
        }
    } else if !kind.ends_with("List") {
        out["deleting"] = json!(!b["metadata"]["deletionTimestamp"].is_null());
        out["finalizers"] = b["metadata"]["finalizers"].clone();
    }
    out
}

/// Answers of both servers to one probe.
struct Compared {
    name: String,
    local: Value,
    real: Value,
}

struct Servers {
    local: Client,
    real: Client,
    compared: Vec<Compared>,
}

impl Servers {
    /// Runs `probe` against both and records the shapes of what it returns.
    async fn probe<F>(&mut self, name: &str, probe: F)
    where
        F: AsyncFn(&Client) -> Value,
    {
        let local = probe(&self.local).await;
        let real = probe(&self.real).await;
        self.compared.push(Compared {
            name: name.to_owned(),
            local,
            real,
        });
    }
}

const NS: &str = "probe";

/// Objects whose DELETE answers are compared: (resource path under the
/// namespace or cluster, name, the object).
fn deletable() -> Vec<(&'static str, &'static str, Value)> {
    // Bound to the node already: deleted gracefully on both (an unscheduled
    // pod goes at once, and when the scheduler gets to it is a race).
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "600"]}]}});
    vec![
        (
            "api/v1/namespaces/probe/configmaps",
            "cm",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
        ),
        (
            "api/v1/namespaces/probe/secrets",
            "s",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        ),
        (
            "api/v1/namespaces/probe/serviceaccounts",
            "sa",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}}),
        ),
        (
            "api/v1/namespaces/probe/services",
            "svc",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
            "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}}),
        ),
        (
            "api/v1/namespaces/probe/persistentvolumeclaims",
            "pvc",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        ("api/v1/namespaces/probe/pods", "p", pod),
        (
            "apis/apps/v1/namespaces/probe/deployments",
            "d",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (
            "apis/batch/v1/namespaces/probe/jobs",
            "j",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (
            "apis/policy/v1/namespaces/probe/poddisruptionbudgets",
            "pdb",
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}),
        ),
        (
            "apis/rbac.authorization.k8s.io/v1/namespaces/probe/roles",
            "r",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}, "rules": []}),
        ),
        (
            "apis/coordination.k8s.io/v1/namespaces/probe/leases",
            "l",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"}}),
        ),
        (
            "api/v1/namespaces/probe/replicationcontrollers",
            "rc",
            json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc"},
            "spec": {"replicas": 0, "selector": {"app": "rc"},
                "template": {"metadata": {"labels": {"app": "rc"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        ),
        (
            "api/v1/namespaces",
            "doomed",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}}),
        ),
        (
            "apis/apiregistration.k8s.io/v1/apiservices",
            "v1.probe.example.com",
            json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1.probe.example.com"},
            "spec": {"group": "probe.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10,
                "service": {"namespace": "probe", "name": "nothing", "port": 443}, "insecureSkipTLSVerify": true}}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn kube_local_answers_as_kube_apiserver_does() {
    let dir = tempfile::tempdir().unwrap();
    let (local_state, real_state) = (dir.path().join("local"), dir.path().join("real"));
    let _local_down = local_up(&local_state, &["--no-operator", "--nodes", "1"]);
    let _real_down = local_up(
        &real_state,
        &["--no-operator", "--nodes", "1", "--kubernetes", "1.37"],
    );
    let mut servers = Servers {
        local: client_of(&local_state.join("kubeconfig")).await,
        real: client_of(&real_state.join("kubeconfig")).await,
        compared: Vec::new(),
    };
    for client in [&servers.local, &servers.real] {
        let made = post(
            client,
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .await;
        assert_eq!(made.code, 201, "{:?}", made.body);
    }
    // The namespace's default ServiceAccount (pods wait for it).
    for client in [&servers.local, &servers.real] {
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(client, "/api/v1/namespaces/probe/serviceaccounts/default")
            .await
            .code
            != 200
        {
            assert!(Instant::now() < deadline, "no default ServiceAccount");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    // DELETE answers, per resource; creating each first.
    for (path, name, object) in deletable() {
        servers
            .probe(&format!("POST {path}"), async |c| {
                shape(&post(c, &format!("/{path}"), object.clone()).await)
            })
            .await;
        servers
            .probe(&format!("DELETE {path}/{name}"), async |c| {
                shape(&delete(c, &format!("/{path}/{name}")).await)
            })
            .await;
    }
    servers
        .probe("DELETE a missing ConfigMap", async |c| {
            shape(&delete(c, "/api/v1/namespaces/probe/configmaps/missing").await)
        })
        .await;
    servers
        .probe("DELETE a collection of ConfigMaps", async |c| {
            post(c, "/api/v1/namespaces/probe/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one", "labels": {"set": "x"}}})).await;
            shape(&delete(c, "/api/v1/namespaces/probe/configmaps?labelSelector=set%3Dx").await)
        })
        .await;

    // Error Statuses.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "taken"}, "data": {"a": "1"}});
    servers
        .probe("GET a missing ConfigMap", async |c| {
            shape(&get(c, "/api/v1/namespaces/probe/configmaps/missing").await)
        })
        .await;
    servers
        .probe("POST a ConfigMap twice", async |c| {
            post(c, "/api/v1/namespaces/probe/configmaps", cm.clone()).await;
            shape(&post(c, "/api/v1/namespaces/probe/configmaps", cm.clone()).await)
        })
        .await;
    servers
        .probe("POST an invalid name", async |c| {
            shape(&post(c, "/api/v1/namespaces/probe/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})).await)
        })
        .await;
    servers
        .probe("PUT with a stale resourceVersion", async |c| {
            let mut stale = get(c, "/api/v1/namespaces/probe/configmaps/taken")
                .await
                .body;
            stale["data"]["a"] = json!("2");
            send(
                c,
                "PUT",
                "/api/v1/namespaces/probe/configmaps/taken",
                "application/json",
                stale.clone(),
            )
            .await;
            stale["data"]["a"] = json!("3");
            shape(
                &send(
                    c,
                    "PUT",
                    "/api/v1/namespaces/probe/configmaps/taken",
                    "application/json",
                    stale,
                )
                .await,
            )
        })
        .await;
    servers
        .probe("POST into another namespace than the body's", async |c| {
            shape(&post(c, "/api/v1/namespaces/probe/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}})).await)
        })
        .await;
    servers
        .probe("GET an unknown resource", async |c| {
            shape(&get(c, "/api/v1/namespaces/probe/widgets").await)
        })
        .await;
    servers
        .probe("GET an unknown group", async |c| {
            shape(&get(c, "/apis/widgets.example.com/v1/widgets").await)
        })
        .await;
    servers
        .probe("PATCH with a body that is not JSON", async |c| {
            shape(
                &send(
                    c,
                    "PATCH",
                    "/api/v1/namespaces/probe/configmaps/taken",
                    "application/merge-patch+json",
                    json!("{not json"),
                )
                .await,
            )
        })
        .await;
    servers
        .probe("LIST with a malformed label selector", async |c| {
            shape(
                &get(
                    c,
                    "/api/v1/namespaces/probe/configmaps?labelSelector=a%3D%3D%3Db",
                )
                .await,
            )
        })
        .await;

    // Server-side apply: a second manager's different value is a conflict.
    servers
        .probe("server-side apply conflict", async |c| {
            let apply = async |manager: &str, value: &str| {
                send(
                    c,
                    "PATCH",
                    &format!("/api/v1/namespaces/probe/configmaps/applied?fieldManager={manager}"),
                    "application/apply-patch+yaml",
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"k": value}}),
                )
                .await
            };
            let first = apply("one", "1").await;
            assert_eq!(first.code, 201, "{:?}", first.body);
            shape(&apply("two", "2").await)
        })
        .await;

    // resourceVersion semantics and watches.
    servers
        .probe("LIST at resourceVersion 0", async |c| {
            shape(&get(c, "/api/v1/namespaces/probe/configmaps?resourceVersion=0").await)
        })
        .await;
    servers
        .probe("LIST with resourceVersion that is not a number", async |c| {
            shape(&get(c, "/api/v1/namespaces/probe/configmaps?resourceVersion=abc&resourceVersionMatch=Exact").await)
        })
        .await;
    servers
        .probe(
            "LIST with resourceVersionMatch and no resourceVersion",
            async |c| {
                shape(
                    &get(
                        c,
                        "/api/v1/namespaces/probe/configmaps?resourceVersionMatch=NotOlderThan",
                    )
                    .await,
                )
            },
        )
        .await;
    servers
        .probe("WATCH from resourceVersion 1 (long compacted)", async |c| {
            first_watch_events(
                c,
                "/api/v1/namespaces/probe/configmaps?watch=true&resourceVersion=1&timeoutSeconds=2",
            )
            .await
        })
        .await;
    servers
        .probe("WATCH with bookmarks: what a change sends", async |c| {
            let list = get(c, "/api/v1/namespaces/probe/configmaps").await;
            let rv = list.body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
            let c2 = c.clone();
            let watch = tokio::spawn(async move {
                first_watch_events(&c2, &format!("/api/v1/namespaces/probe/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=3")).await
            });
            tokio::time::sleep(Duration::from_millis(500)).await;
            post(c, "/api/v1/namespaces/probe/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}})).await;
            watch.await.unwrap()
        })
        .await;

    // The served groups and core resources.
    servers
        .probe("served API groups", async |c| {
            let groups: BTreeSet<String> = get(c, "/apis").await.body["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g["name"].as_str().map(String::from))
                .collect();
            json!(groups)
        })
        .await;
    servers
        .probe("served core resources", async |c| {
            let resources: BTreeSet<String> = get(c, "/api/v1").await.body["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(String::from))
                .collect();
            json!(resources)
        })
        .await;

    // An image no registry has: the kubelet cannot pull it.
    servers
        .probe("a pod whose image tag does not exist", async |c| {
            post(c, "/api/v1/namespaces/probe/pods", json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nopull"},
                "spec": {"containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.99-0"}]}})).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let pod = get(c, "/api/v1/namespaces/probe/pods/nopull").await.body;
                let reason = pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].clone();
                if reason == "ErrImagePull" || reason == "ImagePullBackOff" {
                    return json!({"waiting": "ErrImagePull or ImagePullBackOff", "phase": pod["status"]["phase"]});
                }
                if Instant::now() > deadline {
                    return json!({"waiting": reason, "phase": pod["status"]["phase"]});
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;

    // The report, and the verdict.
    let mut unexplained = Vec::new();
    let (mut same, mut known) = (0, 0);
    for c in &servers.compared {
        if c.local == c.real {
            same += 1;
            continue;
        }
        let reason = KNOWN.iter().find(|(name, _)| *name == c.name);
        eprintln!(
            "DIFFERENT {}{}\n  kube-local:     {}\n  kube-apiserver: {}",
            c.name,
            reason
                .map(|(_, r)| format!(" (known: {r})"))
                .unwrap_or_default(),
            c.local,
            c.real
        );
        match reason {
            Some(_) => known += 1,
            None => unexplained.push(c.name.clone()),
        }
    }
    eprintln!(
        "{} probes: {same} answered alike, {known} differ as listed, {} differ unexplained",
        servers.compared.len(),
        unexplained.len()
    );
    assert!(
        unexplained.is_empty(),
        "kube-local answers differently: {unexplained:#?}"
    );
}

/// The types (and, for ERROR, the Status code and reason) of the events a
/// watch sends before it ends.
async fn first_watch_events(c: &Client, path: &str) -> Value {
    let answer = get(c, path).await;
    if answer.code != 200 {
        return shape(&answer);
    }
    let text = match &answer.body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| {
            let t = e["type"].as_str().unwrap_or_default().to_owned();
            if t == "ERROR" {
                json!({"type": t, "code": e["object"]["code"], "reason": e["object"]["reason"]})
            } else if t == "BOOKMARK" {
                json!({"type": t})
            } else {
                json!({"type": t, "name": e["object"]["metadata"]["name"]})
            }
        })
        .filter(|e| e["type"] != "BOOKMARK")
        .collect();
    json!({"code": answer.code, "events": events})
}
