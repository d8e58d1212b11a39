//! Clocks tests can move forward: the CronJob controller schedules by one, ServiceAccount tokens are issued and
//! checked against another.

use std::sync::Arc;

/// The system time plus an offset tests can move forward.
#[derive(Clone, Default)]
pub struct Clock {
    offset: Arc<std::sync::Mutex<jiff::SignedDuration>>,
    moved: Arc<tokio::sync::Notify>,
}

impl Clock {
    pub fn now(&self) -> jiff::Timestamp {
        let offset = *self.offset.lock().unwrap_or_else(|e| e.into_inner());
        jiff::Timestamp::now()
            .checked_add(offset)
            .unwrap_or_else(|_| jiff::Timestamp::now())
    }

    /// Moves the clock forward (its readers then see the time as later by `by`).
    pub fn advance(&self, by: std::time::Duration) {
        let by = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::ZERO);
        {
            let mut offset = self.offset.lock().unwrap_or_else(|e| e.into_inner());
            *offset = offset.saturating_add(by);
        }
        self.moved.notify_waiters();
    }

    pub async fn moved(&self) {
        self.moved.notified().await;
    }
}
