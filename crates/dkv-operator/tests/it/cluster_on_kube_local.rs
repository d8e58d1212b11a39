//! A real etcd cluster under the operator, on kube-local with its process
//! kubelet: the operator's StatefulSet runs `dkv member-init` and etcd 3.5 as
//! local processes, each pod on its own loopback IP with the cluster's DNS
//! names in its hosts file. Applying a 3-member `DistributedKV` forms one
//! etcd cluster the operator reports Available; deleting it stops every
//! process and reclaims the volumes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use dkv_test_support as support;
use support::etcd_cluster::patch_spec;

const NS: &str = "shop";

fn etcdctl_binary() -> PathBuf {
    support::paths::etcd_bin_dir("3.5").join("etcdctl")
}

/// Runs etcdctl against `endpoints` (async: the Service proxy runs on this runtime).
async fn etcdctl(endpoints: &str, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(["--command-timeout=5s", "--dial-timeout=2s"])
        .args(args)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Polls `check` every 250 ms until it returns `Some`, up to `within`.
async fn eventually<T>(what: &str, within: Duration, check: impl AsyncFnMut() -> Option<T>) -> T {
    support::eventually(what, within, Duration::from_millis(250), check).await
}

fn condition(dkv: &DistributedKV, type_: &str) -> Option<String> {
    dkv.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The last log lines of every member container, for failure messages.
fn member_logs(env: &kube_local::Environment) -> String {
    let kubelet = env.kubelet().unwrap();
    let mut out = String::new();
    for i in 0..3 {
        for container in ["member-init", "etcd"] {
            let pod = format!("orders-{i}");
            let text = kubelet
                .log_path(NS, &pod, container)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(4).collect();
            out.push_str(&format!("--- {pod}/{container}\n{}\n", tail.join("\n")));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_form_a_cluster_serve_through_the_client_service_and_go_with_the_cr() {
    assert!(
        etcdctl_binary().exists(),
        "{} is missing: run scripts/install-etcd.sh",
        etcdctl_binary().display()
    );
    let (env, client, operator) = support::running_operator(NS).await;

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let dkv: DistributedKV = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": NS},
        "spec": {
            "size": 3,
            "image": "registry.k8s.io/etcd:3.5.16-0",
            "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"},
        },
    }))
    .unwrap();
    dkvs.create(&PostParams::default(), &dkv).await.unwrap();

    // Three member pods become ready: etcd's /health needs a leader, so ready means one cluster formed.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(90);
    let members = loop {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        if list.len() == 3 && list.iter().all(pod_ready) {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "members not ready within 90s; pods: {:?}\n{}",
            list.iter()
                .map(|p| (
                    p.metadata.name.clone(),
                    p.status.as_ref().and_then(|s| s.phase.clone())
                ))
                .collect::<Vec<_>>(),
            member_logs(&env)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // `etcdctl member list` through the client Service: three started voters with their stable peer URLs.
    let kubelet = env.kubelet().unwrap();
    let client_service = eventually(
        "the client Service's address",
        Duration::from_secs(10),
        || async { kubelet.service_address(NS, "orders-client") },
    )
    .await;
    let through_service = format!("http://{client_service}:2379");
    let list = eventually(
        "member list through the Service",
        Duration::from_secs(30),
        || async {
            etcdctl(&through_service, &["member", "list", "-w", "simple"])
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(list.lines().count(), 3, "{list}");
    for i in 0..3 {
        let line = list
            .lines()
            .find(|l| l.contains(&format!(", orders-{i}, ")))
            .unwrap_or_else(|| panic!("orders-{i} missing:\n{list}"));
        assert!(line.contains(", started, "), "{line}");
        assert!(line.ends_with(", false"), "a voter, not a learner: {line}");
        assert!(
            line.contains(&format!("http://orders-{i}.orders-peer.{NS}.svc:2380")),
            "{line}"
        );
    }

    // The operator reports the cluster Available with three ready replicas.
    // (Available comes with a quorum, two of three: the third member's
    // readiness may be reported a pass later, under load.)
    let reported = eventually(
        "Available=True with 3 ready replicas",
        Duration::from_secs(60),
        || async {
            let d = dkvs.get("orders").await.ok()?;
            let ready = d.status.as_ref().map(|s| s.ready_replicas);
            (condition(&d, "Available").as_deref() == Some("True") && ready == Some(3)).then_some(d)
        },
    )
    .await;
    let status = reported.status.unwrap();
    assert_eq!(status.ready_replicas, 3);

    // A key written through the Service is readable from every member.
    etcdctl(&through_service, &["put", "greeting", "hello"])
        .await
        .unwrap();
    for pod in &members {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let value = eventually(
            "the key on every member",
            Duration::from_secs(10),
            || async {
                etcdctl(
                    &format!("http://{ip}:2379"),
                    &["get", "greeting", "--print-value-only", "--consistency=s"],
                )
                .await
                .ok()
                .filter(|v| v.trim() == "hello")
            },
        )
        .await;
        assert_eq!(value.trim(), "hello");
    }

    // Deleting the cluster stops every process and, with reclaimPolicy Delete, removes the volumes.
    dkvs.delete("orders", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the CR gone", Duration::from_secs(60), || async {
        dkvs.get_opt("orders")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        "every member process stopped",
        Duration::from_secs(60),
        || async { (kubelet.process_count() == 0).then_some(()) },
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    eventually("the claims deleted", Duration::from_secs(30), || async {
        claims
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    eventually("the volumes reclaimed", Duration::from_secs(30), || async {
        volumes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;

    operator.stop().await;
}

/// Whether the cluster's `Available` condition is True.
fn available(d: &DistributedKV) -> bool {
    condition(d, "Available").as_deref() == Some("True")
}

/// A pod that runs `etcdctl put` through the cluster's client Service over
/// TLS, with the client certificate Secret mounted: what a user's first
/// client looks like (the demo's client pods, examples/etcd-client.yaml).
fn client_pod(ns: &str, name: &str, cluster: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "etcdctl",
                "image": "registry.k8s.io/etcd:3.5.16-0",
                "command": ["etcdctl", format!("--endpoints=https://{cluster}-client.{ns}.svc:2379"),
                            "--cacert=/etc/etcd-client/ca.crt", "--cert=/etc/etcd-client/tls.crt",
                            "--key=/etc/etcd-client/tls.key", "put", "greeting", name],
                "volumeMounts": [{"name": "client-tls", "mountPath": "/etc/etcd-client", "readOnly": true}],
            }],
            "volumes": [{"name": "client-tls", "secret": {"secretName": format!("{cluster}-tls-client")}}],
        },
    }))
    .unwrap()
}

/// The phase a pod ended in (`Succeeded` or `Failed`), waiting up to `within`.
async fn finished_phase(pods: &Api<Pod>, name: &str, within: Duration) -> String {
    let ended = kube::runtime::wait::await_condition(pods.clone(), name, |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref()?.phase.as_deref())
            .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
    });
    match tokio::time::timeout(within, ended).await {
        Ok(Ok(Some(pod))) => pod.status.and_then(|s| s.phase).unwrap_or_default(),
        other => format!("not finished within {within:?}: {other:?}"),
    }
}

/// The promise a newcomer relies on: the moment `kubectl wait
/// --for=condition=Available` returns, a client pod that writes through
/// the client Service succeeds, with no retry. Twenty clusters in a row,
/// each written to at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_started_when_available_is_reported_reaches_the_cluster_every_time() {
    const ROUNDS: usize = 12;
    let ns = "first-write";
    let (env, client, operator) = support::running_operator(ns).await;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut failures = Vec::new();
    let started = Instant::now();
    for round in 0..ROUNDS {
        let name = format!("c{round}");
        support::create_cluster(
            &client,
            ns,
            &name,
            3,
            "registry.k8s.io/etcd:3.5.16-0",
            json!({"tls": {}}),
        )
        .await;
        let became_available = kube::runtime::wait::await_condition(
            dkvs.clone(),
            &name,
            |d: Option<&DistributedKV>| d.is_some_and(available),
        );
        tokio::time::timeout(Duration::from_secs(120), became_available)
            .await
            .unwrap_or_else(|_| panic!("{name} not Available within 120 s\n{}", member_logs(&env)))
            .unwrap();
        let writer = format!("put-{round}");
        pods.create(&PostParams::default(), &client_pod(ns, &writer, &name))
            .await
            .unwrap();
        let phase = finished_phase(&pods, &writer, Duration::from_secs(60)).await;
        if phase != "Succeeded" {
            let log = env
                .kubelet()
                .and_then(|k| k.log_path(ns, &writer, "etcdctl"))
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            failures.push(format!("round {round}: {phase}: {log}"));
        }
        dkvs.delete(&name, &DeleteParams::default()).await.unwrap();
        eventually("the cluster gone", Duration::from_secs(60), || async {
            dkvs.get_opt(&name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    eprintln!(
        "{ROUNDS} clusters created, each written to through its client Service at once: {} failed, {:.1} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    operator.stop().await;
}

/// One change seen by [`History`]: an object of some kind as it was at a
/// resourceVersion (kube-local's are one global sequence, as etcd's are).
struct Seen {
    revision: u64,
    object: Seenable,
}

enum Seenable {
    Cluster(Box<DistributedKV>),
    Pod(String, Option<Box<Pod>>),
    Slice(
        String,
        Option<Box<k8s_openapi::api::discovery::v1::EndpointSlice>>,
    ),
}

/// Records every change of a cluster, its member pods and its client
/// Service's EndpointSlices, so the test can replay them in the order the
/// API server made them.
struct History {
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn revision_of(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl History {
    fn start(client: &Client, ns: &str, cluster: &str) -> Self {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let record = |seen: &Arc<std::sync::Mutex<Vec<Seen>>>, item: Seen| {
            seen.lock().unwrap().push(item);
        };
        {
            let (seen, api) = (
                seen.clone(),
                Api::<DistributedKV>::namespaced(client.clone(), ns),
            );
            let config = watcher::Config::default().fields(&format!("metadata.name={cluster}"));
            tasks.push(tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher::watcher(api, config));
                while let Some(event) = events.next().await {
                    if let Ok(Event::Apply(d) | Event::InitApply(d)) = event {
                        let revision = revision_of(&d.metadata);
                        record(
                            &seen,
                            Seen {
                                revision,
                                object: Seenable::Cluster(Box::new(d)),
                            },
                        );
                    }
                }
            }));
        }
        {
            let (seen, api) = (seen.clone(), Api::<Pod>::namespaced(client.clone(), ns));
            let config = watcher::Config::default().labels(&format!("dkv.io/cluster={cluster}"));
            tasks.push(tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher::watcher(api, config));
                while let Some(event) = events.next().await {
                    let (pod, gone) = match event {
                        Ok(Event::Apply(p) | Event::InitApply(p)) => (p, false),
                        Ok(Event::Delete(p)) => (p, true),
                        _ => continue,
                    };
                    let (name, revision) = (pod.name_any(), revision_of(&pod.metadata));
                    let object = Seenable::Pod(name, (!gone).then(|| Box::new(pod)));
                    record(&seen, Seen { revision, object });
                }
            }));
        }
        {
            let api = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(
                client.clone(),
                ns,
            );
            let seen = seen.clone();
            let config = watcher::Config::default()
                .labels(&format!("kubernetes.io/service-name={cluster}-client"));
            tasks.push(tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher::watcher(api, config));
                while let Some(event) = events.next().await {
                    let (slice, gone) = match event {
                        Ok(Event::Apply(s) | Event::InitApply(s)) => (s, false),
                        Ok(Event::Delete(s)) => (s, true),
                        _ => continue,
                    };
                    let (name, revision) = (slice.name_any(), revision_of(&slice.metadata));
                    let object = Seenable::Slice(name, (!gone).then(|| Box::new(slice)));
                    record(&seen, Seen { revision, object });
                }
            }));
        }
        Self { seen, tasks }
    }

    /// Replays what was seen in revision order and checks, at every status
    /// the operator wrote, that it claimed no more than it could have seen
    /// since its previous write: `readyReplicas` at most the most Ready
    /// member pods of that window, `Available=True` only if the client
    /// Service had a quorum of ready endpoints in it, and no `Degraded`
    /// while the cluster forms. (A status lags what it describes — a pod
    /// may go down while it is written — but it never runs ahead.) Returns
    /// how many statuses were checked, and how many said Available.
    fn check(self) -> (usize, usize) {
        for task in &self.tasks {
            task.abort();
        }
        let mut seen = std::mem::take(&mut *self.seen.lock().unwrap());
        seen.sort_by_key(|s| s.revision);
        let mut pods: std::collections::BTreeMap<String, Pod> = Default::default();
        let mut slices: std::collections::BTreeMap<
            String,
            k8s_openapi::api::discovery::v1::EndpointSlice,
        > = Default::default();
        let (mut statuses, mut availables) = (0, 0);
        let mut last_status = None;
        let ready_pods = |pods: &std::collections::BTreeMap<String, Pod>| {
            pods.values()
                .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
                .count()
        };
        let ready_endpoints = |slices: &std::collections::BTreeMap<
            String,
            k8s_openapi::api::discovery::v1::EndpointSlice,
        >| {
            slices
                .values()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .flat_map(|e| &e.addresses)
                .collect::<std::collections::BTreeSet<&String>>()
                .len()
        };
        // The most of each seen since the previous status write.
        let (mut most_ready, mut most_endpoints) = (0, 0);
        for item in seen {
            let at = item.revision;
            let cluster = match item.object {
                Seenable::Pod(name, Some(pod)) => {
                    pods.insert(name, *pod);
                    None
                }
                Seenable::Pod(name, None) => {
                    pods.remove(&name);
                    None
                }
                Seenable::Slice(name, Some(slice)) => {
                    slices.insert(name, *slice);
                    None
                }
                Seenable::Slice(name, None) => {
                    slices.remove(&name);
                    None
                }
                Seenable::Cluster(d) => Some(d),
            };
            most_ready = most_ready.max(ready_pods(&pods));
            most_endpoints = most_endpoints.max(ready_endpoints(&slices));
            match cluster {
                None => {}
                Some(d) => {
                    let Some(status) = d.status.clone() else {
                        continue;
                    };
                    // Only what the operator wrote: a spec edit repeats the
                    // status it had.
                    if last_status.as_ref() == Some(&status) {
                        continue;
                    }
                    last_status = Some(status.clone());
                    statuses += 1;
                    assert!(
                        usize::try_from(status.ready_replicas).unwrap() <= most_ready,
                        "at revision {at} status says readyReplicas {} while at most {most_ready} member pods were Ready since its previous write",
                        status.ready_replicas
                    );
                    assert!(
                        availables > 0 || condition(&d, "Degraded").as_deref() != Some("True"),
                        "at revision {at} a cluster that is still forming is reported Degraded: {:?}",
                        status.conditions
                    );
                    if available(&d) {
                        availables += 1;
                        let voters = status.members.iter().filter(|m| !m.learner).count();
                        let voters = if voters == 0 {
                            d.spec.size as usize
                        } else {
                            voters
                        };
                        let quorum = voters / 2 + 1;
                        assert!(
                            most_endpoints >= quorum,
                            "at revision {at} status says Available while at most {most_endpoints} endpoints behind the client Service were ready since its previous write, quorum {quorum}: {:?}",
                            status.conditions
                        );
                    }
                    most_ready = ready_pods(&pods);
                    most_endpoints = ready_endpoints(&slices);
                }
            }
        }
        (statuses, availables)
    }
}

