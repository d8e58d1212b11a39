//! Cluster operations and faults with real etcd: kube-local with its process
//! kubelet, the operator as its own process, one 3-member cluster taken
//! through create, scale, every fault scenario and quorum loss with a writer
//! running throughout, then a second cluster through a 3.4 → 3.5 upgrade,
//! then a third (3.5, 1Gi volumes of class `standard`) through a rolling
//! restart (`dkv.io/restartedAt`) and a storage growth 1Gi → 2Gi, each with
//! a writer running. Bare-etcd baselines (create, one restart) are measured
//! first, while nothing else runs.
//!
//! The rolling restart's baseline is measured on that third cluster itself,
//! just before dkv's restart and with a writer running too: a bare script
//! restarting the same etcd members, its member pods, one at a time the way
//! a person does with kubectl — the operator paused
//! (`dkv.io/reconcile-paused`), each pod deleted with its default grace
//! period and waited for until the re-created pod is Ready and its member
//! answers a linearizable read, followers first and the leader last. Same
//! members, same API, same kubelet and StatefulSet controller, without the
//! operator: the ratio is what dkv adds — its safety (MoveLeader before the
//! leader goes, every other member healthy and Ready and the restarted one
//! caught up before the next) and its polling.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use dkv_api::DistributedKV;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_local::api_traffic::{Fault, FaultAnswer, Verb};
use serde_json::json;

use crate::bare_etcd::BareCluster;
use crate::operator_process::OperatorProcess;
use crate::report::{Baseline, Goal, Metric, Reliability};
use crate::support;
use crate::support::etcd_cluster::{
    LeaderMonitor, Writer, WriterReport, condition_reason, connect, etcd_agrees, lost_writes,
    member_endpoints, settled_at,
};

pub(crate) const NS: &str = "ops";
const CLUSTER: &str = "orders";
const UPGRADED: &str = "upgraded";
/// The cluster of the rolling restart and the storage growth.
const ROLLED: &str = "rolled";
/// Its volumes before and after the growth (`support::cluster` asks 1Gi).
const STORAGE_BEFORE: &str = "1Gi";
const STORAGE_AFTER: &str = "2Gi";
/// The absolute target of the storage growth, in seconds.
const STORAGE_GROWTH_TARGET_SECONDS: f64 = 30.0;
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
    let available = wait_available(&dkvs, CLUSTER).await?;
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
            let cut_seen = !etcd_agrees(&client, NS, CLUSTER, 3).await;
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
    clear_writer_keys(&client, CLUSTER).await?;
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
    delete_cluster(&dkvs, CLUSTER).await?;

    // Rolling upgrade 3.4 → 3.5 of a second cluster.
    progress("rolling upgrade 3.4 → 3.5");
    upgrade(&client, out).await?;
    // Its etcd processes would share the CPUs with the next cluster's.
    delete_cluster(&dkvs, UPGRADED).await?;

    // Rolling restart (a bare script's, then dkv's) and storage growth of a
    // third.
    rolled(&client, out).await?;

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

/// A third cluster (3.5, 3 members, 1Gi volumes of class `standard`): a
/// rolling restart by a bare script with the operator paused (the
/// baseline), then one requested through `dkv.io/restartedAt`, then its
/// volumes grown 1Gi → 2Gi, each with its own writer running.
async fn rolled(client: &Client, out: &mut Output) -> anyhow::Result<()> {
    progress("rolling restart by a bare script (operator paused, pods deleted one at a time)");
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let created = dkvs
        .create(
            &PostParams::default(),
            &support::cluster(NS, ROLLED, 3, V35, json!({})),
        )
        .await
        .with_context(|| format!("creating {ROLLED}"))?;
    let generation = created.metadata.generation.unwrap_or(1);
    wait_until(
        &dkvs,
        ROLLED,
        "3 healthy voters, Converged",
        Duration::from_secs(300),
        |d| converged_at(d, generation),
    )
    .await?;
    let script = script_rolling_restart(client, &dkvs).await?;
    out.context.push(script.context_row());

    progress("rolling restart (dkv.io/restartedAt)");
    clear_writer_keys(client, ROLLED).await?;
    rolling_restart(client, &dkvs, &script, out).await?;

    progress("storage growth 1Gi → 2Gi");
    clear_writer_keys(client, ROLLED).await?;
    storage_growth(client, &dkvs, out).await
}

