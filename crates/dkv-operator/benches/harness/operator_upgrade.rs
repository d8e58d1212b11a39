//! Member restarts an operator upgrade causes: `clusters` one-member
//! clusters (real etcd, kube-local's process kubelet) created by the build
//! before this one's member side (`support::previous_release`, built from
//! git once and cached) as `ghcr.io/dkv-io/dkv:previous`, then
//!
//! 1. this build as `ghcr.io/dkv-io/dkv:test`, with
//!    `--member-upgrades-per-minute=RATE`: a real upgrade whose member side
//!    changed. Every member pod restarts onto this build, and the most
//!    clusters that began rolling in any minute is reported against the
//!    rate;
//! 2. the same build as `ghcr.io/dkv-io/dkv:next` (a new image whose
//!    member side is the same): member pods restarted, counted over two
//!    health looks (the target: 0).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dkv_api::DistributedKV;
use dkv_test_support as support;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::operator_process::{OperatorProcess, TEST_IMAGE};
use crate::report::{Baseline, Goal, Metric};

const NS: &str = "bench-upgrade";
const ETCD: &str = "registry.k8s.io/etcd:3.5.30-0";
const NEXT: &str = "ghcr.io/dkv-io/dkv:next";
const PREVIOUS: &str = "ghcr.io/dkv-io/dkv:previous";
/// Clusters a minute that may start rolling onto a changed member side.
const RATE: usize = 20;

pub struct Settings<'a> {
    pub dkv: &'a Path,
    pub work: &'a Path,
    pub clusters: usize,
}

/// Member pod name → UID.
async fn member_uids(client: &Client) -> anyhow::Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    Ok(pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=etcd"))
        .await
        .context("listing the member pods")?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect())
}

async fn settled(dkvs: &Api<DistributedKV>, clusters: usize) -> anyhow::Result<usize> {
    let list = dkvs
        .list(&ListParams::default())
        .await
        .context("listing the clusters")?;
    Ok(list
        .items
        .iter()
        .filter(|d| support::etcd_cluster::settled_at(d, 1))
        .count()
        .min(clusters))
}

async fn wait_all_settled(
    dkvs: &Api<DistributedKV>,
    clusters: usize,
    within: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let n = settled(dkvs, clusters).await?;
        if n == clusters {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < within,
            "{n} of {clusters} clusters settled after {within:?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn restarted(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> usize {
    before
        .iter()
        .filter(|(name, uid)| now.get(*name) != Some(*uid))
        .count()
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let clusters = settings.clusters;
    let previous = tokio::task::spawn_blocking(support::previous_release::previous_release)
        .await
        .context("building the previous member side")?;
    eprintln!(
        "bench: upgrade: from {} (the previous member side)",
        previous.commit
    );
    let mut kubelet = support::kubelet_config();
    kubelet.image_map.insert(
        PREVIOUS,
        kube_local::kubelet::ImageTarget {
            bin_dir: previous.dkv.parent().map(Path::to_path_buf),
            entrypoint: vec![previous.dkv.display().to_string()],
            cmd: Vec::new(),
        },
    );
    let env = support::environment_configured(
        vec![
            <DistributedKV as kube::CustomResourceExt>::crd(),
            <dkv_api::DistributedKVBackup as kube::CustomResourceExt>::crd(),
        ],
        Some(kubelet),
    )
    .await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let log = settings.work.join("operator-upgrade.log");
    let kubeconfig = env.kubeconfig_path();
    let first = OperatorProcess::start_as(&previous.dkv, kubeconfig, &log, PREVIOUS, &[]).await?;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    for i in 0..clusters {
        dkvs.create(
            &PostParams::default(),
            &support::cluster(NS, &format!("c{i:03}"), 1, ETCD, json!({})),
        )
        .await
        .with_context(|| format!("creating cluster {i}"))?;
    }
    wait_all_settled(&dkvs, clusters, Duration::from_secs(60 * 20)).await?;
    let before = member_uids(&client).await?;
    anyhow::ensure!(before.len() == clusters, "{} member pods", before.len());
    first.kill().await?;

    // 1. This build: a changed member side, at the bounded rate.
    let rate = RATE.to_string();
    let second = OperatorProcess::start_as(
        settings.dkv,
        kubeconfig,
        &log,
        TEST_IMAGE,
        &["--member-upgrades-per-minute", &rate],
    )
    .await?;
    let began = Instant::now();
    let mut restarted_at: BTreeMap<String, Duration> = BTreeMap::new();
    let within = Duration::from_secs(60 * (clusters / RATE + 10) as u64);
    while restarted_at.len() < clusters {
        anyhow::ensure!(
            began.elapsed() < within,
            "{} of {clusters} members restarted after {within:?}",
            restarted_at.len()
        );
        let now = member_uids(&client).await?;
        for (name, uid) in &before {
            if now.get(name).is_some_and(|u| u != uid) {
                restarted_at.entry(name.clone()).or_insert(began.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let rolled = began.elapsed();
    wait_all_settled(&dkvs, clusters, Duration::from_secs(300)).await?;
    second.kill().await?;
    // The most clusters that began rolling within any minute.
    let times: Vec<Duration> = restarted_at.values().copied().collect();
    let busiest = times
        .iter()
        .map(|start| {
            times
                .iter()
                .filter(|t| **t >= *start && **t < *start + Duration::from_secs(60))
                .count()
        })
        .max()
        .unwrap_or(0);
    eprintln!(
        "bench: upgrade: from the previous member side: {} restarted in {rolled:?}, at most {busiest} in a minute (rate {RATE}, bucket {RATE})",
        restarted_at.len()
    );

    // 2. A new image, the same member side.
    let before = member_uids(&client).await?;
    let third = OperatorProcess::start_as(settings.dkv, kubeconfig, &log, NEXT, &[]).await?;
    let look = Duration::from_secs(65);
    tokio::time::sleep(look).await;
    wait_all_settled(&dkvs, clusters, Duration::from_secs(120)).await?;
    let same_side = restarted(&before, &member_uids(&client).await?);
    third.kill().await?;
    eprintln!("bench: upgrade: same member side: {same_side} of {clusters} member pods restarted");

    let metrics = vec![
        Metric::against_target(
            "memberRestartsOnOperatorUpgrade",
            &format!(
                "member pods restarted by an operator upgrade whose member side is unchanged ({clusters} clusters)"
            ),
            same_side as f64,
            "pods",
            0.0,
            "0",
        )
        .with_note(format!(
            "the upgrade before it, from the previous member side ({}), restarted {} of {clusters}",
            &previous.commit[..12],
            restarted_at.len()
        )),
        Metric::measured(
            "memberUpgradesPerMinute",
            &format!(
                "most clusters starting a member-side rollout in one minute after an upgrade from the previous member side, --member-upgrades-per-minute={RATE}"
            ),
            busiest as f64,
            "clusters",
            Some(Baseline {
                what: "twice the rate (the bucket starts full, then refills at the rate)".into(),
                value: (2 * RATE) as f64,
            }),
            busiest as f64 / (2 * RATE) as f64,
            Goal::at_most(1.0),
            "≤ 2 × rate in any minute",
        ),
    ];
    let context = vec![(
        "operator upgrade".to_owned(),
        format!(
            "{clusters} one-member clusters created by {}; upgraded to this build (the member side changed): {} restarts over {:.0} s at {RATE} clusters a minute; then a new image with the same member side: {same_side} restarts",
            &previous.commit[..12],
            restarted_at.len(),
            rolled.as_secs_f64()
        ),
    )];
    Ok((metrics, context))
}
