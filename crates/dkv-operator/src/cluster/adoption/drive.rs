//! The passes that carry an adoption out: what the running cluster looks
//! like now ([`observe`]: the checks of [`preflight`] until dkv's first
//! member is in, then the [`takeover`] view of old and new members), the
//! plan's replicas and membership record that follow from it, and the one
//! change of this pass ([`execute`], after the children are applied).
//!
//! The membership record lists the old members (their etcd names and peer
//! URLs, as started) beside dkv's, with state `existing`: `member-init`
//! then starts a new member with `--initial-cluster-state=existing` and the
//! whole member list, which is what etcd asks of a member joining a running
//! cluster. A member is added to etcd before the StatefulSet gets the pod
//! that runs it (the next pass raises `replicas`), and a member removed
//! again leaves its volume behind, which is deleted before its ordinal is
//! added anew (its data belongs to a member etcd forgot).

use std::sync::Arc;
use std::time::Duration;

use dkv_api::distributedkv::v1beta1::{AdoptionPhase, AdoptionStatus, OldMemberStatus};
use dkv_etcd::{ClientTls, EndpointStatus, EtcdAdmin, Member, MemberId};
use dkv_member::record::{ClusterState, MembershipRecord, RecordedMember};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use tracing::info;

use super::preflight::{self, ReachUrl};
use super::takeover::{self, OldMember, OwnMember, TakeoverStep, TakeoverView};
use crate::cluster::context::{Context, publish_about};
use crate::cluster::dereference::Observed;
use crate::cluster::error::{Error, Result};
use crate::cluster::membership::Step;
use crate::cluster::membership::observe::ordinal_of_member;
use crate::cluster::outcome::{AppliedPass, EtcdContact, Outcome, Rotation, Work};
use crate::cluster::plan::{self, Plan};
use crate::cluster::stage::connected::Connected;
use crate::cluster::stage::validated::Validated;
use crate::cluster::validate::{DEFAULT_CATCH_UP_LIMIT, ValidatedCluster, ValidatedJoin};
use crate::events::{Event, EventType};
use crate::parts::naming;
use crate::parts::tls::{CA_CERT, TLS_CERT, TLS_KEY};

/// What the adoption saw this pass and what it does next.
pub struct Adopting {
    /// `status.adoption` after this pass.
    pub status: AdoptionStatus,
    /// Members the StatefulSet runs: dkv's members etcd lists.
    pub replicas: i32,
    /// The membership record: the old members and dkv's.
    pub record: MembershipRecord,
    /// The change of this pass, or why there is none.
    pub next: Next,
    /// The voters of the whole cluster (old and dkv's) have a healthy
    /// majority.
    pub quorum: bool,
    /// etcd's member list, as it answered.
    members: Vec<Member>,
    /// What reached the cluster's member list (membership changes go
    /// through it).
    changes: Option<Arc<dyn EtcdAdmin>>,
    /// Each member's status: `(member id, status)` of those that answered.
    statuses: Vec<(u64, EndpointStatus)>,
    /// When an old member leads: an admin for its client URL, and that
    /// URL (only the leader can hand leadership over, and its serving
    /// certificate names its own address).
    old_leader: Option<(Arc<dyn EtcdAdmin>, String)>,
}

/// The change of a pass, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// dkv does not join: what is wrong and the fix. Nothing changes.
    Refused(String),
    /// The cluster did not answer (dkv's members are in already).
    Unreachable(String),
    /// The take-over's step.
    Step(TakeoverStep),
}

impl Adopting {
    /// The pass's plan: dkv's members etcd lists, the record naming every
    /// member, no step of the membership planner's. `tls_serial`: the
    /// current member certificate's serial, with peer or client TLS.
    pub fn plan(&self, tls_serial: Option<String>) -> Plan {
        Plan::new(
            self.replicas,
            0,
            self.record.clone(),
            Step::Converged,
            tls_serial,
        )
    }

    /// The phase status reports.
    pub fn phase(&self) -> AdoptionPhase {
        self.status.phase.unwrap_or(AdoptionPhase::TakingOver)
    }
}

