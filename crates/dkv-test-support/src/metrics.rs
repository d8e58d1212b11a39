//! Scraping the operator's secure `/metrics` as a monitoring system does: a
//! ServiceAccount token bound to the shipped `dkv-metrics-reader` role, and
//! GETs over TLS.

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http::{parse_response, request};

/// A new ServiceAccount `namespace/name` and a 10-minute token for it.
pub async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    let api = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &sa).await.unwrap();
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.and_then(|s| s.token).expect("a token")
}

/// The shipped `dkv-metrics-reader` ClusterRole, bound to the ServiceAccount
/// `namespace/prometheus`.
pub async fn grant_metrics_reader(client: &Client, namespace: &str) {
    let path = crate::paths::repo_root().join("deploy/rbac/metrics_reader_role.yaml");
    let role: ClusterRole =
        serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Already there when deploy/ was applied.
    match Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("creating the ClusterRole dkv-metrics-reader: {e}"),
    }
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "prometheus-dkv-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dkv-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// GET `path` over TLS with `config`; Err when the handshake fails.
pub async fn get_over_tls(
    config: rustls::ClientConfig,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    tls.write_all(request(path, token).as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    // A server closing without close_notify is fine for us: the answer is read.
    let _ = tls.read_to_end(&mut raw).await;
    parse_response(&raw)
        .ok_or_else(|| format!("no HTTP answer: {:?}", String::from_utf8_lossy(&raw)))
}

/// GET over TLS accepting whatever certificate the server presents (as a
/// scraper configured with `insecure_skip_verify` for a self-signed endpoint).
pub async fn https_get_unverified(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    #[derive(Debug)]
    struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AcceptAny {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        .with_no_client_auth();
    get_over_tls(config, addr, path, token).await
}
