//! The checks dkv makes before it touches a running etcd cluster it was
//! told to join: every member started, a voter, and answering as itself;
//! no alarm; one cluster ID and one live leader that every member follows;
//! no other errors; at least two voters (so that adding one keeps a failure
//! to spare); one supported minor line, no downgrade in flight, and the
//! spec's image on that line. A cluster that fails one is refused with what
//! is wrong and the fix, and left as it was found: nothing here writes to
//! etcd.
//!
//! [`observe`] asks the cluster (through the same [`EtcdAdmin`] seam as
//! every other etcd call, so the fake answers in unit tests); [`check`] is
//! the pure verdict on what it answered. The order of the checks follows
//! what real etcd reports: a member's status lists every active alarm and
//! a lost leader among its errors, so those are judged first, by what they
//! are, before any other error of a member's.

use std::fmt;
use std::sync::Arc;

use dkv_etcd::{Alarm, AlarmKind, EndpointStatus, EtcdAdmin, Member, MemberId};

use crate::etcd_version::{EtcdVersion, MAX_SUPPORTED_MINOR, MIN_SUPPORTED};

/// The fewest voters a cluster must have for dkv to add one of its own with
/// a failure to spare ([`keeps_one_failure_to_spare`]).
pub const MIN_VOTERS: usize = 2;

