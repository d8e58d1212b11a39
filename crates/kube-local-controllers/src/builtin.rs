//! Runs the built-in control loops (garbage collector, namespace lifecycle, `default` service accounts) whenever
//! storage changes.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Core;
use crate::{garbage_collector, namespace_lifecycle, service_accounts};

pub async fn run(core: Arc<Core>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut changes = core.store.subscribe();
    loop {
        // Settle bursts of writes into one pass; repeat while passes keep acting.
        for _ in 0..100 {
            let gc = garbage_collector::reconcile(&core).await;
            let ns = namespace_lifecycle::reconcile(&core).await;
            let sa = service_accounts::reconcile(&core).await;
            if !gc && !ns && !sa {
                break;
            }
        }
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ = shutdown.changed() => return,
        }
    }
}
