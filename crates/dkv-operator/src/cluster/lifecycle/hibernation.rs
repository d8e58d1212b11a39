//! Hibernation (`spec.hibernation`, pure): whether a cluster may stop now,
//! whether it is stopping, stopped or waking, and what that changes in the
//! pass's plan.
//!
//! A hibernated cluster is one whose StatefulSet runs 0 replicas: the
//! operator never sets 0 otherwise (a cluster has at least one member), so
//! that is the durable record, and an operator restart finds it as it was.
//! The members' volumes, the membership record and therefore the etcd
//! membership and cluster ID are untouched; waking raises the StatefulSet
//! back to the recorded members, which start on their own data.

use dkv_api::distributedkv::v1beta1::Operation;
use k8s_openapi::api::apps::v1::StatefulSet;

use crate::cluster::membership::observe::MemberPod;
use crate::cluster::membership::{ObservedMember, Step, words};
use crate::cluster::plan::Plan;

/// Where a cluster stands with hibernation this pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum State {
    /// Not asked for, and not coming back from it.
    #[default]
    Awake,
    /// Asked for, but the cluster is not at a consistent point yet: the
    /// pass goes on as usual (an operation under way finishes) and says why
    /// it waits.
    Waiting(String),
    /// Asked for and the StatefulSet is (this pass: goes) at 0 replicas;
    /// `left` member pods have not gone yet.
    Stopping { left: usize },
    /// Every member is stopped; its volume kept.
    Hibernated,
    /// Turned off after a hibernation: the members start again on their
    /// volumes; not all of them are healthy yet.
    Waking,
}

impl State {
    /// The members are (to be) stopped: the plan keeps 0 replicas and
    /// takes no membership step, and nothing talks to etcd.
    pub fn stopped(&self) -> bool {
        matches!(self, State::Stopping { .. } | State::Hibernated)
    }
}

/// What [`decide`] looks at.
pub struct HibernationInputs<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// `spec.hibernation`.
    pub wanted: bool,
    pub statefulset: Option<&'a StatefulSet>,
    /// The operation pinned in status (after this pass's step).
    pub operation: Option<&'a Operation>,
    pub plan: &'a Plan,
    /// etcd's members (`None`: none answered).
    pub members: Option<&'a [ObservedMember]>,
    pub pods: &'a [MemberPod],
    /// Member pods being deleted that have not stopped yet (a graceful
    /// deletion: etcd may still be running in them).
    pub terminating: usize,
    /// Status records the cluster hibernated or waking.
    pub recorded_waking: bool,
}

/// Where the cluster stands with hibernation, given what the pass observed
/// and planned.
pub fn decide(facts: &HibernationInputs<'_>) -> State {
    let at_zero = facts.statefulset.is_some_and(at_zero);
    if facts.wanted {
        let waiting_for = (!at_zero).then(|| inconsistency(facts)).flatten();
        return match (waiting_for, facts.pods.len() + facts.terminating) {
            (Some(why), _) => State::Waiting(why),
            (None, 0) if at_zero => State::Hibernated,
            (None, left) => State::Stopping { left },
        };
    }
    if at_zero || (facts.recorded_waking && !all_healthy(facts)) {
        State::Waking
    } else {
        State::Awake
    }
}

/// Whether the StatefulSet runs no member: the record of a hibernation.
pub fn at_zero(sts: &StatefulSet) -> bool {
    sts.spec.replicas == Some(0)
}

/// Why the cluster is not at a point where it may stop: an operation is
/// pinned or a step is due, it is still forming or replaying a restore, or
/// a member is not a healthy, Ready voter. `None`: it may stop now.
fn inconsistency(facts: &HibernationInputs<'_>) -> Option<String> {
    if let Some(op) = facts.operation {
        return Some(format!(
            "{} is in progress; it finishes first",
            op.kind.describe(&op.target)
        ));
    }
    if facts.plan.creating {
        return Some("the cluster is still forming".to_owned());
    }
    if facts.plan.replay_pending().is_some() {
        return Some("the restore is still replaying recorded changes".to_owned());
    }
    if facts.statefulset.is_none() {
        return Some("the members' StatefulSet does not exist yet".to_owned());
    }
    if let Some(why) = unhealthy(facts) {
        return Some(why);
    }
    match &facts.plan.step {
        Step::Converged => None,
        step => Some(match words::step(facts.cluster, step) {
            Some(step) => format!("the cluster does not match its spec yet ({step})"),
            None => "the cluster does not match its spec yet".to_owned(),
        }),
    }
}