/// Restarts every member through the annotation with a writer and a leader
/// monitor running; times the edit → every member pod on the StatefulSet's
/// new revision and `Progressing=False/Converged` for the generation,
/// against the bare script's restart of the same members (`script`).
async fn rolling_restart(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    script: &ScriptRoll,
    out: &mut Output,
) -> anyhow::Result<()> {
    // Wait for every pod on the current template first: the revision the
    // rollout must leave behind.
    let (old_revision, before) = wait_revision_settled(client, Duration::from_secs(120)).await?;
    let writer = Writer::start(client.clone(), NS, ROLLED);
    let monitor = LeaderMonitor::start(client.clone(), NS, ROLLED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stamp = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .context("rounding the restart time")?
        .to_string();
    let started = Instant::now();
    let edited = dkvs
        .patch(
            ROLLED,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                dkv_api::labels::RESTARTED_AT: stamp}}})),
        )
        .await
        .context("setting dkv.io/restartedAt")?;
    // An annotation is no spec change: the generation stays, and the
    // template's new revision is what tells the rollout is done.
    let generation = edited
        .metadata
        .generation
        .context("the patched cluster has no generation")?;
    let seen = wait_rolled_out(
        client,
        dkvs,
        generation,
        &old_revision,
        started,
        Duration::from_secs(600),
    )
    .await?;
    let took = started.elapsed().as_secs_f64();
    let updated: Vec<String> = seen
        .updated_at
        .iter()
        .map(|(pod, at)| format!("{pod} {at:.1} s"))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (leaders, _term) = monitor.stop().await;
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, ROLLED, &report.acked).await;
    let after = member_pods(client).await?;
    let restarted = after
        .iter()
        .filter(|p| !before.iter().any(|b| b.uid == p.uid))
        .count();
    let changes = leaders.len().saturating_sub(1) as f64;
    out.metrics.push(
        Metric::measured(
            "rollingRestartSeconds",
            "rolling restart of 3 members, writer running",
            took,
            "s",
            Some(Baseline {
                what: "bare script, same run, same cluster, writer running: operator paused, each member pod deleted (default grace period, as `kubectl delete pod`) and waited for until the new pod is Ready and its member answers a linearizable read, followers first, the leader last".into(),
                value: script.took,
            }),
            took / script.took,
            Goal::at_most(1.5),
            "≤ 1.5 × the bare script",
        )
        .with_note(format!(
            "dkv.io/restartedAt edit → every member pod on the StatefulSet's updateRevision and Progressing=False/Converged; {restarted} of 3 pods replaced, on the new revision at: {}; Progressing reasons seen {:?}; leader changes: dkv {changes}, the bare script {}. What dkv adds over the script: MoveLeader before the leader's pod goes, every other member healthy and Ready before each restart and the restarted one caught up before the next, and its polling",
            updated.join(", "),
            seen.reasons,
            script.leader_changes()
        )),
    );
    out.metrics.push(
        Metric::against_target(
            "leaderChangesPerRollout",
            "leader changes per rolling restart (dkv.io/restartedAt)",
            changes,
            "changes",
            1.0,
            "≤ 1 (the planned MoveLeader)",
        )
        .with_note(format!("leaders seen {leaders:x?}")),
    );
    out.reliability.push(Reliability {
        scenario: "rolling restart (dkv.io/restartedAt), members one at a time".into(),
        acknowledged_writes: Some(report.acked.len() as u64),
        lost_writes: Some(lost.len() as u64),
        recovery_seconds: None,
        note: format!(
            "not a fault; {} failed attempts (retried), longest write gap {:.1} s",
            report.failures,
            report.longest_gap.as_secs_f64()
        ),
    });
    if restarted != 3 {
        bail!("the rollout replaced {restarted} of 3 member pods: {before:?} → {after:?}");
    }
    Ok(())
}

