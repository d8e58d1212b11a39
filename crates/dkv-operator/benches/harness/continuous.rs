//! Continuous backup under load: a 3-member cluster on kube-local (real
//! etcd 3.5, the operator as its own process, moto S3), writers putting
//! about 1,000 keys a second. Measured: how long each acknowledged write
//! takes to be in a durable segment (p99, against the interval + 2 s), and
//! what recording costs the operator process — CPU and peak memory under
//! the same load with continuous backup off (first) and on.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dkv_api::DistributedKV;
use dkv_backup::continuous::archive::{chain_ends, continuous_location};
use dkv_backup::testing::MotoServer;
use dkv_backup::{Location, Store};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::watch;

use crate::operator_process::{OperatorProcess, proc_status_kib};
use crate::report::Metric;
use crate::support;

const NS: &str = "continuous-bench";
const CLUSTER: &str = "recorded";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
/// Puts per second asked of all writers together.
const RATE: u64 = 1000;
const WRITERS: u64 = 16;
const LOAD: Duration = Duration::from_secs(30);
/// `spec.backup.continuous.interval` (the default).
const INTERVAL: Duration = Duration::from_secs(10);
const VALUE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

pub struct Settings<'a> {
    pub dkv: &'a Path,
    pub work: &'a Path,
}

/// What one stretch of load did.
struct Load {
    /// (revision, when etcd acknowledged it) of every put.
    acked: Vec<(i64, Instant)>,
    took: Duration,
    /// CPU time of the operator process over the stretch.
    cpu: Duration,
    peak_rss_kib: u64,
    /// (when, the newest durable revision) as the store's listing showed.
    durable: Vec<(Instant, i64)>,
}

impl Load {
    fn rate(&self) -> f64 {
        self.acked.len() as f64 / self.took.as_secs_f64()
    }
}

/// CPU time (user + system) the process has used, from `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line, in clock ticks (100 a second).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("/proc/{pid}/stat field {i}: {stat}"))
    };
    Ok(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// Puts at [`RATE`] for `how_long` from [`WRITERS`] connections while
/// sampling the operator's memory and, when `store` is given, the newest
/// durable revision of the cluster's continuous backup (until it has every
/// acknowledged write, at most two intervals after the load).
async fn load(
    client: &kube::Client,
    operator: &OperatorProcess,
    how_long: Duration,
    store: Option<(&Store, &Location)>,
) -> anyhow::Result<Load> {
    let endpoints = support::etcd_cluster::member_endpoints(client, NS, CLUSTER).await;
    let pid = operator.pid()?;
    let cpu_before = cpu_time(pid)?;
    let started = Instant::now();
    let (done, finished) = watch::channel(false);
    let mut writers = spawn_writers(&endpoints, None, RATE, &finished).await?;
    let mut durable = Vec::new();
    let mut peak_rss_kib = 0;
    loop {
        peak_rss_kib = peak_rss_kib.max(proc_status_kib(pid, "VmRSS:")?);
        if let Some((store, continuous)) = store {
            durable.push((Instant::now(), stored_up_to(store, continuous).await?));
        }
        let elapsed = started.elapsed();
        if elapsed >= how_long {
            let _ = done.send(true);
            let mut acked = Vec::new();
            for writer in writers.drain(..) {
                acked.extend(writer.await.context("a writer panicked")?);
            }
            let newest_acked = acked.iter().map(|(r, _)| *r).max().unwrap_or(0);
            let took = elapsed;
            let cpu = cpu_time(pid)? - cpu_before;
            // Wait for the agent to store the rest (only when recording).
            if store.is_some() {
                let deadline = Instant::now() + 2 * INTERVAL + Duration::from_secs(5);
                while durable.last().is_none_or(|(_, r)| *r < newest_acked)
                    && Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Some((store, continuous)) = store {
                        durable.push((Instant::now(), stored_up_to(store, continuous).await?));
                    }
                }
            }
            return Ok(Load {
                acked,
                took,
                cpu,
                peak_rss_kib,
                durable,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writers putting `rate` keys a second in all from [`WRITERS`]
/// connections to `endpoints` (as `user` when given) until `finished`;
/// each returns the (revision, when) of every put acknowledged.
pub async fn spawn_writers(
    endpoints: &[String],
    user: Option<(String, String)>,
    rate: u64,
    finished: &watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<Vec<(i64, Instant)>>>> {
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let options = user
            .clone()
            .map(|(name, password)| etcd_client::ConnectOptions::new().with_user(name, password));
        let mut etcd = etcd_client::Client::connect(endpoints.to_vec(), options)
            .await
            .context("connecting a writer")?;
        let mut finished = finished.clone();
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 * WRITERS / rate));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = finished.wait_for(|d| *d) => break,
                }
                n += 1;
                if let Ok(answer) = etcd.put(format!("/bench/{w}/{n}"), VALUE, None).await
                    && let Some(header) = answer.header()
                {
                    acked.push((header.revision(), Instant::now()));
                }
            }
            acked
        }));
    }
    Ok(writers)
}

