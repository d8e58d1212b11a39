//! The two Services of a cluster: a headless one that gives every member a
//! stable DNS name for peer traffic, and a ClusterIP one for clients.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::child_meta;
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming::{self, CLIENT_PORT, PEER_PORT};

fn port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        target_port: Some(IntOrString::String(name.to_owned())),
        protocol: Some("TCP".to_owned()),
        ..ServicePort::default()
    }
}

/// Headless peer Service. `publishNotReadyAddresses` is essential: members
/// must resolve each other *before* they are ready, or a new cluster could
/// never elect its first leader.
pub fn peer(cluster: &ValidatedCluster) -> Service {
    Service {
        metadata: child_meta(cluster, naming::peer_service(&cluster.name), "peer"),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            publish_not_ready_addresses: Some(true),
            selector: Some(dkv_api::labels::selector_labels(&cluster.name)),
            ports: Some(vec![port("peer", PEER_PORT), port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Client Service: only ready members (those whose etcd reports healthy)
/// receive client traffic.
pub fn client(cluster: &ValidatedCluster) -> Service {
    Service {
        metadata: child_meta(cluster, naming::client_service(&cluster.name), "client"),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(dkv_api::labels::selector_labels(&cluster.name)),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
