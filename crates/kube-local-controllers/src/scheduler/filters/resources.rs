//! NodeResourcesFit: the pod's cpu and memory requests must fit in what the node's allocatable leaves after the
//! requests of the pods placed on it, and the node must have a pod slot left.

use k8s_openapi::api::core::v1::Node;

use super::Snapshot;
use crate::scheduler::message::Reason;
use crate::scheduler::pod_requests::{Resources, allocatable, pod_request};

/// The sum of the requests of the pods placed on the node.
pub(crate) fn requested_on(snapshot: &Snapshot<'_>, node: &Node) -> Resources {
    snapshot
        .pods_on(node)
        .map(pod_request)
        .fold(Resources::default(), |a, b| Resources {
            milli_cpu: a.milli_cpu + b.milli_cpu,
            memory: a.memory + b.memory,
        })
}

pub(super) fn filter(snapshot: &Snapshot<'_>, node: &Node) -> Vec<Reason> {
    let (offered, slots) = allocatable(node);
    let used = requested_on(snapshot, node);
    let mut reasons = Vec::new();
    let pods_here = snapshot.pods_on(node).count() as i64;
    if pods_here + 1 > slots {
        reasons.push(Reason::TooManyPods);
    }
    let wanted = pod_request(snapshot.pod);
    if wanted.is_zero() {
        return reasons;
    }
    let mut check = |resource: &str, want: i64, have: i64, used: i64| {
        if want > 0 && want > have - used {
            reasons.push(Reason::Insufficient {
                resource: resource.into(),
                beyond_allocatable: want > have,
            });
        }
    };
    check("cpu", wanted.milli_cpu, offered.milli_cpu, used.milli_cpu);
    check("memory", wanted.memory, offered.memory, used.memory);
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{node, on, pod, requesting};
    use crate::scheduler::volumes::VolumeFacts;

    #[test]
    fn requests_fit_in_what_placed_pods_leave() {
        let nodes = [
            node("a", &[], vec![], "2", "4Gi"),
            node("b", &[], vec![], "2", "4Gi"),
        ];
        let placed = [
            on(requesting(pod("x"), "1500m", "1Gi"), "a"),
            on(requesting(pod("y"), "500m", "3Gi"), "b"),
        ];
        let volumes = VolumeFacts::new();
        let incoming = requesting(pod("p"), "1", "2Gi");
        let snap = Snapshot::new(&incoming, &nodes, &placed, &volumes);
        let short = |resource: &str| Reason::Insufficient {
            resource: resource.into(),
            beyond_allocatable: false,
        };
        assert_eq!(filter(&snap, &nodes[0]), vec![short("cpu")]);
        assert_eq!(filter(&snap, &nodes[1]), vec![short("memory")]);
    }

    #[test]
    fn finished_pods_hold_nothing() {
        let nodes = [node("a", &[], vec![], "2", "4Gi")];
        let mut done = on(requesting(pod("x"), "2", "4Gi"), "a");
        if let Some(s) = done.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        let volumes = VolumeFacts::new();
        let incoming = requesting(pod("p"), "2", "4Gi");
        let placed = [done];
        let snap = Snapshot::new(&incoming, &nodes, &placed, &volumes);
        assert!(filter(&snap, &nodes[0]).is_empty());
    }

    #[test]
    fn a_request_beyond_allocatable_and_a_full_node() {
        let mut full = node("a", &[], vec![], "2", "4Gi");
        if let Some(a) = full.status.as_mut().and_then(|s| s.allocatable.as_mut()) {
            a.insert(
                "pods".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            );
        }
        let nodes = [full];
        let placed = [on(pod("x"), "a")];
        let volumes = VolumeFacts::new();
        let incoming = requesting(pod("p"), "3", "1Gi");
        let snap = Snapshot::new(&incoming, &nodes, &placed, &volumes);
        assert_eq!(
            filter(&snap, &nodes[0]),
            vec![
                Reason::TooManyPods,
                Reason::Insufficient {
                    resource: "cpu".into(),
                    beyond_allocatable: true
                }
            ]
        );
    }
}
