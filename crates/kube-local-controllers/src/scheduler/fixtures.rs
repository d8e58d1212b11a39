//! Hand-built nodes and pods for the scheduler's tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus,
    ResourceRequirements, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Ready node labelled with its hostname plus `extra`, offering `cpu` and `memory` and 110 pods.
pub fn node(
    name: &str,
    extra: &[(&str, &str)],
    taints: Vec<Taint>,
    cpu: &str,
    memory: &str,
) -> Node {
    let mut l = labels(extra);
    l.insert("kubernetes.io/hostname".into(), name.into());
    let allocatable: BTreeMap<String, Quantity> =
        [("cpu", cpu), ("memory", memory), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.into())))
            .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(l),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(allocatable.clone()),
            capacity: Some(allocatable),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// A plain node: 4 cpu, 8Gi, no extra labels, no taints.
pub fn plain(name: &str) -> Node {
    node(name, &[], vec![], "4", "8Gi")
}

/// A node in a zone.
pub fn zoned(name: &str, zone: &str) -> Node {
    node(
        name,
        &[("topology.kubernetes.io/zone", zone)],
        vec![],
        "4",
        "8Gi",
    )
}

pub fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: (!value.is_empty()).then(|| value.into()),
        effect: effect.into(),
        time_added: None,
    }
}

pub fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: (!key.is_empty()).then(|| key.into()),
        operator: Some(operator.into()),
        value: (!value.is_empty()).then(|| value.into()),
        effect: (!effect.is_empty()).then(|| effect.into()),
        toleration_seconds: None,
    }
}

pub fn container(cpu: &str, memory: &str) -> Container {
    let requests: BTreeMap<String, Quantity> = [("cpu", cpu), ("memory", memory)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.into())))
        .collect();
    Container {
        name: "main".into(),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

/// A pending pod in `default` with one container that requests nothing.
pub fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".into()),
            ..PodStatus::default()
        }),
    }
}

pub fn labelled(mut p: Pod, pairs: &[(&str, &str)]) -> Pod {
    p.metadata.labels = Some(labels(pairs));
    p
}

/// The pod, running on `node`.
pub fn on(mut p: Pod, node: &str) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = Some(node.into());
    }
    p.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..PodStatus::default()
    });
    p
}

pub fn requesting(mut p: Pod, cpu: &str, memory: &str) -> Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.containers = vec![container(cpu, memory)];
    }
    p
}

pub fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels(pairs)),
        match_expressions: None,
    }
}
