//! The operator's HTTP endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

/// Health the probes report.
#[derive(Default)]
pub struct Health {
    /// Set once the process can serve: the API client works and either the
    /// controllers run or this replica stands by for the lease. A standby is
    /// ready too, or one replica of the Deployment would never be Ready.
    pub ready: AtomicBool,
}

#[derive(Clone)]
struct ServerState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(ServerState { metrics, health })
}

async fn metrics_handler(State(state): State<ServerState>) -> impl IntoResponse {
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

async fn ready_handler(State(state): State<ServerState>) -> impl IntoResponse {
    if state.health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(shutdown)
        .await
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
