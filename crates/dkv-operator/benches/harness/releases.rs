//! etcd releases under dkv against the same steps done by hand. For each of
//! 3.5.30, 3.6.16 and 3.7.3 (the last two built from etcd's Go modules):
//!
//! - create → `Available=True` of a 3-member cluster, against a bare script
//!   starting 3 etcd processes of that release until each serves and knows
//!   a leader (3 runs, median; measured first, while nothing else runs);
//! - a rollback: an etcd setting every member refuses at start
//!   (`spec.etcd.extraArgs`) with `spec.rollout: {onFailure: Rollback,
//!   progressDeadline: 30s}`, timed from the edit until the rollback is
//!   recorded and all 3 members serve again; against a person doing the
//!   same by hand on the same cluster with the operator paused: the setting
//!   added to the StatefulSet's template, the first follower's pod deleted,
//!   the same 30 s waited, the template put back, the pod deleted again and
//!   waited for until it is Ready and its member answers;
//! - the upgrades into 3.6.16 (from 3.5.30) and into 3.7.3 (from a cluster
//!   created on 3.6.16, whose log holds nothing 3.5 wrote), timed from the
//!   image edit until every member reports the new version and the cluster
//!   is settled; against a person doing it by hand on a twin cluster with
//!   the operator paused: the StatefulSet's image changed (`kubectl set
//!   image`), then each member pod deleted and waited for until it is Ready
//!   and its member answers, followers first, the leader last.
//!
//! dkv's rollouts run with a writer; its acknowledged and lost writes are
//! in the notes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use dkv_api::DistributedKV;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::bare_etcd::BareCluster;
use crate::cluster_ops::{
    NS, Output, converged_at, etcd_leader, next_member, pause, restart_member_pod, resume,
    wait_available, wait_converged, wait_until,
};
use crate::operator_process::OperatorProcess;
use crate::report::{Baseline, Goal, Metric};
use crate::support;
use crate::support::etcd_cluster::{Writer, lost_writes, settled_at};

/// One etcd release: its image (as users write it), the version etcd
/// reports, and the short name of its metrics and clusters.
struct Release {
    image: &'static str,
    version: &'static str,
    id: &'static str,
}

const RELEASES: [Release; 3] = [
    Release {
        image: "registry.k8s.io/etcd:3.5.30-0",
        version: "3.5.30",
        id: "35",
    },
    Release {
        image: "registry.k8s.io/etcd:3.6.16-0",
        version: "3.6.16",
        id: "36",
    },
    Release {
        image: "quay.io/coreos/etcd:v3.7.3",
        version: "3.7.3",
        id: "37",
    },
];

/// `spec.rollout.progressDeadline` of the rollbacks (its minimum), and
/// how long the person waits before judging the new spec failed.
const DEADLINE: Duration = Duration::from_secs(30);
/// The etcd setting every member refuses at start: a number etcd cannot
/// read.
const FAILING_FLAG: &str = "max-concurrent-streams";
const FAILING_VALUE: &str = "lots";

