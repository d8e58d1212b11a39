//! The node's heartbeat: a Lease named after the node in `kube-node-lease`, renewed every 10 s with a duration of
//! 40 s, as upstream's kubelet keeps it (a quarter of the node monitor grace period when tests shorten that). The
//! node lifecycle controller reads its `renewTime`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use super::Shared;

pub const NAMESPACE: &str = "kube-node-lease";
const RENEW_EVERY: Duration = Duration::from_secs(10);
const DURATION_SECONDS: i32 = 40;

/// Renews the node's Lease until the kubelet stops (the task is aborted with it).
pub async fn renew(shared: Arc<Shared>) {
    let api: Api<Lease> = Api::namespaced(shared.client.clone(), NAMESPACE);
    let name = shared.node.name.clone();
    let every = RENEW_EVERY.min(shared.config.nodes.monitor_grace / 4);
    loop {
        if let Err(e) = renew_once(&shared, &api, &name).await {
            tracing::debug!(node = %name, error = %e, "renewing the node lease");
        }
        tokio::time::sleep(every).await;
    }
}

async fn renew_once(shared: &Shared, api: &Api<Lease>, name: &str) -> Result<(), kube::Error> {
    let now = MicroTime(jiff::Timestamp::now());
    let patch = json!({"spec": {"renewTime": now, "holderIdentity": name}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let owner = Api::<k8s_openapi::api::core::v1::Node>::all(shared.client.clone())
                .get_opt(name)
                .await?
                .and_then(|n| n.metadata.uid)
                .map(|uid| OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.to_string(),
                    uid,
                    ..OwnerReference::default()
                });
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(NAMESPACE.to_string()),
                    owner_references: owner.map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(name.to_string()),
                    lease_duration_seconds: Some(DURATION_SECONDS),
                    renew_time: Some(now),
                    ..LeaseSpec::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}
