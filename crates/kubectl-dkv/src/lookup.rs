//! The reads several commands share: a cluster's member pods, the pod to
//! run etcdctl in, its backups.

use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;

use crate::client::Target;
use crate::error::{Error, Result};

/// A pod of the cluster's StatefulSet (backup and verification Jobs carry
/// the cluster's label too).
pub fn is_member_pod(pod: &Pod, cluster: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "StatefulSet" && o.name == cluster)
}

/// The cluster's member pods.
pub async fn member_pods(target: &Target, name: &str) -> Result<Vec<Pod>> {
    let selector = format!("{}={name}", dkv_api::labels::CLUSTER_KEY);
    Ok(target
        .api::<Pod>()
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::Api {
            what: format!("listing the pods of {}/{name}", target.namespace),
            source,
        })?
        .items
        .into_iter()
        .filter(|p| is_member_pod(p, name))
        .collect())
}

/// Every DistributedKVBackup of cluster `name`.
pub async fn backups_of(target: &Target, name: &str) -> Result<Vec<DistributedKVBackup>> {
    Ok(target
        .api::<DistributedKVBackup>()
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            what: format!("listing the backups in {}", target.namespace),
            source,
        })?
        .items
        .into_iter()
        .filter(|b| b.spec.cluster == name)
        .collect())
}

/// The leader's pod if it is ready, else the first ready member pod.
pub async fn pick_pod(target: &Target, cluster: &DistributedKV) -> Result<String> {
    let name = cluster.name_any();
    let ready: Vec<String> = member_pods(target, &name)
        .await?
        .into_iter()
        .filter(dkv_readouts::pod::is_ready)
        .map(|p| p.name_any())
        .collect();
    let leader = cluster.status.as_ref().and_then(|s| s.leader.clone());
    leader
        .filter(|l| ready.contains(l))
        .or_else(|| ready.first().cloned())
        .ok_or_else(|| {
            Error::Refused(format!(
                "no member pod of {}/{name} is ready to run etcdctl in (kubectl dkv status {name})",
                target.namespace
            ))
        })
}
