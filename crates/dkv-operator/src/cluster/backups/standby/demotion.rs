//! Demotion, the old primary's half of a switchover: a running cluster
//! given `spec.standby.enabled: true` (its source: the standby that is to
//! take over) stops taking writes, makes its last changes durable, waits
//! for that standby's promotion and then follows it.
//!
//! Each pass, until it follows ([`demote`]):
//! 1. every role but `root` is made read-only ([`super::roles`]): client
//!    writes are refused from the first pass on;
//! 2. its keys are detached from their leases ([`super::leases`]): a lease
//!    ending here later would delete a key the new primary keeps (the
//!    rewrites are changes like any other: its continuous backup records
//!    them and the standby applies them);
//! 3. its revision `R` is read; once its own continuous backup has stored
//!    every change up to `R`, it is *demoted at `R`*
//!    (`status.standby.demotedAtRevision`): the standby now holds, or
//!    will hold, everything it wrote;
//! 4. it reads the standby's promotion record ([`super::promotion`]) in
//!    the standby's own destination (its `spec.standby.source` now). A
//!    record older than the demotion is an earlier switchover's and is
//!    waited past. One that says the standby was promoted holding exactly
//!    `R` of this cluster is the switchover: the cluster's offset becomes
//!    `R` less the new primary's revision then, recorded on its
//!    StatefulSet and in status, and the next pass starts its follower.
//!    Any other revision means the new primary does not hold what this
//!    cluster holds, or holds what it does not: it cannot follow it, and
//!    says so (`Stopped`).
//!
//! `enabled: false` before it follows calls the demotion off
//! ([`call_off`]): the roles get their grants back.

use dkv_api::distributedkv::v1beta1::{StandbyPhase, StandbyStatus};
use dkv_backup::{Location, Store};
use jiff::Timestamp;
use tracing::info;

use super::{OFFSET_ANNOTATION, leases, promotion, roles};
use crate::cluster::backups::BackupsReach;
use crate::cluster::error::{Error, Result};
use crate::cluster::security::credentials::Credentials;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;

/// Where a demotion stands after a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demotion {
    /// When writes were first refused.
    pub since: Timestamp,
    /// The revision every change up to which is durable, once it is.
    pub durable_at: Option<i64>,
    /// What it waits for, or why it cannot go on.
    pub message: Option<String>,
    /// It cannot follow the new primary (see `message`).
    pub stopped: bool,
    /// It follows now: the new primary's revision it goes on from, and the
    /// offset recorded.
    pub following: Option<(i64, i64)>,
    /// `enabled: false` before it followed: it takes writes again.
    pub called_off: bool,
}

/// Whether `recorded` says a demotion is under way.
pub fn under_way(recorded: Option<&StandbyStatus>) -> bool {
    matches!(
        recorded.and_then(|s| s.phase),
        Some(StandbyPhase::Demoting | StandbyPhase::Demoted)
    )
}

