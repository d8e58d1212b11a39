//! Whether a rollout has stalled (pure): a member restarted onto the new
//! pod template that has not become Ready and healthy in etcd, on the minor
//! line the spec asks for, within `spec.rollout.progressDeadline`. Under `onFailure: Pause` that is
//! reported; under `Rollback` the status records a rollback, and from the
//! next pass on the cluster is validated — so built and planned — from the
//! spec that last ran on every member (see `validate::rollout`): the
//! membership planner then restarts the members on the new template back
//! onto the old one, one at a time, with its usual quorum rules.

use dkv_api::distributedkv::v1beta1::RolloutFailurePolicy;

use crate::cluster::membership::ObservedMember;
use crate::cluster::membership::observe::MemberPod;
use crate::cluster::validate::{ValidatedCluster, same_template};
use crate::parts::naming;

/// A rollout that missed its deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    /// The member pod on the new template that is not back in service.
    pub pod: String,
    /// How long ago it was restarted onto the new template.
    pub waited: jiff::SignedDuration,
    /// Why it does not serve, as its status says.
    pub why: String,
    /// `spec.rollout.onFailure: Rollback`, and there is a spec to go back to.
    pub roll_back: bool,
}

/// The stalled rollout of `cluster`, if any: a rollout is under way (the
/// StatefulSet's template, `update_revision`, is not the one recorded as
/// last good, and the spec's template fields differ from the last good
/// ones) and a pod on the new template has been not Ready, or its member
/// not healthy or on another minor line than the spec's version (an image
/// whose tag does not say what it holds), for longer than the deadline. Nothing while a rollback is
/// already in effect, nor before any spec is recorded as good.
pub fn stalled(
    cluster: &ValidatedCluster,
    update_revision: Option<&str>,
    pods: &[MemberPod],
    members: Option<&[ObservedMember]>,
    now: jiff::Timestamp,
) -> Option<Stalled> {
    if cluster.rolled_back.is_some() {
        return None;
    }
    let last_good = cluster.last_good.as_ref()?;
    let update_revision = update_revision?;
    if last_good.revision.as_deref() == Some(update_revision)
        || same_template(last_good, &cluster.running)
    {
        return None;
    }
    let member =
        |pod: &MemberPod| members.and_then(|ms| ms.iter().find(|m| m.ordinal == pod.view.ordinal));
    let wrong_version = |pod: &MemberPod| {
        member(pod)
            .and_then(|m| m.version)
            .filter(|v| v.minor_line() != cluster.version.minor_line())
    };
    let serving = |pod: &MemberPod| {
        pod.view.ready
            && member(pod).is_some_and(|m| m.healthy && !m.learner)
            && wrong_version(pod).is_none()
    };
    // While no member follows a live leader (an election under way, as
    // right after the leader's pod restarted) every member reads as
    // unhealthy, restarted or not: that says nothing of the new template.
    // A pass that comes then (the operator resumed after a pause, say)
    // must not roll back a rollout whose members serve; a cluster that
    // stays leaderless for another deadline is rolled back.
    let electing = members.is_some_and(|ms| !ms.is_empty() && ms.iter().all(|m| !m.healthy));
    let only_electing = |pod: &MemberPod, waited: jiff::SignedDuration| {
        electing
            && pod.view.ready
            && member(pod).is_some_and(|m| m.reachable && !m.learner)
            && wrong_version(pod).is_none()
            && waited <= cluster.rollout.deadline * 2
    };
    pods.iter()
        .filter(|p| p.view.revision.as_deref() == Some(update_revision) && !serving(p))
        .filter_map(|p| Some((p, now.duration_since(p.created?))))
        .filter(|(p, waited)| *waited > cluster.rollout.deadline && !only_electing(p, *waited))
        .max_by_key(|(_, waited)| *waited)
        .map(|(pod, waited)| Stalled {
            pod: naming::member(&cluster.name, pod.view.ordinal),
            waited,
            why: match (&pod.problem, wrong_version(pod)) {
                (Some(problem), _) => problem.message.clone(),
                (None, Some(running)) => format!(
                    "etcd reports version {running} for its member, not the {} the spec asks for",
                    cluster.version
                ),
                (None, None) => "its member is not healthy in etcd".to_owned(),
            },
            roll_back: cluster.rollout.on_failure == RolloutFailurePolicy::Rollback,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership::fixtures;
    use crate::cluster::membership::observe::PodProblem;
    use crate::cluster::validate::validated_for_tests;

    const OLD: &str = "registry.k8s.io/etcd:3.5.16-0";
    const NEW: &str = "registry.k8s.io/etcd:3.5.30-0";

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A cluster on `NEW` whose last good spec ran `OLD` (revision `rev-1`),
    /// with a 30 s deadline and `on_failure`.
    fn cluster(on_failure: &str) -> ValidatedCluster {
        let mut cluster = validated_for_tests(serde_json::json!({
            "size": 3, "image": NEW,
            "rollout": {"onFailure": on_failure, "progressDeadline": "30s"},
        }));
        let mut good = cluster.running.clone();
        good.image = OLD.to_owned();
        good.revision = Some("rev-1".to_owned());
        cluster.last_good = Some(good);
        cluster
    }

    /// Members 0 and 1 on `rev-1`, Ready; member 2 restarted onto `rev-2`
    /// at `at(0)`, its image not pulled.
    fn pods() -> Vec<MemberPod> {
        (0..3)
            .map(|ordinal| {
                let mut view = fixtures::pod(ordinal);
                let mut problem = None;
                if ordinal == 2 {
                    view.revision = Some("rev-2".to_owned());
                    view.ready = false;
                    problem = Some(PodProblem {
                        fault: None,
                        message: "pod orders-2, container etcd: ImagePullBackOff".to_owned(),
                    });
                }
                MemberPod {
                    view,
                    endpoint: None,
                    restore_failure: None,
                    problem,
                    bootstrap_size: None,
                    refused_as_corrupt: false,
                    created: Some(at(0)),
                }
            })
            .collect()
    }

    fn members() -> Vec<ObservedMember> {
        let mut members: Vec<_> = (0..3).map(fixtures::member).collect();
        members[2].healthy = false;
        members
    }

    #[test]
    fn a_member_on_the_new_template_not_serving_past_the_deadline_stalls_the_rollout() {
        let rolling_back = cluster("Rollback");
        let judge = |now| stalled(&rolling_back, Some("rev-2"), &pods(), Some(&members()), now);
        assert_eq!(judge(at(30)), None, "within the deadline");
        let found = judge(at(31)).unwrap_or_else(|| panic!("stalled"));
        assert_eq!(found.pod, "orders-2");
        assert!(found.roll_back);
        assert!(found.why.contains("ImagePullBackOff"), "{}", found.why);
        // Under Pause it is reported, not rolled back.
        let paused = stalled(
            &cluster("Pause"),
            Some("rev-2"),
            &pods(),
            Some(&members()),
            at(31),
        );
        assert_eq!(paused.map(|s| s.roll_back), Some(false));
    }

    #[test]
    fn members_that_serve_or_run_the_last_good_template_never_stall_a_rollout() {
        let cluster = cluster("Rollback");
        // Back in service on the new template: progress.
        let mut serving = pods();
        serving[2].view.ready = true;
        let healthy: Vec<_> = (0..3).map(fixtures::member).collect();
        assert_eq!(
            stalled(&cluster, Some("rev-2"), &serving, Some(&healthy), at(300)),
            None
        );
        // Ready, but etcd does not report it healthy: not back yet.
        assert!(stalled(&cluster, Some("rev-2"), &serving, Some(&members()), at(300)).is_some());
        // Ready and healthy, but on another minor line than the spec's
        // (an image holding another etcd than its tag says): no progress.
        let mut other = healthy.clone();
        other[2].version = Some(crate::etcd_version::EtcdVersion::new(3, 4, 23));
        let mut running = serving.clone();
        running[2].problem = None;
        let found = stalled(&cluster, Some("rev-2"), &running, Some(&other), at(300))
            .unwrap_or_else(|| panic!("stalled"));
        assert!(
            found.why.contains("etcd reports version 3.4.23"),
            "{}",
            found.why
        );
        // A member failing on the template that last ran everywhere is a
        // fault, not a rollout to undo.
        assert_eq!(
            stalled(&cluster, Some("rev-1"), &pods(), Some(&members()), at(300)),
            None
        );
        // The StatefulSet's controller has not reported the new revision.
        assert_eq!(
            stalled(&cluster, None, &pods(), Some(&members()), at(300)),
            None
        );
    }

    #[test]
    fn an_election_under_way_stalls_no_rollout() {
        let cluster = cluster("Rollback");
        let mut serving = pods();
        serving[2].view.ready = true;
        serving[2].problem = None;
        // Every member answers and none follows a live leader: an election
        // (the leader's pod just restarted), past orders-2's deadline.
        let mut electing: Vec<_> = (0..3).map(fixtures::member).collect();
        for member in &mut electing {
            member.healthy = false;
        }
        assert_eq!(
            stalled(&cluster, Some("rev-2"), &serving, Some(&electing), at(45)),
            None
        );
        // Leaderless for another deadline: no election, a stalled rollout.
        assert!(stalled(&cluster, Some("rev-2"), &serving, Some(&electing), at(61)).is_some());
        // One that does not even answer is no election's doing.
        electing[2].reachable = false;
        assert!(stalled(&cluster, Some("rev-2"), &serving, Some(&electing), at(45)).is_some());
        // The others follow a leader and orders-2 does not: stalled.
        assert!(stalled(&cluster, Some("rev-2"), &serving, Some(&members()), at(45)).is_some());
    }

    #[test]
    fn nothing_stalls_without_a_spec_to_go_back_to_or_once_rolled_back() {
        let mut unknown = cluster("Rollback");
        unknown.last_good = None;
        assert_eq!(
            stalled(&unknown, Some("rev-2"), &pods(), Some(&members()), at(300)),
            None
        );
        let mut same = cluster("Rollback");
        same.running.image = OLD.to_owned();
        assert_eq!(
            stalled(&same, Some("rev-2"), &pods(), Some(&members()), at(300)),
            None,
            "the spec asks for what ran last: a certificate renewal, say, is no rollout to undo"
        );
        let mut rolled = cluster("Rollback");
        rolled.rolled_back = Some(dkv_api::distributedkv::v1beta1::RolledBack {
            generation: 1,
            pod: "orders-2".to_owned(),
            reason: String::new(),
            at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(40)),
        });
        assert_eq!(
            stalled(&rolled, Some("rev-2"), &pods(), Some(&members()), at(300)),
            None
        );
    }
}
