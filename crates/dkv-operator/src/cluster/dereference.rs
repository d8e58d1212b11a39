//! Stage 1 of a reconcile, observed: what exists for a cluster, and what
//! its status recorded when the pass began. Reads only the reflector
//! caches, so a reconcile costs no API reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use dkv_api::DistributedKV;
use dkv_api::conditions::{self, reasons, types};
use dkv_api::distributedkv::v1beta1::{
    BackupArtifactRef, MemberStatus, Operation, OperationKind, Phase,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use super::validate::{Facts, RunningVersions};
use crate::cluster::watches::{self, Stores};
use crate::etcd_version::EtcdVersion;
use crate::parts::naming;
use dkv_member::record::{MembershipRecord, RECORD_KEY};

/// Annotation on the StatefulSet recording the etcd version it runs, so the
/// next reconcile can check a version change against it.
pub const ETCD_VERSION_ANNOTATION: &str = "dkv.io/etcd-version";

/// The children of one cluster as the caches last saw them.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub statefulset: Option<Arc<StatefulSet>>,
    pub peer_service: Option<Arc<Service>>,
    pub client_service: Option<Arc<Service>>,
    pub pdb: Option<Arc<PodDisruptionBudget>>,
    pub backup_cronjob: Option<Arc<CronJob>>,
    pub members: Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    /// The membership record as last applied (parsed from `members`).
    pub record: Option<MembershipRecord>,
    /// The cluster's member pods.
    pub pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>>,
    /// The EndpointSlices of the client Service: what a client of the
    /// cluster can reach right now.
    pub client_endpoints: Vec<Arc<EndpointSlice>>,
    /// The members' volume claims (created by the StatefulSet).
    pub claims: Vec<Arc<PersistentVolumeClaim>>,
    pub facts: Facts,
    /// What the cluster's status recorded when the pass began.
    pub recorded: Recorded,
}

/// What the cluster's status (and metadata) recorded when the pass began:
/// the previous pass's conclusions, read once here, so that no stage after
/// validation reads the object itself.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The operation pinned in status.
    pub operation: Option<Operation>,
    /// The members as status last listed them (when each node was lost).
    pub members: Vec<MemberStatus>,
    /// The newest completed backup.
    pub last_backup: Option<BackupArtifactRef>,
    /// When the last scheduled defragmentation ran.
    pub last_defrag: Option<jiff::Timestamp>,
    /// When the cluster was created.
    pub created: Option<jiff::Timestamp>,
    /// Since when `Degraded` has said `QuorumLost`.
    pub quorum_lost_since: Option<jiff::Timestamp>,
    /// Status says the cluster formed before (so a cluster that looks new
    /// again, all members away, is not created anew).
    pub formed: bool,
    /// Status says it hibernated, or is waking: until every member is
    /// healthy again, a cluster coming back is waking, not missing members.
    pub waking: bool,
    /// Why a member's restore failed (`Degraded=True, RestoreFailed`).
    pub restore_failed: Option<String>,
    /// Where the adoption of a running cluster stands
    /// (`spec.bootstrap.join`).
    pub adoption: Option<dkv_api::distributedkv::v1beta1::AdoptionStatus>,
    /// Where status says a standby (`spec.standby`) stands.
    pub standby: Option<dkv_api::distributedkv::v1beta1::StandbyStatus>,
}