fn progress(step: &str) {
    eprintln!("bench: releases: {step}");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The section, on its own: the operator binary `dkv`, scratch space under
/// `work`; what it measured, and how it ended.
pub async fn run(dkv: PathBuf, work: PathBuf) -> (Output, anyhow::Result<()>) {
    let mut out = Output::default();
    let result = measure(&dkv, &work, &mut out).await;
    (out, result)
}

async fn measure(dkv: &Path, work: &Path, out: &mut Output) -> anyhow::Result<()> {
    let mut bare_creates = Vec::new();
    for release in &RELEASES {
        progress(&format!(
            "bare script: 3 etcd {} processes",
            release.version
        ));
        let mut runs = Vec::new();
        for round in 0..3u8 {
            let dir = work.join(format!("bare-{}-{round}", release.version));
            let (bare, took) = BareCluster::start(release.version, &dir, round)
                .await
                .with_context(|| format!("creating {}", dir.display()))?;
            runs.push(took.as_secs_f64());
            drop(bare);
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        let bare = median(runs.clone());
        out.context.push((
            format!(
                "bare script: 3 etcd {} processes to a leader (3 runs)",
                release.version
            ),
            format!("{runs:.2?} s, median {bare:.2} s"),
        ));
        bare_creates.push(bare);
    }

    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let log = work.join("operator-releases.log");
    let operator = OperatorProcess::start(dkv, env.kubeconfig_path(), &log).await?;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);

    for (release, bare) in RELEASES.iter().zip(bare_creates) {
        let name = format!("on{}", release.id);
        progress(&format!("create → Available on {}", release.version));
        let took = create(&dkvs, &name, release).await?;
        out.metrics.push(Metric::measured(
            &format!("createOnEtcd{}Seconds", release.id),
            &format!("create → Available, 3 members on etcd {}", release.version),
            took,
            "s",
            Some(Baseline {
                what: format!(
                    "bare script: 3 etcd {} processes to a leader",
                    release.version
                ),
                value: bare,
            }),
            took / bare,
            Goal::at_most(1.5),
            "≤ 1.5 × the bare script",
        ));

        progress(&format!("rollback by hand on {}", release.version));
        let by_hand = rollback_by_hand(&client, &dkvs, &name).await?;
        progress(&format!("rollback by dkv on {}", release.version));
        let (took, note) = rollback(&client, &dkvs, &name).await?;
        out.metrics.push(
            Metric::measured(
                &format!("rollbackOnEtcd{}Seconds", release.id),
                &format!(
                    "rollback of a setting the members refuse, etcd {}, 30 s deadline",
                    release.version
                ),
                took,
                "s",
                Some(Baseline {
                    what: "by hand, same cluster, operator paused: the setting added to the StatefulSet, the first follower's pod deleted, the same 30 s waited, the setting removed, the pod deleted again until Ready and its member answers".into(),
                    value: by_hand,
                }),
                took / by_hand,
                Goal::at_most(1.5),
                "≤ 1.5 × by hand",
            )
            .with_note(note),
        );
    }

    for pair in RELEASES.windows(2) {
        let (from, to) = (&pair[0], &pair[1]);
        progress(&format!(
            "upgrade {} → {} by hand (a twin cluster)",
            from.version, to.version
        ));
        let by_hand = upgrade_by_hand(&client, &dkvs, from, to).await?;
        progress(&format!("upgrade {} → {} by dkv", from.version, to.version));
        let (took, note) = upgrade(&client, &dkvs, &format!("on{}", from.id), to).await?;
        out.metrics.push(
            Metric::measured(
                &format!("upgradeToEtcd{}Seconds", to.id),
                &format!(
                    "rolling upgrade {} → {} of 3 members, writer running",
                    from.version, to.version
                ),
                took,
                "s",
                Some(Baseline {
                    what: "by hand, a twin cluster, operator paused: the StatefulSet's image changed, each member pod deleted until Ready and its member answers, followers first, the leader last".into(),
                    value: by_hand,
                }),
                took / by_hand,
                Goal::at_most(1.5),
                "≤ 1.5 × by hand",
            )
            .with_note(note),
        );
    }
    drop(operator);
    Ok(())
}

/// Creates `name` on `release` (rollbacks asked for, 30 s deadline); how
/// long until `Available=True`, in seconds. Returns once it has converged
/// and its spec is recorded as the last good one.
async fn create(dkvs: &Api<DistributedKV>, name: &str, release: &Release) -> anyhow::Result<f64> {
    let rollout = json!({"rollout": {"onFailure": "Rollback", "progressDeadline": "30s"}});
    dkvs.create(
        &PostParams::default(),
        &support::cluster(NS, name, 3, release.image, rollout),
    )
    .await
    .with_context(|| format!("creating {name}"))?;
    let available = wait_available(dkvs, name).await?;
    wait_until(
        dkvs,
        name,
        "converged, its spec the last good one",
        Duration::from_secs(300),
        |d| {
            converged_at(d, 1)
                && d.status
                    .as_ref()
                    .and_then(|s| s.rollout.as_ref())
                    .is_some_and(|r| r.last_good.is_some())
        },
    )
    .await?;
    Ok(available)
}

/// Merges `spec` into `cluster`'s spec (`kubectl patch --type merge`);
/// the object as the API server answered (with its new generation).
async fn merge_spec(
    dkvs: &Api<DistributedKV>,
    cluster: &str,
    spec: serde_json::Value,
) -> anyhow::Result<DistributedKV> {
    dkvs.patch(
        cluster,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": spec })),
    )
    .await
    .with_context(|| format!("editing {cluster}'s spec"))
}

/// The member pods of `cluster` (not being deleted), by name.
async fn member_pod_names(client: &Client, cluster: &str) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let selector = format!(
        "{}={cluster},{}=etcd",
        dkv_api::labels::CLUSTER_KEY,
        dkv_api::labels::COMPONENT_KEY
    );
    let mut names: Vec<String> = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .with_context(|| format!("listing {cluster}'s member pods"))?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// The index of container `container` among `field` (`containers` or
/// `initContainers`) of `cluster`'s StatefulSet template, and its args.
async fn template_container(
    sets: &Api<StatefulSet>,
    cluster: &str,
    init: bool,
    container: &str,
) -> anyhow::Result<(usize, Vec<String>)> {
    let sts = sets
        .get(cluster)
        .await
        .with_context(|| format!("reading StatefulSet {cluster}"))?;
    let spec = sts
        .spec
        .template
        .spec
        .with_context(|| format!("StatefulSet {cluster} has no pod template"))?;
    let list = if init {
        spec.init_containers.unwrap_or_default()
    } else {
        spec.containers
    };
    list.into_iter()
        .enumerate()
        .find(|(_, c)| c.name == container)
        .map(|(i, c)| (i, c.args.unwrap_or_default()))
        .with_context(|| format!("StatefulSet {cluster} has no container {container}"))
}

/// A JSON patch of `cluster`'s StatefulSet, as `kubectl patch --type json`.
async fn patch_statefulset(
    sets: &Api<StatefulSet>,
    cluster: &str,
    patch: serde_json::Value,
) -> anyhow::Result<()> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch).context("building the StatefulSet's patch")?;
    sets.patch(cluster, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("patching StatefulSet {cluster}"))?;
    Ok(())
}

