//! The checks dkv makes before it touches a running etcd cluster it was
//! told to join: every member reachable and healthy, one cluster, a leader
//! they all follow, no learner or unstarted member pending, no alarm, one
//! supported minor line that the spec's image can join. A cluster that
//! fails one is refused with what is wrong and the fix, and left as it was
//! found: nothing here writes to etcd.
//!
//! [`observe`] asks the cluster (through the same [`EtcdAdmin`] seam as
//! every other etcd call, so the fake answers in unit tests); [`check`] is
//! the pure verdict on what it answered.

use std::fmt;

use dkv_etcd::{Alarm, EndpointStatus, EtcdAdmin, Member, MemberId};

use crate::etcd_version::{EtcdVersion, MAX_SUPPORTED_MINOR, MIN_SUPPORTED};

/// What the cluster to join reported.
#[derive(Debug, Clone)]
pub struct ExternalCluster {
    /// The member list, as the member dkv reached gave it.
    pub members: Vec<Member>,
    /// Each member's own status, in the member list's order, or why it did
    /// not answer at its first client URL.
    pub statuses: Vec<Result<EndpointStatus, String>>,
    pub alarms: Vec<Alarm>,
}

/// A cluster that passed every check: what the take-over starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinTarget {
    pub cluster_id: u64,
    pub leader: MemberId,
    /// The oldest version a member runs.
    pub version: EtcdVersion,
    /// The members already there (all voters), which dkv never changes
    /// before the user lets them leave.
    pub members: Vec<Member>,
}

/// Why dkv will not join the cluster, with the fix. Every variant names
/// the member it is about (etcd's name, or its ID before it started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinRefusal {
    /// No member answered the member list.
    Unreachable {
        endpoints: String,
        error: String,
    },
    /// A member listed did not answer its own status.
    MemberUnreachable {
        member: String,
        error: String,
    },
    /// A member reports errors of its own.
    MemberUnhealthy {
        member: String,
        errors: String,
    },
    /// Members report different cluster IDs.
    ClusterIdsDiffer {
        member: String,
        ids: String,
    },
    /// A member follows no leader, or another leader than the rest.
    NoLeader {
        member: String,
    },
    LearnerPending {
        member: String,
    },
    /// Added to the member list but never started.
    MemberNotStarted {
        member: String,
    },
    Alarm {
        member: String,
        alarm: String,
    },
    UnknownVersion {
        member: String,
        version: String,
    },
    UnsupportedVersion {
        member: String,
        version: EtcdVersion,
    },
    /// Members on different minor lines: an upgrade or downgrade in flight.
    MixedVersions {
        low: String,
        high: String,
    },
    /// The spec's image is on another minor line than the cluster.
    ImageCannotJoin {
        cluster: EtcdVersion,
        image: EtcdVersion,
    },
}

impl fmt::Display for JoinRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable { endpoints, error } => write!(
                f,
                "the cluster to join did not answer at {endpoints} ({error}); check \
                 spec.bootstrap.join.endpoints and that the client TLS Secret holds a \
                 certificate the cluster accepts"
            ),
            Self::MemberUnreachable { member, error } => write!(
                f,
                "member {member} of the cluster to join did not answer ({error}); bring it \
                 back, or remove it from the cluster (etcdctl member remove), and dkv checks \
                 again"
            ),
            Self::MemberUnhealthy { member, errors } => write!(
                f,
                "member {member} of the cluster to join reports errors ({errors}); fix them \
                 first, dkv checks again"
            ),
            Self::ClusterIdsDiffer { member, ids } => write!(
                f,
                "the endpoints reach more than one etcd cluster (member {member}; cluster IDs \
                 {ids}); list the endpoints of one cluster only"
            ),
            Self::NoLeader { member } => write!(
                f,
                "member {member} of the cluster to join follows no leader the others follow; \
                 dkv joins a cluster with one leader only, and checks again"
            ),
            Self::LearnerPending { member } => write!(
                f,
                "member {member} of the cluster to join is a learner; promote it (etcdctl \
                 member promote) or remove it first"
            ),
            Self::MemberNotStarted { member } => write!(
                f,
                "member {member} of the cluster to join was added but never started; start \
                 it or remove it (etcdctl member remove) first"
            ),
            Self::Alarm { member, alarm } => write!(
                f,
                "the cluster to join has alarm {alarm} raised by member {member}; fix its \
                 cause and disarm it (etcdctl alarm disarm) first"
            ),
            Self::UnknownVersion { member, version } => write!(
                f,
                "member {member} of the cluster to join reports version {version:?}, which \
                 dkv cannot read"
            ),
            Self::UnsupportedVersion { member, version } => write!(
                f,
                "member {member} of the cluster to join runs etcd {version}; dkv runs {} to \
                 {}.{}: upgrade the cluster first",
                MIN_SUPPORTED, MAX_SUPPORTED_MINOR.0, MAX_SUPPORTED_MINOR.1
            ),
            Self::MixedVersions { low, high } => write!(
                f,
                "the cluster to join runs two minor lines ({low} and {high}): finish its \
                 upgrade or downgrade first"
            ),
            Self::ImageCannotJoin { cluster, image } => write!(
                f,
                "the cluster to join runs etcd {cluster} and spec.version is {image}: a \
                 member joins on its cluster's minor line only; set spec.version to a {}.{} \
                 release",
                cluster.minor_line().0,
                cluster.minor_line().1
            ),
        }
    }
}

/// etcd's name for a member, or its ID before it started.
fn named(member: &Member) -> String {
    if member.name.is_empty() {
        member.id.to_string()
    } else {
        member.name.clone()
    }
}

