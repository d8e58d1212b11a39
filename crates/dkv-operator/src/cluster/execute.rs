//! Carries out one membership [`Step`] chosen by the planner: etcd calls
//! through [`EtcdAdmin`], and the pod and volume deletions that follow them.
//!
//! `Begin`, `Finish`, `SetReplicas`, `Wait` and `Converged` are not executed
//! here: pinning lives in status, replicas in the built StatefulSet.

use dkv_etcd::{DowngradeAction, EtcdAdmin, MemberId};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, Preconditions};
use tracing::info;

use super::error::{Error, Result};
use super::membership::Step;
use crate::cluster::membership::observe::MemberPod;
use crate::parts::naming;

/// Where a step acts.
pub struct Target<'a> {
    pub client: &'a Client,
    pub admin: &'a dyn EtcdAdmin,
    pub namespace: &'a str,
    pub cluster: &'a str,
    pub pods: &'a [MemberPod],
    /// `https` with peer TLS: the scheme of the peer URLs members are added with.
    pub peer_scheme: &'a str,
}

pub use crate::parts::naming::volume_claim;

/// Executes `step`; returns whether it did anything.
pub async fn execute(step: &Step, target: &Target<'_>) -> Result<bool> {
    let etcd_error = |step: &'static str, member: String| {
        move |source| Error::Etcd {
            step,
            member,
            source,
        }
    };
    match step {
        Step::AddLearner { ordinal } => {
            let peer = naming::member_peer_url(
                target.peer_scheme,
                target.cluster,
                target.namespace,
                *ordinal,
            );
            let member = target
                .admin
                .add_learner(std::slice::from_ref(&peer))
                .await
                .map_err(etcd_error(
                    "add learner",
                    naming::member(target.cluster, *ordinal),
                ))?;
            info!(member = %naming::member(target.cluster, *ordinal), id = %member.id, "added learner");
        }
        Step::Promote { id, ordinal } => {
            target
                .admin
                .promote(MemberId(*id))
                .await
                .map_err(etcd_error(
                    "promote",
                    naming::member(target.cluster, *ordinal),
                ))?;
            info!(member = %naming::member(target.cluster, *ordinal), "promoted learner to voter");
        }
        Step::MoveLeader {
            from,
            from_ordinal,
            to,
        } => {
            // Only the leader can hand leadership over: call it directly.
            let endpoint = target
                .pods
                .iter()
                .find(|p| p.view.ordinal == *from_ordinal)
                .and_then(|p| p.endpoint.clone())
                .ok_or_else(|| Error::Etcd {
                    step: "move leader",
                    member: naming::member(target.cluster, *from_ordinal),
                    source: dkv_etcd::Error::Unavailable {
                        operation: "move leader",
                        message: "the leader's pod has no IP".to_owned(),
                    },
                })?;
            target
                .admin
                .move_leader(&endpoint, MemberId(*to))
                .await
                .map_err(etcd_error(
                    "move leader",
                    naming::member(target.cluster, *from_ordinal),
                ))?;
            info!(from = %MemberId(*from), to = %MemberId(*to), "moved leadership");
        }
        Step::RemoveMember { id, ordinal } => {
            target
                .admin
                .remove(MemberId(*id))
                .await
                .map_err(etcd_error(
                    "remove member",
                    naming::member(target.cluster, *ordinal),
                ))?;
            info!(member = %naming::member(target.cluster, *ordinal), "removed member");
        }
        Step::ReclaimSpace => reclaim_space(target).await?,
        Step::DeleteVolume { ordinal } => {
            let name = volume_claim(target.cluster, *ordinal);
            delete::<PersistentVolumeClaim>(target, &name, "PersistentVolumeClaim", None).await?;
            info!(%name, "deleted the removed member's volume");
        }
        Step::RestartPod { ordinal } => {
            let name = naming::member(target.cluster, *ordinal);
            if serving(target.pods, *ordinal) && budget_can_allow(target.pods.len()) {
                evict(target, &name).await?;
                info!(%name, "restarted member pod (evicted within the disruption budget)");
            } else {
                delete::<Pod>(target, &name, "Pod", None).await?;
                info!(%name, "restarted member pod");
            }
        }
        Step::EvictFromLostNode {
            ordinal,
            pod_uid,
            claim_uid,
        } => {
            // The claim first: it goes once no pod uses it, so the pod the
            // StatefulSet re-creates gets a new one, not this one.
            if let Some(uid) = claim_uid {
                let name = volume_claim(target.cluster, *ordinal);
                let params = exactly(uid, None);
                delete::<PersistentVolumeClaim>(
                    target,
                    &name,
                    "PersistentVolumeClaim",
                    Some(params),
                )
                .await?;
                info!(%name, "deleted the claim of a member on a lost node");
            }
            // Grace period 0: the kubelet of a lost node cannot confirm the
            // pod stopped, so only a force deletion lets the StatefulSet
            // re-create it.
            let name = naming::member(target.cluster, *ordinal);
            let params = match pod_uid {
                Some(uid) => exactly(uid, Some(0)),
                None => DeleteParams::default().grace_period(0),
            };
            delete::<Pod>(target, &name, "Pod", Some(params)).await?;
            info!(%name, "force-deleted the pod of a member on a lost node");
        }
        Step::EnableDowngrade { target: version } => {
            let minor = crate::cluster::upgrade::downgrade::minor_text(*version);
            let was = target
                .admin
                .downgrade(DowngradeAction::Enable(minor.clone()))
                .await
                .map_err(etcd_error("downgrade enable", target.cluster.to_owned()))?;
            info!(cluster_version = %was, to = %minor, "enabled etcd's downgrade");
        }
        Step::CancelDowngrade => {
            target
                .admin
                .downgrade(DowngradeAction::Cancel)
                .await
                .map_err(etcd_error("downgrade cancel", target.cluster.to_owned()))?;
            info!("cancelled etcd's downgrade");
        }
        Step::Begin(_)
        | Step::Finish(_)
        | Step::SetReplicas(_)
        | Step::Wait(_)
        | Step::Converged => return Ok(false),
    }
    Ok(true)
}

