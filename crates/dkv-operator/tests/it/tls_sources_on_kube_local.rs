//! `spec.tls` with certificates dkv does not issue, end to end on kube-local
//! with real etcd: user-provided Secrets (`mode: Provided`) are checked
//! before any member uses them, serve clients, and are rolled out member by
//! member when the user replaces them; `mode: CertManager` reports a
//! missing cert-manager, then asks it for Certificates and runs on the
//! Secrets it writes.
//!
//! There is no cert-manager here: the second test installs its
//! `Certificate` CRD and plays its CA issuer (signs what each Certificate
//! asks for and writes the Secret), which is the whole contract dkv relies
//! on.

use dkv_test_support as support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use dkv_operator::pki::{Authority, Issued, Leaf, Usage};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::json;
use support::etcd_cluster::{
    condition_message, condition_reason, put_retrying, wait_for, wait_settled,
};
use support::tls::{Target, can_read, options};

const NS: &str = "payments";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";

fn authority(name: &str) -> Authority {
    Authority::generate(name, Duration::from_secs(24 * 3600)).unwrap()
}

fn issue(ca: &Authority, common_name: &str, hosts: &[String], usage: Usage) -> Issued {
    ca.issue(&Leaf {
        common_name,
        hosts,
        usage,
        validity: Duration::from_secs(24 * 3600),
    })
    .unwrap()
}

/// Every name a member of `cluster` is reached by, and the one its address
/// resolves back to: etcd checks a connecting peer's certificate against
/// that (on Kubernetes the member's `.svc.cluster.local` name; kube-local
/// runs every member on 127.0.0.1, which resolves back to `localhost`).
fn member_names(cluster: &str) -> Vec<String> {
    vec![
        format!("*.{cluster}-peer.{NS}.svc"),
        format!("*.{cluster}-peer.{NS}.svc.cluster.local"),
        format!("{cluster}-client.{NS}.svc"),
        "localhost".to_owned(),
    ]
}

fn tls_secret(name: &str, issued: &Issued, trusted: &Authority) -> Secret {
    let data = [
        ("tls.crt", &issued.cert_pem),
        ("tls.key", &issued.key_pem),
        ("ca.crt", &trusted.cert_pem),
    ];
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Secret::default()
    }
}

/// Creates or replaces a Secret.
async fn put_secret(client: &Client, secret: Secret) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let name = secret.name_any();
    match secrets.get_opt(&name).await.unwrap() {
        Some(old) => {
            let mut new = secret;
            new.metadata.resource_version = old.metadata.resource_version;
            secrets
                .replace(&name, &PostParams::default(), &new)
                .await
                .unwrap();
        }
        None => {
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .unwrap();
        }
    }
}

/// The message of the `Degraded=True` condition.
fn degraded_message(d: &DistributedKV) -> String {
    condition_message(d, "Degraded", Some("True"))
}

