//! Cluster operations and faults with real etcd: kube-local with its process
//! kubelet, the operator as its own process, one 3-member cluster taken
//! through create, scale, every fault scenario and quorum loss with a writer
//! running throughout, then a second cluster through a 3.4 → 3.5 upgrade.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_local::api_traffic::{Fault, FaultAnswer, Verb};
use serde_json::json;

use crate::bare_etcd::BareCluster;
use crate::operator_process::OperatorProcess;
use crate::report::{Baseline, Goal, Metric, Reliability};
use crate::support;
use crate::support::etcd_cluster::{
    LeaderMonitor, Writer, connect, lost_writes, member_endpoints, settled_at,
};

const NS: &str = "ops";
const CLUSTER: &str = "orders";
const UPGRADED: &str = "upgraded";
const V34: &str = "registry.k8s.io/etcd:3.4.23-0";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";
/// etcd's own minimum for adding a member: its health wait of ~5 s.
const MEMBER_ADD_MINIMUM_SECONDS: f64 = 5.0;

pub struct Settings<'a> {
    pub dkv: &'a Path,
    pub work: &'a Path,
}

#[derive(Default)]
pub struct Output {
    pub metrics: Vec<Metric>,
    pub reliability: Vec<Reliability>,
    pub context: Vec<(String, String)>,
}

/// A stretch of the writer's sequence numbers that belongs to a scenario.
struct Window {
    scenario: String,
    from: usize,
    to: usize,
    recovery: Option<f64>,
    note: String,
}

