//! The per-cluster health series the alerts in `deploy/monitoring/` read:
//! members (desired, healthy, quorum, each member), hibernation, etcd
//! alarms, certificate expiry, the backup cadences that make "too old"
//! and "lagging" relative, and reconcile errors by reason.
//!
//! Each pass of the cluster controller hands over what it saw
//! ([`ClusterView`]); the series of a member, alarm or certificate that is
//! gone are removed, not left at their last value, so an alert never fires
//! on something that no longer exists.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{ClusterLabels, IntGauge};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberLabels {
    namespace: String,
    cluster: String,
    member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MemberNodeLabels {
    namespace: String,
    cluster: String,
    member: String,
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlarmLabels {
    namespace: String,
    cluster: String,
    member: String,
    alarm: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CorruptLabels {
    namespace: String,
    cluster: String,
    member: String,
    found_by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SecretLabels {
    namespace: String,
    cluster: String,
    secret: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    namespace: String,
    cluster: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DefragmentationOutcomeLabels {
    namespace: String,
    cluster: String,
    outcome: String,
}

/// One member as the pass saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberView {
    pub name: String,
    pub healthy: bool,
    pub learner: bool,
    /// (node, since as unix seconds) while the member's node is lost.
    pub node_lost: Option<(String, i64)>,
}

/// What one pass saw of a cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterView {
    pub namespace: String,
    pub cluster: String,
    /// Voting members the spec asks for.
    pub desired_members: i64,
    /// etcd's members (empty when etcd could not be asked).
    pub members: Vec<MemberView>,
    pub hibernated: bool,
    /// Being created or restored: members are still starting, and a
    /// quorum figure would only say so (alerts would fire on every new
    /// cluster).
    pub forming: bool,
    /// Backups are configured (`spec.backup`).
    pub has_backup: bool,
    /// Every alarm etcd has raised.
    pub alarms: Vec<MemberAlarm>,
    /// The members dkv found with data that differs from their peers'.
    pub corrupt: Vec<CorruptFinding>,
    /// (Secret, notAfter as unix seconds) of each certificate in use.
    pub certificates: Vec<(String, i64)>,
    /// The longest gap between two runs of the backup schedule.
    pub backup_schedule_interval: Option<i64>,
    pub continuous_interval: Option<i64>,
    /// A standby that has not been promoted (`status.standby`): whether it
    /// follows (not `Failing` or `Stopped`), its lag in seconds and in
    /// revisions.
    pub standby: Option<StandbyView>,
}

/// Where a standby stands, for its series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StandbyView {
    pub following: bool,
    pub lag_seconds: Option<i64>,
    pub lag_revisions: Option<i64>,
}

/// An alarm etcd raised, and the member that raised it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MemberAlarm {
    /// The member's name (its pod's), or its ID in hex when no member of
    /// the cluster has that ID.
    pub member: String,
    pub kind: dkv_etcd::AlarmKind,
}

/// A member whose data differs from its peers', and which of etcd's checks
/// found it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CorruptFinding {
    /// The member's name (its pod's).
    pub member: String,
    /// `alarm` (the CORRUPT alarm) or `initial-check` (etcd refuses to
    /// start it).
    pub found_by: &'static str,
}

/// The label sets a cluster's series were last exported with.
#[derive(Debug, Default)]
struct Exported {
    members: BTreeSet<String>,
    /// (member, node) of members on lost nodes.
    lost: BTreeSet<(String, String)>,
    alarms: BTreeSet<MemberAlarm>,
    corrupt: BTreeSet<CorruptFinding>,
    secrets: BTreeSet<String>,
}

pub(super) struct ClusterGauges {
    members: Family<ClusterLabels, IntGauge>,
    members_healthy: Family<ClusterLabels, IntGauge>,
    quorum: Family<ClusterLabels, IntGauge>,
    member_healthy: Family<MemberLabels, IntGauge>,
    member_node_lost: Family<MemberNodeLabels, IntGauge>,
    hibernated: Family<ClusterLabels, IntGauge>,
    alarm: Family<AlarmLabels, IntGauge>,
    member_corrupt: Family<CorruptLabels, IntGauge>,
    certificate_expiry: Family<SecretLabels, IntGauge>,
    schedule_interval: Family<ClusterLabels, IntGauge>,
    continuous_interval: Family<ClusterLabels, IntGauge>,
    standby_following: Family<ClusterLabels, IntGauge>,
    standby_lag_seconds: Family<ClusterLabels, IntGauge>,
    standby_lag_revisions: Family<ClusterLabels, IntGauge>,
    reconcile_errors: Family<ReasonLabels, Counter>,
    defragmentations: Family<DefragmentationOutcomeLabels, Counter>,
    nospace_recoveries: Family<ClusterLabels, Counter>,
    exported: Mutex<HashMap<(String, String), Exported>>,
}

