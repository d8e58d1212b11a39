//! The continuous backup agent of one cluster: keeps a chain going in the
//! cluster's backup destination, starting a new one from a full snapshot
//! when there is none or the current one cannot continue.
//!
//! A chain's directory holds `base.json` (the [`Artifact`] record of the
//! full snapshot it continues) and its segments. On start the agent resumes
//! the newest chain after its last stored segment; when the cluster has
//! compacted the revisions it would need (the agent was down too long) it
//! reports the gap and starts a new chain.

use bytes::Bytes;
use dkv_etcd::{EtcdAdmin, EtcdData};
use jiff::Timestamp;
use serde::Deserialize;
use tokio::sync::watch;
use tracing::{info, warn};

use super::archive::{
    BASE_RECORD, chain_location, continuous_location, newest_segment, read_bases,
};
use super::chain::{Base, StoredSegment};
use super::cutter::{CutSettings, Cutter};
use super::recorder::{Ended, Until, record};
use super::rotation::ChainExtent;
use crate::artifact::Artifact;
use crate::backup::{BackupRequest, UploadOptions, take_backup};
use crate::encoding::Encoding;
use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

/// Which cluster the agent records, and where to.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub namespace: String,
    pub cluster: String,
    /// The cluster's backup destination (`spec.backup.destination.uri`).
    pub destination: Location,
    /// Client URLs of the cluster (its client Service).
    pub endpoints: Vec<String>,
    pub cut: CutSettings,
    /// How base snapshots and segments are stored: compressed, and
    /// encrypted when it has a key.
    pub encoding: Encoding,
}

/// What happened to the chain, for whoever reports the agent's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// A new chain began from a full snapshot; `gap_after` is the revision
    /// the previous chain reached, when there was one (nothing between it
    /// and the new base can be restored).
    ChainStarted { base: Base, gap_after: Option<i64> },
    /// A segment is durable.
    Stored(StoredSegment),
}

