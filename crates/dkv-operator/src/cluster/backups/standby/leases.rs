//! A standby holds no lease. Its seed is a restore, and a restore keeps
//! the source's leases (the snapshot's, and the replay's stand-ins): one
//! expiring on the standby would delete keys the source still holds, and
//! the standby would no longer be the source's copy — nor would its
//! revision tell its position, since the source's later delete of such a
//! key would change nothing here. So before the standby's position is
//! first recorded, every key attached to a lease is written again with
//! its value and no lease, and the lease, holding no key then, is revoked.
//! The follower applies every change without a lease from then on.

use etcd_client::{Client, Compare, CompareOp, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp};

use crate::cluster::error::{Error, Result};

fn failed(what: &str, e: &etcd_client::Error) -> Error {
    Error::Standby {
        message: format!("{what}: {e}"),
        transient: true,
    }
}

/// Detaches every key from its lease and revokes the leases; returns how
/// many keys it detached.
pub async fn detach_all(etcd: &mut Client) -> Result<usize> {
    let leases = etcd
        .leases()
        .await
        .map_err(|e| failed("listing the seed's leases", &e))?;
    let mut detached = 0;
    for lease in leases.leases() {
        let id = lease.id();
        let held = etcd
            .lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .map_err(|e| failed("listing the keys of a lease of the seed", &e))?;
        for key in held.keys() {
            let found = etcd
                .get(key.clone(), None)
                .await
                .map_err(|e| failed("reading a leased key of the seed", &e))?;
            // Written again only as read: a key its lease deleted (or a
            // client changed) meanwhile — a demoted cluster is live — is
            // left as it is now.
            if let Some(kv) = found.kvs().first().filter(|kv| kv.lease() == id) {
                let unchanged =
                    Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision());
                let put = TxnOp::put(key.clone(), kv.value().to_vec(), Some(PutOptions::new()));
                let written = etcd
                    .txn(Txn::new().when([unchanged]).and_then([put]))
                    .await
                    .map_err(|e| failed("detaching a key of the seed from its lease", &e))?;
                if written.succeeded() {
                    detached += 1;
                }
            }
        }
        match etcd.lease_revoke(id).await {
            Ok(_) => {}
            // Expired meanwhile: it held no key any more.
            Err(e) if e.to_string().contains("requested lease not found") => {}
            Err(e) => return Err(failed("revoking a lease of the seed", &e)),
        }
    }
    Ok(detached)
}
