//! The operator against a real Kubernetes API (kube-local), driven the way a
//! user drives it: with `kubectl`. No pods run here (the kubelet is a later
//! piece), so these tests cover everything up to the member pods: children,
//! drift repair, status, Events, pause, backups on/off, scale, deletion.

use std::process::Output;
use std::time::Duration;

use dkv_api::DistributedKV;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, ListParams};

use dkv_test_support as support;

struct Harness {
    env: kube_local::Environment,
    operator: support::RunningOperator,
    namespace: String,
}

impl Harness {
    async fn start(namespace: &str) -> Self {
        let env = support::environment(false).await;
        support::create_namespace(&env.client(), namespace).await;
        let operator = support::RunningOperator::start(env.client(), true);
        Self {
            env,
            operator,
            namespace: namespace.to_owned(),
        }
    }

    fn client(&self) -> Client {
        self.env.client()
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client(), &self.namespace)
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.env.kubeconfig_path())
            .args(args)
            .output()
            .unwrap()
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let mut full = vec!["-n", self.namespace.as_str()];
        full.extend_from_slice(args);
        let out = self.kubectl(&full);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn apply(&self, yaml: &str) -> String {
        let path = std::env::temp_dir().join(format!(
            "dkv-it-{}-{}.yaml",
            self.namespace,
            std::process::id()
        ));
        std::fs::write(&path, yaml).unwrap();
        self.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])
    }

    async fn stop(self) {
        self.operator.stop().await;
    }
}

/// Polls `check` every 100 ms until it returns `Some`, up to 30 s.
async fn eventually<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    let (within, every) = (Duration::from_secs(30), Duration::from_millis(100));
    support::eventually(what, within, every, check).await
}

fn cluster_yaml(namespace: &str, extra: &str) -> String {
    format!(
        "apiVersion: dkv.io/v1beta1\nkind: DistributedKV\nmetadata:\n  name: orders\n  namespace: {namespace}\nspec:\n  size: 3\n  image: registry.k8s.io/etcd:3.5.16-0\n  storage:\n    storageClassName: standard\n    size: 1Gi\n    reclaimPolicy: Delete\n{extra}"
    )
}