fn progress(step: &str) {
    eprintln!("bench: ops: {step}");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

pub async fn run(settings: Settings<'_>, out: &mut Output) -> anyhow::Result<()> {
    // Baselines first, while nothing else runs.
    let bare_dir = settings.work.join("bare");
    let mut creates = Vec::new();
    let mut rejoins = Vec::new();
    for round in 0..3u8 {
        let round_dir = bare_dir.join(round.to_string());
        let (mut bare, took) = BareCluster::start("3.5", &round_dir, round)
            .await
            .with_context(|| format!("creating {}", round_dir.display()))?;
        creates.push(took.as_secs_f64());
        rejoins.push(bare.kill_and_restart("3.5", 1).await.as_secs_f64());
        drop(bare);
        // etcd preallocates its WAL: 9 members would keep ~0.6 GB.
        std::fs::remove_dir_all(&round_dir)
            .with_context(|| format!("removing {}", round_dir.display()))?;
    }
    let bare_create = median(creates.clone());
    let bare_rejoin = median(rejoins.clone());
    out.context.push((
        "bare script: 3 etcd 3.5 processes to a leader (3 runs)".into(),
        format!("{creates:.2?} s, median {bare_create:.2} s"),
    ));
    out.context.push((
        "bare script: a killed etcd process restarted at once until it serves with a leader (3 runs)".into(),
        format!("{rejoins:.2?} s, median {bare_rejoin:.2} s"),
    ));

    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let log = settings.work.join("operator-ops.log");
    let mut operator =
        Some(OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?);
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let kubelet = env
        .kubelet()
        .context("kube-local started without its kubelet")?;

    // create → Available (timed by wait_until from the create's answer)
    progress("create → Available");
    dkvs.create(
        &PostParams::default(),
        &support::cluster(NS, CLUSTER, 3, V35, json!({})),
    )
    .await
    .context("creating the cluster")?;
    let available = wait_until(
        &dkvs,
        CLUSTER,
        "Available=True",
        Duration::from_secs(300),
        |d| {
            d.status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "Available" && c.status == "True")
        },
    )
    .await?
    .as_secs_f64();
    out.metrics.push(Metric::measured(
        "createToAvailableSeconds",
        "create → Available, 3 members (real etcd on kube-local)",
        available,
        "s",
        Some(Baseline {
            what: "bare script: 3 etcd processes to a leader".into(),
            value: bare_create,
        }),
        available / bare_create,
        Goal::at_most(1.5),
        "≤ 1.5 × the bare script",
    ));
    wait_healthy(&client, &dkvs, 3, Duration::from_secs(120)).await?;

    let writer = Writer::start(client.clone(), NS, CLUSTER);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut windows: Vec<Window> = Vec::new();

    // scale 3 → 5 → 3
    progress("scale 3 → 5 → 3");
    let from = writer.acknowledged().await;
    let started = Instant::now();
    resize(&dkvs, 5).await?;
    wait_until(
        &dkvs,
        CLUSTER,
        "5 healthy voters",
        Duration::from_secs(300),
        |d| settled_at(d, 5),
    )
    .await?;
    let up = started.elapsed().as_secs_f64();
    resize(&dkvs, 3).await?;
    wait_until(
        &dkvs,
        CLUSTER,
        "3 healthy voters",
        Duration::from_secs(300),
        |d| settled_at(d, 3),
    )
    .await?;
    let scale = started.elapsed().as_secs_f64();
    let minimum = 2.0 * MEMBER_ADD_MINIMUM_SECONDS;
    out.metrics.push(
        Metric::measured(
            "scale3to5to3Seconds",
            "scale 3 → 5 → 3, writer running",
            scale,
            "s",
            Some(Baseline {
                what: "etcd's own minimum: 2 member adds × ~5 s health wait (removals ~0)".into(),
                value: minimum,
            }),
            scale / minimum,
            Goal::at_most(2.0),
            "≤ 2 × etcd's own minimum",
        )
        .with_note(format!("3 → 5 took {up:.1} s, 5 → 3 {:.1} s", scale - up)),
    );
    windows.push(Window {
        scenario: "scale 3 → 5 → 3".into(),
        from,
        to: writer.acknowledged().await,
        recovery: None,
        note: "not a fault: the writer ran throughout".into(),
    });

    // An etcd process killed.
    progress("member kill");
    let from = writer.acknowledged().await;
    let restarts_before = etcd_restarts(&pods, "orders-1").await;
    let started = Instant::now();
    kubelet
        .kill_container(NS, "orders-1", "etcd")
        .context("killing orders-1's etcd")?;
    while etcd_restarts(&pods, "orders-1").await <= restarts_before {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("orders-1's etcd was not restarted within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_healthy(&client, &dkvs, 3, Duration::from_secs(180)).await?;
    let kill = started.elapsed().as_secs_f64();
    let mut metric = Metric::measured(
        "memberKillToHealthySeconds",
        "killed etcd process → 3/3 voters healthy",
        kill,
        "s",
        Some(Baseline {
            what: "bare script: the killed process restarted at once until it serves".into(),
            value: bare_rejoin,
        }),
        kill / bare_rejoin,
        Goal::at_most(f64::INFINITY),
        "≤ 10 s",
    );
    metric.met = Some(kill <= 10.0);
    out.metrics.push(metric.with_note(
        "met is judged on the absolute target; the ratio shows what the kubelet restart and observation add",
    ));
    windows.push(Window {
        scenario: "member kill (etcd process SIGKILLed)".into(),
        from,
        to: writer.acknowledged().await,
        recovery: Some(kill),
        note: "the kubelet restarts the container; the operator only observes".into(),
    });

    // A member's volume lost.
    progress("PVC loss");
    let from = writer.acknowledged().await;
    let old_id = member_id(&dkvs, "orders-1").await?;
    let started = Instant::now();
    support::lose_disk(kubelet, &pods, NS, "orders-1").await;
    wait_until(
        &dkvs,
        CLUSTER,
        "orders-1 replaced and 3 healthy voters",
        Duration::from_secs(300),
        |d| {
            settled_at(d, 3)
                && d.status
                    .iter()
                    .flat_map(|s| &s.members)
                    .any(|m| m.name == "orders-1" && m.id.is_some() && m.id != old_id)
        },
    )
    .await?;
    wait_healthy(&client, &dkvs, 3, Duration::from_secs(120)).await?;
    let pvc = started.elapsed().as_secs_f64();
    out.metrics.push(Metric::against_target(
        "pvcLossToHealthySeconds",
        "lost volume (PVC data wiped, pod deleted) → 3/3 voters healthy",
        pvc,
        "s",
        30.0,
        "≤ 30 s (small db)",
    ));
    windows.push(Window {
        scenario: "PVC loss (volume wiped, pod deleted)".into(),
        from,
        to: writer.acknowledged().await,
        recovery: Some(pvc),
        note: "the operator removes the member, re-adds it as a learner, promotes it".into(),
    });

    // The operator killed while a scale-up step is pinned.
    progress("operator kill mid-step");
    let from = writer.acknowledged().await;
    resize(&dkvs, 4).await?;
    wait_until(
        &dkvs,
        CLUSTER,
        "an operation pinned",
        Duration::from_secs(120),
        |d| d.status.as_ref().is_some_and(|s| s.operation.is_some()),
    )
    .await?;
    let pinned = dkvs
        .get(CLUSTER)
        .await
        .ok()
        .and_then(|d| d.status?.operation)
        .map(|op| format!("{:?} {}", op.kind, op.target))
        .unwrap_or_default();
    let started = Instant::now();
    if let Some(op) = operator.take() {
        op.kill().await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    operator = Some(OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?);
    wait_until(
        &dkvs,
        CLUSTER,
        "4 healthy voters",
        Duration::from_secs(300),
        |d| settled_at(d, 4),
    )
    .await?;
    let resumed = started.elapsed().as_secs_f64();
    resize(&dkvs, 3).await?;
    wait_until(
        &dkvs,
        CLUSTER,
        "3 healthy voters",
        Duration::from_secs(300),
        |d| settled_at(d, 3),
    )
    .await?;
    windows.push(Window {
        scenario: "operator killed mid-step (SIGKILL during a scale-up, restarted 2 s later)".into(),
        from,
        to: writer.acknowledged().await,
        recovery: Some(resumed),
        note: format!("killed with `{pinned}` pinned; recovery = kill → the scale-up finished (4 healthy voters); then scaled back to 3"),
    });

    // API faults: conflicts and server errors on the writes that repair drift.
    progress("API fault injection");
    let from = writer.acknowledged().await;
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    let injected_before = env.injected_faults();
    for (answer, times) in [
        (FaultAnswer::Conflict, 2),
        (FaultAnswer::InternalError, 2),
        (FaultAnswer::ServiceUnavailable, 2),
    ] {
        env.inject_fault(Fault::new(Some(Verb::Apply), "services", answer, times));
    }
    let started = Instant::now();
    let client_service = format!("{CLUSTER}-client");
    services
        .delete(&client_service, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting Service {client_service}"))?;
    // Drift repaired through the faults, and the cluster still settled.
    loop {
        if services
            .get_opt(&client_service)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(180) {
            env.clear_faults();
            bail!("Service {client_service} was not recreated within 180 s of the faults");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_healthy(&client, &dkvs, 3, Duration::from_secs(120)).await?;
    let repaired = started.elapsed().as_secs_f64();
    let injected = env.injected_faults() - injected_before;
    env.clear_faults();
    windows.push(Window {
        scenario: "API faults: 409 ×2, then 500 ×2, then 503 ×2 answering the operator's Service apply".into(),
        from,
        to: writer.acknowledged().await,
        recovery: Some(repaired),
        note: format!("the client Service deleted (drift) under the faults; {injected} requests answered by a fault; recovery = Service recreated and cluster healthy"),
    });

    // One member's network cut for 10 s.
    progress("network cut");
    let from = writer.acknowledged().await;
    let cut = kubelet.cut_network(NS, "orders-2");
    let network_note;
    let network_recovery = match cut {
        Ok(()) => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let cut_seen = !etcd_agrees(&client, 3).await;
            tokio::time::sleep(Duration::from_secs(5)).await;
            kubelet
                .restore_network(NS, "orders-2")
                .context("restoring orders-2's network")?;
            let started = Instant::now();
            wait_healthy(&client, &dkvs, 3, Duration::from_secs(180)).await?;
            network_note = format!(
                "orders-2 unreachable for 10 s (blackhole route; {}); recovery = from the restored route to 3/3 healthy",
                if cut_seen {
                    "etcd reported it unreachable 5 s into the cut"
                } else {
                    "yet etcd still looked healthy 5 s into the cut"
                }
            );
            Some(started.elapsed().as_secs_f64())
        }
        Err(e) => {
            network_note = format!("not measured: {e}");
            None
        }
    };
    windows.push(Window {
        scenario: "network cut of one member".into(),
        from,
        to: writer.acknowledged().await,
        recovery: network_recovery,
        note: network_note,
    });

    // Every write so far must be there.
    progress("reading back every acknowledged write");
    let report = writer.stop().await;
    let lost = lost_writes(&client, NS, CLUSTER, &report.acked).await;
    for w in &windows {
        let lost_here = lost
            .iter()
            .filter(|s| (w.from as u64..w.to as u64).contains(s))
            .count() as u64;
        out.reliability.push(Reliability {
            scenario: w.scenario.clone(),
            acknowledged_writes: Some((w.to - w.from) as u64),
            lost_writes: Some(lost_here),
            recovery_seconds: w.recovery,
            note: w.note.clone(),
        });
    }
    out.context.push((
        "writer across scale and faults".into(),
        format!(
            "{} acknowledged, {} failed attempts (retried), longest gap {:.1} s, {} lost",
            report.acked.len(),
            report.failures,
            report.longest_gap.as_secs_f64(),
            lost.len()
        ),
    ));

    // Quorum lost for good (two of three disks), recovered by policy. The
    // writer's keys start over: clear the old ones so that a lost write
    // cannot hide behind an earlier write of the same key and value.
    progress("quorum loss with recovery");
    clear_writer_keys(&client).await?;
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"recovery": {"policy": "ForceNewCluster", "afterSeconds": 10}}}),
        ),
    )
    .await
    .context("setting the recovery policy")?;
    let writer = Writer::start(client.clone(), NS, CLUSTER);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    for member in ["orders-1", "orders-2"] {
        support::lose_disk(kubelet, &pods, NS, member).await;
    }
    wait_until(
        &dkvs,
        CLUSTER,
        "a quorum recovery",
        Duration::from_secs(300),
        |d| {
            d.status
                .as_ref()
                .and_then(|s| s.operation.as_ref())
                .is_some_and(|op| format!("{:?}", op.kind) == "RecoverQuorum")
        },
    )
    .await?;
    let recovery_began = started.elapsed().as_secs_f64();
    wait_until(
        &dkvs,
        CLUSTER,
        "3 healthy voters after recovery",
        Duration::from_secs(600),
        |d| settled_at(d, 3),
    )
    .await?;
    wait_healthy(&client, &dkvs, 3, Duration::from_secs(120)).await?;
    let recovered = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = writer.stop().await;
    let lost = lost_writes(&client, NS, CLUSTER, &report.acked).await;
    out.reliability.push(Reliability {
        scenario: "quorum loss (2 of 3 volumes lost) with recovery.policy ForceNewCluster, afterSeconds 10".into(),
        acknowledged_writes: Some(report.acked.len() as u64),
        lost_writes: Some(lost.len() as u64),
        recovery_seconds: Some(recovered),
        note: format!("deliberate: writes only the lost members held may go; recovery began {recovery_began:.1} s after the loss (10 s grace); recovery = loss → 3/3 healthy"),
    });
    dkvs.delete(CLUSTER, &DeleteParams::default())
        .await
        .context("deleting the cluster")?;
    let started = Instant::now();
    while dkvs.get_opt(CLUSTER).await.ok().flatten().is_some()
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Rolling upgrade 3.4 → 3.5 of a second cluster.
    progress("rolling upgrade 3.4 → 3.5");
    upgrade(&client, out).await?;

    if let Some(op) = operator.take() {
        op.kill().await?;
    }
    Ok(())
}

