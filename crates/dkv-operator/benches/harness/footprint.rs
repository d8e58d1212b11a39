//! The operator's footprint and load with many clusters: kube-local without
//! a kubelet (the operator still creates every child object, no pod runs),
//! the operator as its own process.
//!
//! Measured: RSS idle and with 100 / 1,000 `DistributedKV`s converged; API
//! writes in the 60 s after convergence; reconciles caused by one spec
//! edit; the no-op reconcile throughput and p99 when a restarted operator
//! re-examines every converged cluster; and how long two replicas take to
//! hand leadership over when the leader is killed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use dkv_api::DistributedKV;
use futures::{StreamExt as _, TryStreamExt as _};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator_process::OperatorProcess;
use crate::report::{Baseline, Goal, Metric};
use crate::support;

const NS: &str = "fleet";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";

pub struct Settings<'a> {
    pub dkv: &'a Path,
    pub work: &'a Path,
    /// Cluster counts at which RSS is read (ascending), e.g. 100 and 1000.
    pub counts: Vec<usize>,
    /// How long writes are counted after convergence (the benchmark target: 60 s).
    pub quiet_window: Duration,
}

fn name(i: usize) -> String {
    format!("c{i:04}")
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    eprintln!("bench: footprint: idle");
    let env = support::environment(false).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let log = settings.work.join("operator-footprint.log");
    let mut operator = OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?;
    let mut metrics = Vec::new();
    let mut context = Vec::new();

    // Idle: nothing to reconcile; give it time to list and settle.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = operator.rss_kib()? as f64 / 1024.0;
    context.push((
        "operator memory, idle".to_owned(),
        operator.rss_breakdown()?,
    ));
    metrics.push(Metric::against_target(
        "rssIdleMiB",
        "operator RSS, idle, 0 clusters",
        idle,
        "MiB",
        15.0,
        "≤ 15 MiB",
    ));

    metrics.push(leader_handover(&env, &settings).await?);

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let mut created = 0usize;
    for (step, &count) in settings.counts.iter().enumerate() {
        eprintln!("bench: footprint: {count} clusters");
        let started = Instant::now();
        create_clusters(&dkvs, created, count).await?;
        created = count;
        wait_converged(&env, &dkvs, count).await?;
        context.push((
            format!("{count} clusters: created and converged (kubelet off)"),
            format!("{:.1} s", started.elapsed().as_secs_f64()),
        ));
        let rss = operator.rss_kib()? as f64 / 1024.0;
        context.push((
            format!("operator memory with {count} clusters"),
            operator.rss_breakdown()?,
        ));
        let (bound, target) = match count {
            100 => (25.0, "≤ 25 MiB"),
            1000 => (60.0, "≤ 60 MiB"),
            _ => (
                60.0 * count as f64 / 1000.0,
                "(scaled from ≤ 60 MiB at 1,000)",
            ),
        };
        metrics.push(Metric::against_target(
            &format!("rss{count}MiB"),
            &format!("operator RSS with {count} DistributedKVs and their children cached"),
            rss,
            "MiB",
            bound,
            target,
        ));

        if step == 0 {
            metrics.push(reconciles_per_spec_change(&operator, &env, &dkvs).await?);
        }

        let before = env.requests();
        tokio::time::sleep(settings.quiet_window).await;
        let during = env.requests().since(&before);
        let detail: Vec<String> = during
            .iter()
            .filter(|(v, _, _)| v.is_write())
            .map(|(v, r, n)| format!("{v} {r}: {n}"))
            .collect();
        metrics.push(
            Metric::against_target(
                &format!("apiWritesAfterConvergence{count}"),
                &format!(
                    "API writes in the {} s after {count} clusters converged",
                    settings.quiet_window.as_secs()
                ),
                during.writes() as f64,
                "requests",
                0.0,
                "0",
            )
            .with_note(if detail.is_empty() {
                format!("{} requests in all (reads and watches)", during.total())
            } else {
                detail.join(", ")
            }),
        );
    }

    // A restarted operator re-examines every cluster once: each of those
    // reconciles finds nothing to do.
    eprintln!("bench: footprint: no-op resync after a restart");
    operator.kill().await?;
    let log_offset = std::fs::metadata(&log).map_or(0, |m| m.len() as usize);
    let before_writes = env.requests();
    operator = OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?;
    let (throughput, p99, seen) = noop_resync(&operator, &log, log_offset, created).await?;
    let writes = env.requests().since(&before_writes).writes();
    metrics.push(
        Metric::measured(
            "noopReconcilesPerSecond",
            &format!("no-op reconcile throughput, {created} converged clusters re-examined after a restart"),
            throughput,
            "reconciles/s",
            Some(Baseline {
                what: "target (no same-run baseline)".to_owned(),
                value: 500.0,
            }),
            throughput / 500.0,
            Goal::at_least(1.0),
            "≥ 500 /s",
        )
        .with_note(format!(
            "rate from the first to the {created}-th reconcile start in the operator's log; {seen} reconciles counted; {writes} API writes during the resync; concurrency 8 (the default)"
        )),
    );
    metrics.push(
        Metric::against_target(
            "noopReconcileP99Ms",
            "no-op reconcile p99 latency",
            p99 * 1000.0,
            "ms",
            10.0,
            "≤ 10 ms",
        )
        .with_note("upper bound of the histogram bucket holding the 99th percentile (buckets 1, 2, 4, 8, 16 ms …)"),
    );
    context.push((
        format!(
            "operator memory right after the resync of a restarted operator, {created} clusters"
        ),
        operator.rss_breakdown()?,
    ));
    operator.kill().await?;
    Ok((metrics, context))
}

