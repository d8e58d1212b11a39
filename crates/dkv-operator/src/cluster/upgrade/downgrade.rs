//! etcd's side of a downgrade by one minor version (etcd 3.6 and later).
//!
//! An older binary cannot start on data a newer minor wrote: etcd's
//! downgrade API first lowers the cluster version (`downgrade enable`), after
//! which every member rewrites its data for the target and reports it as its
//! storage version. Only then may members restart on the older binary, one
//! at a time like an upgrade; etcd ends the downgrade itself once every
//! member runs the target. [`gate`] reads where a cluster stands from what
//! its members report (storage version, enabled downgrade), asking etcd to
//! validate the target only while nothing is enabled yet; everything is read
//! anew each pass, so an operator restarted at any point resumes.

use dkv_etcd::{DowngradeAction, EtcdAdmin};

use crate::cluster::membership::{DowngradeGate, ObservedMember};
use crate::etcd_version::EtcdVersion;

/// etcd's name for a minor line, as its downgrade API takes it.
pub fn minor_text(version: EtcdVersion) -> String {
    format!("{}.{}", version.major, version.minor)
}

/// Where a downgrade to `desired`'s minor line stands (pure), given what the
/// voters report and, while no downgrade is enabled, etcd's answer to
/// `downgrade validate` (`None`: not asked or no answer).
pub fn gate(
    members: &[ObservedMember],
    desired: EtcdVersion,
    validation: Option<Result<(), String>>,
) -> DowngradeGate {
    let want = desired.minor_line();
    let voters = || members.iter().filter(|m| !m.learner);
    let enabled_to = voters().find_map(|m| m.downgrade_target);
    let newer: Vec<&ObservedMember> = voters()
        .filter(|m| m.version.is_some_and(|v| v.minor_line() > want))
        .collect();
    if newer.is_empty() {
        return match enabled_to {
            Some(target) if target.minor_line() < want => DowngradeGate::Stale,
            _ => DowngradeGate::Open,
        };
    }
    // A voter still on the target's minor line (or below) holds etcd's
    // cluster version there: it never rose, so the newer members' data is
    // still the target's — an unfinished upgrade being undone — and they
    // may restart on the older binary without etcd's downgrade API (which
    // would refuse a target that is already the cluster version).
    if enabled_to.is_none() && voters().any(|m| m.version.is_some_and(|v| v.minor_line() <= want)) {
        return DowngradeGate::Open;
    }
    // etcd 3.5 and older have no downgrade dkv can drive (they report no
    // storage version): a voter there cannot be moved a minor line down.
    if let Some(old) = newer
        .iter()
        .filter_map(|m| m.version)
        .find(|v| v.minor_line() < (3, 6))
    {
        return DowngradeGate::Refused(format!(
            "a member runs {old}: etcd downgrades a cluster from 3.6 on only; set the image back to {}.{}",
            old.major, old.minor
        ));
    }
    let rewritten = newer
        .iter()
        .all(|m| m.storage_version.is_some_and(|s| s.minor_line() <= want));
    match enabled_to {
        Some(target) if target.minor_line() == want => {
            if rewritten {
                DowngradeGate::Open
            } else {
                DowngradeGate::Migrating
            }
        }
        Some(target) => DowngradeGate::Refused(format!(
            "a downgrade to {} is enabled in etcd, not to {}",
            minor_text(target),
            minor_text(desired)
        )),
        None => match validation {
            Some(Ok(())) => DowngradeGate::Validated,
            Some(Err(message)) => DowngradeGate::Refused(message),
            None => DowngradeGate::Unknown,
        },
    }
}

