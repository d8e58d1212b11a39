//! The operator's secure metrics endpoint on kube-local: `/metrics` over
//! HTTPS with the mounted certificate (and its replacement picked up), only
//! for scrapers whose ServiceAccount token the API server authenticates and
//! authorizes through RBAC, probes on their own plaintext port.

use dkv_test_support as support;

use support::http::plain_get;
use support::metrics::{
    get_over_tls, grant_metrics_reader, https_get_unverified, service_account_token,
};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dkv_operator::pki::{Authority, Leaf, Usage};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use kube_local::api_traffic::Verb;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

const NS: &str = "monitoring";

/// An address on 127.0.0.1 nothing listens on.
fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], support::free_port()))
}

/// A CA and a serving certificate for 127.0.0.1, written as `dir`/tls.{crt,key}.
fn write_certificate(dir: &Path, ca_name: &str) -> String {
    let ca = Authority::generate(ca_name, Duration::from_secs(3600)).unwrap();
    let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
    let leaf = ca
        .issue(&Leaf {
            common_name: "dkv-operator-metrics",
            hosts: &hosts,
            usage: Usage::Server,
            validity: Duration::from_secs(3600),
        })
        .unwrap();
    // Written aside, then renamed, as a Secret volume update swaps files.
    for (name, pem) in [("tls.key", &leaf.key_pem), ("tls.crt", &leaf.cert_pem)] {
        let staged = dir.join(format!(".{name}"));
        std::fs::write(&staged, pem).unwrap();
        std::fs::rename(&staged, dir.join(name)).unwrap();
    }
    ca.cert_pem
}

/// GET over TLS, trusting only `ca_pem`; Err when the handshake fails.
async fn https_get(
    addr: SocketAddr,
    ca_pem: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    get_over_tls(config, addr, path, token).await
}

