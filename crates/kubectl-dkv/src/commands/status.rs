//! `status`: one page on a cluster — members and their pods, conditions,
//! the operation in flight, a standby's following of its source, backups,
//! certificate expiry.
//!
//! Everything comes from the API: the DistributedKV's status (what the
//! operator last observed of etcd), the member pods, the backups and the
//! cluster's TLS Secrets. Nothing here asks etcd itself.

use dkv_api::DistributedKV;
use dkv_api::backup::v1alpha1::BackupPhase;
use dkv_api::distributedkv::v1beta1::{
    BackupArtifactRef, ContinuousBackupStatus, Operation, StandbyPhase, StandbyStatus,
};
use dkv_api::labels::{CLUSTER_KEY, COMPONENT_KEY};
use dkv_api::schedule::Schedule;
use dkv_member::naming::ordinal_of;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::ListParams;
use serde::Serialize;

use crate::client::{Target, is_paused};
use crate::error::{Error, Result};
use crate::etcd::{Etcdctl, parse_alarms, parse_endpoint_status};
use crate::output::{self, Format};
use crate::time;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub name: String,
    pub namespace: String,
    /// `dkv.io/reconcile-paused` is set: the operator changes nothing.
    pub paused: bool,
    /// `spec.hibernation` is on: the members stop (or have stopped).
    pub hibernation: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Members the spec asks for.
    pub size: i32,
    pub ready_replicas: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    pub conditions: Vec<Condition>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    pub members: Vec<Member>,
    pub backups: Backups,
    pub certificates: Vec<Certificate>,
    /// Scheduled defragmentation (`spec.maintenance.defrag`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub defrag: Option<Defrag>,
    /// Why etcd's own answers are missing, if they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live_error: Option<String>,
    /// A cluster that joined a running one (`spec.bootstrap.join`): where
    /// the adoption stands, with the members that were there before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adoption: Option<dkv_api::distributedkv::v1beta1::AdoptionStatus>,
    /// A standby (`spec.standby`): where it stands against its source, or
    /// what it held when it was promoted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby: Option<StandbyStatus>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `leader`, `follower` or `learner`; absent for a pod that is not
    /// (yet) a member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub healthy: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodState>,
    /// The node the operator last saw the member's pod on, and its zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Since when that node is lost, as the operator saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_lost_since: Option<Time>,
    /// What etcd itself answers now (`etcdctl endpoint status` and `alarm
    /// list`, run in a member pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveMember>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveMember {
    /// Size of the backend database file.
    pub db_size: i64,
    /// Of which in use (the rest is free pages a defragmentation returns).
    pub db_size_in_use: i64,
    pub raft_index: u64,
    pub raft_term: u64,
    /// Raft entries behind the leader.
    pub raft_lag: u64,
    pub revision: i64,
    /// Alarms raised on the member (`NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
    /// Errors the member reports.
    pub errors: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    pub phase: String,
    pub ready: bool,
    pub restarts: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Backups {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<BackupArtifactRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_time: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_scheduled: Option<Timestamp>,
    /// Backups pending or running now.
    pub in_progress: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousBackupStatus>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Defrag {
    pub schedule: String,
    pub threshold_percent: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_run: Option<Timestamp>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    pub secret: String,
    /// The entry holding the certificate (`tls.crt`, or `ca.crt` for a CA).
    pub key: String,
    pub subject: String,
    pub not_after: Timestamp,
}

pub async fn run(target: &Target, name: &str, format: Format) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let report = collect(target, &cluster).await?;
    output::print(format, &report, |r| text(r, Timestamp::now()))
}