/// Whether the take-over governs `observed`'s cluster: it joins a running
/// cluster whose old members may still be there.
pub fn under_way(cluster: &ValidatedCluster, observed: &Observed) -> bool {
    cluster.join.is_some()
        && !matches!(
            observed.recorded.adoption.as_ref().and_then(|a| a.phase),
            Some(AdoptionPhase::Adopted | AdoptionPhase::BackedOut)
        )
}

/// Whether deleting `dkv` must first take dkv's members out of the running
/// cluster it joined: its adoption started and did not end. (A join that
/// was refused added none.)
pub fn must_back_out(dkv: &dkv_api::DistributedKV) -> bool {
    dkv.spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.join.is_some())
        && matches!(
            dkv.status
                .as_ref()
                .and_then(|s| s.adoption.as_ref())
                .and_then(|a| a.phase),
            Some(
                AdoptionPhase::TakingOver
                    | AdoptionPhase::TakenOver
                    | AdoptionPhase::OldMembersLeaving
                    | AdoptionPhase::BackingOut
            )
        )
}

/// Observes the running cluster and decides this pass's change; with
/// `back_out` (the DistributedKV is being deleted), towards leaving it as
/// it was found.
pub async fn observe(
    validated: &Validated,
    connected: &Connected,
    observed: &Observed,
    (join, back_out): (&ValidatedJoin, bool),
    now: jiff::Timestamp,
    ctx: &Context,
) -> Result<Adopting> {
    let cluster = &validated.cluster;
    let identity = join_identity(cluster, join, ctx).await?;
    // With authentication on, the running cluster's root credentials: the
    // copy the cluster's root Secret holds (see `security::auth`).
    let user = connected.credentials.user().cloned();
    let reach = move |url: &str| -> Arc<dyn EtcdAdmin> {
        let tls = identity.as_ref().map(|tls| ClientTls {
            server_name: host_of(url).to_owned(),
            ..tls.clone()
        });
        ctx.etcd
            .connect(&[url.to_owned()], tls.as_ref(), user.as_ref())
    };
    let previous = observed.recorded.adoption.clone().unwrap_or_default();
    let listed = member_list(&reach, join, connected).await;
    let (changes, members) = match listed {
        Ok(listed) => listed,
        Err(error) => {
            let own_in = observed.record.as_ref().is_some_and(|r| {
                r.members
                    .iter()
                    .any(|m| naming::ordinal_of(&cluster.name, &m.name).is_some())
            });
            let message = format!(
                "the running cluster does not answer at {}: {error}",
                join.endpoints.join(", ")
            );
            let next = if own_in {
                Next::Unreachable(message)
            } else {
                Next::Refused(message)
            };
            return Ok(unanswered(observed, previous, next));
        }
    };
    let own: Vec<(u32, &Member)> = members
        .iter()
        .filter_map(|m| {
            let ordinal = ordinal_of_member(&cluster.name, m)?;
            Some((u32::try_from(ordinal).ok()?, m))
        })
        .collect();
    if own.is_empty()
        && !back_out
        && let Err(refusal) = first_join_check(cluster, &reach, join, &members).await
    {
        return Ok(refused(cluster, observed, previous, members, refusal));
    }
    let statuses = statuses(&reach, &members, cluster, connected, validated).await;
    let mut view = takeover_view(cluster, join, &members, &statuses, &previous, now);
    view.back_out = back_out;
    let step = takeover::next_step(&view);
    let mut status = adoption_status(cluster, &members, &statuses, &previous, &view, &step);
    status.learner_since = learner_since(&view, &previous, &step, now);
    let quorum = whole_quorum(&view);
    let old_leader = live_leader(&statuses)
        .and_then(|id| members.iter().find(|m| m.id.0 == id))
        .filter(|m| ordinal_of_member(&cluster.name, m).is_none())
        .and_then(|m| {
            let url = statuses
                .iter()
                .find(|(id, _)| *id == m.id.0)
                .map(|(_, s)| s.endpoint.clone())
                .filter(|e| !e.is_empty())
                .or_else(|| m.client_urls.first().cloned())?;
            Some((reach(&url), url))
        });
    Ok(Adopting {
        old_leader,
        replicas: replicas_of(&own),
        record: record_of(cluster, &members, &own),
        next: Next::Step(step),
        quorum,
        status,
        members,
        changes: Some(changes),
        statuses,
    })
}

