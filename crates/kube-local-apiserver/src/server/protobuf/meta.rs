//! meta/v1 messages shared by every kind.

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as openapi;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb;

use super::fields::messages;

messages! {
    pb::ObjectMeta => openapi::ObjectMeta {
        name: omit,
        generate_name: omit,
        namespace: omit,
        self_link: omit,
        uid: omit,
        resource_version: omit,
        generation: omit,
        creation_timestamp: keep,
        deletion_timestamp: ptr,
        deletion_grace_period_seconds: ptr,
        labels: omit,
        annotations: omit,
        owner_references: omit,
        finalizers: omit,
        managed_fields: omit,
    }
    pb::OwnerReference => openapi::OwnerReference {
        api_version: keep,
        kind: keep,
        name: keep,
        uid: keep,
        controller: ptr,
        block_owner_deletion: ptr,
    }
    pb::ManagedFieldsEntry => openapi::ManagedFieldsEntry {
        manager: omit,
        operation: omit,
        api_version: omit,
        time: ptr,
        fields_type: omit,
        fields_v1: ptr,
        subresource: omit,
    }
    pb::LabelSelector => openapi::LabelSelector {
        match_labels: omit,
        match_expressions: omit,
    }
    pb::LabelSelectorRequirement => openapi::LabelSelectorRequirement {
        key: keep,
        operator: keep,
        values: omit,
    }
    // The `deleteOptions` of an Eviction (`kubectl drain`).
    pb::DeleteOptions => openapi::DeleteOptions {
        grace_period_seconds: ptr,
        preconditions: ptr,
        orphan_dependents: ptr,
        propagation_policy: ptr,
        dry_run: omit,
        ignore_store_read_error_with_cluster_breaking_potential: ptr,
    }
    pb::Preconditions => openapi::Preconditions {
        uid: ptr,
        resource_version: ptr,
    }
    pb::Condition => openapi::Condition {
        r#type: keep,
        status: keep,
        observed_generation: omit,
        last_transition_time: keep,
        reason: keep,
        message: keep,
    }
}
