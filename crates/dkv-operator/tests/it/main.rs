//! dkv-operator's integration tests, in one binary: one module per suite
//! (`cluster_on_kube_local`, `pipeline`, ...), named as the files they were
//! when each was a test binary of its own. What they share (kube-local with
//! dkv's CRDs, the operator in-process, the writer that counts acknowledged
//! writes, waiting, the S3 server set-up) is the `dkv-test-support` crate.
//!
//! Every test runs in its own process under `cargo nextest` (scripts/test.sh,
//! CI): process-wide state (the tracing subscriber, the rustls provider, the
//! secret scan's records) belongs to one test. A filter picks a suite:
//! `cargo nextest run -p dkv-operator --test it -E 'test(/^backup_on_kube_local::/)'`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod adoption_faults_on_kube_local;
mod adoption_on_kube_local;
mod alerts_with_prometheus;
mod auth_on_kube_local;
mod backup_agent;
mod backup_on_kube_local;
mod bench_harness_parts;
mod cluster_on_kube_local;
mod continuous_backup_on_kube_local;
mod conversion_on_kube_local;
mod corruption_on_kube_local;
mod crd;
mod defrag_on_kube_local;
mod encrypted_backup_on_kube_local;
mod etcd_3_6_and_3_7_on_kube_local;
mod etcd_settings_on_kube_local;
mod examples;
mod external_etcd_harness;
mod faults_on_kube_local;
mod hardened_pods_on_kube_local;
mod hibernation_on_kube_local;
mod in_cluster_on_kube_local;
mod interruptions_on_kube_local;
mod kube_local_against_kubernetes;
mod leader_election;
mod local_mode;
mod local_mode_backups;
mod local_mode_failover;
mod local_mode_security;
mod member_init_etcd;
mod member_side_code;
mod membership_flow;
mod metrics_on_kube_local;
mod nodes_on_kube_local;
mod nospace_on_kube_local;
mod operator_on_kube_local;
mod operator_upgrade_on_kube_local;
mod pipeline;
mod previous_release_on_kubernetes;
mod real_control_plane;
mod reconcile_api;
mod restore_on_kube_local;
mod rollout_on_kube_local;
mod scaling_on_kube_local;
mod scenarios_on_kubernetes;
mod secrets_stay_secret;
mod standby_on_kube_local;
mod stores_on_kube_local;
mod take_back_on_kube_local;
mod tls_on_kube_local;
mod tls_sources_on_kube_local;
mod upgrade_on_kube_local;
mod webhooks_on_kube_local;
