//! Turns what the member pods and etcd report into the planner's
//! [`Observation`](crate::cluster::membership::Observation).
//!
//! The operator reaches members at their pod IPs (`http://<podIP>:2379`):
//! the peer DNS names members advertise resolve only inside the cluster
//! network, while pod IPs are reachable from the operator both in-cluster
//! and in local mode. Every etcd call is bounded by the admin's deadline, and
//! members are queried concurrently, so one dead member costs one timeout,
//! not one per member.

use dkv_api::conditions::status as condition_status;
use std::sync::Arc;

use dkv_api::conditions::reasons;
use dkv_etcd::{EtcdAdmin, Member};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use kube::ResourceExt;

use crate::cluster::membership::{ObservedMember, ObservedPod};
use crate::etcd_version::EtcdVersion;
use crate::parts::naming::{self, CLIENT_PORT};
use crate::parts::naming::{FETCH_CONTAINER, RESTORE_CONTAINER};
use dkv_member::message::InitMessage;

/// How a member's status reports an active CORRUPT alarm among its errors
/// (etcd's text form of the alarm: `memberID:<id> alarm:CORRUPT`).
const CORRUPT_ALARM_ERROR: &str = "alarm:CORRUPT";

/// What etcd logs when its initial corruption check refuses to start the
/// member: `<id> found data inconsistency with peers` (3.4, 3.5 and 3.6).
pub const INITIAL_CHECK_REFUSAL: &str = "found data inconsistency with peers";

/// The label the StatefulSet controller puts on each pod: the revision of the
/// template it was created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// A member pod with the endpoint the operator reaches it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPod {
    pub view: ObservedPod,
    /// `http(s)://<podIP>:2379`, once the pod has an IP.
    pub endpoint: Option<String>,
    /// The termination message of a failed restore step
    /// (`spec.bootstrap.restore`) that has not succeeded since.
    pub restore_failure: Option<String>,
    /// Why the pod does not serve, as its status says, when it does not.
    pub problem: Option<PodProblem>,
    /// The initial member count the pod's member-init was started with
    /// (`--bootstrap-size`): what its StatefulSet said, should the
    /// StatefulSet itself be gone.
    pub bootstrap_size: Option<i32>,
    /// etcd's initial corruption check refused to start this member (its
    /// last run ended so): its data differs from its peers'.
    pub refused_as_corrupt: bool,
    /// When the pod was created: when the member was (re)started onto the
    /// template it runs.
    pub created: Option<jiff::Timestamp>,
}

/// Why a member pod does not serve, read from its status the way a human
/// would read `kubectl describe pod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodProblem {
    /// The `Degraded` reason when this is a fault someone must act on
    /// (an image that cannot be pulled, a crash loop, a pod that cannot be
    /// scheduled); `None` for a pod that is merely not Ready yet.
    pub fault: Option<&'static str>,
    /// What the status says, naming the pod and quoting the container.
    pub message: String,
}

