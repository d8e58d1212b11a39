//! Prometheus metrics of the operator.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1alpha1::Phase;
use kube::runtime::reflector::ObjectRef;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
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

/// The operator's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    reconcile_duration: Family<OutcomeLabels, Histogram>,
    errors: Family<ErrorLabels, Counter>,
    clusters: Family<PhaseLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    leader: Gauge<i64, std::sync::atomic::AtomicI64>,
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
        let reconcile_duration = Family::<OutcomeLabels, Histogram>::new_with_constructor(|| {
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
        Self {
            registry,
            reconcile_duration,
            errors,
            clusters,
            leader,
            phases: Mutex::default(),
        }
    }

    pub fn observe_reconcile(&self, outcome: &str, took: Duration) {
        self.reconcile_duration
            .get_or_create(&OutcomeLabels {
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

    /// Stops counting a deleted cluster.
    pub fn forget(&self, cluster: &ObjectRef<DistributedKV>) {
        self.set_phase(cluster, None);
    }

    fn phase_gauge(&self, phase: Phase) -> Gauge<i64, std::sync::atomic::AtomicI64> {
        self.clusters
            .get_or_create(&PhaseLabels {
                phase: phase.to_string(),
            })
            .clone()
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
