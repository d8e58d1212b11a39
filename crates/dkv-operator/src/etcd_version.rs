//! The upgrade and downgrade rules between etcd versions. The version type
//! itself is the member side's ([`dkv_member::etcd_version`]), which reads
//! it from member-init's arguments.

use std::fmt;

pub use dkv_member::etcd_version::EtcdVersion;

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
    /// Down within one minor line, or from a minor line etcd has no
    /// downgrade API for (3.5 and older).
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
    /// More than one minor line down.
    DowngradeSkipsMinor {
        from: EtcdVersion,
        to: EtcdVersion,
    },
    /// 3.6 → 3.5 onto a 3.5 patch release older than [`MIN_3_5_FOR_3_6`]:
    /// the same releases etcd does not let into a 3.6 cluster.
    DowngradeTooOldFor36 {
        from: EtcdVersion,
        to: EtcdVersion,
    },
}

impl VersionChangeError {
    /// The version the refused change started from.
    pub fn from(&self) -> EtcdVersion {
        match self {
            Self::Downgrade { from, .. }
            | Self::SkipsMinor { from, .. }
            | Self::PatchTooOldFor36 { from, .. }
            | Self::DowngradeSkipsMinor { from, .. }
            | Self::DowngradeTooOldFor36 { from, .. } => *from,
        }
    }
}

impl fmt::Display for VersionChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Downgrade { from, to } if from.minor_line() == to.minor_line() => write!(
                f,
                "etcd cannot be downgraded to an older patch release ({from} -> {to}): etcd's downgrade API moves whole minor versions; set the image back to {from} or newer"
            ),
            Self::Downgrade { from, to } => write!(
                f,
                "etcd cannot be downgraded ({from} -> {to}): etcd supports downgrades from 3.6 on (3.7 -> 3.6, 3.6 -> 3.5), not from {}.{}; set the image back to {from} or newer",
                from.major, from.minor
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
            Self::DowngradeSkipsMinor { from, to } => write!(
                f,
                "etcd downgrades move one minor version at a time ({from} -> {to} skips one); downgrade to {}.{}.x first",
                from.major,
                from.minor.saturating_sub(1)
            ),
            Self::DowngradeTooOldFor36 { from, to } => write!(
                f,
                "etcd {from} can only be downgraded to {MIN_3_5_FOR_3_6} or a later 3.5 release (older 3.5 releases cannot run beside 3.6 members during the downgrade); choose a 3.5 release from {MIN_3_5_FOR_3_6} on instead of {to}"
            ),
        }
    }
}

/// Whether `from -> to` is a downgrade by one minor line (which etcd's
/// downgrade API carries out, and [`check_version_change`] allows from 3.6
/// on).
pub fn is_minor_downgrade(from: EtcdVersion, to: EtcdVersion) -> bool {
    to.major == from.major && to.minor + 1 == from.minor
}

/// Checks etcd's rules for a change of the running version. Up: at most one
/// minor line, and into 3.6 only from a recent enough 3.5. Down: exactly one
/// minor line, from 3.6 or newer (etcd's downgrade API), and into 3.5 only
/// onto a release a 3.6 cluster accepts; never to an older patch release
/// of the same minor line.
pub fn check_version_change(from: EtcdVersion, to: EtcdVersion) -> Result<(), VersionChangeError> {
    if to < from {
        return check_downgrade(from, to);
    }
    if to.major != from.major || to.minor > from.minor + 1 {
        return Err(VersionChangeError::SkipsMinor { from, to });
    }
    if from.minor_line() == (3, 5) && to.minor_line() == (3, 6) && from < MIN_3_5_FOR_3_6 {
        return Err(VersionChangeError::PatchTooOldFor36 { from, to });
    }
    Ok(())
}

fn check_downgrade(from: EtcdVersion, to: EtcdVersion) -> Result<(), VersionChangeError> {
    if from.minor_line() == to.minor_line() || from.minor_line() < (3, 6) {
        return Err(VersionChangeError::Downgrade { from, to });
    }
    if !is_minor_downgrade(from, to) {
        return Err(VersionChangeError::DowngradeSkipsMinor { from, to });
    }
    if to.minor_line() == (3, 5) && to < MIN_3_5_FOR_3_6 {
        return Err(VersionChangeError::DowngradeTooOldFor36 { from, to });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn downgrades_go_one_minor_down_from_3_6_on() {
        let v = EtcdVersion::new;
        let err = |from, to| check_version_change(from, to).err();
        // What etcd's downgrade API does.
        assert_eq!(err(v(3, 7, 3), v(3, 6, 16)), None);
        assert_eq!(err(v(3, 7, 0), v(3, 6, 0)), None);
        assert_eq!(err(v(3, 6, 16), v(3, 5, 30)), None);
        assert_eq!(err(v(3, 6, 0), v(3, 5, 26)), None);
        // 3.5 has no downgrade API; a patch release is no minor line.
        for (from, to) in [
            (v(3, 5, 30), v(3, 4, 23)),
            (v(3, 5, 30), v(3, 5, 26)),
            (v(3, 6, 16), v(3, 6, 1)),
            (v(3, 7, 3), v(3, 7, 0)),
        ] {
            assert_eq!(
                err(from, to),
                Some(VersionChangeError::Downgrade { from, to })
            );
        }
        assert_eq!(
            err(v(3, 7, 3), v(3, 5, 30)),
            Some(VersionChangeError::DowngradeSkipsMinor {
                from: v(3, 7, 3),
                to: v(3, 5, 30)
            })
        );
        // Below the 3.5 releases a 3.6 cluster accepts.
        assert_eq!(
            err(v(3, 6, 16), v(3, 5, 25)),
            Some(VersionChangeError::DowngradeTooOldFor36 {
                from: v(3, 6, 16),
                to: v(3, 5, 25)
            })
        );
        let message = |from, to| err(from, to).map(|e| e.to_string()).unwrap_or_default();
        assert!(message(v(3, 6, 16), v(3, 5, 16)).contains("3.5.26 or a later 3.5"));
        assert!(message(v(3, 7, 3), v(3, 5, 30)).contains("downgrade to 3.6.x first"));
        assert!(message(v(3, 5, 30), v(3, 4, 23)).contains("from 3.6 on"));
        assert!(message(v(3, 6, 16), v(3, 6, 1)).contains("older patch release"));
        assert!(is_minor_downgrade(v(3, 6, 16), v(3, 5, 30)));
        assert!(!is_minor_downgrade(v(3, 6, 16), v(3, 6, 1)));
        assert!(!is_minor_downgrade(v(3, 5, 30), v(3, 6, 16)));
    }
}