/// Container waiting reasons that mean the image cannot be had.
const PULL_FAILURES: [&str; 3] = ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"];
/// Container waiting reasons that mean it cannot start or keeps failing.
const START_FAILURES: [&str; 4] = [
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Why `pod` does not serve, if it does not. Init containers count for image
/// pulls only: their refusals (`member-init`, the restore steps) are read
/// by the planner and the restore checks, which say more.
pub fn pod_problem(pod: &Pod) -> Option<PodProblem> {
    let name = pod.name_any();
    let status = pod.status.as_ref()?;
    if dkv_readouts::pod::is_ready(pod) {
        return None;
    }
    if let Some(unschedulable) = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == condition_status::FALSE
            && c.reason.as_deref() == Some("Unschedulable")
    }) {
        return Some(PodProblem {
            fault: Some(reasons::MEMBER_UNSCHEDULABLE),
            message: format!(
                "pod {name} cannot be scheduled: {}",
                unschedulable
                    .message
                    .as_deref()
                    .unwrap_or("no node fits it")
            ),
        });
    }
    // A container waiting to (re)start, with why, and how its last run
    // ended (a crash loop's exit code and message are what the user needs).
    let waiting = |s: &ContainerStatus| {
        let w = s.state.as_ref()?.waiting.as_ref()?;
        let last_run = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
        let mut detail = w.message.clone().unwrap_or_default();
        if let Some(ended) = last_run {
            let ended = match ended.message.as_deref().or(ended.reason.as_deref()) {
                Some(why) => format!("last run exited with code {} ({why})", ended.exit_code),
                None => format!("last run exited with code {}", ended.exit_code),
            };
            detail = if detail.is_empty() {
                ended
            } else {
                format!("{detail}; {ended}")
            };
        }
        Some((s.name.clone(), w.reason.clone()?, detail))
    };
    // Init containers first: a member whose init fails never starts etcd.
    // Not those whose failure is reported or acted on elsewhere: a restore
    // step (`RestoreFailed`), member-init refusing a volume that lost its
    // data (the member is replaced).
    let handled = |s: &&ContainerStatus| {
        s.name == RESTORE_CONTAINER
            || s.name == FETCH_CONTAINER
            || s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some_and(reads_data_lost)
    };
    let init = status
        .init_container_statuses
        .iter()
        .flatten()
        .filter(|s| !handled(s))
        .filter_map(waiting);
    let containers = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(waiting);
    for (container, reason, detail) in init.chain(containers) {
        let fault = if PULL_FAILURES.contains(&reason.as_str()) {
            Some(reasons::IMAGE_PULL_FAILED)
        } else if START_FAILURES.contains(&reason.as_str()) {
            Some(reasons::MEMBER_CRASH_LOOPING)
        } else {
            None
        };
        let quoted = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        if fault.is_some() {
            return Some(PodProblem {
                fault,
                message: format!("pod {name}, container {container}: {reason}{quoted}"),
            });
        }
    }
    let running_unready = status
        .container_statuses
        .iter()
        .flatten()
        .any(|s| s.name == "etcd" && s.state.as_ref().is_some_and(|st| st.running.is_some()));
    Some(PodProblem {
        fault: None,
        message: if running_unready {
            format!("pod {name}: etcd runs but is not Ready (its /health fails)")
        } else {
            format!(
                "pod {name} is {}",
                status.phase.as_deref().unwrap_or("not started")
            )
        },
    })
}