/// NOSPACE runbook: compact to the current revision (the history is what
/// usually fills the backend), defragment each reachable member one after
/// the other (each defragment blocks its member), then disarm.
async fn reclaim_space(target: &Target<'_>) -> Result<()> {
    let endpoints: Vec<String> = target
        .pods
        .iter()
        .filter_map(|p| p.endpoint.clone())
        .collect();
    let etcd_error = |step: &'static str| {
        move |source| Error::Etcd {
            step,
            member: target.cluster.to_owned(),
            source,
        }
    };
    let mut revision = None;
    for endpoint in &endpoints {
        if let Ok(status) = target.admin.status(endpoint).await {
            revision = Some(status.revision);
            break;
        }
    }
    if let Some(revision) = revision {
        match target.admin.compact(revision).await {
            Ok(()) => {}
            // Already compacted at or past it: the goal holds.
            Err(dkv_etcd::Error::Refused { message, .. }) if message.contains("compacted") => {}
            Err(err) => return Err(etcd_error("compact")(err)),
        }
    }
    for endpoint in &endpoints {
        target
            .admin
            .defragment(endpoint)
            .await
            .map_err(etcd_error("defragment"))?;
    }
    for alarm in target
        .admin
        .alarms()
        .await
        .map_err(etcd_error("alarm list"))?
    {
        if alarm.kind == dkv_etcd::AlarmKind::NoSpace {
            target
                .admin
                .disarm(alarm)
                .await
                .map_err(etcd_error("alarm disarm"))?;
        }
    }
    info!(cluster = %target.cluster, "reclaimed backend space and disarmed NOSPACE");
    Ok(())
}

/// Whether member `ordinal`'s pod is Ready: stopping it is a disruption the
/// PodDisruptionBudget must allow. A pod that is not Ready already counts as
/// disrupted (and a budget that is short of healthy pods refuses to evict
/// it), so it is deleted directly: that is how a broken member is replaced.
fn serving(pods: &[MemberPod], ordinal: i32) -> bool {
    pods.iter()
        .any(|p| p.view.ordinal == ordinal && p.view.ready)
}

/// Whether the cluster's PodDisruptionBudget (minAvailable = quorum) can ever
/// allow a disruption: not with 1 or 2 members, whose every restart takes
/// quorum away for a moment — the user's edit asked for it, so their pods are
/// deleted directly.
fn budget_can_allow(members: usize) -> bool {
    let members = i32::try_from(members).unwrap_or(i32::MAX);
    members > super::membership::quorum(members)
}

/// Stops a serving member's pod through the eviction API, so that the
/// operator's own restarts and a node drain draw on the same
/// PodDisruptionBudget and never stack: when the budget allows nothing now
/// (read first, as the client would otherwise retry the 429 for minutes),
/// the step waits.
async fn evict(target: &Target<'_>, name: &str) -> Result<()> {
    let budget = naming::pdb(target.cluster);
    let budgets: Api<PodDisruptionBudget> =
        Api::namespaced(target.client.clone(), target.namespace);
    let allowed = budgets
        .get_opt(&budget)
        .await
        .map_err(|source| Error::Read {
            kind: "PodDisruptionBudget",
            name: budget.clone(),
            source,
        })?
        .and_then(|b| b.status)
        .and_then(|s| s.disruptions_allowed);
    if allowed == Some(0) {
        return Err(Error::DisruptionBudget {
            pod: name.to_owned(),
            budget,
            why: "disruptionsAllowed is 0".to_owned(),
        });
    }
    let api: Api<Pod> = Api::namespaced(target.client.clone(), target.namespace);
    match api.evict(name, &EvictParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 429 => Err(Error::DisruptionBudget {
            pod: name.to_owned(),
            budget,
            why: status.message,
        }),
        Err(source) => Err(Error::Delete {
            kind: "Pod",
            name: name.to_owned(),
            source,
        }),
    }
}

