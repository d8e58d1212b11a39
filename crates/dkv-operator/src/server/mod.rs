//! The operator's HTTP endpoints: `/metrics`, `/healthz`, `/readyz`.
//!
//! Plain mode (the CLI's default, used by `dkv local up` and the tests):
//! all three in plaintext HTTP on `--metrics-addr`, readable by anyone who
//! reaches the port. Secure mode (`--metrics-secure`, what `deploy/` runs):
//! `/metrics` over HTTPS ([`certificate`]) and only for callers whose bearer
//! token the API server authenticates and authorizes ([`access`]).
//!
//! The probes never ask for credentials: the kubelet has none to give. With
//! `--health-addr` they move to a plaintext listener of their own (what
//! `deploy/` does, so the kubelet's plain `httpGet` works and the metrics
//! port serves metrics only); without it they stay on the metrics listener.

pub mod access;
pub mod certificate;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;
use access::{ScrapeVerdict, ScraperAccess, bearer_token};
use certificate::{ServingCertificate, ServingCertificateSource};

/// Where the endpoints listen and how `/metrics` is served (part of
/// `dkv operator`'s arguments).
#[derive(Debug, Clone, Args)]
pub struct EndpointArgs {
    /// Address of the /metrics endpoint (and of /healthz, /readyz unless
    /// --health-addr is given).
    #[arg(long, default_value = "0.0.0.0:8080", env = "DKV_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
    /// Serve /metrics over HTTPS, only to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows `get` on the URL
    /// /metrics (SubjectAccessReview; ClusterRole `dkv-metrics-reader`).
    /// Off by default: plain HTTP, readable by anyone who reaches the port.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "DKV_METRICS_SECURE")]
    pub metrics_secure: bool,
    /// Directory holding tls.crt and tls.key for the secure /metrics (re-read
    /// when they change); without it a self-signed certificate is generated
    /// at start.
    #[arg(long, value_name = "DIR", env = "DKV_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Serve /healthz and /readyz in plain HTTP on this address instead of
    /// next to /metrics (probes never need credentials).
    #[arg(long, env = "DKV_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
}

/// Health the probes report.
#[derive(Default)]
pub struct Health {
    /// Set once the process can serve: the API client works and either the
    /// controllers run or this replica stands by for the lease. A standby is
    /// ready too, or one replica of the Deployment would never be Ready.
    pub ready: AtomicBool,
}

#[derive(Clone)]
struct MetricsState {
    metrics: Arc<Metrics>,
    /// Who may scrape; None: anyone (plain mode).
    access: Option<Arc<ScraperAccess>>,
}

/// `/healthz` and `/readyz`.
pub fn health_router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(health)
}

/// `/metrics`, guarded by `access` when given.
pub fn metrics_router(metrics: Arc<Metrics>, access: Option<Arc<ScraperAccess>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .with_state(MetricsState { metrics, access })
}

/// Everything on one listener (plain mode).
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    metrics_router(metrics, None).merge(health_router(health))
}

async fn metrics_handler(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(access) = &state.access {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match access.check(bearer_token(authorization)).await {
            Ok(ScrapeVerdict::Allowed) => {}
            Ok(ScrapeVerdict::Unauthenticated) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "Unauthorized",
                )
                    .into_response();
            }
            Ok(ScrapeVerdict::Forbidden { user }) => {
                tracing::debug!(%user, "refused a metrics scrape");
                return (StatusCode::FORBIDDEN, "Forbidden").into_response();
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not decide a metrics scrape");
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Authorization check failed",
                )
                    .into_response();
            }
        }
    }
    match state.metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to encode metrics",
        )
            .into_response(),
    }
}

async fn ready_handler(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// How `/metrics` is served.
enum Mode {
    Plain,
    Secure(ServingCertificate),
}

/// The operator's bound HTTP listeners, ready to serve.
pub struct Endpoints {
    metrics: TcpListener,
    health: Option<TcpListener>,
    mode: Mode,
}

async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} endpoint to {addr}"))
}

impl Endpoints {
    /// Binds the listeners `args` ask for and loads the certificate, so a
    /// port conflict or an unusable certificate stops the operator at start.
    pub async fn bind(args: &EndpointArgs) -> anyhow::Result<Self> {
        let metrics = bind(args.metrics_addr, "metrics").await?;
        let health = match args.health_addr {
            Some(addr) => Some(bind(addr, "health").await?),
            None => None,
        };
        let mode = if !args.metrics_secure {
            Mode::Plain
        } else if let Some(dir) = &args.metrics_cert_dir {
            Mode::Secure(ServingCertificateSource::Directory(dir.clone()).load()?)
        } else {
            let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
            match args.metrics_addr.ip() {
                ip if ip.is_unspecified() || ip == IpAddr::V4(Ipv4Addr::LOCALHOST) => {}
                ip => hosts.push(ip.to_string()),
            }
            Mode::Secure(ServingCertificateSource::SelfSigned { hosts }.load()?)
        };
        Ok(Self {
            metrics,
            health,
            mode,
        })
    }

    /// Serves until `stop` turns true.
    pub async fn serve(
        self,
        client: Client,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        let metrics_addr = self
            .metrics
            .local_addr()
            .context("reading the metrics endpoint's address")?;
        let health_server = match self.health {
            Some(listener) => {
                tracing::info!(addr = %listener.local_addr().context("reading the health endpoint's address")?, "serving /healthz, /readyz");
                let app = health_router(health.clone());
                let stop = stop.clone();
                Some(tokio::spawn(async move {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(stopped(stop))
                        .await
                }))
            }
            None => None,
        };
        // Probes stay next to /metrics unless they have their own listener.
        let with_probes = |app: Router| match health_server {
            Some(_) => app,
            None => app.merge(health_router(health.clone())),
        };
        match self.mode {
            Mode::Plain => {
                tracing::info!(addr = %metrics_addr, "serving /metrics over plain HTTP");
                axum::serve(self.metrics, with_probes(metrics_router(metrics, None)))
                    .with_graceful_shutdown(stopped(stop))
                    .await
                    .context("serving /metrics")?;
            }
            Mode::Secure(certificate) => {
                certificate.watch(stop.clone());
                let tls = crate::tls_serving::server_config(certificate.resolver.clone())
                    .context("configuring TLS for /metrics")?;
                let access = Arc::new(ScraperAccess::new(client));
                tracing::info!(addr = %metrics_addr, "serving /metrics over HTTPS to authorized scrapers");
                crate::tls_serving::serve(
                    self.metrics,
                    with_probes(metrics_router(metrics, Some(access))),
                    tls,
                    stop,
                )
                .await;
            }
        }
        if let Some(server) = health_server {
            server
                .await
                .context("the health endpoint task panicked")?
                .context("serving /healthz, /readyz")?;
        }
        Ok(())
    }
}

/// Resolves once `rx` holds `true`.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap_or_default())
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn probes_and_metrics() {
        let metrics = Arc::new(Metrics::new());
        let health = Arc::new(Health::default());
        let router = router(metrics.clone(), health.clone());
        assert_eq!(get(router.clone(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(router.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.ready.store(true, Ordering::Relaxed);
        assert_eq!(get(router.clone(), "/readyz").await.0, StatusCode::OK);
        metrics.set_leader(true);
        metrics.observe_reconcile("success", std::time::Duration::from_millis(2));
        let (status, body) = get(router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("dkv_leader 1"), "{body}");
        assert!(
            body.contains("# TYPE dkv_reconcile_duration_seconds histogram"),
            "{body}"
        );
    }
}
