//! The status a pass leaves when members' nodes are lost: where each member runs, the
//! `MemberNodeLost` fault and its place among the other Degraded reasons; and
//! what Progressing says of a downgrade.

use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::{DistributedKVStatus, MemberStatus, Phase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use super::derive;
use crate::cluster::backups::catalogue::BackupSummary;
use crate::cluster::maintenance::volumes::Volumes;
use crate::cluster::membership::fixtures;
use crate::cluster::membership::observe::MemberPod;
use crate::cluster::membership::{ObservedMember, Step, WaitReason};
use crate::cluster::pass::Pass;
use crate::cluster::plan::Plan;
use crate::cluster::recovery::lost_node::{LostMember, NodeLoss, Placement};
use crate::cluster::security::credentials::Credentials;
use crate::cluster::stage::connected::Connected;
use crate::cluster::stage::planned::{Gate, Planned};
use crate::cluster::stage::validated::Validated;
use crate::cluster::validate::ValidatedCluster;

fn at(text: &str) -> jiff::Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{e}"))
}

fn now() -> Time {
    Time(at("2026-11-26T09:00:00Z"))
}

/// What the tests vary of a pass that planned.
struct SeenStatus {
    cluster: ValidatedCluster,
    plan: Plan,
    members: Option<Vec<ObservedMember>>,
    pods: Vec<MemberPod>,
    placements: Vec<Placement>,
    lost: Vec<LostMember>,
}

impl SeenStatus {
    /// The stages of a pass that saw this.
    fn pass(&self) -> Pass {
        Pass {
            observed: Some(Default::default()),
            validated: Some(Validated {
                cluster: self.cluster.clone(),
                pods: self.pods.clone(),
                volumes: Volumes::default(),
                placements: self.placements.clone(),
                lost: self.lost.clone(),
                stranded: Vec::new(),
            }),
            connected: Some(Connected {
                credentials: Credentials::plaintext(),
                admin: None,
                endpoints: Vec::new(),
                members: self.members.clone(),
                alarms: None,
                corrupt: Vec::new(),
                agreement: Default::default(),
                downgrade: Default::default(),
            }),
            planned: Some(Planned {
                plan: self.plan.clone(),
                hibernation: Default::default(),
                operation: None,
                gate: Gate::Proceed,
                stalled: None,
            }),
            ..Pass::default()
        }
    }
}

/// `orders`, 3 members, as last seen formed; `lost_node` its
/// `spec.recovery.lostNode`.
fn formed(lost_node: serde_json::Value) -> (dkv_api::DistributedKV, SeenStatus) {
    let mut spec = json!({"size": 3, "image": "quay.io/coreos/etcd:v3.5.16"});
    if !lost_node.is_null() {
        spec["recovery"] = json!({"lostNode": lost_node});
    }
    let mut dkv: dkv_api::DistributedKV = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1beta1",
        "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u-1"},
        "spec": spec.clone(),
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    dkv.status = Some(DistributedKVStatus {
        phase: Some(Phase::Running),
        conditions: vec![Condition {
            type_: types::AVAILABLE.into(),
            status: "True".into(),
            reason: reasons::QUORUM_HEALTHY.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: now(),
        }],
        ..DistributedKVStatus::default()
    });
    let cluster = crate::cluster::validate::validated_for_tests(spec);
    let plan = crate::cluster::plan::plan(&cluster, None, None, &Default::default());
    let members = (0..3).map(fixtures::member).collect();
    let pods = (0..3)
        .map(|ordinal| MemberPod {
            view: fixtures::pod(ordinal),
            endpoint: None,
            restore_failure: None,
            problem: None,
            bootstrap_size: None,
            refused_as_corrupt: false,
            created: None,
        })
        .collect();
    let placements = (0..3)
        .map(|ordinal| Placement {
            ordinal,
            node: Some(format!("node-{}", ordinal + 1)),
            zone: Some(["zone-a", "zone-b", "zone-c"][ordinal as usize].to_owned()),
            loss: None,
        })
        .collect();
    let seen = SeenStatus {
        cluster,
        plan,
        members: Some(members),
        pods,
        placements,
        lost: Vec::new(),
    };
    (dkv, seen)
}

