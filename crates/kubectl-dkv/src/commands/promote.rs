//! `promote`: a standby (`spec.standby`) made an ordinary cluster, by
//! setting `spec.standby.enabled: false`.
//!
//! The operator does the promotion: it applies everything the source
//! stored, records the source revision the cluster then holds
//! (`status.standby.promotedAtRevision`) and gives the roles their writes
//! back. This command only asks, and with `--wait` watches status until
//! it says `Promoted`. It sends `enabled: false` alone, so asking twice or
//! racing another client cannot make it follow again (`enabled: true` is
//! a demotion, which this command never asks for).
//!
//! In a switchover, `--at-revision` refuses if the standby already holds
//! more than the revision its demoted source ended at, asks, waits, and
//! fails unless the promotion held exactly that revision. A demoted
//! primary is refused: promoting it would call its demotion off.

use std::time::Duration;

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::{StandbyPhase, StandbyStatus};
use dkv_api::labels::RECONCILE_PAUSED;
use jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::client::{Target, is_paused};
use crate::error::{Error, Result};
use crate::time;

/// Where a promotion stands before this command does anything.
#[derive(Debug, PartialEq)]
enum Promotion {
    /// A standby that follows its source: the promotion is to be asked.
    ToAsk,
    /// Asked before (`spec.standby.enabled: false`), not recorded yet.
    Asked,
    /// Status records it: what the cluster held then.
    Done(Box<StandbyStatus>),
}

/// When to ask and how long to wait.
pub struct When {
    /// `--wait`: wait this long for status to say it is promoted.
    pub wait: Option<SignedDuration>,
    /// `--at-revision`: a switchover, which must hold exactly this source
    /// revision; waits this long for the promotion.
    pub at_revision: Option<(i64, SignedDuration)>,
}

/// Asks for the promotion of the standby `name`; with `wait` (or
/// `at_revision`), waits until status says it is promoted (holding
/// exactly that revision of its source).
pub async fn run(target: &Target, name: &str, when: When) -> Result<()> {
    let wait = when.wait;
    let cluster = target.cluster(name).await?;
    let promotion = promotion_of(&cluster, &target.namespace, name)?;
    if let Promotion::Done(standby) = &promotion {
        println!("{}", already_promoted(name, standby, Timestamp::now()));
        return Ok(());
    }
    // A switchover: the source, demoted at `revision`, has stored every
    // change up to it and takes no more, so the promotion (which applies
    // everything stored) holds exactly it — unless the standby already
    // holds more, or the source was not demoted there.
    let wait = match when.at_revision {
        Some((revision, timeout)) => {
            if let Some(standby) = cluster.status.as_ref().and_then(|s| s.standby.as_ref()) {
                holds_no_more(name, standby, revision)?;
            }
            Some(wait.unwrap_or(timeout))
        }
        None => wait,
    };
    let asked = Timestamp::now();
    if promotion == Promotion::ToAsk {
        target
            .api::<DistributedKV>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&promotion_patch()),
            )
            .await
            .map_err(Error::api(
                format!(
                    "setting spec.standby.enabled: false on DistributedKV {}/{name}",
                    target.namespace
                ),
                "DistributedKV",
                &target.namespace,
                name,
            ))?;
    }
    let Some(timeout) = wait else {
        let said = if promotion == Promotion::Asked {
            "promotion already asked, not done yet"
        } else {
            "promotion asked: it applies everything its source stored, then stops following and takes writes"
        };
        println!(
            "distributedkv.dkv.io/{name} {said} (watch: kubectl dkv status {name}, or wait: kubectl dkv promote {name} --wait)"
        );
        return Ok(());
    };
    eprintln!("distributedkv.dkv.io/{name} promotion asked; waiting for it ...");
    let standby = wait_promoted(target, name, timeout).await?;
    if let Some((revision, _)) = when.at_revision {
        held_exactly(name, &standby, revision)?;
    }
    let waited = Timestamp::now().duration_since(asked);
    println!(
        "{}",
        promoted(name, &standby, waited, promotion == Promotion::ToAsk)
    );
    Ok(())
}

/// The merge patch that asks for the promotion. Only `enabled` is sent:
/// the source stays as it is (admission refuses any change to it).
fn promotion_patch() -> serde_json::Value {
    json!({ "spec": { "standby": { "enabled": false } } })
}