#[tokio::test]
async fn secure_metrics_need_an_authorized_token_and_serve_the_mounted_certificate() {
    let env = support::environment(false).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let prometheus = service_account_token(&client, NS, "prometheus").await;
    let stranger = service_account_token(&client, NS, "stranger").await;
    grant_metrics_reader(&client, NS).await;

    let certs = tempfile::tempdir().unwrap();
    let ca = write_certificate(certs.path(), "test-metrics-ca");
    let (metrics_addr, health_addr) = (free_addr(), free_addr());
    let mut args = support::operator_args(false);
    args.endpoints.metrics_addr = metrics_addr;
    args.endpoints.metrics_secure = true;
    args.endpoints.metrics_cert_dir = Some(certs.path().to_path_buf());
    args.endpoints.health_addr = Some(health_addr);
    let operator = support::RunningOperator::start_with(client.clone(), args);

    // Probes: plaintext, no credentials, on their own port.
    let mut ready = None;
    for _ in 0..100 {
        ready = plain_get(health_addr, "/readyz").await;
        if matches!(ready, Some((200, _))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready.map(|r| r.0), Some(200));
    assert_eq!(
        plain_get(health_addr, "/healthz").await.map(|r| r.0),
        Some(200)
    );
    assert_eq!(
        plain_get(health_addr, "/metrics").await.map(|r| r.0),
        Some(404)
    );

    // Plain HTTP to the metrics port gets no HTTP answer at all.
    assert_eq!(plain_get(metrics_addr, "/metrics").await, None);

    // HTTPS, verified against the CA of the mounted certificate.
    let (code, _) = https_get(metrics_addr, &ca, "/metrics", None)
        .await
        .unwrap();
    assert_eq!(code, 401, "no token");
    let (code, _) = https_get(metrics_addr, &ca, "/metrics", Some("not-a-token"))
        .await
        .unwrap();
    assert_eq!(code, 401, "a token the API server does not know");
    let (code, _) = https_get(metrics_addr, &ca, "/metrics", Some(&stranger))
        .await
        .unwrap();
    assert_eq!(code, 403, "a valid token without dkv-metrics-reader");
    let before = env.requests();
    let (code, body) = https_get(metrics_addr, &ca, "/metrics", Some(&prometheus))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("dkv_leader"), "{body}");
    // The probes are not on the metrics port's secure side either way.
    let (code, _) = https_get(metrics_addr, &ca, "/healthz", None)
        .await
        .unwrap();
    assert_eq!(code, 404);

    // A second scrape with the same token is decided from the cache.
    let (code, _) = https_get(metrics_addr, &ca, "/metrics", Some(&prometheus))
        .await
        .unwrap();
    assert_eq!(code, 200);
    let spent = env.requests().since(&before);
    assert_eq!(spent.count(Verb::Create, "tokenreviews"), 1);
    assert_eq!(spent.count(Verb::Create, "subjectaccessreviews"), 1);

    // A replaced certificate is served without a restart; the old CA no
    // longer verifies it.
    let new_ca = write_certificate(certs.path(), "test-metrics-ca-2");
    let mut served = Err(String::new());
    for _ in 0..40 {
        served = https_get(metrics_addr, &new_ca, "/metrics", Some(&prometheus)).await;
        if served.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(served.map(|r| r.0), Ok(200));
    assert!(
        https_get(metrics_addr, &ca, "/metrics", Some(&prometheus))
            .await
            .is_err()
    );

    operator.stop().await;
}

#[tokio::test]
async fn secure_metrics_without_a_certificate_serve_a_generated_one_and_keep_probes_beside() {
    let env = support::environment(false).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let prometheus = service_account_token(&client, NS, "prometheus").await;
    grant_metrics_reader(&client, NS).await;
    let metrics_addr = free_addr();
    let mut args = support::operator_args(false);
    args.endpoints.metrics_addr = metrics_addr;
    args.endpoints.metrics_secure = true;
    let operator = support::RunningOperator::start_with(client.clone(), args);

    // Trusting nothing but what the server presents: the handshake works
    // with a verifier that accepts it, and a CA-checking client refuses it.
    let mut answer = None;
    for _ in 0..100 {
        answer = https_get_unverified(metrics_addr, "/readyz", None)
            .await
            .ok();
        if matches!(answer, Some((200, _))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        answer.map(|a| a.0),
        Some(200),
        "probes stay next to /metrics, unauthenticated"
    );
    let (code, body) = https_get_unverified(metrics_addr, "/metrics", Some(&prometheus))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("dkv_"), "{body}");
    assert_eq!(
        https_get_unverified(metrics_addr, "/metrics", None)
            .await
            .unwrap()
            .0,
        401
    );
    let unrelated = Authority::generate("unrelated", Duration::from_secs(3600)).unwrap();
    assert!(
        https_get(metrics_addr, &unrelated.cert_pem, "/metrics", None)
            .await
            .is_err()
    );
    operator.stop().await;
}

/// A manifest of `deploy/rbac`, created in kube-local.
async fn create_shipped<K>(client: &Client, file: &str)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let path = support::repo_root().join("deploy/rbac").join(file);
    let object: K = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_shipped_rbac_lets_the_operator_review_scrapers_and_nothing_more() {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;

    let env = support::environment(false).await;
    let client = env.client();
    create_shipped::<ClusterRole>(&client, "metrics_auth_role.yaml").await;
    create_shipped::<ClusterRoleBinding>(&client, "metrics_auth_role_binding.yaml").await;
    let may = |group: &str, resource: &str, verb: &str| {
        let client = client.clone();
        let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({"spec": {
            "user": "system:serviceaccount:dkv-system:dkv-operator",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:dkv-system", "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb},
        }}))
        .unwrap();
        async move {
            Api::<SubjectAccessReview>::all(client)
                .create(&PostParams::default(), &review)
                .await
                .unwrap()
                .status
                .unwrap()
                .allowed
        }
    };
    assert!(may("authentication.k8s.io", "tokenreviews", "create").await);
    assert!(may("authorization.k8s.io", "subjectaccessreviews", "create").await);
    assert!(!may("authorization.k8s.io", "subjectaccessreviews", "list").await);
    assert!(!may("", "secrets", "get").await);
}

#[tokio::test]
async fn a_missing_certificate_stops_the_operator_at_start() {
    let env = support::environment(false).await;
    let empty = tempfile::tempdir().unwrap();
    let mut args = support::operator_args(false);
    args.endpoints.metrics_secure = true;
    args.endpoints.metrics_cert_dir = Some(empty.path().to_path_buf());
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        dkv_operator::operator::run_with(env.client(), args, stop_rx),
    )
    .await
    .expect("the operator gives up at once");
    let err = format!("{:#}", result.unwrap_err());
    assert!(err.contains("tls.crt"), "{err}");
}