async fn upgrade(client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    dkvs.create(
        &PostParams::default(),
        &support::cluster(NS, UPGRADED, 3, V34, json!({})),
    )
    .await
    .context("creating the 3.4 cluster")?;
    wait_until(
        &dkvs,
        UPGRADED,
        "3 healthy voters on 3.4",
        Duration::from_secs(300),
        |d| settled_at(d, 3) && versions(d).iter().all(|v| v.starts_with("3.4")),
    )
    .await?;
    let writer = Writer::start(client.clone(), NS, UPGRADED);
    let monitor = LeaderMonitor::start(client.clone(), NS, UPGRADED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    dkvs.patch(
        UPGRADED,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": V35}})),
    )
    .await
    .context("upgrading to 3.5")?;
    wait_until(
        &dkvs,
        UPGRADED,
        "every member on 3.5",
        Duration::from_secs(600),
        |d| {
            settled_at(d, 3)
                && versions(d).len() == 3
                && versions(d).iter().all(|v| v.starts_with("3.5"))
        },
    )
    .await?;
    let took = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (leaders, _term) = monitor.stop().await;
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, UPGRADED, &report.acked).await;
    let changes = leaders.len().saturating_sub(1) as f64;
    out.metrics.push(
        Metric::against_target(
            "leaderChangesPerUpgrade",
            "leader changes per rolling upgrade 3.4 → 3.5",
            changes,
            "changes",
            1.0,
            "≤ 1 (the planned MoveLeader)",
        )
        .with_note(format!(
            "upgrade took {took:.1} s; leaders seen {leaders:x?}"
        )),
    );
    out.reliability.push(Reliability {
        scenario: "rolling upgrade 3.4 → 3.5".into(),
        acknowledged_writes: Some(report.acked.len() as u64),
        lost_writes: Some(lost.len() as u64),
        recovery_seconds: None,
        note: format!(
            "not a fault; longest write gap {:.1} s",
            report.longest_gap.as_secs_f64()
        ),
    });
    Ok(())
}