impl Recorded {
    /// Reads what `dkv`'s status records.
    pub fn of(dkv: &DistributedKV) -> Self {
        let status = dkv.status.as_ref();
        let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
        let hibernated = status.is_some_and(|s| s.phase == Some(Phase::Hibernated));
        Self {
            operation: status.and_then(|s| s.operation.clone()),
            members: status.map(|s| s.members.clone()).unwrap_or_default(),
            adoption: status.and_then(|s| s.adoption.clone()),
            standby: status.and_then(|s| s.standby.clone()),
            last_backup: status.and_then(|s| s.last_backup.clone()),
            last_defrag: status
                .and_then(|s| s.last_defrag_time.as_ref())
                .map(|t| t.0),
            created: dkv.metadata.creation_timestamp.as_ref().map(|t| t.0),
            quorum_lost_since: conditions::find_true(conditions, types::DEGRADED)
                .filter(|c| c.reason == reasons::QUORUM_LOST)
                .map(|c| c.last_transition_time.0),
            formed: formed_before(dkv),
            waking: hibernated
                || conditions::find_true(conditions, types::PROGRESSING)
                    .is_some_and(|c| c.reason == reasons::WAKING),
            restore_failed: conditions::find_true(conditions, types::DEGRADED)
                .filter(|c| c.reason == reasons::RESTORE_FAILED)
                .map(|c| c.message.clone()),
        }
    }

    /// The token of the member replacement pinned in status (see
    /// [`dkv_member::record::RecordedMember::replacement`]), derived
    /// from when it was pinned so that every pass of it agrees.
    pub fn replacement(&self) -> Option<String> {
        self.operation
            .as_ref()
            .filter(|op| op.kind == OperationKind::ReplaceMember)
            .map(|op| format!("replace-{}", op.started_at.0.as_second()))
    }

    /// The epoch of the quorum recovery pinned in status, derived from when
    /// it was pinned so that every pass of it agrees.
    pub fn recovery_epoch(&self) -> Option<String> {
        let op = self.operation.as_ref()?;
        let prefix = match op.kind {
            OperationKind::RecoverQuorum => "recovery",
            OperationKind::RestoreFromBackup => "restore",
            _ => return None,
        };
        Some(format!("{prefix}-{}", op.started_at.0.as_second()))
    }
}

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

pub fn observe(dkv: &DistributedKV, namespace: &str, stores: &Stores) -> Observed {
    let name = dkv.name_any();
    let statefulset = watches::get(&stores.statefulsets, namespace, &naming::statefulset(&name))
        .filter(|sts| is_owned_by(sts.as_ref(), dkv));
    let deployed_version = statefulset
        .as_ref()
        .and_then(|sts| sts.annotations().get(ETCD_VERSION_ANNOTATION).cloned())
        .and_then(|v| EtcdVersion::parse(&v));
    let deployed_storage_size = statefulset.as_ref().and_then(|sts| {
        let template = sts.spec.volume_claim_templates.as_ref()?.first()?;
        let requests = template
            .spec
            .as_ref()?
            .resources
            .as_ref()?
            .requests
            .as_ref()?;
        Some(requests.get("storage")?.0.clone())
    });
    // Sorted: the cache iterates in hash order, and a message that changed
    // from pass to pass would rewrite status every time.
    let mut class_names: Vec<String> = stores
        .storage_classes
        .state()
        .iter()
        .map(|sc| sc.name_any())
        .collect();
    class_names.sort();
    let storage_classes = Some(class_names);
    let members = watches::get(
        &stores.configmaps,
        namespace,
        &naming::members_configmap(&name),
    );
    let record = members
        .as_ref()
        .and_then(|cm| cm.data.as_ref()?.get(RECORD_KEY).cloned())
        .and_then(|text| serde_json::from_str(&text).ok());
    let pods = labelled(&stores.pods, namespace, dkv_api::labels::CLUSTER_KEY, &name);
    let client_service = naming::client_service(&name);
    let client_endpoints = labelled(
        &stores.endpoint_slices,
        namespace,
        SERVICE_NAME_LABEL,
        &client_service,
    );
    let claims = labelled(
        &stores.claims,
        namespace,
        dkv_api::labels::CLUSTER_KEY,
        &name,
    );
    let volume_capacity = largest_reached(claims.iter().map(AsRef::as_ref));
    Observed {
        members,
        client_endpoints,
        claims,
        record,
        pods,
        peer_service: watches::get(&stores.services, namespace, &naming::peer_service(&name)),
        client_service: watches::get(&stores.services, namespace, &naming::client_service(&name)),
        pdb: watches::get(&stores.pdbs, namespace, &naming::pdb(&name)),
        backup_cronjob: watches::get(&stores.cronjobs, namespace, &naming::backup_cronjob(&name)),
        statefulset,
        recorded: Recorded::of(dkv),
        facts: Facts {
            storage_classes,
            running: RunningVersions::of(dkv, deployed_version, formed_before(dkv)),
            deployed_storage_size,
            volume_capacity,
        },
    }
}