/// The member pods of `cluster` among `pods`, by ordinal. `epoch`: that of
/// the recovery pinned now, if any; `replacement`: the token of the member
/// replacement pinned now, if any; `scheme`: of the client URLs.
pub fn member_pods(
    cluster: &str,
    pods: &[Arc<Pod>],
    epoch: Option<&str>,
    replacement: Option<&str>,
    scheme: &str,
) -> Vec<MemberPod> {
    let mut out: Vec<MemberPod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| {
            let ordinal = naming::ordinal_of(cluster, &pod.name_any())?;
            let status = pod.status.as_ref();
            let ready = dkv_readouts::pod::is_ready(pod);
            let version = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == "etcd"))
                .and_then(|c| c.image.as_deref())
                .and_then(EtcdVersion::from_image);
            let endpoint = status
                .and_then(|s| s.pod_ip.as_deref())
                .filter(|ip| !ip.is_empty())
                .map(|ip| format!("{scheme}://{ip}:{CLIENT_PORT}"));
            Some(MemberPod {
                view: ObservedPod {
                    ordinal,
                    ready,
                    data_lost: reports_data_lost(pod),
                    version,
                    init_done: init_succeeded(pod),
                    forced_new_cluster: matches!(
                        init_message(pod),
                        Some(InitMessage::ForcedNewCluster { .. })
                    ),
                    init_refused: member_init(pod).is_some_and(|s| {
                        [s.state.as_ref(), s.last_state.as_ref()]
                            .into_iter()
                            .flatten()
                            .filter_map(|state| state.terminated.as_ref())
                            .any(|t| t.exit_code != 0)
                            && current_termination(s).is_none_or(|t| t.exit_code != 0)
                    }),
                    restored: epoch.is_some_and(|pinned| {
                        matches!(
                            init_message(pod).filter(|_| init_succeeded(pod)),
                            Some(InitMessage::StartedUnderEpoch { epoch, .. }) if epoch == pinned
                        )
                    }),
                    tls_serial: pod
                        .annotations()
                        .get(naming::SERIAL_ANNOTATION)
                        .cloned(),
                    revision: pod.labels().get(REVISION_LABEL).cloned(),
                    member_side: pod
                        .annotations()
                        .get(naming::MEMBER_SIDE_ANNOTATION)
                        .cloned(),
                    replaced: replacement.is_some_and(|pinned| {
                        matches!(
                            init_message(pod).filter(|_| init_succeeded(pod)),
                            Some(InitMessage::StartedForReplacement { token, .. }) if token == pinned
                        )
                    }),
                    snapshot_count: init_arg(pod, "--snapshot-count").and_then(|v| v.parse().ok()),
                },
                endpoint,
                restore_failure: restore_failure(pod),
                problem: pod_problem(pod),
                bootstrap_size: started_bootstrap_size(pod),
                refused_as_corrupt: refused_as_corrupt(pod),
                created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
            })
        })
        .collect();
    out.sort_by_key(|p| p.view.ordinal);
    out
}

/// Whether the etcd container's current or last run ended with its initial
/// corruption check refusing the data (the end of its log is the
/// termination message: `FallbackToLogsOnError`). In a crash loop each run
/// lives a few seconds before the check ends it: only a container that
/// turned Ready since has got past it.
fn refused_as_corrupt(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| s.name == dkv_member::layout::MEMBER_CONTAINER)
        .filter(|s| !s.ready)
        .flat_map(|s| [s.state.as_ref(), s.last_state.as_ref()])
        .flatten()
        .filter_map(|state| state.terminated.as_ref())
        .any(|t| {
            t.message
                .as_deref()
                .is_some_and(|m| m.contains(INITIAL_CHECK_REFUSAL))
        })
}

/// The `--bootstrap-size` the pod's member-init container runs with.
fn started_bootstrap_size(pod: &Pod) -> Option<i32> {
    init_arg(pod, "--bootstrap-size")?.parse().ok()
}

/// The value of `--flag=value` among the arguments of the pod's member-init
/// container.
fn init_arg<'a>(pod: &'a Pod, flag: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| c.name == "member-init")?
        .args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
}

/// The status of the pod's `member-init` container.
fn member_init(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "member-init")
}

/// Why this pod's restore steps fail: the message of the last failed run
/// of `restore-fetch` or `restore`, unless it has succeeded since.
fn restore_failure(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.init_container_statuses.as_ref()?;
    statuses
        .iter()
        .filter(|s| s.name == RESTORE_CONTAINER || s.name == FETCH_CONTAINER)
        .filter(|s| current_termination(s).is_none_or(|t| t.exit_code != 0))
        .find_map(|s| {
            [s.state.as_ref(), s.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|state| state.terminated.as_ref())
                .find(|t| t.exit_code != 0)
                .map(|t| {
                    let message = t.message.as_deref().unwrap_or_default().trim();
                    if message.is_empty() {
                        format!(
                            "{} of {} exited with {} ({})",
                            s.name,
                            pod.name_any(),
                            t.exit_code,
                            t.reason.as_deref().unwrap_or("Error")
                        )
                    } else {
                        format!("{} of {}: {message}", s.name, pod.name_any())
                    }
                })
        })
}

/// How the container's current run ended, if it has.
fn current_termination(status: &ContainerStatus) -> Option<&ContainerStateTerminated> {
    status.state.as_ref()?.terminated.as_ref()
}