/// Reads the cluster's pods, backups and TLS Secrets, and makes the report.
pub async fn collect(target: &Target, cluster: &DistributedKV) -> Result<Report> {
    let name = cluster.name_any();
    let selector = format!("{CLUSTER_KEY}={name}");
    let pods = crate::lookup::member_pods(target, &name).await?;
    let backups = crate::lookup::backups_of(target, &name).await?;
    let secrets = target
        .api::<Secret>()
        .list(&ListParams::default().labels(&format!("{selector},{COMPONENT_KEY}=tls")))
        .await
        .map_err(|source| Error::Api {
            what: format!("listing the TLS Secrets of {}/{name}", target.namespace),
            source,
        })?
        .items;
    let mut report = report(cluster, &pods, &backups, &secrets, Timestamp::now());
    // A hibernated cluster runs no member to ask: the page says so.
    let hibernated = report.hibernation && report.phase.as_deref() == Some("Hibernated");
    if !hibernated && let Err(err) = add_live(target, cluster, &mut report).await {
        report.live_error = Some(err.to_string());
    }
    Ok(report)
}

/// Asks etcd (from a member pod) for every member's status and alarms.
async fn add_live(target: &Target, cluster: &DistributedKV, report: &mut Report) -> Result<()> {
    let pod = crate::lookup::pick_pod(target, cluster).await?;
    let etcdctl = Etcdctl::new(target, cluster).await?;
    let endpoint = format!("--endpoints={}", etcdctl.endpoint(&pod));
    let args = |more: &[&str]| {
        std::iter::once(endpoint.clone())
            .chain(more.iter().map(|s| (*s).to_owned()))
            .collect::<Vec<_>>()
    };
    let output = etcdctl
        .output(
            &pod,
            &args(&["endpoint", "status", "--cluster", "-w", "json"]),
        )
        .await?;
    // A member that does not answer makes etcdctl exit non-zero after
    // printing the ones that did.
    let statuses = match parse_endpoint_status(&output.stdout()) {
        Ok(statuses) => statuses,
        Err(err) if output.code == 0 => return Err(err),
        Err(_) => {
            output.success("reading the members' status")?;
            Vec::new()
        }
    };
    let alarms = etcdctl
        .output(&pod, &args(&["alarm", "list"]))
        .await?
        .success("listing alarms")?;
    let alarms = parse_alarms(&alarms.stdout());
    let leader_index = statuses
        .iter()
        .find(|s| s.status.leader == s.status.header.member_id)
        .map(|s| s.status.raft_index);
    for member in &mut report.members {
        let Some(id) = member
            .id
            .as_deref()
            .and_then(|id| u64::from_str_radix(id, 16).ok())
        else {
            continue;
        };
        let Some(status) = statuses.iter().find(|s| s.status.header.member_id == id) else {
            continue;
        };
        let s = &status.status;
        member.live = Some(LiveMember {
            db_size: s.db_size,
            db_size_in_use: s.db_size_in_use,
            raft_index: s.raft_index,
            raft_term: s.raft_term,
            raft_lag: leader_index.map_or(0, |l| l.saturating_sub(s.raft_index)),
            revision: s.header.revision,
            alarms: alarms.get(&format!("{id:x}")).cloned().unwrap_or_default(),
            errors: s.errors.clone(),
        });
    }
    Ok(())
}