impl ClusterGauges {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self {
            members: Family::default(),
            members_healthy: Family::default(),
            quorum: Family::default(),
            member_healthy: Family::default(),
            member_node_lost: Family::default(),
            hibernated: Family::default(),
            alarm: Family::default(),
            member_corrupt: Family::default(),
            certificate_expiry: Family::default(),
            schedule_interval: Family::default(),
            continuous_interval: Family::default(),
            standby_following: Family::default(),
            standby_lag_seconds: Family::default(),
            standby_lag_revisions: Family::default(),
            reconcile_errors: Family::default(),
            defragmentations: Family::default(),
            nospace_recoveries: Family::default(),
            exported: Mutex::default(),
        };
        registry.register(
            "cluster_members",
            "Voting members each cluster's spec asks for (spec.size)",
            gauges.members.clone(),
        );
        registry.register(
            "cluster_members_healthy",
            "Voting members etcd reports healthy, per cluster",
            gauges.members_healthy.clone(),
        );
        registry.register(
            "cluster_quorum",
            "Members needed for quorum of each cluster's current voting membership (floor(n/2)+1)",
            gauges.quorum.clone(),
        );
        registry.register(
            "cluster_member_healthy",
            "1 while a member answers etcd's status and follows a leader, else 0 (member = pod name)",
            gauges.member_healthy.clone(),
        );
        registry.register(
            "cluster_member_node_lost_since_timestamp_seconds",
            "Since when (unix seconds) a member's node is lost (Ready not True, tainted unreachable, or deleted), by member and node; absent while its node is fine",
            gauges.member_node_lost.clone(),
        );
        registry.register(
            "cluster_hibernated",
            "1 while a cluster is hibernated (its members stopped on purpose), else 0",
            gauges.hibernated.clone(),
        );
        registry.register(
            "cluster_alarm",
            "1 for each alarm etcd has raised on a member (NOSPACE, CORRUPT); absent otherwise",
            gauges.alarm.clone(),
        );
        registry.register(
            "cluster_member_corrupt",
            "1 for each member whose data differs from its peers', by the check that found it (found_by: alarm, initial-check); absent otherwise",
            gauges.member_corrupt.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "When each certificate a cluster uses expires (unix seconds), by Secret",
            gauges.certificate_expiry.clone(),
        );
        registry.register(
            "backup_schedule_interval_seconds",
            "The longest gap between two runs of each cluster's spec.backup.schedule",
            gauges.schedule_interval.clone(),
        );
        registry.register(
            "continuous_backup_interval_seconds",
            "spec.backup.continuous.interval of each cluster recording continuous backup",
            gauges.continuous_interval.clone(),
        );
        registry.register(
            "standby_following",
            "1 while a standby (spec.standby, not promoted) follows its source, 0 while reading or applying fails or it cannot go on",
            gauges.standby_following.clone(),
        );
        registry.register(
            "standby_lag_seconds",
            "Age of the oldest change a standby's source stored and the standby has not applied (0 when it has applied everything stored)",
            gauges.standby_lag_seconds.clone(),
        );
        registry.register(
            "standby_lag_revisions",
            "Source revisions stored and not applied by a standby",
            gauges.standby_lag_revisions.clone(),
        );
        registry.register(
            "cluster_reconcile_errors",
            "Failed reconciles of each cluster, by reason (the error's category and step)",
            gauges.reconcile_errors.clone(),
        );
        registry.register(
            "defragmentations",
            "Member defragmentations dkv ran, by cluster and outcome (completed, failed)",
            gauges.defragmentations.clone(),
        );
        registry.register(
            "nospace_recoveries",
            "NOSPACE alarms dkv recovered from (compact, defragment, disarm), by cluster",
            gauges.nospace_recoveries.clone(),
        );
        gauges
    }

    pub(super) fn observe(&self, view: &ClusterView) {
        let cluster = ClusterLabels {
            namespace: view.namespace.clone(),
            cluster: view.cluster.clone(),
        };
        self.members
            .get_or_create(&cluster)
            .set(view.desired_members);
        self.hibernated
            .get_or_create(&cluster)
            .set(i64::from(view.hibernated));
        let voting: Vec<&MemberView> = view.members.iter().filter(|m| !m.learner).collect();
        if voting.is_empty() || view.forming {
            // etcd could not be asked: what it would say is unknown, and
            // a stale figure would be a lie. Or the cluster is forming.
            self.members_healthy.remove(&cluster);
            self.quorum.remove(&cluster);
        } else {
            let healthy = voting.iter().filter(|m| m.healthy).count();
            self.members_healthy
                .get_or_create(&cluster)
                .set(i64::try_from(healthy).unwrap_or(i64::MAX));
            self.quorum
                .get_or_create(&cluster)
                .set(i64::try_from(voting.len() / 2 + 1).unwrap_or(i64::MAX));
        }
        set_optional(
            &self.schedule_interval,
            &cluster,
            view.backup_schedule_interval,
        );
        set_optional(
            &self.continuous_interval,
            &cluster,
            view.continuous_interval,
        );
        set_optional(
            &self.standby_following,
            &cluster,
            view.standby.map(|s| i64::from(s.following)),
        );
        set_optional(
            &self.standby_lag_seconds,
            &cluster,
            view.standby.and_then(|s| s.lag_seconds),
        );
        set_optional(
            &self.standby_lag_revisions,
            &cluster,
            view.standby.and_then(|s| s.lag_revisions),
        );

        let mut exported = self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = exported
            .remove(&(view.namespace.clone(), view.cluster.clone()))
            .unwrap_or_default();
        let now = Exported {
            members: view.members.iter().map(|m| m.name.clone()).collect(),
            lost: view
                .members
                .iter()
                .filter_map(|m| Some((m.name.clone(), m.node_lost.as_ref()?.0.clone())))
                .collect(),
            alarms: view.alarms.iter().cloned().collect(),
            corrupt: view.corrupt.iter().cloned().collect(),
            secrets: view.certificates.iter().map(|(s, _)| s.clone()).collect(),
        };
        for member in &view.members {
            self.member_healthy
                .get_or_create(&member_labels(view, &member.name))
                .set(i64::from(member.healthy));
            if let Some((node, since)) = &member.node_lost {
                self.member_node_lost
                    .get_or_create(&member_node_labels(view, &member.name, node))
                    .set(*since);
            }
        }
        for alarm in &view.alarms {
            self.alarm.get_or_create(&alarm_labels(view, alarm)).set(1);
        }
        for finding in &view.corrupt {
            self.member_corrupt
                .get_or_create(&corrupt_labels(view, finding))
                .set(1);
        }
        for (secret, not_after) in &view.certificates {
            self.certificate_expiry
                .get_or_create(&secret_labels(view, secret))
                .set(*not_after);
        }
        self.remove_gone(view, &previous, Some(&now));
        exported.insert((view.namespace.clone(), view.cluster.clone()), now);
    }

    /// Drops every series of a deleted cluster.
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        let cluster = ClusterLabels {
            namespace: namespace.to_owned(),
            cluster: name.to_owned(),
        };
        for family in [
            &self.members,
            &self.members_healthy,
            &self.quorum,
            &self.hibernated,
            &self.schedule_interval,
            &self.continuous_interval,
            &self.standby_following,
            &self.standby_lag_seconds,
            &self.standby_lag_revisions,
        ] {
            family.remove(&cluster);
        }
        let previous = self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&(namespace.to_owned(), name.to_owned()));
        if let Some(previous) = previous {
            let view = ClusterView {
                namespace: namespace.to_owned(),
                cluster: name.to_owned(),
                ..ClusterView::default()
            };
            self.remove_gone(&view, &previous, None);
        }
    }

    pub(super) fn count_error(&self, namespace: &str, cluster: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ReasonLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn count_defragmentation(&self, namespace: &str, cluster: &str, completed: bool) {
        self.defragmentations
            .get_or_create(&DefragmentationOutcomeLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
                outcome: if completed { "completed" } else { "failed" }.to_owned(),
            })
            .inc();
    }

    pub(super) fn count_nospace_recovery(&self, namespace: &str, cluster: &str) {
        self.nospace_recoveries
            .get_or_create(&ClusterLabels {
                namespace: namespace.to_owned(),
                cluster: cluster.to_owned(),
            })
            .inc();
    }

    /// Removes the series in `previous` that `now` does not have (all of
    /// them without `now`).
    fn remove_gone(&self, view: &ClusterView, previous: &Exported, now: Option<&Exported>) {
        let empty = Exported::default();
        let now = now.unwrap_or(&empty);
        for member in previous.members.difference(&now.members) {
            self.member_healthy.remove(&member_labels(view, member));
        }
        for (member, node) in previous.lost.difference(&now.lost) {
            self.member_node_lost
                .remove(&member_node_labels(view, member, node));
        }
        for alarm in previous.alarms.difference(&now.alarms) {
            self.alarm.remove(&alarm_labels(view, alarm));
        }
        for finding in previous.corrupt.difference(&now.corrupt) {
            self.member_corrupt.remove(&corrupt_labels(view, finding));
        }
        for secret in previous.secrets.difference(&now.secrets) {
            self.certificate_expiry.remove(&secret_labels(view, secret));
        }
    }
}

