//! An in-memory etcd cluster for unit tests of the operator's decisions.
//!
//! It refuses what real etcd refuses, with the same error kinds: membership
//! changes while the cluster is not yet healthy (strict reconfiguration),
//! promoting a learner that has not caught up, removing a member when the
//! rest could not keep quorum, leadership transfer from a non-leader. Every
//! call is recorded so tests can assert the exact sequence of steps.
//!
//! It also holds keys with a revision and a history ([`crate::EtcdData`]):
//! watches from a revision (refused once compacted past it, as etcd does),
//! and changes written again, one revision per source revision.

mod data;

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;

use crate::admin::{EtcdAdmin, SnapshotStream};
use crate::error::{Error, Result};
use crate::model::{Alarm, DowngradeAction, EndpointStatus, Member, MemberId};

#[derive(Debug, Clone)]
struct FakeMember {
    member: Member,
    healthy: bool,
    raft_index: u64,
    version: String,
}

#[derive(Debug, Default)]
struct State {
    members: Vec<FakeMember>,
    leader: Option<MemberId>,
    next_id: u64,
    /// Whether etcd would accept a membership change now (every member has
    /// been connected for a while).
    reconfig_ready: bool,
    alarms: Vec<Alarm>,
    calls: Vec<String>,
    db: Vec<u8>,
    /// The `MAJOR.MINOR` an enabled downgrade goes to.
    downgrade_target: Option<String>,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct FakeEtcd {
    state: Mutex<State>,
    /// The keys and their history ([`crate::EtcdData`]).
    data: Mutex<data::FakeData>,
}

fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

impl FakeEtcd {
    /// A healthy cluster of `names`, each with client URL
    /// `http://<name>:2379`; the first member leads.
    pub fn with_members(names: &[&str], version: &str) -> Self {
        let fake = Self::default();
        {
            let mut state = fake.lock();
            for name in names {
                state.next_id += 1;
                let id = MemberId(0x1000 + state.next_id);
                state.members.push(FakeMember {
                    member: Member {
                        id,
                        name: (*name).to_owned(),
                        peer_urls: vec![format!("http://{name}:2380")],
                        client_urls: vec![format!("http://{name}:2379")],
                        is_learner: false,
                    },
                    healthy: true,
                    raft_index: 100,
                    version: version.to_owned(),
                });
            }
            state.leader = state.members.first().map(|m| m.member.id);
            state.reconfig_ready = true;
            state.db = b"fake etcd snapshot".to_vec();
        }
        fake
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every call made so far, e.g. `"promote 1003"`.
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub fn members(&self) -> Vec<Member> {
        self.lock()
            .members
            .iter()
            .map(|m| m.member.clone())
            .collect()
    }

    pub fn leader(&self) -> Option<MemberId> {
        self.lock().leader
    }

    /// Marks a member up or down (a killed process, a network cut).
    pub fn set_healthy(&self, name: &str, healthy: bool) {
        let mut state = self.lock();
        if let Some(m) = state.members.iter_mut().find(|m| m.member.name == name) {
            m.healthy = healthy;
        }
        if !healthy {
            // A freshly disturbed cluster refuses reconfiguration for a while.
            state.reconfig_ready = false;
        }
        let leader_down = state
            .leader
            .and_then(|l| state.members.iter().find(|m| m.member.id == l))
            .is_none_or(|m| !m.healthy);
        if leader_down {
            let voters = state
                .members
                .iter()
                .filter(|m| !m.member.is_learner)
                .count();
            let healthy_voters: Vec<MemberId> = state
                .members
                .iter()
                .filter(|m| !m.member.is_learner && m.healthy)
                .map(|m| m.member.id)
                .collect();
            state.leader = (healthy_voters.len() >= quorum(voters))
                .then(|| healthy_voters.first().copied())
                .flatten();
        }
    }

    /// Lets strict reconfiguration pass again (time has passed).
    pub fn settle(&self) {
        self.lock().reconfig_ready = true;
    }

    /// A (learner) member starts and catches up with the leader's log.
    pub fn start_and_catch_up(&self, peer_url: &str, name: &str) {
        let mut state = self.lock();
        let leader_index = leader_index(&state);
        if let Some(m) = state
            .members
            .iter_mut()
            .find(|m| m.member.peer_urls.iter().any(|u| u == peer_url))
        {
            m.member.name = name.to_owned();
            m.member.client_urls = vec![format!("http://{name}:2379")];
            m.healthy = true;
            m.raft_index = leader_index;
        }
    }

    pub fn raise_alarm(&self, alarm: Alarm) {
        self.lock().alarms.push(alarm);
    }

    /// Sets the binary version member `name` runs (its pod restarted on
    /// another image).
    pub fn set_version(&self, name: &str, version: &str) {
        let mut state = self.lock();
        if let Some(m) = state.members.iter_mut().find(|m| m.member.name == name) {
            m.version = version.to_owned();
        }
    }

    fn record(&self, call: String) {
        self.lock().calls.push(call);
    }
}

/// The newest raft index any member has: the leader's.
fn leader_index(state: &State) -> u64 {
    state
        .members
        .iter()
        .map(|m| m.raft_index)
        .max()
        .unwrap_or(0)
}

fn find(state: &State, id: MemberId) -> Result<usize> {
    state
        .members
        .iter()
        .position(|m| m.member.id == id)
        .ok_or(Error::MemberNotFound {
            member: id.to_string(),
        })
}

fn by_endpoint<'a>(
    state: &'a State,
    endpoint: &str,
    operation: &'static str,
) -> Result<&'a FakeMember> {
    let member = state
        .members
        .iter()
        .find(|m| m.member.client_urls.iter().any(|u| u == endpoint))
        .ok_or_else(|| Error::Unavailable {
            operation,
            message: format!("no member serves {endpoint}"),
        })?;
    if member.healthy {
        Ok(member)
    } else {
        Err(Error::Unavailable {
            operation,
            message: format!("{endpoint} does not answer"),
        })
    }
}

