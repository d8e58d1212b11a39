//! What happens to a container after a run: whether the restart policy runs it again, and how long it waits first
//! (CrashLoopBackOff after exits, ImagePullBackOff and friends when it could not start).

use std::time::Duration;

/// A container run of at least this long (strictly longer) resets CrashLoopBackOff, as upstream's 10 minutes.
pub(super) const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);

/// Whether a container that exited with `code` runs again under the pod's restart `policy`. Sidecars (init
/// containers with their own `restartPolicy: Always`) always do; under Never nothing does; init containers and
/// OnFailure containers do when they failed; Always containers (and any unknown policy) always do.
pub(super) fn restarts(policy: &str, init: bool, sidecar: bool, code: i32) -> bool {
    match (init, policy) {
        _ if sidecar => true,
        (_, "Never") => false,
        (true, _) | (false, "OnFailure") => code != 0,
        _ => true,
    }
}

/// Whether an init container that is done (not restarted) with exit `code` fails the pod instead of letting the next
/// one start. Only a failure under restartPolicy Never gets here: the other policies restart a failed init container.
pub(super) fn init_exit_fails_pod(code: i32) -> bool {
    code != 0
}

/// The waiting reason while a container that could not start (`reason`, such as ErrImagePull or
/// CreateContainerConfigError) waits for its next attempt.
pub(super) fn not_started_backoff_reason(reason: &str) -> &'static str {
    if reason == "ErrImagePull" {
        "ImagePullBackOff"
    } else {
        "CrashLoopBackOff"
    }
}

/// The delays between restarts of a container that exits (CrashLoopBackOff): the first restart is immediate, then
/// `initial`, doubling up to `max`; a run longer than [`BACKOFF_RESET_AFTER`] starts the sequence over.
pub(super) struct CrashLoopBackoff {
    delay: Duration,
    initial: Duration,
    max: Duration,
}

impl CrashLoopBackoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        CrashLoopBackoff {
            delay: Duration::ZERO,
            initial,
            max,
        }
    }

    /// The wait before restarting a container whose run lasted `ran` (zero: restart at once), and the step to the
    /// next one.
    pub(super) fn next(&mut self, ran: Duration) -> Duration {
        if ran > BACKOFF_RESET_AFTER {
            self.delay = Duration::ZERO;
        }
        let wait = self.delay;
        self.delay = if self.delay.is_zero() {
            self.initial
        } else {
            (self.delay * 2).min(self.max)
        };
        wait
    }
}

/// The delays between attempts to start a container that could not start (an image that cannot be pulled, a
/// missing ConfigMap): `initial`, doubling up to `max`, never reset.
pub(super) struct StartBackoff {
    delay: Duration,
    max: Duration,
}

