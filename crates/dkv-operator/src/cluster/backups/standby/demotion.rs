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

impl Demotion {
    /// A demotion that began at `since` and has got nowhere yet.
    fn began(since: Timestamp) -> Self {
        Self {
            since,
            durable_at: None,
            message: None,
            stopped: false,
            following: None,
            called_off: false,
        }
    }
}

/// How much older than the demotion a promotion record may look (the two
/// operators' clocks may disagree) and still be this switchover's.
const CLOCK_SKEW: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);

/// Whether `recorded` says a demotion is under way: demoting, demoted and
/// waiting, or stopped before it followed (which stays so: only a new
/// promotion record that matches lets it go on).
pub fn under_way(recorded: Option<&StandbyStatus>) -> bool {
    recorded.is_some_and(|s| match s.phase {
        Some(StandbyPhase::Demoting | StandbyPhase::Demoted) => true,
        Some(StandbyPhase::Stopped) => s.demoted_time.is_some() && s.revision_offset.is_none(),
        _ => false,
    })
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
    let mut demotion = Demotion::began(began(recorded, now));
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
        .map(|h| h.revision())
        .ok_or_else(|| Error::Standby {
            message: "reading the demoted cluster's revision: etcd answered without a header"
                .to_owned(),
            transient: true,
        })?;
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
        "demoted at revision {revision}, every change up to it stored; waiting for {source} to be promoted holding it (kubectl dkv promote {} --at-revision {revision}, on its Kubernetes cluster; it needs a continuous backup of its own, where its promotion is recorded), then this cluster follows it",
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
    let Some(record) = record.filter(|r| is_this_switchovers(r, cluster, demotion.since)) else {
        demotion.message = Some(waiting);
        return Ok(demotion);
    };
    if record.source_revision != revision {
        demotion.stopped = true;
        demotion.message = Some(format!(
            "{} was promoted holding revision {} of this cluster, which was demoted at its revision {revision}: it cannot follow a primary that does not hold exactly what it holds; to make it a standby of {}, delete it and create it again with spec.standby (seeded from the new primary's newest point), after copying any change made here after revision {} if it matters",
            record.cluster, record.source_revision, record.cluster, record.source_revision
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

/// Whether `record` is the promotion of a standby of `cluster` made after
/// its demotion began (`since`, give or take [`CLOCK_SKEW`]): one from an
/// earlier switchover, or of a standby of another cluster, is not.
fn is_this_switchovers(
    record: &promotion::PromotionRecord,
    cluster: &ValidatedCluster,
    since: Timestamp,
) -> bool {
    let own_destination = cluster
        .backup
        .as_ref()
        .map(|b| b.destination.as_str().trim_end_matches('/').to_owned());
    record.source == format!("{}/{}", cluster.namespace, cluster.name)
        && own_destination.as_deref() == Some(record.source_uri.trim_end_matches('/'))
        && record.time >= since - CLOCK_SKEW
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
/// grants back — unless its source was already promoted holding what it
/// holds (the switchover happened: two primaries would take writes), which
/// it then says, `Stopped`.
pub async fn call_off(
    cluster: &ValidatedCluster,
    (endpoints, credentials): (&[String], &Credentials),
    recorded: Option<&StandbyStatus>,
    reach: &BackupsReach<'_>,
    now: Timestamp,
) -> Result<Demotion> {
    let since = began(recorded, now);
    let mut demotion = Demotion {
        durable_at: recorded.and_then(|s| s.demoted_at_revision),
        ..Demotion::began(since)
    };
    if let (Some(standby), Some(at)) = (cluster.standby.as_ref(), demotion.durable_at)
        && let Some(config) = super::super::store_config(
            reach,
            &cluster.namespace,
            standby.credentials_secret.as_deref(),
        )
        .await?
        && let Ok(Some(record)) = read_promotion(standby, &config).await
        && is_this_switchovers(&record, cluster, since)
        && record.source_revision == at
    {
        demotion.stopped = true;
        demotion.message = Some(format!(
            "not called off: {} was already promoted holding this cluster's revision {at}, so both would take writes; set spec.standby.enabled: true to follow it",
            record.cluster
        ));
        return Ok(demotion);
    }
    let mut etcd =
        roles::connect(endpoints, credentials.client_identity(), credentials.user()).await?;
    let given = roles::give_back(reach.client, cluster, &mut etcd).await?;
    info!(grants = given, "demotion called off: writes taken again");
    demotion.durable_at = None;
    demotion.called_off = true;
    demotion.message = Some(
        "demotion called off (spec.standby.enabled: false) before this cluster followed a new primary: it takes writes again (keys it detached from their leases stay without one)".to_owned(),
    );
    Ok(demotion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(value: serde_json::Value) -> StandbyStatus {
        serde_json::from_value(value).expect("a standby status")
    }

    #[test]
    fn a_demotion_that_stopped_before_it_followed_stays_under_way() {
        let at = "2026-12-01T00:00:00Z";
        assert!(under_way(Some(&status(json!({"phase": "Demoting"})))));
        assert!(under_way(Some(&status(json!({"phase": "Demoted"})))));
        assert!(under_way(Some(&status(
            json!({"phase": "Stopped", "demotedTime": at})
        ))));
        // Stopped after it followed (a chain broke), or a seeded standby
        // that stopped: the follower's, not the demotion's.
        assert!(!under_way(Some(&status(
            json!({"phase": "Stopped", "demotedTime": at, "revisionOffset": -5})
        ))));
        assert!(!under_way(Some(&status(json!({"phase": "Stopped"})))));
        assert!(!under_way(Some(&status(json!({"phase": "Following"})))));
        assert!(!under_way(None));
    }

    #[test]
    fn only_a_record_naming_this_cluster_and_its_store_made_since_the_demotion_is_followed() {
        let cluster = crate::cluster::validate::validated_for_tests(json!({
            "size": 1,
            "image": "registry.k8s.io/etcd:3.5.16-0",
            "auth": {"enabled": true},
            "backup": {"destination": {"uri": "s3://prod/"}, "schedule": "0 0 1 1 *",
                       "continuous": {"enabled": true}},
            "standby": {"enabled": true, "source": {"uri": "s3://dr/", "cluster": "shop-dr/orders-dr"}}
        }));
        let since: Timestamp = "2026-12-01T10:00:00Z".parse().expect("a time");
        let record = promotion::PromotionRecord {
            format: promotion::FORMAT.to_owned(),
            cluster: "shop-dr/orders-dr".to_owned(),
            source: "shop/orders".to_owned(),
            source_uri: "s3://prod".to_owned(),
            source_revision: 480,
            revision: 1_000_000_480,
            time: since + jiff::SignedDuration::from_secs(2),
        };
        assert!(is_this_switchovers(&record, &cluster, since));
        // A clock behind by a minute: still this switchover's.
        let behind = promotion::PromotionRecord {
            time: since - jiff::SignedDuration::from_mins(1),
            ..record.clone()
        };
        assert!(is_this_switchovers(&behind, &cluster, since));
        // An earlier switchover's, another cluster's, another store's.
        let earlier = promotion::PromotionRecord {
            time: since - jiff::SignedDuration::from_hours(3),
            ..record.clone()
        };
        assert!(!is_this_switchovers(&earlier, &cluster, since));
        let other = promotion::PromotionRecord {
            source: "shop/invoices".to_owned(),
            ..record.clone()
        };
        assert!(!is_this_switchovers(&other, &cluster, since));
        let elsewhere = promotion::PromotionRecord {
            source_uri: "s3://staging/".to_owned(),
            ..record
        };
        assert!(!is_this_switchovers(&elsewhere, &cluster, since));
    }
}