/// The client certificate `spec.bootstrap.join.clientSecretRef` names, if
/// any (its `server_name` is set per URL).
async fn join_identity(
    cluster: &ValidatedCluster,
    join: &ValidatedJoin,
    ctx: &Context,
) -> Result<Option<ClientTls>> {
    let Some(name) = &join.client_secret else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let secret = secrets.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.clone(),
        source,
    })?;
    const FIX: &str = "spec.bootstrap.join.clientSecretRef names a Secret with tls.crt and tls.key (a client certificate the running members accept) and ca.crt (the CA of their serving certificates)";
    let text = |key: &'static str| {
        secret
            .as_ref()
            .and_then(|s| s.data.as_ref()?.get(key))
            .and_then(|bytes| String::from_utf8(bytes.0.clone()).ok())
            .ok_or_else(|| Error::SecretInvalid {
                secret: name.clone(),
                key,
                fix: FIX,
            })
    };
    Ok(Some(ClientTls {
        ca_pem: text(CA_CERT)?,
        cert_pem: text(TLS_CERT)?,
        key_pem: text(TLS_KEY)?,
        server_name: String::new(),
    }))
}

/// The host of a URL (`https://10.0.0.1:2379` -> `10.0.0.1`): the name a
/// member's serving certificate is checked against.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host),
    }
}

/// etcd's member list, through the first of the join endpoints that
/// answers, else through dkv's own members; with the admin that answered.
async fn member_list(
    reach: ReachUrl<'_>,
    join: &ValidatedJoin,
    connected: &Connected,
) -> std::result::Result<(Arc<dyn EtcdAdmin>, Vec<Member>), String> {
    let mut last = String::new();
    for endpoint in &join.endpoints {
        let admin = reach(endpoint);
        match admin.member_list().await {
            Ok(members) => return Ok((admin, members)),
            Err(error) => last = format!("{endpoint}: {error}"),
        }
    }
    if let Some(admin) = &connected.admin {
        match admin.member_list().await {
            Ok(members) => return Ok((admin.clone(), members)),
            Err(error) => last = format!("{last}; dkv's members: {error}"),
        }
    }
    Err(last)
}

/// Before dkv's first member goes in: the preflight, and no member whose
/// name or peer URL dkv would give one of its own.
async fn first_join_check(
    cluster: &ValidatedCluster,
    reach: ReachUrl<'_>,
    join: &ValidatedJoin,
    members: &[Member],
) -> std::result::Result<(), String> {
    let external = preflight::observe(reach, &join.endpoints)
        .await
        .map_err(|refusal| refusal.to_string())?;
    preflight::check(&external, cluster.version).map_err(|refusal| refusal.to_string())?;
    if let Some(odd) = members.iter().find(|m| m.peer_urls.len() != 1) {
        return Err(format!(
            "member {} has {} peer URLs; dkv joins clusters whose members have one each (update it with etcdctl member update to one URL)",
            odd.name,
            odd.peer_urls.len()
        ));
    }
    Ok(())
}

/// The status of every member: the old ones at their client URLs, dkv's
/// at their pods' (as member IDs, with what answered).
async fn statuses(
    reach: ReachUrl<'_>,
    members: &[Member],
    cluster: &ValidatedCluster,
    connected: &Connected,
    validated: &Validated,
) -> Vec<(u64, EndpointStatus)> {
    let asked = futures::future::join_all(members.iter().map(|member| async move {
        let status = match ordinal_of_member(&cluster.name, member) {
            Some(ordinal) => {
                let endpoint = validated
                    .pods
                    .iter()
                    .find(|p| p.view.ordinal == ordinal)
                    .and_then(|p| p.endpoint.clone());
                match (&connected.admin, endpoint) {
                    (Some(admin), Some(endpoint)) => admin.status(&endpoint).await.ok(),
                    _ => None,
                }
            }
            None => preflight::status_of(reach, member).await.ok(),
        };
        status.map(|s| (member.id.0, s))
    }))
    .await;
    asked.into_iter().flatten().collect()
}

/// The leader every member that answered follows and that says so itself.
fn live_leader(statuses: &[(u64, EndpointStatus)]) -> Option<u64> {
    statuses
        .iter()
        .find(|(id, s)| s.leader.0 == *id)
        .map(|(id, _)| *id)
}