/// `Available` and READY never run ahead of what clients can reach: every
/// status the operator writes while a cluster is created, scaled from 3 to 5
/// and has a member restarted is checked against the pods and the client
/// Service's endpoints at that same revision. A writer runs through the
/// scale and the restart; no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_never_claims_more_ready_members_than_clients_can_reach() {
    let ns = "promise";
    let (_env, client, operator) = support::running_operator(ns).await;
    let history = History::start(&client, ns, "orders");
    // Let the watches establish before anything happens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dkvs = support::create_cluster(
        &client,
        ns,
        "orders",
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({}),
    )
    .await;
    support::etcd_cluster::wait_settled(&dkvs, "orders", 3).await;
    let writer = support::etcd_cluster::Writer::start(client.clone(), ns, "orders");

    patch_spec(&dkvs, "orders", json!({"size": 5})).await;
    support::etcd_cluster::wait_settled(&dkvs, "orders", 5).await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let before = pods.get("orders-2").await.unwrap().metadata.uid;
    pods.delete("orders-2", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "orders-2 back and Ready",
        Duration::from_secs(90),
        || async {
            let pod = pods.get("orders-2").await.ok()?;
            (pod.metadata.uid != before && pod_ready(&pod)).then_some(())
        },
    )
    .await;
    support::etcd_cluster::wait_for(&dkvs, "orders", "5 ready replicas", |d| {
        d.status.as_ref().is_some_and(|s| s.ready_replicas == 5) && available(d)
    })
    .await;

    let report = writer.stop().await;
    support::etcd_cluster::assert_no_write_lost(&client, ns, &report).await;
    let (statuses, availables) = history.check();
    eprintln!(
        "{statuses} statuses checked ({availables} Available), {} writes acknowledged",
        report.acked.len()
    );
    assert!(
        statuses >= 5 && availables >= 1,
        "too little was seen: {statuses} statuses, {availables} Available"
    );
    operator.stop().await;
}
