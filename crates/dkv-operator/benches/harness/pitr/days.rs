//! Thirty days of continuous backup, each day shortened to [`DAY`]: a
//! one-member etcd 3.5 whose whole database is rewritten once a day,
//! recorded by two agents side by side. One ends its chains as dkv does
//! (`newChain`: every day, and at 25 % of the base in changes) and has
//! `retention.maxAge: 7d` applied after each day, as the operator applies
//! it; the other records one chain that never ends, as continuous backup
//! did before chains ended (retention could then prune nothing). Measured:
//! the stored bytes day by day, and the restore to the newest point from
//! each store after the thirtieth day.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dkv_backup::continuous::agent::{AgentSettings, run as record};
use dkv_backup::continuous::archive::{chain_ends, continuous_location, read_bases};
use dkv_backup::continuous::chain::Target;
use dkv_backup::continuous::cutter::CutSettings;
use dkv_backup::continuous::retention::{ChainRetention, chain_ages, delete_chain, expired};
use dkv_backup::continuous::rotation::ChainLimits;
use dkv_backup::testing::{EtcdProcess, loopback_ip};
use dkv_backup::{Encoding, Keyring, Location, Store, StoreConfig};
use dkv_etcd::GrpcAdmin;
use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

use super::{restore_to, value};
use crate::report::{Baseline, Goal, Metric};

/// One simulated day.
const DAY: Duration = Duration::from_secs(3);
const DAYS: u32 = 30;
/// `retention.maxAge`, in days.
const KEPT_DAYS: u32 = 7;
/// The database: this many keys of [`super::VALUE_BYTES`] (8 MiB), every one
/// rewritten each day.
const KEYS: usize = 128;

/// One agent recording the source into its own store.
struct Recorder {
    store: Store,
    continuous: Location,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<dkv_backup::Result<()>>,
}

impl Recorder {
    fn start(source: &EtcdProcess, bucket: &Path, new_chain: ChainLimits) -> anyhow::Result<Self> {
        std::fs::create_dir_all(bucket)?;
        let destination = Location::parse(&format!("file://{}/", bucket.display()))?;
        let settings = AgentSettings {
            namespace: "bench".into(),
            cluster: "days".into(),
            destination: destination.clone(),
            endpoints: vec![source.client_url.clone()],
            cut: CutSettings {
                interval: Duration::from_secs(1),
                new_chain,
                ..CutSettings::default()
            },
            encoding: Encoding::default(),
        };
        let (stop, stopped) = watch::channel(false);
        let etcd = GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(10));
        let task = tokio::spawn(async move {
            record(&etcd, &StoreConfig::default(), &settings, stopped, |_| {}).await
        });
        Ok(Recorder {
            store: Store::open(&destination, &StoreConfig::default())?,
            continuous: continuous_location(&destination, "bench", "days"),
            stop,
            task,
        })
    }

    async fn stored_bytes(&self) -> anyhow::Result<u64> {
        Ok(self.store.total_size(self.continuous.path()).await?)
    }

    /// Waits until a chain reaches `revision`, then stops the agent.
    async fn finish(self, revision: i64) -> anyhow::Result<(Store, Location)> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let reached = chain_ends(&self.store, &self.continuous)
                .await?
                .iter()
                .map(|(_, r)| *r)
                .max();
            if reached >= Some(revision) {
                break;
            }
            anyhow::ensure!(
                !self.task.is_finished(),
                "the agent stopped at {reached:?} of {revision}"
            );
            anyhow::ensure!(
                Instant::now() < deadline,
                "the agent did not store revision {revision} within 2 minutes (it reached {reached:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = self.stop.send(true);
        self.task.await.context("the agent's task")??;
        Ok((self.store, self.continuous))
    }
}

