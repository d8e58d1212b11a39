//! `spec.image` and `spec.version`: the etcd version a spec asks for,
//! whether this operator supports it, and whether the cluster can move to
//! it from what its members run.

use std::fmt;

use dkv_api::DistributedKV;

use super::Problems;
use crate::etcd_version::{self, EtcdVersion, VersionChangeError, check_version_change};

pub(super) fn resolve_version(
    image: &str,
    explicit: Option<&str>,
    problems: &mut Problems,
) -> Option<EtcdVersion> {
    if image.trim().is_empty() {
        problems.add(
            "spec.image",
            "must name an etcd image, e.g. registry.k8s.io/etcd:3.5.16-0",
        );
        return None;
    }
    let (field, version) = match explicit {
        Some(text) => match EtcdVersion::parse(text) {
            Some(v) => ("spec.version", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("{text:?} is not a version; write MAJOR.MINOR.PATCH, e.g. 3.5.16"),
                );
                return None;
            }
        },
        None => match EtcdVersion::from_image(image) {
            Some(v) => ("spec.image", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("the tag of image {image:?} is not a version; set spec.version to the etcd version the image runs, e.g. 3.5.16"),
                );
                return None;
            }
        },
    };
    if version < etcd_version::MIN_SUPPORTED {
        problems.add(
            field,
            format!(
                "etcd {version} is not supported; dkv needs {} or newer (learner members)",
                etcd_version::MIN_SUPPORTED
            ),
        );
        return None;
    }
    if version.minor_line() > etcd_version::MAX_SUPPORTED_MINOR {
        let (major, minor) = etcd_version::MAX_SUPPORTED_MINOR;
        problems.add(
            field,
            format!(
                "etcd {version} is newer than this operator supports (up to {major}.{minor}.x)"
            ),
        );
        return None;
    }
    Some(version)
}

/// The etcd versions a cluster runs, as its status records them: what
/// etcd's version rules compare a new spec with. A spec that never ran on
/// a member (an image no registry has, a binary that cannot start) is not
/// among them, so an edit of it can always be taken back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningVersions {
    /// What each member reported when last asked (`status.members`).
    pub members: Vec<(String, EtcdVersion)>,
    /// Whether a listed member reported no version (stopped, not
    /// answering): it runs what last ran on every member, or what it was
    /// restarted onto since.
    pub unreported: bool,
    /// The version every voter reported alike, last time they did
    /// (`status.currentVersion`).
    pub current: Option<EtcdVersion>,
    /// The version of the spec that last ran on every member
    /// (`status.rollout.lastGood`).
    pub last_good: Option<EtcdVersion>,
    /// The version the members were last set to run (the StatefulSet's,
    /// or the previous spec's): compared with only when status records
    /// none of the above, as after a status was lost.
    pub last_set: Option<EtcdVersion>,
}

/// Where a running version was seen, for the message of a refused move.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SeenVersion {
    Member(String),
    Current,
    LastGood,
    LastSet,
}

/// A move to a version etcd's rules forbid from one the cluster runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedMove {
    seen: SeenVersion,
    rule: VersionChangeError,
    /// The version that last ran on every member, when a move back to it
    /// is accepted (named as the way out).
    way_back: Option<EtcdVersion>,
}

impl fmt::Display for RefusedMove {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.rule.from();
        match &self.seen {
            SeenVersion::Member(name) => write!(f, "member {name} runs {from} (status.members): ")?,
            SeenVersion::Current => write!(
                f,
                "every member ran {from} when last seen alike (status.currentVersion): "
            )?,
            SeenVersion::LastGood => write!(
                f,
                "{from} last ran on every member (status.rollout.lastGood) and a member does not report its version: "
            )?,
            SeenVersion::LastSet => write!(
                f,
                "the previous spec asks for {from} and status records no version the members run: "
            )?,
        }
        write!(f, "{}", self.rule)?;
        // A downgrade's own fix already says "set the image back to FROM".
        let said = |back: &EtcdVersion| {
            *back == from && matches!(self.rule, VersionChangeError::Downgrade { .. })
        };
        if let Some(back) = self.way_back.filter(|back| !said(back)) {
            write!(
                f,
                "; {back}, the version that last ran on every member (status.rollout.lastGood), is accepted too"
            )?;
        }
        Ok(())
    }
}

impl RunningVersions {
    /// What `dkv`'s status records it runs. `last_set` counts only when
    /// status records no version and the cluster may hold data: status is
    /// missing, or the cluster formed once. A cluster that never formed
    /// has no member that ran anything, so no rule binds it.
    pub fn of(dkv: &DistributedKV, last_set: Option<EtcdVersion>, formed: bool) -> Self {
        let Some(status) = dkv.status.as_ref() else {
            return Self {
                last_set,
                ..Self::default()
            };
        };
        let members = status
            .members
            .iter()
            .filter_map(|m| Some((m.name.clone(), EtcdVersion::parse(m.version.as_deref()?)?)))
            .collect::<Vec<_>>();
        Self {
            unreported: members.len() < status.members.len(),
            members,
            current: status
                .current_version
                .as_deref()
                .and_then(EtcdVersion::parse),
            last_good: status
                .rollout
                .as_ref()
                .and_then(|r| r.last_good.as_ref())
                .and_then(|good| match &good.version {
                    Some(text) => EtcdVersion::parse(text),
                    None => EtcdVersion::from_image(good.image.trim()),
                }),
            last_set: last_set.filter(|_| formed),
        }
    }

