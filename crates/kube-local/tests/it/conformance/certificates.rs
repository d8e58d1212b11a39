//! certificates.k8s.io/v1 CertificateSigningRequests: the requester recorded, approval and denial through the real
//! `kubectl certificate`, and the `kubernetes.io/kube-apiserver-client` signer issuing a client certificate with the
//! server's CA that then authenticates its subject.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::common::{api_status, kubectl, stderr, stdout};

/// A private key (PEM) and a certificate request for `user` in `group`.
fn key_and_request(user: &str, group: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, group);
    let request = params.serialize_request(&key).unwrap().pem().unwrap();
    (key.serialize_pem(), request)
}

fn csr(name: &str, request: &str, usages: &[&str]) -> CertificateSigningRequest {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "request": BASE64.encode(request),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": usages,
            "expirationSeconds": 3600,
            "username": "someone-else",
        },
    }))
    .unwrap()
}

fn condition_row(table: &str, name: &str) -> String {
    table
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_approved_client_request_is_signed_and_its_certificate_authenticates() {
    let env = kube_local::Environment::builder()
        .authenticate(true)
        .build()
        .await
        .unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(env.client());
    let (key, request) = key_and_request("alice", "devs");
    let created = api
        .create(
            &PostParams::default(),
            &csr("alice", &request, &["client auth", "digital signature"]),
        )
        .await
        .unwrap();
    // The requester is whoever sent it, not what the body says.
    let spec = created.spec;
    assert_eq!(spec.username.as_deref(), Some("kube-local-admin"));
    assert!(
        spec.groups
            .unwrap_or_default()
            .contains(&"system:masters".to_string())
    );
    assert!(created.status.and_then(|s| s.certificate).is_none());
    let out = kubectl(&env, &["get", "csr"]).await;
    let row = condition_row(&stdout(&out), "alice");
    assert!(
        row.contains("kubernetes.io/kube-apiserver-client") && row.contains("kube-local-admin"),
        "{row}"
    );
    assert!(
        row.contains("60m") && row.trim_end().ends_with("Pending"),
        "{row}"
    );

    let out = kubectl(&env, &["certificate", "approve", "alice"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "certificatesigningrequest.certificates.k8s.io/alice approved"
    );
    let approved = api.get("alice").await.unwrap();
    let status = approved.status.unwrap();
    let condition = &status.conditions.unwrap()[0];
    assert_eq!(
        (condition.type_.as_str(), condition.status.as_str()),
        ("Approved", "True")
    );
    assert_eq!(condition.reason.as_deref(), Some("KubectlApprove"));
    let certificate = status
        .certificate
        .expect("the signer issued a certificate")
        .0;
    let out = kubectl(&env, &["get", "csr", "alice"]).await;
    assert!(
        condition_row(&stdout(&out), "alice")
            .trim_end()
            .ends_with("Approved,Issued"),
        "{}",
        stdout(&out)
    );

    // The certificate authenticates alice in group devs.
    let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    config.auth_info = kube::config::AuthInfo {
        client_certificate_data: Some(BASE64.encode(&certificate)),
        client_key_data: Some(BASE64.encode(&key).into()),
        ..Default::default()
    };
    let alice = kube::Client::try_from(config).unwrap();
    let review: SelfSubjectReview = serde_json::from_value(json!({})).unwrap();
    let answer = Api::<SelfSubjectReview>::all(alice)
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let user = answer.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("alice"));
    let groups = user.groups.unwrap_or_default();
    assert!(groups.contains(&"devs".to_string()), "{groups:?}");

    // The spec never changes once created; an issued certificate stays.
    let mut changed = api.get("alice").await.unwrap();
    changed.spec.usages = Some(vec!["server auth".into()]);
    let replaced = api
        .replace("alice", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(
        replaced.spec.usages,
        Some(vec!["client auth".into(), "digital signature".into()])
    );
    assert_eq!(
        replaced.status.unwrap().certificate,
        Some(ByteString(certificate))
    );
}

#[tokio::test]
async fn denied_and_invalid_requests_are_never_signed() {
    let env = kube_local::Environment::builder()
        .authenticate(true)
        .build()
        .await
        .unwrap();
    let api: Api<CertificateSigningRequest> = Api::all(env.client());
    let (_, request) = key_and_request("bob", "devs");
    api.create(
        &PostParams::default(),
        &csr("bob", &request, &["client auth"]),
    )
    .await
    .unwrap();
    let out = kubectl(&env, &["certificate", "deny", "bob"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let denied = api.get("bob").await.unwrap().status.unwrap();
    assert_eq!(denied.conditions.unwrap()[0].type_, "Denied");
    assert!(denied.certificate.is_none());
    let out = kubectl(&env, &["get", "csr", "bob"]).await;
    assert!(
        condition_row(&stdout(&out), "bob")
            .trim_end()
            .ends_with("Denied"),
        "{}",
        stdout(&out)
    );

    // A server certificate is not for this signer: approved, then Failed, never issued.
    api.create(
        &PostParams::default(),
        &csr("web", &request, &["server auth"]),
    )
    .await
    .unwrap();
    let out = kubectl(&env, &["certificate", "approve", "web"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let failed = api.get("web").await.unwrap().status.unwrap();
    let last = failed.conditions.unwrap().pop().unwrap();
    assert_eq!(
        (last.type_.as_str(), last.reason.as_deref()),
        ("Failed", Some("SignerValidationFailure"))
    );
    assert_eq!(
        last.message.as_deref(),
        Some("invalid usage for client certificate: server auth")
    );
    assert!(failed.certificate.is_none());

    // Not a certificate request at all: 422 on spec.request.
    let (code, reason, message) = api_status(
        api.create(
            &PostParams::default(),
            &csr("junk", "not a request", &["client auth"]),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(message.contains("spec.request"), "{message}");
}
