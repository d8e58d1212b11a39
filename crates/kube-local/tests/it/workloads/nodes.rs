//! Several nodes: each with its own kubelet, Lease, labels and volumes; the scheduler placing pods over them; a node
//! whose power is cut declared lost by the node lifecycle controller, and brought back with its pods' data.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::common::{Cluster, eventually, http_get, ready, testapp_template};

const NS: &str = "spread";

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// A StatefulSet of `replicas` testapp pods with a volume each, spread over hostnames by a preferred (`required`
/// false) or required anti-affinity.
fn spread_set(name: &str, replicas: i32, required: bool) -> serde_json::Value {
    let term = json!({
        "labelSelector": {"matchLabels": {"app": name}},
        "topologyKey": "kubernetes.io/hostname",
    });
    let anti = if required {
        json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]})
    } else {
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]})
    };
    let mut template = testapp_template(
        json!({"app": name}),
        json!([{"name": "RECORD_FILE", "value": "/data/starts"}]),
    );
    template["spec"]["affinity"] = json!({"podAntiAffinity": anti});
    template["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": template,
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

async fn pods_of(c: &Cluster, app: &str) -> Vec<Pod> {
    let mut pods = c
        .api::<Pod>(NS)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items;
    pods.sort_by_key(|p| p.metadata.name.clone());
    pods
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_in_three_zones_spread_a_statefulset_and_keep_its_volumes_on_their_nodes() {
    let c = Cluster::with_nodes(NS, 3, Duration::from_secs(40)).await;
    let nodes = Api::<Node>::all(c.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let described: Vec<(String, String, String, String)> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                label(n, "kubernetes.io/hostname")
                    .unwrap_or_default()
                    .to_string(),
                label(n, "topology.kubernetes.io/zone")
                    .unwrap_or_default()
                    .to_string(),
                node_ready(n).unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            (
                "node-1".into(),
                "node-1".into(),
                "zone-a".into(),
                "True".into()
            ),
            (
                "node-2".into(),
                "node-2".into(),
                "zone-b".into(),
                "True".into()
            ),
            (
                "node-3".into(),
                "node-3".into(),
                "zone-c".into(),
                "True".into()
            ),
        ]
    );
    // Each node its own InternalIP, where its own kubelet answers.
    let addresses: BTreeSet<String> = nodes
        .iter()
        .map(|n| {
            n.status.as_ref().unwrap().addresses.as_ref().unwrap()[0]
                .address
                .clone()
        })
        .collect();
    assert_eq!(addresses.len(), 3, "{addresses:?}");
    // Heartbeats: a Lease per node.
    let leases = eventually("a lease per node", Duration::from_secs(20), || async {
        let leases = Api::<Lease>::namespaced(c.client(), "kube-node-lease")
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        (leases.len() == 3).then_some(leases)
    })
    .await;
    for lease in &leases {
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity, lease.metadata.name);
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.renew_time.is_some());
    }

    c.create::<StatefulSet>(NS, spread_set("web", 3, false))
        .await;
    let pods = eventually("3 ready pods", Duration::from_secs(60), || async {
        let pods = pods_of(&c, "web").await;
        (pods.len() == 3 && pods.iter().all(ready)).then_some(pods)
    })
    .await;
    let placed: BTreeSet<String> = pods.iter().map(node_of).collect();
    assert_eq!(placed.len(), 3, "one pod per node: {placed:?}");
    // Each node's kubelet answers at the endpoint its Node advertises, about its own pods only.
    for node in &nodes {
        let status = node.status.as_ref().unwrap();
        let ip = status.addresses.as_ref().unwrap()[0].address.clone();
        let port = status
            .daemon_endpoints
            .as_ref()
            .unwrap()
            .kubelet_endpoint
            .as_ref()
            .unwrap()
            .port;
        assert_eq!(
            http_get(&ip, port as u16, "/healthz").await.as_deref(),
            Some("ok")
        );
        let list: serde_json::Value =
            serde_json::from_str(&http_get(&ip, port as u16, "/pods").await.unwrap()).unwrap();
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p.pointer("/metadata/name").and_then(|n| n.as_str()))
            .collect();
        let expected: Vec<String> = pods
            .iter()
            .filter(|p| Some(node_of(p)) == node.metadata.name)
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, expected, "{:?}", node.metadata.name);
        assert_eq!(list["kind"], "PodList");
    }
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        // The claim's local volume lives on the pod's node and says so.
        let claim = c
            .api::<PersistentVolumeClaim>(NS)
            .get(&format!("data-{name}"))
            .await
            .unwrap();
        let pv = Api::<PersistentVolume>::all(c.client())
            .get(claim.spec.unwrap().volume_name.as_deref().unwrap())
            .await
            .unwrap();
        let affinity =
            serde_json::to_value(pv.spec.as_ref().unwrap().node_affinity.clone()).unwrap();
        assert_eq!(
            affinity.pointer("/required/nodeSelectorTerms/0/matchExpressions/0/values/0"),
            Some(&json!(node_of(p))),
            "{affinity}"
        );
        let path = pv.spec.unwrap().host_path.unwrap().path;
        assert!(
            path.contains(&format!("/nodes/{}/volumes/", node_of(p))),
            "{path}"
        );
        // The Scheduled Event names the node.
        let events = c
            .api::<Event>(NS)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items;
        assert!(
            events
                .iter()
                .any(|e| e.reason.as_deref() == Some("Scheduled")
                    && e.message.as_deref()
                        == Some(&format!(
                            "Successfully assigned {NS}/{name} to {}",
                            node_of(p)
                        ))),
            "{events:?}"
        );
    }

    // A pod recreated goes back to its volume's node.
    let web1_node = node_of(&pods[1]);
    let uid = pods[1].metadata.uid.clone();
    c.api::<Pod>(NS)
        .delete("web-1", &Default::default())
        .await
        .unwrap();
    let back = eventually("web-1 back and ready", Duration::from_secs(40), || async {
        let p = c.pod(NS, "web-1").await?;
        (p.metadata.uid != uid && ready(&p)).then_some(p)
    })
    .await;
    assert_eq!(node_of(&back), web1_node);
    let ip = back.status.unwrap().pod_ip.unwrap();
    assert_eq!(
        http_get(&ip, 8080, "/file?path=/data/starts")
            .await
            .as_deref(),
        Some("web-1\nweb-1\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_fits_no_node_stays_pending_with_kube_schedulers_message() {
    let c = Cluster::with_nodes(NS, 3, Duration::from_secs(40)).await;
    Api::<Node>::all(c.client())
        .patch(
            "node-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    c.create::<StatefulSet>(NS, spread_set("strict", 3, true))
        .await;
    // The pods already placed carry the same anti-affinity, and kube-scheduler checks theirs first.
    let expected = "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't satisfy existing pods anti-affinity rules. no new claims to deallocate, preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod.";
    let pending = eventually(
        "one strict pod unschedulable",
        Duration::from_secs(60),
        || async {
            let pods = pods_of(&c, "strict").await;
            let running = pods.iter().filter(|p| ready(p)).count();
            let pending: Vec<Pod> = pods
                .into_iter()
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                        })
                })
                .collect();
            (running == 2 && pending.len() == 1).then_some(pending)
        },
    )
    .await;
    let condition = pending[0]
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .cloned()
        .unwrap();
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(expected));
    let name = pending[0].metadata.name.clone().unwrap();
    assert!(pending[0].spec.as_ref().unwrap().node_name.is_none());
    let events = eventually(
        "a FailedScheduling event",
        Duration::from_secs(10),
        || async {
            let events = c
                .api::<Event>(NS)
                .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
                .await
                .ok()?
                .items;
            events
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        },
    )
    .await;
    assert_eq!(events.message.as_deref(), Some(expected));
    assert_eq!(events.type_.as_deref(), Some("Warning"));

    // Uncordoned, the node takes the pod.
    Api::<Node>::all(c.client())
        .patch(
            "node-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    eventually(
        "the third pod runs on node-3",
        Duration::from_secs(30),
        || async {
            let p = c.pod(NS, &name).await?;
            (ready(&p) && node_of(&p) == "node-3").then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_loses_power_is_declared_lost_and_comes_back_with_its_pods_data() {
    let grace = Duration::from_secs(4);
    let c = Cluster::with_nodes(NS, 2, grace).await;
    // One pod on node-2 that tolerates the unreachable taint forever (so it waits for its node), one that
    // tolerates it for 2 s (so it is marked for deletion, and stays Terminating while the node is down).
    for (name, seconds) in [("patient", None), ("impatient", Some(2))] {
        let mut set = spread_set(name, 1, false);
        let toleration = match seconds {
            Some(s) => {
                json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": s})
            }
            None => {
                json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"})
            }
        };
        set["spec"]["template"]["spec"]["tolerations"] = json!([toleration]);
        set["spec"]["template"]["spec"]["nodeSelector"] =
            json!({"kubernetes.io/hostname": "node-2"});
        c.create::<StatefulSet>(NS, set).await;
    }
    for name in ["patient-0", "impatient-0"] {
        eventually(
            &format!("{name} ready"),
            Duration::from_secs(60),
            || async {
                let p = c.pod(NS, name).await?;
                ready(&p).then_some(())
            },
        )
        .await;
    }
    let before = c.kubelet().process_count();
    assert_eq!(before, 2);

    c.kubelet().kill_node("node-2").unwrap();
    assert_eq!(
        c.kubelet().process_count(),
        0,
        "SIGKILL for every process of the node"
    );
    assert!(!c.kubelet().node_running("node-2"));
    let nodes: Api<Node> = Api::all(c.client());
    let lost = eventually(
        "node-2 Unknown and tainted",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("node-2").await.ok()?;
            let taints: BTreeSet<(String, String)> = n
                .spec
                .as_ref()?
                .taints
                .iter()
                .flatten()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect();
            (node_ready(&n).as_deref() == Some("Unknown") && taints.len() == 2).then_some(taints)
        },
    )
    .await;
    let node2 = nodes.get("node-2").await.unwrap();
    let no_execute = node2
        .spec
        .unwrap()
        .taints
        .unwrap()
        .into_iter()
        .find(|t| t.effect == "NoExecute")
        .unwrap();
    assert!(no_execute.time_added.is_some(), "{no_execute:?}");
    assert_eq!(
        lost,
        BTreeSet::from([
            (
                "node.kubernetes.io/unreachable".to_string(),
                "NoExecute".to_string()
            ),
            (
                "node.kubernetes.io/unreachable".to_string(),
                "NoSchedule".to_string()
            ),
        ])
    );
    assert_eq!(
        node_ready(&nodes.get("node-1").await.unwrap()).as_deref(),
        Some("True")
    );
    let patient = eventually("patient-0 not ready", Duration::from_secs(20), || async {
        let p = c.pod(NS, "patient-0").await?;
        (!ready(&p)).then_some(p)
    })
    .await;
    assert!(patient.metadata.deletion_timestamp.is_none());
    // The impatient pod is marked for deletion and stays Terminating: nobody on node-2 confirms it stopped.
    let impatient = eventually(
        "impatient-0 terminating",
        Duration::from_secs(20),
        || async {
            let p = c.pod(NS, "impatient-0").await?;
            p.metadata.deletion_timestamp.is_some().then_some(p)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = c
        .pod(NS, "impatient-0")
        .await
        .expect("still there while its node is down");
    assert_eq!(still.metadata.uid, impatient.metadata.uid);

    c.kubelet().start_node("node-2").await.unwrap();
    eventually(
        "node-2 Ready without taints",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("node-2").await.ok()?;
            let tainted = n
                .spec
                .as_ref()?
                .taints
                .as_ref()
                .is_some_and(|t| !t.is_empty());
            (node_ready(&n).as_deref() == Some("True") && !tainted).then_some(())
        },
    )
    .await;
    // The patient pod runs again on its node, with its volume's data; the impatient one was finished by its
    // kubelet and recreated by its StatefulSet.
    let back = eventually("patient-0 ready again", Duration::from_secs(40), || async {
        let p = c.pod(NS, "patient-0").await?;
        ready(&p).then_some(p)
    })
    .await;
    assert_eq!(back.metadata.uid, patient.metadata.uid);
    let ip = back.status.unwrap().pod_ip.unwrap();
    assert_eq!(
        http_get(&ip, 8080, "/file?path=/data/starts")
            .await
            .as_deref(),
        Some("patient-0\npatient-0\n")
    );
    eventually("impatient-0 replaced", Duration::from_secs(40), || async {
        let p = c.pod(NS, "impatient-0").await?;
        (p.metadata.uid != impatient.metadata.uid && ready(&p)).then_some(())
    })
    .await;
}

fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kube-local"))
        .args(args)
        .output()
        .unwrap()
}

/// `kube-local node kill|start` from another process, as a user runs them against `kube-local up`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_local_node_kill_and_start_act_on_the_running_environment() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap().to_string();
    let (mut child, kubeconfig) = crate::shared::kube_local_up(
        &[
            "up".as_ref(),
            "--nodes".as_ref(),
            "2".as_ref(),
            "--node-monitor-grace-period".as_ref(),
            "4".as_ref(),
            "--data-dir".as_ref(),
            data_dir.as_ref(),
        ],
        Duration::from_secs(20),
    )
    .await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    let status_of = |name: &'static str| {
        let nodes = nodes.clone();
        async move { nodes.get(name).await.ok().and_then(|n| node_ready(&n)) }
    };
    eventually("both nodes Ready", Duration::from_secs(20), || async {
        (status_of("node-1").await.as_deref() == Some("True")
            && status_of("node-2").await.as_deref() == Some("True"))
        .then_some(())
    })
    .await;

    let out = tokio::task::spawn_blocking({
        let d = data_dir.clone();
        move || run(&["node", "kill", "node-2", "--data-dir", &d])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("node-2 Unknown", Duration::from_secs(30), || async {
        (status_of("node-2").await.as_deref() == Some("Unknown")).then_some(())
    })
    .await;
    assert_eq!(status_of("node-1").await.as_deref(), Some("True"));

    // Bad input: a node that does not exist, an environment that is not running.
    let d = data_dir.clone();
    let (unknown, not_running) = tokio::task::spawn_blocking(move || {
        (
            run(&["node", "kill", "node-9", "--data-dir", &d]),
            run(&[
                "node",
                "start",
                "node-1",
                "--data-dir",
                "/nonexistent-kube-local",
            ]),
        )
    })
    .await
    .unwrap();
    assert!(!unknown.status.success());
    assert_eq!(
        String::from_utf8_lossy(&unknown.stderr).trim(),
        "kube-local: no node node-9 (nodes: node-1, node-2)"
    );
    assert!(!not_running.status.success());
    let said = String::from_utf8_lossy(&not_running.stderr);
    assert!(
        said.contains("no environment is running with data directory /nonexistent-kube-local"),
        "{said}"
    );

    let out = tokio::task::spawn_blocking({
        let d = data_dir.clone();
        move || run(&["node", "start", "node-2", "--data-dir", &d])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("node-2 Ready again", Duration::from_secs(30), || async {
        (status_of("node-2").await.as_deref() == Some("True")).then_some(())
    })
    .await;
    child.kill().await.unwrap();
}

/// A node deleted for good (`kubectl delete node`): its pods are force-deleted by the pod garbage collector, and a
/// StatefulSet's pod with a network volume starts on another node with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pods_of_a_deleted_node_are_collected_and_a_network_volume_follows_its_pod() {
    let c = Cluster::with_nodes(NS, 2, Duration::from_secs(3)).await;
    let mut set = spread_set("roamer", 1, false);
    set["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("network");
    set["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}],
        }}],
    }});
    c.create::<StatefulSet>(NS, set).await;
    let first = eventually(
        "roamer-0 ready on node-2",
        Duration::from_secs(60),
        || async {
            let p = c.pod(NS, "roamer-0").await?;
            (ready(&p) && node_of(&p) == "node-2").then_some(p)
        },
    )
    .await;
    c.kubelet().kill_node("node-2").unwrap();
    Api::<Node>::all(c.client())
        .delete("node-2", &Default::default())
        .await
        .unwrap();
    // Waited for by hand, to show what the pod looked like should it not move.
    let started = std::time::Instant::now();
    let moved = loop {
        let p = c.pod(NS, "roamer-0").await;
        if let Some(p) = &p
            && p.metadata.uid != first.metadata.uid
            && ready(p)
            && node_of(p) == "node-1"
        {
            break p.clone();
        }
        if started.elapsed() > Duration::from_secs(90) {
            let events: Vec<String> = c
                .api::<Event>(NS)
                .list(&ListParams::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .map(|e| {
                            format!(
                                "{:?} {:?}: {:?}",
                                e.involved_object.name, e.reason, e.message
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            panic!(
                "roamer-0 did not move to node-1 within 90 s: {}\nevents: {events:#?}",
                serde_json::to_string_pretty(&p).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ip = moved.status.unwrap().pod_ip.unwrap();
    assert_eq!(
        http_get(&ip, 8080, "/file?path=/data/starts")
            .await
            .as_deref(),
        Some("roamer-0\nroamer-0\n"),
        "the network volume followed its pod"
    );
}
