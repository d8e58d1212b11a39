//! The resources a pod asks of its node, computed as kube-scheduler computes them, and node allocatable.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// CPU in millicores and memory in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
}

impl Resources {
    fn add(self, other: Resources) -> Resources {
        Resources {
            milli_cpu: self.milli_cpu + other.milli_cpu,
            memory: self.memory + other.memory,
        }
    }

    fn max(self, other: Resources) -> Resources {
        Resources {
            milli_cpu: self.milli_cpu.max(other.milli_cpu),
            memory: self.memory.max(other.memory),
        }
    }

    pub fn is_zero(self) -> bool {
        self.milli_cpu == 0 && self.memory == 0
    }
}

/// A quantity as a number of units (`scale` 1000 for millicores), rounded up like `Quantity.MilliValue()`. The API
/// server validated it; an unreadable one counts as nothing rather than failing placement.
fn amount(q: Option<&Quantity>, scale: f64) -> i64 {
    q.and_then(|q| kube_quantity::ParsedQuantity::try_from(q).ok())
        .and_then(|p| p.to_bytes_f64())
        .map(|v| (v * scale).ceil() as i64)
        .unwrap_or(0)
}

fn of_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    Resources {
        milli_cpu: amount(list.and_then(|l| l.get("cpu")), 1000.0),
        memory: amount(list.and_then(|l| l.get("memory")), 1.0),
    }
}

fn container_requests(c: &Container) -> Resources {
    of_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
}

/// The pod's request: the sum over its containers, or the largest init container if that is more, with
/// restartable (sidecar) init containers running beside everything that starts after them; plus the pod overhead.
pub(super) fn pod_request(pod: &Pod) -> Resources {
    let Some(spec) = &pod.spec else {
        return Resources::default();
    };
    let containers = spec
        .containers
        .iter()
        .map(container_requests)
        .fold(Resources::default(), Resources::add);
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for init in spec.init_containers.iter().flatten() {
        let request = container_requests(init);
        if init.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.add(request);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.add(request));
        }
    }
    containers
        .add(sidecars)
        .max(init_peak)
        .add(of_list(spec.overhead.as_ref()))
}

/// What the node offers to pods, and how many pods it takes.
pub(super) fn allocatable(node: &Node) -> (Resources, i64) {
    let list = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let pods = amount(list.and_then(|l| l.get("pods")), 1.0);
    (of_list(list), pods)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::fixtures::{container, pod};

    #[test]
    fn containers_add_up_and_init_containers_take_the_max() {
        let mut p = pod("p");
        let spec = p.spec.get_or_insert_with(Default::default);
        spec.containers = vec![container("500m", "1Gi"), container("0.25", "512Mi")];
        spec.init_containers = Some(vec![container("2", "100Mi")]);
        assert_eq!(
            pod_request(&p),
            Resources {
                milli_cpu: 2000,
                memory: 1536 * 1024 * 1024
            }
        );
    }

    #[test]
    fn sidecars_run_beside_the_containers_and_later_init_containers() {
        let mut p = pod("p");
        let spec = p.spec.get_or_insert_with(Default::default);
        spec.containers = vec![container("1", "1Gi")];
        let mut sidecar = container("200m", "0");
        sidecar.restart_policy = Some("Always".into());
        spec.init_containers = Some(vec![sidecar, container("1500m", "0")]);
        // Init peak 200m + 1500m = 1700m; running 1000m + 200m = 1200m.
        assert_eq!(pod_request(&p).milli_cpu, 1700);
    }

    #[test]
    fn overhead_is_added_and_missing_requests_are_zero() {
        let mut p = pod("p");
        let spec = p.spec.get_or_insert_with(Default::default);
        spec.containers = vec![Container::default()];
        spec.overhead = Some([("cpu".to_string(), Quantity("100m".into()))].into());
        assert_eq!(pod_request(&p).milli_cpu, 100);
        assert_eq!(pod_request(&p).memory, 0);
    }
}