fn versions(d: &DistributedKV) -> Vec<String> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .filter_map(|m| m.version.clone())
        .collect()
}

async fn resize(dkvs: &Api<DistributedKV>, size: i32) -> anyhow::Result<()> {
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": size}})),
    )
    .await
    .with_context(|| format!("resizing {CLUSTER} to {size}"))?;
    Ok(())
}

async fn member_id(dkvs: &Api<DistributedKV>, member: &str) -> anyhow::Result<Option<String>> {
    let d = dkvs.get(CLUSTER).await.context("reading the cluster")?;
    Ok(d.status
        .iter()
        .flat_map(|s| &s.members)
        .find(|m| m.name == member)
        .and_then(|m| m.id.clone()))
}

async fn etcd_restarts(pods: &Api<Pod>, pod: &str) -> i32 {
    pods.get(pod)
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == "etcd"))
        .map_or(0, |c| c.restart_count)
}

/// Polls (every 250 ms, up to `timeout`) until `check` holds for the
/// cluster; how long it took.
async fn wait_until(
    dkvs: &Api<DistributedKV>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&DistributedKV) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if let Ok(d) = dkvs.get(name).await
            && check(&d)
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            let status = dkvs
                .get(name)
                .await
                .ok()
                .and_then(|d| serde_json::to_string(&d.status).ok())
                .unwrap_or_default();
            bail!("{name} did not reach {what} within {timeout:?}; status: {status}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the cluster's status says `size` healthy voters, settled,
/// and etcd agrees: every member pod answers a status request with a
/// leader, and the member list has `size` voters.
async fn wait_healthy(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    size: usize,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let settled = dkvs.get(CLUSTER).await.is_ok_and(|d| settled_at(&d, size));
        if settled && etcd_agrees(client, size).await {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("{CLUSTER} was not healthy with {size} voters within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn etcd_agrees(client: &Client, size: usize) -> bool {
    let endpoints = member_endpoints(client, NS, CLUSTER).await;
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

/// Deletes the writer's keys (`key-…`).
async fn clear_writer_keys(client: &Client) -> anyhow::Result<()> {
    let mut etcd = connect(member_endpoints(client, NS, CLUSTER).await)
        .await
        .context("connecting to the cluster")?;
    etcd.delete(
        "key-",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .context("deleting the writer's keys")?;
    Ok(())
}
