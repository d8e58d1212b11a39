//! Stage 3, connected: the cluster's credentials ensured
//! ([`crate::cluster::security::credentials`]), then etcd's view through them — its
//! members, the alarms they raised, and the members its corruption checks
//! found to differ from their peers.

use std::sync::Arc;

use dkv_etcd::{AlarmKind, EtcdAdmin};

use crate::cluster::context::Context;
use crate::cluster::dereference::Observed;
use crate::cluster::error::Result;
use crate::cluster::membership::observe;
use crate::cluster::membership::{DowngradeGate, ObservedMember};
use crate::cluster::recovery::corruption::{self, Agreement, CorruptMember};
use crate::cluster::security::credentials::{self, Credentials};
use crate::cluster::upgrade::downgrade;
use crate::metrics::{CorruptFinding, MemberAlarm};
use crate::parts::naming;
use dkv_member::record::ClusterState;

use super::validated::Validated;

/// The credentials, and what etcd said through them.
pub struct Connected {
    pub credentials: Credentials,
    /// The operator's etcd client, once the cluster is deployed and a member
    /// has an endpoint.
    pub admin: Option<Arc<dyn EtcdAdmin>>,
    /// The endpoints of the member pods that have one.
    pub endpoints: Vec<String>,
    /// etcd's members (`None`: not asked, or no member answered).
    pub members: Option<Vec<ObservedMember>>,
    /// The alarms etcd has raised (`None`: not asked).
    pub alarms: Option<Vec<MemberAlarm>>,
    /// The members etcd's corruption checks found to differ from their
    /// peers: alarmed, or refused at start.
    pub corrupt: Vec<CorruptMember>,
    /// While a CORRUPT alarm names no member: what the members' hashes say.
    pub agreement: Agreement,
    /// Whether members may restart onto an older minor version yet.
    pub downgrade: DowngradeGate,
}

impl Connected {
    /// etcd refuses writes: its backend reached the quota.
    pub fn space_alarm(&self) -> bool {
        self.alarms
            .iter()
            .flatten()
            .any(|a| a.kind == AlarmKind::NoSpace)
    }

    /// The alarms, a CORRUPT alarm that names no member (etcd 3.4/3.5 raise
    /// it on member 0) attributed to the members whose hashes differ, as
    /// the metrics and alerts name them.
    pub fn attributed_alarms(&self, cluster: &str) -> Vec<MemberAlarm> {
        let alarms = self.alarms.as_deref().unwrap_or_default();
        let attributed: Vec<MemberAlarm> = self
            .corrupt
            .iter()
            .filter(|c| c.found_by == corruption::FoundBy::Alarm)
            .map(|c| MemberAlarm {
                member: naming::member(cluster, c.ordinal),
                kind: AlarmKind::Corrupt,
            })
            .collect();
        let found = !attributed.is_empty();
        let mut out: Vec<MemberAlarm> = alarms
            .iter()
            .filter(|a| {
                !found
                    || a.kind != AlarmKind::Corrupt
                    || naming::ordinal_of(cluster, &a.member).is_some()
            })
            .cloned()
            .chain(attributed)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The members whose data differs from their peers', for the metrics.
    pub fn corrupt_findings(&self, cluster: &str) -> Vec<CorruptFinding> {
        self.corrupt
            .iter()
            .map(|c| CorruptFinding {
                member: naming::member(cluster, c.ordinal),
                found_by: c.found_by.label(),
            })
            .collect()
    }

    /// Every member answered, healthy.
    pub fn all_healthy(&self) -> bool {
        self.members
            .as_ref()
            .is_some_and(|m| !m.is_empty() && m.iter().all(|m| m.healthy))
    }

    /// (Secret, notAfter) of each certificate the members and the operator
    /// use.
    pub fn certificates(&self) -> Vec<(String, jiff::Timestamp)> {
        self.credentials
            .tls
            .as_ref()
            .map(|t| t.expiries.clone())
            .unwrap_or_default()
    }
}

/// Ensures the credentials of the validated cluster and asks etcd, through
/// them, for its members and alarms.
pub async fn connected(
    validated: &Validated,
    observed: &Observed,
    ctx: &Context,
) -> Result<Connected> {
    let cluster = &validated.cluster;
    let deployed = observed.statefulset.is_some();
    let exists = deployed
        || observed
            .record
            .as_ref()
            .is_some_and(|r| r.state == ClusterState::Existing);
    let idle = observed.recorded.operation.is_none();
    let pod_serials = validated
        .pods
        .iter()
        .map(|p| p.view.tls_serial.clone())
        .collect();
    let credentials = credentials::ensure(
        cluster,
        pod_serials,
        exists,
        idle,
        &ctx.client,
        ctx.certificate_lifetime,
    )
    .await?;
    let endpoints = validated.endpoints();
    let admin = (!endpoints.is_empty() && deployed).then(|| {
        ctx.etcd.connect(
            &endpoints,
            credentials.client_identity(),
            credentials.user(),
        )
    });
    let members = match &admin {
        Some(admin) => {
            observe::observe_members(&cluster.name, admin.as_ref(), &validated.pods).await
        }
        None => None,
    };
    let alarms = match (&admin, &members) {
        (Some(admin), Some(_)) => admin.alarms().await.ok(),
        _ => None,
    };
    let alarms = alarms.map(|alarms| {
        alarms
            .iter()
            .map(|a| MemberAlarm {
                member: members
                    .iter()
                    .flatten()
                    .find(|m| m.id == a.member.0)
                    .map_or_else(
                        || format!("{:x}", a.member.0),
                        |m| naming::member(&cluster.name, m.ordinal),
                    ),
                kind: a.kind,
            })
            .collect()
    });
    let alarmed = alarms.as_deref().unwrap_or_default();
    // An alarm that names none of the members: their own hashes tell who
    // differs, and when all agree again.
    let agreement = match (&admin, &members) {
        (Some(admin), Some(members)) if corruption::unattributed_alarm(&cluster.name, alarmed) => {
            let hashes = futures::future::join_all(validated.pods.iter().filter_map(|pod| {
                let endpoint = pod.endpoint.clone()?;
                let ordinal = pod.view.ordinal;
                let admin = admin.clone();
                Some(async move {
                    let hash = admin.kv_hash(&endpoint).await.ok().flatten()?;
                    Some(corruption::MemberHash { ordinal, hash })
                })
            }))
            .await;
            let hashes: Vec<corruption::MemberHash> = hashes.into_iter().flatten().collect();
            corruption::compare(&hashes, members.len())
        }
        _ => Agreement::Unknown,
    };
    let corrupt = corruption::corrupt_members(&cluster.name, alarmed, &agreement, &validated.pods);
    let downgrade = match (&admin, &members) {
        (Some(admin), Some(members)) => {
            downgrade::observe(admin.as_ref(), members, cluster.version).await
        }
        _ => DowngradeGate::Open,
    };
    Ok(Connected {
        credentials,
        admin,
        endpoints,
        members,
        alarms,
        corrupt,
        agreement,
        downgrade,
    })
}