/// Whether member-init refused to start this member because its data is
/// gone (its termination message, current or last).
fn reports_data_lost(pod: &Pod) -> bool {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
    else {
        return false;
    };
    statuses
        .iter()
        .filter(|s| s.name == "member-init")
        .any(|s| {
            [s.state.as_ref(), s.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|state| state.terminated.as_ref())
                .any(reads_data_lost)
        })
}

/// Whether a run of member-init ended refusing a member whose data is gone.
fn reads_data_lost(run: &ContainerStateTerminated) -> bool {
    matches!(
        run.message.as_deref().and_then(InitMessage::parse),
        Some(InitMessage::DataLost { .. })
    )
}

/// What the current run of the pod's member-init said when it ended.
fn init_message(pod: &Pod) -> Option<InitMessage> {
    member_init(pod)
        .and_then(current_termination)
        .and_then(|t| t.message.as_deref())
        .and_then(InitMessage::parse)
}

/// Whether the current run of the pod's member-init succeeded.
fn init_succeeded(pod: &Pod) -> bool {
    member_init(pod)
        .and_then(current_termination)
        .is_some_and(|t| t.exit_code == 0)
}

/// The ordinal of a member, from its name or (for a learner that has not
/// started, whose name etcd does not know yet) from its peer URL's host.
pub(crate) fn ordinal_of_member(cluster: &str, member: &Member) -> Option<i32> {
    if let Some(ordinal) = naming::ordinal_of(cluster, &member.name) {
        return Some(ordinal);
    }
    member.peer_urls.iter().find_map(|url| {
        let host = url.split("://").nth(1)?.split([':', '/']).next()?;
        naming::ordinal_of(cluster, host.split('.').next()?)
    })
}

