//! etcd versions: parsing them from image tags and the upgrade rules between them.

use std::fmt;

/// A released etcd version, `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EtcdVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl EtcdVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `3.5.16`, `v3.5.16` and image-tag forms such as `3.5.16-0`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let version = Self {
            major: parts.next()?.parse().ok()?,
            minor: parts.next()?.parse().ok()?,
            patch: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(version)
    }

    /// The version an image tag names, if the tag is a version. Digests and
    /// floating tags (`latest`) name none.
    pub fn from_image(image: &str) -> Option<Self> {
        let without_digest = image.split('@').next()?;
        let last_segment = without_digest.rsplit('/').next()?;
        let (_, tag) = last_segment.rsplit_once(':')?;
        Self::parse(tag)
    }

    /// `major.minor`, the unit etcd's upgrade rules speak in.
    pub fn minor_line(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Oldest etcd dkv runs: learners (needed for safe scale-up) arrived in 3.4.
pub const MIN_SUPPORTED: EtcdVersion = EtcdVersion::new(3, 4, 0);
/// Newest minor line dkv knows how to run (and tests: 3.7.3, built from
/// etcd's Go modules).
pub const MAX_SUPPORTED_MINOR: (u32, u32) = (3, 7);

/// The oldest 3.5 release a cluster may upgrade to 3.6 from. etcd's 3.5 → 3.6
/// upgrade guide ("Update 3.5") asks for every member on 3.5.26 or later:
/// 3.5.24 through 3.5.26 fix upgrade blockers (earlier editions of the guide
/// asked for 3.5.20, against the "too many learner members" failure). The
/// guide has raised this over time: keep it in step.
pub const MIN_3_5_FOR_3_6: EtcdVersion = EtcdVersion::new(3, 5, 26);

/// Why a version change is not allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionChangeError {
    Downgrade {
        from: EtcdVersion,
        to: EtcdVersion,
    },
    SkipsMinor {
        from: EtcdVersion,
        to: EtcdVersion,
    },
    /// 3.5 → 3.6 from a 3.5 patch release older than [`MIN_3_5_FOR_3_6`].
    PatchTooOldFor36 {
        from: EtcdVersion,
        to: EtcdVersion,
    },
}

impl fmt::Display for VersionChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Downgrade { from, to } => write!(
                f,
                "etcd cannot be downgraded ({from} -> {to}); set the image back to {from} or newer"
            ),
            Self::SkipsMinor { from, to } => write!(
                f,
                "etcd upgrades move one minor version at a time ({from} -> {to} skips one); upgrade to {}.{}.x first",
                from.major,
                from.minor + 1
            ),
            Self::PatchTooOldFor36 { from, to } => write!(
                f,
                "etcd {to} can only be reached from {MIN_3_5_FOR_3_6} or a later 3.5 release (etcd's 3.5 to 3.6 upgrade guide; older 3.5 releases can fail the upgrade); upgrade from {from} to the newest 3.5 first"
            ),
        }
    }
}

/// Checks etcd's rule for a change of the running version: never down, at most
/// one minor line up, and into 3.6 only from a recent enough 3.5.
pub fn check_version_change(from: EtcdVersion, to: EtcdVersion) -> Result<(), VersionChangeError> {
    if to < from {
        return Err(VersionChangeError::Downgrade { from, to });
    }
    if to.major != from.major || to.minor > from.minor + 1 {
        return Err(VersionChangeError::SkipsMinor { from, to });
    }
    if from.minor_line() == (3, 5) && to.minor_line() == (3, 6) && from < MIN_3_5_FOR_3_6 {
        return Err(VersionChangeError::PatchTooOldFor36 { from, to });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_common_image_tags() {
        let v = |s| EtcdVersion::from_image(s);
        assert_eq!(
            v("registry.k8s.io/etcd:3.5.16-0"),
            Some(EtcdVersion::new(3, 5, 16))
        );
        assert_eq!(
            v("quay.io/coreos/etcd:v3.4.23"),
            Some(EtcdVersion::new(3, 4, 23))
        );
        assert_eq!(
            v("localhost:5000/etcd:3.6.1"),
            Some(EtcdVersion::new(3, 6, 1))
        );
        assert_eq!(v("localhost:5000/etcd"), None);
        assert_eq!(v("registry.k8s.io/etcd:latest"), None);
        assert_eq!(v("registry.k8s.io/etcd@sha256:abcd"), None);
    }

    #[test]
    fn upgrade_rules() {
        let v = EtcdVersion::new;
        assert!(check_version_change(v(3, 4, 23), v(3, 4, 30)).is_ok());
        assert!(check_version_change(v(3, 4, 23), v(3, 5, 16)).is_ok());
        assert_eq!(
            check_version_change(v(3, 4, 23), v(3, 6, 0)),
            Err(VersionChangeError::SkipsMinor {
                from: v(3, 4, 23),
                to: v(3, 6, 0)
            })
        );
        assert!(matches!(
            check_version_change(v(3, 5, 16), v(3, 5, 1)),
            Err(VersionChangeError::Downgrade { .. })
        ));
    }

    #[test]
    fn into_3_6_only_from_a_recent_3_5() {
        let v = EtcdVersion::new;
        assert_eq!(
            check_version_change(v(3, 5, 16), v(3, 6, 5)),
            Err(VersionChangeError::PatchTooOldFor36 {
                from: v(3, 5, 16),
                to: v(3, 6, 5)
            })
        );
        assert!(check_version_change(v(3, 5, 25), v(3, 6, 0)).is_err());
        assert!(check_version_change(v(3, 5, 26), v(3, 6, 0)).is_ok());
        assert!(check_version_change(v(3, 5, 30), v(3, 6, 5)).is_ok());
        // A patch upgrade within 3.5 first is how to get there.
        assert!(check_version_change(v(3, 5, 16), v(3, 5, 30)).is_ok());
        // From 3.6 on, any patch release moves one minor up.
        assert!(check_version_change(v(3, 6, 0), v(3, 7, 3)).is_ok());
        assert!(check_version_change(v(3, 6, 16), v(3, 7, 0)).is_ok());
        assert!(matches!(
            check_version_change(v(3, 5, 30), v(3, 7, 3)),
            Err(VersionChangeError::SkipsMinor { .. })
        ));
        let message = check_version_change(v(3, 5, 16), v(3, 6, 5))
            .unwrap_err()
            .to_string();
        assert!(message.contains("3.5.26"), "{message}");
    }
}
