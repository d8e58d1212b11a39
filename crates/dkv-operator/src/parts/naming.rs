//! Names of the objects dkv creates for a cluster, of their containers and
//! annotations, and the DNS names members use to find each other. One
//! place, so every builder agrees.

/// The field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "dkv-operator";

/// On the pod template: the hash of what the members run, the member-side
/// image left out.
pub const MEMBER_SIDE_ANNOTATION: &str = "dkv.io/member-side";

/// On a `DistributedKV`: rotate its CA (once for each new value).
pub const ROTATE_ANNOTATION: &str = "dkv.io/rotate-ca";

/// On member pods (from their template): the serial of the member
/// certificate they were started with.
pub const SERIAL_ANNOTATION: &str = "dkv.io/tls-member-serial";

/// The init container that downloads a restore's snapshot
/// (`spec.bootstrap.restore`).
pub const FETCH_CONTAINER: &str = "restore-fetch";
/// The init container that restores a member's data from that snapshot.
pub const RESTORE_CONTAINER: &str = "restore";

/// How members are named and reached, and the root credentials' Secret,
/// are the API's: `kubectl dkv` reads them too.
pub use dkv_member::naming::{
    CLIENT_PORT, METRICS_PORT, PEER_PORT, auth_secret, member, ordinal_of, peer_service,
};

/// Longest `DistributedKV` name accepted. The CronJob `<name>-backup` must fit
/// in 52 characters (CronJob names get an 11-character Job suffix within the
/// 63-character label limit), which is the tightest bound of all children.
pub const MAX_CLUSTER_NAME_LEN: usize = 45;

/// The volume (claim template) of a member's data.
pub const DATA_VOLUME: &str = "data";
/// The node label kube-scheduler and cloud providers use for zones.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The node label naming each node.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Name of the PVC the StatefulSet created for `ordinal`.
pub fn volume_claim(cluster: &str, ordinal: i32) -> String {
    format!("{DATA_VOLUME}-{}-{ordinal}", statefulset(cluster))
}

/// Name of the StatefulSet (and of the PodDisruptionBudget).
pub fn statefulset(cluster: &str) -> String {
    cluster.to_owned()
}

pub fn pdb(cluster: &str) -> String {
    cluster.to_owned()
}

/// ClusterIP Service clients connect to; only ready members back it.
pub fn client_service(cluster: &str) -> String {
    format!("{cluster}-client")
}

/// ConfigMap holding the membership record the member pods read.
pub fn members_configmap(cluster: &str) -> String {
    format!("{cluster}-members")
}

/// The root credentials a backup's snapshot needs once restored (a copy of
/// its cluster's, owned by the `DistributedKVBackup`).
pub fn backup_auth_secret(backup: &str) -> String {
    format!("{backup}-etcd-root")
}

/// The copy of a cluster's root credentials its continuous backup keeps
/// (owned by nothing: it outlives the cluster, as the backup does).
pub fn continuous_auth_secret(cluster: &str) -> String {
    format!("{cluster}-continuous-etcd-root")
}

/// The cluster's CA (`spec.tls` mode `Auto`).
pub fn tls_ca_secret(cluster: &str) -> String {
    format!("{cluster}-tls-ca")
}

/// The certificate every member presents.
pub fn tls_member_secret(cluster: &str) -> String {
    format!("{cluster}-tls-member")
}

/// The client certificate for the operator, backup agents and applications.
pub fn tls_client_secret(cluster: &str) -> String {
    format!("{cluster}-tls-client")
}

/// Mode `CertManager`: the members' peer certificate (Certificate
/// `<cluster>-peer`).
pub fn tls_peer_secret(cluster: &str) -> String {
    format!("{cluster}-tls-peer")
}

/// Mode `CertManager`: the members' serving certificate for clients
/// (Certificate `<cluster>-server`).
pub fn tls_server_secret(cluster: &str) -> String {
    format!("{cluster}-tls-server")
}

pub fn backup_cronjob(cluster: &str) -> String {
    format!("{cluster}-backup")
}

/// Stable DNS name of a member through the headless peer Service.
pub fn member_host(cluster: &str, namespace: &str, ordinal: i32) -> String {
    dkv_member::naming::host_of_member(cluster, namespace, &member(cluster, ordinal))
}

/// A member's peer URL; `scheme` is `https` with peer TLS.
pub fn member_peer_url(scheme: &str, cluster: &str, namespace: &str, ordinal: i32) -> String {
    format!(
        "{scheme}://{}:{PEER_PORT}",
        member_host(cluster, namespace, ordinal)
    )
}

/// etcd's `--initial-cluster` for members `0..size`.
pub fn initial_cluster(scheme: &str, cluster: &str, namespace: &str, size: i32) -> String {
    (0..size)
        .map(|i| {
            format!(
                "{}={}",
                member(cluster, i),
                member_peer_url(scheme, cluster, namespace, i)
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `--initial-cluster-token`: unique per cluster *instance*, so a member of a
/// deleted cluster can never join a new cluster that reuses the name.
pub fn cluster_token(cluster: &str, namespace: &str, uid: &str) -> String {
    format!("{namespace}-{cluster}-{uid}")
}

/// A member pod, as the related object of an Event about it.
pub fn member_pod_reference(
    namespace: &str,
    member: &str,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(member.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_cluster_lists_every_member_with_its_peer_url() {
        assert_eq!(
            initial_cluster("http", "orders", "shop", 3),
            "orders-0=http://orders-0.orders-peer.shop.svc:2380,\
             orders-1=http://orders-1.orders-peer.shop.svc:2380,\
             orders-2=http://orders-2.orders-peer.shop.svc:2380"
        );
    }
}
