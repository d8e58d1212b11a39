//! When a controller tries again after failures: one exponential backoff
//! (backon's) for the cluster controller and the backup retention
//! controller alike.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Delay before retrying after `failures` consecutive transient failures:
/// exponential from 1 s, capped at 5 min, with up to 20% jitter so that many
/// clusters failing together (an API outage) do not retry in lockstep.
/// `jitter_fraction` (in `[0, 1]`) picks where in that 20% the delay falls:
/// the caller draws it, so that the delay itself is a pure function.
pub fn backoff_delay(failures: u32, jitter_fraction: f64) -> Duration {
    const CAP: Duration = Duration::from_secs(300);
    // The cap is reached by the 10th failure: counting further changes
    // nothing.
    let nth = usize::try_from(failures.saturating_sub(1).min(16)).unwrap_or(16);
    let base = ExponentialBuilder::new()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(CAP)
        .without_max_times()
        .build()
        .nth(nth)
        .unwrap_or(CAP);
    base.mul_f64(1.0 + jitter_fraction.clamp(0.0, 1.0) * 0.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_and_is_capped() {
        let no_jitter: Vec<u64> = (1..=11).map(|n| backoff_delay(n, 0.0).as_secs()).collect();
        assert_eq!(no_jitter, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff_delay(3, 1.0), Duration::from_millis(4_800));
        assert_eq!(backoff_delay(u32::MAX, 0.5), Duration::from_millis(330_000));
    }
}