/// What the bare script's rolling restart of [`ROLLED`] did.
struct ScriptRoll {
    /// From the first pod's delete to the last member answering again, in
    /// seconds.
    took: f64,
    /// Each member pod in the order restarted, and how long (seconds) from
    /// its delete until its member answered again.
    steps: Vec<(String, f64)>,
    /// The leaders the monitor saw meanwhile.
    leaders: Vec<u64>,
    /// The writer's report and how many of its writes were lost.
    writer: WriterReport,
    lost: usize,
}

impl ScriptRoll {
    fn leader_changes(&self) -> usize {
        self.leaders.len().saturating_sub(1)
    }

    /// The row of the context table that says what the baseline did.
    fn context_row(&self) -> (String, String) {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(pod, took)| format!("{pod} {took:.1} s"))
            .collect();
        (
            format!(
                "bare script on {ROLLED} (the rolling restart's baseline): operator paused, each member pod deleted with its default grace period and waited for until the new pod is Ready and its member answers a linearizable read, followers first, the leader last; writer running"
            ),
            format!(
                "{:.1} s ({}); {} leader changes (leaders seen {:x?}); writer: {} acknowledged, {} failed attempts (retried), longest gap {:.1} s, {} lost",
                self.took,
                steps.join(", "),
                self.leader_changes(),
                self.leaders,
                self.writer.acked.len(),
                self.writer.failures,
                self.writer.longest_gap.as_secs_f64(),
                self.lost
            ),
        )
    }
}

/// The baseline of the rolling restart: what a person does with kubectl to
/// restart [`ROLLED`]'s members without the operator. Pauses the operator,
/// then, with a writer and a leader monitor running, restarts each member
/// pod in turn ([`next_member`]'s order) through [`restart_member_pod`],
/// times that, and lets the operator take over again ([`resume`]).
async fn script_rolling_restart(
    client: &Client,
    dkvs: &Api<DistributedKV>,
) -> anyhow::Result<ScriptRoll> {
    pause(dkvs, ROLLED).await?;
    let mut remaining: Vec<String> = member_pods(client)
        .await?
        .into_iter()
        .map(|p| p.name)
        .collect();
    if remaining.len() != 3 {
        bail!(
            "{ROLLED} has {} member pods, not 3: {remaining:?}",
            remaining.len()
        );
    }
    let writer = Writer::start(client.clone(), NS, ROLLED);
    let monitor = LeaderMonitor::start(client.clone(), NS, ROLLED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let mut steps = Vec::new();
    while !remaining.is_empty() {
        let leader = etcd_leader(client, ROLLED, Duration::from_secs(30)).await?;
        let Some(next) = next_member(&remaining, &leader) else {
            break;
        };
        let took = restart_member_pod(client, &next, Duration::from_secs(180)).await?;
        remaining.retain(|name| *name != next);
        steps.push((next, took));
    }
    let took = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (leaders, _term) = monitor.stop().await;
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, ROLLED, &report.acked).await.len();
    resume(dkvs, ROLLED).await?;
    Ok(ScriptRoll {
        took,
        steps,
        leaders,
        writer: report,
        lost,
    })
}

/// Sets `dkv.io/reconcile-paused: "true"` on `cluster` and waits until the
/// operator says so (`Progressing=False/ReconcilePaused`): from then on it
/// reports status and changes nothing.
pub(crate) async fn pause(dkvs: &Api<DistributedKV>, cluster: &str) -> anyhow::Result<()> {
    dkvs.patch(
        cluster,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            dkv_api::labels::RECONCILE_PAUSED: "true"}}})),
    )
    .await
    .context("setting dkv.io/reconcile-paused")?;
    wait_until(
        dkvs,
        cluster,
        "Progressing=False/ReconcilePaused",
        Duration::from_secs(60),
        |d| {
            condition_reason(d, "Progressing", "False").as_deref()
                == Some(dkv_api::conditions::reasons::PAUSED)
        },
    )
    .await?;
    Ok(())
}

