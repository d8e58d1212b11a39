//! The followers this operator runs: one task per standby, beside the
//! continuous backup agents and for the same reasons (see
//! [`crate::cluster::backups::agents`]): a task, not a pod; nothing lost
//! while the operator is down, since the position is the standby's own
//! revision; reports to status through the one status writer.
//!
//! A round reads the source's listing ([`Listing`]), asks
//! [`next_segments`] what comes after the standby's position, applies it
//! ([`apply`]) and reports; with nothing new it waits [`POLL`]. A follower
//! asked to promote applies everything stored, reports the revision it
//! holds and ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dkv_backup::continuous::archive::continuous_location;
use dkv_backup::continuous::chain::Chain;
use dkv_backup::{Keyring, Location, Store, StoreConfig};
use dkv_etcd::{ClientTls, EtcdData, GrpcAdmin, UserCredentials};
use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{Instrument, info, info_span, warn};

use super::engine::{Follow, FollowedTo, apply, next_segments};
use super::listing::Listing;

/// How often a follower with nothing to apply reads the listing again.
const POLL: Duration = Duration::from_secs(1);
/// Deadline of each etcd call (one source revision's transaction).
const ETCD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait before a follower that keeps failing tries again.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
/// How long a follower asked to promote may fail to read the source's
/// store before it is promoted with what it holds.
const PROMOTE_WITHOUT_STORE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// What a follower needs; a change restarts it.
#[derive(Clone)]
pub struct FollowerSpec {
    pub namespace: String,
    pub cluster: String,
    /// The source's backup destination, namespace and name.
    pub source: String,
    pub source_namespace: String,
    pub source_cluster: String,
    pub store: StoreConfig,
    pub keys: Keyring,
    /// The standby's members' client URLs, and how to reach them.
    pub endpoints: Vec<String>,
    pub tls: Option<ClientTls>,
    pub user: Option<UserCredentials>,
    /// The standby's revision less this is the source revision it holds.
    pub offset: i64,
    /// Apply what is stored, then stop and report the revision held.
    pub promote: bool,
}

impl PartialEq for FollowerSpec {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.namespace,
            &self.cluster,
            &self.source,
            &self.source_namespace,
            &self.source_cluster,
            &self.store,
            &self.endpoints,
            &self.tls,
            &self.user,
            self.offset,
            self.promote,
        ) == (
            &other.namespace,
            &other.cluster,
            &other.source,
            &other.source_namespace,
            &other.source_cluster,
            &other.store,
            &other.endpoints,
            &other.tls,
            &other.user,
            other.offset,
            other.promote,
        ) && self.keys.ids() == other.keys.ids()
    }
}

/// What a follower last reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowReport {
    /// The newest source revision the standby holds.
    pub applied: Option<i64>,
    /// When the source received the newest change applied.
    pub applied_time: Option<Timestamp>,
    /// The newest source revision stored.
    pub newest_stored: Option<i64>,
    /// When the source received the oldest stored change not applied;
    /// `None` when everything stored is applied.
    pub oldest_unapplied: Option<Timestamp>,
    /// When the listing was last read.
    pub last_checked: Option<Timestamp>,
    /// Set while reading or applying fails: the error and since when.
    pub failing: Option<(String, Timestamp)>,
    /// Set when the follower cannot go on (the next change is not stored).
    pub stopped: Option<String>,
    /// Set once promoted: the source revision held, and when.
    pub promoted: Option<(i64, Timestamp)>,
    /// The offset the follower keeps its position by (its own revision
    /// less the source revision it holds), recorded in status too.
    pub offset: Option<i64>,
    /// When its promotion was recorded in its own backup destination.
    pub promotion_recorded: Option<Timestamp>,
    /// Set, instead of the rest, while a demoted cluster does not follow
    /// its new primary yet (no follower runs then).
    pub demotion: Option<super::demotion::Demotion>,
}

struct RunningFollower {
    spec: FollowerSpec,
    stop: watch::Sender<bool>,
    report: Arc<Mutex<FollowReport>>,
    task: JoinHandle<()>,
}

/// The followers this operator runs, by `namespace/name` of their standby.
pub struct Followers {
    running: Mutex<HashMap<String, RunningFollower>>,
    /// Told `(namespace, name)` when a report changes in a way status
    /// shows at once.
    changed: mpsc::UnboundedSender<(String, String)>,
}

