//! Standby clusters under load: a 3-member source and its 3-member
//! standby on kube-local (real etcd 3.5, authentication on, the operator
//! as its own process, moto S3), the source recording every change with a
//! 1 s continuous-backup interval and writers putting about 1,000 keys a
//! second. Measured: how long each acknowledged write takes to be on the
//! standby (p50, p99, against the continuous backup's own bound: the
//! interval plus 2 s); what following costs the operator (CPU, peak
//! memory); a switchover (the source demoted, the standby promoted at the
//! demotion revision: from the edit to the first write the new primary
//! acknowledges); and, once the new primary was given 1 GiB of values and
//! the old source (its standby now) holds them, a promotion of that
//! caught-up standby (from the edit to the first write acknowledged).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::{StandbyPhase, StandbyStatus};
use dkv_backup::testing::MotoServer;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::continuous::{cpu_time, quantile, spawn_writers};
use crate::operator_process::{OperatorProcess, proc_status_kib};
use crate::report::Metric;
use crate::support;

const NS: &str = "standby-bench";
const SOURCE: &str = "source";
const STANDBY: &str = "standby";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
const RATE: u64 = 1000;
const LOAD: Duration = Duration::from_secs(30);
/// The source's `spec.backup.continuous.interval`.
const INTERVAL: Duration = Duration::from_secs(1);

pub struct Settings<'a> {
    pub dkv: &'a std::path::Path,
    pub work: &'a std::path::Path,
}

/// `cluster`'s root user and password.
async fn root_of(client: &kube::Client, cluster: &str) -> anyhow::Result<(String, String)> {
    let secret = support::wait_auth_enabled(client, NS, cluster).await;
    let field = |key: &str| -> anyhow::Result<String> {
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .with_context(|| format!("{cluster}-etcd-root has no {key}"))?;
        Ok(String::from_utf8_lossy(&bytes.0).into_owned())
    };
    Ok((field("username")?, field("password")?))
}

/// A client of `cluster`'s members as its root user.
async fn connect(client: &kube::Client, cluster: &str) -> anyhow::Result<etcd_client::Client> {
    let (user, password) = root_of(client, cluster).await?;
    let endpoints = support::etcd_cluster::member_endpoints(client, NS, cluster).await;
    etcd_client::Client::connect(
        endpoints,
        Some(etcd_client::ConnectOptions::new().with_user(user, password)),
    )
    .await
    .with_context(|| format!("connecting to {cluster}"))
}

/// A client of `cluster`'s members as the application's user.
async fn connect_as_app(
    client: &kube::Client,
    cluster: &str,
) -> anyhow::Result<etcd_client::Client> {
    let endpoints = support::etcd_cluster::member_endpoints(client, NS, cluster).await;
    etcd_client::Client::connect(
        endpoints,
        Some(etcd_client::ConnectOptions::new().with_user("app", "app-password")),
    )
    .await
    .with_context(|| format!("connecting to {cluster} as app"))
}

async fn revision(etcd: &mut etcd_client::Client) -> anyhow::Result<i64> {
    Ok(etcd
        .get("/", Some(etcd_client::GetOptions::new().with_count_only()))
        .await?
        .header()
        .map_or(0, |h| h.revision()))
}

/// The standby's revision offset, from its StatefulSet.
async fn offset(client: &kube::Client) -> anyhow::Result<i64> {
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    sts.get(STANDBY)
        .await?
        .metadata
        .annotations
        .and_then(|a| a.get("dkv.io/standby-revision-offset").cloned())
        .context("no revision offset on the standby")?
        .parse()
        .context("a revision offset that is no number")
}

async fn standby_status(dkvs: &Api<DistributedKV>, name: &str) -> Option<StandbyStatus> {
    dkvs.get(name).await.ok()?.status?.standby
}