/// The report, from what the API holds about the cluster.
pub fn report(
    cluster: &DistributedKV,
    pods: &[Pod],
    backups: &[dkv_api::DistributedKVBackup],
    secrets: &[Secret],
    now: Timestamp,
) -> Report {
    let status = cluster.status.clone().unwrap_or_default();
    let leader = status.leader.clone();
    let mut members: Vec<Member> = status
        .members
        .iter()
        .map(|m| Member {
            name: m.name.clone(),
            id: m.id.clone(),
            role: Some(
                if m.learner {
                    "learner"
                } else if leader.as_deref() == Some(m.name.as_str()) {
                    "leader"
                } else {
                    "follower"
                }
                .to_owned(),
            ),
            healthy: m.healthy,
            version: m.version.clone(),
            pod: None,
            node: m.node.clone(),
            zone: m.zone.clone(),
            node_lost_since: m.node_lost_since.clone(),
            live: None,
        })
        .collect();
    for pod in pods {
        let state = pod_state(pod);
        let pod_name = pod.name_any();
        match members.iter_mut().find(|m| m.name == pod_name) {
            Some(member) => member.pod = Some(state),
            None => members.push(Member {
                name: pod_name,
                id: None,
                role: None,
                healthy: false,
                version: None,
                pod: Some(state),
                node: None,
                zone: None,
                node_lost_since: None,
                live: None,
            }),
        }
    }
    // By ordinal (`orders-10` after `orders-9`), anything else last.
    let name = cluster.name_any();
    let ordinal = |member: &str| ordinal_of(&name, member).unwrap_or(i32::MAX);
    members.sort_by(|a, b| {
        ordinal(&a.name)
            .cmp(&ordinal(&b.name))
            .then(a.name.cmp(&b.name))
    });
    let settings = cluster.spec.backup.as_ref();
    let schedule = settings
        .map(|b| b.schedule.clone())
        .filter(|s| !s.is_empty());
    let mut in_progress: Vec<String> = backups
        .iter()
        .filter(|b| {
            !matches!(
                b.status.as_ref().and_then(|s| s.phase),
                Some(BackupPhase::Completed | BackupPhase::Failed)
            )
        })
        .map(ResourceExt::name_any)
        .collect();
    in_progress.sort();
    let mut certificates: Vec<Certificate> = secrets.iter().flat_map(certificates_in).collect();
    certificates.sort_by_key(|c| c.not_after);
    Report {
        name: cluster.name_any(),
        namespace: cluster.namespace().unwrap_or_default(),
        paused: is_paused(cluster),
        hibernation: cluster.spec.hibernation,
        phase: status.phase.map(|p| p.to_string()),
        size: cluster.spec.size,
        ready_replicas: status.ready_replicas,
        version: status.current_version.clone(),
        cluster_id: status.cluster_id.clone(),
        leader,
        conditions: status.conditions.clone(),
        operation: status.operation.clone(),
        members,
        backups: Backups {
            last: status.last_backup.clone(),
            last_time: status.last_backup_time.clone(),
            next_scheduled: schedule.as_deref().and_then(|s| next_run(s, now)),
            schedule,
            in_progress,
            continuous: status.continuous_backup.clone(),
        },
        certificates,
        defrag: cluster
            .spec
            .maintenance
            .as_ref()
            .and_then(|m| m.defrag.as_ref())
            .map(|d| Defrag {
                schedule: d.schedule.clone(),
                threshold_percent: d.threshold_percent,
                last_run: status.last_defrag_time.clone(),
                next_run: next_run(&d.schedule, now),
            }),
        live_error: None,
        adoption: status.adoption.clone(),
        // A standby the operator has not reported on yet is still one.
        standby: status.standby.clone().or_else(|| {
            cluster
                .spec
                .standby
                .as_ref()
                .map(|_| StandbyStatus::default())
        }),
    }
}

/// The next run of `schedule` after `now`, if it is one (the webhook
/// refuses any other).
fn next_run(schedule: &str, now: Timestamp) -> Option<Timestamp> {
    Schedule::parse(schedule).ok()?.next_run(now)
}

fn pod_state(pod: &Pod) -> PodState {
    let status = pod.status.clone().unwrap_or_default();
    let ready = dkv_readouts::pod::is_ready(pod);
    let restarts = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .sum();
    let phase = if pod.metadata.deletion_timestamp.is_some() {
        "Terminating".to_owned()
    } else {
        status.phase.clone().unwrap_or_else(|| "Pending".to_owned())
    };
    PodState {
        phase,
        ready,
        restarts,
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ip: status.pod_ip.clone(),
    }
}

/// The certificates a TLS Secret holds (`tls.crt`, and `ca.crt` when it is
/// the CA's own Secret), with their expiry.
fn certificates_in(secret: &Secret) -> Vec<Certificate> {
    let data = secret.data.clone().unwrap_or_default();
    let own_ca = !data.contains_key("tls.crt");
    ["tls.crt", "ca.crt"]
        .into_iter()
        .filter(|key| *key == "tls.crt" || own_ca)
        .filter_map(|key| {
            // One that does not read is left out, as one that is missing.
            let cert = dkv_readouts::certificate::read_pem(&data.get(key)?.0).ok()?;
            Some(Certificate {
                secret: secret.name_any(),
                key: key.to_owned(),
                subject: cert.subject,
                not_after: cert.not_after,
            })
        })
        .collect()
}

