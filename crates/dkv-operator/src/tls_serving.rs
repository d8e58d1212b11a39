//! HTTPS serving shared by the webhook server and the secure metrics
//! endpoint: rustls on ring, a resolver that hands each new connection the
//! current certificate (so a renewed or reloaded one is used without a
//! restart), and the accept loop.

use std::sync::{Arc, PoisonError, RwLock};

use anyhow::Context as _;
use axum::Router;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A certificate chain and its key (PEM) as rustls serves them.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the PEM".to_owned());
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("the private key is not PEM: {e}"))?;
    let provider = CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    CertifiedKey::from_der(chain, key, &provider)
        .map_err(|e| format!("the key does not fit the certificate: {e}"))
}

/// Hands every new TLS connection the current certificate; replacing it does
/// not touch connections already established.
#[derive(Debug)]
pub struct ServingCertResolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ServingCertResolver {
    pub fn new(key: CertifiedKey) -> Self {
        Self {
            current: RwLock::new(Arc::new(key)),
        }
    }

    pub fn set(&self, key: CertifiedKey) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
    }
}

impl ResolvesServerCert for ServingCertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// A server configuration (TLS 1.2+, HTTP/1.1, no client certificates) that
/// asks `resolver` for its certificate.
pub fn server_config(resolver: Arc<ServingCertResolver>) -> anyhow::Result<rustls::ServerConfig> {
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("configuring TLS")?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tls)
}

/// Serves `app` over HTTPS on `listener` until `shutdown` turns true. A
/// client that does not speak TLS (plain HTTP) fails the handshake and is
/// disconnected without an answer.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: rustls::ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "accepting an HTTPS connection");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(err) => {
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service);
            if let Err(err) = connection.await {
                tracing::debug!(%peer, error = %err, "HTTPS connection ended");
            }
        });
    }
}
