//! `spec.tls.*.mode: CertManager`: the cert-manager `Certificate` objects
//! (cert-manager.io/v1) dkv asks for, owned by the cluster. cert-manager
//! writes their Secrets; [`crate::cluster::security::certificates`] reads and checks those like
//! user-provided ones, and members restart onto them one at a time when
//! cert-manager renews them.
//!
//! dkv never needs cert-manager: the API is looked up when a cluster asks
//! for it, and its absence is reported ([`Error::CertManagerMissing`]).

use dkv_api::distributedkv::v1beta1::IssuerReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cluster::diff::is_subset;
use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;
use crate::parts::naming;
use crate::parts::naming::FIELD_MANAGER;
use crate::parts::tls::{self, CertificateSource};

pub const GROUP_VERSION: &str = "cert-manager.io/v1";
const DEFAULT_GROUP: &str = "cert-manager.io";

/// One certificate dkv asks cert-manager for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Name of the Certificate.
    pub name: String,
    /// The Secret cert-manager writes.
    pub secret: String,
    pub issuer: IssuerReference,
    pub common_name: String,
    pub dns_names: Vec<String>,
    pub usages: &'static [&'static str],
}

/// Members present their certificates as servers and, to their peers (and
/// etcd's gRPC gateway to its own member), as clients.
const MEMBER_USAGES: &[&str] = &[
    "digital signature",
    "key encipherment",
    "server auth",
    "client auth",
];
const CLIENT_USAGES: &[&str] = &["digital signature", "key encipherment", "client auth"];

/// The Certificates a cluster needs from cert-manager (none unless a
/// transport's mode is `CertManager`).
pub fn requests(cluster: &ValidatedCluster) -> Vec<Request> {
    let name = &cluster.name;
    let hosts = tls::member_hosts(name, &cluster.namespace);
    let member = |certificate: String, secret: String, issuer: &IssuerReference| Request {
        name: certificate,
        secret,
        issuer: issuer.clone(),
        common_name: name.clone(),
        dns_names: hosts.clone(),
        usages: MEMBER_USAGES,
    };
    let mut requests = Vec::new();
    if let CertificateSource::CertManager { issuer } = &cluster.tls_sources.peer {
        requests.push(member(
            format!("{name}-peer"),
            naming::tls_peer_secret(name),
            issuer,
        ));
    }
    if let CertificateSource::CertManager { issuer } = &cluster.tls_sources.client {
        requests.push(member(
            format!("{name}-server"),
            naming::tls_server_secret(name),
            issuer,
        ));
        requests.push(Request {
            name: format!("{name}-client"),
            secret: naming::tls_client_secret(name),
            issuer: issuer.clone(),
            common_name: tls::CLIENT_COMMON_NAME.to_owned(),
            dns_names: Vec::new(),
            usages: CLIENT_USAGES,
        });
    }
    requests
}

fn api_resource() -> ApiResource {
    ApiResource {
        group: DEFAULT_GROUP.to_owned(),
        version: "v1".to_owned(),
        api_version: GROUP_VERSION.to_owned(),
        kind: "Certificate".to_owned(),
        plural: "certificates".to_owned(),
    }
}

/// The Certificate object for `request`.
pub fn certificate(cluster: &ValidatedCluster, request: &Request) -> Value {
    let mut labels = dkv_api::labels::cluster_labels(&cluster.name);
    labels.insert(dkv_api::labels::COMPONENT_KEY.to_owned(), "tls".to_owned());
    let issuer = &request.issuer;
    json!({
        "apiVersion": GROUP_VERSION,
        "kind": "Certificate",
        "metadata": {
            "name": request.name,
            "namespace": cluster.namespace,
            "labels": labels,
            "ownerReferences": [cluster.owner],
        },
        "spec": {
            "secretName": request.secret,
            "issuerRef": {
                "name": issuer.name,
                "kind": issuer.kind.as_deref().unwrap_or("Issuer"),
                "group": issuer.group.as_deref().unwrap_or(DEFAULT_GROUP),
            },
            "commonName": request.common_name,
            "dnsNames": request.dns_names,
            "usages": request.usages,
            // A new key with every renewal.
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            // The issued Secret carries the cluster's labels too.
            "secretTemplate": {"labels": labels},
        },
    })
}

