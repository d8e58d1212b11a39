//! `spec.tls` end to end on kube-local with real etcd: a cluster whose peer
//! and client traffic is TLS with certificates from the cluster's own CA
//! forms, refuses plaintext and certificate-less clients, serves a client
//! holding the documented Secret, scales (members join over https peer
//! URLs), is backed up by an agent that presents the client certificate,
//! and upgrades from etcd 3.4 to 3.5 over TLS.

use dkv_test_support as support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::backups::backup_now;
use support::etcd_cluster::{annotate, patch_spec, wait_settled};
use support::tls::{Target, can_read, options};

const NS: &str = "vault";
const CLUSTER: &str = "secrets";

fn target() -> Target {
    Target::new(NS, CLUSTER)
}

async fn secret_text(client: &Client, name: &str, key: &str) -> String {
    support::tls::secret_text(client, NS, name, key).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_refuses_plaintext_and_serves_the_documented_client_secret() {
    a_tls_cluster_refuses_plaintext_and_serves_the_documented_client_secret_on(
        "registry.k8s.io/etcd:3.5.16-0",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_7_a_tls_cluster_refuses_plaintext_and_serves_the_documented_client_secret() {
    a_tls_cluster_refuses_plaintext_and_serves_the_documented_client_secret_on(
        "registry.k8s.io/etcd:3.7.3-0",
    )
    .await;
}

async fn a_tls_cluster_refuses_plaintext_and_serves_the_documented_client_secret_on(image: &str) {
    let setup = support::backups::with_object_store(NS).await;
    let client = setup.client.clone();
    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        image,
        json!({"tls": {},
                   "backup": setup.backup_spec("tls")}),
    )
    .await;
    let formed = wait_settled(&dkvs, CLUSTER, 3).await;
    eprintln!("3 TLS members settled {formed:?} after creation");

    // The documented Secret: a client certificate and the cluster's CA.
    let client_secret = format!("{CLUSTER}-tls-client");
    let ca = secret_text(&client, &client_secret, "ca.crt").await;
    let cert = secret_text(&client, &client_secret, "tls.crt").await;
    let key = secret_text(&client, &client_secret, "tls.key").await;
    let with_identity = || {
        etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&ca))
            .identity(etcd_client::Identity::from_pem(&cert, &key))
            .domain_name(format!("{CLUSTER}-client.{NS}.svc"))
    };
    let endpoints = target().endpoints(&client).await;
    assert_eq!(endpoints.len(), 3, "{endpoints:?}");
    for endpoint in &endpoints {
        let plaintext = endpoint.replacen("https://", "http://", 1);
        assert!(
            can_read(&plaintext, options(None)).await.is_err(),
            "{plaintext} answered a plaintext client"
        );
        let anonymous = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&ca))
            .domain_name(format!("{CLUSTER}-client.{NS}.svc"));
        assert!(
            can_read(endpoint, options(Some(anonymous))).await.is_err(),
            "{endpoint} answered a client without a certificate"
        );
        can_read(endpoint, options(Some(with_identity())))
            .await
            .unwrap_or_else(|e| panic!("{endpoint} refused the documented client: {e}"));
    }
    let mut etcd = etcd_client::Client::connect(&endpoints, Some(options(Some(with_identity()))))
        .await
        .unwrap();
    support::etcd_cluster::put_retrying(&mut etcd, "greeting", "over tls").await;
    let members = etcd.member_list().await.unwrap();
    for member in members.members() {
        assert!(
            member.peer_urls().iter().all(|u| u.starts_with("https://")),
            "{:?}",
            member.peer_urls()
        );
    }

    // Scaling adds members over https peer URLs.
    patch_spec(&dkvs, CLUSTER, json!({"size": 5})).await;
    let scaled = wait_settled(&dkvs, CLUSTER, 5).await;
    eprintln!("scaled 3 -> 5 in {scaled:?}");
    let mut etcd = etcd_client::Client::connect(
        target().endpoints(&client).await,
        Some(options(Some(with_identity()))),
    )
    .await
    .unwrap();
    let value = etcd.get("greeting", None).await.unwrap();
    assert_eq!(value.kvs()[0].value_str().unwrap(), "over tls");

    // A backup: the agent presents the client certificate.
    backup_now(&client, NS, CLUSTER, "over-tls").await;

    // No key material where users (and log collectors) look.
    let events = Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    let cluster = dkvs.get(CLUSTER).await.unwrap();
    let visible = format!(
        "{} {}",
        serde_json::to_string(&events.items).unwrap(),
        serde_json::to_string(&cluster.status).unwrap()
    );
    for secret in [&key, &cert] {
        let body = secret.lines().nth(1).unwrap();
        assert!(
            !visible.contains(body),
            "certificate material in Events or status"
        );
    }
    assert!(!visible.contains("PRIVATE KEY"));
    assert!(cluster.annotations().get("dkv.io/v1beta1-backup").is_none());
    setup.operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_an_existing_cluster_to_tls_is_refused() {
    let env = support::environment(false).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "plain",
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({}),
    )
    .await;
    let refused = dkvs
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tls": {}}})),
        )
        .await;
    match refused {
        Err(kube::Error::Api(status)) => assert!(
            status.code == 422 && status.message.contains("spec.tls is fixed at creation"),
            "{status:?}"
        ),
        other => panic!("switching a plaintext cluster to TLS was accepted: {other:?}"),
    }
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "secure",
            3,
            "registry.k8s.io/etcd:3.5.16-0",
            json!({"tls": {}}),
        ),
    )
    .await
    .unwrap();
    let refused = dkvs
        .patch(
            "secure",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tls": {"client": {"mode": "Disabled"}}}})),
        )
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422),
        "{refused:?}"
    );
}