    /// The versions a move is checked from, each with where it was seen.
    fn sources(&self) -> Vec<(SeenVersion, EtcdVersion)> {
        let mut sources: Vec<(SeenVersion, EtcdVersion)> = self
            .members
            .iter()
            .map(|(name, v)| (SeenVersion::Member(name.clone()), *v))
            .collect();
        sources.extend(self.current.map(|v| (SeenVersion::Current, v)));
        if self.members.is_empty() || self.unreported {
            sources.extend(self.last_good.map(|v| (SeenVersion::LastGood, v)));
        }
        if sources.is_empty() {
            sources.extend(self.last_set.map(|v| (SeenVersion::LastSet, v)));
        }
        sources
    }

    /// Whether etcd's rules let the cluster move to `to` from what it runs.
    ///
    /// Every version the cluster runs must be able to move to `to`, with
    /// two allowances that follow etcd's cluster version (its lowest
    /// member's minor line): a member on a newer minor line than the
    /// cluster's may go back to it (an unfinished upgrade undone: etcd
    /// never raised its data past the cluster version), and the version
    /// that last ran on every member is accepted while the cluster version
    /// is still its minor line (what `onFailure: Rollback` does too).
    pub fn check_move(&self, to: EtcdVersion) -> Result<(), RefusedMove> {
        self.check_move_only(to).map_err(|mut refused| {
            refused.way_back = self
                .last_good
                .filter(|back| *back != to && self.check_move_only(*back).is_ok());
            refused
        })
    }

    fn check_move_only(&self, to: EtcdVersion) -> Result<(), RefusedMove> {
        let sources = self.sources();
        let Some(lowest) = sources.iter().map(|(_, v)| *v).min() else {
            return Ok(());
        };
        let cluster_line = lowest.minor_line();
        let back_to_cluster_line = cluster_line == to.minor_line();
        let returning = back_to_cluster_line && self.last_good == Some(to);
        for (seen, from) in sources {
            let refused = |rule| RefusedMove {
                seen: seen.clone(),
                rule,
                way_back: None,
            };
            if from.minor_line() > to.minor_line() && back_to_cluster_line {
                // Back to the cluster's line: no downgrade API, but onto a
                // release etcd lets run beside the newer member.
                back_beside_newer(from, to).map_err(refused)?;
            } else if !returning {
                check_version_change(from, to).map_err(refused)?;
            }
        }
        Ok(())
    }
}

/// A member on a newer minor line than the cluster's going back to `to`,
/// the cluster's line: etcd lets into a cluster with 3.6 members only 3.5
/// releases from [`etcd_version::MIN_3_5_FOR_3_6`] on.
fn back_beside_newer(from: EtcdVersion, to: EtcdVersion) -> Result<(), VersionChangeError> {
    if from.minor_line() >= (3, 6)
        && to.minor_line() == (3, 5)
        && to < etcd_version::MIN_3_5_FOR_3_6
    {
        return Err(VersionChangeError::DowngradeTooOldFor36 { from, to });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(members: &[EtcdVersion], last_good: EtcdVersion) -> RunningVersions {
        RunningVersions {
            members: members
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("orders-{i}"), *v))
                .collect(),
            last_good: Some(last_good),
            ..RunningVersions::default()
        }
    }

    #[test]
    fn a_move_is_checked_from_every_member_with_the_cluster_versions_allowances() {
        let v = EtcdVersion::new;
        // Nothing known: no rule binds.
        assert!(RunningVersions::default().check_move(v(3, 4, 23)).is_ok());
        // A patch upgrade half done: back to lastGood, not between.
        let half = running(&[v(3, 5, 30), v(3, 5, 16), v(3, 5, 16)], v(3, 5, 16));
        assert!(half.check_move(v(3, 5, 16)).is_ok());
        assert!(half.check_move(v(3, 5, 20)).is_err());
        // 3.5 -> 3.6 half done: back onto 3.5 from 3.5.26 on, even where
        // lastGood is older than what runs (recorded before a patch step).
        let mixed = running(&[v(3, 6, 16), v(3, 5, 30), v(3, 5, 30)], v(3, 5, 16));
        assert!(mixed.check_move(v(3, 5, 30)).is_ok());
        let refused = mixed.check_move(v(3, 5, 16)).unwrap_err();
        assert!(
            refused.to_string().starts_with("member orders-0 runs 3.6.16 (status.members): etcd 3.6.16 can only be downgraded to 3.5.26"),
            "{refused}"
        );
        // A member not reporting: lastGood stands in for it.
        let silent = RunningVersions {
            unreported: true,
            ..running(&[v(3, 6, 16), v(3, 6, 16)], v(3, 5, 30))
        };
        assert!(
            silent.check_move(v(3, 5, 30)).is_ok(),
            "the cluster may still be on 3.5"
        );
        assert!(
            silent.check_move(v(3, 7, 3)).is_err(),
            "3.5.30 -> 3.7.3 skips 3.6"
        );
    }

    fn resolved(image: &str) -> (Option<EtcdVersion>, Vec<String>) {
        let mut problems = Problems::default();
        let version = resolve_version(image, None, &mut problems);
        (version, problems.0.into_iter().map(|p| p.message).collect())
    }

    #[test]
    fn etcd_3_4_through_3_7_are_supported_and_3_8_is_not() {
        for (image, version) in [
            ("registry.k8s.io/etcd:3.4.23-0", EtcdVersion::new(3, 4, 23)),
            ("registry.k8s.io/etcd:3.6.16-0", EtcdVersion::new(3, 6, 16)),
            ("quay.io/coreos/etcd:v3.7.3", EtcdVersion::new(3, 7, 3)),
        ] {
            assert_eq!(resolved(image), (Some(version), Vec::new()), "{image}");
        }
        let (version, problems) = resolved("gcr.io/etcd-development/etcd:v3.8.0");
        assert_eq!(version, None);
        assert_eq!(
            problems,
            vec!["etcd 3.8.0 is newer than this operator supports (up to 3.7.x)".to_owned()]
        );
    }
}