/// What promoting `cluster` takes, or why it is refused: a cluster that is
/// not a standby has nothing to promote, and a paused one would not be
/// promoted by the operator (a `--wait` would wait for ever).
fn promotion_of(cluster: &DistributedKV, namespace: &str, name: &str) -> Result<Promotion> {
    let full = format!("{namespace}/{name}");
    let Some(spec) = &cluster.spec.standby else {
        return Err(Error::Refused(format!(
            "DistributedKV {full} is not a standby (it has no spec.standby): it takes writes already and has nothing to promote; name a standby instead (`kubectl get dkv -n {namespace} -o wide` shows a phase in its STANDBY column)"
        )));
    };
    let status = cluster.status.as_ref().and_then(|s| s.standby.as_ref());
    // A promoted cluster demoted again (`enabled: true`) is a standby anew.
    if let Some(standby) = status.filter(|s| s.promoted_at_revision.is_some() && !spec.enabled) {
        return Ok(Promotion::Done(Box::new(standby.clone())));
    }
    if matches!(
        status.and_then(|s| s.phase),
        Some(StandbyPhase::Demoting | StandbyPhase::Demoted)
    ) {
        return Err(Error::Refused(format!(
            "DistributedKV {full} is a demoted primary, not a standby to promote: promote the standby it names as its source (on that one's cluster); to call this demotion off instead, set spec.standby.enabled: false on it by hand"
        )));
    }
    if is_paused(cluster) {
        return Err(Error::Refused(format!(
            "DistributedKV {full} is paused ({RECONCILE_PAUSED}=true), so the operator would not promote it; run `kubectl dkv resume {name}` first"
        )));
    }
    Ok(if spec.enabled {
        Promotion::ToAsk
    } else {
        Promotion::Asked
    })
}

/// Refuses a switchover promotion of a standby that already holds more
/// than `revision` of its source: its source took writes after it.
fn holds_no_more(name: &str, standby: &StandbyStatus, revision: i64) -> Result<()> {
    match standby.applied_revision {
        Some(applied) if applied > revision => Err(Error::Refused(format!(
            "standby {name} holds revision {applied} of its source, past {revision}: its source took writes after that revision, so promoting it would not be the switchover asked for; nothing was changed (check the source's status.standby.demotedAtRevision)"
        ))),
        _ => Ok(()),
    }
}

/// Checks that the promotion held exactly `revision` of the source.
fn held_exactly(name: &str, standby: &StandbyStatus, revision: i64) -> Result<()> {
    match standby.promoted_at_revision {
        Some(held) if held == revision => Ok(()),
        held => Err(Error::Failed(format!(
            "standby {name} was promoted holding revision {} of its source, not {revision}: the source was not demoted there, or had not stored it yet; the demoted cluster will not follow it (its status says why); it takes writes now",
            held.map_or_else(|| "unknown".to_owned(), |r| r.to_string())
        ))),
    }
}

