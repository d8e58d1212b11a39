//! `pods/eviction` under PodDisruptionBudgets, and `kubectl cordon`, `uncordon` and `drain` as a user runs them:
//! concurrent evictions never take more than a budget allows, unready and Pending pods are evicted as upstream
//! decides, and a drain retries the 429s until the budget allows.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::common::{Cluster, eventually, kubectl, kubectl_in, ready, testapp_template};

const NS: &str = "evict";
const WOULD_VIOLATE: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// A client that answers 429 to its caller: kube's default client retries 429s itself.
async fn client_without_retries(c: &Cluster) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(c.env.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

async fn apply(c: &Cluster, manifest: &Value) {
    let (ok, out, err) =
        kubectl_in(&c.env, &["apply", "-f", "-"], Some(&manifest.to_string())).await;
    assert!(ok, "kubectl apply: {out}{err}");
}

/// A Deployment of the test program; `readiness_path` is its readiness probe's path.
async fn deployment(c: &Cluster, name: &str, replicas: i32, readiness_path: &str) {
    let mut template = testapp_template(json!({"app": name}), json!([]));
    template["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] = json!(readiness_path);
    apply(
        c,
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
        }),
    )
    .await;
}

async fn budget(c: &Cluster, name: &str, app: &str, spec: Value) {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    apply(
        c,
        &json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": NS}, "spec": spec,
        }),
    )
    .await;
}

