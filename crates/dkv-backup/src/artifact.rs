//! A backup artifact: one etcd snapshot in object storage, how it is named,
//! its JSON record, and its deletion.
//!
//! Layout under a destination prefix:
//!
//! ```text
//! <prefix>/<namespace>/<cluster>/<cluster>-<YYYYMMDD>-<HHMMSS>.db.zst       the snapshot
//! <prefix>/<namespace>/<cluster>/<cluster>-<YYYYMMDD>-<HHMMSS>.db.zst.json  its Artifact record
//! ```
//!
//! The snapshot's name ends in `.db`, then `.zst` when it is compressed
//! (the default) and `.enc` when it is encrypted ([`Encoding::suffix`]).
//!
//! The name is a function of namespace, cluster and time (UTC, seconds), so
//! a record can always be matched to its object, and two clusters sharing a
//! bucket never collide. The `.json` sidecar lets a restore by bare URI
//! verify the snapshot without the DistributedKVBackup record; it guards
//! against corruption and truncation, not against someone who can write to
//! the bucket.

use bytes::Bytes;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::encoding::Encoding;
use crate::error::{Error, Result};
use crate::location::Location;
use crate::store::{Store, StoreConfig};

/// What a completed backup produced. Serialized (camelCase) as the backup
/// Job's termination message and as the sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Where the snapshot is, e.g. `s3://bucket/prefix/shop/orders/orders-20261122-060012.db`.
    pub uri: String,
    pub size_bytes: u64,
    /// Lower-case hex sha256 of the whole object.
    pub sha256: String,
    /// The source member's revision just before the snapshot began: the
    /// snapshot contains every write up to at least this revision.
    pub revision: i64,
    /// Version of the etcd member that produced the snapshot.
    pub etcd_version: String,
    /// When the backup was started (UTC, whole seconds); also in the name.
    pub taken_at: Timestamp,
    /// `zstd` when the snapshot is stored compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// The id of the key the snapshot is encrypted with (AES-256-GCM),
    /// when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_id: Option<String>,
    /// What the source member held at `revision`, read right after the
    /// snapshot: what a verification compares a restored copy against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
}

/// A key count and etcd's `HashKV` at one revision (see
/// [`dkv_etcd::ContentDigest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Content {
    pub revision: i64,
    pub keys: i64,
    #[serde(rename = "hashKV")]
    pub hash_kv: u32,
    pub compact_revision: i64,
}

impl From<dkv_etcd::ContentDigest> for Content {
    fn from(d: dkv_etcd::ContentDigest) -> Content {
        Content {
            revision: d.revision,
            keys: d.keys,
            hash_kv: d.hash,
            compact_revision: d.compact_revision,
        }
    }
}

/// Suffix of an artifact's JSON record.
pub const SIDECAR_SUFFIX: &str = ".json";

/// The location of the artifact for `cluster` in `namespace` taken at
/// `taken_at`, under `destination`, stored with `encoding`.
pub fn artifact_location(
    destination: &Location,
    namespace: &str,
    cluster: &str,
    taken_at: Timestamp,
    encoding: &Encoding,
) -> Location {
    destination
        .join(namespace)
        .join(cluster)
        .join(&artifact_file_name(cluster, taken_at, encoding))
}

/// `<cluster>-<YYYYMMDD>-<HHMMSS>.db`, UTC, with the encoding's suffix.
pub fn artifact_file_name(cluster: &str, taken_at: Timestamp, encoding: &Encoding) -> String {
    format!(
        "{cluster}-{}.db{}",
        taken_at.strftime("%Y%m%d-%H%M%S"),
        encoding.suffix()
    )
}

/// Whether `uri` names a snapshot artifact (as opposed to a backup
/// destination): its name ends in `.db`, `.db.zst`, `.db.enc` or
/// `.db.zst.enc`.
pub fn is_snapshot_uri(uri: &str) -> bool {
    let uri = uri.trim();
    let uri = uri.strip_suffix(".enc").unwrap_or(uri);
    let uri = uri.strip_suffix(".zst").unwrap_or(uri);
    uri.ends_with(".db")
}

/// Where the record of the artifact at `artifact` is kept.
pub fn sidecar_location(artifact: &Location) -> Location {
    artifact.with_suffix(SIDECAR_SUFFIX)
}

/// `taken_at` truncated to whole seconds: the precision of the name, so the
/// name and the record agree.
pub fn whole_seconds(time: Timestamp) -> Timestamp {
    Timestamp::from_second(time.as_second()).unwrap_or(time)
}

pub(crate) async fn write_sidecar(store: &Store, artifact: &Artifact) -> Result<()> {
    let location = sidecar_location(&Location::parse(&artifact.uri)?);
    let json = serde_json::to_vec_pretty(artifact).map_err(|e| Error::BadSidecar {
        uri: location.to_string(),
        message: e.to_string(),
    })?;
    store.put_small(location.path(), Bytes::from(json)).await
}

