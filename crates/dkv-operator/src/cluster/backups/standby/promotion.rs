//! The record a promoted standby leaves in its own backup destination:
//! which cluster it followed, the newest revision of that cluster it held,
//! and its own revision then — the same data under two numberings.
//!
//! A switchover reads it from the other side: the old primary, demoted,
//! waits for the standby it names as its new source to be promoted, and
//! follows it only if that standby was promoted holding exactly the
//! revision the demoted cluster ended at ([`super::demotion`]). Its own
//! revision less the record's `revision` is then its offset, and it goes
//! on from the new primary's changes after `revision`, which the new
//! primary's continuous backup records in the chain it has kept since it
//! was seeded.

use dkv_backup::{Location, Store, StoreErrorKind};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::cluster::backups::BackupsReach;
use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;

/// The object's name, beside the cluster's `continuous/` directory.
const RECORD: &str = "standby-promotion.json";
/// The record's format, as written today.
pub const FORMAT: &str = "dkv-standby-promotion/1";

/// A standby's promotion, as its own destination records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromotionRecord {
    pub format: String,
    /// The promoted cluster, `NAMESPACE/NAME`.
    pub cluster: String,
    /// The cluster it followed, `NAMESPACE/NAME`.
    pub source: String,
    /// That cluster's backup destination.
    pub source_uri: String,
    /// The newest revision of the source it held when promoted.
    pub source_revision: i64,
    /// Its own revision then.
    pub revision: i64,
    pub time: Timestamp,
}

/// Where `namespace/cluster`'s promotion is recorded in `destination`.
pub fn location(destination: &Location, namespace: &str, cluster: &str) -> Location {
    destination.join(namespace).join(cluster).join(RECORD)
}

/// Records `record` at `at` (replacing an older promotion's).
pub async fn write(
    store: &Store,
    at: &Location,
    record: &PromotionRecord,
) -> dkv_backup::Result<()> {
    // A struct of strings, numbers and a timestamp always serializes.
    let bytes = serde_json::to_vec_pretty(record).unwrap_or_default();
    store.put_small(at.path(), bytes.into()).await
}

/// The promotion recorded at `at`, if any.
pub async fn read(store: &Store, at: &Location) -> dkv_backup::Result<Option<PromotionRecord>> {
    let bytes = match store.get_small(at.path()).await {
        Ok(bytes) => bytes,
        Err(dkv_backup::Error::Store {
            kind: StoreErrorKind::NotFound,
            ..
        }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let record: PromotionRecord =
        serde_json::from_slice(&bytes).map_err(|e| dkv_backup::Error::BadSidecar {
            uri: at.to_string(),
            message: e.to_string(),
        })?;
    if record.format != FORMAT {
        return Err(dkv_backup::Error::BadSidecar {
            uri: at.to_string(),
            message: format!(
                "format {:?}, this operator reads {FORMAT:?}: written by a newer operator",
                record.format
            ),
        });
    }
    Ok(Some(record))
}

/// Records the promotion of `cluster` — holding `source_revision` of its
/// source, its own revision then `offset` more — in its own backup
/// destination, for the cluster it followed to follow it in turn; returns
/// whether it did. A cluster with no backup destination has no one to
/// tell.
pub async fn record(
    cluster: &ValidatedCluster,
    (source_revision, offset, time): (i64, i64, Timestamp),
    reach: &BackupsReach<'_>,
) -> Result<bool> {
    let (Some(backup), Some(standby)) = (cluster.backup.as_ref(), cluster.standby.as_ref()) else {
        return Ok(false);
    };
    let failed = |message: String| Error::Standby {
        message,
        transient: true,
    };
    let Some(config) = crate::cluster::backups::store_config(
        reach,
        &cluster.namespace,
        backup.credentials_secret.as_deref(),
    )
    .await?
    else {
        return Err(failed(format!(
            "recording the promotion: the backup credentials Secret {:?} (spec.backup.destination.credentialsSecret) does not exist",
            backup.credentials_secret.as_deref().unwrap_or_default()
        )));
    };
    let written = async {
        let destination = Location::parse(backup.destination.as_str())?;
        let store = Store::open(&destination, &config)?;
        let at = location(&destination, &cluster.namespace, &cluster.name);
        let record = PromotionRecord {
            format: FORMAT.to_owned(),
            cluster: format!("{}/{}", cluster.namespace, cluster.name),
            source: format!("{}/{}", standby.source.namespace, standby.source.cluster),
            source_uri: standby.source.destination.as_str().to_owned(),
            source_revision,
            revision: source_revision + offset,
            time,
        };
        write(&store, &at, &record).await
    };
    written.await.map(|()| true).map_err(|e| {
        failed(format!(
            "recording the promotion in the backup destination: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_promotion_is_read_back_as_written_and_none_before() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let destination = Location::parse(&format!("file://{}/", dir.path().display()))
            .expect("a file destination");
        let store =
            Store::open(&destination, &dkv_backup::StoreConfig::default()).expect("a file store");
        let at = location(&destination, "shop", "orders-dr");
        assert_eq!(read(&store, &at).await.expect("reading"), None);
        let record = PromotionRecord {
            format: FORMAT.to_owned(),
            cluster: "shop/orders-dr".to_owned(),
            source: "shop/orders".to_owned(),
            source_uri: "s3://backups/orders/".to_owned(),
            source_revision: 1234,
            revision: 1_000_001_234,
            time: Timestamp::UNIX_EPOCH,
        };
        write(&store, &at, &record).await.expect("writing");
        assert_eq!(
            read(&store, &at).await.expect("reading"),
            Some(record.clone())
        );
        // A record from a newer operator is not guessed at.
        let newer = PromotionRecord {
            format: "dkv-standby-promotion/2".to_owned(),
            ..record
        };
        write(&store, &at, &newer).await.expect("writing");
        let err = read(&store, &at).await.expect_err("a newer format");
        assert!(err.to_string().contains("newer operator"), "{err}");
    }
}