fn takeover_view(
    cluster: &ValidatedCluster,
    join: &ValidatedJoin,
    members: &[Member],
    statuses: &[(u64, EndpointStatus)],
    previous: &AdoptionStatus,
    now: jiff::Timestamp,
) -> TakeoverView {
    let leader = live_leader(statuses);
    let status_of = |id: u64| statuses.iter().find(|(m, _)| *m == id).map(|(_, s)| s);
    let healthy = |id: u64| {
        status_of(id)
            .is_some_and(|s| s.errors.is_empty() && leader.is_some_and(|l| s.leader.0 == l))
    };
    let leader_index = leader.and_then(status_of).map_or(0, |s| s.raft_index);
    let since = previous.learner_since.as_ref().map(|t| t.0);
    let learner_for = since.map_or(Duration::ZERO, |since| {
        now.duration_since(since).unsigned_abs()
    });
    let mut view = TakeoverView {
        old: Vec::new(),
        own: Vec::new(),
        leader,
        size: u32::try_from(cluster.size).unwrap_or(0),
        old_may_leave: join.old_members_leave,
        back_out: false,
        catch_up_limit: join.catch_up_limit,
    };
    for member in members {
        let id = member.id.0;
        match ordinal_of_member(&cluster.name, member).and_then(|o| u32::try_from(o).ok()) {
            Some(ordinal) => view.own.push(OwnMember {
                ordinal,
                id,
                learner: member.is_learner,
                healthy: healthy(id),
                // etcd promotes a learner whose log is within a tenth of
                // the leader's.
                caught_up: status_of(id).is_some_and(|s| {
                    s.raft_index.saturating_mul(10) >= leader_index.saturating_mul(9)
                }),
                learner_for,
            }),
            None => view.old.push(OldMember {
                id,
                name: member.name.clone(),
                healthy: healthy(id),
            }),
        }
    }
    view
}

/// Whether the voters of the whole cluster have a healthy majority.
fn whole_quorum(view: &TakeoverView) -> bool {
    let voters = view.old.len() + view.own.iter().filter(|m| !m.learner).count();
    let healthy = view.old.iter().filter(|m| m.healthy).count()
        + view.own.iter().filter(|m| !m.learner && m.healthy).count();
    voters > 0 && healthy * 2 > voters
}

/// When the learner of dkv's that is in now was added: as recorded, or
/// now for one added this pass.
fn learner_since(
    view: &TakeoverView,
    previous: &AdoptionStatus,
    step: &TakeoverStep,
    now: jiff::Timestamp,
) -> Option<Time> {
    if matches!(step, TakeoverStep::AddLearner { .. }) {
        return Some(Time(now));
    }
    if !view.own.iter().any(|m| m.learner) {
        return None;
    }
    previous.learner_since.clone().or(Some(Time(now)))
}

fn replicas_of(own: &[(u32, &Member)]) -> i32 {
    own.iter()
        .map(|(ordinal, _)| i32::try_from(*ordinal).unwrap_or(i32::MAX - 1) + 1)
        .max()
        .unwrap_or(0)
}

/// The record the member pods read: every member of the running cluster,
/// the old ones as started, so a new member joins with all of them.
fn record_of(
    cluster: &ValidatedCluster,
    members: &[Member],
    own: &[(u32, &Member)],
) -> MembershipRecord {
    let old = members
        .iter()
        .filter(|m| own.iter().all(|(_, o)| o.id != m.id))
        .filter_map(|m| {
            Some(RecordedMember {
                name: m.name.clone(),
                peer_url: m.peer_urls.first()?.clone(),
                started: true,
                replacement: None,
            })
        });
    let ours = own.iter().map(|(ordinal, m)| {
        plan::recorded_member(
            cluster,
            i32::try_from(*ordinal).unwrap_or(0),
            m.has_started(),
        )
    });
    MembershipRecord {
        contract: dkv_member::contract::VERSION,
        state: ClusterState::Existing,
        members: old.chain(ours).collect(),
        epoch: None,
        recover_from: None,
    }
}