/// Runs until `stop` turns true: resumes or starts a chain and records.
/// Returns the error that stopped it otherwise (the process exits and is
/// restarted; the chain resumes).
pub async fn run(
    etcd: &(impl EtcdAdmin + EtcdData),
    config: &StoreConfig,
    settings: &AgentSettings,
    mut stop: watch::Receiver<bool>,
    mut report: impl FnMut(Progress),
) -> Result<()> {
    let store = Store::open(&settings.destination, config)?;
    let continuous = continuous_location(
        &settings.destination,
        &settings.namespace,
        &settings.cluster,
    );
    let cluster_id = cluster_id(etcd, &settings.endpoints).await?;
    let recording = Recording {
        store: &store,
        continuous: &continuous,
        settings,
        cluster_id: &cluster_id,
    };
    let (mut cutter, mut extent) = match resume(&store, &continuous, settings, &cluster_id).await? {
        Some(resumed) => resumed,
        None => {
            let base = take_base(etcd, config, settings).await?;
            begin_chain(&recording, &base, None, &mut report).await?
        }
    };
    loop {
        let chain_dir = chain_location(&continuous, cutter.chain());
        let outcome = record(
            etcd,
            &store,
            &chain_dir,
            &mut cutter,
            stopped(&mut stop),
            Until::ChainEnds(&mut extent),
            |segment| report(Progress::Stored(segment.clone())),
        )
        .await;
        match outcome {
            Ok(Ended::ChainEnds(why)) => {
                info!(chain = cutter.chain(), %why, "ending the chain; starting the next from a full snapshot");
                after_second_of(extent.started_at).await;
                let base = take_base(etcd, config, settings).await?;
                // The ending chain is stored through the new base's
                // revision, so that every point between them stays
                // restorable: from the old chain up to the base, from the
                // new one after.
                let tail = record(
                    etcd,
                    &store,
                    &chain_dir,
                    &mut cutter,
                    stopped(&mut stop),
                    Until::Stored(base.revision),
                    |segment| report(Progress::Stored(segment.clone())),
                )
                .await;
                let gap_after = match tail {
                    Ok(Ended::Reached) => None,
                    Ok(_) => Some(cutter.resume_revision() - 1),
                    Err(e) => {
                        warn!(chain = cutter.chain(), error = %e, "could not store the ending chain through the next base");
                        Some(cutter.resume_revision() - 1)
                    }
                };
                (cutter, extent) = begin_chain(&recording, &base, gap_after, &mut report).await?;
            }
            Ok(_) => return Ok(()),
            Err(Error::Etcd {
                cause: dkv_etcd::Error::Compacted { compact_revision },
                ..
            }) => {
                let reached = cutter.resume_revision() - 1;
                warn!(
                    chain = cutter.chain(),
                    reached,
                    compact_revision,
                    "the cluster compacted revisions the chain needs; starting a new chain"
                );
                let base = take_base(etcd, config, settings).await?;
                (cutter, extent) =
                    begin_chain(&recording, &base, Some(reached), &mut report).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the clock is past the whole second of `taken_at`: snapshot
/// objects are named to the second, so two bases never share a name.
async fn after_second_of(taken_at: Timestamp) {
    let next = taken_at.as_second().saturating_add(1).saturating_mul(1000);
    let wait = next.saturating_sub(Timestamp::now().as_millisecond());
    if let Ok(wait) = u64::try_from(wait)
        && wait > 0
    {
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
}

/// Completes when `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The newest chain, continued after its last stored segment; `None` when
/// the destination has no chain yet. Only the newest segment is read (the
/// chain's links are verified when a restore plans over it), so a restart
/// costs the same however long the chain has grown.
///
/// A chain whose newest segment the agent's key cannot decrypt (the key
/// was replaced) is not continued: a new chain starts, under the new key.
///
/// With the cutter comes the chain's extent (its base's size, from the
/// chain's record, and its segments' from the listing), so that a restart
/// does not reset when the chain ends.
async fn resume(
    store: &Store,
    continuous: &Location,
    settings: &AgentSettings,
    cluster_id: &str,
) -> Result<Option<(Cutter, ChainExtent)>> {
    let cut = settings.cut;
    let bases = read_bases(store, continuous).await?;
    let Some(newest) = bases.iter().max_by_key(|b| b.revision) else {
        return Ok(None);
    };
    let record = chain_location(continuous, &newest.chain).join(BASE_RECORD);
    let bytes = store.get_small(record.path()).await?;
    let record = serde_json::from_slice::<serde_json::Value>(&bytes).ok();
    let recorded = record
        .as_ref()
        .and_then(|v| v.get(CLUSTER_ID_FIELD)?.as_str().map(str::to_owned));
    // A record that does not read as a snapshot's counts as an empty base:
    // the chain then ends by size after `MIN_CHANGE_BYTES` of changes.
    let base_bytes = record
        .as_ref()
        .and_then(|v| Artifact::deserialize(v).ok())
        .map_or(0, |artifact| artifact.size_bytes);
    if let Some(recorded) = recorded
        && recorded != cluster_id
    {
        return Err(Error::ForeignChain {
            location: continuous.to_string(),
            recorded,
            running: cluster_id.to_owned(),
        });
    }
    let keys = settings
        .encoding
        .key
        .clone()
        .map(Keyring::from)
        .unwrap_or_default();
    let dir = chain_location(continuous, &newest.chain);
    let last = match newest_segment(store, &dir, &keys).await {
        Ok(last) => last,
        Err(Error::Codec { uri, cause }) => {
            warn!(%uri, error = %cause, "the newest segment does not decrypt with the current key; starting a new chain");
            return Ok(None);
        }
        Err(err) => return Err(err),
    };
    let now = Timestamp::now();
    let cutter = match last {
        Some(last) => Cutter::resume(&last, cut, now),
        None => Cutter::start(&newest.chain, newest.revision, cut, now),
    };
    let extent = ChainExtent {
        started_at: newest.taken_at,
        base_bytes,
        change_bytes: store.total_size(dir.path()).await?,
        base_revision: newest.revision,
        reached: cutter.resume_revision() - 1,
    };
    Ok(Some((
        cutter.encrypting(settings.encoding.key.clone()),
        extent,
    )))
}

/// What one agent records and where: the cluster (its settings and etcd
/// cluster ID) and its chains' directory in the store.
struct Recording<'a> {
    store: &'a Store,
    continuous: &'a Location,
    settings: &'a AgentSettings,
    cluster_id: &'a str,
}

/// Takes the full snapshot a new chain starts from.
async fn take_base(
    etcd: &dyn EtcdAdmin,
    config: &StoreConfig,
    settings: &AgentSettings,
) -> Result<Artifact> {
    take_backup(
        etcd,
        config,
        &BackupRequest {
            namespace: settings.namespace.clone(),
            cluster: settings.cluster.clone(),
            destination: settings.destination.clone(),
            seed_endpoints: settings.endpoints.clone(),
            taken_at: Timestamp::now(),
            upload: UploadOptions::default(),
            encoding: settings.encoding.clone(),
        },
    )
    .await
}

/// Starts a chain on the full snapshot `artifact`: writes the chain's
/// record (from then on it is the newest chain, the one an agent resumes
/// and a restore to the newest point plans over) and reports it.
async fn begin_chain(
    recording: &Recording<'_>,
    artifact: &Artifact,
    gap_after: Option<i64>,
    report: &mut impl FnMut(Progress),
) -> Result<(Cutter, ChainExtent)> {
    let Recording {
        store,
        continuous,
        settings,
        cluster_id,
    } = recording;
    let chain = chain_name(artifact);
    let encoding =
        |e: serde_json::Error| Error::InvalidArgument(format!("encoding the base record: {e}"));
    let mut record = serde_json::to_value(artifact).map_err(encoding)?;
    if let Some(fields) = record.as_object_mut() {
        fields.insert(CLUSTER_ID_FIELD.to_owned(), (*cluster_id).into());
    }
    let record = serde_json::to_vec_pretty(&record).map_err(encoding)?;
    let base_location = chain_location(continuous, &chain).join(BASE_RECORD);
    store
        .put_small(base_location.path(), Bytes::from(record))
        .await?;
    let base = Base {
        chain: chain.clone(),
        revision: artifact.revision,
        taken_at: artifact.taken_at,
        uri: artifact.uri.clone(),
    };
    info!(%chain, revision = base.revision, "started a continuous backup chain");
    report(Progress::ChainStarted { base, gap_after });
    let cutter = Cutter::start(&chain, artifact.revision, settings.cut, Timestamp::now())
        .encrypting(settings.encoding.key.clone());
    let extent = ChainExtent {
        started_at: artifact.taken_at,
        base_bytes: artifact.size_bytes,
        change_bytes: 0,
        base_revision: artifact.revision,
        reached: artifact.revision,
    };
    Ok((cutter, extent))
}

/// In a chain's record (`base.json`), beside the snapshot's own record:
/// the etcd cluster the chain records (its ID, hexadecimal). A cluster
/// deleted and created again under the same name is another etcd cluster;
/// its agent never continues the old one's chains.
const CLUSTER_ID_FIELD: &str = "clusterId";

/// The ID of the etcd cluster the agent records, from the first member
/// that answers.
async fn cluster_id(etcd: &dyn EtcdAdmin, endpoints: &[String]) -> Result<String> {
    let mut last = None;
    for endpoint in endpoints {
        match etcd.status(endpoint).await {
            Ok(status) if status.cluster_id != 0 => return Ok(format!("{:x}", status.cluster_id)),
            Ok(_) => {}
            Err(cause) => last = Some(cause),
        }
    }
    Err(match last {
        Some(cause) => Error::Etcd {
            operation: "status (the cluster's ID)",
            cause,
        },
        None => Error::NoHealthyMember {
            reasons: vec!["no member reported the cluster's ID".to_owned()],
        },
    })
}

/// A chain is named after its base: the snapshot's time and revision.
fn chain_name(artifact: &Artifact) -> String {
    format!(
        "{}-r{:020}",
        artifact.taken_at.strftime("%Y%m%dT%H%M%SZ"),
        artifact.revision
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use etcd_client::CompactionOptions;

    use super::super::archive::read_chain;
    use super::super::chain::{Target, chains, plan};
    use super::super::replay::replay_plan;
    use super::*;
    use crate::fetch_artifact;
    use crate::restore::RestoreTool;
    use crate::testing::{
        EtcdProcess, etcd_bin_dir, incompressible, loopback_ip, restore_single_member,
    };

    struct Running {
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<(Result<()>, Vec<Progress>)>,
    }

    /// Settings backing up `shop/orders` from `endpoint` into the directory
    /// `bucket` (created here), cutting a segment every 200 ms, unencrypted.
    fn settings_into(bucket: &std::path::Path, endpoint: &str) -> AgentSettings {
        std::fs::create_dir_all(bucket).unwrap();
        AgentSettings {
            namespace: "shop".into(),
            cluster: "orders".into(),
            destination: Location::parse(&format!("file://{}/", bucket.display())).unwrap(),
            endpoints: vec![endpoint.to_owned()],
            cut: CutSettings {
                interval: Duration::from_millis(200),
                ..CutSettings::default()
            },
            encoding: Encoding::default(),
        }
    }

    /// The bases and segments of every chain stored under `settings`'
    /// destination, the segments read with `keys`.
    async fn stored_chains(
        settings: &AgentSettings,
        keys: &Keyring,
    ) -> (Store, Vec<Base>, Vec<StoredSegment>) {
        let store = Store::open(&settings.destination, &StoreConfig::default()).unwrap();
        let continuous = continuous_location(&settings.destination, "shop", "orders");
        let bases = read_bases(&store, &continuous).await.unwrap();
        let mut segments = Vec::new();
        for base in &bases {
            segments.extend(
                read_chain(&store, &chain_location(&continuous, &base.chain), keys)
                    .await
                    .unwrap(),
            );
        }
        (store, bases, segments)
    }

    fn start_agent(endpoint: &str, settings: &AgentSettings) -> Running {
        let (stop, stopped) = watch::channel(false);
        let etcd = dkv_etcd::GrpcAdmin::new(vec![endpoint.to_owned()], Duration::from_secs(5));
        let settings = settings.clone();
        let task = tokio::spawn(async move {
            let mut progress = Vec::new();
            let result = run(&etcd, &StoreConfig::default(), &settings, stopped, |p| {
                progress.push(p)
            })
            .await;
            (result, progress)
        });
        Running { stop, task }
    }

    async fn stop_agent(running: Running) -> Vec<Progress> {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let _ = running.stop.send(true);
        let (result, progress) = running.task.await.unwrap();
        result.unwrap();
        progress
    }

    fn started(progress: &[Progress]) -> Vec<Option<i64>> {
        progress
            .iter()
            .filter_map(|p| match p {
                Progress::ChainStarted { gap_after, .. } => Some(*gap_after),
                Progress::Stored(_) => None,
            })
            .collect()
    }

    /// The agent starts a chain from a full snapshot, resumes it after a
    /// restart, and after the cluster compacted what it missed while
    /// stopped, starts a new chain and says where the gap is. A restore to a
    /// revision recorded in the first chain — its base snapshot fetched,
    /// restored with etcdutl, the segments replayed — holds exactly the
    /// source's keys and values at that revision.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chains_start_resume_and_restart_after_a_gap_and_restore_to_a_revision() {
        let work = tempfile::tempdir().unwrap();
        let bin = etcd_bin_dir("3.5");
        let ip = loopback_ip(42, 0);
        let source = EtcdProcess::start(&bin, "source", &ip, &work.path().join("source"), "src");
        source.wait_ready().await;
        let mut writer = source.client().await;
        for i in 0..30 {
            writer
                .put(format!("before/{i:02}"), format!("{i}"), None)
                .await
                .unwrap();
        }
        let mut settings = settings_into(&work.path().join("bucket"), &source.client_url);
        settings.cut.max_segment_bytes = 4096;
        // Encrypted, as with spec.backup.encryption.
        settings.encoding = Encoding {
            compress: true,
            key: Some(crate::encryption::Key::parse(&[0x42; 32]).unwrap()),
        };
        let keys = Keyring::from(settings.encoding.key.clone().unwrap());

        // First run: a chain from a full snapshot, then the writes.
        let agent = start_agent(&source.client_url, &settings);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (target, at_target) = source.write_around_a_target().await;
        let first = stop_agent(agent).await;
        assert_eq!(started(&first), vec![None], "one chain, started fresh");

        // Second run: the same chain continues.
        let agent = start_agent(&source.client_url, &settings);
        writer.put("second-run", "x", None).await.unwrap();
        let second = stop_agent(agent).await;
        assert!(
            started(&second).is_empty(),
            "resumed, not restarted: {second:?}"
        );

        // Writes while no agent runs, then compacted away: a new chain.
        for i in 0..5 {
            writer
                .put(format!("unrecorded/{i}"), "x", None)
                .await
                .unwrap();
        }
        let newest = writer
            .put("compact-here", "x", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        writer
            .compact(newest, Some(CompactionOptions::new().with_physical()))
            .await
            .unwrap();
        let agent = start_agent(&source.client_url, &settings);
        let third = stop_agent(agent).await;
        let gaps = started(&third);
        assert_eq!(gaps.len(), 1, "{third:?}");
        assert!(gaps[0].is_some_and(|after| after < newest), "{gaps:?}");

        // Restore to the target revision of the first chain.
        let (store, bases, segments) = stored_chains(&settings, &keys).await;
        assert_eq!(bases.len(), 2);
        let built = chains(&bases, &segments);
        let planned = plan(&built, Target::Revision(target)).unwrap();
        assert_eq!(planned.base, bases[0]);
        let snapshot = work.path().join("base.db");
        assert!(planned.base.uri.ends_with(".db.zst.enc"), "{planned:?}");
        assert!(
            segments.iter().all(|s| s.uri.ends_with(".jsonl.zst.enc")),
            "{segments:?}"
        );
        fetch_artifact(
            &StoreConfig::default(),
            &planned.base.uri,
            None,
            &keys,
            &snapshot,
        )
        .await
        .unwrap();
        let restored_ip = loopback_ip(42, 1);
        let data_dir = work.path().join("restored");
        restore_single_member(
            &RestoreTool::for_version("3.5.16", &bin).unwrap(),
            &snapshot,
            "restored",
            &restored_ip,
            "restored",
            &data_dir,
        )
        .await;
        let restored = EtcdProcess::start(&bin, "restored", &restored_ip, &data_dir, "restored");
        restored.wait_ready().await;
        let into =
            dkv_etcd::GrpcAdmin::new(vec![restored.client_url.clone()], Duration::from_secs(5));
        let replayed = replay_plan(&into, &store, &planned, &keys, 0)
            .await
            .unwrap();
        assert_eq!(replayed.source_revision, target);
        assert!(replayed.events > 0);
        assert_eq!(restored.key_values_at(0).await, at_target);
    }

    /// A cluster deleted and created again under the same name is another
    /// etcd cluster: its agent refuses to continue the old one's chain and
    /// says why, and the old chain is left as it was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_cluster_of_the_same_name_never_continues_the_old_ones_chain() {
        let work = tempfile::tempdir().unwrap();
        let bin = etcd_bin_dir("3.5");
        let bucket = work.path().join("bucket");
        let destination = Location::parse(&format!("file://{}/", bucket.display())).unwrap();
        let settings = |endpoint: &str| {
            let mut settings = settings_into(&bucket, endpoint);
            settings.cut.max_segment_bytes = 4096;
            settings
        };
        let old = EtcdProcess::start(
            &bin,
            "old",
            &loopback_ip(43, 0),
            &work.path().join("old"),
            "old",
        );
        old.wait_ready().await;
        let first = start_agent(&old.client_url, &settings(&old.client_url));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stop_agent(first).await;
        drop(old);

        let new = EtcdProcess::start(
            &bin,
            "new",
            &loopback_ip(43, 1),
            &work.path().join("new"),
            "new",
        );
        new.wait_ready().await;
        let second = start_agent(&new.client_url, &settings(&new.client_url));
        let (result, progress) = second.task.await.unwrap();
        let message = result
            .map(|()| "recorded".to_owned())
            .unwrap_or_else(|e| e.to_string());
        assert!(
            message.contains("holds the continuous backup of another etcd cluster"),
            "{message}"
        );
        assert!(progress.is_empty(), "{progress:?}");
        let continuous = continuous_location(&destination, "shop", "orders");
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        assert_eq!(read_bases(&store, &continuous).await.unwrap().len(), 1);
    }

    /// Once a chain's stored changes reach `newChain.changePercent` of its
    /// base (here the 1 MiB floor, the base being tiny), the agent takes a
    /// new full snapshot, stores the ending chain through that snapshot's
    /// revision and starts the next chain on it: no revision between them
    /// is left uncovered, and the newest point is restored from the newest
    /// chain alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chain_that_outgrows_its_base_ends_and_the_next_continues_without_a_gap() {
        let work = tempfile::tempdir().unwrap();
        let bin = etcd_bin_dir("3.5");
        let ip = loopback_ip(42, 2);
        let source = EtcdProcess::start(&bin, "source", &ip, &work.path().join("source"), "src");
        source.wait_ready().await;
        let mut writer = source.client().await;
        let settings = settings_into(&work.path().join("bucket"), &source.client_url);
        let agent = start_agent(&source.client_url, &settings);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        // 2.5 MiB of changes: the first chain ends after 1 MiB, the second
        // too; the third is being recorded at the end.
        for i in 0..250u64 {
            writer
                .put(
                    format!("k/{:03}", i % 40),
                    incompressible(i, 10 << 10),
                    None,
                )
                .await
                .unwrap();
            if i % 25 == 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        let last = writer.put("last", "x", None).await.unwrap();
        let last = last.header().unwrap().revision();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let progress = stop_agent(agent).await;
        let started = started(&progress);
        assert!(started.len() >= 3, "{progress:?}");
        assert!(started.iter().all(Option::is_none), "no gap: {started:?}");

        let keys = Keyring::default();
        let (_, bases, segments) = stored_chains(&settings, &keys).await;
        assert_eq!(bases.len(), started.len());
        let built = chains(&bases, &segments);
        for pair in built.windows(2) {
            assert!(
                pair[0].last_revision() >= pair[1].base.revision,
                "chain {} ends at {} before the next base {}",
                pair[0].base.chain,
                pair[0].last_revision(),
                pair[1].base.revision
            );
        }
        let window = super::super::chain::window(&built).unwrap();
        assert!(window.gaps.is_empty(), "{window:?}");
        assert_eq!(window.newest_revision, last);
        let newest = plan(&built, Target::Latest).unwrap();
        assert_eq!(newest.base, bases[bases.len() - 1]);
        assert!(
            newest
                .segments
                .iter()
                .all(|s| s.header.chain == newest.base.chain),
            "{newest:?}"
        );
        // A revision the first chain recorded is restored from the first.
        let early = plan(&built, Target::Revision(bases[0].revision + 5)).unwrap();
        assert_eq!(early.base, bases[0]);
    }
}
