//! apps/v1 Deployment, batch/v1 Job and CronJob, policy/v1 PodDisruptionBudget, policy/v1 and v1beta1 Eviction,
//! certificates.k8s.io/v1 CertificateSigningRequest, autoscaling/v1 Scale,
//! authentication.k8s.io/v1 TokenRequest and SelfSubjectReview, authorization.k8s.io/v1 SelfSubjectAccessReview and
//! SelfSubjectRulesReview, rbac.authorization.k8s.io/v1 Roles, ClusterRoles and their bindings.
//!
//! Shapes follow the groups' `types.go`.

use k8s_openapi::api::{
    apps::v1 as openapi_apps, authentication::v1 as openapi_authentication,
    authorization::v1 as openapi_authorization, autoscaling::v1 as openapi_autoscaling,
    batch::v1 as openapi_batch, certificates::v1 as openapi_certificates,
    policy::v1 as openapi_policy, rbac::v1 as openapi_rbac,
};
use k8s_pb::api::{
    apps::v1 as apps, authentication::v1 as authentication, authorization::v1 as authorization,
    autoscaling::v1 as autoscaling, batch::v1 as batch, certificates::v1 as certificates,
    policy::v1 as policy, policy::v1beta1 as policy_v1beta1, rbac::v1 as rbac,
};

use super::fields::{ConvertError, ToJson, messages};

/// authentication's `ExtraValue` is a `[]string` in Go: a JSON array, not an object.
impl ToJson for certificates::ExtraValue {
    fn to_json(self, _: &str) -> Result<serde_json::Value, ConvertError> {
        Ok(serde_json::json!(self.items))
    }
}