/// What the members' volumes were given, over `claims` (a cluster's
/// member volume claims): the largest size a claim both asked for and
/// reached — the smaller of its request and its `status.capacity` — as
/// written. A provisioner that rounds a volume up (`512Mi` to `1Gi`) does
/// not raise it, and neither does a request no volume reached.
pub fn largest_reached<'a>(
    claims: impl Iterator<Item = &'a PersistentVolumeClaim>,
) -> Option<String> {
    let storage = |quantities: Option<&BTreeMap<String, Quantity>>| {
        let text = quantities?.get("storage")?.0.clone();
        Some((crate::quantity::parse_quantity(&text).ok()?, text))
    };
    claims
        .filter_map(|c| {
            let capacity = storage(c.status.as_ref()?.capacity.as_ref())?;
            let requested = c
                .spec
                .as_ref()
                .and_then(|s| storage(s.resources.as_ref()?.requests.as_ref()));
            Some(match requested {
                Some(requested) if requested.0 < capacity.0 => requested,
                _ => capacity,
            })
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, text)| text)
}

/// Whether the cluster's status records that it has formed: its Available
/// condition was once QuorumHealthy (or Standby), and stays so, QuorumLost or
/// EndpointsNotReady — or one of hibernation's, which only a formed cluster
/// reaches.
pub fn formed_before(dkv: &DistributedKV) -> bool {
    dkv.status.iter().flat_map(|s| &s.conditions).any(|c| {
        c.type_ == types::AVAILABLE
            && [
                reasons::QUORUM_HEALTHY,
                reasons::STANDBY,
                reasons::QUORUM_LOST,
                reasons::ENDPOINTS_NOT_READY,
                reasons::HIBERNATING,
                reasons::HIBERNATED,
                reasons::WAKING,
            ]
            .contains(&c.reason.as_str())
    })
}

/// The cached objects in `namespace` whose label `key` is `value`.
fn labelled<K>(store: &Store<K>, namespace: &str, key: &str, value: &str) -> Vec<Arc<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .into_iter()
        .filter(|obj| {
            obj.namespace().as_deref() == Some(namespace)
                && obj.labels().get(key).map(String::as_str) == Some(value)
        })
        .collect()
}

/// A StatefulSet with the cluster's name but another owner belongs to an
/// earlier instance of the same name (or to someone else): it is not this
/// cluster's and its data must not be adopted silently.
fn is_owned_by<K: ResourceExt>(child: &K, dkv: &DistributedKV) -> bool {
    let uid = dkv.uid();
    child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

#[cfg(test)]
mod reached_tests {
    use super::*;

    fn claim(request: &str, capacity: &str) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-orders-0"},
            "spec": {"resources": {"requests": {"storage": request}}},
            "status": {"capacity": {"storage": capacity}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn what_a_claim_asked_for_and_reached_counts() {
        let reached = |claims: &[PersistentVolumeClaim]| largest_reached(claims.iter());
        // Rounded up by the provisioner: what was asked for.
        assert_eq!(reached(&[claim("512Mi", "1Gi")]).as_deref(), Some("512Mi"));
        // An expansion no volume reached: what the volume holds.
        assert_eq!(reached(&[claim("100Ti", "1Gi")]).as_deref(), Some("1Gi"));
        assert_eq!(
            reached(&[claim("1Gi", "1Gi"), claim("2Gi", "2Gi")]).as_deref(),
            Some("2Gi")
        );
        assert_eq!(reached(&[]), None);
    }
}