async fn no_statefulset(client: &Client, cluster: &str) -> bool {
    Api::<StatefulSet>::namespaced(client.clone(), NS)
        .get_opt(cluster)
        .await
        .unwrap()
        .is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn provided_certificates_are_checked_served_and_rolled_out_when_replaced() {
    const CLUSTER: &str = "ledger";
    let (_env, client, operator) = support::running_operator(NS).await;
    // One CA for the members among themselves, another for clients.
    let peer_ca = authority("ledger peers");
    let client_ca = authority("ledger clients");
    let names = member_names(CLUSTER);
    let serving = issue(&client_ca, CLUSTER, &names, Usage::ServerAndClient);
    put_secret(&client, tls_secret("ledger-serving", &serving, &client_ca)).await;
    let dkv_client = issue(&client_ca, "dkv", &[], Usage::Client);
    put_secret(
        &client,
        tls_secret("ledger-dkv-client", &dkv_client, &client_ca),
    )
    .await;
    // The peer certificate names another cluster's members: refused.
    let wrong = issue(
        &peer_ca,
        CLUSTER,
        &[format!("*.other-peer.{NS}.svc")],
        Usage::ServerAndClient,
    );
    put_secret(&client, tls_secret("ledger-peers", &wrong, &peer_ca)).await;

    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        IMAGE,
        json!({"tls": {
            "peer": {"mode": "Provided", "secretRef": {"name": "ledger-peers"}},
            "client": {"mode": "Provided", "secretRef": {"name": "ledger-serving"},
                       "clientSecretRef": {"name": "ledger-dkv-client"}}}}),
    )
    .await;
    wait_for(&dkvs, CLUSTER, "Degraded/TLSFailed", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("TLSFailed")
    })
    .await;
    let message = degraded_message(&dkvs.get(CLUSTER).await.unwrap());
    eprintln!("refused: {message}");
    for part in [
        "ledger-peers",
        "spec.tls.peer.secretRef",
        "as a server for ledger-0.ledger-peer.payments.svc",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    assert!(
        no_statefulset(&client, CLUSTER).await,
        "no member may start with a certificate its peers refuse"
    );

    // The right certificate: the cluster forms on it (looked at again
    // within 30 s).
    let peers = issue(&peer_ca, CLUSTER, &names, Usage::ServerAndClient);
    put_secret(&client, tls_secret("ledger-peers", &peers, &peer_ca)).await;
    let formed = wait_settled(&dkvs, CLUSTER, 3).await;
    eprintln!("formed {formed:?} after creation");
    let sts = Api::<StatefulSet>::namespaced(client.clone(), NS)
        .get(CLUSTER)
        .await
        .unwrap();
    let mounted: Vec<String> = sts
        .spec
        .template
        .spec
        .unwrap()
        .volumes
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    assert_eq!(mounted, ["ledger-peers", "ledger-serving"]);

    // An application with its own certificate from the client CA.
    let app = issue(&client_ca, "billing", &[], Usage::Client);
    put_secret(&client, tls_secret("billing-client", &app, &client_ca)).await;
    let billing = Target::with_client_secret(NS, CLUSTER, "billing-client");
    let mut etcd = billing.connect(&client).await;
    put_retrying(&mut etcd, "invoice", "paid").await;
    for endpoint in billing.endpoints(&client).await {
        let plaintext = endpoint.replacen("https://", "http://", 1);
        assert!(can_read(&plaintext, options(None)).await.is_err());
        // A certificate from the peers' CA is no client certificate here.
        let stranger = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&client_ca.cert_pem))
            .identity(etcd_client::Identity::from_pem(
                &peers.cert_pem,
                &peers.key_pem,
            ))
            .domain_name(billing.server_name());
        assert!(
            can_read(&endpoint, options(Some(stranger))).await.is_err(),
            "{endpoint} accepted a client certificate from the peers' CA"
        );
    }

    // The user replaces the serving certificate (a new key from the same
    // CA): members restart onto it one at a time, and no acknowledged
    // write is lost.
    let (before, _) = billing.serials(&client).await;
    let writer = billing.start_writer(&client);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let renewed = issue(&client_ca, CLUSTER, &names, Usage::ServerAndClient);
    put_secret(&client, tls_secret("ledger-serving", &renewed, &client_ca)).await;
    let began = Instant::now();
    loop {
        let (template, _) = billing.serials(&client).await;
        let cluster = dkvs.get(CLUSTER).await.unwrap();
        if template != before
            && billing.members_on_template(&client, 3).await
            && support::etcd_cluster::settled_at(&cluster, 3)
        {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(180),
            "members did not roll onto the new certificate: {:?}, status {:?}",
            billing.serials(&client).await,
            cluster.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "all members on the replaced certificate after {:?}",
        began.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.finish("the replacement").await;
    let mut etcd = billing.connect(&client).await;
    let value = etcd.get("invoice", None).await.unwrap();
    assert_eq!(value.kvs()[0].value_str().unwrap(), "paid");
    operator.stop().await;
}

fn certificate_resource() -> ApiResource {
    ApiResource {
        group: "cert-manager.io".to_owned(),
        version: "v1".to_owned(),
        api_version: "cert-manager.io/v1".to_owned(),
        kind: "Certificate".to_owned(),
        plural: "certificates".to_owned(),
    }
}

/// cert-manager's `Certificate` API, as far as dkv uses it.
async fn install_certificate_crd(client: &Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "certificates.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "names": {"kind": "Certificate", "listKind": "CertificateList",
                      "plural": "certificates", "singular": "certificate"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
            }]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
}