/// Member `ordinal`'s node is lost since `since`: etcd cannot reach the
/// member and its pod is not Ready.
fn lose(seen: &mut SeenStatus, ordinal: i32, since: &str) {
    if let Some(m) = seen
        .members
        .iter_mut()
        .flatten()
        .find(|m| m.ordinal == ordinal)
    {
        m.healthy = false;
        m.reachable = false;
        m.leader = false;
    }
    if let Some(p) = seen.pods.iter_mut().find(|p| p.view.ordinal == ordinal) {
        p.view.ready = false;
    }
    if let Some(p) = seen.placements.iter_mut().find(|p| p.ordinal == ordinal) {
        p.loss = Some(NodeLoss::NotReady("Unknown".into()));
    }
    seen.lost.push(LostMember {
        ordinal,
        node: format!("node-{}", ordinal + 1),
        loss: NodeLoss::NotReady("Unknown".into()),
        since: at(since),
    });
}

fn status(dkv: &dkv_api::DistributedKV, seen: &SeenStatus) -> DistributedKVStatus {
    derive(dkv, &seen.pass(), None, &BackupSummary::default(), &now())
        .unwrap_or_else(|| panic!("no status derived"))
}

fn degraded(status: &DistributedKVStatus) -> (String, String, String) {
    condition(status, types::DEGRADED)
}

/// `(status, reason, message)` of the condition `type_`.
fn condition(status: &DistributedKVStatus, type_: &str) -> (String, String, String) {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {:?}", status.conditions));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn member<'a>(status: &'a DistributedKVStatus, name: &str) -> &'a MemberStatus {
    status
        .members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no member {name} in {:?}", status.members))
}

