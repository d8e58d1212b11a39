//! The operator installed the way a user installs it, and run the way it runs
//! in production: `kubectl apply --server-side -k deploy/local` (deploy/default
//! with each replica listening on its pod IP, see that kustomization) on a
//! kube-local that authenticates every request and enforces RBAC. The dkv
//! image runs this build's `dkv` as two replicas under the ServiceAccount
//! `dkv-operator`, with in-cluster configuration (the mounted token, the
//! `KUBERNETES_SERVICE_*` variables), Lease leader election, and the
//! admission webhooks reached through their Service with the caBundle the
//! operator injects.
//!
//! A cluster is created, scaled, its volumes grown, an etcd setting rolled
//! out through evictions, backed up to a real S3 server and restored
//! into a new cluster; the leader replica is killed while a writer runs, and
//! the other replica takes over. The test fails on any request of the
//! operator that RBAC refused, and reports every rule of deploy/'s RBAC that
//! nothing used; grants it finds unused fail it unless they are listed, with
//! the reason they stay, in [`UNUSED_ON_PURPOSE`].

use dkv_test_support as support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::backups::{backup_now, create_secret};
use support::etcd_cluster::{patch_spec, settled_at, wait_for, wait_settled};
use support::metrics::{grant_metrics_reader, https_get_unverified, service_account_token};
use support::tls::Target;

const OPERATOR_NS: &str = "dkv-system";
const SERVICE_ACCOUNT: &str = "system:serviceaccount:dkv-system:dkv-operator";
const LEASE: &str = "dkv-operator-leader";
const NS: &str = "shop";
const CLUSTER: &str = "carts";
const RESTORED: &str = "carts-restored";
const ETCD: &str = "registry.k8s.io/etcd:3.5.16-0";

/// Grants of deploy/ RBAC this scenario does not use, as `role
/// group/resource verb`, with the reason each stays.
const UNUSED_ON_PURPOSE: &[(&str, &str)] = &[
    (
        "dkv-operator dkv.io/distributedkvs create",
        "a backup verification (spec.verify, dkv.io/verify) restores into a scratch cluster; encrypted_backup_on_kube_local verifies one",
    ),
    (
        "dkv-operator dkv.io/distributedkvs delete",
        "the scratch cluster of a backup verification goes once it has reported",
    ),
    (
        "dkv-operator dkv.io/distributedkvbackups create",
        "scheduled runs and final backups (finalBackupOnDelete) record themselves",
    ),
    (
        "dkv-operator dkv.io/distributedkvbackups delete",
        "retention prunes old backup records",
    ),
    (
        "dkv-operator dkv.io/distributedkvs/finalizers update",
        "children owned with blockOwnerDeletion need it where OwnerReferencesPermissionEnforcement admits (kube-local does not enforce it)",
    ),
    (
        "dkv-operator dkv.io/distributedkvbackups/finalizers update",
        "as for clusters: backup Jobs are owned by their record with blockOwnerDeletion",
    ),
    (
        "dkv-operator /pods delete",
        "a member that is not serving, or one its disruption budget can never let go (a single-member cluster), is restarted by deleting its pod; serving members are evicted",
    ),
    (
        "dkv-operator /persistentvolumeclaims delete",
        "a member whose volume is lost is replaced with a new claim",
    ),
    (
        "dkv-operator /persistentvolumes get",
        "spec.recovery.lostNode: Replace reads the volume of a member on a lost node",
    ),
    (
        "dkv-operator /secrets patch",
        "spec.auth: the root credentials Secret is marked once authentication is on",
    ),
    (
        "dkv-operator /secrets update",
        "TLS certificates and the webhook certificate are renewed in place",
    ),
    (
        "dkv-operator cert-manager.io/certificates create",
        "spec.tls mode CertManager only",
    ),
    (
        "dkv-operator cert-manager.io/certificates get",
        "spec.tls mode CertManager only",
    ),
    (
        "dkv-operator cert-manager.io/certificates patch",
        "spec.tls mode CertManager only",
    ),
    (
        "dkv-operator batch/cronjobs delete",
        "removing spec.backup deletes the backup CronJob",
    ),
    (
        "dkv-operator batch/jobs delete",
        "retention deletes a pruned backup's Job",
    ),
    (
        "dkv-operator events.k8s.io/events patch",
        "an Event repeated within the recorder's window is patched (its series count) instead of created again; whether this scenario repeats one depends on timing",
    ),
];

fn kubectl(env: &kube_local::Environment, args: &[&str]) -> String {
    support::kubectl(env, args)
}

/// Polls `probe` every 200 ms until it returns `Some`, up to `limit`.
async fn eventually<T>(what: &str, limit: Duration, probe: impl AsyncFnMut() -> Option<T>) -> T {
    support::eventually(what, limit, Duration::from_millis(200), probe).await
}

async fn leader(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), OPERATOR_NS)
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