/// Plays cert-manager's CA issuer until `stop`: every Certificate whose
/// Secret is missing gets one, signed by `ca`, with what it asks for.
fn ca_issuer(
    client: Client,
    ca: Authority,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let certificates: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NS, &certificate_resource());
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
        let mut issued = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let list = certificates.list(&ListParams::default()).await;
            for certificate in list.map(|l| l.items).unwrap_or_default() {
                let spec = &certificate.data["spec"];
                let secret_name = spec["secretName"].as_str().unwrap_or_default().to_owned();
                if secret_name.is_empty() || secrets.get_opt(&secret_name).await.unwrap().is_some()
                {
                    continue;
                }
                let hosts: Vec<String> = spec["dnsNames"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
                let usages = spec["usages"].to_string();
                let usage = if usages.contains("server auth") {
                    Usage::ServerAndClient
                } else {
                    Usage::Client
                };
                let leaf = issue(
                    &ca,
                    spec["commonName"].as_str().unwrap_or("x"),
                    &hosts,
                    usage,
                );
                let mut secret = tls_secret(&secret_name, &leaf, &ca);
                secret.metadata.labels =
                    serde_json::from_value(spec["secretTemplate"]["labels"].clone()).ok();
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .unwrap();
                issued.push(format!(
                    "{} by {}/{}",
                    certificate.name_any(),
                    spec["issuerRef"]["kind"].as_str().unwrap_or_default(),
                    spec["issuerRef"]["name"].as_str().unwrap_or_default()
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        issued
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cert_manager_mode_reports_a_missing_cert_manager_then_runs_on_its_certificates() {
    const CLUSTER: &str = "payments";
    let (_env, client, operator) = support::running_operator(NS).await;
    // The documented example, as written (its namespace aside).
    let path = support::repo_root().join("examples/distributedkv-cert-manager.yaml");
    let mut example: DistributedKV =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    example.metadata.namespace = Some(NS.to_owned());
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    dkvs.create(&PostParams::default(), &example).await.unwrap();
    wait_for(&dkvs, CLUSTER, "Degraded/TLSFailed", |d| {
        condition_reason(d, "Degraded", "True").as_deref() == Some("TLSFailed")
    })
    .await;
    let message = degraded_message(&dkvs.get(CLUSTER).await.unwrap());
    eprintln!("without cert-manager: {message}");
    assert!(
        message.contains("cert-manager.io/v1") && message.contains("install cert-manager"),
        "{message}"
    );
    assert!(no_statefulset(&client, CLUSTER).await);

    // cert-manager arrives: dkv asks it for three Certificates (looked at
    // again within 30 s), runs on the Secrets it writes.
    install_certificate_crd(&client).await;
    // Until cert-manager issues them, the cluster says it waits for them.
    wait_for(&dkvs, CLUSTER, "Progressing/WaitingForCertificates", |d| {
        condition_reason(d, "Progressing", "True").as_deref() == Some("WaitingForCertificates")
            && condition_reason(d, "Degraded", "False").is_some()
    })
    .await;
    assert!(no_statefulset(&client, CLUSTER).await);
    let stop = Arc::new(AtomicBool::new(false));
    let ca = authority("internal-ca");
    let issuing = ca_issuer(client.clone(), ca.clone(), stop.clone());
    let formed = wait_settled(&dkvs, CLUSTER, 3).await;
    eprintln!("formed {formed:?} after creation");
    stop.store(true, Ordering::Relaxed);
    let mut issued = issuing.await.unwrap();
    issued.sort();
    assert_eq!(
        issued,
        [
            "payments-client by ClusterIssuer/internal-ca",
            "payments-peer by ClusterIssuer/internal-ca",
            "payments-server by ClusterIssuer/internal-ca",
        ]
    );
    let certificates: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &certificate_resource());
    for certificate in certificates.list(&ListParams::default()).await.unwrap() {
        let owners = certificate.owner_references();
        assert!(
            owners
                .iter()
                .any(|o| o.kind == "DistributedKV" && o.name == CLUSTER),
            "{} is owned by the cluster: {owners:?}",
            certificate.name_any()
        );
    }
    let payments = Target::new(NS, CLUSTER);
    assert!(payments.members_on_template(&client, 3).await);
    let mut etcd = payments.connect(&client).await;
    put_retrying(&mut etcd, "order-1", "shipped").await;
    for endpoint in payments.endpoints(&client).await {
        let plaintext = endpoint.replacen("https://", "http://", 1);
        assert!(can_read(&plaintext, options(None)).await.is_err());
    }
    let value = etcd.get("order-1", None).await.unwrap();
    assert_eq!(value.kvs()[0].value_str().unwrap(), "shipped");
    operator.stop().await;
}