#[test]
fn members_carry_their_node_and_zone() {
    let (dkv, seen) = formed(serde_json::Value::Null);
    let status = status(&dkv, &seen);
    let placed: Vec<_> = status
        .members
        .iter()
        .map(|m| {
            (
                m.node.as_deref(),
                m.zone.as_deref(),
                m.node_lost_since.is_some(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            (Some("node-1"), Some("zone-a"), false),
            (Some("node-2"), Some("zone-b"), false),
            (Some("node-3"), Some("zone-c"), false),
        ]
    );
    assert_eq!(degraded(&status).0, "False");
}

#[test]
fn a_member_on_a_lost_node_is_reported_with_its_node_since_when_and_what_to_do() {
    let (dkv, mut seen) = formed(serde_json::Value::Null);
    lose(&mut seen, 1, "2026-11-26T08:55:00Z");
    let status = status(&dkv, &seen);
    let (state, reason, message) = degraded(&status);
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("True", reasons::MEMBER_NODE_LOST)
    );
    for part in [
        "orders-1",
        "node-2",
        "2026-11-26T08:55:00Z",
        "Ready=Unknown",
        "kubectl delete node",
        "spec.recovery.lostNode.policy: Replace",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert_eq!(status.phase, Some(Phase::Degraded));
    let lost = member(&status, "orders-1");
    assert_eq!(lost.node.as_deref(), Some("node-2"));
    assert_eq!(lost.node_lost_since, Some(Time(at("2026-11-26T08:55:00Z"))));
    assert_eq!(member(&status, "orders-0").node_lost_since, None);
}

#[test]
fn with_replacement_opted_in_the_message_says_when_it_happens() {
    let (dkv, mut seen) = formed(json!({"policy": "Replace", "afterSeconds": 120}));
    lose(&mut seen, 2, "2026-11-26T08:59:00Z");
    let (_, reason, message) = degraded(&status(&dkv, &seen));
    assert_eq!(reason, reasons::MEMBER_NODE_LOST);
    assert!(
        message.contains("moves it off the node from 2026-11-26T09:01:00Z on"),
        "{message}"
    );
    assert!(!message.contains("kubectl delete node"), "{message}");
}

#[test]
fn a_lost_quorum_outranks_a_lost_node_which_outranks_an_unhealthy_member() {
    let (dkv, mut seen) = formed(serde_json::Value::Null);
    lose(&mut seen, 1, "2026-11-26T08:55:00Z");
    // Member 0 is unhealthy too, on a node that is fine.
    if let Some(m) = seen.members.iter_mut().flatten().find(|m| m.ordinal == 0) {
        m.healthy = false;
    }
    assert_eq!(degraded(&status(&dkv, &seen)).1, reasons::QUORUM_LOST);
    if let Some(m) = seen.members.iter_mut().flatten().find(|m| m.ordinal == 0) {
        m.healthy = true;
    }
    assert_eq!(degraded(&status(&dkv, &seen)).1, reasons::MEMBER_NODE_LOST);
    // The node is back, the member not serving yet.
    seen.lost.clear();
    assert_eq!(degraded(&status(&dkv, &seen)).1, reasons::MEMBER_UNHEALTHY);
}

#[test]
fn a_node_back_clears_the_fault_and_the_time_it_was_lost() {
    let (mut dkv, mut seen) = formed(serde_json::Value::Null);
    lose(&mut seen, 1, "2026-11-26T08:55:00Z");
    dkv.status = Some(status(&dkv, &seen));
    let (_, mut back) = formed(serde_json::Value::Null);
    back.placements = seen.placements.clone();
    for p in &mut back.placements {
        p.loss = None;
    }
    let status = status(&dkv, &back);
    assert_eq!(degraded(&status).0, "False");
    assert_eq!(member(&status, "orders-1").node_lost_since, None);
    assert_eq!(member(&status, "orders-1").node.as_deref(), Some("node-2"));
}

#[test]
fn a_downgrade_says_downgrading_at_each_etcd_step_and_quotes_a_refusal() {
    let (dkv, mut seen) = formed(serde_json::Value::Null);
    for m in seen.members.iter_mut().flatten() {
        m.version = Some(crate::etcd_version::EtcdVersion::new(3, 6, 16));
    }
    seen.plan.step = Step::Wait(WaitReason::DowngradeRefused {
        message: "etcdserver: invalid downgrade target version".to_owned(),
    });
    let (state, reason, message) = condition(&status(&dkv, &seen), types::PROGRESSING);
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("False", reasons::DOWNGRADE_REFUSED)
    );
    assert!(
        message.contains(
            "to 3.5.16: etcdserver: invalid downgrade target version; no member was touched"
        ),
        "{message}"
    );
    for step in [
        Step::EnableDowngrade {
            target: seen.cluster.version,
        },
        Step::Wait(WaitReason::DowngradeMigrating),
    ] {
        seen.plan.step = step;
        let (state, reason, message) = condition(&status(&dkv, &seen), types::PROGRESSING);
        assert_eq!(
            (state.as_str(), reason.as_str()),
            ("True", reasons::DOWNGRADING)
        );
        assert!(message.starts_with("downgrading to 3.5.16: "), "{message}");
    }
}

/// Every step the planner can take and every reason it can wait, one of
/// each. A new variant fails to compile in `named` until it is listed here.
fn every_step(cluster: &ValidatedCluster) -> Vec<Step> {
    use crate::cluster::membership::{Pinned, SnapshotPending};
    use dkv_api::distributedkv::v1beta1::OperationKind;

    fn named(step: &Step) {
        match step {
            Step::Begin(_)
            | Step::Finish(_)
            | Step::AddLearner { .. }
            | Step::SetReplicas(_)
            | Step::Promote { .. }
            | Step::MoveLeader { .. }
            | Step::RemoveMember { .. }
            | Step::DeleteVolume { .. }
            | Step::ReclaimSpace
            | Step::RestartPod { .. }
            | Step::EvictFromLostNode { .. }
            | Step::EnableDowngrade { .. }
            | Step::CancelDowngrade
            | Step::Wait(
                WaitReason::EtcdUnreachable
                | WaitReason::MemberUnhealthy { .. }
                | WaitReason::LearnerCatchingUp { .. }
                | WaitReason::PodNotReady { .. }
                | WaitReason::WouldBreakQuorum { .. }
                | WaitReason::UpgradeInProgress { .. }
                | WaitReason::RestartInProgress { .. }
                | WaitReason::PodTerminating { .. }
                | WaitReason::TemplatePending
                | WaitReason::NoMembersRequested
                | WaitReason::QuorumLost { .. }
                | WaitReason::RecoveryInProgress { .. }
                | WaitReason::RestoreInProgress
                | WaitReason::DowngradeRefused { .. }
                | WaitReason::DowngradeMigrating
                | WaitReason::SnapshotBefore37(_),
            )
            | Step::Converged => {}
        }
    }

    let pinned = Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    };
    let waits = [
        WaitReason::EtcdUnreachable,
        WaitReason::MemberUnhealthy { ordinal: 1 },
        WaitReason::LearnerCatchingUp { ordinal: 3 },
        WaitReason::PodNotReady { ordinal: 2 },
        WaitReason::WouldBreakQuorum {
            healthy: 1,
            needed: 2,
        },
        WaitReason::UpgradeInProgress { ordinal: 2 },
        WaitReason::RestartInProgress { ordinal: 2 },
        WaitReason::PodTerminating { ordinal: 2 },
        WaitReason::TemplatePending,
        WaitReason::NoMembersRequested,
        WaitReason::QuorumLost {
            reachable: 1,
            needed: 2,
        },
        WaitReason::RecoveryInProgress { ordinal: 0 },
        WaitReason::RestoreInProgress,
        WaitReason::DowngradeRefused {
            message: "etcdserver: invalid downgrade target version".to_owned(),
        },
        WaitReason::DowngradeMigrating,
        WaitReason::SnapshotBefore37(SnapshotPending {
            ordinal: 1,
            applied: Some(100),
            needed: Some(10_100),
        }),
        WaitReason::SnapshotBefore37(SnapshotPending {
            ordinal: 1,
            applied: None,
            needed: None,
        }),
    ];
    let steps: Vec<Step> = [
        Step::Begin(pinned),
        Step::Finish(pinned),
        Step::AddLearner { ordinal: 3 },
        Step::SetReplicas(4),
        Step::Promote {
            id: 0x8e9e_05c5_2164_694d,
            ordinal: 3,
        },
        Step::MoveLeader {
            from: 0x8e9e_05c5_2164_694d,
            from_ordinal: 0,
            to: 0x91bc_3c39_8fb3_c146,
        },
        Step::RemoveMember {
            id: 0x8e9e_05c5_2164_694d,
            ordinal: 2,
        },
        Step::DeleteVolume { ordinal: 2 },
        Step::ReclaimSpace,
        Step::RestartPod { ordinal: 1 },
        Step::EvictFromLostNode {
            ordinal: 1,
            pod_uid: Some("u-1".to_owned()),
            claim_uid: Some("u-2".to_owned()),
        },
        Step::EvictFromLostNode {
            ordinal: 1,
            pod_uid: None,
            claim_uid: None,
        },
        Step::EnableDowngrade {
            target: cluster.version,
        },
        Step::CancelDowngrade,
        Step::Converged,
    ]
    .into_iter()
    .chain(waits.into_iter().map(Step::Wait))
    .collect();
    steps.iter().for_each(named);
    steps
}