async fn create_clusters(dkvs: &Api<DistributedKV>, from: usize, to: usize) -> anyhow::Result<()> {
    futures::stream::iter(from..to)
        .map(|i| async move {
            let cluster = support::cluster(NS, &name(i), 3, IMAGE, json!({}));
            dkvs.create(&PostParams::default(), &cluster)
                .await
                .with_context(|| format!("creating DistributedKV {}", name(i)))
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Waits until every cluster's status describes its generation and no API
/// write happened for 5 s.
async fn wait_converged(
    env: &kube_local::Environment,
    dkvs: &Api<DistributedKV>,
    count: usize,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last_writes = env.requests().writes();
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let writes = env.requests().writes();
        if writes != last_writes {
            last_writes = writes;
            quiet_since = Instant::now();
        }
        let list = dkvs
            .list(&ListParams::default())
            .await
            .context("listing DistributedKVs")?;
        let observed = list
            .items
            .iter()
            .filter(|d| {
                d.status
                    .as_ref()
                    .and_then(|s| s.observed_generation)
                    .is_some_and(|g| Some(g) == d.metadata.generation)
            })
            .count();
        if observed >= count && quiet_since.elapsed() >= Duration::from_secs(5) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("{observed} of {count} clusters converged after 10 minutes");
        }
    }
}

/// One spec edit of one converged cluster: how many reconciles follow.
async fn reconciles_per_spec_change(
    operator: &OperatorProcess,
    env: &kube_local::Environment,
    dkvs: &Api<DistributedKV>,
) -> anyhow::Result<Metric> {
    let before = operator.reconciles().await?;
    let writes_before = env.requests();
    dkvs.patch(
        &name(0),
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"cpu": "150m"}}}})),
    )
    .await
    .context("editing the spec of one cluster")?;
    // Until 5 s pass without another reconcile (at most 60 s).
    let started = Instant::now();
    let mut last = before.count;
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(5)
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = operator.reconciles().await?.count;
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
    }
    let reconciles = last - before.count;
    let writes = env.requests().since(&writes_before);
    let detail: Vec<String> = writes
        .iter()
        .filter(|(v, _, _)| v.is_write())
        .map(|(v, r, n)| format!("{v} {r}: {n}"))
        .collect();
    Ok(Metric::against_target(
        "reconcilesPerSpecChange",
        "reconciles per spec change (one edit of one cluster, incl. echoes)",
        reconciles,
        "reconciles",
        2.0,
        "≤ 1.0 (≤ 2 incl. the status echo)",
    )
    .with_note(format!(
        "API writes from the edit on (the edit included): {}",
        detail.join(", ")
    )))
}

