//! Talking to a dkv-managed etcd cluster from a test: its members' endpoints,
//! a writer that records every acknowledged write and the check that reads
//! them all back, and waiting for the custom resource to settle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tokio::sync::Mutex;

/// Client URLs of a cluster's member pods that have an IP, sorted. (Only
/// the etcd members: backup Job pods carry the cluster label too, and a
/// finished one keeps its IP.)
pub async fn member_endpoints(client: &Client, ns: &str, cluster: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!(
            "dkv.io/cluster={cluster},{}=etcd",
            dkv_api::labels::COMPONENT_KEY
        )))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut endpoints: Vec<String> = list
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
        .map(|ip| format!("http://{ip}:2379"))
        .collect();
    endpoints.sort();
    endpoints
}

/// The client URL of one member pod.
pub async fn member_endpoint(client: &Client, ns: &str, pod: &str) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ip = pods.get(pod).await.ok()?.status?.pod_ip?;
    Some(format!("http://{ip}:2379"))
}

pub async fn connect(endpoints: Vec<String>) -> Option<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(1))
        .with_timeout(Duration::from_secs(2));
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .ok()
}

/// Short timeouts: a refused connection must fail fast.
pub fn options(tls: Option<etcd_client::TlsOptions>) -> etcd_client::ConnectOptions {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(3));
    match tls {
        Some(tls) => options.with_tls(tls),
        None => options,
    }
}

/// What the writer did.
#[derive(Debug, Clone)]
pub struct WriterReport {
    /// The cluster written to.
    pub cluster: String,
    /// Sequence numbers etcd acknowledged, in order.
    pub acked: Vec<u64>,
    /// Attempts that failed (each was retried).
    pub failures: u64,
    /// The longest stretch without an acknowledged write.
    pub longest_gap: Duration,
    /// Acknowledged writes whose revision was not above the one before:
    /// a client saw the cluster's history go back.
    pub revisions_back: u64,
}

/// Where a [`Writer`] writes: the cluster's member pods and, before them,
/// `extra` endpoints (the members of a running cluster being adopted),
/// with `tls` for `https` endpoints.
#[derive(Clone)]
pub struct WriterTarget {
    pub client: Client,
    pub ns: String,
    pub cluster: String,
    pub extra: Vec<String>,
    pub tls: Option<etcd_client::TlsOptions>,
    /// With `tls`: the name dkv's members are verified by (their
    /// certificate names the client Service, not pod IPs); the `extra`
    /// endpoints are verified by their address.
    pub server_name: Option<String>,
    /// With etcd authentication on: the user and password every request
    /// carries.
    pub user: Option<(String, String)>,
}

impl WriterTarget {
    /// The cluster's member pods, in plaintext.
    pub fn plain(client: Client, ns: &str, cluster: &str) -> Self {
        Self {
            client,
            ns: ns.to_owned(),
            cluster: cluster.to_owned(),
            extra: Vec::new(),
            tls: None,
            server_name: None,
            user: None,
        }
    }

    /// The `extra` endpoints, then the member pods' client URLs.
    async fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoints = self.extra.clone();
        endpoints.extend(
            member_endpoints(&self.client, &self.ns, &self.cluster)
                .await
                .into_iter()
                .map(|e| e.replacen("http://", &format!("{scheme}://"), 1)),
        );
        endpoints
    }

    /// A client of `endpoint` alone.
    async fn connect(&self, endpoint: &str) -> Option<etcd_client::Client> {
        let tls = self.tls.clone().map(|tls| match &self.server_name {
            Some(name) if !self.extra.iter().any(|e| e == endpoint) => tls.domain_name(name),
            _ => tls,
        });
        let options = match &self.user {
            Some((name, password)) => options(tls).with_user(name, password),
            None => options(tls),
        };
        etcd_client::Client::connect([endpoint], Some(options))
            .await
            .ok()
    }
}

/// Writes `key-00000`, `key-00001`, ... one after the other through the
/// members' client URLs, each retried until etcd acknowledges it.
pub struct Writer {
    cluster: String,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<u64>>>,
    task: tokio::task::JoinHandle<(u64, Duration, u64)>,
}

impl Writer {
    pub fn start(client: Client, ns: &str, cluster: &str) -> Self {
        Self::start_with(WriterTarget::plain(client, ns, cluster))
    }