/// The app's pods, not being deleted.
async fn pods_of(c: &Cluster, app: &str) -> Vec<Pod> {
    c.api::<Pod>(NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn ready_pods(c: &Cluster, app: &str, n: usize) -> Vec<String> {
    eventually(
        &format!("{n} ready pods of {app}"),
        Duration::from_secs(60),
        || async {
            let pods = pods_of(c, app).await;
            (pods.len() == n && pods.iter().all(ready)).then(|| {
                pods.iter()
                    .filter_map(|p| p.metadata.name.clone())
                    .collect()
            })
        },
    )
    .await
}

/// Waits until the budget's status says `allowed` disruptions for its current spec.
async fn allowed(c: &Cluster, name: &str, allowed: i32) -> PodDisruptionBudget {
    eventually(
        &format!("budget {name} allowing {allowed}"),
        Duration::from_secs(60),
        || async {
            let pdb = c.api::<PodDisruptionBudget>(NS).get(name).await.unwrap();
            let status = pdb.status.clone()?;
            (status.observed_generation == pdb.metadata.generation
                && status.disruptions_allowed == Some(allowed))
            .then_some(pdb)
        },
    )
    .await
}

/// Whether the pod is gone or on its way (evictions delete gracefully: the kubelet finishes the pod).
async fn is_evicted(c: &Cluster, name: &str) -> bool {
    c.pod(NS, name)
        .await
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

fn status_of(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Evicts every pod at once; returns how many were evicted and the refusals.
async fn evict_all_at_once(
    client: &kube::Client,
    pods: &[String],
) -> (usize, Vec<kube::core::Status>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let results = futures::future::join_all(
        pods.iter()
            .map(|p| async { api.evict(p, &EvictParams::default()).await }),
    )
    .await;
    let mut evicted = 0;
    let mut refused = Vec::new();
    for r in results {
        match r {
            Ok(_) => evicted += 1,
            Err(e) => refused.push(status_of(e)),
        }
    }
    (evicted, refused)
}

/// A 429 of the budget `budget` needing `needs` healthy pods; how many it has depends on how far its controller
/// has seen the evictions that passed, so any of `has` is right.
fn assert_budget_refusal(s: &kube::core::Status, budget: &str, needs: i32, has: &[i32]) {
    assert_eq!(s.code, 429, "{s:?}");
    assert_eq!(s.reason, "TooManyRequests", "{s:?}");
    assert_eq!(s.message, WOULD_VIOLATE);
    let causes = s
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1, "{s:?}");
    assert_eq!(causes[0].reason, "DisruptionBudget");
    assert!(
        has.iter().any(|h| causes[0].message
            == format!(
                "The disruption budget {budget} needs {needs} healthy pods and has {h} currently"
            )),
        "{}",
        causes[0].message
    );
}

#[tokio::test]
async fn concurrent_evictions_never_take_more_than_the_budget_allows() {
    let c = Cluster::start(NS).await;
    let client = client_without_retries(&c).await;
    deployment(&c, "web", 3, "/healthz").await;
    budget(&c, "web", "web", json!({"minAvailable": 2})).await;
    let pods = ready_pods(&c, "web", 3).await;
    allowed(&c, "web", 1).await;

    let (evicted, refused) = evict_all_at_once(&client, &pods).await;
    assert_eq!(evicted, 1, "refusals: {refused:?}");
    assert_eq!(refused.len(), 2);
    for s in &refused {
        assert_budget_refusal(s, "web", 2, &[2, 3]);
    }

    // The Deployment replaces the evicted pod; once it is Ready the budget allows one disruption again.
    let pods = ready_pods(&c, "web", 3).await;
    allowed(&c, "web", 1).await;
    // A dry run takes nothing: the pod stays and so does the budget's disruption.
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let dry = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    api.evict(&pods[0], &dry).await.unwrap();
    assert!(!is_evicted(&c, &pods[0]).await);
    let pdb = c.api::<PodDisruptionBudget>(NS).get("web").await.unwrap();
    assert_eq!(pdb.status.unwrap().disruptions_allowed, Some(1));
    // An eviction of a missing pod is 404 and changes nothing.
    let missing = status_of(
        api.evict("no-such-pod", &EvictParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "pods \"no-such-pod\" not found");
}

#[tokio::test]
async fn percentages_and_max_unavailable_scale_with_the_deployment() {
    let c = Cluster::start(NS).await;
    let client = client_without_retries(&c).await;
    deployment(&c, "api", 3, "/healthz").await;
    // 34% of 3 rounds up to 2 unavailable: 1 must stay healthy.
    budget(&c, "api", "api", json!({"maxUnavailable": "34%"})).await;
    let pods = ready_pods(&c, "api", 3).await;
    let pdb = allowed(&c, "api", 2).await;
    let status = pdb.status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.desired_healthy,
            status.current_healthy
        ),
        (Some(3), Some(1), Some(3))
    );

    let (evicted, refused) = evict_all_at_once(&client, &pods).await;
    assert_eq!(evicted, 2, "refusals: {refused:?}");
    assert_eq!(refused.len(), 1);
    assert_budget_refusal(&refused[0], "api", 1, &[1, 2, 3]);

    // minAvailable as a percentage of the same Deployment: 50% of 3 is 2 healthy.
    ready_pods(&c, "api", 3).await;
    let (ok, out, err) = kubectl(
        &c.env,
        &["-n", NS, "patch", "pdb", "api", "--type=json", "-p",
          r#"[{"op":"remove","path":"/spec/maxUnavailable"},{"op":"add","path":"/spec/minAvailable","value":"50%"}]"#],
    )
    .await;
    assert!(ok, "{out}{err}");
    let pdb = allowed(&c, "api", 1).await;
    assert_eq!(pdb.status.unwrap().desired_healthy, Some(2));
}

#[tokio::test]
async fn unready_and_pending_pods_are_evicted_as_upstream_decides() {
    let c = Cluster::start(NS).await;
    let client = client_without_retries(&c).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    // Running, never Ready: the readiness probe reads a file that does not exist.
    deployment(&c, "slow", 2, "/file?path=/no/such/file").await;
    budget(&c, "slow", "slow", json!({"minAvailable": 1})).await;
    let running: Vec<String> = eventually(
        "two running unready pods",
        Duration::from_secs(60),
        || async {
            let pods = pods_of(&c, "slow").await;
            let running = pods.iter().filter(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && !ready(p)
            });
            let names: Vec<String> = running.filter_map(|p| p.metadata.name.clone()).collect();
            (names.len() == 2).then_some(names)
        },
    )
    .await;
    allowed(&c, "slow", 0).await;

    // IfHealthyBudget (the default): the budget is not healthy (0 of 1), so an unready pod is guarded too.
    let refused = status_of(
        api.evict(&running[0], &EvictParams::default())
            .await
            .unwrap_err(),
    );
    assert_budget_refusal(&refused, "slow", 1, &[0]);
    assert!(!is_evicted(&c, &running[0]).await);

    // AlwaysAllow: an unready pod is evicted whatever the budget says, and takes nothing from it.
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "-n",
            NS,
            "patch",
            "pdb",
            "slow",
            "--type=merge",
            "-p",
            r#"{"spec":{"unhealthyPodEvictionPolicy":"AlwaysAllow"}}"#,
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    allowed(&c, "slow", 0).await;
    api.evict(&running[0], &EvictParams::default())
        .await
        .unwrap();
    assert!(is_evicted(&c, &running[0]).await);

    // A Pending pod (its image cannot be pulled) is evicted without asking any budget.
    let pending: Pod = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "labels": {"app": "stuck"}},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none:1"}]},
    }))
    .unwrap();
    c.api::<Pod>(NS)
        .create(&PostParams::default(), &pending)
        .await
        .unwrap();
    budget(&c, "stuck", "stuck", json!({"minAvailable": 5})).await;
    allowed(&c, "stuck", 0).await;
    api.evict("stuck", &EvictParams::default()).await.unwrap();
    assert!(is_evicted(&c, "stuck").await);

    // Two budgets selecting one pod: kube-apiserver's 500, and the pod stays.
    budget(&c, "slow-too", "slow", json!({"maxUnavailable": 1})).await;
    let twice = status_of(
        api.evict(&running[1], &EvictParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(twice.code, 500, "{twice:?}");
    assert_eq!(
        twice.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(!is_evicted(&c, &running[1]).await);
}

/// POSTs `body` to the pod's `eviction` subresource; returns the HTTP status and the answer.
async fn post_eviction(c: &Cluster, pod: &str, body: Value) -> (u16, Value) {
    let req = http::Request::post(format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction"))
        .header("content-type", "application/json")
        .body(body.to_string().into_bytes())
        .unwrap();
    let (code, _, bytes) = crate::shared::send_request(&c.client(), req).await;
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_evictions_delete_options_and_versions_are_honoured() {
    let c = Cluster::start(NS).await;
    deployment(&c, "one", 1, "/healthz").await;
    let pod = ready_pods(&c, "one", 1).await.remove(0);
    let uid = c.pod(NS, &pod).await.unwrap().metadata.uid.unwrap();

    // A uid precondition that does not hold: 409, and the pod stays.
    let (code, answer) = post_eviction(
        &c,
        &pod,
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod},
               "deleteOptions": {"preconditions": {"uid": "not-the-uid"}}}),
    )
    .await;
    assert_eq!(
        (code, &answer["reason"]),
        (409, &json!("Conflict")),
        "{answer}"
    );
    assert!(!is_evicted(&c, &pod).await);
    // The body must name the pod of the URL.
    let (code, answer) = post_eviction(
        &c,
        &pod,
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}),
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(
        answer["message"],
        "name in URL does not match name in Eviction object"
    );

    // A policy/v1beta1 Eviction with a holding uid precondition and no grace period: the pod is gone at once.
    let (code, answer) = post_eviction(
        &c,
        &pod,
        json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod},
               "deleteOptions": {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}}),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"], "Success");
    let left = c.pod(NS, &pod).await;
    assert!(left.is_none(), "still there: {left:?}");
}

