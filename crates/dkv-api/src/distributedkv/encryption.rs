//! Client-side encryption of backups and the Secret entries that hold its
//! keys. Shared by both API versions and by `spec.standby` (re-exported by
//! [`super::v1alpha1`] and [`super::v1beta1`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Client-side encryption of backups: AES-256-GCM, with the key in a Secret.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BackupEncryption {
    /// The Secret (same namespace) holding the key: 32 random bytes, raw,
    /// as 64 hexadecimal digits (`openssl rand -hex 32`) or in base64
    /// (`openssl rand -base64 32`). Every artifact records the key's id (a
    /// fingerprint, not the key), and a restore needs the same key: keep a
    /// copy of it outside the cluster.
    pub key_secret: KeySecretReference,
}

/// An entry of a Secret in the cluster's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct KeySecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The entry holding the key. For backups the default is `key`; for a
    /// restore, without it every entry of the Secret is a candidate and
    /// the one whose id an artifact records decrypts it (a Secret can keep
    /// the old keys after a rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub key: Option<String>,
}