/// Asks the cluster behind `admin` (connected to `endpoints`) for its
/// members, each member's status and the alarms. Reads only.
pub async fn observe(
    admin: &dyn EtcdAdmin,
    endpoints: &[String],
) -> Result<ExternalCluster, JoinRefusal> {
    let unreachable = |error: dkv_etcd::Error| JoinRefusal::Unreachable {
        endpoints: endpoints.join(","),
        error: error.to_string(),
    };
    let members = admin.member_list().await.map_err(unreachable)?;
    let mut statuses = Vec::with_capacity(members.len());
    for member in &members {
        statuses.push(match member.client_urls.first() {
            Some(url) => admin.status(url).await.map_err(|e| e.to_string()),
            None => Err("it lists no client URL".to_owned()),
        });
    }
    let alarms = admin.alarms().await.map_err(unreachable)?;
    Ok(ExternalCluster {
        members,
        statuses,
        alarms,
    })
}

/// The verdict on `cluster` for members that will run `image`.
pub fn check(cluster: &ExternalCluster, image: EtcdVersion) -> Result<JoinTarget, JoinRefusal> {
    let reported = healthy_statuses(cluster)?;
    let (cluster_id, leader) = one_cluster_one_leader(cluster, &reported)?;
    if let Some(alarm) = cluster.alarms.first() {
        let member = cluster
            .members
            .iter()
            .find(|m| m.id == alarm.member)
            .map_or_else(|| alarm.member.to_string(), named);
        return Err(JoinRefusal::Alarm {
            member,
            alarm: alarm.kind.to_string(),
        });
    }
    let version = one_minor_line(cluster, &reported)?;
    if version.minor_line() != image.minor_line() {
        return Err(JoinRefusal::ImageCannotJoin {
            cluster: version,
            image,
        });
    }
    Ok(JoinTarget {
        cluster_id,
        leader,
        version,
        members: cluster.members.clone(),
    })
}

/// Every member started, a voter, answering, without errors of its own.
fn healthy_statuses(cluster: &ExternalCluster) -> Result<Vec<&EndpointStatus>, JoinRefusal> {
    let mut reported = Vec::with_capacity(cluster.members.len());
    for (member, status) in cluster.members.iter().zip(&cluster.statuses) {
        if !member.has_started() {
            return Err(JoinRefusal::MemberNotStarted {
                member: named(member),
            });
        }
        if member.is_learner {
            return Err(JoinRefusal::LearnerPending {
                member: named(member),
            });
        }
        let status = status
            .as_ref()
            .map_err(|error| JoinRefusal::MemberUnreachable {
                member: named(member),
                error: error.clone(),
            })?;
        if !status.errors.is_empty() {
            return Err(JoinRefusal::MemberUnhealthy {
                member: named(member),
                errors: status.errors.join("; "),
            });
        }
        reported.push(status);
    }
    Ok(reported)
}

/// The cluster ID every member reports, and the live leader they all follow.
fn one_cluster_one_leader(
    cluster: &ExternalCluster,
    reported: &[&EndpointStatus],
) -> Result<(u64, MemberId), JoinRefusal> {
    let Some(first) = reported.first() else {
        return Err(JoinRefusal::Unreachable {
            endpoints: String::new(),
            error: "the member list is empty".to_owned(),
        });
    };
    let leader = first.leader;
    for (member, status) in cluster.members.iter().zip(reported) {
        if status.cluster_id != first.cluster_id {
            return Err(JoinRefusal::ClusterIdsDiffer {
                member: named(member),
                ids: format!("{:x}, {:x}", first.cluster_id, status.cluster_id),
            });
        }
        let leader_listed = cluster.members.iter().any(|m| m.id == status.leader);
        if status.leader != leader || status.leader.0 == 0 || !leader_listed {
            return Err(JoinRefusal::NoLeader {
                member: named(member),
            });
        }
    }
    Ok((first.cluster_id, leader))
}

/// The oldest version any member runs, when all are supported and on one
/// minor line.
fn one_minor_line(
    cluster: &ExternalCluster,
    reported: &[&EndpointStatus],
) -> Result<EtcdVersion, JoinRefusal> {
    let mut versions = Vec::with_capacity(reported.len());
    for (member, status) in cluster.members.iter().zip(reported) {
        let version =
            EtcdVersion::parse(&status.version).ok_or_else(|| JoinRefusal::UnknownVersion {
                member: named(member),
                version: status.version.clone(),
            })?;
        if version < MIN_SUPPORTED || version.minor_line() > MAX_SUPPORTED_MINOR {
            return Err(JoinRefusal::UnsupportedVersion {
                member: named(member),
                version,
            });
        }
        versions.push(version);
    }
    let (Some(low), Some(high)) = (versions.iter().min(), versions.iter().max()) else {
        return Err(JoinRefusal::Unreachable {
            endpoints: String::new(),
            error: "the member list is empty".to_owned(),
        });
    };
    if low.minor_line() != high.minor_line() {
        return Err(JoinRefusal::MixedVersions {
            low: low.to_string(),
            high: high.to_string(),
        });
    }
    Ok(*low)
}

/// The take-over's quorum rule: a membership change may go ahead only if,
/// once it is made, the voters that are healthy are still a quorum with one
/// failure to spare. `voters` and `healthy` count the whole cluster, the
/// members already there and dkv's, after the change.
pub fn keeps_one_failure_to_spare(voters: usize, healthy: usize) -> bool {
    let quorum = voters / 2 + 1;
    healthy > quorum
}

#[cfg(test)]
mod tests;
