//! The defaulting webhook's decisions (pure): the fields dkv fills in when a
//! write leaves them out, returned as a JSON Patch against the written object.
//!
//! `spec.backup.backupImage` becomes the operator's image, `spec.version` the
//! etcd version of the image tag, `spec.etcd` etcd's tuning defaults (the
//! values the controller would use anyway, so defaulting never changes what
//! runs), and a cluster being created without `spec.tls` gets TLS for peers
//! and clients. Defaulting an already defaulted object yields an empty patch.

use dkv_api::distributedkv::v1beta1::TlsSpec;
use dkv_api::{DistributedKV, DistributedKVBackup, labels};
use serde_json::Value;

use crate::cluster::validate::{Defaults, etcd_tuning_with_defaults};
use crate::etcd_version::EtcdVersion;

/// The patch that defaults a `DistributedKV` being created (`old` is `None`)
/// or updated.
pub fn default_cluster(
    new: &DistributedKV,
    old: Option<&DistributedKV>,
    defaults: &Defaults,
) -> Result<json_patch::Patch, serde_json::Error> {
    let mut defaulted = new.clone();
    let spec = &mut defaulted.spec;

    if let Some(backup) = spec.backup.as_mut()
        && backup
            .backup_image
            .as_deref()
            .is_none_or(|image| image.trim().is_empty())
    {
        backup.backup_image = Some(defaults.operator_image.clone());
    }

    // A version this webhook derived from the image follows the image: when
    // the image changes and the version was the old tag's, it becomes the new
    // tag's. A version the user chose (differing from the tag) stays.
    let from_image = EtcdVersion::from_image(spec.image.trim());
    let follows_image = match (old, &spec.version) {
        (_, None) => true,
        (Some(old), Some(version)) => {
            old.spec.image != spec.image
                && old.spec.version.as_ref() == Some(version)
                && EtcdVersion::from_image(old.spec.image.trim()).map(|v| v.to_string())
                    == Some(version.clone())
        }
        (None, Some(_)) => false,
    };
    if follows_image && let Some(version) = from_image {
        spec.version = Some(version.to_string());
    }

    spec.etcd = Some(etcd_tuning_with_defaults(spec.etcd.as_ref()));

    // New clusters speak TLS unless they opt out (`mode: Disabled`). Only at
    // creation: `spec.tls` is fixed afterwards, and a cluster created
    // without it runs plaintext.
    if old.is_none() && spec.tls.is_none() {
        spec.tls = Some(TlsSpec::default());
    }

    diff(new, &defaulted)
}

/// The patch that defaults a `DistributedKVBackup`: the `dkv.io/cluster`
/// label, so `kubectl get dkvbackup -l dkv.io/cluster=NAME` lists a
/// cluster's backups whoever created them.
pub fn default_backup(
    backup: &DistributedKVBackup,
) -> Result<json_patch::Patch, serde_json::Error> {
    let mut defaulted = backup.clone();
    let cluster = backup.spec.cluster.trim();
    if !cluster.is_empty() {
        defaulted
            .metadata
            .labels
            .get_or_insert_default()
            .entry(labels::CLUSTER_KEY.to_owned())
            .or_insert_with(|| cluster.to_owned());
    }
    diff(backup, &defaulted)
}

fn diff<T: serde::Serialize>(
    before: &T,
    after: &T,
) -> Result<json_patch::Patch, serde_json::Error> {
    let before: Value = serde_json::to_value(before)?;
    let after: Value = serde_json::to_value(after)?;
    Ok(json_patch::diff(&before, &after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::fixtures::{defaults, dkv};

    fn apply(obj: &DistributedKV, patch: &json_patch::Patch) -> DistributedKV {
        let mut value = serde_json::to_value(obj).unwrap_or_default();
        json_patch::patch(&mut value, patch).unwrap_or_else(|e| panic!("patch: {e}"));
        serde_json::from_value(value).unwrap_or_else(|e| panic!("patched: {e}"))
    }

    #[test]
    fn fills_backup_image_version_and_tuning_once() {
        let new = dkv(serde_json::json!({
            "size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
            "backup": {"destination": {"uri": "s3://bucket/x/"}, "schedule": "@daily", "backupImage": ""}
        }));
        let patch = default_cluster(&new, None, &defaults()).unwrap_or_else(|e| panic!("{e}"));
        let defaulted = apply(&new, &patch);
        let spec = &defaulted.spec;
        assert_eq!(spec.version.as_deref(), Some("3.5.16"));
        assert_eq!(
            spec.backup.as_ref().and_then(|b| b.backup_image.as_deref()),
            Some("ghcr.io/dkv-io/dkv:test")
        );
        let etcd = spec.etcd.clone().unwrap_or_default();
        assert_eq!(etcd.quota_backend_bytes, Some(2 * 1024 * 1024 * 1024));
        assert_eq!(etcd.auto_compaction_retention.as_deref(), Some("1h"));
        let tls = crate::parts::tls::TlsSettings::from_spec(spec.tls.as_ref());
        assert!(tls.peer && tls.client, "new clusters default to TLS");
        let again =
            default_cluster(&defaulted, None, &defaults()).unwrap_or_else(|e| panic!("{e}"));
        assert!(again.0.is_empty(), "not idempotent: {again:?}");
    }

    #[test]
    fn tls_defaults_on_at_creation_only_and_an_opt_out_stays() {
        let plaintext_opt_out = dkv(serde_json::json!({
            "size": 3, "image": "registry.k8s.io/etcd:3.5.16-0",
            "tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}}
        }));
        let patched = apply(
            &plaintext_opt_out,
            &default_cluster(&plaintext_opt_out, None, &defaults())
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(!crate::parts::tls::TlsSettings::from_spec(patched.spec.tls.as_ref()).any());
        // An existing cluster without spec.tls (created plaintext) stays so.
        let existing =
            dkv(serde_json::json!({"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0"}));
        let patched = apply(
            &existing,
            &default_cluster(&existing, Some(&existing), &defaults())
                .unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(patched.spec.tls, None);
    }

    #[test]
    fn a_derived_version_follows_the_image_a_chosen_one_stays() {
        let old = dkv(
            serde_json::json!({"size": 3, "image": "registry.k8s.io/etcd:3.5.16-0", "version": "3.5.16"}),
        );
        let mut new = old.clone();
        new.spec.image = "registry.k8s.io/etcd:3.6.1-0".into();
        let patched = apply(
            &new,
            &default_cluster(&new, Some(&old), &defaults()).unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(patched.spec.version.as_deref(), Some("3.6.1"));

        let old = dkv(
            serde_json::json!({"size": 3, "image": "example.com/etcd:latest", "version": "3.5.16"}),
        );
        let mut new = old.clone();
        new.spec.image = "example.com/etcd:stable".into();
        let patch =
            default_cluster(&new, Some(&old), &defaults()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(apply(&new, &patch).spec.version.as_deref(), Some("3.5.16"));
    }
}