/// Creates or updates the cluster's Certificates (a write only when one
/// differs from what dkv wants).
pub async fn ensure(client: &Client, cluster: &ValidatedCluster) -> Result<()> {
    let wanted = requests(cluster);
    if wanted.is_empty() {
        return Ok(());
    }
    if !served(client).await? {
        return Err(Error::CertManagerMissing { api: GROUP_VERSION });
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &cluster.namespace, &api_resource());
    for request in &wanted {
        let desired = certificate(cluster, request);
        let live = api
            .get_opt(&request.name)
            .await
            .map_err(|source| Error::Read {
                kind: "Certificate",
                name: request.name.clone(),
                source,
            })?;
        let current = live
            .as_ref()
            .map(|c| json!({"metadata": {"labels": c.labels(), "ownerReferences": c.owner_references()}, "spec": c.data.get("spec")}));
        let subset_of_live = current.as_ref().is_some_and(|live| {
            is_subset(&desired["spec"], &live["spec"])
                && is_subset(&desired["metadata"]["labels"], &live["metadata"]["labels"])
                && is_subset(
                    &desired["metadata"]["ownerReferences"],
                    &live["metadata"]["ownerReferences"],
                )
        });
        if subset_of_live {
            continue;
        }
        tracing::info!(certificate = %request.name, secret = %request.secret, "requesting certificate from cert-manager");
        api.patch(
            &request.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: "Certificate".to_owned(),
            name: request.name.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Whether the API server serves cert-manager's Certificates.
async fn served(client: &Client) -> Result<bool> {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == "certificates")),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(source) => Err(Error::Read {
            kind: "APIResourceList",
            name: GROUP_VERSION.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::{TlsMode, TlsSpec, TlsTransport};

    fn cluster_with(spec: TlsSpec) -> ValidatedCluster {
        crate::cluster::validate::validated_for_tests(
            json!({"size": 3, "image": "quay.io/coreos/etcd:v3.5.16", "tls": spec}),
        )
    }

    fn cert_manager(issuer: &str) -> TlsTransport {
        TlsTransport {
            mode: TlsMode::CertManager,
            issuer_ref: Some(IssuerReference {
                name: issuer.to_owned(),
                kind: Some("ClusterIssuer".to_owned()),
                group: None,
            }),
            ..TlsTransport::default()
        }
    }

    #[test]
    fn each_cert_manager_transport_asks_for_its_certificates() {
        let both = cluster_with(TlsSpec {
            peer: cert_manager("internal"),
            client: cert_manager("public"),
        });
        let wanted = requests(&both);
        let names: Vec<(&str, &str)> = wanted
            .iter()
            .map(|r| (r.name.as_str(), r.secret.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("orders-peer", "orders-tls-peer"),
                ("orders-server", "orders-tls-server"),
                ("orders-client", "orders-tls-client"),
            ]
        );
        let peer = certificate(&both, &wanted[0]);
        assert_eq!(peer["spec"]["issuerRef"]["name"], "internal");
        assert_eq!(peer["spec"]["issuerRef"]["kind"], "ClusterIssuer");
        assert_eq!(peer["spec"]["issuerRef"]["group"], "cert-manager.io");
        let dns = peer["spec"]["dnsNames"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(dns.contains(&json!("*.orders-peer.shop.svc")), "{dns:?}");
        assert!(
            peer["spec"]["usages"]
                .as_array()
                .is_some_and(|u| u.contains(&json!("client auth")))
        );
        let client = certificate(&both, &wanted[2]);
        assert_eq!(client["spec"]["issuerRef"]["name"], "public");
        assert_eq!(client["spec"]["usages"], json!(CLIENT_USAGES));
        assert_eq!(client["metadata"]["ownerReferences"][0]["name"], "orders");

        let peer_only = cluster_with(TlsSpec {
            peer: cert_manager("internal"),
            client: TlsTransport::default(),
        });
        assert_eq!(requests(&peer_only).len(), 1);
        assert!(requests(&cluster_with(TlsSpec::default())).is_empty());
    }
}