/// `MAJOR.MINOR` of a version string (`3.6.16`, `3.6`).
fn minor_of(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The cluster version: the oldest minor any member runs.
fn cluster_minor(state: &State) -> (u32, u32) {
    state
        .members
        .iter()
        .filter_map(|m| minor_of(&m.version))
        .min()
        .unwrap_or((3, 5))
}

/// What a member running `version` reports as its storage version: none
/// before 3.6; the downgrade's target while one is enabled (the fake
/// rewrites its data at once); else its own minor.
fn storage_version(state: &State, version: &str) -> String {
    match minor_of(version) {
        Some(minor) if minor >= (3, 6) => match &state.downgrade_target {
            Some(target) => format!("{target}.0"),
            None => format!("{}.{}.0", minor.0, minor.1),
        },
        _ => String::new(),
    }
}

fn require_quorum(state: &State, operation: &'static str) -> Result<()> {
    let voters = state
        .members
        .iter()
        .filter(|m| !m.member.is_learner)
        .count();
    let healthy = state
        .members
        .iter()
        .filter(|m| !m.member.is_learner && m.healthy)
        .count();
    if healthy < quorum(voters) || state.leader.is_none() {
        return Err(Error::Unavailable {
            operation,
            message: "etcdserver: no leader".to_owned(),
        });
    }
    Ok(())
}

#[async_trait]
impl EtcdAdmin for FakeEtcd {
    async fn member_list(&self) -> Result<Vec<Member>> {
        self.record("member list".to_owned());
        let state = self.lock();
        require_quorum(&state, "member list")?;
        Ok(state.members.iter().map(|m| m.member.clone()).collect())
    }

    async fn add_learner(&self, peer_urls: &[String]) -> Result<Member> {
        self.record(format!("add learner {}", peer_urls.join(",")));
        let mut state = self.lock();
        require_quorum(&state, "member add")?;
        if !state.reconfig_ready || state.members.iter().any(|m| !m.healthy) {
            return Err(Error::NotHealthyYet {
                operation: "member add",
                message: "etcdserver: unhealthy cluster".to_owned(),
            });
        }
        if state.members.iter().any(|m| m.member.is_learner) {
            return Err(Error::Refused {
                operation: "member add",
                message: "etcdserver: too many learner members in cluster".to_owned(),
            });
        }
        if state
            .members
            .iter()
            .any(|m| m.member.peer_urls.iter().any(|u| peer_urls.contains(u)))
        {
            return Err(Error::Refused {
                operation: "member add",
                message: "etcdserver: Peer URLs already exists".to_owned(),
            });
        }
        state.next_id += 1;
        let member = Member {
            id: MemberId(0x1000 + state.next_id),
            name: String::new(),
            peer_urls: peer_urls.to_vec(),
            client_urls: Vec::new(),
            is_learner: true,
        };
        let version = state
            .members
            .first()
            .map(|m| m.version.clone())
            .unwrap_or_default();
        state.members.push(FakeMember {
            member: member.clone(),
            healthy: false,
            raft_index: 0,
            version,
        });
        Ok(member)
    }

    async fn promote(&self, id: MemberId) -> Result<()> {
        self.record(format!("promote {id}"));
        let mut state = self.lock();
        require_quorum(&state, "member promote")?;
        let index = find(&state, id)?;
        let leader_index = leader_index(&state);
        let member = &mut state.members[index];
        if !member.member.is_learner {
            return Err(Error::Refused {
                operation: "member promote",
                message: "etcdserver: can only promote a learner member".to_owned(),
            });
        }
        // etcd promotes only a learner within 10% of the leader's log.
        if !member.healthy || member.raft_index * 10 < leader_index * 9 {
            return Err(Error::LearnerNotReady {
                member: id.to_string(),
            });
        }
        member.member.is_learner = false;
        Ok(())
    }

    async fn remove(&self, id: MemberId) -> Result<()> {
        self.record(format!("remove {id}"));
        let mut state = self.lock();
        require_quorum(&state, "member remove")?;
        let index = find(&state, id)?;
        let removed = state.members[index].clone();
        let voters_after = state
            .members
            .iter()
            .filter(|m| !m.member.is_learner)
            .count()
            - usize::from(!removed.member.is_learner);
        let healthy_after = state
            .members
            .iter()
            .filter(|m| !m.member.is_learner && m.healthy && m.member.id != id)
            .count();
        if !removed.member.is_learner && healthy_after < quorum(voters_after) {
            return Err(Error::NotHealthyYet {
                operation: "member remove",
                message: "etcdserver: re-configuration failed due to not enough started members"
                    .to_owned(),
            });
        }
        state.members.remove(index);
        if state.leader == Some(id) {
            state.leader = state
                .members
                .iter()
                .find(|m| !m.member.is_learner && m.healthy)
                .map(|m| m.member.id);
        }
        Ok(())
    }

    async fn status(&self, endpoint: &str) -> Result<EndpointStatus> {
        self.record(format!("status {endpoint}"));
        let state = self.lock();
        let member = by_endpoint(&state, endpoint, "status")?;
        Ok(EndpointStatus {
            endpoint: endpoint.to_owned(),
            member_id: member.member.id,
            cluster_id: 0xc1,
            leader: state.leader.unwrap_or(MemberId(0)),
            version: member.version.clone(),
            db_size: 4096,
            db_size_in_use: 2048,
            raft_index: member.raft_index,
            raft_applied_index: member.raft_index,
            raft_term: 2,
            revision: 1000,
            is_learner: member.member.is_learner,
            errors: Vec::new(),
            storage_version: storage_version(&state, &member.version),
            downgrade_target: state.downgrade_target.as_ref().map(|t| format!("{t}.0")),
        })
    }

    async fn downgrade(&self, action: DowngradeAction) -> Result<String> {
        self.record(match &action {
            DowngradeAction::Validate(t) | DowngradeAction::Enable(t) => {
                format!("{} {t}", action.name())
            }
            DowngradeAction::Cancel => action.name().to_owned(),
        });
        let mut state = self.lock();
        require_quorum(&state, action.name())?;
        let cluster = cluster_minor(&state);
        let refuse = |message: &str| Error::Refused {
            operation: action.name(),
            message: message.to_owned(),
        };
        let reported = format!("{}.{}", cluster.0, cluster.1);
        match &action {
            DowngradeAction::Validate(target) | DowngradeAction::Enable(target) => {
                if cluster < (3, 6) {
                    return Err(refuse("etcdserver: downgrade is not supported before 3.6"));
                }
                if state.downgrade_target.is_some() {
                    return Err(refuse(
                        "etcdserver: the cluster has an ongoing downgrade job",
                    ));
                }
                if minor_of(target) != Some((cluster.0, cluster.1 - 1)) {
                    return Err(refuse("etcdserver: invalid downgrade target version"));
                }
                if matches!(action, DowngradeAction::Enable(_)) {
                    state.downgrade_target = Some(target.clone());
                }
            }
            DowngradeAction::Cancel => {
                if state.downgrade_target.take().is_none() {
                    return Err(refuse("etcdserver: no inflight downgrade job"));
                }
            }
        }
        Ok(reported)
    }

    async fn move_leader(&self, leader_endpoint: &str, target: MemberId) -> Result<()> {
        self.record(format!("move leader {leader_endpoint} -> {target}"));
        let mut state = self.lock();
        let from = by_endpoint(&state, leader_endpoint, "move leader")?
            .member
            .id;
        if state.leader != Some(from) {
            return Err(Error::Refused {
                operation: "move leader",
                message: "etcdserver: not leader".to_owned(),
            });
        }
        let index = find(&state, target)?;
        let target_member = &state.members[index];
        if target_member.member.is_learner || !target_member.healthy {
            return Err(Error::Refused {
                operation: "move leader",
                message: "etcdserver: bad leader transferee".to_owned(),
            });
        }
        state.leader = Some(target);
        Ok(())
    }

    async fn alarms(&self) -> Result<Vec<Alarm>> {
        self.record("alarm list".to_owned());
        Ok(self.lock().alarms.clone())
    }

    async fn disarm(&self, alarm: Alarm) -> Result<()> {
        self.record(format!("disarm {:?} {}", alarm.kind, alarm.member));
        self.lock().alarms.retain(|a| *a != alarm);
        Ok(())
    }

    async fn compact(&self, revision: i64) -> Result<()> {
        self.record(format!("compact {revision}"));
        self.compact_history(revision);
        Ok(())
    }

    async fn defragment(&self, endpoint: &str) -> Result<()> {
        self.record(format!("defragment {endpoint}"));
        let state = self.lock();
        by_endpoint(&state, endpoint, "defragment").map(|_| ())
    }

    async fn snapshot(&self, endpoint: &str) -> Result<SnapshotStream> {
        self.record(format!("snapshot {endpoint}"));
        let state = self.lock();
        by_endpoint(&state, endpoint, "snapshot")?;
        let chunks: Vec<Result<Bytes>> = state
            .db
            .chunks(4)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        Ok(Box::pin(futures::stream::iter(chunks)))
    }

    async fn enable_auth(&self, _root_password: &str) -> Result<()> {
        // The password is not recorded: calls are test assertions' input.
        self.record("enable auth".to_owned());
        let state = self.lock();
        require_quorum(&state, "enable auth")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        match tokio::runtime::Builder::new_current_thread().build() {
            Ok(rt) => rt.block_on(f),
            Err(err) => panic!("runtime: {err}"),
        }
    }

    #[test]
    fn scale_up_goes_through_a_caught_up_learner() {
        block_on(async {
            let etcd = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
            let learner = etcd.add_learner(&["http://d:2380".to_owned()]).await;
            let learner = match learner {
                Ok(l) => l,
                Err(e) => panic!("{e}"),
            };
            assert!(learner.is_learner);
            assert!(matches!(
                etcd.promote(learner.id).await,
                Err(Error::LearnerNotReady { .. })
            ));
            etcd.start_and_catch_up("http://d:2380", "d");
            assert!(etcd.promote(learner.id).await.is_ok());
            assert_eq!(etcd.members().iter().filter(|m| !m.is_learner).count(), 4);
        });
    }

    #[test]
    fn membership_changes_wait_for_a_settled_cluster() {
        block_on(async {
            let etcd = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
            etcd.set_healthy("c", false);
            let refused = etcd.add_learner(&["http://d:2380".to_owned()]).await;
            assert!(
                matches!(refused, Err(ref e) if e.is_waiting()),
                "{refused:?}"
            );
        });
    }

    #[test]
    fn removal_that_would_lose_quorum_is_refused() {
        block_on(async {
            let etcd = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
            etcd.set_healthy("c", false);
            let b = etcd.members()[1].id;
            // Removing healthy b would leave a alone of {a, c}: no quorum.
            assert!(matches!(
                etcd.remove(b).await,
                Err(Error::NotHealthyYet { .. })
            ));
            let c = etcd.members()[2].id;
            assert!(
                etcd.remove(c).await.is_ok(),
                "removing the dead member is safe"
            );
        });
    }

    #[test]
    fn only_the_leader_hands_over_leadership() {
        block_on(async {
            let etcd = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
            let b = etcd.members()[1].id;
            assert!(etcd.move_leader("http://b:2379", b).await.is_err());
            assert!(etcd.move_leader("http://a:2379", b).await.is_ok());
            assert_eq!(etcd.leader(), Some(b));
            assert_eq!(
                etcd.calls(),
                vec![
                    "move leader http://b:2379 -> 1002".to_owned(),
                    "move leader http://a:2379 -> 1002".to_owned()
                ]
            );
        });
    }
}