impl Followers {
    pub fn new(changed: mpsc::UnboundedSender<(String, String)>) -> Self {
        Self {
            running: Mutex::default(),
            changed,
        }
    }

    /// The report of the follower of `namespace/cluster`, if one runs.
    pub fn report(&self, namespace: &str, cluster: &str) -> Option<FollowReport> {
        self.lock()
            .get(&format!("{namespace}/{cluster}"))
            .map(|f| lock_report(&f.report).clone())
    }

    /// Runs the follower `spec` describes (starting it, or restarting it
    /// when its inputs changed) and returns its report.
    pub fn ensure(&self, spec: FollowerSpec) -> FollowReport {
        let key = format!("{}/{}", spec.namespace, spec.cluster);
        let mut running = self.lock();
        if let Some(follower) = running.get(&key)
            && follower.spec == spec
        {
            return lock_report(&follower.report).clone();
        }
        // Two followers of one standby would apply the same revision
        // twice: the old one is aborted (an applied transaction is whole or
        // not there, and the position is read back from etcd) and the new
        // one starts after it ended.
        let (report, predecessor) = match running.remove(&key) {
            Some(old) => {
                let _ = old.stop.send(true);
                old.task.abort();
                (lock_report(&old.report).clone(), Some(old.task))
            }
            None => (FollowReport::default(), None),
        };
        let shared = Arc::new(Mutex::new(FollowReport {
            failing: None,
            stopped: None,
            offset: Some(spec.offset),
            ..report
        }));
        let first = lock_report(&shared).clone();
        let (stop, stopped) = watch::channel(false);
        let changed = self.changed.clone();
        let task_spec = spec.clone();
        let task_report = shared.clone();
        let task = tokio::spawn(
            async move {
                if let Some(predecessor) = predecessor {
                    let _ = predecessor.await;
                }
                supervise(&task_spec, &task_report, stopped, &changed).await;
            }
            .instrument(info_span!("standby", cluster = %key)),
        );
        running.insert(
            key,
            RunningFollower {
                spec,
                stop,
                report: shared,
                task,
            },
        );
        first
    }

