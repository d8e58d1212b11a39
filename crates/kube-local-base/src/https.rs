//! Serving an axum app over TLS, as the API server and each kubelet do: the client certificate a connection's
//! handshake verified, if any, is attached to every request of that connection as a [`ClientCertificate`].

use std::future::Future;
use std::sync::Arc;

use crate::identity::ClientCertificate;

/// Serves HTTPS connections on `listener` until `shutdown` completes. Streaming subresources take a connection over
/// after a 101 (exec, attach, port-forward), so upgrades are served.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    config: rustls::ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => return,
        };
        let Ok((tcp, _)) = accepted else { continue };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let certificate = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| ClientCertificate::from_der(leaf));
            let app = tower::ServiceExt::map_request(
                app,
                move |mut req: http::Request<hyper::body::Incoming>| {
                    if let Some(certificate) = &certificate {
                        req.extensions_mut().insert(certificate.clone());
                    }
                    req
                },
            );
            let service = hyper_util::service::TowerToHyperService::new(app);
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .with_upgrades();
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "TLS connection ended");
            }
        });
    }
}