async fn operator_pods(client: &Client) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every `(role, rule index, group/resource, verb)` of the roles bound to the
/// operator's ServiceAccount, as in the API server.
async fn operator_grants(client: &Client) -> BTreeSet<(String, usize, String, String)> {
    let bound_to_operator = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == "dkv-operator"
                && s.namespace.as_deref() == Some(OPERATOR_NS)
        })
    };
    let mut roles: Vec<(String, Vec<PolicyRule>)> = Vec::new();
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    for binding in Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if bound_to_operator(&binding.subjects) {
            let role = cluster_roles.get(&binding.role_ref.name).await.unwrap();
            roles.push((binding.role_ref.name, role.rules.unwrap_or_default()));
        }
    }
    let ns_roles = Api::<Role>::namespaced(client.clone(), OPERATOR_NS);
    for binding in Api::<RoleBinding>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if bound_to_operator(&binding.subjects) {
            let rules = if binding.role_ref.kind == "ClusterRole" {
                cluster_roles
                    .get(&binding.role_ref.name)
                    .await
                    .unwrap()
                    .rules
            } else {
                ns_roles.get(&binding.role_ref.name).await.unwrap().rules
            };
            roles.push((binding.role_ref.name, rules.unwrap_or_default()));
        }
    }
    let mut grants = BTreeSet::new();
    for (role, rules) in roles {
        for (index, rule) in rules.iter().enumerate() {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        grants.insert((
                            role.clone(),
                            index,
                            format!("{group}/{resource}"),
                            verb.clone(),
                        ));
                    }
                }
            }
        }
    }
    grants
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn installed_from_deploy_it_runs_under_its_own_rbac_and_survives_losing_its_leader() {
    let moto = dkv_backup::testing::MotoServer::start("dkv-backups");
    let env = kube_local::Environment::builder()
        .authenticate(true)
        .kubelet_config(support::kubelet_config())
        .build()
        .await
        .unwrap();
    let client = env.client();

    // Install as the README says, with kubectl.
    let deploy = support::repo_root().join("deploy/local");
    kubectl(
        &env,
        &["apply", "--server-side", "-k", deploy.to_str().unwrap()],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NS);
    eventually(
        "2 available operator replicas",
        Duration::from_secs(180),
        async || {
            let d = deployments.get("dkv-operator").await.ok()?;
            (d.status?.available_replicas? == 2).then_some(())
        },
    )
    .await;
    let first_leader = eventually("a leader", Duration::from_secs(60), async || {
        leader(&client).await
    })
    .await;
    eprintln!("leader: {first_leader}");

    // Admission goes through the webhook Service to a replica.
    support::create_namespace(&client, NS).await;
    support::wait_until_admission_answers(&client, NS).await;

    // Create, with backups to S3.
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let backup = json!({"destination": {"uri": moto.uri("in-cluster"), "credentialsSecret": "s3-creds"},
                        "schedule": "0 0 1 1 *"});
    let dkvs =
        support::create_cluster(&client, NS, CLUSTER, 3, ETCD, json!({"backup": backup})).await;
    wait_settled(&dkvs, CLUSTER, 3).await;
    // New clusters speak TLS (the defaulting webhook): the writer presents
    // the cluster's client certificate.
    let source = Target::new(NS, CLUSTER);
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = source.writer(client.clone(), stop_writer.clone());

    // Scale through the scale subresource, as `kubectl scale` does.
    kubectl(
        &env,
        &["-n", NS, "scale", &format!("dkv/{CLUSTER}"), "--replicas=4"],
    );
    wait_settled(&dkvs, CLUSTER, 4).await;

    // Grow the member volumes: claims patched, the StatefulSet re-created
    // over its running pods.
    let generation = patch_spec(&dkvs, CLUSTER, json!({"storage": {"size": "2Gi"}}))
        .await
        .metadata
        .generation
        .unwrap();
    wait_for(&dkvs, CLUSTER, "volumes grown, Converged", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some_and(|g| g >= generation)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.reason == "Converged")
        }) && settled_at(d, 4)
    })
    .await;

    // An etcd setting changed: the members restart onto it one at a time,
    // each through the eviction API within the cluster's disruption budget.
    let generation = patch_spec(&dkvs, CLUSTER, json!({"etcd": {"logLevel": "warn"}}))
        .await
        .metadata
        .generation
        .unwrap();
    wait_for(&dkvs, CLUSTER, "the log level rolled out, Converged", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some_and(|g| g >= generation)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.reason == "Converged")
        }) && settled_at(d, 4)
    })
    .await;
    let members = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("dkv.io/cluster={CLUSTER}")))
        .await
        .unwrap()
        .items;
    assert_eq!(members.len(), 4);
    for pod in &members {
        let args: Vec<&String> = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .flat_map(|c| c.args.iter().flatten())
            .collect();
        assert!(
            args.iter().any(|a| *a == "--log-level=warn"),
            "{:?} does not run the edited template: {args:?}",
            pod.metadata.name
        );
    }

    // Lose the leader replica: its process is killed (no lease release) and
    // its pod force-deleted, so it cannot come back under the same name.
    let leader_pod = leader(&client).await.unwrap();
    let killed = Instant::now();
    if let Some(kubelet) = env.kubelet() {
        let _ = kubelet.kill_container(OPERATOR_NS, &leader_pod, "operator");
    }
    Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .delete(
            &leader_pod,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    let new_leader = eventually(
        "another replica to lead",
        Duration::from_secs(60),
        async || leader(&client).await.filter(|l| *l != leader_pod),
    )
    .await;
    let handover = killed.elapsed();
    eprintln!("leadership: {leader_pod} -> {new_leader} in {handover:?}");
    // The lease lasts 15 s: the survivor takes it once it has expired.
    assert!(
        handover < Duration::from_secs(45),
        "leadership took {handover:?} to move"
    );

    // A monitoring system scrapes the new leader's secure /metrics with its
    // own token: the operator reviews the token and the access with the API
    // server (TokenReview, SubjectAccessReview) under its own RBAC.
    support::create_namespace(&client, "monitoring").await;
    grant_metrics_reader(&client, "monitoring").await;
    let token = service_account_token(&client, "monitoring", "prometheus").await;
    let ip = eventually(
        "the new leader's pod IP",
        Duration::from_secs(30),
        async || {
            Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
                .get(&new_leader)
                .await
                .ok()?
                .status?
                .pod_ip
        },
    )
    .await;
    let metrics: SocketAddr = format!("{ip}:8443").parse().unwrap();
    let (code, body) = https_get_unverified(metrics, "/metrics", Some(&token))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("dkv_"), "{body}");
    let (code, _) = https_get_unverified(metrics, "/metrics", None)
        .await
        .unwrap();
    assert_eq!(code, 401);

    // Every write acknowledged across the scale and the lost leader reads
    // back.
    stop_writer.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(acked.len() >= 20, "too few writes: {}", acked.len());
    assert_eq!(
        source.lost(&client, &acked).await,
        Vec::<u64>::new(),
        "acknowledged writes lost"
    );

    // The new leader keeps reconciling: back up, and restore into a new
    // cluster that holds every one of those writes.
    backup_now(&client, NS, CLUSTER, "carts-1").await;
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            RESTORED,
            3,
            ETCD,
            json!({"bootstrap": {"restore": {"backupName": "carts-1"}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, RESTORED, 3).await;
    assert_eq!(
        Target::new(NS, RESTORED).lost(&client, &acked).await,
        Vec::<u64>::new(),
        "writes acknowledged before the backup are missing from the restore"
    );

    // Delete: finalizers run and the children go.
    dkvs.delete(RESTORED, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the restored cluster to be gone",
        Duration::from_secs(120),
        async || dkvs.get_opt(RESTORED).await.ok()?.is_none().then_some(()),
    )
    .await;
    // Both replicas are back (the Deployment replaced the lost one).
    eventually(
        "2 ready operator pods",
        Duration::from_secs(120),
        async || {
            let pods = operator_pods(&client).await;
            (pods.iter().filter(|p| ready(p)).count() == 2).then_some(())
        },
    )
    .await;

    // Nothing the operator asked for was refused.
    let refused: Vec<_> = env
        .forbidden()
        .into_iter()
        .filter(|f| f.user == SERVICE_ACCOUNT)
        .collect();
    assert!(
        refused.is_empty(),
        "RBAC refused the operator: {refused:#?}"
    );

    // Every grant the operator was given, against what it used.
    let used = env.allowed().remove(SERVICE_ACCOUNT).unwrap_or_default();
    let mut unused = Vec::new();
    for (role, rule, resource, verb) in operator_grants(&client).await {
        let was_used = used.iter().any(|a| {
            let full = if a.subresource.is_empty() {
                format!("{}/{}", a.group, a.resource)
            } else {
                format!("{}/{}/{}", a.group, a.resource, a.subresource)
            };
            a.verb == verb
                && full == resource
                && a.grant
                    .as_ref()
                    .is_some_and(|g| g.role_name == role && g.rule == rule)
        });
        if !was_used {
            unused.push(format!("{role} {resource} {verb}"));
        }
    }
    eprintln!(
        "grants never used in this scenario:\n  {}",
        unused.join("\n  ")
    );
    let unexplained: Vec<&String> = unused
        .iter()
        .filter(|u| !UNUSED_ON_PURPOSE.iter().any(|(grant, _)| grant == u))
        .collect();
    assert!(
        unexplained.is_empty(),
        "grants in deploy/ that nothing used (remove them, or list them in UNUSED_ON_PURPOSE with the reason): {unexplained:#?}"
    );
}