/// What the cluster to join reported.
#[derive(Debug, Clone)]
pub struct ExternalCluster {
    /// The member list, as the member dkv reached gave it. etcd answers it
    /// from that member's own view, with or without a quorum.
    members: Vec<Member>,
    /// Each member's own status, in the member list's order: the first of
    /// its client URLs that answered, or why none did.
    statuses: Vec<Result<EndpointStatus, String>>,
    /// The alarms, or why they could not be read (they need a quorum).
    alarms: Result<Vec<Alarm>, String>,
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

/// Why dkv will not join the cluster, with the fix. Every variant about a
/// member names it (etcd's name, or its ID before it started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinRefusal {
    /// No member answered the member list.
    Unreachable {
        endpoints: String,
        error: String,
    },
    /// The member list is empty.
    NoMembers,
    /// A member answered none of its client URLs.
    MemberUnreachable {
        member: String,
        error: String,
    },
    /// A member's client URL is answered by another member.
    AnsweredByAnother {
        member: String,
        url: String,
        answered_by: MemberId,
    },
    /// Every member answered, but the alarms could not be read: no quorum.
    NoQuorum {
        error: String,
    },
    /// A member reports errors of its own (not an alarm, not a lost leader).
    MemberUnhealthy {
        member: String,
        errors: String,
    },
    /// A member reports another cluster ID than most.
    ClusterIdsDiffer {
        member: String,
        ids: String,
    },
    /// No member knows a leader among the members.
    NoLeader,
    /// A member follows another leader than most.
    OtherLeader {
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
        kind: AlarmKind,
    },
    TooFewVoters {
        voters: usize,
    },
    UnknownVersion {
        member: String,
        version: String,
    },
    VersionTooOld {
        member: String,
        version: EtcdVersion,
    },
    VersionTooNew {
        member: String,
        version: EtcdVersion,
    },
    /// Members on different minor lines: an upgrade or downgrade half done.
    MixedVersions {
        low: String,
        high: String,
    },
    /// etcd has a downgrade enabled (3.6 and later).
    DowngradeInProgress {
        member: String,
        target: String,
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
                "the cluster to join did not answer at {endpoints} ({error}); check the \
                 endpoints dkv is given and that its client certificate is one the cluster \
                 accepts"
            ),
            Self::NoMembers => f.write_str("the cluster to join lists no member"),
            Self::MemberUnreachable { member, error } => write!(
                f,
                "member {member} of the cluster to join did not answer ({error}); bring it \
                 back, or remove it from the cluster (etcdctl member remove), and dkv checks \
                 again"
            ),
            Self::AnsweredByAnother {
                member,
                url,
                answered_by,
            } => write!(
                f,
                "member {member}'s client URL {url} is answered by member {answered_by}; each \
                 member must advertise a client URL of its own (--advertise-client-urls)"
            ),
            Self::NoQuorum { error } => write!(
                f,
                "the cluster to join has no quorum ({error}); dkv joins a cluster whose \
                 members elect a leader, and checks again"
            ),
            Self::MemberUnhealthy { member, errors } => write!(
                f,
                "member {member} of the cluster to join reports errors ({errors}); fix them \
                 first, dkv checks again"
            ),
            Self::ClusterIdsDiffer { member, ids } => write!(
                f,
                "member {member} answers for another etcd cluster than the rest (cluster \
                 IDs {ids}); its client URL reaches another cluster: fix its \
                 --advertise-client-urls or remove it"
            ),
            Self::NoLeader => f.write_str(
                "no member of the cluster to join follows a leader; wait for the election to \
                 finish and check that the members reach each other's peer URLs, dkv checks \
                 again",
            ),
            Self::OtherLeader { member } => write!(
                f,
                "member {member} of the cluster to join follows another leader than the \
                 rest; wait for it to catch up with the leader, dkv checks again"
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
            Self::Alarm { member, kind } => {
                let fix = match kind {
                    AlarmKind::NoSpace => {
                        "compact and defragment it, then disarm the alarm (etcdctl alarm disarm)"
                    }
                    AlarmKind::Corrupt => {
                        "replace the member whose data differs from the others' first"
                    }
                };
                write!(
                    f,
                    "the cluster to join has alarm {kind} raised by member {member}; {fix}"
                )
            }
            Self::TooFewVoters { voters } => write!(
                f,
                "the cluster to join has {voters} voting member(s); dkv adds its members to \
                 a cluster of at least {MIN_VOTERS}, so that every change keeps a failure to \
                 spare: add a member to it first"
            ),
            Self::UnknownVersion { member, version } => write!(
                f,
                "member {member} of the cluster to join reports etcd version {version:?}, \
                 which dkv cannot read; dkv joins released etcd {MIN_SUPPORTED} to {}.{}",
                MAX_SUPPORTED_MINOR.0, MAX_SUPPORTED_MINOR.1
            ),
            Self::VersionTooOld { member, version } => write!(
                f,
                "member {member} of the cluster to join runs etcd {version}; dkv runs \
                 {MIN_SUPPORTED} and later: upgrade the cluster first"
            ),
            Self::VersionTooNew { member, version } => write!(
                f,
                "member {member} of the cluster to join runs etcd {version}; this dkv runs \
                 etcd up to {}.{} and cannot take it over",
                MAX_SUPPORTED_MINOR.0, MAX_SUPPORTED_MINOR.1
            ),
            Self::MixedVersions { low, high } => write!(
                f,
                "the cluster to join runs two minor lines ({low} and {high}): finish its \
                 upgrade or downgrade first"
            ),
            Self::DowngradeInProgress { member, target } => write!(
                f,
                "the cluster to join has a downgrade to {target} enabled (member {member}); \
                 finish or cancel it (etcdctl downgrade cancel) first"
            ),
            Self::ImageCannotJoin { cluster, image } => {
                let (major, minor) = cluster.minor_line();
                write!(
                    f,
                    "the cluster to join runs etcd {cluster} and the spec's image runs \
                     {image}: dkv adds members on the cluster's own minor line only; set \
                     spec.image (and spec.version, if set) to a {major}.{minor} release"
                )
            }
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

/// Asks the running cluster at `endpoints` (reached through `reach`, which
/// hands out an admin for one of its client URLs) for its members, each
/// member's status at its own client URLs (all members at once) and the
/// alarms. Reads only.
pub async fn observe(
    reach: ReachUrl<'_>,
    endpoints: &[String],
) -> Result<ExternalCluster, JoinRefusal> {
    let mut last_error = "no endpoint".to_owned();
    let mut answered = None;
    for endpoint in endpoints {
        let admin = reach(endpoint);
        match admin.member_list().await {
            Ok(members) => {
                answered = Some((admin, members));
                break;
            }
            Err(error) => last_error = format!("{endpoint}: {error}"),
        }
    }
    let Some((admin, members)) = answered else {
        return Err(JoinRefusal::Unreachable {
            endpoints: endpoints.join(","),
            error: last_error,
        });
    };
    let statuses =
        futures::future::join_all(members.iter().map(|member| status_of(reach, member))).await;
    let alarms = admin.alarms().await.map_err(|e| e.to_string());
    Ok(ExternalCluster {
        members,
        statuses,
        alarms,
    })
}

/// Hands out an etcd admin for one client URL of a running cluster (each
/// member's serving certificate names its own address, so each URL is
/// reached on its own).
pub type ReachUrl<'a> = &'a (dyn Fn(&str) -> Arc<dyn EtcdAdmin> + Send + Sync);

/// The status of the first of `member`'s client URLs that answers.
pub async fn status_of(reach: ReachUrl<'_>, member: &Member) -> Result<EndpointStatus, String> {
    let mut last = "it lists no client URL".to_owned();
    for url in &member.client_urls {
        match reach(url).status(url).await {
            Ok(status) => return Ok(status),
            Err(error) => last = format!("{url}: {error}"),
        }
    }
    Err(last)
}

/// The verdict on `cluster` for members that will run `image`.
pub fn check(cluster: &ExternalCluster, image: EtcdVersion) -> Result<JoinTarget, JoinRefusal> {
    let reported = answered_as_themselves(cluster)?;
    let alarms = cluster
        .alarms
        .as_ref()
        .map_err(|error| JoinRefusal::NoQuorum {
            error: error.clone(),
        })?;
    if let Some(alarm) = alarms.first() {
        let member = cluster
            .members
            .iter()
            .find(|m| m.id == alarm.member)
            .map_or_else(|| alarm.member.to_string(), named);
        return Err(JoinRefusal::Alarm {
            member,
            kind: alarm.kind,
        });
    }
    let (cluster_id, leader) = one_cluster_one_leader(cluster, &reported)?;
    for (member, status) in cluster.members.iter().zip(&reported) {
        let errors: Vec<&String> = status
            .errors
            .iter()
            .filter(|e| !e.starts_with("alarm:"))
            .collect();
        if !errors.is_empty() {
            return Err(JoinRefusal::MemberUnhealthy {
                member: named(member),
                errors: errors
                    .iter()
                    .map(|e| e.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
    }
    if cluster.members.len() < MIN_VOTERS {
        return Err(JoinRefusal::TooFewVoters {
            voters: cluster.members.len(),
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

/// Every member started, a voter, and answering its status as itself.
fn answered_as_themselves(cluster: &ExternalCluster) -> Result<Vec<&EndpointStatus>, JoinRefusal> {
    if cluster.members.is_empty() || cluster.statuses.len() != cluster.members.len() {
        return Err(JoinRefusal::NoMembers);
    }
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
        if status.member_id != member.id {
            return Err(JoinRefusal::AnsweredByAnother {
                member: named(member),
                url: status.endpoint.clone(),
                answered_by: status.member_id,
            });
        }
        reported.push(status);
    }
    Ok(reported)
}

/// The value most of `values` share (the last of equals on a tie).
fn most_common<T: PartialEq + Copy>(values: impl Iterator<Item = T> + Clone) -> Option<T> {
    values
        .clone()
        .max_by_key(|v| values.clone().filter(|w| w == v).count())
}

/// The cluster ID most members report and the live leader they all follow.
fn one_cluster_one_leader(
    cluster: &ExternalCluster,
    reported: &[&EndpointStatus],
) -> Result<(u64, MemberId), JoinRefusal> {
    let cluster_id =
        most_common(reported.iter().map(|s| s.cluster_id)).ok_or(JoinRefusal::NoMembers)?;
    for (member, status) in cluster.members.iter().zip(reported) {
        if status.cluster_id != cluster_id {
            return Err(JoinRefusal::ClusterIdsDiffer {
                member: named(member),
                ids: format!("{:x} against {cluster_id:x}", status.cluster_id),
            });
        }
    }
    let listed = |id: MemberId| cluster.members.iter().any(|m| m.id == id);
    let leader = most_common(
        reported
            .iter()
            .map(|s| s.leader)
            .filter(|&l| l.0 != 0 && listed(l)),
    )
    .ok_or(JoinRefusal::NoLeader)?;
    for (member, status) in cluster.members.iter().zip(reported) {
        if status.leader != leader {
            return Err(JoinRefusal::OtherLeader {
                member: named(member),
            });
        }
    }
    Ok((cluster_id, leader))
}

/// The oldest version any member runs, when all are supported, on one
/// minor line, and no downgrade is enabled.
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
        if version < MIN_SUPPORTED {
            return Err(JoinRefusal::VersionTooOld {
                member: named(member),
                version,
            });
        }
        if version.minor_line() > MAX_SUPPORTED_MINOR {
            return Err(JoinRefusal::VersionTooNew {
                member: named(member),
                version,
            });
        }
        if let Some(target) = &status.downgrade_target {
            return Err(JoinRefusal::DowngradeInProgress {
                member: named(member),
                target: target.clone(),
            });
        }
        versions.push(version);
    }
    let (Some(low), Some(high)) = (versions.iter().min(), versions.iter().max()) else {
        return Err(JoinRefusal::NoMembers);
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