    /// Stops the follower of `namespace/cluster`, if one runs.
    pub fn stop(&self, namespace: &str, cluster: &str) {
        if let Some(follower) = self.lock().remove(&format!("{namespace}/{cluster}")) {
            let _ = follower.stop.send(true);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunningFollower>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn lock_report(report: &Mutex<FollowReport>) -> std::sync::MutexGuard<'_, FollowReport> {
    crate::cluster::backups::supervise::lock(report)
}

/// Runs the follower until it is stopped or promoted, again with backoff
/// (1 s doubling to a minute) after each failure.
async fn supervise(
    spec: &FollowerSpec,
    report: &Mutex<FollowReport>,
    stop: watch::Receiver<bool>,
    changed: &mpsc::UnboundedSender<(String, String)>,
) {
    let notify = || {
        let _ = changed.send((spec.namespace.clone(), spec.cluster.clone()));
    };
    crate::cluster::backups::supervise::supervise(
        stop,
        MAX_RETRY_DELAY,
        |stop| follow(spec, report, stop, &notify),
        |message, delay| {
            warn!(error = %message, retry_in = ?delay, "standby follower failed");
            crate::cluster::backups::supervise::record_failure(
                &mut lock_report(report).failing,
                message,
            );
            notify();
        },
    )
    .await;
}

/// Follows until stopped (or, promoting, until everything stored is
/// applied).
async fn follow(
    spec: &FollowerSpec,
    report: &Mutex<FollowReport>,
    mut stop: watch::Receiver<bool>,
    notify: &impl Fn(),
) -> dkv_backup::Result<()> {
    let mut etcd = GrpcAdmin::new(spec.endpoints.clone(), ETCD_TIMEOUT);
    if let Some(tls) = &spec.tls {
        etcd = etcd.with_tls(tls.clone());
    }
    if let Some(user) = &spec.user {
        etcd = etcd.with_user(user.clone());
    }
    let etcd_failed = |operation: &'static str| {
        move |cause: dkv_etcd::Error| dkv_backup::Error::Etcd { operation, cause }
    };
    // Asked to promote and unable to read the source's store for a while
    // (it went down with the source): promoted with what it holds.
    let failing = lock_report(report).failing.clone();
    if spec.promote
        && let Some((why, since)) = failing
        && Timestamp::now().duration_since(since) >= PROMOTE_WITHOUT_STORE
    {
        let held = etcd
            .current_revision()
            .await
            .map_err(etcd_failed("reading the standby's revision"))?
            - spec.offset;
        warn!(source_revision = held, error = %why, "standby promoted without reading the source's store");
        {
            let mut now = lock_report(report);
            now.failing = None;
            now.applied = Some(held);
            now.promoted = Some((held, Timestamp::now()));
            now.stopped = Some(format!(
                "promoted without reading the source's store ({why}): it holds the source's changes up to revision {held}; any stored after were not applied"
            ));
        }
        notify();
        return Ok(());
    }
    let destination = Location::parse(&spec.source)?;
    let store = Store::open(&destination, &spec.store)?;
    let continuous =
        continuous_location(&destination, &spec.source_namespace, &spec.source_cluster);
    let mut listing = Listing::default();
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let chains = listing.refresh(&store, &continuous, &spec.keys).await?;
        let applied = etcd
            .current_revision()
            .await
            .map_err(etcd_failed("reading the standby's revision"))?
            - spec.offset;
        let next = next_segments(&chains, applied);
        let was = lock_report(report).clone();
        let mut now = was.clone();
        now.failing = None;
        now.last_checked = Some(Timestamp::now());
        now.newest_stored = chains.iter().map(Chain::last_revision).max();
        now.applied = Some(applied);
        match &next {
            Follow::Apply(segments) => {
                now.oldest_unapplied = segments.first().map(|s| s.header.first_time);
                *lock_report(report) = now.clone();
                let outcome =
                    apply(&etcd, &store, segments, &spec.keys, applied, spec.offset).await?;
                let (reached, own) = match outcome {
                    FollowedTo::Reached(reached) => {
                        let own = etcd
                            .current_revision()
                            .await
                            .map_err(etcd_failed("reading the standby's revision"))?
                            - spec.offset;
                        (reached, own)
                    }
                    FollowedTo::NotACopy { reached, own, .. } => (reached, own),
                };
                now.applied = Some(reached);
                if let FollowedTo::NotACopy { refused, .. } = outcome {
                    // A change of the source did not find here what the
                    // source had before it.
                    now.stopped = Some(format!(
                        "this standby is no longer its source's copy: it holds the source's changes up to revision {reached}, and the change of source revision {refused} did not find here what the source had before it (its own revision says {own}: a write on the standby as root?); create a new standby to seed it from the newest point"
                    ));
                    *lock_report(report) = now;
                    notify();
                    stop.wait_for(|s| *s).await.ok();
                    return Ok(());
                }
                if own != reached {
                    // Something else changed the standby (a write as
                    // root): its revision no longer tells its position,
                    // and it is no longer the source's copy.
                    now.stopped = Some(format!(
                        "this standby is no longer its source's copy: after applying up to source revision {reached} its own revision says {own} (a write on the standby as root?); create a new standby to seed it from the newest point"
                    ));
                    *lock_report(report) = now;
                    notify();
                    stop.wait_for(|s| *s).await.ok();
                    return Ok(());
                }
                now.applied_time = segments.last().map(|s| s.header.last_time);
                now.oldest_unapplied = None;
                now.stopped = None;
            }
            Follow::UpToDate => {
                now.oldest_unapplied = None;
                now.stopped = None;
            }
            Follow::Broken {
                applied,
                chain,
                why,
            } => {
                now.stopped = Some(format!(
                    "the source's chain {chain} breaks after revision {applied}, which this standby holds ({why}): what the source stored after the break cannot be applied; create a new standby to seed it from the newest point"
                ));
            }
            Follow::Gap {
                applied,
                resumes_after,
            } => {
                now.stopped = Some(format!(
                    "the source's store holds no change after revision {applied} until a chain based at {resumes_after}: its retention deleted them, or its recording broke; this standby cannot go on: create a new one to seed it from the newest point"
                ));
            }
        }
        let done = spec.promote && !matches!(next, Follow::Apply(_));
        if done {
            let held = now.applied.unwrap_or(applied);
            info!(source_revision = held, "standby promoted");
            now.promoted = Some((held, Timestamp::now()));
        }
        let shown_changed = was.applied.is_none()
            || was.failing.is_some()
            || was.stopped != now.stopped
            || was.promoted != now.promoted;
        *lock_report(report) = now;
        if shown_changed {
            notify();
        }
        if done {
            return Ok(());
        }
        if matches!(next, Follow::Apply(_)) {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
    }
}