/// The newest revision any chain in `continuous` has stored, from a listing.
async fn stored_up_to(store: &Store, continuous: &Location) -> anyhow::Result<i64> {
    Ok(chain_ends(store, continuous)
        .await
        .context("listing the continuous backup")?
        .into_iter()
        .map(|(_, last)| last)
        .max()
        .unwrap_or(0))
}

/// Each acknowledged write's lag: from its acknowledgement to the first
/// listing that showed a durable segment holding it (`None` for writes no
/// listing showed durable).
fn lags(load: &Load) -> (Vec<Duration>, usize) {
    let mut lags = Vec::new();
    let mut never = 0;
    for (revision, acked_at) in &load.acked {
        match load
            .durable
            .iter()
            .find(|(at, stored)| stored >= revision && at >= acked_at)
        {
            Some((at, _)) => lags.push(*at - *acked_at),
            None => never += 1,
        }
    }
    lags.sort();
    (lags, never)
}

pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

pub async fn run(settings: Settings<'_>) -> anyhow::Result<(Vec<Metric>, Vec<(String, String)>)> {
    let moto = MotoServer::start("dkv-bench-continuous");
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    support::backups::create_secret(&client, NS, "s3-creds", moto.env()).await;
    let log = settings.work.join("operator-continuous.log");
    let operator = OperatorProcess::start(settings.dkv, env.kubeconfig_path(), &log).await?;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let prefix = "continuous";
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            CLUSTER,
            3,
            IMAGE,
            json!({"backup": {
                "destination": {"uri": moto.uri(prefix), "credentialsSecret": "s3-creds"},
                "schedule": "0 0 1 1 *"
            }}),
        ),
    )
    .await
    .context("creating the cluster")?;
    support::etcd_cluster::wait_settled(&dkvs, CLUSTER, 3).await;

    eprintln!("bench: continuous: {RATE} puts/s for {LOAD:?} without continuous backup");
    let quiet = load(&client, &operator, LOAD, None).await?;

    eprintln!("bench: continuous: the same with continuous backup (interval {INTERVAL:?})");
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"backup": {"continuous": {"enabled": true, "interval": "10s"}}}}),
        ),
    )
    .await
    .context("turning continuous backup on")?;
    support::etcd_cluster::wait_for(&dkvs, CLUSTER, "a continuous backup chain", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.chain.is_some())
    })
    .await;
    let destination = Location::parse(&moto.uri(prefix))?;
    let store = Store::open(&destination, &moto.config())?;
    let continuous = continuous_location(&destination, NS, CLUSTER);
    let recorded = load(&client, &operator, LOAD, Some((&store, &continuous))).await?;
    drop(operator);

    let (lags, never) = lags(&recorded);
    let p99 = quantile(&lags, 0.99);
    let bound = INTERVAL + Duration::from_secs(2);
    let mut lag = Metric::against_target(
        "continuousLagP99Seconds",
        &format!(
            "continuous backup lag p99 (acknowledged write → durable segment in S3, {:.0} writes/s)",
            recorded.rate()
        ),
        p99.as_secs_f64(),
        "s",
        bound.as_secs_f64(),
        "≤ interval + 2 s",
    )
    .with_note(format!(
        "{} writes: p50 {:.1} s, max {:.1} s, interval {INTERVAL:?}; the store listed every 100 ms",
        lags.len(),
        quantile(&lags, 0.5).as_secs_f64(),
        lags.last().copied().unwrap_or_default().as_secs_f64()
    ));
    if never > 0 {
        lag.met = Some(false);
        lag.note = format!(
            "{}; {never} acknowledged writes were never seen durable",
            lag.note
        );
    }
    let cpu_share = |l: &Load| l.cpu.as_secs_f64() / l.took.as_secs_f64() * 100.0;
    let context = vec![
        (
            format!("continuous backup agent at ~{RATE} writes/s: CPU"),
            format!(
                "{:.1} % of one core more (the operator process: {:.1} % with recording at {:.0} writes/s, {:.1} % without at {:.0} writes/s)",
                cpu_share(&recorded) - cpu_share(&quiet),
                cpu_share(&recorded),
                recorded.rate(),
                cpu_share(&quiet),
                quiet.rate()
            ),
        ),
        (
            format!("continuous backup agent at ~{RATE} writes/s: memory"),
            format!(
                "{:.1} MiB more at the peak (operator VmRSS peak {:.1} MiB with recording, {:.1} MiB without)",
                (recorded.peak_rss_kib as f64 - quiet.peak_rss_kib as f64) / 1024.0,
                recorded.peak_rss_kib as f64 / 1024.0,
                quiet.peak_rss_kib as f64 / 1024.0
            ),
        ),
    ];
    Ok((vec![lag], context))
}