fn condition(dkv: &DistributedKV, type_: &str) -> Option<(String, String)> {
    dkv.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_gets_its_children_status_and_drift_repair() {
    let h = Harness::start("shop").await;
    h.apply(&cluster_yaml("shop", ""));

    // Children appear, owned by the cluster.
    let sts: Api<StatefulSet> = h.api();
    let created = eventually("StatefulSet", || async {
        sts.get_opt("orders").await.ok().flatten()
    })
    .await;
    assert_eq!(created.spec.replicas, Some(3));
    assert_eq!(
        created.spec.pod_management_policy.as_deref(),
        Some("Parallel")
    );
    let owner = &created.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("DistributedKV", "orders", Some(true))
    );
    let services: Api<Service> = h.api();
    for name in ["orders-peer", "orders-client"] {
        eventually(name, || async {
            services.get_opt(name).await.ok().flatten()
        })
        .await;
    }
    let pdbs: Api<PodDisruptionBudget> = h.api();
    let pdb = eventually("PDB", || async {
        pdbs.get_opt("orders").await.ok().flatten()
    })
    .await;
    assert_eq!(
        pdb.spec.unwrap().min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    let applied = h.kubectl_ok(&[
        "get",
        "statefulset",
        "orders",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ]);
    assert!(
        applied.contains("dkv-operator"),
        "server-side applied by dkv-operator: {applied}"
    );

    // Status: no pods run here, so the cluster is being created.
    let dkvs: Api<DistributedKV> = h.api();
    let dkv = eventually("status", || async {
        let d = dkvs.get("orders").await.ok()?;
        (condition(&d, "Progressing")? == ("True".into(), "CreatingCluster".into())).then_some(d)
    })
    .await;
    let status = dkv.status.clone().unwrap();
    assert_eq!(status.observed_generation, dkv.metadata.generation);
    assert_eq!(
        status.phase,
        Some(dkv_api::distributedkv::v1alpha1::Phase::Creating)
    );
    assert_eq!(
        condition(&dkv, "Available").unwrap(),
        ("False".into(), "Creating".into())
    );
    assert_eq!(
        dkv.metadata.finalizers.clone().unwrap_or_default(),
        vec!["dkv.io/finalizer".to_owned()]
    );
    let table = h.kubectl_ok(&["get", "dkv", "orders"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "READY", "VERSION", "STATUS", "AGE"]
    );
    assert!(
        table.lines().nth(1).unwrap().contains("Creating"),
        "{table}"
    );

    // Drift: a deleted Service comes back, a hand-scaled StatefulSet is restored.
    h.kubectl_ok(&["delete", "service", "orders-client"]);
    eventually("client Service recreated", || async {
        services.get_opt("orders-client").await.ok().flatten()
    })
    .await;
    h.kubectl_ok(&["scale", "statefulset", "orders", "--replicas=1"]);
    eventually("replicas restored", || async {
        let s = sts.get("orders").await.ok()?;
        (s.spec.replicas == Some(3)).then_some(())
    })
    .await;
    // An edit inside the pod template (which the operator's cache does not
    // keep) is put back too.
    let image = |s: &StatefulSet| {
        s.spec
            .template
            .spec
            .as_ref()?
            .containers
            .first()?
            .image
            .clone()
    };
    let wanted = image(&sts.get("orders").await.unwrap());
    h.kubectl_ok(&[
        "set",
        "image",
        "statefulset/orders",
        "etcd=registry.k8s.io/etcd:3.5.30-0",
    ]);
    eventually("pod template restored", || async {
        let s = sts.get("orders").await.ok()?;
        (image(&s) == wanted).then_some(())
    })
    .await;

    // Resizing goes through etcd membership, one step at a time; while no
    // member answers (no pods run here) nothing is resized behind its back.
    h.kubectl_ok(&["scale", "dkv", "orders", "--replicas=5"]);
    eventually("size 5 observed", || async {
        let d = dkvs.get("orders").await.ok()?;
        (d.status.as_ref()?.observed_generation == d.metadata.generation && d.spec.size == 5)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sts.get("orders").await.unwrap().spec.replicas, Some(3));
    let waiting = dkvs.get("orders").await.unwrap();
    // Still being created (no pods run here): not mistaken for a lost quorum.
    assert_eq!(
        condition(&waiting, "Available").unwrap(),
        ("False".into(), "Creating".into())
    );
    assert_eq!(condition(&waiting, "Degraded").unwrap().0, "False");
    h.kubectl_ok(&["scale", "dkv", "orders", "--replicas=3"]);

    // Events reach `kubectl describe`.
    let described = h.kubectl_ok(&["describe", "dkv", "orders"]);
    assert!(described.contains("CreatingCluster"), "{described}");

    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_spec_backups_pause_and_deletion() {
    let h = Harness::start("billing").await;
    let dkvs: Api<DistributedKV> = h.api();

    // A StorageClass that does not exist: Degraded/InvalidSpec with the fix.
    h.apply(
        &cluster_yaml("billing", "")
            .replace("storageClassName: standard", "storageClassName: gold"),
    );
    let dkv = eventually("InvalidSpec", || async {
        let d = dkvs.get("orders").await.ok()?;
        (condition(&d, "Degraded")? == ("True".into(), "InvalidSpec".into())).then_some(d)
    })
    .await;
    let message = dkv
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap()
        .message;
    assert!(
        message.contains(
            "StorageClass \"gold\" does not exist; create it or use one of: fixed-size, network, standard"
        ),
        "{message}"
    );
    let sts: Api<StatefulSet> = h.api();
    assert!(
        sts.get_opt("orders").await.unwrap().is_none(),
        "nothing is built from an invalid spec"
    );

    // Creating the StorageClass fixes it without any edit of the cluster.
    let sc = serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "gold"}, "provisioner": "local"});
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(h.client());
    classes
        .create(&Default::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
    eventually("StatefulSet after the class appeared", || async {
        sts.get_opt("orders").await.ok().flatten()
    })
    .await;

    // Backups on: a CronJob; off again: it goes away.
    let backup = "  backup:\n    destination:\n      uri: s3://dkv-backups/orders/\n      credentialsSecret: s3-creds\n    schedule: \"0 */6 * * *\"\n";
    h.apply(
        &cluster_yaml("billing", backup)
            .replace("storageClassName: standard", "storageClassName: gold"),
    );
    let cronjobs: Api<CronJob> = h.api();
    let cj = eventually("CronJob", || async {
        cronjobs.get_opt("orders-backup").await.ok().flatten()
    })
    .await;
    assert_eq!(cj.spec.schedule, "0 */6 * * *");
    h.apply(
        &cluster_yaml("billing", "")
            .replace("storageClassName: standard", "storageClassName: gold"),
    );
    eventually("CronJob removed", || async {
        cronjobs
            .get_opt("orders-backup")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Paused: a deleted child stays deleted; unpaused: it is restored.
    h.kubectl_ok(&["annotate", "dkv", "orders", "dkv.io/reconcile-paused=true"]);
    eventually("paused reported", || async {
        let d = dkvs.get("orders").await.ok()?;
        (condition(&d, "Progressing")?.1 == "ReconcilePaused").then_some(())
    })
    .await;
    let services: Api<Service> = h.api();
    h.kubectl_ok(&["delete", "service", "orders-peer"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        services.get_opt("orders-peer").await.unwrap().is_none(),
        "paused: no changes"
    );
    h.kubectl_ok(&["annotate", "dkv", "orders", "dkv.io/reconcile-paused-"]);
    eventually("peer Service restored", || async {
        services.get_opt("orders-peer").await.ok().flatten()
    })
    .await;

    // Deletion: the finalizer runs (reclaimPolicy Delete), then releases.
    h.kubectl_ok(&["delete", "dkv", "orders", "--wait=true", "--timeout=30s"]);
    assert!(dkvs.get_opt("orders").await.unwrap().is_none());
    let events = h.kubectl_ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=orders",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("VolumesDeleted"), "{events}");
    eventually("children garbage-collected", || async {
        let left = sts.list(&ListParams::default()).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;

    h.stop().await;
}