/// The one node's name, as kubectl lists it (`node/NAME`).
async fn the_node(c: &Cluster) -> String {
    let (ok, out, err) = kubectl(&c.env, &["get", "nodes", "-o", "name"]).await;
    assert!(ok, "{out}{err}");
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("node/"))
        .collect();
    assert!(!names.is_empty(), "no node listed: {out}");
    names[0].to_string()
}

fn unschedulable_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.key == "node.kubernetes.io/unschedulable" && t.effect == "NoSchedule")
        })
}

async fn wait_node(c: &Cluster, name: &str, cordoned: bool) -> Node {
    let nodes: Api<Node> = Api::all(c.client());
    eventually(
        &format!("node {name} cordoned={cordoned} with the taint to match"),
        Duration::from_secs(20),
        || async {
            let node = nodes.get(name).await.unwrap();
            let unschedulable = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
            (unschedulable == cordoned && unschedulable_taint(&node) == cordoned).then_some(node)
        },
    )
    .await
}

#[tokio::test]
async fn kubectl_cordon_and_uncordon_set_unschedulable_and_the_taint() {
    let c = Cluster::start(NS).await;
    let node = the_node(&c).await;
    let (ok, out, err) = kubectl(&c.env, &["cordon", &node]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), format!("node/{node} cordoned"));
    wait_node(&c, &node, true).await;
    let (ok, out, err) = kubectl(&c.env, &["get", "node", &node]).await;
    assert!(ok && out.contains("SchedulingDisabled"), "{out}{err}");

    let (ok, out, err) = kubectl(&c.env, &["uncordon", &node]).await;
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), format!("node/{node} uncordoned"));
    wait_node(&c, &node, false).await;
}