/// The member's node (its pod's, else the one status names), and how long
/// it has been lost when it is.
fn node_column(m: &Member, now: Timestamp) -> String {
    let node = m
        .pod
        .as_ref()
        .and_then(|p| p.node.clone())
        .or_else(|| m.node.clone());
    match (node, &m.node_lost_since) {
        (Some(node), Some(since)) => format!("{node} (lost {})", time::ago(since, now)),
        (Some(node), None) => node,
        (None, _) => "-".to_owned(),
    }
}

/// The adoption of a running cluster: its phase and the members that were
/// there before, each saying whether its process may now be stopped.
fn adoption_text(out: &mut String, r: &Report) {
    let Some(adoption) = &r.adoption else {
        return;
    };
    out.push_str(&format!(
        "\nAdoption:    {}{}\n",
        adoption
            .phase
            .map_or_else(|| "(not started)".to_owned(), |p| p.to_string()),
        adoption
            .message
            .as_ref()
            .map_or_else(String::new, |m| format!(" — {m}"))
    ));
    if adoption.old_members.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = adoption
        .old_members
        .iter()
        .map(|m| {
            vec![
                m.name.clone(),
                m.id.clone(),
                m.peer_urls.join(","),
                if m.removed {
                    "-".to_owned()
                } else {
                    yes(m.healthy)
                },
                if m.removed {
                    "removed: its process may be stopped".to_owned()
                } else {
                    "member: keep its process running".to_owned()
                },
            ]
        })
        .collect();
    out.push_str("Members that were there before:\n");
    out.push_str(&output::table(
        "  ",
        &["NAME", "ID", "PEER URLS", "HEALTHY", "STATE"],
        &rows,
    ));
}

/// A standby: its phase and source; while it follows, the source revision
/// it holds and how far behind it is; once promoted, what it held then.
fn standby_text(out: &mut String, r: &Report, now: Timestamp) {
    let Some(standby) = &r.standby else {
        return;
    };
    let note = match standby.phase {
        Some(StandbyPhase::Promoted) => " — an ordinary cluster now: takes writes, follows no more",
        Some(StandbyPhase::Promoting) => " — applying what its source stored, then taking writes",
        Some(StandbyPhase::Demoting) => " — demoted: writes refused, its last changes being stored",
        Some(StandbyPhase::Demoted) => {
            " — demoted: writes refused, waiting for its source to be promoted at the revision below"
        }
        _ => " — reads only, writes refused (kubectl dkv promote makes it take writes)",
    };
    out.push_str(&format!(
        "\nStandby:     {}{note}\n",
        standby
            .phase
            .map_or_else(|| "(not started)".to_owned(), |p| p.to_string())
    ));
    if let Some(source) = &standby.source {
        out.push_str(&format!("  Source:      {source}\n"));
    }
    if let Some(revision) = standby.demoted_at_revision {
        out.push_str(&format!(
            "  Demoted at:  its own revision {revision} (kubectl dkv promote SOURCE --at-revision {revision} on the source's cluster)\n"
        ));
    }
    if let Some(revision) = standby.promoted_at_revision {
        out.push_str(&format!(
            "  Promoted at: source revision {revision}{}\n",
            standby
                .promoted_time
                .as_ref()
                .map_or_else(String::new, |t| format!(
                    ", {} ({})",
                    t.0,
                    time::ago(t, now)
                ))
        ));
    } else {
        if let Some(revision) = standby.applied_revision {
            out.push_str(&format!(
                "  Applied:     source revision {revision}{}\n",
                standby
                    .applied_time
                    .as_ref()
                    .map_or_else(String::new, |t| format!(
                        ", recorded by the source's backup {} ({})",
                        t.0,
                        time::ago(t, now)
                    ))
            ));
        }
        if let Some(lag) = standby_lag(standby) {
            out.push_str(&format!("  Lag:         {lag}\n"));
        }
        if let Some(checked) = &standby.last_checked {
            out.push_str(&format!(
                "  Checked:     the source's store, {}\n",
                time::ago(checked, now)
            ));
        }
    }
    if let Some(message) = &standby.message {
        out.push_str(&format!("  Message:     {message}\n"));
    }
}