/// The rollback's baseline on `cluster`: what a person does with kubectl
/// (see the module's doc); seconds from the template's change until the
/// member serves again on the old one.
async fn rollback_by_hand(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    cluster: &str,
) -> anyhow::Result<f64> {
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pause(dkvs, cluster).await?;
    let (index, args) = template_container(&sets, cluster, true, "member-init").await?;
    let path = format!("/spec/template/spec/initContainers/{index}/args");
    let started = Instant::now();
    patch_statefulset(
        &sets,
        cluster,
        json!([{"op": "add", "path": format!("{path}/-"),
                "value": format!("--extra-arg={FAILING_FLAG}={FAILING_VALUE}")}]),
    )
    .await?;
    let leader = etcd_leader(client, cluster, Duration::from_secs(30)).await?;
    let names = member_pod_names(client, cluster).await?;
    let first = next_member(&names, &leader).context("no member pod to restart")?;
    pods.delete(&first, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting pod {first}"))?;
    tokio::time::sleep(DEADLINE.saturating_sub(started.elapsed())).await;
    patch_statefulset(
        &sets,
        cluster,
        json!([{"op": "replace", "path": path, "value": args}]),
    )
    .await?;
    restart_member_pod(client, &first, Duration::from_secs(180)).await?;
    let took = started.elapsed().as_secs_f64();
    resume(dkvs, cluster).await?;
    Ok(took)
}

/// dkv's rollback on `cluster`: the failing setting edited in; seconds
/// until the rollback is recorded and all 3 members serve, with a note.
/// Afterwards the setting is removed again and the cluster converges.
async fn rollback(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    cluster: &str,
) -> anyhow::Result<(f64, String)> {
    let writer = Writer::start(client.clone(), NS, cluster);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let edited = merge_spec(
        dkvs,
        cluster,
        json!({"etcd": {"extraArgs": {FAILING_FLAG: FAILING_VALUE}}}),
    )
    .await?;
    let generation = edited.metadata.generation.unwrap_or_default();
    wait_until(
        dkvs,
        cluster,
        "rolled back, 3 members serving",
        Duration::from_secs(300),
        |d| {
            let rolled_back = d
                .status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .and_then(|r| r.rolled_back.as_ref())
                .is_some_and(|r| r.generation == generation);
            rolled_back
                && settled_at(d, 3)
                && d.status.as_ref().is_some_and(|s| s.ready_replicas == 3)
        },
    )
    .await?;
    let took = started.elapsed().as_secs_f64();
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, cluster, &report.acked).await;
    let reverted = merge_spec(dkvs, cluster, json!({"etcd": null})).await?;
    let generation = reverted.metadata.generation.unwrap_or_default();
    wait_converged(dkvs, cluster, generation, "after the setting was removed").await?;
    Ok((
        took,
        format!(
            "edit → status.rollout.rolledBack for the edit and 3 members Ready and healthy (the 30 s deadline included); writer: {} acknowledged, {} lost, longest gap {:.1} s",
            report.acked.len(),
            lost.len(),
            report.longest_gap.as_secs_f64()
        ),
    ))
}