/// One pass of the demotion of `cluster` (see the module's steps).
pub async fn demote(
    cluster: &ValidatedCluster,
    (endpoints, credentials): (&[String], &Credentials),
    recorded: Option<&StandbyStatus>,
    reach: &BackupsReach<'_>,
    now: Timestamp,
) -> Result<Demotion> {
    let (namespace, name) = (&cluster.namespace, &cluster.name);
    reach.followers.stop(namespace, name);
    let mut demotion = Demotion {
        since: began(recorded, now),
        durable_at: None,
        message: None,
        stopped: false,
        following: None,
        called_off: false,
    };
    let Some(standby) = cluster.standby.as_ref() else {
        return Ok(demotion);
    };
    let mut etcd =
        roles::connect(endpoints, credentials.client_identity(), credentials.user()).await?;
    let held = roles::hold_read_only(reach.client, cluster, &mut etcd).await?;
    if held > 0 {
        info!(grants = held, "demoted: writes refused");
    }
    let detached = leases::detach_all(&mut etcd).await?;
    if detached > 0 {
        info!(keys = detached, "demoted: keys detached from their leases");
    }
    let revision = etcd
        .get(
            "",
            Some(
                etcd_client::GetOptions::new()
                    .with_all_keys()
                    .with_count_only(),
            ),
        )
        .await
        .map_err(|e| Error::Standby {
            message: format!("reading the demoted cluster's revision: {e}"),
            transient: true,
        })?
        .header()
        .map_or(0, |h| h.revision());
    if cluster
        .backup
        .as_ref()
        .is_none_or(|b| b.continuous.is_none())
    {
        // The admission webhook refuses this; without it, status says so.
        demotion.message = Some(format!(
            "writes refused at revision {revision}; a demoted cluster makes its last changes durable through its own continuous backup, which the standby to be promoted reads: set spec.backup.continuous.enabled: true, or spec.standby.enabled: false to call the demotion off"
        ));
        return Ok(demotion);
    }
    let stored = reach
        .agents
        .report(namespace, name)
        .and_then(|r| r.newest)
        .map(|p| p.revision);
    if stored.is_none_or(|stored| stored < revision) {
        demotion.message = Some(format!(
            "writes refused; waiting for its continuous backup to store every change up to revision {revision} (stored: {})",
            stored.map_or_else(|| "nothing yet".to_owned(), |s| format!("up to {s}"))
        ));
        return Ok(demotion);
    }
    demotion.durable_at = Some(revision);
    let source = standby.describe();
    let waiting = format!(
        "demoted at revision {revision}, every change up to it stored; waiting for {source} to be promoted holding it (kubectl dkv promote {} --at-revision {revision}, on its Kubernetes cluster), then this cluster follows it",
        standby.source.cluster
    );
    let Some(config) =
        super::super::store_config(reach, namespace, standby.credentials_secret.as_deref()).await?
    else {
        demotion.message = Some(format!(
            "{waiting}; spec.standby.source.credentialsSecret: Secret {:?} does not exist: create it with credentials that can read the new primary's store",
            standby.credentials_secret.as_deref().unwrap_or_default()
        ));
        return Ok(demotion);
    };
    let record = match read_promotion(standby, &config).await {
        Ok(record) => record,
        Err(e) => {
            demotion.message = Some(format!(
                "{waiting}; its promotion record cannot be read: {e}"
            ));
            return Ok(demotion);
        }
    };
    // A record from before the demotion is an earlier promotion's.
    let Some(record) = record.filter(|r| r.time >= demotion.since) else {
        demotion.message = Some(waiting);
        return Ok(demotion);
    };
    let this = format!("{namespace}/{name}");
    if record.source != this || record.source_revision != revision {
        demotion.stopped = true;
        demotion.message = Some(format!(
            "{} was promoted holding revision {} of {}, but this cluster was demoted at its revision {revision}: it cannot follow a primary that does not hold exactly what it holds; to make it a standby of {}, delete it and create it again with spec.standby (seeded from the new primary's newest point), after copying any change made here after revision {} if it matters",
            record.cluster,
            record.source_revision,
            record.source,
            record.cluster,
            record.source_revision
        ));
        return Ok(demotion);
    }
    let offset = revision - record.revision;
    record_offset(reach.client, namespace, &naming::statefulset(name), offset).await?;
    info!(
        source = %record.cluster,
        from = record.revision,
        offset,
        "demoted cluster follows its new primary"
    );
    demotion.following = Some((record.revision, offset));
    Ok(demotion)
}

/// Reads the promotion record of the standby `standby` names as source.
async fn read_promotion(
    standby: &crate::cluster::validate::ValidatedStandby,
    config: &dkv_backup::StoreConfig,
) -> dkv_backup::Result<Option<promotion::PromotionRecord>> {
    let destination = Location::parse(standby.source.destination.as_str())?;
    let store = Store::open(&destination, config)?;
    let at = promotion::location(
        &destination,
        &standby.source.namespace,
        &standby.source.cluster,
    );
    promotion::read(&store, &at).await
}

/// Records `offset` on the StatefulSet (status records it in the same
/// pass).
async fn record_offset(
    client: &kube::Client,
    namespace: &str,
    statefulset: &str,
    offset: i64,
) -> Result<()> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(OFFSET_ANNOTATION.to_owned(), offset.to_string().into());
    crate::cluster::backups::annotate(client, namespace, statefulset, annotations).await
}

/// When the demotion `recorded` says is under way began, else `now`.
fn began(recorded: Option<&StandbyStatus>, now: Timestamp) -> Timestamp {
    recorded
        .filter(|_| under_way(recorded))
        .and_then(|s| s.demoted_time.as_ref())
        .map_or(now, |t| t.0)
}

/// Calls a demotion off before the cluster followed: its roles get their
/// grants back.
pub async fn call_off(
    cluster: &ValidatedCluster,
    (endpoints, credentials): (&[String], &Credentials),
    recorded: Option<&StandbyStatus>,
    reach: &BackupsReach<'_>,
    now: Timestamp,
) -> Result<Demotion> {
    let mut etcd =
        roles::connect(endpoints, credentials.client_identity(), credentials.user()).await?;
    let given = roles::give_back(reach.client, cluster, &mut etcd).await?;
    info!(grants = given, "demotion called off: writes taken again");
    Ok(Demotion {
        since: began(recorded, now),
        durable_at: None,
        message: Some(
            "demotion called off (spec.standby.enabled: false) before this cluster followed a new primary: it takes writes again".to_owned(),
        ),
        stopped: false,
        following: None,
        called_off: true,
    })
}