#[tokio::test]
async fn kubectl_drain_retries_the_budget_and_never_breaks_it() {
    let c = Cluster::start(NS).await;
    let node = the_node(&c).await;
    deployment(&c, "web", 3, "/healthz").await;
    budget(&c, "web", "web", json!({"maxUnavailable": 1})).await;
    let originals = ready_pods(&c, "web", 3).await;
    allowed(&c, "web", 1).await;

    let drain_args = [
        "drain",
        node.as_str(),
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=180s",
    ];
    let drain = kubectl(&c.env, &drain_args);
    // While the drain runs: the node is cordoned, the budget's floor of 2 Ready pods holds, and once the drain
    // has met the budget the node is uncordoned so the replacements can be placed on it (the only node).
    let watch = async {
        wait_node(&c, &node, true).await;
        let started = Instant::now();
        let mut uncordoned = false;
        let mut fewest_ready = usize::MAX;
        loop {
            let pods = pods_of(&c, "web").await;
            fewest_ready = fewest_ready.min(pods.iter().filter(|p| ready(p)).count());
            let gone = originals
                .iter()
                .all(|o| !pods.iter().any(|p| p.metadata.name.as_ref() == Some(o)));
            if gone {
                return fewest_ready;
            }
            // More evictions than pods: the drain has retried one the budget refused.
            let evictions = c
                .env
                .requests()
                .count(kube_local::api_traffic::Verb::Create, "pods/eviction");
            if !uncordoned && evictions > originals.len() as u64 {
                let (ok, out, err) = kubectl(&c.env, &["uncordon", &node]).await;
                assert!(ok, "{out}{err}");
                uncordoned = true;
            }
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "drain never evicted every pod"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ((ok, out, err), fewest_ready) = tokio::join!(drain, watch);
    let printed = format!("{out}{err}");
    assert!(ok, "kubectl drain failed: {printed}");
    assert!(
        fewest_ready >= 2,
        "the budget was broken: {fewest_ready} Ready pods at one point"
    );
    assert!(
        printed.contains(&format!("node/{node} cordoned")),
        "{printed}"
    );
    for pod in &originals {
        assert!(
            printed.contains(&format!("pod/{pod} evicted")),
            "{pod}: {printed}"
        );
    }
    assert!(
        printed.contains(&format!("(will retry after 5s): {WOULD_VIOLATE}")),
        "the drain never met the budget: {printed}"
    );
    assert!(
        printed.contains(&format!("node/{node} drained")),
        "{printed}"
    );
    ready_pods(&c, "web", 3).await;
}
