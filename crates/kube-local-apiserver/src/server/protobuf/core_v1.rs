//! core/v1 messages: Namespace, Secret, ConfigMap, ServiceAccount, Service, and the pod template.
//!
//! Shapes follow `k8s.io/api/core/v1/types.go`. Pod template parts kube-local does not convert yet (affinity,
//! lifecycle hooks, projected and cloud volumes, …) are `unsupported`: a body using them is
//! refused with 415 naming the field instead of being stored without it.

use k8s_openapi::api::core::v1 as openapi;
use k8s_pb::api::core::v1 as pb;

use super::fields::messages;

messages! {
    pb::Namespace => openapi::Namespace {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    pb::NamespaceSpec => openapi::NamespaceSpec {
        finalizers: omit,
    }
    pb::NamespaceStatus => openapi::NamespaceStatus {
        phase: omit,
        conditions: omit,
    }
    pb::NamespaceCondition => openapi::NamespaceCondition {
        r#type: keep,
        status: keep,
        last_transition_time: keep,
        reason: omit,
        message: omit,
    }
    pb::Secret => openapi::Secret {
        metadata: keep,
        immutable: ptr,
        data: omit,
        string_data: omit,
        r#type: omit,
    }
    pb::ConfigMap => openapi::ConfigMap {
        metadata: keep,
        immutable: ptr,
        data: omit,
        binary_data: omit,
    }
    pb::ServiceAccount => openapi::ServiceAccount {
        metadata: keep,
        secrets: omit,
        image_pull_secrets: omit,
        automount_service_account_token: ptr,
    }
    pb::ObjectReference => openapi::ObjectReference {
        kind: omit,
        namespace: omit,
        name: omit,
        uid: omit,
        api_version: omit,
        resource_version: omit,
        field_path: omit,
    }
    pb::LocalObjectReference => openapi::LocalObjectReference {
        name: omit,
    }

    pb::Service => openapi::Service {
        metadata: keep,
        spec: keep,
        status: keep,
    }
    pb::ServiceSpec => openapi::ServiceSpec {
        ports: omit,
        selector: omit,
        cluster_ip as "clusterIP": omit,
        cluster_ips as "clusterIPs": omit,
        r#type: omit,
        external_ips as "externalIPs": omit,
        session_affinity: omit,
        load_balancer_ip as "loadBalancerIP": omit,
        load_balancer_source_ranges: omit,
        external_name: omit,
        external_traffic_policy: omit,
        health_check_node_port: omit,
        publish_not_ready_addresses: omit,
        session_affinity_config: ptr,
        ip_families: omit,
        ip_family_policy: ptr,
        allocate_load_balancer_node_ports: ptr,
        load_balancer_class: ptr,
        internal_traffic_policy: ptr,
        traffic_distribution: ptr,
    }
    pb::ServicePort => openapi::ServicePort {
        name: omit,
        protocol: omit,
        app_protocol: ptr,
        port: keep,
        target_port: keep,
        node_port: omit,
    }
    pb::SessionAffinityConfig => openapi::SessionAffinityConfig {
        client_ip as "clientIP": ptr,
    }
    pb::ClientIpConfig => openapi::ClientIPConfig {
        timeout_seconds: ptr,
    }
    pb::ServiceStatus => openapi::ServiceStatus {
        load_balancer: keep,
        conditions: omit,
    }
    pb::LoadBalancerStatus => openapi::LoadBalancerStatus {
        ingress: omit,
    }
    pb::LoadBalancerIngress => openapi::LoadBalancerIngress {
        ip: omit,
        hostname: omit,
        ip_mode: ptr,
        ports: omit,
    }
    pb::PortStatus => openapi::PortStatus {
        port: keep,
        protocol: keep,
        error: ptr,
    }

    pb::PodTemplateSpec => openapi::PodTemplateSpec {
        metadata: keep,
        spec: keep,
    }
    pb::PodSpec => openapi::PodSpec {
        volumes: omit,
        init_containers: omit,
        containers: keep,
        ephemeral_containers: unsupported,
        restart_policy: omit,
        termination_grace_period_seconds: ptr,
        active_deadline_seconds: ptr,
        dns_policy: omit,
        node_selector: omit,
        service_account_name: omit,
        service_account: omit,
        automount_service_account_token: ptr,
        node_name: omit,
        host_network: omit,
        host_pid as "hostPID": omit,
        host_ipc as "hostIPC": omit,
        share_process_namespace: ptr,
        security_context: ptr,
        image_pull_secrets: omit,
        hostname: omit,
        subdomain: omit,
        affinity: unsupported_ptr,
        scheduler_name: omit,
        tolerations: omit,
        host_aliases: unsupported,
        priority_class_name: omit,
        priority: ptr,
        dns_config: unsupported_ptr,
        readiness_gates: unsupported,
        runtime_class_name: ptr,
        enable_service_links: ptr,
        preemption_policy: ptr,
        overhead: omit,
        topology_spread_constraints: unsupported,
        set_hostname_as_fqdn as "setHostnameAsFQDN": ptr,
        os: unsupported_ptr,
        host_users: ptr,
        scheduling_gates: unsupported,
        resource_claims: unsupported,
        resources: ptr,
        hostname_override: ptr,
        workload_ref: unsupported_ptr,
    }
    pb::Container => openapi::Container {
        name: keep,
        image: omit,
        command: omit,
        args: omit,
        working_dir: omit,
        ports: omit,
        env_from: omit,
        env: omit,
        resources: keep,
        resize_policy: omit,
        restart_policy: ptr,
        restart_policy_rules: unsupported,
        volume_mounts: omit,
        volume_devices: unsupported,
        liveness_probe: ptr,
        readiness_probe: ptr,
        startup_probe: ptr,
        lifecycle: unsupported_ptr,
        termination_message_path: omit,
        termination_message_policy: omit,
        image_pull_policy: omit,
        security_context: ptr,
        stdin: omit,
        stdin_once: omit,
        tty: omit,
    }
    pb::ContainerPort => openapi::ContainerPort {
        name: omit,
        host_port: omit,
        container_port: keep,
        protocol: omit,
        host_ip as "hostIP": omit,
    }
    pb::EnvVar => openapi::EnvVar {
        name: keep,
        value: omit,
        value_from: ptr,
    }
    pb::EnvVarSource => openapi::EnvVarSource {
        field_ref: ptr,
        resource_field_ref: ptr,
        config_map_key_ref: ptr,
        secret_key_ref: ptr,
        file_key_ref: unsupported_ptr,
    }
    pb::ObjectFieldSelector => openapi::ObjectFieldSelector {
        api_version: omit,
        field_path: keep,
    }
    pb::ResourceFieldSelector => openapi::ResourceFieldSelector {
        container_name: omit,
        resource: keep,
        divisor: keep,
    }
    pb::ConfigMapKeySelector => openapi::ConfigMapKeySelector {
        local_object_reference: inline,
        key: keep,
        optional: ptr,
    }
    pb::SecretKeySelector => openapi::SecretKeySelector {
        local_object_reference: inline,
        key: keep,
        optional: ptr,
    }
    pb::EnvFromSource => openapi::EnvFromSource {
        prefix: omit,
        config_map_ref: ptr,
        secret_ref: ptr,
    }
    pb::ConfigMapEnvSource => openapi::ConfigMapEnvSource {
        local_object_reference: inline,
        optional: ptr,
    }
    pb::SecretEnvSource => openapi::SecretEnvSource {
        local_object_reference: inline,
        optional: ptr,
    }
    pb::ResourceRequirements => openapi::ResourceRequirements {
        limits: omit,
        requests: omit,
        claims: omit,
    }
    pb::ResourceClaim => openapi::ResourceClaim {
        name: keep,
        request: omit,
    }
    pb::ContainerResizePolicy => openapi::ContainerResizePolicy {
        resource_name: keep,
        restart_policy: keep,
    }
    pb::VolumeMount => openapi::VolumeMount {
        name: keep,
        read_only: omit,
        recursive_read_only: ptr,
        mount_path: keep,
        sub_path: omit,
        mount_propagation: ptr,
        sub_path_expr: omit,
    }
    pb::Probe => openapi::Probe {
        handler: inline,
        initial_delay_seconds: omit,
        timeout_seconds: omit,
        period_seconds: omit,
        success_threshold: omit,
        failure_threshold: omit,
        termination_grace_period_seconds: ptr,
    }
    pb::ProbeHandler => openapi::Probe {
        exec: ptr,
        http_get: ptr,
        tcp_socket: ptr,
        grpc: ptr,
    }
    pb::ExecAction => openapi::ExecAction {
        command: omit,
    }
    pb::HttpGetAction => openapi::HTTPGetAction {
        path: omit,
        port: keep,
        host: omit,
        scheme: omit,
        http_headers: omit,
    }
    pb::HttpHeader => openapi::HTTPHeader {
        name: keep,
        value: keep,
    }
    pb::TcpSocketAction => openapi::TCPSocketAction {
        port: keep,
        host: omit,
    }
    pb::GrpcAction => openapi::GRPCAction {
        port: keep,
        service: ptr,
    }
    pb::Toleration => openapi::Toleration {
        key: omit,
        operator: omit,
        value: omit,
        effect: omit,
        toleration_seconds: ptr,
    }
    pb::Volume => openapi::Volume {
        name: keep,
        volume_source: inline,
    }
    pb::VolumeSource => openapi::Volume {
        host_path: ptr,
        empty_dir: ptr,
        gce_persistent_disk: unsupported_ptr,
        aws_elastic_block_store: unsupported_ptr,
        git_repo: unsupported_ptr,
        secret: ptr,
        nfs: unsupported_ptr,
        iscsi: unsupported_ptr,
        glusterfs: unsupported_ptr,
        persistent_volume_claim: ptr,
        rbd: unsupported_ptr,
        flex_volume: unsupported_ptr,
        cinder: unsupported_ptr,
        cephfs: unsupported_ptr,
        flocker: unsupported_ptr,
        downward_api as "downwardAPI": ptr,
        fc: unsupported_ptr,
        azure_file: unsupported_ptr,
        config_map: ptr,
        vsphere_volume: unsupported_ptr,
        quobyte: unsupported_ptr,
        azure_disk: unsupported_ptr,
        photon_persistent_disk: unsupported_ptr,
        projected: unsupported_ptr,
        portworx_volume: unsupported_ptr,
        scale_io as "scaleIO": unsupported_ptr,
        storageos: unsupported_ptr,
        csi: unsupported_ptr,
        ephemeral: unsupported_ptr,
        image: unsupported_ptr,
    }
    pb::HostPathVolumeSource => openapi::HostPathVolumeSource {
        path: keep,
        r#type: ptr,
    }
    pb::EmptyDirVolumeSource => openapi::EmptyDirVolumeSource {
        medium: omit,
        size_limit: ptr,
    }
    pb::SecretVolumeSource => openapi::SecretVolumeSource {
        secret_name: omit,
        items: omit,
        default_mode: ptr,
        optional: ptr,
    }
    pb::ConfigMapVolumeSource => openapi::ConfigMapVolumeSource {
        local_object_reference: inline,
        items: omit,
        default_mode: ptr,
        optional: ptr,
    }
    pb::KeyToPath => openapi::KeyToPath {
        key: keep,
        path: keep,
        mode: ptr,
    }
    pb::PersistentVolumeClaimVolumeSource => openapi::PersistentVolumeClaimVolumeSource {
        claim_name: keep,
        read_only: omit,
    }
    pb::DownwardAPIVolumeSource => openapi::DownwardAPIVolumeSource {
        items: omit,
        default_mode: ptr,
    }
    pb::DownwardAPIVolumeFile => openapi::DownwardAPIVolumeFile {
        path: keep,
        field_ref: ptr,
        resource_field_ref: ptr,
        mode: ptr,
    }
    pb::PodSecurityContext => openapi::PodSecurityContext {
        se_linux_options: ptr,
        windows_options: ptr,
        run_as_user: ptr,
        run_as_group: ptr,
        run_as_non_root: ptr,
        supplemental_groups: omit,
        supplemental_groups_policy: ptr,
        fs_group: ptr,
        sysctls: omit,
        fs_group_change_policy: ptr,
        seccomp_profile: ptr,
        app_armor_profile: ptr,
        se_linux_change_policy: ptr,
    }
    pb::SecurityContext => openapi::SecurityContext {
        capabilities: ptr,
        privileged: ptr,
        se_linux_options: ptr,
        windows_options: ptr,
        run_as_user: ptr,
        run_as_group: ptr,
        run_as_non_root: ptr,
        read_only_root_filesystem: ptr,
        allow_privilege_escalation: ptr,
        proc_mount: ptr,
        seccomp_profile: ptr,
        app_armor_profile: ptr,
    }
    pb::Capabilities => openapi::Capabilities {
        add: omit,
        drop: omit,
    }
    pb::SeLinuxOptions => openapi::SELinuxOptions {
        user: omit,
        role: omit,
        r#type: omit,
        level: omit,
    }
    pb::WindowsSecurityContextOptions => openapi::WindowsSecurityContextOptions {
        gmsa_credential_spec_name: ptr,
        gmsa_credential_spec: ptr,
        run_as_user_name: ptr,
        host_process: ptr,
    }
    pb::SeccompProfile => openapi::SeccompProfile {
        r#type: keep,
        localhost_profile: ptr,
    }
    pb::AppArmorProfile => openapi::AppArmorProfile {
        r#type: keep,
        localhost_profile: ptr,
    }
    pb::Sysctl => openapi::Sysctl {
        name: keep,
        value: keep,
    }
}