/// Asks etcd for the member list (through any reachable member) and each
/// member for its status. `None` when no member answers at all.
pub async fn observe_members(
    cluster: &str,
    admin: &dyn EtcdAdmin,
    pods: &[MemberPod],
) -> Option<Vec<ObservedMember>> {
    let list = match admin.member_list().await {
        Ok(list) => list,
        Err(err) => {
            tracing::debug!(error = %err, "no member answered the member list");
            return None;
        }
    };
    let statuses = futures::future::join_all(list.iter().map(|member| async move {
        let ordinal = ordinal_of_member(cluster, member);
        let endpoint =
            ordinal.and_then(|o| pods.iter().find(|p| p.view.ordinal == o)?.endpoint.clone());
        let status = match &endpoint {
            Some(endpoint) if member.has_started() => admin
                .status(endpoint)
                .await
                .inspect_err(|err| tracing::debug!(member = %member.name, error = %err, "member status failed"))
                .ok(),
            _ => None,
        };
        (member, ordinal, status)
    }))
    .await;

    // Leaders that answered and say so themselves. Right after a leader
    // dies its followers still name it for up to an election timeout; they
    // are not healthy until they follow a leader that is alive.
    let live_leaders: Vec<u64> = statuses
        .iter()
        .filter_map(|(member, _, status)| {
            status
                .as_ref()
                .filter(|s| s.leader == member.id)
                .map(|_| member.id.0)
        })
        .collect();
    let mut observed: Vec<ObservedMember> = statuses
        .into_iter()
        .filter_map(|(member, ordinal, status)| {
            // A member whose name and peer URL both belong to no pod of this
            // cluster is not ours to manage; the planner only sees ours.
            let ordinal = ordinal?;
            // A CORRUPT alarm is the cluster's, reported by every member;
            // the members whose data agrees still follow their leader, and
            // are what a corrupt member is replaced from.
            let healthy = status.as_ref().is_some_and(|s| {
                s.errors.iter().all(|e| e.contains(CORRUPT_ALARM_ERROR))
                    && live_leaders.contains(&s.leader.0)
            });
            Some(ObservedMember {
                id: member.id.0,
                ordinal,
                learner: member.is_learner,
                started: member.has_started(),
                healthy,
                reachable: status.is_some(),
                leader: status.as_ref().is_some_and(|s| s.leader == member.id),
                raft_index: status.as_ref().map_or(0, |s| s.raft_index),
                applied_index: status.as_ref().map_or(0, |s| s.raft_applied_index),
                version: status.as_ref().and_then(|s| EtcdVersion::parse(&s.version)),
                cluster_id: status.as_ref().map_or(0, |s| s.cluster_id),
                storage_version: status
                    .as_ref()
                    .and_then(|s| EtcdVersion::parse(&s.storage_version)),
                downgrade_target: status
                    .as_ref()
                    .and_then(|s| s.downgrade_target.as_deref())
                    .and_then(EtcdVersion::parse),
            })
        })
        .collect();
    observed.sort_by_key(|m| m.ordinal);
    tracing::debug!(
        healthy = ?observed.iter().map(|m| (m.ordinal, m.healthy)).collect::<Vec<_>>(),
        "observed members"
    );
    Some(observed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_etcd::FakeEtcd;

    fn pod(name: &str, ip: &str, ready: bool) -> Arc<Pod> {
        let value = serde_json::json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.16-0"}]},
            "status": {
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            }
        });
        Arc::new(serde_json::from_value(value).unwrap_or_default())
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(f),
            Err(err) => panic!("runtime: {err}"),
        }
    }

    #[test]
    fn pods_are_read_by_ordinal_with_their_endpoint() {
        let pods = vec![
            pod("orders-1", "10.0.0.2", true),
            pod("orders-0", "10.0.0.1", false),
            pod("other-0", "10.0.0.9", true),
        ];
        let views = member_pods("orders", &pods, None, None, "http");
        assert_eq!(views.len(), 2);
        assert_eq!(views[0].view.ordinal, 0);
        assert!(!views[0].view.ready);
        assert_eq!(views[1].endpoint.as_deref(), Some("http://10.0.0.2:2379"));
        assert_eq!(views[1].view.version, Some(EtcdVersion::new(3, 5, 16)));
    }

    #[test]
    fn a_refusal_by_the_initial_corruption_check_is_read_from_etcd_and_replacements_from_member_init()
     {
        let mut p = (*pod("orders-1", "10.0.0.2", false)).clone();
        let etcd: ContainerStatus = serde_json::from_value(serde_json::json!({
            "name": "etcd", "image": "etcd", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "message": "{\"level\":\"fatal\",\"msg\":\"discovery failed\",\"error\":\"48fc9e1c8340c5cc found data inconsistency with peers\"}"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let init: ContainerStatus = serde_json::from_value(serde_json::json!({
            "name": "member-init", "image": "dkv", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "message": "dkv:replacement replace-17 orders-1 starts for its replacement"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(s) = p.status.as_mut() {
            s.container_statuses = Some(vec![etcd]);
            s.init_container_statuses = Some(vec![init]);
        }
        let pods = [Arc::new(p)];
        let views = member_pods("orders", &pods, None, Some("replace-17"), "http");
        assert!(views[0].refused_as_corrupt);
        assert!(views[0].view.replaced);
        let other = member_pods("orders", &pods, None, Some("replace-18"), "http");
        assert!(!other[0].view.replaced, "another replacement's start");
        let healthy = member_pods(
            "orders",
            &[pod("orders-0", "10.0.0.1", true)],
            None,
            None,
            "http",
        );
        assert!(!healthy[0].refused_as_corrupt);
    }

    #[test]
    fn a_data_loss_refusal_is_read_from_the_init_container() {
        let mut p = (*pod("orders-1", "10.0.0.2", false)).clone();
        let status: ContainerStatus = serde_json::from_value(serde_json::json!({
            "name": "member-init", "image": "dkv", "imageID": "", "ready": false, "restartCount": 2,
            "lastState": {"terminated": {"exitCode": 1, "message": "dkv:data-lost: member orders-1 has run before"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(s) = p.status.as_mut() {
            s.init_container_statuses = Some(vec![status]);
        }
        let views = member_pods("orders", &[Arc::new(p)], None, None, "http");
        assert!(views[0].view.data_lost);
    }

    fn with_init_status(status: serde_json::Value) -> Pod {
        let mut p = (*pod("orders-1", "10.0.0.2", false)).clone();
        let status: ContainerStatus =
            serde_json::from_value(status).unwrap_or_else(|e| panic!("{e}"));
        if let Some(s) = p.status.as_mut() {
            s.init_container_statuses = Some(vec![status]);
        }
        p
    }

    #[test]
    fn a_failing_init_container_is_a_crash_loop_quoting_its_last_exit() {
        let p = with_init_status(serde_json::json!({
            "name": "member-init", "image": "dkv", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=member-init pod=orders-1_shop"}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": "cannot read /etc/dkv/members"}}
        }));
        let problem = pod_problem(&p).unwrap_or_else(|| panic!("no problem seen"));
        assert_eq!(problem.fault, Some(reasons::MEMBER_CRASH_LOOPING));
        assert_eq!(
            problem.message,
            "pod orders-1, container member-init: CrashLoopBackOff: back-off 40s restarting failed container=member-init pod=orders-1_shop; last run exited with code 2 (cannot read /etc/dkv/members)"
        );
    }

    #[test]
    fn a_refusal_the_operator_acts_on_is_not_a_crash_loop() {
        let p = with_init_status(serde_json::json!({
            "name": "member-init", "image": "dkv", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "message": "dkv:data-lost: member orders-1 has run before"}}
        }));
        assert_eq!(pod_problem(&p).and_then(|p| p.fault), None);
    }

    #[test]
    fn members_map_to_ordinals_with_health_and_leadership() {
        // The fake's members answer at http://<name>:2379: give pods those "IPs".
        let etcd = FakeEtcd::with_members(&["orders-0", "orders-1", "orders-2"], "3.5.16");
        let pods: Vec<Arc<Pod>> = (0..3)
            .map(|i| pod(&format!("orders-{i}"), &format!("orders-{i}"), true))
            .collect();
        let views = member_pods("orders", &pods, None, None, "http");
        etcd.set_healthy("orders-2", false);
        let observed = block_on(observe_members("orders", &etcd, &views)).unwrap_or_default();
        assert_eq!(
            observed.iter().map(|m| m.ordinal).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(observed[0].leader && observed[0].healthy);
        assert!(!observed[1].leader && observed[1].healthy);
        assert!(!observed[2].healthy, "an unreachable member is unhealthy");
        assert_eq!(observed[0].version, Some(EtcdVersion::new(3, 5, 16)));
    }

    #[test]
    fn an_unstarted_learner_is_placed_by_its_peer_url() {
        let etcd = FakeEtcd::with_members(&["orders-0"], "3.5.16");
        let learner =
            block_on(etcd.add_learner(&["http://orders-1.orders-peer.shop.svc:2380".to_owned()]));
        assert!(learner.is_ok());
        let views = member_pods(
            "orders",
            &[pod("orders-0", "orders-0", true)],
            None,
            None,
            "http",
        );
        let observed = block_on(observe_members("orders", &etcd, &views)).unwrap_or_default();
        assert_eq!(observed.len(), 2);
        assert_eq!(observed[1].ordinal, 1);
        assert!(observed[1].learner && !observed[1].started && !observed[1].healthy);
    }

    #[test]
    fn no_answer_means_no_membership() {
        let etcd = FakeEtcd::with_members(&["orders-0", "orders-1", "orders-2"], "3.5.16");
        etcd.set_healthy("orders-1", false);
        etcd.set_healthy("orders-2", false);
        let views = member_pods("orders", &[], None, None, "http");
        assert_eq!(
            block_on(observe_members("orders", &etcd, &views)),
            None,
            "no quorum: the member list fails"
        );
    }
}
