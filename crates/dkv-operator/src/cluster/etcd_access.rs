//! How the controller reaches a cluster's etcd: a connector hands out an
//! [`EtcdAdmin`] for a set of member endpoints. Production connects over
//! gRPC and reuses connections across reconciles; tests inject a fake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dkv_etcd::{EtcdAdmin, GrpcAdmin};

/// Deadline of every etcd call the controller makes: a reconcile must not
/// hang on a member that does not answer.
pub const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(3);

pub trait EtcdConnector: Send + Sync {
    /// An admin for the members at `endpoints` (client URLs).
    fn connect(&self, endpoints: &[String]) -> Arc<dyn EtcdAdmin>;
}

/// gRPC connections, cached by endpoint set (a member restarting with a new
/// IP changes the set, and with it the connection).
#[derive(Default)]
pub struct GrpcConnector {
    cache: Mutex<HashMap<Vec<String>, Arc<GrpcAdmin>>>,
}

impl EtcdConnector for GrpcConnector {
    fn connect(&self, endpoints: &[String]) -> Arc<dyn EtcdAdmin> {
        let mut key = endpoints.to_vec();
        key.sort();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: one entry per cluster in the steady state; stale sets
        // (after IP changes) are dropped wholesale when the cache grows.
        if cache.len() > 4096 {
            cache.clear();
        }
        cache
            .entry(key.clone())
            .or_insert_with(|| Arc::new(GrpcAdmin::new(key, ETCD_CALL_TIMEOUT)))
            .clone()
    }
}

/// Always the same admin (a `FakeEtcd` in tests).
pub struct FixedConnector(pub Arc<dyn EtcdAdmin>);

impl EtcdConnector for FixedConnector {
    fn connect(&self, _endpoints: &[String]) -> Arc<dyn EtcdAdmin> {
        self.0.clone()
    }
}