/// Waits until `name`'s standby phase is `phase`; returns its status.
async fn wait_phase(
    dkvs: &Api<DistributedKV>,
    name: &str,
    phase: StandbyPhase,
) -> anyhow::Result<StandbyStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = standby_status(dkvs, name)
            .await
            .filter(|s| s.phase == Some(phase))
        {
            return Ok(status);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "{name} not {phase} after 5 minutes: {:?}",
            standby_status(dkvs, name).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Puts until `etcd` acknowledges one (as the application would retry
/// a refused write); returns when.
async fn first_write(etcd: &mut etcd_client::Client, key: &str) -> anyhow::Result<Instant> {
    let started = Instant::now();
    loop {
        if etcd.put(key, "first", None).await.is_ok() {
            return Ok(Instant::now());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no write accepted for two minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the promotion is measured with: a database of this size (the
/// issue's 1 GiB), in values of [`FILL_VALUE_BYTES`].
const FILL_BYTES: usize = 1 << 30;
const FILL_VALUE_BYTES: usize = 100 << 10;

/// `spec.etcd` of both clusters: a raft snapshot every 1,000 entries.
/// etcd 3.5 keeps every entry since its last snapshot in memory (100,000
/// by default): with 1 GiB written in values of 100 KiB that is the whole
/// gigabyte in each member, 6 GiB of resident memory per member measured
/// here with six members on one machine.
fn etcd_tuning() -> serde_json::Value {
    json!({"snapshotCount": 1000})
}

/// How the old source came to hold a 1 GiB database.
struct CaughtUp {
    written_in: Duration,
    /// From the last acknowledged write on the new primary to the old
    /// source holding it.
    held_after: Duration,
    /// The old source's database size (as the member that answered
    /// reports it).
    db_bytes: i64,
}

/// Writes [`FILL_BYTES`] onto the new primary (the standby, promoted) and
/// waits until the old source, which follows it, holds every byte.
async fn fill_and_follow(
    client: &kube::Client,
    dkvs: &Api<DistributedKV>,
) -> anyhow::Result<CaughtUp> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let primary = connect(client, STANDBY).await?;
    let value = vec![b'v'; FILL_VALUE_BYTES];
    let started = Instant::now();
    let revisions: Vec<i64> = futures::stream::iter(0..FILL_BYTES / FILL_VALUE_BYTES)
        .map(|i| {
            let (mut primary, value) = (primary.clone(), value.clone());
            async move {
                let put = primary.put(format!("/fill/{i:06}"), value, None).await?;
                anyhow::Ok(put.header().map_or(0, |h| h.revision()))
            }
        })
        .buffer_unordered(8)
        .try_collect()
        .await
        .context("filling the new primary")?;
    let written_in = started.elapsed();
    let last = revisions.into_iter().max().unwrap_or(0);
    let offset = standby_status(dkvs, SOURCE)
        .await
        .and_then(|s| s.revision_offset)
        .context("the old source's revision offset")?;
    let mut old_source = connect(client, SOURCE).await?;
    let written = Instant::now();
    while revision(&mut old_source).await? - offset < last {
        anyhow::ensure!(
            written.elapsed() < Duration::from_secs(900),
            "the old source does not hold the new primary's revision {last} 15 minutes after it was written"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held_after = written.elapsed();
    let db_bytes = old_source
        .status()
        .await
        .context("the old source's status")?
        .db_size();
    eprintln!(
        "bench: standby: written in {written_in:?}, held by the old source {held_after:?} after the last write, its database {db_bytes} bytes"
    );
    Ok(CaughtUp {
        written_in,
        held_after,
        db_bytes,
    })
}

/// The writers' acknowledgements (revision, when), and samples of the
/// source revision the standby held (when, revision).
struct Load {
    acked: Vec<(i64, Instant)>,
    applied: Vec<(Instant, i64)>,
    took: Duration,
    cpu: Duration,
    peak_rss_kib: u64,
}

async fn load(
    client: &kube::Client,
    operator: &OperatorProcess,
    standby: &mut etcd_client::Client,
    offset: i64,
) -> anyhow::Result<Load> {
    let (user, password) = root_of(client, SOURCE).await?;
    let endpoints = support::etcd_cluster::member_endpoints(client, NS, SOURCE).await;
    let pid = operator.pid()?;
    let cpu_before = cpu_time(pid)?;
    let started = Instant::now();
    let (done, finished) = watch::channel(false);
    let mut writers = spawn_writers(&endpoints, Some((user, password)), RATE, &finished).await?;
    let mut applied = Vec::new();
    let mut peak_rss_kib = 0;
    let mut acked = Vec::new();
    let mut took = Duration::ZERO;
    let mut cpu = Duration::ZERO;
    loop {
        peak_rss_kib = peak_rss_kib.max(proc_status_kib(pid, "VmRSS:")?);
        applied.push((Instant::now(), revision(standby).await? - offset));
        if writers.is_empty() {
            let newest = acked.iter().map(|(r, _)| *r).max().unwrap_or(0);
            if applied.last().is_some_and(|(_, r)| *r >= newest) {
                return Ok(Load {
                    acked,
                    applied,
                    took,
                    cpu,
                    peak_rss_kib,
                });
            }
            anyhow::ensure!(
                started.elapsed() < LOAD + Duration::from_secs(300),
                "the standby holds source revision {:?} five minutes after the load, not {newest}",
                applied.last()
            );
        } else if started.elapsed() >= LOAD {
            let _ = done.send(true);
            for writer in writers.drain(..) {
                acked.extend(writer.await.context("a writer panicked")?);
            }
            took = started.elapsed();
            cpu = cpu_time(pid)? - cpu_before;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each acknowledged write's lag: from its acknowledgement to the first
/// sample that showed the standby holding it.
fn lags(load: &Load) -> Vec<Duration> {
    let mut lags: Vec<Duration> = load
        .acked
        .iter()
        .filter_map(|(revision, acked_at)| {
            load.applied
                .iter()
                .find(|(at, held)| held >= revision && at >= acked_at)
                .map(|(at, _)| *at - *acked_at)
        })
        .collect();
    lags.sort();
    lags
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let moto = MotoServer::start("dkv-bench-standby");
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    support::backups::create_secret(&client, NS, "s3-creds", moto.env()).await;
    let log = settings.work.join("operator-standby.log");
    let operator = OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let backup = |prefix: &str| {
        json!({
            "destination": {"uri": moto.uri(prefix), "credentialsSecret": "s3-creds"},
            "schedule": "0 0 1 1 *",
            "continuous": {"enabled": true, "interval": format!("{}s", INTERVAL.as_secs())}
        })
    };
    let store_of = |cluster: &str| json!({"uri": moto.uri(cluster), "credentialsSecret": "s3-creds", "cluster": cluster});
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            SOURCE,
            3,
            IMAGE,
            json!({"auth": {"enabled": true}, "backup": backup(SOURCE), "etcd": etcd_tuning()}),
        ),
    )
    .await
    .context("creating the source")?;
    support::etcd_cluster::wait_settled(&dkvs, SOURCE, 3).await;
    support::etcd_cluster::wait_for(&dkvs, SOURCE, "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some())
    })
    .await;
    // What a standby of a source with authentication on reads its root
    // credentials from is the source's own namespace here: already there.
    let _: Secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get(&format!("{SOURCE}-continuous-etcd-root"))
        .await
        .context("the source's kept root credentials")?;
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            STANDBY,
            3,
            IMAGE,
            json!({"auth": {"enabled": true}, "backup": backup(STANDBY), "etcd": etcd_tuning(),
                   "standby": {"enabled": true, "source": store_of(SOURCE)}}),
        ),
    )
    .await
    .context("creating the standby")?;
    wait_phase(&dkvs, STANDBY, StandbyPhase::Following).await?;
    let mut standby = connect(&client, STANDBY).await?;
    let offset = offset(&client).await?;

    eprintln!("bench: standby: {RATE} puts/s for {LOAD:?} on the source");
    let followed = load(&client, &operator, &mut standby, offset).await?;
    let lags = lags(&followed);
    let p99 = quantile(&lags, 0.99);
    let bound = INTERVAL + Duration::from_secs(2);
    let mut lag = Metric::against_target(
        "standbyLagP99Seconds",
        &format!(
            "standby lag p99 (acknowledged write on the source → on the standby, {:.0} writes/s)",
            followed.acked.len() as f64 / followed.took.as_secs_f64()
        ),
        p99.as_secs_f64(),
        "s",
        bound.as_secs_f64(),
        "≤ interval + 2 s (the continuous backup's own bound)",
    )
    .with_note(format!(
        "{} writes: p50 {:.2} s, max {:.2} s; source and standby 3 members each, interval {INTERVAL:?}, one transaction per source revision, up to {} on their way; the standby's revision sampled every 50 ms",
        lags.len(),
        quantile(&lags, 0.5).as_secs_f64(),
        lags.last().copied().unwrap_or_default().as_secs_f64(),
        dkv_operator::cluster::backups::standby::engine::IN_FLIGHT
    ));
    if lags.len() < followed.acked.len() {
        lag.met = Some(false);
    }
    eprintln!("bench: standby: {lag:?}");

    eprintln!("bench: standby: switchover (source demoted, standby promoted)");
    // The first writes are an application user's: root may write to a
    // standby, the application may not. Users travel with the seed only,
    // so the user is made on both (the standby makes its grant read-only
    // until it is promoted).
    for cluster in [SOURCE, STANDBY] {
        let mut root = connect(&client, cluster).await?;
        root.role_add("app").await?;
        root.role_grant_permission(
            "app",
            etcd_client::Permission::read_write("/app/").with_prefix(),
        )
        .await?;
        root.user_add("app", "app-password", None).await?;
        root.user_grant_role("app", "app").await?;
    }
    let mut new_primary = connect_as_app(&client, STANDBY).await?;
    let mut old_source = connect_as_app(&client, SOURCE).await?;
    let asked = Instant::now();
    dkvs.patch(
        SOURCE,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"standby": {"enabled": true, "source": store_of(STANDBY)}}})),
    )
    .await
    .context("demoting the source")?;
    let demoted = wait_phase(&dkvs, SOURCE, StandbyPhase::Demoted).await?;
    let demoted_after = asked.elapsed();
    dkvs.patch(
        STANDBY,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"standby": {"enabled": false}}})),
    )
    .await
    .context("promoting the standby")?;
    let promoted = wait_phase(&dkvs, STANDBY, StandbyPhase::Promoted).await?;
    let promoted_after = asked.elapsed();
    let written = first_write(&mut new_primary, "/app/after-switchover").await?;
    let switchover = written - asked;
    anyhow::ensure!(
        promoted.promoted_at_revision == demoted.demoted_at_revision,
        "the standby was promoted at {:?}, the source demoted at {:?}",
        promoted.promoted_at_revision,
        demoted.demoted_at_revision
    );
    wait_phase(&dkvs, SOURCE, StandbyPhase::Following).await?;
    let switchover_metric = Metric::against_target(
        "switchoverSeconds",
        "switchover: demotion edit → first write acknowledged by the promoted standby",
        switchover.as_secs_f64(),
        "s",
        30.0,
        "≤ 30 s",
    )
    .with_note(format!(
        "demoted (every change up to revision {} stored) after {:.2} s, promoted at it after {:.2} s; the old source then follows the new primary",
        demoted.demoted_at_revision.unwrap_or_default(),
        demoted_after.as_secs_f64(),
        promoted_after.as_secs_f64()
    ));
    eprintln!("bench: standby: {switchover_metric:?}");

    eprintln!(
        "bench: standby: {} MiB onto the new primary, followed by the old source",
        FILL_BYTES >> 20
    );
    let caught_up = fill_and_follow(&client, &dkvs).await?;

    eprintln!("bench: standby: promotion of the caught-up old source");
    let asked = Instant::now();
    dkvs.patch(
        SOURCE,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"standby": {"enabled": false}}})),
    )
    .await
    .context("promoting the old source")?;
    wait_phase(&dkvs, SOURCE, StandbyPhase::Promoted).await?;
    let promote = first_write(&mut old_source, "/app/after-promotion").await? - asked;
    drop(operator);
    let promote_metric = Metric::against_target(
        "standbyPromoteSeconds",
        "promotion of a caught-up standby: edit → first write acknowledged",
        promote.as_secs_f64(),
        "s",
        10.0,
        "≤ 10 s",
    )
    .with_note(format!(
        "the old source, following the new primary after the switchover, 3 members: {:.2} GiB database ({} values of {} KiB written on the new primary at {:.0} MiB/s, held by the old source {:.1} s after the last was acknowledged)",
        caught_up.db_bytes as f64 / f64::from(1u32 << 30),
        FILL_BYTES / FILL_VALUE_BYTES,
        FILL_VALUE_BYTES >> 10,
        (FILL_BYTES >> 20) as f64 / caught_up.written_in.as_secs_f64(),
        caught_up.held_after.as_secs_f64()
    ));
    let cpu_share = followed.cpu.as_secs_f64() / followed.took.as_secs_f64() * 100.0;
    let context = vec![(
        format!("standby follower and source agent at ~{RATE} writes/s"),
        format!(
            "the operator process (recording the source and following it): {cpu_share:.1} % of one core, VmRSS peak {:.1} MiB",
            followed.peak_rss_kib as f64 / 1024.0
        ),
    )];
    Ok((vec![lag, switchover_metric, promote_metric], context))
}