messages! {
    apps::Deployment => openapi_apps::Deployment {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    apps::DeploymentSpec => openapi_apps::DeploymentSpec {
        replicas: ptr,
        selector: ptr,
        template: keep,
        strategy: keep,
        min_ready_seconds: omit,
        revision_history_limit: ptr,
        paused: omit,
        progress_deadline_seconds: ptr,
    }
    apps::DeploymentStrategy => openapi_apps::DeploymentStrategy {
        r#type: omit,
        rolling_update: ptr,
    }
    apps::RollingUpdateDeployment => openapi_apps::RollingUpdateDeployment {
        max_unavailable: ptr,
        max_surge: ptr,
    }
    apps::DeploymentStatus => openapi_apps::DeploymentStatus {
        observed_generation: omit,
        replicas: omit,
        updated_replicas: omit,
        ready_replicas: omit,
        available_replicas: omit,
        unavailable_replicas: omit,
        terminating_replicas: ptr,
        conditions: omit,
        collision_count: ptr,
    }
    apps::DeploymentCondition => openapi_apps::DeploymentCondition {
        r#type: keep,
        status: keep,
        last_update_time: keep,
        last_transition_time: keep,
        reason: omit,
        message: omit,
    }

    batch::Job => openapi_batch::Job {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    batch::JobSpec => openapi_batch::JobSpec {
        parallelism: ptr,
        completions: ptr,
        active_deadline_seconds: ptr,
        pod_failure_policy: unsupported_ptr,
        success_policy: unsupported_ptr,
        backoff_limit: ptr,
        backoff_limit_per_index: ptr,
        max_failed_indexes: ptr,
        selector: ptr,
        manual_selector: ptr,
        template: keep,
        ttl_seconds_after_finished: ptr,
        completion_mode: ptr,
        suspend: ptr,
        pod_replacement_policy: ptr,
        managed_by: ptr,
    }
    batch::JobStatus => openapi_batch::JobStatus {
        conditions: omit,
        start_time: ptr,
        completion_time: ptr,
        active: omit,
        succeeded: omit,
        failed: omit,
        terminating: ptr,
        completed_indexes: omit,
        failed_indexes: ptr,
        uncounted_terminated_pods: ptr,
        ready: ptr,
    }
    batch::JobCondition => openapi_batch::JobCondition {
        r#type: keep,
        status: keep,
        last_probe_time: keep,
        last_transition_time: keep,
        reason: omit,
        message: omit,
    }
    batch::UncountedTerminatedPods => openapi_batch::UncountedTerminatedPods {
        succeeded: omit,
        failed: omit,
    }
    batch::CronJob => openapi_batch::CronJob {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    batch::CronJobSpec => openapi_batch::CronJobSpec {
        schedule: keep,
        time_zone: ptr,
        starting_deadline_seconds: ptr,
        concurrency_policy: omit,
        suspend: ptr,
        job_template: keep,
        successful_jobs_history_limit: ptr,
        failed_jobs_history_limit: ptr,
    }
    batch::JobTemplateSpec => openapi_batch::JobTemplateSpec {
        metadata: keep,
        spec: keep,
    }
    batch::CronJobStatus => openapi_batch::CronJobStatus {
        active: omit,
        last_schedule_time: ptr,
        last_successful_time: ptr,
    }

    policy::PodDisruptionBudget => openapi_policy::PodDisruptionBudget {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    policy::PodDisruptionBudgetSpec => openapi_policy::PodDisruptionBudgetSpec {
        min_available: ptr,
        selector: ptr,
        max_unavailable: ptr,
        unhealthy_pod_eviction_policy: ptr,
    }
    policy::PodDisruptionBudgetStatus => openapi_policy::PodDisruptionBudgetStatus {
        observed_generation: omit,
        disrupted_pods: omit,
        disruptions_allowed: keep,
        current_healthy: keep,
        desired_healthy: keep,
        expected_pods: keep,
        conditions: omit,
    }

    // `kubectl drain`; v1beta1 has the same shape (k8s-openapi no longer has it).
    policy::Eviction => openapi_policy::Eviction {
        metadata: keep,
        delete_options: ptr,
    }
    policy_v1beta1::Eviction => openapi_policy::Eviction {
        metadata: keep,
        delete_options: ptr,
    }

    // `kubectl certificate approve|deny` (through `/approval`).
    certificates::CertificateSigningRequest => openapi_certificates::CertificateSigningRequest {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    certificates::CertificateSigningRequestSpec => openapi_certificates::CertificateSigningRequestSpec {
        request: keep,
        signer_name: keep,
        expiration_seconds: ptr,
        usages: omit,
        username: omit,
        uid: omit,
        groups: omit,
        extra: omit,
    }
    certificates::CertificateSigningRequestStatus => openapi_certificates::CertificateSigningRequestStatus {
        conditions: omit,
        certificate: omit,
    }
    certificates::CertificateSigningRequestCondition => openapi_certificates::CertificateSigningRequestCondition {
        r#type: keep,
        status: keep,
        reason: omit,
        message: omit,
        last_update_time: keep,
        last_transition_time: keep,
    }

    autoscaling::Scale => openapi_autoscaling::Scale {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    autoscaling::ScaleSpec => openapi_autoscaling::ScaleSpec {
        replicas: omit,
    }
    autoscaling::ScaleStatus => openapi_autoscaling::ScaleStatus {
        replicas: keep,
        selector: omit,
    }

    // `kubectl create role|clusterrole|rolebinding|clusterrolebinding`.
    rbac::ClusterRole => openapi_rbac::ClusterRole {
        metadata: keep,
        rules: keep,
        aggregation_rule: unsupported_ptr,
    }
    rbac::Role => openapi_rbac::Role {
        metadata: keep,
        rules: keep,
    }
    rbac::PolicyRule => openapi_rbac::PolicyRule {
        verbs: keep,
        api_groups: omit,
        resources: omit,
        resource_names: omit,
        non_resource_ur_ls as "nonResourceURLs": omit,
    }
    rbac::ClusterRoleBinding => openapi_rbac::ClusterRoleBinding {
        metadata: keep,
        subjects: omit,
        role_ref: keep,
    }
    rbac::RoleBinding => openapi_rbac::RoleBinding {
        metadata: keep,
        subjects: omit,
        role_ref: keep,
    }
    rbac::RoleRef => openapi_rbac::RoleRef {
        api_group: keep,
        kind: keep,
        name: keep,
    }
    rbac::Subject => openapi_rbac::Subject {
        kind: keep,
        api_group: omit,
        name: keep,
        namespace: omit,
    }

    // `kubectl create token` sends its TokenRequest as protobuf.
    authentication::TokenRequest => openapi_authentication::TokenRequest {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    authentication::TokenRequestSpec => openapi_authentication::TokenRequestSpec {
        audiences: keep,
        expiration_seconds: ptr,
        bound_object_ref: unsupported_ptr,
    }
    authentication::TokenRequestStatus => openapi_authentication::TokenRequestStatus {
        token: keep,
        expiration_timestamp: keep,
    }

    // `kubectl auth whoami` and `kubectl auth can-i` send these as protobuf; answers are never decoded.
    authentication::SelfSubjectReview => openapi_authentication::SelfSubjectReview {
        metadata: keep,
        status: keep,
    }
    authentication::SelfSubjectReviewStatus => openapi_authentication::SelfSubjectReviewStatus {
        user_info: keep,
    }
    authentication::UserInfo => openapi_authentication::UserInfo {
        username: omit,
        uid: omit,
        groups: omit,
        extra: unsupported,
    }
    authorization::SelfSubjectAccessReview => openapi_authorization::SelfSubjectAccessReview {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    authorization::SubjectAccessReviewStatus => openapi_authorization::SubjectAccessReviewStatus {
        allowed: keep,
        denied: omit,
        reason: omit,
        evaluation_error: omit,
    }
    authorization::SelfSubjectAccessReviewSpec => openapi_authorization::SelfSubjectAccessReviewSpec {
        resource_attributes: ptr,
        non_resource_attributes: ptr,
    }
    authorization::ResourceAttributes => openapi_authorization::ResourceAttributes {
        namespace: omit,
        verb: omit,
        group: omit,
        version: omit,
        resource: omit,
        subresource: omit,
        name: omit,
        field_selector: unsupported_ptr,
        label_selector: unsupported_ptr,
    }
    authorization::SelfSubjectRulesReview => openapi_authorization::SelfSubjectRulesReview {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    authorization::SelfSubjectRulesReviewSpec => openapi_authorization::SelfSubjectRulesReviewSpec {
        namespace: omit,
    }
    authorization::SubjectRulesReviewStatus => openapi_authorization::SubjectRulesReviewStatus {
        resource_rules: unsupported,
        non_resource_rules: unsupported,
        incomplete: omit,
        evaluation_error: omit,
    }
    authorization::NonResourceAttributes => openapi_authorization::NonResourceAttributes {
        path: omit,
        verb: omit,
    }
}
