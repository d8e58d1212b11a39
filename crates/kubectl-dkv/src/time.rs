//! Times as people read them: ages (`5m`, `3h12m`, `2d`) and RFC 3339.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `duration` in its two largest units, as kubectl prints ages.
pub fn short(duration: SignedDuration) -> String {
    let seconds = duration.as_secs().max(0);
    let (days, hours, minutes) = (seconds / 86_400, seconds / 3_600 % 24, seconds / 60 % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, m) if seconds % 60 == 0 || m >= 10 => format!("{m}m"),
        (0, 0, m) => format!("{m}m{}s", seconds % 60),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) if d < 7 => format!("{d}d{h}h"),
        (d, _, _) => format!("{d}d"),
    }
}

/// How long ago `time` was, from `now`.
pub fn ago(time: &Time, now: Timestamp) -> String {
    format!("{} ago", short(now.duration_since(time.0)))
}

/// When `time` comes, from `now`: `in 3h`, or how long ago it was.
pub fn until(time: Timestamp, now: Timestamp) -> String {
    let left = time.duration_since(now);
    if left.is_negative() {
        format!("{} ago", short(left.abs()))
    } else {
        format!("in {}", short(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectls() {
        let s = |secs: i64| short(SignedDuration::from_secs(secs));
        assert_eq!(s(0), "0s");
        assert_eq!(s(42), "42s");
        assert_eq!(s(150), "2m30s");
        assert_eq!(s(600), "10m");
        assert_eq!(s(3_600), "1h");
        assert_eq!(s(3_600 + 12 * 60), "1h12m");
        assert_eq!(s(2 * 86_400), "2d");
        assert_eq!(s(2 * 86_400 + 5 * 3_600), "2d5h");
        assert_eq!(s(30 * 86_400 + 5 * 3_600), "30d");
        assert_eq!(s(-5), "0s");
    }

    #[test]
    fn until_says_which_side_of_now() {
        let now = Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let later = now + SignedDuration::from_secs(3 * 3_600);
        assert_eq!(until(later, now), "in 3h");
        assert_eq!(until(now - SignedDuration::from_secs(90), now), "1m30s ago");
    }
}