/// Reads the record dkv wrote next to the artifact at `uri`. `Ok(None)`
/// when there is none.
pub async fn read_sidecar(config: &StoreConfig, uri: &str) -> Result<Option<Artifact>> {
    let artifact = Location::parse(uri)?;
    let location = sidecar_location(&artifact);
    let store = Store::open(&location, config)?;
    if !store.exists(location.path()).await? {
        return Ok(None);
    }
    let bytes = store.get_small(location.path()).await?;
    let record: Artifact = serde_json::from_slice(&bytes).map_err(|e| Error::BadSidecar {
        uri: location.to_string(),
        message: e.to_string(),
    })?;
    if record.uri != artifact.to_string() {
        return Err(Error::BadSidecar {
            uri: location.to_string(),
            message: format!("it describes {}, not {artifact}", record.uri),
        });
    }
    Ok(Some(record))
}

/// Deletes the artifact at `uri` and its record. Deleting what is already
/// gone succeeds, so retention and finalizers can simply retry.
pub async fn delete_artifact(config: &StoreConfig, uri: &str) -> Result<()> {
    let artifact = Location::parse(uri)?;
    let store = Store::open(&artifact, config)?;
    // The record first: an artifact without its record is still usable
    // with the sha256 from the DistributedKVBackup, a record without its
    // artifact is a lie.
    store.delete(sidecar_location(&artifact).path()).await?;
    store.delete(artifact.path()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn names_are_a_function_of_namespace_cluster_and_time() {
        let destination = Location::parse("s3://dkv-backups/prod/").unwrap();
        let location = artifact_location(
            &destination,
            "shop",
            "orders",
            time("2026-11-22T06:00:12.734Z"),
            &Encoding::plain(),
        );
        assert_eq!(
            location.to_string(),
            "s3://dkv-backups/prod/shop/orders/orders-20261122-060012.db"
        );
        let compressed =
            artifact_file_name("orders", time("2026-11-22T06:00:12Z"), &Encoding::default());
        assert_eq!(compressed, "orders-20261122-060012.db.zst");
        for uri in [
            &location.to_string(),
            &compressed,
            "x.db.zst.enc",
            "x.db.enc",
        ] {
            assert!(is_snapshot_uri(uri), "{uri}");
        }
        for uri in ["s3://b/prefix/", "file:///backups", "x.zst", "x.json"] {
            assert!(!is_snapshot_uri(uri), "{uri}");
        }
        assert_eq!(
            sidecar_location(&location).to_string(),
            "s3://dkv-backups/prod/shop/orders/orders-20261122-060012.db.json"
        );
        assert_eq!(
            whole_seconds(time("2026-11-22T06:00:12.734Z")),
            time("2026-11-22T06:00:12Z")
        );
    }

    #[test]
    fn the_record_is_camel_case_json() {
        let artifact = Artifact {
            uri: "s3://b/p/shop/orders/orders-20261122-060012.db".to_owned(),
            size_bytes: 20512,
            sha256: "ab".repeat(32),
            revision: 9912,
            etcd_version: "3.5.16".to_owned(),
            taken_at: time("2026-11-22T06:00:12Z"),
            compression: None,
            encryption_key_id: None,
            content: None,
        };
        let json = serde_json::to_value(&artifact).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "uri": "s3://b/p/shop/orders/orders-20261122-060012.db",
                "sizeBytes": 20512,
                "sha256": "ab".repeat(32),
                "revision": 9912,
                "etcdVersion": "3.5.16",
                "takenAt": "2026-11-22T06:00:12Z",
            })
        );
        let back: Artifact = serde_json::from_value(json).unwrap();
        assert_eq!(back, artifact);
    }

    #[tokio::test]
    async fn sidecars_are_written_read_checked_and_deleted_with_the_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/ns/c/c-20261122-060012.db", dir.path().display());
        let config = StoreConfig::default();
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &config).unwrap();
        store
            .put_small(location.path(), Bytes::from_static(b"snapshot"))
            .await
            .unwrap();
        assert_eq!(read_sidecar(&config, &uri).await.unwrap(), None);

        let artifact = Artifact {
            uri: uri.clone(),
            size_bytes: 8,
            sha256: "00".repeat(32),
            revision: 1,
            etcd_version: "3.5.16".to_owned(),
            taken_at: time("2026-11-22T06:00:12Z"),
            compression: Some("zstd".to_owned()),
            encryption_key_id: Some("0123456789abcdef".to_owned()),
            content: Some(Content {
                revision: 1,
                keys: 0,
                hash_kv: 7,
                compact_revision: 0,
            }),
        };
        write_sidecar(&store, &artifact).await.unwrap();
        assert_eq!(read_sidecar(&config, &uri).await.unwrap(), Some(artifact));

        // A record copied next to another object does not vouch for it.
        let other = format!("file://{}/ns/c/other.db", dir.path().display());
        std::fs::copy(
            dir.path().join("ns/c/c-20261122-060012.db.json"),
            dir.path().join("ns/c/other.db.json"),
        )
        .unwrap();
        let err = read_sidecar(&config, &other).await.unwrap_err();
        assert!(matches!(err, Error::BadSidecar { .. }), "{err}");

        delete_artifact(&config, &uri).await.unwrap();
        assert!(!dir.path().join("ns/c/c-20261122-060012.db").exists());
        assert!(!dir.path().join("ns/c/c-20261122-060012.db.json").exists());
        delete_artifact(&config, &uri).await.unwrap();
    }
}
