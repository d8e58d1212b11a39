//! Restore time of continuous backup: a one-member etcd 3.5 with a
//! database of `size` MiB, recorded by the continuous backup agent with its
//! default chain limits while ten times the database's size of changes is
//! written. Measured: the restore to the newest point (plan over the stored
//! chains, fetch the newest chain's base, `etcdutl snapshot restore`,
//! start, replay that chain's changes) against a restore of a full backup
//! of the same final data taken at the end (fetch, restore, start): what
//! the replay of one chain adds, bounded by `newChain.changePercent`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dkv_backup::continuous::agent::{AgentSettings, run as record};
use dkv_backup::continuous::archive::{chain_ends, continuous_location, plan_restore, read_bases};
use dkv_backup::continuous::chain::Target;
use dkv_backup::continuous::cutter::CutSettings;
use dkv_backup::continuous::replay::{Replayed, replay_plan};
use dkv_backup::testing::{EtcdProcess, etcd_bin_dir, incompressible, loopback_ip};
use dkv_backup::{
    BackupRequest, Encoding, Keyring, Location, MemberRestore, RestoreTool, Store, StoreConfig,
    UploadOptions, fetch_artifact, restore_member, take_backup,
};
use dkv_etcd::GrpcAdmin;
use jiff::Timestamp;
use tokio::sync::watch;

use crate::report::{Baseline, Goal, Metric};

mod days;

pub struct Settings<'a> {
    pub work: &'a Path,
    pub size_mib: usize,
}

/// Each change overwrites one of the database's keys with a value this
/// large.
const VALUE_BYTES: usize = 64 << 10;
const ETCD_VERSION: &str = "3.5.16";

/// Values nothing compresses, so stored sizes are what was written.
fn value(seed: u64) -> Vec<u8> {
    incompressible(seed, VALUE_BYTES)
}

/// A point-in-time restore into a new one-member cluster, timed.
struct Restored {
    took: Duration,
    member: EtcdProcess,
    replayed: Replayed,
}

/// Plans a restore to `target` over the stored chains, fetches the base,
/// restores and starts a member `name`, and replays.
async fn restore_to(
    bin: &Path,
    store: &Store,
    continuous: &Location,
    work: &Path,
    target: Target,
    name: &str,
    ordinal: u8,
) -> anyhow::Result<Restored> {
    let none = Keyring::default();
    let t = Instant::now();
    let planned = plan_restore(store, continuous, &none, target).await??;
    let snapshot = work.join(format!("{name}.db"));
    fetch_artifact(
        &StoreConfig::default(),
        &planned.base.uri,
        None,
        &none,
        &snapshot,
    )
    .await?;
    let member = restore_and_start(bin, &snapshot, work, name, &loopback_ip(61, ordinal)).await?;
    let into = GrpcAdmin::new(vec![member.client_url.clone()], Duration::from_secs(10));
    let replayed = replay_plan(&into, store, &planned, &none, 0).await?;
    Ok(Restored {
        took: t.elapsed(),
        member,
        replayed,
    })
}