/// Counts the reconciles of a freshly started operator until `count` have
/// finished: (reconciles per second, p99 bound in seconds, reconciles
/// seen). The rate is taken from the operator's own log, where kube-runtime
/// writes a line with a timestamp as each reconcile starts: from the first
/// to the `count`-th start (the whole pass can take less than one scrape of
/// the metrics endpoint).
async fn noop_resync(
    operator: &OperatorProcess,
    log: &Path,
    log_offset: usize,
    count: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    let base = operator.reconciles().await?;
    let started = Instant::now();
    loop {
        let now = operator.reconciles().await?;
        let done = now.count - base.count;
        if done >= count as f64 {
            let p99 = now.since(&base).quantile_bound(0.99).unwrap_or(f64::NAN);
            let text = std::fs::read(log).with_context(|| format!("reading {}", log.display()))?;
            let text = String::from_utf8_lossy(text.get(log_offset..).unwrap_or_default());
            let starts: Vec<jiff::Timestamp> = text
                .lines()
                .filter(|l| l.contains("reconciling object"))
                .filter_map(|l| without_colours(l).split_whitespace().next()?.parse().ok())
                .take(count)
                .collect();
            let (Some(first), Some(last)) = (starts.first(), starts.last()) else {
                bail!("no reconcile lines in {}", log.display());
            };
            let seconds = last.duration_since(*first).as_secs_f64().max(0.000_001);
            let rate = (starts.len().saturating_sub(1)) as f64 / seconds;
            return Ok((rate, p99, done));
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("only {done} of {count} clusters reconciled within 5 minutes of a restart");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A log line without ANSI colour sequences (`ESC [ … m`).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Lease duration of the operator's leader election (`leader.rs`).
const LEASE_SECONDS: f64 = 15.0;
const HANDOVER_TRIALS: usize = 3;

/// Two replicas with leader election; the leader is killed (SIGKILL: it
/// cannot release the lease) and the time until the other holds the lease
/// is measured, `HANDOVER_TRIALS` times (the killed replica is started again
/// as the next standby). The figure is the slowest trial.
async fn leader_handover(
    env: &kube_local::Environment,
    settings: &Settings<'_>,
) -> anyhow::Result<Metric> {
    use k8s_openapi::api::coordination::v1::Lease;
    eprintln!("bench: footprint: leader handover");
    let client = env.client();
    support::create_namespace(&client, "dkv-system").await;
    let leases: Api<Lease> = Api::namespaced(client, "dkv-system");
    let holder = async || -> Option<String> {
        leases
            .get_opt("dkv-operator-leader")
            .await
            .ok()??
            .spec?
            .holder_identity
            .filter(|h| !h.is_empty())
    };
    let log = settings.work.join("operator-replicas.log");
    let kubeconfig = env.kubeconfig_path();
    let mut replicas = std::collections::BTreeMap::new();
    for identity in ["replica-a", "replica-b"] {
        replicas.insert(
            identity.to_owned(),
            OperatorProcess::start_replica(settings.dkv, kubeconfig, &log, identity).await?,
        );
    }
    let mut trials = Vec::new();
    for _ in 0..HANDOVER_TRIALS {
        let deadline = Instant::now() + Duration::from_secs(60);
        let leader = loop {
            if let Some(h) = holder().await {
                break h;
            }
            if Instant::now() > deadline {
                bail!(
                    "no replica took the lease within 60 s (log: {})",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // Let the leader renew once, as a leader that has been running does.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let killed = replicas
            .remove(&leader)
            .with_context(|| format!("the lease names {leader}, which the bench did not start"))?;
        let started = Instant::now();
        killed.kill().await?;
        loop {
            match holder().await {
                Some(h) if h != leader => break,
                _ if started.elapsed() > Duration::from_secs(120) => {
                    bail!("the lease stayed with the killed {leader} for 120 s")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        trials.push(started.elapsed().as_secs_f64());
        replicas.insert(
            leader.clone(),
            OperatorProcess::start_replica(settings.dkv, kubeconfig, &log, &leader).await?,
        );
    }
    for (_, replica) in replicas {
        replica.kill().await?;
    }
    let slowest = trials.iter().copied().fold(0.0, f64::max);
    let shown: Vec<String> = trials.iter().map(|t| format!("{t:.1} s")).collect();
    Ok(Metric::measured(
        "leaderHandoverSeconds",
        "leader replica killed → the other replica holds the lease (slowest of 3)",
        slowest,
        "s",
        Some(Baseline {
            what: format!("the lease duration ({LEASE_SECONDS} s)"),
            value: LEASE_SECONDS,
        }),
        slowest / LEASE_SECONDS,
        Goal::at_most((LEASE_SECONDS + 5.0) / LEASE_SECONDS),
        "≤ lease duration + 5 s",
    )
    .with_note(format!("trials: {}", shown.join(", "))))
}