/// Deletion of the object with `uid` only (never a successor of the same
/// name), with `grace` seconds if set.
fn exactly(uid: &str, grace: Option<u32>) -> DeleteParams {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match grace {
        Some(seconds) => params.grace_period(seconds),
        None => params,
    }
}

async fn delete<K>(
    target: &Target<'_>,
    name: &str,
    kind: &'static str,
    params: Option<DeleteParams>,
) -> Result<()>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(target.client.clone(), target.namespace);
    match api.delete(name, &params.unwrap_or_default()).await {
        Ok(_) => Ok(()),
        // Already gone: the step's goal holds. (409: a precondition failed,
        // so the object asked for is gone and another holds its name.)
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            name: name.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clusters_of_three_or_more_restart_members_within_the_budget() {
        assert!(!budget_can_allow(1));
        assert!(!budget_can_allow(2));
        assert!(budget_can_allow(3));
        assert!(budget_can_allow(5));
    }
    use crate::cluster::membership::fixtures;
    use dkv_etcd::FakeEtcd;
    use serde_json::{Value, json};

    fn pods(n: i32) -> Vec<MemberPod> {
        (0..n)
            .map(|i| MemberPod {
                view: fixtures::pod(i),
                endpoint: Some(format!("http://orders-{i}:2379")),
                bootstrap_size: None,
                refused_as_corrupt: false,
                created: None,
                restore_failure: None,
                problem: None,
            })
            .collect()
    }

    async fn run(step: Step, etcd: &FakeEtcd) -> Result<bool> {
        // etcd steps never touch the API: a client to nowhere is enough.
        let config = kube::Config::new(
            "http://127.0.0.1:9"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        let client = Client::try_from(config).unwrap_or_else(|e| panic!("{e}"));
        let pods = pods(3);
        let target = Target {
            client: &client,
            admin: etcd,
            namespace: "shop",
            cluster: "orders",
            pods: &pods,
            peer_scheme: "http",
        };
        execute(&step, &target).await
    }

    #[tokio::test]
    async fn etcd_steps_make_the_matching_calls() {
        let etcd = FakeEtcd::with_members(&["orders-0", "orders-1", "orders-2"], "3.5.16");
        let ids: Vec<u64> = etcd.members().iter().map(|m| m.id.0).collect();
        assert!(matches!(
            run(Step::AddLearner { ordinal: 3 }, &etcd).await,
            Ok(true)
        ));
        let learner = etcd.members()[3].id.0;
        // Not caught up yet: etcd says wait, and so does the error category.
        let err = run(
            Step::Promote {
                id: learner,
                ordinal: 3,
            },
            &etcd,
        )
        .await
        .err();
        assert_eq!(
            err.map(|e| e.category()),
            Some(crate::cluster::error::Category::Waiting)
        );
        etcd.start_and_catch_up("http://orders-3.orders-peer.shop.svc:2380", "orders-3");
        assert!(matches!(
            run(
                Step::Promote {
                    id: learner,
                    ordinal: 3
                },
                &etcd
            )
            .await,
            Ok(true)
        ));
        assert!(matches!(
            run(
                Step::MoveLeader {
                    from: ids[0],
                    from_ordinal: 0,
                    to: ids[1]
                },
                &etcd
            )
            .await,
            Ok(true)
        ));
        assert_eq!(etcd.leader().map(|l| l.0), Some(ids[1]));
        assert!(matches!(
            run(
                Step::RemoveMember {
                    id: learner,
                    ordinal: 3
                },
                &etcd
            )
            .await,
            Ok(true)
        ));
        assert_eq!(
            etcd.calls(),
            vec![
                "add learner http://orders-3.orders-peer.shop.svc:2380".to_owned(),
                format!("promote {:x}", learner),
                format!("promote {:x}", learner),
                format!("move leader http://orders-0:2379 -> {:x}", ids[1]),
                format!("remove {:x}", learner),
            ]
        );
    }

    #[tokio::test]
    async fn bookkeeping_steps_do_nothing_here() {
        let etcd = FakeEtcd::with_members(&["orders-0"], "3.5.16");
        assert!(matches!(run(Step::SetReplicas(3), &etcd).await, Ok(false)));
        assert!(matches!(run(Step::Converged, &etcd).await, Ok(false)));
        assert!(etcd.calls().is_empty());
    }

    #[tokio::test]
    async fn nospace_is_reclaimed_member_by_member_then_disarmed() {
        let etcd = FakeEtcd::with_members(&["orders-0", "orders-1", "orders-2"], "3.5.16");
        let alarm = dkv_etcd::Alarm {
            member: etcd.members()[0].id,
            kind: dkv_etcd::AlarmKind::NoSpace,
        };
        etcd.raise_alarm(alarm);
        assert!(matches!(run(Step::ReclaimSpace, &etcd).await, Ok(true)));
        assert_eq!(
            etcd.calls(),
            vec![
                "status http://orders-0:2379".to_owned(),
                "compact 1000".to_owned(),
                "defragment http://orders-0:2379".to_owned(),
                "defragment http://orders-1:2379".to_owned(),
                "defragment http://orders-2:2379".to_owned(),
                "alarm list".to_owned(),
                format!("disarm NoSpace {}", alarm.member),
            ]
        );
    }

    /// Runs `step` against an API server that answers each request with
    /// the next of `codes`; returns (method, path, body) of each request.
    async fn api_calls(step: Step, codes: &[u16]) -> (Result<bool>, Vec<(String, String, Value)>) {
        use http::{Request, Response};
        use kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "shop");
        let codes = codes.to_vec();
        let server = tokio::spawn(async move {
            let mut calls = Vec::new();
            for code in codes {
                let Some((request, respond)) = handle.next_request().await else {
                    break;
                };
                let method = request.method().to_string();
                let path = request.uri().path().to_owned();
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                calls.push((method, path, body));
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": if code < 300 { "Success" } else { "Failure" }, "code": code});
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(status.to_string().into_bytes()))
                    .unwrap_or_else(|e| panic!("{e}"));
                respond.send_response(response);
            }
            calls
        });
        let etcd = FakeEtcd::with_members(&["orders-0", "orders-1", "orders-2"], "3.5.16");
        let pods = pods(3);
        let target = Target {
            client: &client,
            admin: &etcd,
            namespace: "shop",
            cluster: "orders",
            pods: &pods,
            peer_scheme: "http",
        };
        let result = execute(&step, &target).await;
        drop(client);
        let calls = server.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(etcd.calls().is_empty(), "no etcd call: {:?}", etcd.calls());
        (result, calls)
    }

    #[tokio::test]
    async fn a_member_leaves_a_lost_node_claim_first_then_its_pod_forced_each_by_uid() {
        let step = Step::EvictFromLostNode {
            ordinal: 1,
            pod_uid: Some("pod-uid".into()),
            claim_uid: Some("claim-uid".into()),
        };
        let (result, calls) = api_calls(step, &[200, 200]).await;
        assert!(matches!(result, Ok(true)), "{result:?}");
        let paths: Vec<(&str, &str)> = calls
            .iter()
            .map(|(m, p, _)| (m.as_str(), p.as_str()))
            .collect();
        assert_eq!(
            paths,
            [
                (
                    "DELETE",
                    "/api/v1/namespaces/shop/persistentvolumeclaims/data-orders-1"
                ),
                ("DELETE", "/api/v1/namespaces/shop/pods/orders-1"),
            ]
        );
        assert_eq!(calls[0].2["preconditions"]["uid"], "claim-uid");
        assert_eq!(calls[0].2["gracePeriodSeconds"], Value::Null);
        assert_eq!(calls[1].2["preconditions"]["uid"], "pod-uid");
        assert_eq!(calls[1].2["gracePeriodSeconds"], 0);
    }

    #[tokio::test]
    async fn a_volume_that_follows_its_pod_is_kept_and_gone_objects_are_no_error() {
        let evict = || Step::EvictFromLostNode {
            ordinal: 2,
            pod_uid: Some("pod-uid".into()),
            claim_uid: None,
        };
        // 409: the precondition failed, the pod was already re-created.
        let (result, calls) = api_calls(evict(), &[409]).await;
        assert!(matches!(result, Ok(true)), "{result:?}");
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].1, "/api/v1/namespaces/shop/pods/orders-2");
        // Any other refusal is an error naming the pod.
        let (result, _) = api_calls(evict(), &[403]).await;
        let message = result.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("Pod orders-2"), "{message}");
    }

    #[test]
    fn volume_claims_follow_the_statefulset_naming() {
        assert_eq!(volume_claim("orders", 4), "data-orders-4");
    }
}