/// Why not every recorded member is a healthy voter with a Ready pod.
fn unhealthy(facts: &HibernationInputs<'_>) -> Option<String> {
    let Some(members) = facts.members.filter(|m| !m.is_empty()) else {
        return Some("no member answers".to_owned());
    };
    if members.len() < facts.plan.record.members.len() {
        return Some(format!(
            "{} of {} recorded members answer",
            members.len(),
            facts.plan.record.members.len()
        ));
    }
    let pod_ready = |ordinal: i32| {
        facts
            .pods
            .iter()
            .any(|p| p.view.ordinal == ordinal && p.view.ready)
    };
    let sick: Vec<String> = members
        .iter()
        .filter(|m| m.learner || !m.healthy || !pod_ready(m.ordinal))
        .map(|m| crate::parts::naming::member(facts.cluster, m.ordinal))
        .collect();
    (!sick.is_empty()).then(|| format!("not healthy yet: {}", sick.join(", ")))
}

fn all_healthy(facts: &HibernationInputs<'_>) -> bool {
    unhealthy(facts).is_none()
}

/// The plan of a pass whose members are (to be) stopped: the StatefulSet
/// at 0, no membership step. Everything else — the membership record, the
/// initial member count, the TLS serial — stays as planned, so waking
/// starts the same pods on the same template.
pub fn stopped_plan(mut plan: Plan) -> Plan {
    plan.replicas = 0;
    plan.step = Step::Converged;
    plan.hibernated = true;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::dereference::Recorded;
    use crate::cluster::membership::{WaitReason, fixtures};
    use dkv_api::DistributedKV;
    use dkv_api::distributedkv::v1beta1::OperationKind;
    use dkv_api::distributedkv::v1beta1::Phase;
    use dkv_member::record::ClusterState;

    fn plan(step: Step) -> Plan {
        let mut record = crate::cluster::plan::bootstrap_record(
            &crate::cluster::validate::validated_for_tests(
                serde_json::json!({"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0"}),
            ),
            3,
        );
        record.state = ClusterState::Existing;
        record.members.iter_mut().for_each(|m| m.started = true);
        Plan::new(3, 3, record, step, None)
    }

    fn member(ordinal: i32, healthy: bool) -> ObservedMember {
        ObservedMember {
            id: 100 + ordinal as u64,
            ordinal,
            learner: false,
            started: true,
            healthy,
            reachable: healthy,
            leader: ordinal == 0,
            raft_index: 10,
            applied_index: 10,
            version: None,
            cluster_id: 7,
            storage_version: None,
            downgrade_target: None,
        }
    }

    fn pod(ordinal: i32) -> MemberPod {
        MemberPod {
            view: fixtures::pod(ordinal),
            endpoint: Some(format!("http://10.0.0.{ordinal}:2379")),
            restore_failure: None,
            problem: None,
            bootstrap_size: Some(3),
            refused_as_corrupt: false,
            created: None,
        }
    }

    fn statefulset(replicas: i32) -> StatefulSet {
        let mut sts = StatefulSet::default();
        sts.spec.replicas = Some(replicas);
        sts
    }

    fn cluster(phase: Option<Phase>) -> DistributedKV {
        let mut dkv: DistributedKV = serde_json::from_value(serde_json::json!({
            "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        dkv.status = phase.map(
            |phase| dkv_api::distributedkv::v1beta1::DistributedKVStatus {
                phase: Some(phase),
                ..Default::default()
            },
        );
        dkv
    }

    struct Case<'a> {
        wanted: bool,
        replicas: i32,
        operation: Option<&'a Operation>,
        step: Step,
        members: Vec<ObservedMember>,
        pods: Vec<MemberPod>,
        terminating: usize,
        phase: Option<Phase>,
    }

    fn decide_case(case: Case<'_>) -> State {
        let sts = statefulset(case.replicas);
        let plan = plan(case.step);
        decide(&HibernationInputs {
            cluster: "orders",
            wanted: case.wanted,
            statefulset: Some(&sts),
            operation: case.operation,
            plan: &plan,
            members: (!case.members.is_empty()).then_some(case.members.as_slice()),
            pods: &case.pods,
            terminating: case.terminating,
            recorded_waking: Recorded::of(&cluster(case.phase)).waking,
        })
    }

    fn healthy() -> Case<'static> {
        Case {
            wanted: true,
            replicas: 3,
            operation: None,
            step: Step::Converged,
            members: (0..3).map(|i| member(i, true)).collect(),
            pods: (0..3).map(pod).collect(),
            terminating: 0,
            phase: Some(Phase::Running),
        }
    }

    #[test]
    fn a_healthy_idle_cluster_stops_at_once() {
        assert_eq!(decide_case(healthy()), State::Stopping { left: 3 });
    }

    #[test]
    fn hibernation_waits_for_an_operation_a_step_or_a_sick_member() {
        let op = Operation {
            kind: OperationKind::AddLearner,
            target: "orders-3".into(),
            started_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
        };
        let pinned = decide_case(Case {
            operation: Some(&op),
            ..healthy()
        });
        assert!(
            matches!(&pinned, State::Waiting(why) if why == "adding member orders-3 as a learner is in progress; it finishes first"),
            "{pinned:?}"
        );
        let due = decide_case(Case {
            step: Step::Wait(WaitReason::TemplatePending),
            ..healthy()
        });
        assert!(
            matches!(&due, State::Waiting(why) if why == "the cluster does not match its spec yet (waiting: the StatefulSet's controller has not reported the revision of the members' new template yet)"),
            "{due:?}"
        );
        let sick = decide_case(Case {
            members: vec![member(0, true), member(1, false), member(2, true)],
            ..healthy()
        });
        assert!(
            matches!(&sick, State::Waiting(why) if why.contains("orders-1")),
            "{sick:?}"
        );
        let unseen = decide_case(Case {
            members: vec![],
            ..healthy()
        });
        assert!(matches!(unseen, State::Waiting(_)), "{unseen:?}");
    }

    #[test]
    fn at_zero_replicas_the_members_stop_then_are_hibernated_whatever_etcd_says() {
        // Pods still terminating: stopping, not a lost quorum.
        let stopping = decide_case(Case {
            replicas: 0,
            members: vec![member(0, false)],
            pods: vec![pod(0)],
            ..healthy()
        });
        assert_eq!(stopping, State::Stopping { left: 1 });
        // A pod deleted gracefully may still run etcd: not hibernated yet.
        let terminating = decide_case(Case {
            replicas: 0,
            members: vec![],
            pods: vec![],
            terminating: 2,
            ..healthy()
        });
        assert_eq!(terminating, State::Stopping { left: 2 });
        let stopped = decide_case(Case {
            replicas: 0,
            members: vec![],
            pods: vec![],
            ..healthy()
        });
        assert_eq!(stopped, State::Hibernated);
        assert!(stopped.stopped());
        let running = plan(Step::Wait(WaitReason::EtcdUnreachable));
        let plan = stopped_plan(running.clone());
        assert_eq!((plan.replicas, &plan.step), (0, &Step::Converged));
        assert!(plan.hibernated);
        assert_eq!(plan.record, running.record, "the membership record is kept");
    }

    #[test]
    fn waking_lasts_until_every_member_is_healthy_again() {
        let at_zero = decide_case(Case {
            wanted: false,
            replicas: 0,
            members: vec![],
            pods: vec![],
            phase: Some(Phase::Hibernated),
            ..healthy()
        });
        assert_eq!(at_zero, State::Waking);
        let starting = decide_case(Case {
            wanted: false,
            members: vec![member(0, true), member(1, false), member(2, false)],
            phase: Some(Phase::Hibernated),
            ..healthy()
        });
        assert_eq!(starting, State::Waking);
        let back = decide_case(Case {
            wanted: false,
            phase: Some(Phase::Hibernated),
            ..healthy()
        });
        assert_eq!(back, State::Awake);
        // A cluster that never hibernated is simply awake, sick or not.
        let never = decide_case(Case {
            wanted: false,
            members: vec![member(0, true), member(1, false), member(2, true)],
            ..healthy()
        });
        assert_eq!(never, State::Awake);
    }
}
