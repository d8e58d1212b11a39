//! Continuous backup agents (`spec.backup.continuous`): the operator's
//! leader runs one task per cluster that records every change into the
//! cluster's backup destination ([`dkv_backup::continuous::agent`]), and
//! keeps what each agent reports for the cluster's status.
//!
//! The agent lives in the operator, not in a pod of its own per cluster:
//! - *Failure*: while the operator is down (restart, leader hand-over) no
//!   segment is written, but nothing is lost: etcd keeps its history, and
//!   the next leader's agent resumes after the last durable segment. Only
//!   when etcd compacted past that point does a new chain start, and the
//!   gap is reported. A Deployment per cluster fails the same way (its pod
//!   is rescheduled), and adds a pod that can be down while the operator
//!   is up.
//! - *Cost*: a watch and a task per cluster instead of a pod per cluster
//!   (an image pull, a process, its memory floor, a ServiceAccount and the
//!   RBAC to report back). The memory an agent holds is bounded by its
//!   open segment (`maxSegmentBytes`).
//! - *Status*: the reports go to the cluster's status through the one
//!   status writer, with no API object in between.
//!
//! The cluster controller calls [`Agents::ensure`] on every pass with what
//! the agent needs now (endpoints, credentials, settings): an agent whose
//! inputs changed is stopped and started again, which resumes its chain.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dkv_backup::continuous::agent::{self, AgentSettings, Progress};
use dkv_backup::continuous::archive::read_bases;
use dkv_backup::continuous::archive::{chain_ends, continuous_location};
use dkv_backup::continuous::cutter::CutSettings;
use dkv_backup::{Location, Store, StoreConfig};
use dkv_etcd::{ClientTls, GrpcAdmin, UserCredentials};
use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span, warn};

use crate::metrics::Metrics;

/// Deadline of the agent's etcd calls other than its watch.
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait before an agent that keeps failing tries again.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
/// How often an agent reads its window from the store again.
const WINDOW_REFRESH: Duration = Duration::from_secs(600);
/// How long a replaced agent may take to store what it holds.
const HANDOVER_LIMIT: Duration = Duration::from_secs(30);

/// What an agent needs; a change restarts it.
#[derive(Clone, PartialEq)]
pub struct AgentSpec {
    pub namespace: String,
    pub cluster: String,
    /// `spec.backup.destination.uri`.
    pub destination: String,
    pub store: StoreConfig,
    /// The members' client URLs.
    pub endpoints: Vec<String>,
    pub tls: Option<ClientTls>,
    pub user: Option<UserCredentials>,
    pub cut: CutSettings,
    /// Compression and the encryption key of the bases and segments.
    pub encoding: dkv_backup::Encoding,
}

/// A point of the recorded history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub revision: i64,
    pub time: Timestamp,
}

/// What an agent last reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The chain being recorded.
    pub chain: Option<String>,
    /// The oldest full snapshot that starts a chain.
    pub oldest: Option<Point>,
    /// The end of the newest durable segment (or the newest chain's base).
    pub newest: Option<Point>,
    /// When this agent last stored a segment.
    pub last_stored: Option<Timestamp>,
    /// Revisions `(after, until]` between chains that no chain covers.
    pub gaps: Vec<(i64, i64)>,
    /// Set while the agent fails: the error, and since when it has failed
    /// without storing anything in between.
    pub failing: Option<(String, Timestamp)>,
}

struct RunningAgent {
    spec: AgentSpec,
    /// Dropping it (or sending `true`) stops the agent after it stored
    /// what it holds.
    stop: watch::Sender<bool>,
    report: Arc<Mutex<Report>>,
    task: JoinHandle<()>,
}

/// The agents this operator runs, by `namespace/name` of their cluster.
pub struct Agents {
    running: Mutex<HashMap<String, RunningAgent>>,
    /// Agents told to stop, until a new agent of the same cluster starts
    /// (it waits for the old one to end).
    stopping: Mutex<HashMap<String, JoinHandle<()>>>,
    /// Told `(namespace, name)` when an agent's report changes in a way
    /// status shows at once (a new chain, a gap, a failure, a recovery).
    changed: mpsc::UnboundedSender<(String, String)>,
    metrics: Arc<Metrics>,
}

/// Where an agent's task tells what happened.
struct Observer {
    namespace: String,
    cluster: String,
    changed: mpsc::UnboundedSender<(String, String)>,
    metrics: Arc<Metrics>,
}

impl Observer {
    fn notify(&self) {
        let _ = self
            .changed
            .send((self.namespace.clone(), self.cluster.clone()));
    }

    fn newest(&self, point: Point) {
        self.metrics.set_continuous_newest(
            &self.namespace,
            &self.cluster,
            point.revision,
            point.time,
        );
        self.metrics
            .set_continuous_failing(&self.namespace, &self.cluster, false);
    }