/// `status.adoption` for a pass that decided `step`.
fn adoption_status(
    cluster: &ValidatedCluster,
    members: &[Member],
    statuses: &[(u64, EndpointStatus)],
    previous: &AdoptionStatus,
    view: &TakeoverView,
    step: &TakeoverStep,
) -> AdoptionStatus {
    let own_voters = view.own.iter().filter(|m| !m.learner).count();
    let name = |ordinal: u32| naming::member(&cluster.name, i32::try_from(ordinal).unwrap_or(0));
    let (phase, message) = match step {
        TakeoverStep::AddLearner { ordinal } => (
            AdoptionPhase::TakingOver,
            format!(
                "adding {} as a learner ({} of {} of dkv's members are voters)",
                name(*ordinal),
                own_voters,
                view.size
            ),
        ),
        TakeoverStep::Promote { ordinal, .. } => (
            AdoptionPhase::TakingOver,
            format!("promoting {}: it has caught up", name(*ordinal)),
        ),
        TakeoverStep::RemoveOwn { ordinal, .. } if view.back_out => (
            AdoptionPhase::BackingOut,
            format!(
                "the DistributedKV is being deleted before it was adopted: removing {} from the running cluster, which keeps the members it had",
                name(*ordinal)
            ),
        ),
        TakeoverStep::MoveLeader { .. } | TakeoverStep::Hold(_) if view.back_out => (
            AdoptionPhase::BackingOut,
            format!(
                "the DistributedKV is being deleted before it was adopted: {}",
                match step {
                    TakeoverStep::Hold(hold) => format!("waiting: {hold}"),
                    _ => "moving leadership to a member that was there before".to_owned(),
                }
            ),
        ),
        TakeoverStep::BackedOut => (
            AdoptionPhase::BackedOut,
            "dkv's members have left: the running cluster has the members it had".to_owned(),
        ),
        TakeoverStep::RemoveOwn { ordinal, .. } => (
            AdoptionPhase::TakingOver,
            format!(
                "removing {} again: it did not catch up within {} s; it is added anew",
                name(*ordinal),
                view.catch_up_limit.as_secs()
            ),
        ),
        TakeoverStep::Hold(hold) => (
            if own_voters < view.size as usize {
                AdoptionPhase::TakingOver
            } else {
                AdoptionPhase::OldMembersLeaving
            },
            format!("waiting: {hold}"),
        ),
        TakeoverStep::TakenOver => (
            AdoptionPhase::TakenOver,
            format!(
                "dkv's {} members are voters beside the {} members that were there before; set spec.bootstrap.join.oldMembers: Leave (kubectl dkv release-old-members {}) to remove those",
                own_voters,
                view.old.len(),
                cluster.name
            ),
        ),
        TakeoverStep::MoveLeader { to } => (
            AdoptionPhase::OldMembersLeaving,
            format!(
                "moving leadership to {}",
                view.own
                    .iter()
                    .find(|m| m.id == *to)
                    .map_or_else(|| format!("{to:x}"), |m| name(m.ordinal))
            ),
        ),
        TakeoverStep::RemoveOld { name: old, .. } => (
            AdoptionPhase::OldMembersLeaving,
            format!("removing {old}, which was there before dkv"),
        ),
        TakeoverStep::Adopted => (
            AdoptionPhase::Adopted,
            "only dkv's members are left: the processes of the members that were there before may be stopped".to_owned(),
        ),
    };
    let mut old_members: Vec<OldMemberStatus> = view
        .old
        .iter()
        .map(|m| OldMemberStatus {
            name: m.name.clone(),
            id: format!("{:x}", m.id),
            peer_urls: members
                .iter()
                .find(|l| l.id.0 == m.id)
                .map(|l| l.peer_urls.clone())
                .unwrap_or_default(),
            healthy: m.healthy,
            removed: false,
        })
        .collect();
    // Those no longer listed were removed: their processes may be stopped.
    for gone in &previous.old_members {
        if old_members.iter().all(|m| m.id != gone.id) {
            old_members.push(OldMemberStatus {
                healthy: false,
                removed: true,
                ..gone.clone()
            });
        }
    }
    AdoptionStatus {
        phase: Some(phase),
        message: Some(message),
        old_members_left: i32::try_from(view.old.len()).unwrap_or(i32::MAX),
        cluster_id: statuses
            .iter()
            .map(|(_, s)| s.cluster_id)
            .find(|id| *id != 0)
            .map(|id| format!("{id:x}"))
            .or_else(|| previous.cluster_id.clone()),
        old_members,
        learner_since: None,
    }
}