/// The upgrade's baseline: a twin cluster created on `from`, upgraded to
/// `to` by hand (see the module's doc), then deleted; seconds from the
/// image change until the last member answers on `to`.
async fn upgrade_by_hand(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    from: &Release,
    to: &Release,
) -> anyhow::Result<f64> {
    let twin = format!("by-hand-{}", to.id);
    create(dkvs, &twin, from).await?;
    pause(dkvs, &twin).await?;
    // The spec says `to` too, so that the operator finds nothing to undo
    // when it resumes.
    merge_spec(dkvs, &twin, json!({"image": to.image})).await?;
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    let (index, _) = template_container(&sets, &twin, false, "etcd").await?;
    let started = Instant::now();
    patch_statefulset(
        &sets,
        &twin,
        json!([{"op": "replace",
                "path": format!("/spec/template/spec/containers/{index}/image"),
                "value": to.image}]),
    )
    .await?;
    let mut remaining = member_pod_names(client, &twin).await?;
    while !remaining.is_empty() {
        let leader = etcd_leader(client, &twin, Duration::from_secs(30)).await?;
        let Some(next) = next_member(&remaining, &leader) else {
            break;
        };
        restart_member_pod(client, &next, Duration::from_secs(180)).await?;
        remaining.retain(|name| *name != next);
    }
    let took = started.elapsed().as_secs_f64();
    resume(dkvs, &twin).await?;
    dkvs.delete(&twin, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {twin}"))?;
    Ok(took)
}

/// dkv's upgrade of `cluster` to `to` with a writer running; seconds from
/// the edit until every member reports `to` and the cluster is settled,
/// with a note.
async fn upgrade(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    cluster: &str,
    to: &Release,
) -> anyhow::Result<(f64, String)> {
    let writer = Writer::start(client.clone(), NS, cluster);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    merge_spec(dkvs, cluster, json!({"image": to.image})).await?;
    wait_until(
        dkvs,
        cluster,
        &format!("every member on {}", to.version),
        Duration::from_secs(600),
        |d| {
            settled_at(d, 3)
                && d.status.as_ref().is_some_and(|s| {
                    s.members.len() == 3
                        && s.members
                            .iter()
                            .all(|m| m.version.as_deref() == Some(to.version))
                        && s.current_version.as_deref() == Some(to.version)
                })
        },
    )
    .await?;
    let took = started.elapsed().as_secs_f64();
    let report = writer.stop().await;
    let lost = lost_writes(client, NS, cluster, &report.acked).await;
    if !lost.is_empty() {
        bail!(
            "the upgrade of {cluster} lost {} acknowledged writes",
            lost.len()
        );
    }
    Ok((
        took,
        format!(
            "image edit → every member reports {} and the cluster is settled; writer: {} acknowledged, 0 lost, longest gap {:.1} s",
            to.version,
            report.acked.len(),
            report.longest_gap.as_secs_f64()
        ),
    ))
}