/// Removes `dkv.io/reconcile-paused` from `cluster` and waits until the
/// operator reports it [`converged_at`] its generation again (whatever the
/// script left that differs from the spec rolls out first).
pub(crate) async fn resume(dkvs: &Api<DistributedKV>, cluster: &str) -> anyhow::Result<()> {
    let resumed = dkvs
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                dkv_api::labels::RECONCILE_PAUSED: null}}})),
        )
        .await
        .context("removing dkv.io/reconcile-paused")?;
    let generation = resumed
        .metadata
        .generation
        .context("the patched cluster has no generation")?;
    wait_converged(dkvs, cluster, generation, "after the pause").await
}

/// Waits (up to 300 s) until `cluster` is [`converged_at`] `generation`;
/// `when` says after what, for the error.
pub(crate) async fn wait_converged(
    dkvs: &Api<DistributedKV>,
    cluster: &str,
    generation: i64,
    when: &str,
) -> anyhow::Result<()> {
    wait_until(
        dkvs,
        cluster,
        &format!("3 healthy voters, Converged {when}"),
        Duration::from_secs(300),
        |d| converged_at(d, generation),
    )
    .await?;
    Ok(())
}

/// The name of the member that leads `cluster`, as etcd says (`etcdctl
/// endpoint status` and `member list`); retried until `timeout` while no
/// member answers with a leader.
pub(crate) async fn etcd_leader(
    client: &Client,
    cluster: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        let last = match leader_once(client, cluster).await {
            Ok(name) => return Ok(name),
            Err(e) => e,
        };
        if started.elapsed() > timeout {
            return Err(last.context(format!("no leader of {cluster} known within {timeout:?}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One attempt of [`etcd_leader`].
async fn leader_once(client: &Client, cluster: &str) -> anyhow::Result<String> {
    let mut etcd = connect(member_endpoints(client, NS, cluster).await)
        .await
        .with_context(|| format!("connecting to {cluster}"))?;
    let leader = etcd
        .status()
        .await
        .context("asking etcd for its status")?
        .leader();
    if leader == 0 {
        bail!("the member asked knows no leader");
    }
    let list = etcd.member_list().await.context("listing etcd's members")?;
    list.members()
        .iter()
        .find(|m| m.id() == leader)
        .map(|m| m.name().to_owned())
        .with_context(|| format!("etcd's member list has no leader {leader:x}"))
}

/// Which of the `remaining` member pods the script restarts next: dkv's
/// order, followers first (the highest ordinal first), the leader last.
pub(crate) fn next_member(remaining: &[String], leader: &str) -> Option<String> {
    remaining
        .iter()
        .max_by_key(|name| (name.as_str() != leader, ordinal(name)))
        .cloned()
}

/// The ordinal of a member pod `<cluster>-<ordinal>` (-1 if it has none).
fn ordinal(pod: &str) -> i64 {
    pod.rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(-1)
}

/// Deletes member pod `name` with its default grace period (`kubectl
/// delete pod`), then waits until the pod the StatefulSet controller
/// re-creates is Ready and its member answers a linearizable read; how long
/// (seconds) from the delete.
pub(crate) async fn restart_member_pod(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<f64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let old_uid = pods
        .get(name)
        .await
        .with_context(|| format!("reading pod {name}"))?
        .metadata
        .uid
        .with_context(|| format!("pod {name} has no UID"))?;
    let started = Instant::now();
    pods.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting pod {name}"))?;
    let endpoint = wait_replaced_ready(&pods, name, &old_uid, timeout).await?;
    wait_member_answers(name, &endpoint, timeout.saturating_sub(started.elapsed())).await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Polls (every 100 ms) until pod `name` is a new pod (UID other than
/// `old_uid`), not being deleted, with `Ready=True` and an IP; its client
/// URL.
async fn wait_replaced_ready(
    pods: &Api<Pod>,
    name: &str,
    old_uid: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        if let Ok(Some(pod)) = pods.get_opt(name).await
            && let Some(endpoint) = replaced_and_ready(&pod, old_uid)
        {
            return Ok(endpoint);
        }
        if started.elapsed() > timeout {
            bail!("pod {name} was not re-created and Ready within {timeout:?} of its delete");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The client URL of `pod` if it is not the pod `old_uid`, is not being
/// deleted, has an IP and its `Ready` condition is True.
fn replaced_and_ready(pod: &Pod, old_uid: &str) -> Option<String> {
    let new = pod
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| uid != old_uid)
        && pod.metadata.deletion_timestamp.is_none();
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let ip = status.pod_ip.as_deref().filter(|ip| !ip.is_empty())?;
    (new && ready).then(|| format!("http://{ip}:2379"))
}

/// Polls (every 100 ms) until the member at `endpoint` answers a
/// linearizable read (it goes through the leader, so the member is
/// connected and caught up: what `etcdctl endpoint health` checks).
async fn wait_member_answers(name: &str, endpoint: &str, timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let answer = match connect(vec![endpoint.to_owned()]).await {
            Some(mut etcd) => etcd
                .get("health", None)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            None => Err("no connection".to_owned()),
        };
        match answer {
            Ok(()) => return Ok(()),
            Err(e) if started.elapsed() > timeout => {
                bail!(
                    "member {name} ({endpoint}) did not answer a linearizable read within {timeout:?}: {e}"
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Grows the volumes 1Gi → 2Gi with a writer running; times the edit →
/// every member claim's capacity at 2Gi and `Converged` for the generation,
/// and checks that no member restarted (same pods, same etcd restart
/// counts).
async fn storage_growth(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    out: &mut Output,
) -> anyhow::Result<()> {
    let before = member_pods(client).await?;
    let writer = Writer::start(client.clone(), NS, ROLLED);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let edited = dkvs
        .patch(
            ROLLED,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"storage": {"size": STORAGE_AFTER}}})),
        )
        .await
        .context("growing spec.storage.size")?;
    let generation = edited
        .metadata
        .generation
        .context("the patched cluster has no generation")?;
    let reasons = wait_grown(client, dkvs, generation, Duration::from_secs(300)).await?;
    let took = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, ROLLED, &report.acked).await;
    let after = member_pods(client).await?;
    let same = |p: &MemberPod| (p.name.clone(), p.uid.clone(), p.etcd_restarts);
    let unchanged = before.iter().map(same).eq(after.iter().map(same));
    let restarts = if unchanged {
        "no member restarted (same pod UIDs, etcd restart counts unchanged)".to_owned()
    } else {
        format!("**a member restarted**: {before:?} → {after:?}")
    };
    let mut metric = Metric::against_target(
        "storageGrowthSeconds",
        "storage growth 1Gi → 2Gi of 3 member volumes, writer running",
        took,
        "s",
        STORAGE_GROWTH_TARGET_SECONDS,
        "≤ 30 s, no member restarted",
    );
    metric.met = Some(took <= STORAGE_GROWTH_TARGET_SECONDS && unchanged);
    out.metrics.push(metric.with_note(format!(
        "spec.storage.size edit → every member claim's status.capacity {STORAGE_AFTER} and Progressing=False/Converged; {restarts}; Progressing reasons seen {reasons:?}. No same-run baseline (a bare script has no volumes); kube-local grows a claim as soon as it is patched, so this is the operator's own latency (see the edit, patch 3 claims, re-create the StatefulSet with the new claim size over its running pods, see the capacities, report); 30 s, as for a lost volume, leaves room for a few 2 s passes on a loaded 2-core machine"
    )));
    out.reliability.push(Reliability {
        scenario: format!(
            "storage growth {STORAGE_BEFORE} → {STORAGE_AFTER} (volumes grown in place)"
        ),
        acknowledged_writes: Some(report.acked.len() as u64),
        lost_writes: Some(lost.len() as u64),
        recovery_seconds: None,
        note: format!(
            "not a fault; {} failed attempts (retried), longest write gap {:.1} s",
            report.failures,
            report.longest_gap.as_secs_f64()
        ),
    });
    Ok(())
}

/// Whether the cluster says `Progressing=False/Converged` for `generation`
/// or later (status and condition alike) with 3 healthy voters.
pub(crate) fn converged_at(d: &DistributedKV, generation: i64) -> bool {
    let Some(status) = &d.status else {
        return false;
    };
    status.observed_generation.is_some_and(|g| g >= generation)
        && status.conditions.iter().any(|c| {
            c.type_ == "Progressing"
                && c.status == "False"
                && c.reason == "Converged"
                && c.observed_generation.is_none_or(|g| g >= generation)
        })
        && settled_at(d, 3)
}

/// The reason of the `Progressing` condition while it is True.
fn progressing_reason(d: &DistributedKV) -> Option<String> {
    d.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.status == "True")
        .map(|c| c.reason.clone())
}

/// Records `reason` unless it repeats the last one recorded.
fn note_reason(seen: &mut Vec<String>, reason: Option<String>) {
    if let Some(reason) = reason
        && seen.last() != Some(&reason)
    {
        seen.push(reason);
    }
}

/// A member pod of [`ROLLED`] as a rollout sees it.
#[derive(Debug, Clone)]
struct MemberPod {
    name: String,
    uid: Option<String>,
    /// Its `controller-revision-hash` label.
    revision: Option<String>,
    etcd_restarts: i32,
}

/// The member pods of [`ROLLED`] (not being deleted), sorted by name.
async fn member_pods(client: &Client) -> anyhow::Result<Vec<MemberPod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!(
        "{}={ROLLED},{}=etcd",
        dkv_api::labels::CLUSTER_KEY,
        dkv_api::labels::COMPONENT_KEY
    );
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .with_context(|| format!("listing {ROLLED}'s member pods"))?;
    let mut members: Vec<MemberPod> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| MemberPod {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone(),
            revision: p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("controller-revision-hash"))
                .cloned(),
            etcd_restarts: p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|cs| cs.into_iter().find(|c| c.name == "etcd"))
                .map_or(0, |c| c.restart_count),
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(members)
}

/// The StatefulSet's `status.updateRevision` once its controller has seen
/// the latest template (`observedGeneration` caught up); `None` before.
async fn update_revision(client: &Client) -> anyhow::Result<Option<String>> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let sts = sets
        .get(ROLLED)
        .await
        .with_context(|| format!("reading StatefulSet {ROLLED}"))?;
    let Some(status) = sts.status else {
        return Ok(None);
    };
    Ok((status.observed_generation.is_some()
        && status.observed_generation == sts.metadata.generation)
        .then_some(status.update_revision)
        .flatten())
}

/// Whether all 3 member pods run `revision`.
fn all_on(pods: &[MemberPod], revision: &str) -> bool {
    pods.len() == 3 && pods.iter().all(|p| p.revision.as_deref() == Some(revision))
}

/// Waits until every member pod runs the StatefulSet's update revision;
/// that revision and the pods.
async fn wait_revision_settled(
    client: &Client,
    timeout: Duration,
) -> anyhow::Result<(String, Vec<MemberPod>)> {
    let started = Instant::now();
    loop {
        let revision = update_revision(client).await?;
        let pods = member_pods(client).await?;
        if let Some(revision) = revision
            && all_on(&pods, &revision)
        {
            return Ok((revision, pods));
        }
        if started.elapsed() > timeout {
            bail!(
                "{ROLLED}'s member pods were not all on its StatefulSet's revision within {timeout:?}: {pods:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What [`wait_rolled_out`] saw.
struct RolloutSeen {
    /// The `Progressing` reasons while it was True, repeats collapsed.
    reasons: Vec<String>,
    /// Each member pod and when (seconds after the edit) it was first seen
    /// on the new revision, in that order.
    updated_at: Vec<(String, f64)>,
}

/// Polls (every 250 ms) until the StatefulSet has a revision other than
/// `old_revision`, every member pod runs it, and the cluster is
/// [`converged_at`] `generation`.
async fn wait_rolled_out(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    generation: i64,
    old_revision: &str,
    edited_at: Instant,
    timeout: Duration,
) -> anyhow::Result<RolloutSeen> {
    let started = Instant::now();
    let mut reasons = Vec::new();
    let mut updated_at: Vec<(String, f64)> = Vec::new();
    loop {
        // Status first, pods after: pods only move towards the new
        // template, so a pod on it now was on it when status was read.
        let converged = match dkvs.get(ROLLED).await {
            Ok(d) => {
                note_reason(&mut reasons, progressing_reason(&d));
                converged_at(&d, generation)
            }
            Err(_) => false,
        };
        let revision = update_revision(client).await?;
        let pods = member_pods(client).await?;
        if let Some(revision) = revision.as_deref().filter(|r| *r != old_revision) {
            for pod in &pods {
                if pod.revision.as_deref() == Some(revision)
                    && !updated_at.iter().any(|(name, _)| *name == pod.name)
                {
                    updated_at.push((pod.name.clone(), edited_at.elapsed().as_secs_f64()));
                }
            }
        }
        if converged
            && let Some(revision) = &revision
            && revision != old_revision
            && all_on(&pods, revision)
        {
            return Ok(RolloutSeen {
                reasons,
                updated_at,
            });
        }
        if started.elapsed() > timeout {
            bail!(
                "{ROLLED} did not roll out within {timeout:?}: revision {revision:?} (was {old_revision}), pods {pods:?}, converged {converged}, reasons seen {reasons:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `status.capacity.storage` of each member claim `data-rolled-<i>`.
async fn claim_capacities(client: &Client) -> anyhow::Result<Vec<Option<String>>> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let mut out = Vec::new();
    for i in 0..3 {
        let name = format!("data-{ROLLED}-{i}");
        let claim = claims
            .get(&name)
            .await
            .with_context(|| format!("reading PersistentVolumeClaim {name}"))?;
        out.push(
            claim
                .status
                .and_then(|s| s.capacity)
                .and_then(|c| c.get("storage").map(|q| q.0.clone())),
        );
    }
    Ok(out)
}

/// Polls (every 250 ms) until every member claim's capacity is
/// [`STORAGE_AFTER`] and the cluster is [`converged_at`] `generation`; the
/// `Progressing` reasons seen meanwhile.
async fn wait_grown(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    generation: i64,
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    let started = Instant::now();
    let mut reasons = Vec::new();
    loop {
        let converged = match dkvs.get(ROLLED).await {
            Ok(d) => {
                note_reason(&mut reasons, progressing_reason(&d));
                converged_at(&d, generation)
            }
            Err(_) => false,
        };
        let capacities = claim_capacities(client).await?;
        if converged
            && capacities
                .iter()
                .all(|c| c.as_deref() == Some(STORAGE_AFTER))
        {
            return Ok(reasons);
        }
        if started.elapsed() > timeout {
            bail!(
                "{ROLLED}'s volumes did not grow to {STORAGE_AFTER} within {timeout:?}: capacities {capacities:?}, converged {converged}, reasons seen {reasons:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Deletes a cluster and waits (up to 60 s) until it is gone.
async fn delete_cluster(dkvs: &Api<DistributedKV>, name: &str) -> anyhow::Result<()> {
    dkvs.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {name}"))?;
    let started = Instant::now();
    while dkvs.get_opt(name).await.ok().flatten().is_some()
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

/// Waits (up to 300 s) until `name` says `Available=True`; how long that
/// took, in seconds.
pub(crate) async fn wait_available(dkvs: &Api<DistributedKV>, name: &str) -> anyhow::Result<f64> {
    let took = wait_until(
        dkvs,
        name,
        "Available=True",
        Duration::from_secs(300),
        |d| {
            d.status
                .iter()
                .flat_map(|s| &s.conditions)
                .any(|c| c.type_ == "Available" && c.status == "True")
        },
    )
    .await?;
    Ok(took.as_secs_f64())
}

/// Polls (every 250 ms, up to `timeout`) until `check` holds for the
/// cluster; how long it took.
pub async fn wait_until(
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
        if settled && etcd_agrees(client, NS, CLUSTER, size).await {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("{CLUSTER} was not healthy with {size} voters within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Deletes the writer's keys (`key-…`) of `cluster`.
async fn clear_writer_keys(client: &Client, cluster: &str) -> anyhow::Result<()> {
    let mut etcd = connect(member_endpoints(client, NS, cluster).await)
        .await
        .with_context(|| format!("connecting to {cluster}"))?;
    etcd.delete(
        "key-",
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .context("deleting the writer's keys")?;
    Ok(())
}