/// How far a standby is behind its source: the age of the oldest stored
/// change it has not applied, and how many source revisions are stored
/// and not applied.
fn standby_lag(standby: &StandbyStatus) -> Option<String> {
    if standby.lag_seconds.is_none() && standby.lag_revisions.is_none() {
        return None;
    }
    let behind = standby
        .lag_seconds
        .filter(|s| *s > 0)
        .map(|s| format!("{} behind", time::short(SignedDuration::from_secs(s))));
    let revisions = standby
        .lag_revisions
        .filter(|n| *n > 0)
        .map(|n| format!("{n} source revisions stored and not applied yet"));
    let parts: Vec<String> = behind.into_iter().chain(revisions).collect();
    Some(if parts.is_empty() {
        "none: every change the source stored is applied".to_owned()
    } else {
        parts.join(", ")
    })
}

fn yes(flag: bool) -> String {
    if flag { "yes" } else { "no" }.to_owned()
}

pub fn text(r: &Report, now: Timestamp) -> String {
    let mut out = String::new();
    summary_text(&mut out, r, now);
    conditions_text(&mut out, r, now);
    members_text(&mut out, r, now);
    adoption_text(&mut out, r);
    standby_text(&mut out, r, now);
    maintenance_text(&mut out, r, now);
    certificates_text(&mut out, r, now);
    out
}

/// The cluster, its phase, members and the operation in flight.
fn summary_text(out: &mut String, r: &Report, now: Timestamp) {
    out.push_str(&format!("Cluster:     {}/{}\n", r.namespace, r.name));
    out.push_str(&format!(
        "Phase:       {}{}\n",
        r.phase.as_deref().unwrap_or("(no status yet)"),
        if r.paused {
            " — PAUSED: the operator changes nothing (kubectl dkv resume)"
        } else if r.hibernation && r.phase.as_deref() == Some("Hibernated") {
            " — members stopped, volumes, membership and cluster ID kept (kubectl dkv wake)"
        } else if r.hibernation {
            " — HIBERNATING: the members stop at a consistent point (kubectl dkv wake cancels)"
        } else {
            ""
        }
    ));
    out.push_str(&format!(
        "Members:     {}/{} ready{}{}\n",
        r.ready_replicas,
        r.size,
        r.version
            .as_ref()
            .map_or_else(String::new, |v| format!(", etcd {v}")),
        r.leader
            .as_ref()
            .map_or_else(String::new, |l| format!(", leader {l}")),
    ));
    if let Some(id) = &r.cluster_id {
        out.push_str(&format!("Cluster ID:  {id}\n"));
    }
    out.push_str(&format!(
        "Operation:   {}\n",
        r.operation.as_ref().map_or_else(
            || "none".to_owned(),
            |op| format!(
                "{} ({}), started {}",
                op.kind.describe(&op.target),
                op.kind,
                time::ago(&op.started_at, now)
            )
        )
    ));
}