/// Polls the cluster until status says it is promoted, or `timeout`
/// passes.
async fn wait_promoted(
    target: &Target,
    name: &str,
    timeout: SignedDuration,
) -> Result<StandbyStatus> {
    let deadline = Timestamp::now() + timeout;
    loop {
        let cluster = target.cluster(name).await?;
        let standby = cluster.status.and_then(|s| s.standby).unwrap_or_default();
        if standby.phase == Some(StandbyPhase::Promoted) {
            return Ok(standby);
        }
        if Timestamp::now() > deadline {
            return Err(Error::Failed(not_promoted_yet(name, &standby, timeout)));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The line `--wait` prints once the cluster is promoted: what it holds,
/// and how long that took from the ask (`asked_here`), else how long this
/// command waited for an ask made before.
fn promoted(
    name: &str,
    standby: &StandbyStatus,
    waited: SignedDuration,
    asked_here: bool,
) -> String {
    let source = standby.source.as_deref().unwrap_or("its source");
    // The operator may have it done before the first poll.
    let waited = if waited < SignedDuration::from_secs(1) {
        "under a second".to_owned()
    } else {
        time::short(waited)
    };
    let took = if asked_here {
        format!("in {waited}")
    } else {
        format!("(asked before; waited {waited})")
    };
    match standby.promoted_at_revision {
        Some(revision) => format!(
            "distributedkv.dkv.io/{name} promoted {took}: it holds every change of {source} up to source revision {revision}, and takes writes"
        ),
        None => format!(
            "distributedkv.dkv.io/{name} promoted {took}: it holds what {source} stored, and takes writes"
        ),
    }
}

/// The line for a cluster whose promotion status already records.
fn already_promoted(name: &str, standby: &StandbyStatus, now: Timestamp) -> String {
    let source = standby.source.as_deref().unwrap_or("its source");
    let revision = standby
        .promoted_at_revision
        .map_or_else(String::new, |r| format!(" at source revision {r}"));
    let when = standby
        .promoted_time
        .as_ref()
        .map_or_else(String::new, |t| {
            format!(", {} ({})", t.0, time::ago(t, now))
        });
    format!(
        "distributedkv.dkv.io/{name} already promoted{revision} of {source}{when}; nothing to do"
    )
}

/// Why `--wait` gave up: the phase it saw, and the operator's message.
fn not_promoted_yet(name: &str, standby: &StandbyStatus, timeout: SignedDuration) -> String {
    let phase = standby
        .phase
        .map_or_else(|| "not reported yet".to_owned(), |p| p.to_string());
    let message = standby
        .message
        .as_deref()
        .map_or_else(String::new, |m| format!(": {m}"));
    format!(
        "standby {name} is not promoted after {} (standby phase {phase}{message}); the promotion goes on: kubectl dkv status {name}",
        time::short(timeout)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cluster `dr/orders-dr`: a standby when `standby` says whether
    /// it follows, with `status.standby` and `annotations`.
    fn cluster(
        standby: Option<bool>,
        status: serde_json::Value,
        annotations: serde_json::Value,
    ) -> DistributedKV {
        let mut spec = json!({"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
                              "auth": {"enabled": true}});
        if let Some(enabled) = standby {
            spec["standby"] = json!({"enabled": enabled, "source": {
                "uri": "s3://dkv/orders/", "credentialsSecret": "s3-creds", "cluster": "shop/orders"}});
        }
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1beta1",
            "kind": "DistributedKV",
            "metadata": {"name": "orders-dr", "namespace": "dr", "annotations": annotations},
            "spec": spec,
            "status": {"standby": status},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn promoted_status() -> serde_json::Value {
        json!({
            "phase": "Promoted",
            "source": "shop/orders in s3://dkv/orders/",
            "appliedRevision": 120453,
            "promotedAtRevision": 120453,
            "promotedTime": "2026-11-26T09:30:00Z",
        })
    }

    #[test]
    fn a_cluster_that_is_no_standby_is_refused_with_where_to_find_one() {
        let refused = promotion_of(&cluster(None, json!(null), json!({})), "dr", "orders-dr");
        let Err(Error::Refused(message)) = refused else {
            panic!("not refused: {refused:?}");
        };
        assert_eq!(
            message,
            "DistributedKV dr/orders-dr is not a standby (it has no spec.standby): it takes writes already and has nothing to promote; name a standby instead (`kubectl get dkv -n dr -o wide` shows a phase in its STANDBY column)"
        );
    }

    #[test]
    fn a_following_standby_is_asked_to_promote_by_enabled_false_alone() {
        let following = json!({"phase": "Following", "appliedRevision": 120000});
        assert_eq!(
            promotion_of(
                &cluster(Some(true), following, json!({})),
                "dr",
                "orders-dr"
            )
            .ok(),
            Some(Promotion::ToAsk)
        );
        // Nothing but `enabled`: a merge patch leaves the source as it is.
        assert_eq!(
            promotion_patch(),
            json!({"spec": {"standby": {"enabled": false}}})
        );
    }

    #[test]
    fn a_promotion_asked_before_is_not_asked_again() {
        let promoting = json!({"phase": "Promoting", "appliedRevision": 120000});
        assert_eq!(
            promotion_of(
                &cluster(Some(false), promoting, json!({})),
                "dr",
                "orders-dr"
            )
            .ok(),
            Some(Promotion::Asked)
        );
    }

    #[test]
    fn a_promoted_standby_says_what_it_holds_and_is_not_patched() {
        let promoted = cluster(Some(false), promoted_status(), json!({}));
        let Ok(Promotion::Done(standby)) = promotion_of(&promoted, "dr", "orders-dr") else {
            panic!("not seen as promoted");
        };
        let now: Timestamp = "2026-11-26T09:33:00Z"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            already_promoted("orders-dr", &standby, now),
            "distributedkv.dkv.io/orders-dr already promoted at source revision 120453 of shop/orders in s3://dkv/orders/, 2026-11-26T09:30:00Z (3m ago); nothing to do"
        );
    }

    #[test]
    fn a_paused_standby_is_refused_unless_already_promoted() {
        let paused = json!({RECONCILE_PAUSED: "true"});
        let refused = promotion_of(
            &cluster(Some(true), json!({"phase": "Following"}), paused.clone()),
            "dr",
            "orders-dr",
        );
        let Err(Error::Refused(message)) = refused else {
            panic!("not refused: {refused:?}");
        };
        assert!(
            message.contains("is paused") && message.contains("kubectl dkv resume orders-dr"),
            "{message}"
        );
        assert!(matches!(
            promotion_of(
                &cluster(Some(false), promoted_status(), paused),
                "dr",
                "orders-dr"
            ),
            Ok(Promotion::Done(_))
        ));
    }

    #[test]
    fn a_switchover_promotion_holds_exactly_the_demotion_revision() {
        let holding = |applied| StandbyStatus {
            phase: Some(StandbyPhase::Following),
            applied_revision: applied,
            ..StandbyStatus::default()
        };
        assert!(holds_no_more("orders-dr", &holding(None), 500).is_ok());
        assert!(holds_no_more("orders-dr", &holding(Some(500)), 500).is_ok());
        let Err(Error::Refused(message)) = holds_no_more("orders-dr", &holding(Some(501)), 500)
        else {
            panic!("holding more than the demotion revision is not refused");
        };
        assert!(
            message.contains("holds revision 501 of its source, past 500"),
            "{message}"
        );
        let promoted_at = |revision| StandbyStatus {
            phase: Some(StandbyPhase::Promoted),
            promoted_at_revision: Some(revision),
            ..StandbyStatus::default()
        };
        assert!(held_exactly("orders-dr", &promoted_at(500), 500).is_ok());
        let Err(Error::Failed(message)) = held_exactly("orders-dr", &promoted_at(480), 500) else {
            panic!("a promotion short of the demotion revision is not an error");
        };
        assert!(
            message.contains("holding revision 480 of its source, not 500"),
            "{message}"
        );
    }

    #[test]
    fn a_demoted_primary_is_refused() {
        for phase in ["Demoting", "Demoted"] {
            let refused = promotion_of(
                &cluster(Some(true), json!({"phase": phase}), json!({})),
                "dr",
                "orders",
            );
            let Err(Error::Refused(message)) = refused else {
                panic!("{phase}: not refused: {refused:?}");
            };
            assert!(message.contains("a demoted primary"), "{message}");
        }
    }

    #[test]
    fn a_promoted_cluster_demoted_again_is_a_standby_to_promote_anew() {
        let demoted_again = cluster(Some(true), promoted_status(), json!({}));
        assert_eq!(
            promotion_of(&demoted_again, "dr", "orders-dr").ok(),
            Some(Promotion::ToAsk)
        );
    }

    #[test]
    fn waiting_says_the_revision_held_and_how_long_it_took() {
        let standby = StandbyStatus {
            phase: Some(StandbyPhase::Promoted),
            source: Some("shop/orders in s3://dkv/orders/".to_owned()),
            promoted_at_revision: Some(120453),
            ..StandbyStatus::default()
        };
        assert_eq!(
            promoted("orders-dr", &standby, SignedDuration::from_secs(7), true),
            "distributedkv.dkv.io/orders-dr promoted in 7s: it holds every change of shop/orders in s3://dkv/orders/ up to source revision 120453, and takes writes"
        );
        assert!(
            promoted("orders-dr", &standby, SignedDuration::from_secs(7), false)
                .contains("promoted (asked before; waited 7s)")
        );
        assert!(
            promoted(
                "orders-dr",
                &standby,
                SignedDuration::from_millis(300),
                true
            )
            .contains("promoted in under a second:")
        );
        let failing = StandbyStatus {
            phase: Some(StandbyPhase::Failing),
            message: Some("reading the source's store: access denied".to_owned()),
            ..StandbyStatus::default()
        };
        assert_eq!(
            not_promoted_yet("orders-dr", &failing, SignedDuration::from_mins(15)),
            "standby orders-dr is not promoted after 15m (standby phase Failing: reading the source's store: access denied); the promotion goes on: kubectl dkv status orders-dr"
        );
    }
}
