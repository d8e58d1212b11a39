//! Prometheus metrics of the operator.

mod cluster;

pub use cluster::{ClusterView, CorruptFinding, MemberAlarm, MemberView, StandbyView};

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::Phase;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileOutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    category: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    namespace: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackupOutcomeLabels {
    namespace: String,
    cluster: String,
    outcome: String,
}

type IntGauge = Gauge<i64, std::sync::atomic::AtomicI64>;

/// The operator's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    reconcile_duration: Family<ReconcileOutcomeLabels, Histogram>,
    errors: Family<ErrorLabels, Counter>,
    clusters: Family<PhaseLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    backups: Family<BackupOutcomeLabels, Counter>,
    backup_duration: Family<ClusterLabels, Histogram>,
    backup_size: Family<ClusterLabels, IntGauge>,
    backup_last_success: Family<ClusterLabels, IntGauge>,
    continuous_newest_time: Family<ClusterLabels, IntGauge>,
    continuous_newest_revision: Family<ClusterLabels, IntGauge>,
    continuous_failing: Family<ClusterLabels, IntGauge>,
    cluster: cluster::ClusterGauges,
    /// Last phase counted per cluster, so a change moves one unit between
    /// phases instead of recounting every cluster.
    phases: Mutex<HashMap<ObjectRef<DistributedKV>, Phase>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("dkv");
        let reconcile_duration =
            Family::<ReconcileOutcomeLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 15))
            });
        registry.register(
            "reconcile_duration_seconds",
            "Duration of DistributedKV reconciles, by outcome (success, transient, permanent, waiting)",
            reconcile_duration.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Failed reconciles, by error category and pipeline step",
            errors.clone(),
        );
        let clusters = Family::<PhaseLabels, Gauge<i64, std::sync::atomic::AtomicI64>>::default();
        registry.register(
            "clusters",
            "DistributedKV clusters, by phase",
            clusters.clone(),
        );
        let leader = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease and runs the controllers",
            leader.clone(),
        );
        let backups = Family::<BackupOutcomeLabels, Counter>::default();
        registry.register(
            "backups",
            "Finished backups, by cluster and outcome (completed, failed)",
            backups.clone(),
        );
        let backup_duration = Family::<ClusterLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(1.0, 2.0, 12))
        });
        registry.register(
            "backup_duration_seconds",
            "Duration of completed backups, from the record's start to its completion",
            backup_duration.clone(),
        );
        let backup_size = Family::<ClusterLabels, IntGauge>::default();
        registry.register(
            "backup_size_bytes",
            "Size of the newest completed backup of each cluster",
            backup_size.clone(),
        );
        let backup_last_success = Family::<ClusterLabels, IntGauge>::default();
        registry.register(
            "backup_last_success_timestamp_seconds",
            "Unix time of the newest completed backup of each cluster",
            backup_last_success.clone(),
        );
        let continuous_newest_time = Family::<ClusterLabels, IntGauge>::default();
        registry.register(
            "continuous_backup_newest_point_timestamp_seconds",
            "Unix time of the newest durable point of each cluster's continuous backup (time() minus it is the recovery point lag)",
            continuous_newest_time.clone(),
        );
        let continuous_newest_revision = Family::<ClusterLabels, IntGauge>::default();
        registry.register(
            "continuous_backup_newest_revision",
            "etcd revision of the newest durable point of each cluster's continuous backup",
            continuous_newest_revision.clone(),
        );
        let continuous_failing = Family::<ClusterLabels, IntGauge>::default();
        registry.register(
            "continuous_backup_failing",
            "1 while a cluster's continuous backup agent fails (and stores nothing), else 0",
            continuous_failing.clone(),
        );
        let cluster = cluster::ClusterGauges::register(&mut registry);
        Self {
            registry,
            cluster,
            reconcile_duration,
            errors,
            clusters,
            leader,
            backups,
            backup_duration,
            backup_size,
            backup_last_success,
            continuous_newest_time,
            continuous_newest_revision,
            continuous_failing,
            phases: Mutex::default(),
        }
    }

    pub fn observe_reconcile(&self, outcome: &str, took: Duration) {
        self.reconcile_duration
            .get_or_create(&ReconcileOutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn count_error(&self, category: &str, step: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                category: category.to_owned(),
                step: step.to_owned(),
            })
            .inc();
    }

    /// Records the phase of a cluster (moving it between phase gauges).
    pub fn set_phase(&self, cluster: &ObjectRef<DistributedKV>, phase: Option<Phase>) {
        let mut phases = self.phases.lock().unwrap_or_else(|p| p.into_inner());
        let previous = match phase {
            Some(phase) => phases.insert(cluster.clone(), phase),
            None => phases.remove(cluster),
        };
        if previous == phase {
            return;
        }
        if let Some(previous) = previous {
            self.phase_gauge(previous).dec();
        }
        if let Some(phase) = phase {
            self.phase_gauge(phase).inc();
        }
    }

    /// Stops counting a deleted cluster, and drops its series.
    pub fn forget(&self, cluster: &ObjectRef<DistributedKV>) {
        self.set_phase(cluster, None);
        let namespace = cluster.namespace.as_deref().unwrap_or_default();
        self.cluster.forget(namespace, &cluster.name);
        let labels = ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.name.clone(),
        };
        self.backup_size.remove(&labels);
        self.backup_last_success.remove(&labels);
        self.backup_duration.remove(&labels);
        for outcome in ["completed", "failed"] {
            self.backups.remove(&BackupOutcomeLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.name.clone(),
                outcome: outcome.to_owned(),
            });
        }
    }

    /// The health series of one cluster, from what a pass saw.
    pub fn observe_cluster(&self, view: &ClusterView) {
        self.cluster.observe(view);
        if view.has_backup {
            // Both outcomes exist from the start, so that the first failure
            // is an increase (what alerts see), not a new series.
            for outcome in ["completed", "failed"] {
                let _created = self.backups.get_or_create(&BackupOutcomeLabels {
                    namespace: view.namespace.clone(),
                    cluster: view.cluster.clone(),
                    outcome: outcome.to_owned(),
                });
            }
        }
    }

    /// A failed reconcile of one cluster; `reason` is its category and step.
    pub fn count_cluster_error(&self, namespace: &str, cluster: &str, reason: &str) {
        self.cluster.count_error(namespace, cluster, reason);
    }

    pub fn count_defragmentation(&self, namespace: &str, cluster: &str, completed: bool) {
        self.cluster
            .count_defragmentation(namespace, cluster, completed);
    }

    pub fn count_nospace_recovery(&self, namespace: &str, cluster: &str) {
        self.cluster.count_nospace_recovery(namespace, cluster);
    }

    fn phase_gauge(&self, phase: Phase) -> Gauge<i64, std::sync::atomic::AtomicI64> {
        self.clusters
            .get_or_create(&PhaseLabels {
                phase: phase.to_string(),
            })
            .clone()
    }

    /// Records a backup that completed (`Some(size)`) or failed (`None`).
    pub fn observe_backup(
        &self,
        namespace: &str,
        cluster: &str,
        took: Duration,
        size_bytes: Option<i64>,
        finished_at: jiff::Timestamp,
    ) {
        let labels = ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.backups
            .get_or_create(&BackupOutcomeLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
                outcome: if size_bytes.is_some() {
                    "completed"
                } else {
                    "failed"
                }
                .to_owned(),
            })
            .inc();
        if let Some(size) = size_bytes {
            self.backup_duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
            self.backup_size.get_or_create(&labels).set(size);
            self.backup_last_success
                .get_or_create(&labels)
                .set(finished_at.as_second());
        }
    }

    /// Records the newest durable point of a cluster's continuous backup.
    pub fn set_continuous_newest(
        &self,
        namespace: &str,
        cluster: &str,
        revision: i64,
        time: jiff::Timestamp,
    ) {
        let labels = ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.continuous_newest_time
            .get_or_create(&labels)
            .set(time.as_second());
        self.continuous_newest_revision
            .get_or_create(&labels)
            .set(revision);
    }

    /// Records whether a cluster's continuous backup agent is failing.
    pub fn set_continuous_failing(&self, namespace: &str, cluster: &str, failing: bool) {
        self.continuous_failing
            .get_or_create(&ClusterLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
            })
            .set(i64::from(failing));
    }

    /// Drops the continuous backup series of a cluster whose agent stopped.
    pub fn forget_continuous(&self, namespace: &str, cluster: &str) {
        let labels = ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.continuous_newest_time.remove(&labels);
        self.continuous_newest_revision.remove(&labels);
        self.continuous_failing.remove(&labels);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_gauges_move_with_the_cluster() {
        let metrics = Metrics::new();
        let a = ObjectRef::new("a").within("ns");
        metrics.set_phase(&a, Some(Phase::Creating));
        metrics.set_phase(&a, Some(Phase::Running));
        metrics.set_phase(&a, Some(Phase::Running));
        let text = metrics.encode().unwrap_or_default();
        assert!(text.contains("dkv_clusters{phase=\"Running\"} 1"), "{text}");
        assert!(
            text.contains("dkv_clusters{phase=\"Creating\"} 0"),
            "{text}"
        );
        metrics.forget(&a);
        let text = metrics.encode().unwrap_or_default();
        assert!(text.contains("dkv_clusters{phase=\"Running\"} 0"), "{text}");
    }

    #[test]
    fn backups_are_counted_with_size_duration_and_last_success() {
        let metrics = Metrics::new();
        let at = jiff::Timestamp::from_second(1_800_000_000).unwrap_or_default();
        metrics.observe_backup("shop", "orders", Duration::from_secs(3), Some(1234), at);
        metrics.observe_backup("shop", "orders", Duration::from_secs(1), None, at);
        let text = metrics.encode().unwrap_or_default();
        for line in [
            "dkv_backups_total{namespace=\"shop\",cluster=\"orders\",outcome=\"completed\"} 1",
            "dkv_backups_total{namespace=\"shop\",cluster=\"orders\",outcome=\"failed\"} 1",
            "dkv_backup_size_bytes{namespace=\"shop\",cluster=\"orders\"} 1234",
            "dkv_backup_last_success_timestamp_seconds{namespace=\"shop\",cluster=\"orders\"} 1800000000",
            "dkv_backup_duration_seconds_count{namespace=\"shop\",cluster=\"orders\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn reconcile_outcomes_and_errors_are_exported() {
        let metrics = Metrics::new();
        metrics.observe_reconcile("success", Duration::from_millis(3));
        metrics.count_error("transient", "apply");
        let text = metrics.encode().unwrap_or_default();
        assert!(
            text.contains("dkv_reconcile_duration_seconds_count{outcome=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("dkv_reconcile_errors_total{category=\"transient\",step=\"apply\"} 1"),
            "{text}"
        );
    }
}
