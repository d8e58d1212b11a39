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

use dkv_api::DistributedKV;
use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::{Operation, Phase};
use k8s_openapi::api::apps::v1::StatefulSet;

use super::membership::{ObservedMember, Step};
use super::observe_members::MemberPod;
use super::plan::Plan;

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
pub struct Facts<'a> {
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
}

/// Where `dkv` stands with hibernation, given what the pass observed and
/// planned.
pub fn decide(dkv: &DistributedKV, facts: &Facts<'_>) -> State {
    let at_zero = facts.statefulset.is_some_and(at_zero);
    if facts.wanted {
        if at_zero || inconsistency(facts).is_none() {
            return match facts.pods.len() {
                0 if at_zero => State::Hibernated,
                left => State::Stopping { left },
            };
        }
        return State::Waiting(inconsistency(facts).unwrap_or_default());
    }
    if (at_zero || recorded_waking(dkv)) && (at_zero || !all_healthy(facts)) {
        State::Waking
    } else {
        State::Awake
    }
}

/// Whether the StatefulSet runs no member: the record of a hibernation.
pub fn at_zero(sts: &StatefulSet) -> bool {
    sts.spec.replicas == Some(0)
}

/// Whether the cluster's status records it hibernated.
pub fn recorded_hibernated(dkv: &DistributedKV) -> bool {
    dkv.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(Phase::Hibernated))
}

/// Whether the cluster's status records it hibernated or waking: until
/// every member is healthy again, a cluster coming back is waking, not
/// missing members.
pub fn recorded_waking(dkv: &DistributedKV) -> bool {
    recorded_hibernated(dkv)
        || dkv.status.iter().flat_map(|s| &s.conditions).any(|c| {
            c.type_ == types::PROGRESSING && c.status == "True" && c.reason == reasons::WAKING
        })
}

/// Why the cluster is not at a point where it may stop: an operation is
/// pinned or a step is due, it is still forming or replaying a restore, or
/// a member is not a healthy, Ready voter. `None`: it may stop now.
fn inconsistency(facts: &Facts<'_>) -> Option<String> {
    if let Some(op) = facts.operation {
        return Some(format!(
            "{:?} of {} is in progress; it finishes first",
            op.kind, op.target
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
        step => Some(format!(
            "the cluster does not match its spec yet (next step: {step:?})"
        )),
    }
}

/// Why not every recorded member is a healthy voter with a Ready pod.
fn unhealthy(facts: &Facts<'_>) -> Option<String> {
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
        .map(|m| super::naming::member(facts.cluster, m.ordinal))
        .collect();
    (!sick.is_empty()).then(|| format!("not healthy yet: {}", sick.join(", ")))
}

fn all_healthy(facts: &Facts<'_>) -> bool {
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