fn set_optional(
    family: &Family<ClusterLabels, IntGauge>,
    labels: &ClusterLabels,
    value: Option<i64>,
) {
    match value {
        Some(value) => {
            family.get_or_create(labels).set(value);
        }
        None => {
            family.remove(labels);
        }
    }
}

fn member_labels(view: &ClusterView, member: &str) -> MemberLabels {
    MemberLabels {
        namespace: view.namespace.clone(),
        cluster: view.cluster.clone(),
        member: member.to_owned(),
    }
}

fn member_node_labels(view: &ClusterView, member: &str, node: &str) -> MemberNodeLabels {
    MemberNodeLabels {
        namespace: view.namespace.clone(),
        cluster: view.cluster.clone(),
        member: member.to_owned(),
        node: node.to_owned(),
    }
}

fn alarm_labels(view: &ClusterView, alarm: &MemberAlarm) -> AlarmLabels {
    AlarmLabels {
        namespace: view.namespace.clone(),
        cluster: view.cluster.clone(),
        member: alarm.member.clone(),
        alarm: alarm.kind.as_str().to_owned(),
    }
}

fn corrupt_labels(view: &ClusterView, finding: &CorruptFinding) -> CorruptLabels {
    CorruptLabels {
        namespace: view.namespace.clone(),
        cluster: view.cluster.clone(),
        member: finding.member.clone(),
        found_by: finding.found_by.to_owned(),
    }
}