impl StartBackoff {
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        StartBackoff {
            delay: initial,
            max,
        }
    }

    /// The wait before the next attempt, and the step to the one after.
    pub(super) fn next(&mut self) -> Duration {
        let wait = self.delay;
        self.delay = (self.delay * 2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn always_restarts_every_exit() {
        for code in [0, 1, 2, 137, 143] {
            assert!(restarts("Always", false, false, code), "exit {code}");
        }
    }

    #[test]
    fn on_failure_restarts_only_failures() {
        assert!(!restarts("OnFailure", false, false, 0));
        for code in [1, 2, 137, 143] {
            assert!(restarts("OnFailure", false, false, code), "exit {code}");
        }
    }

    #[test]
    fn never_restarts_nothing() {
        for code in [0, 1, 137] {
            assert!(!restarts("Never", false, false, code), "exit {code}");
        }
    }

    #[test]
    fn an_unknown_policy_restarts_like_always() {
        assert!(restarts("Sometimes", false, false, 0));
        assert!(restarts("Sometimes", false, false, 1));
    }

    #[test]
    fn init_containers_restart_on_failure_unless_never() {
        for policy in ["Always", "OnFailure"] {
            assert!(
                !restarts(policy, true, false, 0),
                "{policy}: success is done"
            );
            assert!(
                restarts(policy, true, false, 1),
                "{policy}: failure restarts"
            );
            assert!(
                restarts(policy, true, false, 137),
                "{policy}: a kill restarts"
            );
        }
        assert!(!restarts("Never", true, false, 0));
        assert!(!restarts("Never", true, false, 1));
    }

    #[test]
    fn sidecars_restart_under_every_policy() {
        for policy in ["Always", "OnFailure", "Never"] {
            for code in [0, 1] {
                assert!(restarts(policy, true, true, code), "{policy} exit {code}");
            }
        }
    }

    /// Init containers in spec order, each run until it is done under the decisions above, as the pod's lifecycle
    /// runs them: the names of the runs, and whether the pod failed.
    fn run_inits(policy: &str, exits: &[(&str, &[i32])]) -> (Vec<String>, bool) {
        let mut runs = Vec::new();
        for (name, codes) in exits {
            let mut codes = codes.iter();
            loop {
                let code = *codes.next().expect("an exit per run");
                runs.push(format!("{name}:{code}"));
                if restarts(policy, true, false, code) {
                    continue;
                }
                if init_exit_fails_pod(code) {
                    return (runs, true);
                }
                break;
            }
        }
        (runs, false)
    }

    #[test]
    fn init_containers_run_in_order_until_each_succeeds() {
        for policy in ["Always", "OnFailure"] {
            let (runs, failed) = run_inits(policy, &[("a", &[1, 2, 0]), ("b", &[0])]);
            assert_eq!(runs, ["a:1", "a:2", "a:0", "b:0"], "{policy}");
            assert!(!failed, "{policy}");
        }
        let (runs, failed) = run_inits("Never", &[("a", &[0]), ("b", &[0])]);
        assert_eq!(runs, ["a:0", "b:0"]);
        assert!(!failed);
    }

    #[test]
    fn a_failing_init_container_fails_the_pod_only_under_never() {
        let (runs, failed) = run_inits("Never", &[("a", &[0]), ("b", &[3]), ("c", &[0])]);
        assert_eq!(runs, ["a:0", "b:3"], "c never starts");
        assert!(failed);
        assert!(!init_exit_fails_pod(0));
        assert!(init_exit_fails_pod(1));
    }

    #[test]
    fn crash_loop_backoff_starts_immediate_then_doubles_from_initial() {
        let mut b = CrashLoopBackoff::new(secs(10), secs(300));
        let waits: Vec<Duration> = (0..8).map(|_| b.next(secs(1))).collect();
        let doubling: Vec<Duration> = [0, 10, 20, 40, 80, 160, 300, 300].map(secs).into();
        assert_eq!(waits, doubling);
    }

    #[test]
    fn crash_loop_backoff_caps_at_max() {
        let mut b = CrashLoopBackoff::new(secs(10), secs(300));
        for _ in 0..20 {
            b.next(Duration::ZERO);
        }
        assert_eq!(b.next(Duration::ZERO), secs(300));
        let mut small =
            CrashLoopBackoff::new(Duration::from_millis(100), Duration::from_millis(250));
        let waits: Vec<u128> = (0..5)
            .map(|_| small.next(Duration::ZERO).as_millis())
            .collect();
        assert_eq!(waits, [0, 100, 200, 250, 250]);
    }

    #[test]
    fn crash_loop_backoff_resets_after_a_run_longer_than_ten_minutes() {
        let mut b = CrashLoopBackoff::new(secs(10), secs(300));
        for _ in 0..4 {
            b.next(secs(1));
        }
        // Exactly ten minutes is not longer than ten minutes.
        assert_eq!(b.next(secs(600)), secs(80));
        assert_eq!(b.next(secs(601)), secs(0), "reset: restart at once");
        assert_eq!(b.next(secs(1)), secs(10), "and start over from initial");
        assert_eq!(b.next(secs(1)), secs(20));
    }

    #[test]
    fn crash_loop_backoff_with_initial_above_max_caps_from_the_doubling_on() {
        let mut b = CrashLoopBackoff::new(secs(10), secs(5));
        let waits: Vec<Duration> = (0..4).map(|_| b.next(secs(1))).collect();
        assert_eq!(waits, [secs(0), secs(10), secs(5), secs(5)]);
    }

    #[test]
    fn start_backoff_waits_initial_first_doubles_caps_and_never_resets() {
        let mut b = StartBackoff::new(secs(10), secs(300));
        let waits: Vec<Duration> = (0..8).map(|_| b.next()).collect();
        let doubling: Vec<Duration> = [10, 20, 40, 80, 160, 300, 300, 300].map(secs).into();
        assert_eq!(waits, doubling);
    }

    #[test]
    fn a_container_that_cannot_start_waits_in_the_matching_backoff() {
        assert_eq!(
            not_started_backoff_reason("ErrImagePull"),
            "ImagePullBackOff"
        );
        assert_eq!(
            not_started_backoff_reason("CreateContainerConfigError"),
            "CrashLoopBackOff"
        );
        assert_eq!(
            not_started_backoff_reason("RunContainerError"),
            "CrashLoopBackOff"
        );
    }
}
