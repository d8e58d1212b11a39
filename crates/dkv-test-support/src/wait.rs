//! Waiting for something to become true, polling.

use std::time::{Duration, Instant};

/// Polls `check` every `every` until it returns `Some`, or fails with `what`
/// after `within`.
pub async fn eventually<T>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

/// Attempts `attempt` every `every` until it succeeds, or fails with `what`
/// and the last error after `within`.
pub async fn eventually_ok<T, E: std::fmt::Debug>(
    what: &str,
    within: Duration,
    every: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(value) => return value,
            Err(err) => assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}; last error: {err:?}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}
