//! Calling webhooks over HTTPS: `url` or `service` client configs, `caBundle` trust, timeouts.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use crate::meta;
use crate::registry::StorageResource;
use crate::store::{ObjectKey, Store};

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("invalid webhook client config: {0}")]
    Config(String),
    #[error("failed to call webhook: {0}")]
    Transport(String),
    #[error("failed to call webhook: context deadline exceeded")]
    Timeout,
    #[error("received invalid webhook response: {0}")]
    Response(String),
}

/// Where to send a request and which name the server certificate must carry.
struct Target {
    uri: String,
    /// For service references: the endpoint address the service name resolves to.
    resolve: Option<SocketAddr>,
}

fn endpoint_for_service(store: &Store, svc: &Value) -> Result<Target, CallError> {
    let ns = svc.get("namespace").and_then(Value::as_str).unwrap_or("");
    let name = svc.get("name").and_then(Value::as_str).unwrap_or("");
    let port = svc.get("port").and_then(Value::as_i64).unwrap_or(443);
    let path = svc.get("path").and_then(Value::as_str).unwrap_or("");
    let key = |resource: &str| ObjectKey {
        storage: StorageResource {
            group: String::new(),
            resource: resource.into(),
        },
        namespace: ns.into(),
        name: name.into(),
    };
    let service = store
        .get(&key("services"))
        .ok_or_else(|| CallError::Transport(format!("service \"{ns}/{name}\" not found")))?;
    let service_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("port").and_then(Value::as_i64) == Some(port))
        })
        .ok_or_else(|| {
            CallError::Transport(format!("service \"{ns}/{name}\" has no port {port}"))
        })?;
    let port_name = service_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let endpoints = store
        .get(&key("endpoints"))
        .ok_or_else(|| CallError::Transport(format!("no endpoints for service \"{ns}/{name}\"")))?;
    let subset = endpoints.pointer("/subsets/0").ok_or_else(|| {
        CallError::Transport(format!(
            "no endpoints available for service \"{ns}/{name}\""
        ))
    })?;
    let ip = subset
        .pointer("/addresses/0/ip")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            CallError::Transport(format!(
                "no endpoints available for service \"{ns}/{name}\""
            ))
        })?;
    let target_port = subset
        .get("ports")
        .and_then(Value::as_array)
        .and_then(|ps| {
            ps.iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
                .or_else(|| ps.first())
        })
        .and_then(|p| p.get("port").and_then(Value::as_i64))
        .unwrap_or(port);
    let addr: SocketAddr = format!("{ip}:{target_port}")
        .parse()
        .map_err(|e| CallError::Transport(format!("endpoint {ip}:{target_port}: {e}")))?;
    Ok(Target {
        uri: format!("https://{name}.{ns}.svc:{target_port}{path}"),
        resolve: Some(addr),
    })
}

fn tls_config(ca_bundle: Option<&str>) -> Result<rustls::ClientConfig, CallError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(b64) = ca_bundle.filter(|b| !b.is_empty()) {
        let pem = BASE64
            .decode(b64)
            .ok()
            .ok_or_else(|| CallError::Config("caBundle is not base64".into()))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| CallError::Config(format!("caBundle: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// POSTs `body` to the webhook described by `client_config` and returns the decoded JSON answer.
pub async fn call(
    store: &Store,
    client_config: &Value,
    body: &Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    let target = match (
        client_config.get("url").and_then(Value::as_str),
        client_config.get("service"),
    ) {
        (Some(url), _) => Target {
            uri: url.to_string(),
            resolve: None,
        },
        (None, Some(svc)) => endpoint_for_service(store, svc)?,
        (None, None) => {
            return Err(CallError::Config(
                "one of url or service is required".into(),
            ));
        }
    };
    let tls = tls_config(client_config.get("caBundle").and_then(Value::as_str))?;
    let resolve = target.resolve;
    let resolver = tower::service_fn(move |name: Name| async move {
        match resolve {
            Some(addr) => Ok::<_, std::io::Error>(vec![addr].into_iter()),
            None => {
                let host = name.as_str().to_string();
                let addrs: Vec<SocketAddr> =
                    tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
                Ok(addrs.into_iter())
            }
        }
    });
    let mut http = HttpConnector::new_with_resolver(resolver);
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let req = http::Request::post(&target.uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| CallError::Config(format!("{}: {e}", target.uri)))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| {
            CallError::Transport(format!("Post {:?}: {}", target.uri, error_chain(&e)))
        })?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CallError::Transport(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(CallError::Response(format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| CallError::Response(e.to_string()))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| CallError::Timeout)?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// Sorted for a stable call order (upstream orders configurations by name).
pub fn configurations(store: &Store, resource: &str) -> Vec<Arc<Value>> {
    let storage = StorageResource {
        group: "admissionregistration.k8s.io".into(),
        resource: resource.into(),
    };
    let mut configs = store.list(&storage, None).objects;
    configs.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
    configs
}