/// Applies `maxAge` to the chains of `recorder`'s store at `now`, as the
/// operator's retention pass does; how many chains went.
async fn prune(recorder: &Recorder, max_age: SignedDuration) -> anyhow::Result<usize> {
    let none = Keyring::default();
    let ages = chain_ages(&recorder.store, &recorder.continuous, &none).await?;
    let keep = ChainRetention {
        max_age: Some(max_age),
        max_chains: None,
    };
    let gone = expired(&ages, keep, Timestamp::now());
    for chain in &gone {
        delete_chain(
            &recorder.store,
            &StoreConfig::default(),
            &recorder.continuous,
            chain,
        )
        .await?;
    }
    Ok(gone.len())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

pub async fn run(bin: &Path, work: &Path) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let source = EtcdProcess::start(bin, "days", &loopback_ip(61, 5), &work.join("days"), "days");
    source.wait_ready().await;
    let mut writer = source.client().await;
    let mut seed = 1_000_000u64;
    for k in 0..KEYS {
        seed += 1;
        writer
            .put(format!("/days/{k:04}"), value(seed), None)
            .await?;
    }
    // newChain's defaults, with `every` a (simulated) day.
    let ending = Recorder::start(
        &source,
        &work.join("ending"),
        ChainLimits {
            every: DAY,
            ..ChainLimits::default()
        },
    )?;
    let endless = Recorder::start(
        &source,
        &work.join("endless"),
        ChainLimits {
            every: Duration::from_secs(u64::from(u32::MAX)),
            change_percent: u32::MAX,
            max_revisions: u64::MAX,
        },
    )?;
    let max_age = SignedDuration::try_from(DAY * KEPT_DAYS)?;

    // Bytes stored at the end of each day: (chains ending, one chain).
    let mut stored = Vec::new();
    let mut pruned = 0;
    let mut last = 0;
    for _day in 0..DAYS {
        let day_ends = Instant::now() + DAY;
        for k in 0..KEYS {
            seed += 1;
            let put = writer
                .put(format!("/days/{k:04}"), value(seed), None)
                .await?;
            last = put.header().map_or(last, |h| h.revision());
        }
        // Auto-compaction keeps the database near its live size; the
        // agents read far behind less than a day.
        writer.compact(last - KEYS as i64, None).await?;
        tokio::time::sleep_until(day_ends.into()).await;
        pruned += prune(&ending, max_age).await?;
        stored.push((ending.stored_bytes().await?, endless.stored_bytes().await?));
    }
    let (ending_store, ending_at) = ending.finish(last).await?;
    let (endless_store, endless_at) = endless.finish(last).await?;
    let chains = read_bases(&ending_store, &ending_at).await?.len();

    let after_chains_end = restore_to(
        bin,
        &ending_store,
        &ending_at,
        work,
        Target::Latest,
        "days-ending",
        6,
    )
    .await?;
    let one_chain = restore_to(
        bin,
        &endless_store,
        &endless_at,
        work,
        Target::Latest,
        "days-endless",
        7,
    )
    .await?;
    for restored in [&after_chains_end, &one_chain] {
        anyhow::ensure!(
            restored.replayed.source_revision == last,
            "restored to {} instead of {last}",
            restored.replayed.source_revision
        );
    }

    let week = KEPT_DAYS as usize;
    let (after_a_week, _) = stored[week];
    let (at_the_end, endless_at_the_end) = stored[stored.len() - 1];
    let daily_growth = (endless_at_the_end - stored[week].1) / u64::from(DAYS - 1 - KEPT_DAYS);
    let by_day: Vec<String> = stored
        .iter()
        .map(|(ending, endless)| format!("{:.0}/{:.0}", mib(*ending), mib(*endless)))
        .collect();
    let storage = Metric::measured(
        "continuousStoredAfter30Days",
        &format!(
            "continuous backup stored after {DAYS} simulated days (a day = {} s, the 8 MiB database rewritten daily), retention.maxAge {KEPT_DAYS} days",
            DAY.as_secs()
        ),
        mib(at_the_end),
        "MiB",
        Some(Baseline {
            what: format!("the same store after day {}", week + 1),
            value: mib(after_a_week),
        }),
        at_the_end as f64 / after_a_week as f64,
        Goal::at_most(1.25),
        "≤ 1.25 × after the first week (the store stops growing)",
    )
    .with_note(format!(
        "{chains} chains kept, {pruned} pruned; one chain that never ends (as before chains ended): {:.0} MiB, growing {:.1} MiB a day",
        mib(endless_at_the_end),
        mib(daily_growth)
    ));
    let restore = Metric::measured(
        "pitrAfter30DaysVsOneChain",
        &format!(
            "restore to the newest point after {DAYS} simulated days, chains ended by newChain"
        ),
        after_chains_end.took.as_secs_f64(),
        "s",
        Some(Baseline {
            what: format!(
                "the same restore from one chain that never ends ({DAYS} days of changes replayed)"
            ),
            value: one_chain.took.as_secs_f64(),
        }),
        after_chains_end.took.as_secs_f64() / one_chain.took.as_secs_f64(),
        Goal::at_most(1.0),
        "≤ 1.0 × one chain",
    )
    .with_note(format!(
        "{} events replayed against {}",
        after_chains_end.replayed.events, one_chain.replayed.events
    ));
    let context = vec![(
        format!(
            "continuous backup stored at the end of each simulated day, MiB (chains ended, maxAge {KEPT_DAYS} days / one chain)"
        ),
        by_day.join(", "),
    )];
    drop((after_chains_end, one_chain, source));
    Ok((vec![storage, restore], context))
}
