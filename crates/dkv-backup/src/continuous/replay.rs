//! Replaying a chain's segments into a cluster restored from its base: the
//! second half of a point-in-time restore.
//!
//! The changes are written again in order, consecutive source revisions
//! that touch different keys together in one transaction
//! ([`dkv_etcd::replay_transactions`]): the restored cluster ends with the
//! source's keys and values at the target, under revisions of its own
//! (renumbered, and fewer than the source's). Events after the plan's
//! target are not applied.

use dkv_etcd::EtcdData;

use super::archive::read_events;
use super::chain::{ReplayPlan, applies};
use super::recorder::change_of;
use crate::encryption::Keyring;
use crate::error::{Error, Result};
use crate::store::Store;

/// TTL of the leases replay grants again (the source's remaining time is
/// not recorded): clients that still hold a session renew it; keys of
/// sessions that are gone expire a minute after the restore.
pub const REPLAYED_LEASE_TTL_SECONDS: i64 = 60;

/// What a replay applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Replayed {
    pub events: u64,
    /// The newest source revision applied (the base's when none was).
    pub source_revision: i64,
}

/// Applies the events of `plan`'s segments up to its target to `etcd`, a
/// cluster just restored from the plan's base snapshot (or empty, for a
/// chain that starts at an empty cluster).
///
/// The base's recorded revision is a lower bound: the snapshot may hold a
/// few writes after it (made while it was taken). The restored cluster's
/// own revision tells which: events up to it are already there and are
/// skipped; a target before it cannot be reached from this base.
/// Encrypted segments are decrypted with `keys`.
pub async fn replay_plan(
    etcd: &dyn EtcdData,
    store: &Store,
    plan: &ReplayPlan,
    keys: &Keyring,
    revision_offset: i64,
) -> Result<Replayed> {
    // The restored members started `revision_offset` revisions above the
    // base snapshot's (`--bump-revision`). Before any replay the restored
    // revision less the offset is the source's revision the snapshot holds;
    // after a replay cut short it is at most the source revision reached
    // (several source revisions share a transaction), so a replay that
    // goes on applies some changes again, which leaves the same keys and
    // values.
    let restored = etcd.current_revision().await.map_err(|cause| Error::Etcd {
        operation: "reading the restored cluster's revision",
        cause,
    })? - revision_offset;
    if let Some(until) = plan.until_revision
        && until < restored
    {
        return Err(Error::InvalidArgument(format!(
            "the base snapshot {} already holds revisions up to {restored}, after the target {until}; restore from an earlier chain or to a later point",
            plan.base.uri
        )));
    }
    let mut replayed = Replayed {
        events: 0,
        source_revision: restored.max(plan.base.revision),
    };
    for segment in &plan.segments {
        let changes: Vec<_> = read_events(store, segment, keys)
            .await?
            .into_iter()
            .filter(|e| e.revision > restored && applies(plan, e.revision, e.received_ms))
            .map(change_of)
            .collect();
        if changes.is_empty() {
            continue;
        }
        etcd.apply_changes(&changes, REPLAYED_LEASE_TTL_SECONDS)
            .await
            .map_err(|cause| Error::Etcd {
                operation: "replay of continuous backup",
                cause,
            })?;
        replayed.events += changes.len() as u64;
        replayed.source_revision = changes
            .last()
            .map_or(replayed.source_revision, |c| c.revision);
    }
    Ok(replayed)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use etcd_client::{PutOptions, Txn, TxnOp};
    use jiff::Timestamp;

    use super::super::archive::{chain_location, continuous_location, read_chain};
    use super::super::chain::{Base, Target, chains, plan};
    use super::super::cutter::{CutSettings, Cutter};
    use super::super::recorder::{Until, record};
    use super::*;
    use crate::location::Location;
    use crate::store::StoreConfig;
    use crate::testing::{EtcdProcess, etcd_bin_dir, loopback_ip};

    /// A source cluster is recorded from its first revision while puts,
    /// multi-key transactions, deletes and leased keys happen; a fresh
    /// cluster replayed to a revision in the middle holds exactly the
    /// source's keys and values at that revision, and one replayed to the
    /// newest point the source's current state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recorded_cluster_replays_to_any_revision_of_its_chain() {
        let work = tempfile::tempdir().unwrap();
        let bin = etcd_bin_dir("3.5");
        let source = EtcdProcess::start(
            &bin,
            "source",
            &loopback_ip(40, 0),
            &work.path().join("source"),
            "source",
        );
        source.wait_ready().await;
        let mut writer = source.client().await;
        let admin =
            dkv_etcd::GrpcAdmin::new(vec![source.client_url.clone()], Duration::from_secs(5));
        let base_revision = admin.current_revision().await.unwrap();

        let destination =
            Location::parse(&format!("file://{}/", work.path().join("bucket").display())).unwrap();
        std::fs::create_dir_all(work.path().join("bucket")).unwrap();
        let store = Store::open(&destination, &StoreConfig::default()).unwrap();
        let chain_dir =
            chain_location(&continuous_location(&destination, "shop", "orders"), "base");
        let settings = CutSettings {
            interval: Duration::from_millis(300),
            max_segment_bytes: 2048,
            ..CutSettings::default()
        };
        let mut cutter = Cutter::start("base", base_revision, settings, Timestamp::now());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let recording = {
            let (admin, store, chain_dir) =
                (admin.clone_unconnected(), store.clone(), chain_dir.clone());
            tokio::spawn(async move {
                record(
                    &admin,
                    &store,
                    &chain_dir,
                    &mut cutter,
                    async {
                        let _ = stop_rx.await;
                    },
                    Until::Stopped,
                    |_| {},
                )
                .await
            })
        };

        for i in 0..40 {
            writer
                .put(format!("k{i:02}"), format!("v{i}"), None)
                .await
                .unwrap();
        }
        writer
            .txn(Txn::new().and_then(vec![
                TxnOp::put("t1", "a", None),
                TxnOp::put("t2", "b", None),
                TxnOp::delete("k00", None),
            ]))
            .await
            .unwrap();
        let lease = writer.lease_grant(600, None).await.unwrap().id();
        writer
            .put(
                "session",
                "alive",
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .unwrap();
        let middle = writer
            .put("k05", "changed", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        writer
            .delete("k1", Some(etcd_client::DeleteOptions::new().with_prefix()))
            .await
            .unwrap();
        for i in 0..20 {
            writer
                .put(format!("late{i}"), vec![b'x'; 300], None)
                .await
                .unwrap();
        }
        let newest = admin.current_revision().await.unwrap();

        tokio::time::sleep(Duration::from_millis(800)).await;
        let _ = stop_tx.send(());
        recording.await.unwrap().unwrap();

        let listed = read_chain(&store, &chain_dir, &Keyring::default())
            .await
            .unwrap();
        assert!(
            listed.len() >= 2,
            "cut by size and time: {} segments",
            listed.len()
        );
        let base = Base {
            chain: "base".into(),
            revision: base_revision,
            taken_at: Timestamp::now(),
            uri: String::new(),
        };
        let built = chains(&[base], &listed);
        assert_eq!(built[0].broken, None);
        assert_eq!(built[0].last_revision(), newest);

        for (ordinal, (target, revision)) in
            [(Target::Revision(middle), middle), (Target::Latest, newest)]
                .into_iter()
                .enumerate()
        {
            let restored = EtcdProcess::start(
                &bin,
                "restored",
                &loopback_ip(41, ordinal as u8),
                &work.path().join(format!("restored-{revision}")),
                "restored",
            );
            restored.wait_ready().await;
            let into =
                dkv_etcd::GrpcAdmin::new(vec![restored.client_url.clone()], Duration::from_secs(5));
            let planned = plan(&built, target).unwrap();
            let replayed = replay_plan(&into, &store, &planned, &Keyring::default(), 0)
                .await
                .unwrap();
            assert_eq!(replayed.source_revision, revision);
            // Source revisions travel several to a transaction: the
            // restored cluster took fewer revisions than the source did.
            let source_revisions = revision - base_revision;
            let restored_revisions = into.current_revision().await.unwrap() - 1;
            assert!(
                (1..source_revisions).contains(&restored_revisions),
                "{source_revisions} source revisions replayed in {restored_revisions} transactions"
            );
            let mut reader = restored.client().await;
            assert_eq!(
                restored.key_values_at(0).await,
                source.key_values_at(revision).await,
                "the restored keys and values equal the source's at revision {revision}"
            );
            let session = reader.get("session", None).await.unwrap();
            assert_eq!(session.kvs()[0].lease(), lease, "the key keeps its lease");

            // A replay that goes on after a restart starts at or before
            // where the first stopped (here: long before): the changes it
            // applies again leave the same keys and values.
            replay_plan(&into, &store, &planned, &Keyring::default(), 0)
                .await
                .unwrap();
            assert_eq!(
                restored.key_values_at(0).await,
                source.key_values_at(revision).await,
                "replayed again, the keys and values still equal the source's at revision {revision}"
            );
        }
    }
}