/// A pass whose member list did not answer: the record and replicas as
/// they are, the old members as last seen.
fn unanswered(observed: &Observed, previous: AdoptionStatus, next: Next) -> Adopting {
    let message = match &next {
        Next::Refused(m) | Next::Unreachable(m) => m.clone(),
        Next::Step(_) => String::new(),
    };
    let phase = match next {
        Next::Refused(_) => AdoptionPhase::Refused,
        _ => previous.phase.unwrap_or(AdoptionPhase::TakingOver),
    };
    Adopting {
        replicas: observed
            .statefulset
            .as_ref()
            .and_then(|s| s.spec.replicas)
            .unwrap_or(0),
        record: observed.record.clone().unwrap_or(MembershipRecord {
            contract: dkv_member::contract::VERSION,
            state: ClusterState::Existing,
            members: Vec::new(),
            epoch: None,
            recover_from: None,
        }),
        next,
        quorum: false,
        status: AdoptionStatus {
            phase: Some(phase),
            message: Some(message),
            ..previous
        },
        members: Vec::new(),
        changes: None,
        statuses: Vec::new(),
        old_leader: None,
    }
}

/// A pass that refuses to join: nothing of dkv's runs.
fn refused(
    cluster: &ValidatedCluster,
    observed: &Observed,
    previous: AdoptionStatus,
    members: Vec<Member>,
    why: String,
) -> Adopting {
    let old_members = members
        .iter()
        .map(|m| OldMemberStatus {
            name: m.name.clone(),
            id: format!("{:x}", m.id.0),
            peer_urls: m.peer_urls.clone(),
            healthy: false,
            removed: false,
        })
        .collect();
    let mut adopting = unanswered(observed, previous, Next::Refused(why));
    adopting.status.old_members_left = i32::try_from(members.len()).unwrap_or(i32::MAX);
    adopting.status.old_members = old_members;
    adopting.replicas = 0;
    adopting.record = MembershipRecord {
        contract: dkv_member::contract::VERSION,
        state: ClusterState::Existing,
        members: Vec::new(),
        epoch: None,
        recover_from: None,
    };
    tracing::debug!(cluster = %cluster.name, "join refused");
    adopting
}

