//! How the API server reaches a node's kubelet for a pod's log, exec, attach and port-forward: over plain TCP when
//! the environment has no CA, otherwise over TLS, trusting the cluster CA for the kubelet's serving certificate and
//! presenting the API server's own client certificate (`kube-apiserver-kubelet-client`), as kube-apiserver's
//! `--kubelet-certificate-authority` and `--kubelet-client-certificate` do. The kubelet authorizes that user like
//! any other caller.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::api_error::ApiError;

/// The user of the API server's client certificate towards the kubelets.
pub const USER: &str = "kube-apiserver-kubelet-client";
/// Its group: allowed everything, as kubeadm's certificate for it was (before 1.29 split the group).
const GROUP: &str = "system:masters";

/// A connection to a kubelet, plain or TLS.
trait Connection: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Connection for T {}

/// Where the API server's kubelet connections get their TLS from: `None` for plain HTTP.
#[derive(Clone, Default)]
pub struct KubeletClient {
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl KubeletClient {
    /// Connections over TLS with the API server's kubelet-client certificate issued by `ca`.
    pub fn tls(ca: &crate::tls::CertificateAuthority) -> Result<Self, crate::tls::TlsError> {
        let certificate = ca.issue_client(USER, GROUP)?;
        Ok(KubeletClient {
            tls: Some(Arc::new(ca.client_config(&certificate)?)),
        })
    }

    /// An HTTP/1.1 connection to the kubelet at `address` (`ip:port`), ready for one request (upgrades allowed);
    /// the connection is driven in the background.
    pub async fn connect(&self, address: &str) -> Result<SendRequest<Empty<Bytes>>, ApiError> {
        let unreachable = |e: &dyn std::fmt::Display| {
            ApiError::internal(format!("error dialing the kubelet at {address}: {e}"))
        };
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| unreachable(&e))?;
        let stream: Box<dyn Connection> = match &self.tls {
            None => Box::new(tcp),
            Some(config) => {
                let host = address
                    .rsplit_once(':')
                    .map_or(address, |(host, _)| host)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let name = ServerName::try_from(host.to_owned()).map_err(|e| unreachable(&e))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| unreachable(&e))?;
                Box::new(tls)
            }
        };
        let (sender, connection) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "kubelet connection ended");
            }
        });
        Ok(sender)
    }
}