/// The conditions, one row each.
fn conditions_text(out: &mut String, r: &Report, now: Timestamp) {
    out.push_str("\nConditions:\n");
    if r.conditions.is_empty() {
        out.push_str("  (none yet)\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .conditions
            .iter()
            .map(|c| {
                vec![
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    time::short(now.duration_since(c.last_transition_time.0)),
                    c.message.clone(),
                ]
            })
            .collect();
        out.push_str(&output::table(
            "  ",
            &["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"],
            &rows,
        ));
    }
}

/// The members, one row each, with etcd's own figures.
fn members_text(out: &mut String, r: &Report, now: Timestamp) {
    let dash = || "-".to_owned();
    out.push_str("\nMembers:\n");
    if r.members.is_empty() {
        out.push_str("  (none yet)\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .members
            .iter()
            .map(|m| {
                let pod = m.pod.as_ref();
                vec![
                    m.name.clone(),
                    m.id.clone().unwrap_or_else(dash),
                    m.role.clone().unwrap_or_else(|| "not a member".to_owned()),
                    yes(m.healthy),
                    m.version.clone().unwrap_or_else(dash),
                    pod.map_or_else(|| "missing".to_owned(), |p| p.phase.clone()),
                    pod.map_or_else(dash, |p| yes(p.ready)),
                    pod.map_or_else(dash, |p| p.restarts.to_string()),
                    node_column(m, now),
                    m.zone.clone().unwrap_or_else(dash),
                    m.live.as_ref().map_or_else(dash, |l| {
                        format!(
                            "{} ({} used)",
                            dkv_readouts::size::binary(l.db_size),
                            dkv_readouts::size::binary(l.db_size_in_use)
                        )
                    }),
                    m.live
                        .as_ref()
                        .map_or_else(dash, |l| l.raft_index.to_string()),
                    m.live
                        .as_ref()
                        .map_or_else(dash, |l| l.raft_lag.to_string()),
                    m.live.as_ref().map_or_else(dash, |l| {
                        let mut notes = l.alarms.clone();
                        notes.extend(l.errors.iter().cloned());
                        if notes.is_empty() {
                            "-".to_owned()
                        } else {
                            notes.join(", ")
                        }
                    }),
                ]
            })
            .collect();
        out.push_str(&output::table(
            "  ",
            &[
                "NAME",
                "ID",
                "ROLE",
                "HEALTHY",
                "VERSION",
                "POD",
                "READY",
                "RESTARTS",
                "NODE",
                "ZONE",
                "DB SIZE",
                "RAFT INDEX",
                "LAG",
                "ALARMS",
            ],
            &rows,
        ));
    }
    if let Some(error) = &r.live_error {
        out.push_str(&format!("  (etcd's own figures are missing: {error})\n"));
    }
}

/// Defragmentation and backups.
fn maintenance_text(out: &mut String, r: &Report, now: Timestamp) {
    if let Some(d) = &r.defrag {
        out.push_str(&format!(
            "\nDefrag:      {} (members with {}%+ free), last run {}, next {}\n",
            d.schedule,
            d.threshold_percent,
            d.last_run
                .as_ref()
                .map_or_else(|| "never".to_owned(), |t| time::ago(t, now)),
            d.next_run.map_or_else(
                || "-".to_owned(),
                |t| format!("{t} ({})", time::until(t, now))
            )
        ));
    }
    out.push_str("\nBackups:\n");
    let b = &r.backups;
    out.push_str(&format!(
        "  Last:        {}\n",
        match (&b.last, &b.last_time) {
            (Some(last), time) => format!(
                "{}{}, {}, {}",
                last.name,
                time.as_ref()
                    .map_or_else(String::new, |t| format!(" ({})", time::ago(t, now))),
                dkv_readouts::size::binary(last.size_bytes),
                last.uri
            ),
            (None, _) => "none".to_owned(),
        }
    ));
    out.push_str(&format!(
        "  Scheduled:   {}\n",
        match (&b.schedule, b.next_scheduled) {
            (Some(s), Some(next)) => format!("{s} (next {next}, {})", time::until(next, now)),
            (Some(s), None) => s.clone(),
            (None, _) => "no schedule".to_owned(),
        }
    ));
    out.push_str(&format!(
        "  In progress: {}\n",
        if b.in_progress.is_empty() {
            "none".to_owned()
        } else {
            b.in_progress.join(", ")
        }
    ));
    if let Some(line) = output::continuous_line(b.continuous.as_ref(), now) {
        out.push_str(&format!("  Continuous:  {line}\n"));
    }
}

/// The certificates the operator issued, with when they expire.
fn certificates_text(out: &mut String, r: &Report, now: Timestamp) {
    out.push_str("\nCertificates:\n");
    if r.certificates.is_empty() {
        out.push_str("  (no TLS)\n");
    } else {
        let rows: Vec<Vec<String>> = r
            .certificates
            .iter()
            .map(|c| {
                vec![
                    c.secret.clone(),
                    c.key.clone(),
                    c.not_after.to_string(),
                    time::until(c.not_after, now),
                    c.subject.clone(),
                ]
            })
            .collect();
        out.push_str(&output::table(
            "  ",
            &["SECRET", "ENTRY", "NOT AFTER", "EXPIRES", "SUBJECT"],
            &rows,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn members_show_their_node_and_zone_and_how_long_a_lost_node_is_gone() {
        let cluster: DistributedKV = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 2, "image": "registry.k8s.io/etcd:3.5.16-0"},
            "status": {"members": [
                {"name": "orders-0", "healthy": true, "node": "node-1", "zone": "zone-a"},
                {"name": "orders-1", "healthy": false, "node": "node-2", "zone": "zone-b",
                 "nodeLostSince": "2026-11-26T08:00:00Z"},
            ]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let now: Timestamp = "2026-11-26T08:05:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let report = report(&cluster, &[], &[], &[], now);
        let text = text(&report, now);
        let line = |member: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(member))
                .unwrap_or_else(|| panic!("no line for {member} in {text}"))
                .to_owned()
        };
        assert!(text.contains("ZONE"), "{text}");
        assert!(line("orders-0").contains("node-1"), "{text}");
        assert!(line("orders-0").contains("zone-a"), "{text}");
        assert!(!line("orders-0").contains("lost"), "{text}");
        assert!(line("orders-1").contains("node-2 (lost 5m ago)"), "{text}");
        assert!(line("orders-1").contains("zone-b"), "{text}");
    }

    #[test]
    fn an_adoption_lists_the_old_members_and_which_may_be_stopped() {
        let cluster: DistributedKV = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
                     "bootstrap": {"join": {"endpoints": ["http://10.0.0.1:2379"]}}},
            "status": {"adoption": {
                "phase": "OldMembersLeaving",
                "message": "removing etcd-b, which was there before dkv",
                "oldMembersLeft": 2,
                "oldMembers": [
                    {"name": "etcd-a", "id": "a1", "peerURLs": ["http://10.0.0.1:2380"], "removed": true},
                    {"name": "etcd-b", "id": "b2", "peerURLs": ["http://10.0.0.2:2380"], "healthy": true},
                ],
            }},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let now = Timestamp::UNIX_EPOCH;
        let text = text(&report(&cluster, &[], &[], &[], now), now);
        let line = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("no line for {name} in {text}"))
                .to_owned()
        };
        assert!(
            text.contains("Adoption:    OldMembersLeaving — removing etcd-b"),
            "{text}"
        );
        assert!(
            line("etcd-a").contains("removed: its process may be stopped"),
            "{text}"
        );
        assert!(
            line("etcd-b").contains("member: keep its process running"),
            "{text}"
        );
        assert!(line("etcd-b").contains("http://10.0.0.2:2380"), "{text}");
    }

    /// The standby `dr/orders-dr` of `shop/orders` with `status.standby`.
    fn standby(enabled: bool, status: serde_json::Value) -> DistributedKV {
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders-dr", "namespace": "dr"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
                     "auth": {"enabled": true},
                     "standby": {"enabled": enabled, "source": {
                         "uri": "s3://dkv/orders/", "cluster": "shop/orders"}}},
            "status": {"standby": status},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The lines of `text` from the one starting `Standby:` to the next
    /// blank line.
    fn standby_section(text: &str) -> Vec<&str> {
        text.lines()
            .skip_while(|l| !l.starts_with("Standby:"))
            .take_while(|l| !l.is_empty())
            .collect()
    }

    #[test]
    fn a_following_standby_shows_its_source_what_it_holds_and_its_lag() {
        let cluster = standby(
            true,
            json!({
                "phase": "Following",
                "source": "shop/orders in s3://dkv/orders/",
                "appliedRevision": 120453,
                "appliedTime": "2026-11-26T09:29:50Z",
                "lagRevisions": 12,
                "lagSeconds": 4,
                "lastChecked": "2026-11-26T09:29:58Z",
            }),
        );
        let now: Timestamp = "2026-11-26T09:30:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let report = report(&cluster, &[], &[], &[], now);
        let text = text(&report, now);
        assert_eq!(
            standby_section(&text),
            [
                "Standby:     Following — reads only, writes refused (kubectl dkv promote makes it take writes)",
                "  Source:      shop/orders in s3://dkv/orders/",
                "  Applied:     source revision 120453, recorded by the source's backup 2026-11-26T09:29:50Z (10s ago)",
                "  Lag:         4s behind, 12 source revisions stored and not applied yet",
                "  Checked:     the source's store, 2s ago",
            ],
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["standby"]["phase"], "Following", "{json}");
        assert_eq!(json["standby"]["lagSeconds"], 4, "{json}");
    }

    #[test]
    fn a_standby_that_cannot_go_on_says_why() {
        let cluster = standby(
            true,
            json!({
                "phase": "Stopped",
                "source": "shop/orders in s3://dkv/orders/",
                "appliedRevision": 120453,
                "lagSeconds": 0,
                "lagRevisions": 0,
                "message": "the source's store holds no change after revision 120453",
            }),
        );
        let now = Timestamp::UNIX_EPOCH;
        let text = text(&report(&cluster, &[], &[], &[], now), now);
        let section = standby_section(&text);
        assert!(
            section.contains(&"  Lag:         none: every change the source stored is applied"),
            "{text}"
        );
        assert_eq!(
            section.last(),
            Some(&"  Message:     the source's store holds no change after revision 120453"),
            "{text}"
        );
    }

    #[test]
    fn a_promoted_standby_shows_the_source_revision_it_holds_and_when() {
        let cluster = standby(
            false,
            json!({
                "phase": "Promoted",
                "source": "shop/orders in s3://dkv/orders/",
                "appliedRevision": 120460,
                "lastChecked": "2026-11-26T09:29:58Z",
                "promotedAtRevision": 120460,
                "promotedTime": "2026-11-26T09:30:00Z",
            }),
        );
        let now: Timestamp = "2026-11-26T09:35:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let text = text(&report(&cluster, &[], &[], &[], now), now);
        assert_eq!(
            standby_section(&text),
            [
                "Standby:     Promoted — an ordinary cluster now: takes writes, follows no more",
                "  Source:      shop/orders in s3://dkv/orders/",
                "  Promoted at: source revision 120460, 2026-11-26T09:30:00Z (5m ago)",
            ],
            "{text}"
        );
    }

    #[test]
    fn a_demoted_cluster_shows_the_revision_its_new_primary_must_be_promoted_at() {
        let cluster = standby(
            true,
            json!({
                "phase": "Demoted",
                "source": "shop-dr/orders-dr in s3://dr/",
                "demotedAtRevision": 48213,
                "demotedTime": "2026-11-26T09:30:00Z",
            }),
        );
        let now: Timestamp = "2026-11-26T09:31:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let text = text(&report(&cluster, &[], &[], &[], now), now);
        assert_eq!(
            standby_section(&text),
            [
                "Standby:     Demoted — demoted: writes refused, waiting for its source to be promoted at the revision below",
                "  Source:      shop-dr/orders-dr in s3://dr/",
                "  Demoted at:  its own revision 48213 (kubectl dkv promote SOURCE --at-revision 48213 on the source's cluster)",
            ],
            "{text}"
        );
    }

    #[test]
    fn a_standby_not_reported_on_yet_is_shown_and_a_cluster_that_is_none_is_not() {
        let now = Timestamp::UNIX_EPOCH;
        let page = text(
            &report(&standby(true, json!(null)), &[], &[], &[], now),
            now,
        );
        assert!(
            page.contains("Standby:     (not started) — reads only"),
            "{page}"
        );
        let plain: DistributedKV = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let report = report(&plain, &[], &[], &[], now);
        assert!(!text(&report, now).contains("Standby:"));
        let json = serde_json::to_value(&report).unwrap_or_else(|e| panic!("{e}"));
        assert!(json.get("standby").is_none(), "{json}");
    }

    #[test]
    fn members_are_listed_in_ordinal_order_with_pods_of_no_member_last() {
        let cluster: DistributedKV = serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders", "namespace": "shop"},
            "spec": {"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0"},
            "status": {"members": [
                {"name": "orders-10", "healthy": true},
                {"name": "orders-9", "healthy": true},
                {"name": "", "healthy": false},
                {"name": "orders-1", "healthy": true},
            ]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let now = Timestamp::UNIX_EPOCH;
        let names: Vec<String> = report(&cluster, &[], &[], &[], now)
            .members
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["orders-1", "orders-9", "orders-10", ""]);
    }
}