/// Carries out this pass's change, after the children were applied.
pub async fn execute(
    adopting: &Adopting,
    validated: &Validated,
    connected: &Connected,
    observed: &Observed,
    ctx: &Context,
) -> Result<Outcome> {
    let cluster = &validated.cluster;
    let step = match &adopting.next {
        Next::Refused(why) => {
            announce(cluster, EventType::Warning, "JoinRefused", why.clone(), ctx).await;
            return Ok(pass_outcome(Work::UnderWay));
        }
        Next::Unreachable(_) => return Ok(pass_outcome(Work::UnderWay)),
        Next::Step(step) => step,
    };
    let Some(changes) = &adopting.changes else {
        return Ok(pass_outcome(Work::UnderWay));
    };
    let etcd_error = |step: &'static str, member: String| {
        move |source| Error::Etcd {
            step,
            member,
            source,
        }
    };
    let member_name =
        |ordinal: u32| naming::member(&cluster.name, i32::try_from(ordinal).unwrap_or(0));
    match step {
        TakeoverStep::AddLearner { ordinal } => {
            let ordinal_i32 = i32::try_from(*ordinal).unwrap_or(0);
            let claim = naming::volume_claim(&cluster.name, ordinal_i32);
            if observed.claims.iter().any(|c| c.name_any() == claim) {
                // A member removed again left its data: etcd forgot it.
                let claims: Api<PersistentVolumeClaim> =
                    Api::namespaced(ctx.client.clone(), &cluster.namespace);
                match claims.delete(&claim, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(source) => {
                        return Err(Error::Delete {
                            kind: "PersistentVolumeClaim",
                            name: claim,
                            source,
                        });
                    }
                }
                info!(%claim, "deleted the volume a removed learner left");
                return Ok(pass_outcome(Work::UnderWay));
            }
            let peer = naming::member_peer_url(
                cluster.tls.peer_scheme(),
                &cluster.name,
                &cluster.namespace,
                ordinal_i32,
            );
            let added = changes
                .add_learner(std::slice::from_ref(&peer))
                .await
                .map_err(|source| match refused_for_authentication(&source) {
                    Some(message) => Error::JoinRefused { message },
                    None => etcd_error("add learner", member_name(*ordinal))(source),
                })?;
            info!(member = %member_name(*ordinal), id = %added.id, "joined the running cluster as a learner");
            announce(
                cluster,
                EventType::Normal,
                "LearnerJoined",
                format!(
                    "{} joined the running cluster as a learner ({peer}); it is promoted once it has caught up",
                    member_name(*ordinal)
                ),
                ctx,
            )
            .await;
        }
        TakeoverStep::Promote { ordinal, id } => {
            // Asked of the leader itself: a follower forwards a promotion to
            // the leader without the user, which etcd with authentication on
            // refuses until the forward times out (etcd-io/etcd#20757, in
            // 3.5 and 3.6 releases before the fix). dkv's own admin tries
            // each of its members in turn when one times out.
            let leader = match &adopting.old_leader {
                Some((admin, _)) => admin,
                None => connected.admin.as_ref().unwrap_or(changes),
            };
            leader
                .promote(MemberId(*id))
                .await
                .map_err(etcd_error("promote", member_name(*ordinal)))?;
            announce(
                cluster,
                EventType::Normal,
                "LearnerPromoted",
                format!("{} caught up and is a voter", member_name(*ordinal)),
                ctx,
            )
            .await;
        }
        TakeoverStep::RemoveOwn { ordinal, id } => {
            changes
                .remove(MemberId(*id))
                .await
                .map_err(etcd_error("remove member", member_name(*ordinal)))?;
            let limit = cluster
                .join
                .as_ref()
                .map_or(DEFAULT_CATCH_UP_LIMIT, |j| j.catch_up_limit);
            let (type_, reason, note) = own_member_removed(adopting, &member_name(*ordinal), limit);
            announce(cluster, type_, reason, note, ctx).await;
        }
        TakeoverStep::MoveLeader { to } => {
            move_leader(adopting, validated, connected, MemberId(*to), ctx).await?;
        }
        TakeoverStep::RemoveOld { id, name } => {
            // Through dkv's members, whose voters are all in by now.
            let admin = connected.admin.as_ref().unwrap_or(changes);
            admin
                .remove(MemberId(*id))
                .await
                .map_err(etcd_error("remove member", name.clone()))?;
            announce(
                cluster,
                EventType::Normal,
                "OldMemberRemoved",
                format!("{name} was removed from the cluster: its process may now be stopped"),
                ctx,
            )
            .await;
        }
        TakeoverStep::Hold(_) => return Ok(pass_outcome(Work::UnderWay)),
        TakeoverStep::TakenOver => return Ok(pass_outcome(Work::Settled)),
        TakeoverStep::BackedOut => {
            announce(
                cluster,
                EventType::Normal,
                "BackedOut",
                "dkv's members left the running cluster, which keeps the members it had".to_owned(),
                ctx,
            )
            .await;
            return Ok(pass_outcome(Work::Advanced));
        }
        TakeoverStep::Adopted => {
            announce(
                cluster,
                EventType::Normal,
                "Adopted",
                "only dkv's members are left; the cluster kept its ID, data and revisions"
                    .to_owned(),
                ctx,
            )
            .await;
            return Ok(pass_outcome(Work::Advanced));
        }
    }
    Ok(pass_outcome(Work::Advanced))
}

/// The Event for one of dkv's members removed from the running cluster:
/// leaving it as found while backing out, or a learner that did not catch
/// up in time.
fn own_member_removed(
    adopting: &Adopting,
    member: &str,
    catch_up_limit: Duration,
) -> (EventType, &'static str, String) {
    if adopting.phase() == AdoptionPhase::BackingOut {
        (
            EventType::Normal,
            "MemberLeft",
            format!(
                "{member} left the running cluster: the DistributedKV is being deleted before it was adopted"
            ),
        )
    } else {
        (
            EventType::Warning,
            "LearnerRemoved",
            format!(
                "{member} did not catch up within {} s (spec.bootstrap.join.catchUpTimeout) and was removed again; it is added anew",
                catch_up_limit.as_secs()
            ),
        )
    }
}