/// Where `message` shows a Rust rendering rather than words: `Some(`,
/// `None`, a struct's braces, or a CamelCase name followed by `(` or ` {`
/// or alone in parentheses.
fn rust_in(message: &str) -> Option<String> {
    for marker in ["Some(", "None", "{ ", " }"] {
        if message.contains(marker) {
            return Some(marker.to_owned());
        }
    }
    let mut rest = message;
    let mut before = None;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric()) {
        before = rest[..start].chars().last().or(before);
        let word_len = rest[start..]
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        let after = &rest[start + word_len..];
        let camel = word.starts_with(|c: char| c.is_ascii_uppercase())
            && word.chars().skip(1).any(|c| c.is_ascii_uppercase())
            && word.chars().any(|c| c.is_ascii_lowercase());
        if camel
            && (after.starts_with('(')
                || after.starts_with(" {")
                || (before == Some('(') && after.starts_with(')')))
        {
            return Some(word.to_owned());
        }
        before = word.chars().last();
        rest = after;
    }
    None
}

#[test]
fn every_condition_message_of_every_step_and_operation_is_words() {
    use dkv_api::distributedkv::v1beta1::{Operation, OperationKind};

    let kinds = [
        OperationKind::AddLearner,
        OperationKind::PromoteLearner,
        OperationKind::RemoveMember,
        OperationKind::UpgradeMember,
        OperationKind::ReplaceMember,
        OperationKind::RecoverQuorum,
        OperationKind::RestoreFromBackup,
        OperationKind::RenewCertificate,
        OperationKind::RestartMember,
        OperationKind::RelocateMember,
    ];
    let (dkv, mut seen) = formed(serde_json::Value::Null);
    let mut checked = 0;
    for step in every_step(&seen.cluster) {
        for kind in kinds.iter().copied().map(Some).chain([None]) {
            seen.plan.step = step.clone();
            let mut pass = seen.pass();
            if let Some(planned) = pass.planned.as_mut() {
                planned.operation = kind.map(|kind| Operation {
                    kind,
                    target: "orders-2".to_owned(),
                    started_at: now(),
                });
            }
            let status = derive(&dkv, &pass, None, &BackupSummary::default(), &now())
                .unwrap_or_else(|| panic!("no status derived"));
            for c in &status.conditions {
                assert!(
                    rust_in(&c.message).is_none(),
                    "{} of {step:?} under {kind:?} shows {:?}: {}",
                    c.type_,
                    rust_in(&c.message),
                    c.message
                );
                checked += 1;
            }
        }
    }
    // The check itself catches what it is for.
    for rendered in [
        "UpgradeMember of orders-2 in progress: waiting (UpgradeInProgress { ordinal: 2 })",
        "next step: SetReplicas(4)",
        "waiting (TemplatePending)",
    ] {
        assert!(rust_in(rendered).is_some(), "{rendered}");
    }
    assert!(checked > 400, "{checked} messages checked");
}

#[test]
fn an_operation_in_flight_reads_as_what_it_does_and_what_it_waits_for() {
    use dkv_api::distributedkv::v1beta1::{Operation, OperationKind};

    let (dkv, mut seen) = formed(serde_json::Value::Null);
    seen.plan.step = Step::Wait(WaitReason::UpgradeInProgress { ordinal: 2 });
    let mut pass = seen.pass();
    if let Some(planned) = pass.planned.as_mut() {
        planned.operation = Some(Operation {
            kind: OperationKind::UpgradeMember,
            target: "orders-2".to_owned(),
            started_at: now(),
        });
    }
    let status = derive(&dkv, &pass, None, &BackupSummary::default(), &now())
        .unwrap_or_else(|| panic!("no status derived"));
    let (_, _, message) = condition(&status, types::PROGRESSING);
    assert_eq!(
        message,
        "restarting member orders-2 on the spec's etcd version; waiting: member orders-2 restarted on the new version and is not serving yet"
    );
}