/// The member certificate's expiry.
async fn member_not_after(client: &Client) -> String {
    Api::<Secret>::namespaced(client.clone(), NS)
        .get(&format!("{CLUSTER}-tls-member"))
        .await
        .unwrap()
        .annotations()["dkv.io/not-after"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ca_rotation_overlaps_both_cas_and_loses_no_write() {
    let (_env, client, operator) = support::running_operator(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"tls": {}}),
    )
    .await;
    wait_settled(&dkvs, CLUSTER, 3).await;
    let ca_secret = || async {
        Api::<Secret>::namespaced(client.clone(), NS)
            .get(&format!("{CLUSTER}-tls-ca"))
            .await
            .unwrap()
    };
    let first_ca = secret_text(&client, &format!("{CLUSTER}-tls-ca"), "ca.crt").await;

    let writer = target().start_writer(&client);
    tokio::time::sleep(Duration::from_secs(2)).await;
    // No rotation before it is asked for; once asked, the operator may
    // enter its first phase before the first poll below.
    let before = ca_secret().await;
    assert_eq!(before.annotations().get("dkv.io/ca-rotation"), None);
    annotate(&dkvs, CLUSTER, "dkv.io/rotate-ca", "first").await;
    let began = std::time::Instant::now();
    let mut phases: Vec<String> = vec!["-".to_owned()];
    loop {
        let secret = ca_secret().await;
        let phase = secret
            .annotations()
            .get("dkv.io/ca-rotation")
            .cloned()
            .unwrap_or_else(|| "-".to_owned());
        if phases.last() != Some(&phase) {
            eprintln!("{:?}: CA rotation phase {phase}", began.elapsed());
            phases.push(phase);
        }
        let done = secret
            .annotations()
            .get("dkv.io/ca-rotated-for")
            .map(String::as_str)
            == Some("first");
        let cluster = dkvs.get(CLUSTER).await.unwrap();
        if done
            && target().members_on_template(&client, 3).await
            && support::etcd_cluster::settled_at(&cluster, 3)
        {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(240),
            "rotation did not finish: phases {phases:?}, status {:?}",
            cluster.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("CA rotated in {:?}: {phases:?}", began.elapsed());
    assert_eq!(phases, ["-", "Trust", "Issue", "Finish", "-"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.finish("the CA rotation").await;

    // Only the new CA is trusted now, and the old one is gone.
    let new_ca = secret_text(&client, &format!("{CLUSTER}-tls-ca"), "ca.crt").await;
    assert_ne!(new_ca, first_ca);
    for secret in ["tls-member", "tls-client"] {
        let trusted = secret_text(&client, &format!("{CLUSTER}-{secret}"), "ca.crt").await;
        assert_eq!(trusted, new_ca, "{secret} trusts exactly the new CA");
    }
    assert!(!ca_secret().await.data.unwrap().contains_key("next-ca.key"));
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn certificates_are_renewed_before_expiry_one_member_at_a_time_without_losing_a_write() {
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    // Certificates valid for 150 s: renewed 100 s after issue, which leaves
    // 50 s to restart the members before the old ones expire.
    let mut args = support::operator_args(false);
    args.tls_certificate_validity_seconds = 150;
    let operator = support::RunningOperator::start_with(client.clone(), args);
    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"tls": {}}),
    )
    .await;
    wait_settled(&dkvs, CLUSTER, 3).await;
    let first = member_not_after(&client).await;
    assert!(
        target().members_on_template(&client, 3).await,
        "{:?}",
        target().serials(&client).await
    );

    let writer = target().start_writer(&client);
    let began = std::time::Instant::now();
    // Renewed (a new serial), and every member restarted onto it.
    let mut renewed_at = None;
    loop {
        let current = member_not_after(&client).await;
        if current != first && renewed_at.is_none() {
            renewed_at = Some(began.elapsed());
        }
        let cluster = dkvs.get(CLUSTER).await.unwrap();
        if current != first
            && target().members_on_template(&client, 3).await
            && support::etcd_cluster::settled_at(&cluster, 3)
        {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(240),
            "not renewed: {first} -> {current}, serials {:?}, status {:?}",
            target().serials(&client).await,
            cluster.status
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "member certificate renewed after {renewed_at:?}; all members on it after {:?}",
        began.elapsed()
    );
    // Keep writing a little on the new certificates, then check every
    // acknowledged write with a client holding the renewed certificate.
    tokio::time::sleep(Duration::from_secs(3)).await;
    writer.finish("the renewal").await;
    // The renewal is visible: an Event per restart, reason RenewingCertificates.
    let events = Api::<Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        events.items.iter().any(|e| e
            .message
            .as_deref()
            .is_some_and(|m| m.contains("RenewCertificate"))
            || e.reason.as_deref() == Some("RenewingCertificates")),
        "{:?}",
        events
            .items
            .iter()
            .map(|e| (e.reason.clone(), e.message.clone()))
            .collect::<Vec<_>>()
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tls_cluster_on_etcd_3_4_upgrades_to_3_5_without_losing_a_write() {
    let (_env, client, operator) = support::running_operator(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        "registry.k8s.io/etcd:3.4.23-0",
        json!({"tls": {}}),
    )
    .await;
    wait_settled(&dkvs, CLUSTER, 3).await;
    let writer = target().start_writer(&client);
    tokio::time::sleep(Duration::from_secs(2)).await;
    patch_spec(
        &dkvs,
        CLUSTER,
        json!({"image": "registry.k8s.io/etcd:3.5.16-0"}),
    )
    .await;
    let upgraded = support::etcd_cluster::wait_for(&dkvs, CLUSTER, "all members on 3.5.16", |d| {
        support::etcd_cluster::settled_at(d, 3)
            && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.16")
    })
    .await;
    eprintln!("TLS cluster upgraded 3.4.23 -> 3.5.16 in {upgraded:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    writer.finish("the upgrade").await;
    operator.stop().await;
}
