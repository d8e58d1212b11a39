//! Backup encryption keys: where pods find them (`spec.backup.encryption`
//! for the backup agent, `spec.bootstrap.restore.encryption` for a
//! restore's fetch step) and how the operator reads them itself (the
//! continuous backup agent, the replay of a point-in-time restore,
//! retention of continuous backup chains).
//!
//! A key only ever reaches a pod as a file from its Secret, never as an
//! argument or in an object the operator writes.

use dkv_api::distributedkv::v1beta1::KeySecretReference;
use dkv_backup::{Key, Keyring};
use k8s_openapi::api::core::v1::{KeyToPath, Secret, SecretVolumeSource, Volume, VolumeMount};
use kube::{Api, Client};

/// The Secret entry that holds the backup key when `keySecret.key` is not set.
pub const DEFAULT_KEY_ENTRY: &str = "key";

const BACKUP_KEY_VOLUME: &str = "backup-key";
const BACKUP_KEY_DIR: &str = "/var/run/dkv/backup-key";
/// The backup agent's key file.
pub const BACKUP_KEY_FILE: &str = "/var/run/dkv/backup-key/key";

const RESTORE_KEYS_VOLUME: &str = "restore-keys";
/// Where a restore's fetch step finds the keys it may decrypt with.
pub const RESTORE_KEYS_DIR: &str = "/var/run/dkv/restore-keys";

/// The entry of `reference` that holds the key a backup encrypts with.
pub fn backup_entry(reference: &KeySecretReference) -> &str {
    reference.key.as_deref().unwrap_or(DEFAULT_KEY_ENTRY)
}

/// The backup agent's key: the Secret's entry as the file [`BACKUP_KEY_FILE`].
pub fn backup_key_volume(reference: &KeySecretReference) -> Volume {
    volume(
        BACKUP_KEY_VOLUME,
        &reference.name,
        Some(vec![KeyToPath {
            key: backup_entry(reference).to_owned(),
            path: "key".to_owned(),
            ..KeyToPath::default()
        }]),
    )
}

pub fn backup_key_mount() -> VolumeMount {
    mount(BACKUP_KEY_VOLUME, BACKUP_KEY_DIR)
}

/// A restore's keys: the named entry, or every entry, in [`RESTORE_KEYS_DIR`].
pub fn restore_keys_volume(reference: &KeySecretReference) -> Volume {
    volume(
        RESTORE_KEYS_VOLUME,
        &reference.name,
        reference.key.as_ref().map(|entry| {
            vec![KeyToPath {
                key: entry.clone(),
                path: entry.clone(),
                ..KeyToPath::default()
            }]
        }),
    )
}

pub fn restore_keys_mount() -> VolumeMount {
    mount(RESTORE_KEYS_VOLUME, RESTORE_KEYS_DIR)
}

fn volume(name: &str, secret: &str, items: Option<Vec<KeyToPath>>) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            // Readable by the owner and the pod's fsGroup only.
            default_mode: Some(0o440),
            items,
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The keys in `secret`: its entry `entry`, or every entry when `None`.
/// `Err` says what is wrong in words for status.
pub fn keys_of_secret(secret: &Secret, entry: Option<&str>) -> Result<Keyring, String> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let data = secret.data.clone().unwrap_or_default();
    let mut keys = Vec::new();
    for (field, value) in &data {
        if entry.is_some_and(|wanted| wanted != field) {
            continue;
        }
        let key = Key::parse(&value.0)
            .map_err(|e| format!("entry {field:?} of the Secret {name:?}: {e}"))?;
        keys.push(key);
    }
    match (entry, keys.is_empty()) {
        (Some(wanted), true) => Err(format!(
            "the Secret {name:?} has no entry {wanted:?} holding the backup encryption key"
        )),
        (None, true) => Err(format!("the Secret {name:?} holds no key")),
        _ => Ok(Keyring::new(keys)),
    }
}

/// Reads the Secret `reference` names in `namespace` and the keys in it
/// (the named entry, or every entry when `entry` is `None`). The outer
/// error is the API's; the inner one, a missing Secret or entry or a
/// malformed key, in words for status.
pub async fn read_keys(
    client: &Client,
    namespace: &str,
    reference: &KeySecretReference,
    entry: Option<&str>,
) -> Result<Result<Keyring, String>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(match secrets.get_opt(&reference.name).await? {
        Some(secret) => keys_of_secret(&secret, entry),
        None => Err(format!(
            "the backup encryption key Secret {:?} does not exist; create it (32 random bytes: kubectl create secret generic {} --from-literal=key=$(openssl rand -hex 32)) and keep a copy outside the cluster",
            reference.name, reference.name
        )),
    })
}

/// The key a backup encrypts with: the entry of `reference`.
pub async fn read_backup_key(
    client: &Client,
    namespace: &str,
    reference: &KeySecretReference,
) -> Result<Result<Key, String>, kube::Error> {
    let keys = read_keys(client, namespace, reference, Some(backup_entry(reference))).await?;
    Ok(keys.and_then(|keys| {
        keys.into_keys()
            .into_iter()
            .next()
            .ok_or_else(|| format!("the Secret {:?} holds no key", reference.name))
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    use super::*;

    fn secret(entries: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("backup-key".to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn keys_come_from_the_named_entry_or_every_entry() {
        let hex = "ab".repeat(32);
        let s = secret(&[("key", hex.as_bytes()), ("old", &[7u8; 32])]);
        assert_eq!(keys_of_secret(&s, Some("key")).unwrap().ids().len(), 1);
        assert_eq!(keys_of_secret(&s, None).unwrap().ids().len(), 2);
        let err = keys_of_secret(&s, Some("other")).unwrap_err();
        assert!(err.contains("no entry \"other\""), "{err}");
        let bad = secret(&[("key", b"short")]);
        let err = keys_of_secret(&bad, None).unwrap_err();
        assert!(
            err.contains("entry \"key\"") && err.contains("32 bytes"),
            "{err}"
        );
    }

    #[test]
    fn the_agent_gets_its_entry_as_one_file_and_a_restore_every_entry() {
        let named = KeySecretReference {
            name: "k".to_owned(),
            key: Some("current".to_owned()),
        };
        let volume = backup_key_volume(&named);
        let source = volume.secret.unwrap();
        let items = source.items.unwrap();
        assert_eq!(
            (items[0].key.as_str(), items[0].path.as_str()),
            ("current", "key")
        );
        assert_eq!(source.default_mode, Some(0o440));
        assert_eq!(
            format!("{}/key", backup_key_mount().mount_path),
            BACKUP_KEY_FILE
        );
        let all = KeySecretReference {
            name: "k".to_owned(),
            key: None,
        };
        assert_eq!(backup_entry(&all), DEFAULT_KEY_ENTRY);
        assert!(restore_keys_volume(&all).secret.unwrap().items.is_none());
        assert_eq!(restore_keys_mount().mount_path, RESTORE_KEYS_DIR);
    }
}