    fn failing(&self) {
        self.metrics
            .set_continuous_failing(&self.namespace, &self.cluster, true);
        self.notify();
    }
}

impl Agents {
    /// The agents, and the stream of clusters whose report changed.
    pub fn new(metrics: Arc<Metrics>) -> (Self, mpsc::UnboundedReceiver<(String, String)>) {
        let (changed, receiver) = mpsc::unbounded_channel();
        (
            Self {
                running: Mutex::default(),
                stopping: Mutex::default(),
                changed,
                metrics,
            },
            receiver,
        )
    }

    /// Where other tasks of the operator tell that a cluster's status
    /// should be written again (the standby followers).
    pub fn notifier(&self) -> mpsc::UnboundedSender<(String, String)> {
        self.changed.clone()
    }

    /// The report of the agent of `namespace/cluster`, if one runs.
    pub fn report(&self, namespace: &str, cluster: &str) -> Option<Report> {
        self.lock()
            .get(&format!("{namespace}/{cluster}"))
            .map(|agent| lock_report(&agent.report).clone())
    }

    /// Runs the agent `spec` describes for its cluster (starting it, or
    /// restarting it when its inputs changed) and returns its report.
    pub fn ensure(&self, spec: AgentSpec) -> Report {
        let key = format!("{}/{}", spec.namespace, spec.cluster);
        let mut running = self.lock();
        if let Some(agent) = running.get(&key)
            && agent.spec == spec
        {
            return lock_report(&agent.report).clone();
        }
        // The old agent (if any) stores what it holds and ends; the new
        // one starts only then, and resumes after the last stored segment:
        // two agents on one chain would both write its next segment. A
        // report carries over so that status does not blink.
        let (report, predecessor) = match running.remove(&key) {
            Some(old) => {
                let _ = old.stop.send(true);
                (lock_report(&old.report).clone(), Some(old.task))
            }
            None => (
                Report::default(),
                self.stopping
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key),
            ),
        };
        let shared = Arc::new(Mutex::new(report.clone()));
        let (stop, stopped) = watch::channel(false);
        let observer = Observer {
            namespace: spec.namespace.clone(),
            cluster: spec.cluster.clone(),
            changed: self.changed.clone(),
            metrics: self.metrics.clone(),
        };
        let task_spec = spec.clone();
        let task_report = shared.clone();
        let span = info_span!("continuous_backup", cluster = %key);
        let task = tokio::spawn(
            async move {
                if let Some(predecessor) = predecessor {
                    wait_for_predecessor(predecessor).await;
                }
                supervise(task_spec, task_report, stopped, observer).await;
            }
            .instrument(span),
        );
        running.insert(
            key,
            RunningAgent {
                spec,
                stop,
                report: shared,
                task,
            },
        );
        report
    }

    /// Stops the agent of `namespace/cluster`, if one runs; what it
    /// recorded stays restorable.
    pub fn stop(&self, namespace: &str, cluster: &str) {
        let key = format!("{namespace}/{cluster}");
        if let Some(agent) = self.lock().remove(&key) {
            let _ = agent.stop.send(true);
            self.metrics.forget_continuous(namespace, cluster);
            let mut stopping = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
            stopping.retain(|_, task| !task.is_finished());
            stopping.insert(key, agent.task);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunningAgent>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Waits until the agent being replaced has stored what it held and ended;
/// one that takes longer than [`HANDOVER_LIMIT`] (a store that hangs) is
/// aborted, its open segment left to be recorded again from etcd's history.
async fn wait_for_predecessor(mut predecessor: JoinHandle<()>) {
    if tokio::time::timeout(HANDOVER_LIMIT, &mut predecessor)
        .await
        .is_err()
    {
        warn!("the previous continuous backup agent did not stop in time; aborting it");
        predecessor.abort();
        let _ = predecessor.await;
    }
}

fn lock_report(report: &Mutex<Report>) -> std::sync::MutexGuard<'_, Report> {
    super::supervise::lock(report)
}

/// Runs the agent until it is stopped, starting it again with backoff
/// (1 s doubling to a minute) after each failure.
async fn supervise(
    spec: AgentSpec,
    report: Arc<Mutex<Report>>,
    stop: watch::Receiver<bool>,
    observer: Observer,
) {
    super::supervise::supervise(
        stop,
        MAX_RETRY_DELAY,
        |stop| run_once(&spec, &report, stop, &observer),
        |message, delay| {
            warn!(error = %message, retry_in = ?delay, "continuous backup agent failed");
            super::supervise::record_failure(&mut lock_report(&report).failing, message);
            observer.failing();
        },
    )
    .await;
}

/// One run of the agent: read the window as stored, then record until
/// stopped or failed.
async fn run_once(
    spec: &AgentSpec,
    report: &Mutex<Report>,
    stop: watch::Receiver<bool>,
    observer: &Observer,
) -> dkv_backup::Result<()> {
    let destination = Location::parse(&spec.destination)?;
    let store = Store::open(&destination, &spec.store)?;
    let continuous = continuous_location(&destination, &spec.namespace, &spec.cluster);
    read_window(&store, &continuous, report).await?;
    // Chains retention deletes leave the window at the next reading.
    let refresh = async {
        loop {
            tokio::time::sleep(WINDOW_REFRESH).await;
            if let Err(err) = read_window(&store, &continuous, report).await {
                warn!(error = %err, "reading the continuous backup window again");
            }
        }
    };

    let mut etcd = GrpcAdmin::new(spec.endpoints.clone(), ETCD_TIMEOUT);
    if let Some(tls) = &spec.tls {
        etcd = etcd.with_tls(tls.clone());
    }
    if let Some(user) = &spec.user {
        etcd = etcd.with_user(user.clone());
    }
    let settings = AgentSettings {
        namespace: spec.namespace.clone(),
        cluster: spec.cluster.clone(),
        destination,
        endpoints: spec.endpoints.clone(),
        cut: spec.cut,
        encoding: spec.encoding.clone(),
    };
    let recording = agent::run(&etcd, &spec.store, &settings, stop, |progress| {
        let mut report = lock_report(report);
        let was_failing = report.failing.take().is_some();
        match progress {
            Progress::ChainStarted { base, gap_after } => {
                info!(chain = %base.chain, revision = base.revision, "continuous backup chain started");
                report.chain = Some(base.chain.clone());
                let point = Point {
                    revision: base.revision,
                    time: base.taken_at,
                };
                report.oldest.get_or_insert(point);
                report.newest = Some(point);
                if let Some(after) = gap_after
                    && base.revision > after
                {
                    report.gaps.push((after, base.revision));
                }
                drop(report);
                observer.newest(point);
                observer.notify();
            }
            Progress::Stored(segment) => {
                report.chain = Some(segment.header.chain.clone());
                let point = Point {
                    revision: segment.header.last_revision,
                    time: segment.header.last_time,
                };
                report.newest = Some(point);
                report.last_stored = Some(Timestamp::now());
                drop(report);
                observer.newest(point);
                if was_failing {
                    observer.notify();
                }
            }
        }
    });
    tokio::select! {
        result = recording => result,
        _ = refresh => Ok(()),
    }
}

/// Reads the recoverable window as stored (the oldest base, the gaps, the
/// newest chain's end from its segment names) into `report`; the newest
/// point only moves forward.
async fn read_window(
    store: &Store,
    continuous: &Location,
    report: &Mutex<Report>,
) -> dkv_backup::Result<()> {
    let bases = read_bases(store, continuous).await?;
    let ends: HashMap<String, i64> = chain_ends(store, continuous).await?.into_iter().collect();
    let mut report = lock_report(report);
    report.oldest = bases.first().map(|b| Point {
        revision: b.revision,
        time: b.taken_at,
    });
    report.gaps = stored_gaps(&bases, &ends);
    if let Some(newest) = bases.last() {
        report.chain = Some(newest.chain.clone());
        let end = ends.get(&newest.chain).copied().unwrap_or(newest.revision);
        // Until the first segment of this run is stored: the end of the
        // chain as its names tell (its time is the base's, a lower bound)
        // unless this agent already saw further.
        if report.newest.is_none_or(|n| n.revision < end) {
            report.newest = Some(Point {
                revision: end,
                time: report.newest.map_or(newest.taken_at, |n| n.time),
            });
        }
    }
    Ok(())
}

/// The gaps between the stored chains: from where one chain ends to the
/// next chain's base, when that is later.
fn stored_gaps(
    bases: &[dkv_backup::continuous::chain::Base],
    ends: &HashMap<String, i64>,
) -> Vec<(i64, i64)> {
    let mut gaps = Vec::new();
    let mut reached = None;
    for base in bases {
        if let Some(reached) = reached
            && base.revision > reached
        {
            gaps.push((reached, base.revision));
        }
        let end = ends.get(&base.chain).copied().unwrap_or(base.revision);
        reached = Some(reached.map_or(end, |r: i64| r.max(end)));
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_backup::continuous::chain::Base;

    fn base(chain: &str, revision: i64) -> Base {
        Base {
            chain: chain.to_owned(),
            revision,
            taken_at: Timestamp::UNIX_EPOCH,
            uri: format!("file:///{chain}.db"),
        }
    }

    #[test]
    fn gaps_lie_between_a_chain_end_and_a_later_base() {
        let bases = [base("a", 10), base("b", 50), base("c", 60)];
        let ends = HashMap::from([("a".to_owned(), 40), ("b".to_owned(), 70)]);
        // a: 10..=40, b: 50..=70 (gap 40..50), c starts at 60, inside b.
        assert_eq!(stored_gaps(&bases, &ends), vec![(40, 50)]);
        assert_eq!(stored_gaps(&bases[..1], &ends), vec![]);
    }
}