/// The fix, when the running cluster refused a membership change for want
/// of credentials: its authentication is on and the spec gives none (etcd
/// lists members, statuses and alarms to anyone; adding a member needs the
/// root role).
fn refused_for_authentication(error: &dkv_etcd::Error) -> Option<String> {
    let text = error.to_string();
    ["user name is empty", "permission denied", "invalid auth token"]
        .iter()
        .any(|sign| text.contains(sign))
        .then(|| {
            format!(
                "the running cluster has authentication on and refused to add a member ({text}): name a Secret with the username and password of a user with the root role in spec.bootstrap.join.credentialsSecretRef and set spec.auth.enabled: true"
            )
        })
}

/// Moves leadership from the member that leads (old or dkv's) to `to`:
/// only the leader can hand it over, so it is asked at its own URL.
async fn move_leader(
    adopting: &Adopting,
    validated: &Validated,
    connected: &Connected,
    to: MemberId,
    ctx: &Context,
) -> Result<()> {
    let cluster = &validated.cluster;
    let leader = live_leader(&adopting.statuses)
        .and_then(|id| adopting.members.iter().find(|m| m.id.0 == id));
    let unavailable = |message: &str| Error::Etcd {
        step: "move leader",
        member: leader.map(|m| m.name.clone()).unwrap_or_default(),
        source: dkv_etcd::Error::Unavailable {
            operation: "move leader",
            message: message.to_owned(),
        },
    };
    let leader = leader.ok_or_else(|| unavailable("no member leads"))?;
    let (admin, endpoint) = match ordinal_of_member(&cluster.name, leader) {
        Some(ordinal) => {
            let endpoint = validated
                .pods
                .iter()
                .find(|p| p.view.ordinal == ordinal)
                .and_then(|p| p.endpoint.clone())
                .ok_or_else(|| unavailable("the leader's pod has no IP"))?;
            let admin = connected
                .admin
                .clone()
                .ok_or_else(|| unavailable("dkv's members cannot be reached"))?;
            (admin, endpoint)
        }
        None => adopting
            .old_leader
            .clone()
            .ok_or_else(|| unavailable("the leader lists no client URL"))?,
    };
    admin
        .move_leader(&endpoint, to)
        .await
        .map_err(|source| Error::Etcd {
            step: "move leader",
            member: leader.name.clone(),
            source,
        })?;
    info!(from = %leader.name, %to, "moved leadership");
    announce(
        cluster,
        EventType::Normal,
        "LeadershipMoved",
        format!(
            "leadership moved from {} to one of dkv's members",
            leader.name
        ),
        ctx,
    )
    .await;
    Ok(())
}

async fn announce(
    cluster: &ValidatedCluster,
    type_: EventType,
    reason: &str,
    note: String,
    ctx: &Context,
) {
    publish_about(
        cluster,
        Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Adopt".to_owned(),
            secondary: None,
        },
        ctx,
    )
    .await;
}

fn pass_outcome(work: Work) -> Outcome {
    Outcome::Applied(AppliedPass {
        work,
        etcd: EtcdContact::Asked,
        rotation: Rotation::Idle,
        due_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::{host_of, refused_for_authentication};

    #[test]
    fn a_member_add_refused_for_want_of_credentials_names_the_fields_to_set() {
        let refused = dkv_etcd::Error::Refused {
            operation: "add learner",
            message: "etcdserver: user name is empty".to_owned(),
        };
        let message = refused_for_authentication(&refused).unwrap_or_default();
        assert!(
            message.contains("spec.bootstrap.join.credentialsSecretRef"),
            "{message}"
        );
        assert!(message.contains("spec.auth.enabled: true"), "{message}");
        assert!(message.contains("user name is empty"), "{message}");
        let other = dkv_etcd::Error::Refused {
            operation: "add learner",
            message: "etcdserver: too many learner members in cluster".to_owned(),
        };
        assert_eq!(refused_for_authentication(&other), None);
    }

    #[test]
    fn the_host_of_a_client_url_is_what_its_certificate_names() {
        assert_eq!(host_of("https://10.0.0.1:2379"), "10.0.0.1");
        assert_eq!(host_of("https://etcd-a.example:2379/"), "etcd-a.example");
        assert_eq!(host_of("https://[fd00::1]:2379"), "fd00::1");
        assert_eq!(host_of("http://127.252.0.1:2379"), "127.252.0.1");
    }
}