fn secret_labels(view: &ClusterView, secret: &str) -> SecretLabels {
    SecretLabels {
        namespace: view.namespace.clone(),
        cluster: view.cluster.clone(),
        secret: secret.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;

    fn view(members: &[(&str, bool)], alarms: &[(&str, dkv_etcd::AlarmKind)]) -> ClusterView {
        ClusterView {
            namespace: "shop".to_owned(),
            cluster: "orders".to_owned(),
            desired_members: 3,
            members: members
                .iter()
                .map(|(name, healthy)| MemberView {
                    name: (*name).to_owned(),
                    healthy: *healthy,
                    learner: false,
                    node_lost: None,
                })
                .collect(),
            alarms: alarms
                .iter()
                .map(|(m, kind)| MemberAlarm {
                    member: (*m).to_owned(),
                    kind: *kind,
                })
                .collect(),
            certificates: vec![("orders-tls-member".to_owned(), 1_900_000_000)],
            backup_schedule_interval: Some(3600),
            ..ClusterView::default()
        }
    }

    fn text(metrics: &Metrics) -> String {
        metrics.encode().unwrap_or_default()
    }

    #[test]
    fn members_quorum_and_alarms_follow_what_the_pass_saw() {
        let metrics = Metrics::new();
        metrics.observe_cluster(&view(
            &[("orders-0", true), ("orders-1", false), ("orders-2", true)],
            &[("orders-1", dkv_etcd::AlarmKind::NoSpace)],
        ));
        let out = text(&metrics);
        for line in [
            "dkv_cluster_members{namespace=\"shop\",cluster=\"orders\"} 3",
            "dkv_cluster_members_healthy{namespace=\"shop\",cluster=\"orders\"} 2",
            "dkv_cluster_quorum{namespace=\"shop\",cluster=\"orders\"} 2",
            "dkv_cluster_member_healthy{namespace=\"shop\",cluster=\"orders\",member=\"orders-1\"} 0",
            "dkv_cluster_alarm{namespace=\"shop\",cluster=\"orders\",member=\"orders-1\",alarm=\"NOSPACE\"} 1",
            "dkv_certificate_expiry_timestamp_seconds{namespace=\"shop\",cluster=\"orders\",secret=\"orders-tls-member\"} 1900000000",
            "dkv_backup_schedule_interval_seconds{namespace=\"shop\",cluster=\"orders\"} 3600",
        ] {
            assert!(out.contains(line), "{line} missing in:\n{out}");
        }
        // Scaled in, alarm disarmed: the gone member's and alarm's series go.
        metrics.observe_cluster(&view(&[("orders-0", true), ("orders-1", true)], &[]));
        let out = text(&metrics);
        assert!(!out.contains("member=\"orders-2\""), "{out}");
        assert!(!out.contains("alarm=\"NOSPACE\""), "{out}");
        assert!(
            out.contains("dkv_cluster_members_healthy{namespace=\"shop\",cluster=\"orders\"} 2"),
            "{out}"
        );
        // etcd not asked: no member figures rather than stale ones.
        metrics.observe_cluster(&view(&[], &[]));
        assert!(!text(&metrics).contains("dkv_cluster_members_healthy{"));
        // Deleted: nothing of the cluster is left.
        metrics.forget(&kube::runtime::reflector::ObjectRef::new("orders").within("shop"));
        let out = text(&metrics);
        assert!(!out.contains("cluster=\"orders\""), "{out}");
    }

    #[test]
    fn a_member_on_a_lost_node_has_a_series_while_it_is_lost() {
        let metrics = Metrics::new();
        let mut lost = view(&[("orders-0", true), ("orders-1", false)], &[]);
        lost.members[1].node_lost = Some(("node-2".to_owned(), 1_800_000_000));
        metrics.observe_cluster(&lost);
        let series = "dkv_cluster_member_node_lost_since_timestamp_seconds{namespace=\"shop\",cluster=\"orders\",member=\"orders-1\",node=\"node-2\"} 1800000000";
        let out = text(&metrics);
        assert!(out.contains(series), "{series} missing in:\n{out}");
        assert!(!out.contains("member=\"orders-0\",node="), "{out}");
        // Its node is back: the series goes (it is not left at 0).
        metrics.observe_cluster(&view(&[("orders-0", true), ("orders-1", true)], &[]));
        assert!(
            !text(&metrics).contains("dkv_cluster_member_node_lost_since_timestamp_seconds{"),
            "{}",
            text(&metrics)
        );
        // Lost again, then the cluster is deleted: nothing is left.
        metrics.observe_cluster(&lost);
        metrics.forget(&kube::runtime::reflector::ObjectRef::new("orders").within("shop"));
        assert!(!text(&metrics).contains("node=\"node-2\""));
    }

    #[test]
    fn a_corrupt_member_has_a_series_while_it_is_found() {
        let metrics = Metrics::new();
        let mut found = view(&[("orders-0", true), ("orders-2", false)], &[]);
        found.corrupt = vec![CorruptFinding {
            member: "orders-2".to_owned(),
            found_by: "initial-check",
        }];
        metrics.observe_cluster(&found);
        let series = "dkv_cluster_member_corrupt{namespace=\"shop\",cluster=\"orders\",member=\"orders-2\",found_by=\"initial-check\"} 1";
        let out = text(&metrics);
        assert!(out.contains(series), "{series} missing in:\n{out}");
        // Replaced: the series goes.
        metrics.observe_cluster(&view(&[("orders-0", true), ("orders-2", true)], &[]));
        assert!(
            !text(&metrics).contains("dkv_cluster_member_corrupt{"),
            "{}",
            text(&metrics)
        );
    }
}