/// [`gate`], asking etcd to validate the downgrade when that is what
/// decides: some voter runs a newer minor line than `desired` and no
/// downgrade is enabled.
pub async fn observe(
    admin: &dyn EtcdAdmin,
    members: &[ObservedMember],
    desired: EtcdVersion,
) -> DowngradeGate {
    let without_validation = gate(members, desired, None);
    if without_validation != DowngradeGate::Unknown {
        return without_validation;
    }
    let validation = match admin
        .downgrade(DowngradeAction::Validate(minor_text(desired)))
        .await
    {
        Ok(_) => Some(Ok(())),
        Err(dkv_etcd::Error::Refused { message, .. }) => Some(Err(message)),
        Err(err) => {
            tracing::debug!(error = %err, "downgrade validate got no answer");
            None
        }
    };
    gate(members, desired, validation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership::fixtures;

    const V37: EtcdVersion = EtcdVersion::new(3, 7, 3);
    const V36: EtcdVersion = EtcdVersion::new(3, 6, 16);
    const V35: EtcdVersion = EtcdVersion::new(3, 5, 30);

    /// Three voters: `versions[k]` is what member k runs; members on 3.6 or
    /// later report `storage` (their own minor when `None`) and `enabled`.
    fn members(
        versions: [EtcdVersion; 3],
        storage: Option<EtcdVersion>,
        enabled: Option<EtcdVersion>,
    ) -> Vec<ObservedMember> {
        (0..3)
            .map(|k| {
                let version = versions[k as usize];
                let reports = version.minor_line() >= (3, 6);
                ObservedMember {
                    version: Some(version),
                    storage_version: reports
                        .then(|| storage.unwrap_or(EtcdVersion::new(3, version.minor, 0))),
                    downgrade_target: enabled.filter(|_| reports),
                    ..fixtures::member(k)
                }
            })
            .collect()
    }

    #[test]
    fn a_downgrade_is_validated_enabled_then_waits_for_every_member_s_data() {
        let v360 = EtcdVersion::new(3, 6, 0);
        let all_37 = [V37, V37, V37];
        // Not enabled: etcd's validation decides.
        assert_eq!(
            gate(&members(all_37, None, None), V36, Some(Ok(()))),
            DowngradeGate::Validated
        );
        let refused = gate(
            &members(all_37, None, None),
            V36,
            Some(Err("no".to_owned())),
        );
        assert_eq!(refused, DowngradeGate::Refused("no".to_owned()));
        assert_eq!(
            gate(&members(all_37, None, None), V36, None),
            DowngradeGate::Unknown
        );
        // Enabled (validation not needed): the data is rewritten, then open.
        let enabled = Some(v360);
        let migrating = members(all_37, Some(EtcdVersion::new(3, 7, 0)), enabled);
        assert_eq!(gate(&migrating, V36, None), DowngradeGate::Migrating);
        assert_eq!(
            gate(&members(all_37, Some(v360), enabled), V36, None),
            DowngradeGate::Open
        );
        // Half way: members on 3.6 already, the rest rewritten.
        let half = members([V37, V37, V36], Some(v360), enabled);
        assert_eq!(gate(&half, V36, None), DowngradeGate::Open);
        // Enabled to another target: refused, naming both.
        let other = gate(
            &members(all_37, None, Some(EtcdVersion::new(3, 5, 0))),
            V36,
            None,
        );
        assert!(
            matches!(&other, DowngradeGate::Refused(m) if m.contains("3.5") && m.contains("3.6")),
            "{other:?}"
        );
    }

    #[test]
    fn members_on_3_5_report_nothing_and_a_downgrade_no_longer_asked_for_is_stale() {
        let v350 = Some(EtcdVersion::new(3, 5, 0));
        // 3.6 -> 3.5 half done: the 3.5 member reports no storage version.
        let half = members([V36, V36, V35], v350, v350);
        assert_eq!(gate(&half, V35, None), DowngradeGate::Open);
        // Done: nothing newer, nothing enabled that 3.5 members report.
        assert_eq!(
            gate(&members([V35, V35, V35], None, None), V35, None),
            DowngradeGate::Open
        );
        // Rolled back to 3.6 half way: the enabled downgrade is cancelled.
        assert_eq!(gate(&half, V36, None), DowngradeGate::Stale);
        // 3.7 -> 3.6 done, before etcd's leader ends the downgrade: open.
        let done = members([V36, V36, V36], None, Some(EtcdVersion::new(3, 6, 0)));
        assert_eq!(gate(&done, V36, None), DowngradeGate::Open);
        // An upgrade 3.5 -> 3.6 half done, undone: the cluster version is
        // still 3.5, nothing to ask etcd.
        assert_eq!(
            gate(&members([V36, V35, V35], None, None), V35, None),
            DowngradeGate::Open
        );
        // Every voter on 3.5, the spec back on 3.4 (an upgrade finished
        // while the edit was admitted): no downgrade API to ask.
        let on_35 = members([V35, V35, V35], None, None);
        let refused = gate(&on_35, EtcdVersion::new(3, 4, 23), Some(Ok(())));
        assert!(
            matches!(&refused, DowngradeGate::Refused(m) if m.contains("from 3.6 on only")),
            "{refused:?}"
        );
        // An upgrade is no downgrade.
        assert_eq!(
            gate(&members([V35, V35, V35], None, None), V36, None),
            DowngradeGate::Open
        );
    }

    #[tokio::test]
    async fn observe_asks_etcd_to_validate_only_while_nothing_is_enabled() {
        let etcd = dkv_etcd::FakeEtcd::with_members(&["a", "b", "c"], "3.7.3");
        let all_37 = members([V37, V37, V37], None, None);
        assert_eq!(observe(&etcd, &all_37, V36).await, DowngradeGate::Validated);
        assert_eq!(etcd.calls(), vec!["downgrade validate 3.6".to_owned()]);
        // Two minors down: etcd refuses, with its message.
        let refused = observe(&etcd, &all_37, V35).await;
        assert!(
            matches!(&refused, DowngradeGate::Refused(m) if m.contains("invalid downgrade target")),
            "{refused:?}"
        );
        let enabled = members([V37, V37, V37], None, Some(EtcdVersion::new(3, 6, 0)));
        let calls = etcd.calls().len();
        assert_eq!(
            observe(&etcd, &enabled, V36).await,
            DowngradeGate::Migrating
        );
        assert_eq!(etcd.calls().len(), calls, "nothing asked once enabled");
    }
}