/// A restore into a new one-member cluster from `snapshot`; returns the
/// running member.
async fn restore_and_start(
    bin: &Path,
    snapshot: &Path,
    work: &Path,
    name: &str,
    ip: &str,
) -> anyhow::Result<EtcdProcess> {
    let data_dir = work.join(name);
    restore_member(
        &RestoreTool::for_version(ETCD_VERSION, bin)?,
        &MemberRestore {
            snapshot: snapshot.to_owned(),
            name: name.to_owned(),
            initial_cluster: format!("{name}=http://{ip}:2380"),
            initial_advertise_peer_urls: format!("http://{ip}:2380"),
            initial_cluster_token: name.to_owned(),
            data_dir: data_dir.clone(),
            revision_bump: None,
            // Fetched by fetch_artifact, as the operator's restore is.
            snapshot_checked: true,
        },
    )
    .await?;
    let member = EtcdProcess::start(bin, name, ip, &data_dir, name);
    member.wait_ready().await;
    Ok(member)
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let work = settings.work.join("pitr");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("bucket"))?;
    let bin = etcd_bin_dir("3.5");
    let source = EtcdProcess::start(
        &bin,
        "source",
        &loopback_ip(61, 0),
        &work.join("source"),
        "src",
    );
    source.wait_ready().await;
    let keys = (settings.size_mib << 20) / VALUE_BYTES;
    let mut writer = source.client().await;
    for k in 0..keys {
        writer
            .put(format!("/pitr/{k:06}"), value(k as u64), None)
            .await?;
    }

    let destination = Location::parse(&format!("file://{}/", work.join("bucket").display()))?;
    let agent_settings = AgentSettings {
        namespace: "bench".into(),
        cluster: "pitr".into(),
        destination: destination.clone(),
        endpoints: vec![source.client_url.clone()],
        cut: CutSettings {
            interval: Duration::from_secs(1),
            ..CutSettings::default()
        },
        encoding: Encoding::default(),
    };
    let (stop, stopped) = watch::channel(false);
    let agent = {
        let etcd = GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(10));
        let settings = agent_settings.clone();
        tokio::spawn(async move {
            record(&etcd, &StoreConfig::default(), &settings, stopped, |_| {}).await
        })
    };

    // Ten times the database in changes, compacted as a cluster with
    // auto-compaction would be (the last few thousand revisions kept).
    let changes = keys * 10;
    let started = Instant::now();
    let mut last = 0;
    for i in 0..changes {
        let put = writer
            .put(
                format!("/pitr/{:06}", i % keys),
                value((keys + i) as u64),
                None,
            )
            .await?;
        last = put.header().map_or(last, |h| h.revision());
        if i % 2000 == 1999 && last > 3000 {
            writer.compact(last - 3000, None).await?;
        }
    }
    let writing = started.elapsed();
    let store = Store::open(&destination, &StoreConfig::default())?;
    let continuous = continuous_location(&destination, "bench", "pitr");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let reached = chain_ends(&store, &continuous)
            .await?
            .iter()
            .map(|(_, r)| *r)
            .max();
        if reached >= Some(last) {
            break;
        }
        if agent.is_finished() {
            let ended = agent.await.context("the agent's task")?;
            anyhow::bail!("the agent stopped at {reached:?} of {last}: {ended:?}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the agent did not store revision {last} within 2 minutes (it reached {reached:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop.send(true);
    agent.await.context("the agent's task")??;
    let stored_bytes = store.total_size(continuous.path()).await?;

    // The restore to the newest point, as a restore does it.
    let to_newest = restore_to(
        &bin,
        &store,
        &continuous,
        &work,
        Target::Latest,
        "restored",
        1,
    )
    .await?;
    let (pitr, restored) = (to_newest.took, to_newest.member);
    anyhow::ensure!(
        to_newest.replayed.source_revision == last,
        "restored to {} instead of {last}",
        to_newest.replayed.source_revision
    );
    // The worst point: just before the newest chain's base, where the
    // chain before it, ended for its size, is replayed whole.
    let bases = read_bases(&store, &continuous).await?;
    let worst = match bases.len() {
        0 | 1 => None,
        n => Some(
            restore_to(
                &bin,
                &store,
                &continuous,
                &work,
                Target::Revision(bases[n - 1].revision - 1),
                "worst",
                3,
            )
            .await?,
        ),
    };

    // The same final data restored from a full backup taken now.
    let admin = GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(10));
    let full = take_backup(
        &admin,
        &StoreConfig::default(),
        &BackupRequest {
            namespace: "bench".into(),
            cluster: "full".into(),
            destination: destination.clone(),
            seed_endpoints: vec![source.client_url.clone()],
            taken_at: Timestamp::now(),
            upload: UploadOptions::default(),
            encoding: Encoding::default(),
        },
    )
    .await?;
    let t = Instant::now();
    let snapshot = work.join("full.db");
    fetch_artifact(
        &StoreConfig::default(),
        &full.uri,
        None,
        &Keyring::default(),
        &snapshot,
    )
    .await?;
    let plain = restore_and_start(&bin, &snapshot, &work, "plain", &loopback_ip(61, 2)).await?;
    let baseline = t.elapsed();
    // Key by key (one response for the whole database would pass gRPC's
    // message limit).
    let (mut a, mut b) = (restored.client().await, plain.client().await);
    for k in 0..keys {
        let key = format!("/pitr/{k:06}");
        let (x, y) = (
            a.get(key.as_str(), None).await?,
            b.get(key.as_str(), None).await?,
        );
        anyhow::ensure!(
            x.kvs().first().map(|kv| kv.value()) == y.kvs().first().map(|kv| kv.value()),
            "{key}: the point-in-time restore and the full restore differ"
        );
    }

    let ratio = pitr.as_secs_f64() / baseline.as_secs_f64();
    let metric = Metric::measured(
        "pitrRestoreVsFullRestore",
        &format!(
            "restore to the newest point after {}× the database ({} MiB) in changes: plan, fetch the newest chain's base, restore, start, replay",
            changes / keys,
            settings.size_mib
        ),
        pitr.as_secs_f64(),
        "s",
        Some(Baseline {
            what: "a full backup of the same final data: fetch, `etcdutl snapshot restore`, start".to_owned(),
            value: baseline.as_secs_f64(),
        }),
        ratio,
        Goal::at_most(1.5),
        "≤ 1.5 × the full restore",
    )
    .with_note(format!(
        "{} chains recorded (newChain defaults: 24h, 25 %, 100,000 revisions); the newest point replayed {} events; {:.0} MiB of changes written in {:.1} s; continuous backup stored {:.0} MiB",
        bases.len(),
        to_newest.replayed.events,
        (changes * VALUE_BYTES) as f64 / f64::from(1 << 20),
        writing.as_secs_f64(),
        stored_bytes as f64 / f64::from(1 << 20),
    ));
    let mut context: Vec<(String, String)> = worst
        .iter()
        .map(|worst| {
            (
                "point-in-time restore to the worst point (just before the newest chain's base: the chain before it replayed whole)".to_owned(),
                format!(
                    "{:.2} s, {} events replayed; {:.2} × the full restore",
                    worst.took.as_secs_f64(),
                    worst.replayed.events,
                    worst.took.as_secs_f64() / baseline.as_secs_f64()
                ),
            )
        })
        .collect();
    drop((restored, plain, source, worst));

    let (days_metrics, days_context) = days::run(&bin, &work).await?;
    context.extend(days_context);
    let _ = std::fs::remove_dir_all(&work);
    Ok((
        std::iter::once(metric).chain(days_metrics).collect(),
        context,
    ))
}
