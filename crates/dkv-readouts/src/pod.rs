//! Pod facts both the operator and `kubectl dkv` go by.

use k8s_openapi::api::core::v1::Pod;

/// Whether the pod's `Ready` condition is `True`: the kubelet's verdict,
/// which a Service's endpoints follow too. A pod without status is not.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "orders-0"}, "status": status}))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn only_a_true_ready_condition_makes_a_pod_ready() {
        let ready = |status: &str| {
            pod(json!({"conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": status},
            ]}))
        };
        assert!(is_ready(&ready("True")));
        assert!(!is_ready(&ready("False")));
        assert!(!is_ready(&ready("Unknown")));
        assert!(!is_ready(&pod(json!({}))));
        assert!(!is_ready(&Pod::default()));
    }
}