    /// A writer on `target`'s endpoints, one at a time, failing over in
    /// turn.
    pub fn start_with(target: WriterTarget) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let cluster = target.cluster.clone();
        let task = tokio::spawn(write_loop(target, stop.clone(), acked.clone()));
        Self {
            cluster,
            stop,
            acked,
            task,
        }
    }

    /// How many writes have been acknowledged so far.
    pub async fn acknowledged(&self) -> usize {
        self.acked.lock().await.len()
    }

    pub async fn stop(self) -> WriterReport {
        self.stop.store(true, Ordering::Relaxed);
        let (failures, longest_gap, revisions_back) = self.task.await.unwrap();
        let acked = self.acked.lock().await.clone();
        WriterReport {
            cluster: self.cluster,
            acked,
            failures,
            longest_gap,
            revisions_back,
        }
    }
}

async fn write_loop(
    target: WriterTarget,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<u64>>>,
) -> (u64, Duration, u64) {
    // One member at a time, moving to the next on a failure, as a client
    // with failover does: a client balancing over all endpoints keeps
    // sending to a member that is cut off until its requests time out.
    let mut endpoints: Vec<String> = Vec::new();
    let mut current: Option<(String, etcd_client::Client)> = None;
    let mut turn = 0usize;
    let mut next = 0u64;
    let mut failures = 0u64;
    let mut last_refresh = Instant::now() - Duration::from_secs(10);
    let mut last_ack: Option<Instant> = None;
    let mut longest_gap = Duration::ZERO;
    let mut revision = 0i64;
    let mut revisions_back = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if last_refresh.elapsed() > Duration::from_millis(500) || endpoints.is_empty() {
            last_refresh = Instant::now();
            endpoints = target.endpoints().await;
            if current
                .as_ref()
                .is_some_and(|(e, _)| !endpoints.contains(e))
            {
                current = None;
            }
        }
        if current.is_none() && !endpoints.is_empty() {
            let endpoint = endpoints[turn % endpoints.len()].clone();
            turn += 1;
            current = target.connect(&endpoint).await.map(|c| (endpoint, c));
        }
        let Some((_, c)) = current.as_mut() else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let key = format!("key-{next:05}");
        match c.put(key, next.to_string(), None).await {
            Ok(response) => {
                let at = response.header().map_or(0, |h| h.revision());
                if at <= revision {
                    revisions_back += 1;
                }
                revision = revision.max(at);
                acked.lock().await.push(next);
                next += 1;
                let now = Instant::now();
                if let Some(previous) = last_ack {
                    longest_gap = longest_gap.max(now - previous);
                }
                last_ack = Some(now);
            }
            Err(_) => {
                failures += 1;
                current = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (failures, longest_gap, revisions_back)
}

/// Every key under `/dkv-test/` of `cluster` (what the tests write with
/// `dkv_backup::testing::test_key`), in order; trying again for 30 s while
/// no member answers (one may still be starting right after a restore).
pub async fn test_keys(client: &Client, ns: &str, cluster: &str) -> Vec<(String, String)> {
    let started = Instant::now();
    loop {
        if let Some(mut etcd) = connect(member_endpoints(client, ns, cluster).await).await
            && let Ok(response) = etcd
                .get(
                    "/dkv-test/",
                    Some(etcd_client::GetOptions::new().with_prefix()),
                )
                .await
        {
            return dkv_backup::testing::text_pairs(&response);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{cluster} did not answer"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Reads every acknowledged write back (linearizable reads) and returns the
/// sequence numbers whose key is missing or holds another value.
pub async fn lost_writes(client: &Client, ns: &str, cluster: &str, acked: &[u64]) -> Vec<u64> {
    lost_writes_on(&WriterTarget::plain(client.clone(), ns, cluster), acked).await
}

/// [`lost_writes`] through `target`'s endpoints: the first that answers
/// its status reads them all (linearizable reads, so any voter will do).
pub async fn lost_writes_on(target: &WriterTarget, acked: &[u64]) -> Vec<u64> {
    // Only members that answer: a member that cannot start (the test may
    // have made it so) would fail the reads.
    let mut reader = None;
    for endpoint in target.endpoints().await {
        if let Some(mut member) = target.connect(&endpoint).await
            && member.status().await.is_ok()
        {
            reader = Some(member);
            break;
        }
    }
    let mut reader = reader.expect("no member of the cluster answers");
    let mut lost = Vec::new();
    for i in acked {
        let response = reader.get(format!("key-{i:05}"), None).await.unwrap();
        match response.kvs().first() {
            Some(kv) if kv.value_str().unwrap() == i.to_string() => {}
            _ => lost.push(*i),
        }
    }
    lost
}

/// Puts `key` = `value`, retrying a few times: on a loaded machine etcd (or
/// the client's deadline) times a request out now and then, and a put is
/// idempotent.
pub async fn put_retrying(etcd: &mut etcd_client::Client, key: &str, value: &str) {
    let mut attempt = 0;
    loop {
        match etcd.put(key, value, None).await {
            Ok(_) => return,
            Err(e) if attempt < 5 => {
                attempt += 1;
                eprintln!("put {key} (attempt {attempt}): {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("put {key}: {e}"),
        }
    }
}

/// Whether the cluster reports `size` healthy voters, no operation in flight
/// and `Available=True`, with `spec.size == size`.
pub fn settled_at(d: &DistributedKV, size: usize) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    let voters = status
        .members
        .iter()
        .filter(|m| !m.learner && m.healthy)
        .count();
    let available = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Available" && c.status == "True");
    voters == size
        && status.members.len() == size
        && status.operation.is_none()
        && available
        && d.spec.size as usize == size
}

/// Merge-patches an object the way `kubectl patch --type merge` does;
/// returns the object as stored.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("merge patch of {name} refused: {e}"))
}

/// Merge-patches an object's spec (a user's edit).
pub async fn patch_spec<K>(api: &Api<K>, name: &str, spec: serde_json::Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    merge_patch(api, name, serde_json::json!({ "spec": spec })).await
}

/// Merge-patches an object's spec as [`patch_spec`] does; a refusal (the
/// admission webhook's, say) is returned as the API server's message.
pub async fn try_patch_spec<K>(
    api: &Api<K>,
    name: &str,
    spec: serde_json::Value,
) -> Result<K, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "spec": spec });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| match e {
            kube::Error::Api(response) => response.message,
            other => panic!("merge patch of {name} failed: {other}"),
        })
}

/// The image of the spec that last ran on every member
/// (`status.rollout.lastGood`).
pub fn last_good_image(d: &DistributedKV) -> Option<String> {
    let rollout = d.status.as_ref()?.rollout.as_ref()?;
    Some(rollout.last_good.as_ref()?.image.clone())
}

/// Sets one annotation on an object.
pub async fn annotate<K>(api: &Api<K>, name: &str, key: &str, value: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    merge_patch(
        api,
        name,
        serde_json::json!({"metadata": {"annotations": {key: value}}}),
    )
    .await
}

/// Waits until [`settled_at`] holds; returns how long it took.
pub async fn wait_settled(dkvs: &Api<DistributedKV>, name: &str, size: usize) -> Duration {
    wait_for(dkvs, name, &format!("{size} healthy voters"), |d| {
        settled_at(d, size)
    })
    .await
}

/// Waits (up to two minutes) until `check` holds for the custom resource.
pub async fn wait_for(
    dkvs: &Api<DistributedKV>,
    name: &str,
    what: &str,
    check: impl Fn(&DistributedKV) -> bool,
) -> Duration {
    let started = Instant::now();
    let mut last = None;
    loop {
        if let Ok(d) = dkvs.get(name).await {
            if check(&d) {
                return started.elapsed();
            }
            last = d.status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{name} did not reach: {what}; last status: {}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The reason of a condition, when it has the given status.
pub fn condition_reason(d: &DistributedKV, type_: &str, status: &str) -> Option<String> {
    d.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.reason.clone())
}

/// The message of the condition of type `type_` (with `status`, if given);
/// empty when there is none.
pub fn condition_message(d: &DistributedKV, type_: &str, status: Option<&str>) -> String {
    d.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == type_ && status.is_none_or(|s| c.status == s))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// What [`Observer`] saw while it ran.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Each distinct pinned operation, `Kind/target`, in the order seen
    /// (consecutive repeats collapsed).
    pub operations: Vec<String>,
    /// The most learners etcd listed at one time.
    pub max_learners: usize,
    /// The most members etcd listed at one time.
    pub max_members: usize,
}

/// Samples a cluster's pinned operation (from its status) and etcd's member
/// list (directly) every 50 ms.
pub struct Observer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Observed>>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    pub fn start(client: Client, ns: &str, cluster: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Observed::default()));
        let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), ns);
        let (flag, out, ns, cluster) = (
            stop.clone(),
            seen.clone(),
            ns.to_owned(),
            cluster.to_owned(),
        );
        let task = tokio::spawn(async move {
            let mut etcd: Option<(Vec<String>, etcd_client::Client)> = None;
            while !flag.load(Ordering::Relaxed) {
                if let Ok(d) = dkvs.get(&cluster).await
                    && let Some(op) = d.status.and_then(|s| s.operation)
                {
                    let op = format!("{:?}/{}", op.kind, op.target);
                    let mut seen = out.lock().await;
                    if seen.operations.last() != Some(&op) {
                        seen.operations.push(op);
                    }
                }
                let endpoints = member_endpoints(&client, &ns, &cluster).await;
                if etcd.as_ref().is_none_or(|(e, _)| *e != endpoints)
                    && let Some(c) = connect(endpoints.clone()).await
                {
                    etcd = Some((endpoints, c));
                }
                if let Some((_, c)) = etcd.as_mut()
                    && let Ok(list) = c.member_list().await
                {
                    let learners = list.members().iter().filter(|m| m.is_learner()).count();
                    let mut seen = out.lock().await;
                    seen.max_learners = seen.max_learners.max(learners);
                    seen.max_members = seen.max_members.max(list.members().len());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { stop, seen, task }
    }

    pub async fn snapshot(&self) -> Observed {
        self.seen.lock().await.clone()
    }

    pub async fn stop(self) -> Observed {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.seen.lock().await.clone()
    }
}

/// Whether etcd agrees the cluster is whole with `size` voters: every
/// member pod answers a status request with a leader, and the member list
/// has `size` members, none a learner.
pub async fn etcd_agrees(client: &Client, ns: &str, cluster: &str, size: usize) -> bool {
    let endpoints = member_endpoints(client, ns, cluster).await;
    if endpoints.len() != size {
        return false;
    }
    for endpoint in &endpoints {
        let Some(mut c) = connect(vec![endpoint.clone()]).await else {
            return false;
        };
        match c.status().await {
            Ok(s) if s.leader() != 0 => {}
            _ => return false,
        }
    }
    let Some(mut c) = connect(endpoints).await else {
        return false;
    };
    c.member_list()
        .await
        .is_ok_and(|l| l.members().len() == size && l.members().iter().all(|m| !m.is_learner()))
}

/// Whether etcd lists member `name` (or, before it started, a member whose
/// peer URL names it) as a learner.
pub async fn is_learner(client: &Client, ns: &str, cluster: &str, name: &str) -> Option<bool> {
    let mut c = connect(member_endpoints(client, ns, cluster).await).await?;
    let list = c.member_list().await.ok()?;
    let peer_host = format!("//{name}.");
    list.members()
        .iter()
        .find(|m| m.name() == name || m.peer_urls().iter().any(|u| u.contains(&peer_host)))
        .map(|m| m.is_learner())
}

/// Reads back every write the writer had acknowledged and fails the test if
/// any is missing (or if the writer barely wrote), printing the numbers.
pub async fn assert_no_write_lost(client: &Client, ns: &str, report: &WriterReport) {
    let lost = lost_writes(client, ns, &report.cluster, &report.acked).await;
    eprintln!(
        "[{ns}] writer: {} acknowledged, {} failed attempts, longest gap {:?}, {} lost",
        report.acked.len(),
        report.failures,
        report.longest_gap,
        lost.len()
    );
    // A floor, not a rate: on a loaded 2-core machine a few seconds of
    // writing can be as few as ~10 writes (seen in a full-suite run).
    assert!(
        report.acked.len() >= 5,
        "the writer wrote throughout: only {} acknowledged",
        report.acked.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// Watches who leads a cluster: polls every member's status and records
/// each change of the leader seen by the members that answer, plus the
/// highest raft term.
pub struct LeaderMonitor {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<u64>, u64)>,
}

impl LeaderMonitor {
    pub fn start(client: Client, ns: &str, cluster: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ns, cluster) = (ns.to_owned(), cluster.to_owned());
        let task = tokio::spawn(async move {
            let mut leaders: Vec<u64> = Vec::new();
            let mut term = 0;
            while !flag.load(Ordering::Relaxed) {
                for endpoint in member_endpoints(&client, &ns, &cluster).await {
                    let Some(mut c) = connect(vec![endpoint]).await else {
                        continue;
                    };
                    let Ok(status) = c.status().await else {
                        continue;
                    };
                    term = term.max(status.raft_term());
                    let leader = status.leader();
                    // 0 = no leader known (an election is running).
                    if leader != 0 && leaders.last() != Some(&leader) {
                        // A restarted member may still name the old leader
                        // for a moment; count a change only when the term
                        // it reports is current.
                        if status.raft_term() >= term {
                            leaders.push(leader);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (leaders, term)
        });
        Self { stop, task }
    }

    /// The sequence of leaders seen and the last raft term.
    pub async fn stop(self) -> (Vec<u64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// Each member's name and etcd id as `d`'s status reports them: equal
/// before and after means no member was replaced.
pub fn member_ids(d: &DistributedKV) -> Vec<(String, Option<String>)> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| (m.name.clone(), m.id.clone()))
        .collect()
}

/// What each member's etcd reports as its version (its Status RPC), as
/// `d`'s status records it.
pub fn member_versions(d: &DistributedKV) -> Vec<String> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .filter_map(|m| m.version.clone())
        .collect()
}

/// Stops `monitor` and `writer`, which ran through a rolling upgrade
/// (`what`, which took `took`), and checks what clients saw of it: at most
/// one leader change (the planned MoveLeader), writes never stalled for 5 s
/// or more, more than `min_acked` acknowledged, none of them lost.
pub async fn assert_upgrade_kept_serving(
    client: &Client,
    ns: &str,
    monitor: LeaderMonitor,
    writer: Writer,
    what: &str,
    took: Duration,
    min_acked: usize,
) {
    let (leaders, term) = monitor.stop().await;
    let report = writer.stop().await;
    let lost = lost_writes(client, ns, &report.cluster, &report.acked).await;
    eprintln!(
        "{what} took {took:?}; leaders seen {leaders:x?} (last term {term}); writer: \
         {} acknowledged, {} failed attempts, longest gap {:?}, {} lost",
        report.acked.len(),
        report.failures,
        report.longest_gap,
        lost.len()
    );
    assert!(
        leaders.len() <= 2,
        "at most one leader change (the planned MoveLeader) in the {what}: {leaders:x?}"
    );
    assert!(
        report.longest_gap < Duration::from_secs(5),
        "writes stalled for {:?} in the {what}",
        report.longest_gap
    );
    assert!(
        report.acked.len() > min_acked,
        "the writer wrote throughout"
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
}

/// Name and etcd image of each member pod of `orders` in `ns`, sorted by
/// name.
pub async fn member_images(client: &Client, ns: &str) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut images: Vec<(String, String)> = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|p| {
            let image = p
                .spec
                .as_ref()?
                .containers
                .iter()
                .find(|c| c.name == "etcd")?
                .image
                .clone()?;
            Some((p.metadata.name.clone()?, image))
        })
        .collect();
    images.sort();
    images
}

/// Name, pod UID and etcd restart count of each member pod of `orders` in
/// `ns`, sorted: equal before and after means no member was replaced or
/// restarted.
pub async fn member_runs(client: &Client, ns: &str) -> Vec<(String, Option<String>, i32)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut runs: Vec<_> = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .find(|c| c.name == "etcd")
                .map_or(0, |c| c.restart_count);
            (
                p.metadata.name.clone().unwrap_or_default(),
                p.metadata.uid.clone(),
                restarts,
            )
        })
        .collect();
    runs.sort();
    runs
}

/// Waits for `Degraded=True, RestoreFailed` on the cluster `name`; returns
/// the condition's message.
pub async fn wait_restore_refused(dkvs: &Api<DistributedKV>, name: &str) -> String {
    use dkv_api::conditions::{reasons, types};
    wait_for(dkvs, name, "Degraded/RestoreFailed", |d| {
        condition_reason(d, types::DEGRADED, "True").as_deref() == Some(reasons::RESTORE_FAILED)
    })
    .await;
    let refused = dkvs
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading {name}: {e}"));
    condition_message(&refused, types::DEGRADED, Some("True"))
}
