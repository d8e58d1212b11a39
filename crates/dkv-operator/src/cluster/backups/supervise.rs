//! How the operator's long-running backup tasks (continuous backup agents,
//! standby followers) keep going: a run that fails is started again after
//! a backoff, 1 s doubling to a limit, and a run that went well for longer
//! than the limit starts the backoff over.

use std::fmt::Display;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use jiff::Timestamp;
use tokio::sync::watch;

/// Runs `run` until it ends well or `stop` turns true, starting it again
/// after each failure, once `failed` (told the error and the delay) has
/// recorded it.
pub async fn supervise<E, Fut>(
    mut stop: watch::Receiver<bool>,
    max_delay: Duration,
    mut run: impl FnMut(watch::Receiver<bool>) -> Fut,
    failed: impl Fn(String, Duration),
) where
    E: Display,
    Fut: Future<Output = Result<(), E>>,
{
    let delays = || {
        ExponentialBuilder::new()
            .with_min_delay(Duration::from_secs(1))
            .with_max_delay(max_delay)
            .without_max_times()
            .build()
    };
    let mut backoff = delays();
    loop {
        if *stop.borrow() {
            return;
        }
        let started = Instant::now();
        match run(stop.clone()).await {
            Ok(()) => return,
            Err(err) => {
                if started.elapsed() > max_delay {
                    backoff = delays();
                }
                let delay = backoff.next().unwrap_or(max_delay);
                failed(err.to_string(), delay);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        }
    }
}

/// Records `message` as a report's failure, keeping since when it has
/// failed without a success in between.
pub fn record_failure(failing: &mut Option<(String, Timestamp)>, message: String) {
    let since = failing
        .as_ref()
        .map_or_else(Timestamp::now, |(_, since)| *since);
    *failing = Some((message, since));
}

/// Locks a task's shared report, whatever a panicking holder left.
pub fn lock<T>(report: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    report.lock().unwrap_or_else(|p| p.into_inner())
}
