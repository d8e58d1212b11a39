//! How the controller reaches a cluster's etcd: a connector hands out an
//! [`EtcdAdmin`] for a set of member endpoints. Production connects over
//! gRPC and reuses connections across reconciles; tests inject a fake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dkv_etcd::{ClientTls, EtcdAdmin, GrpcAdmin, UserCredentials};

/// Deadline of every etcd call the controller makes: a reconcile must not
/// hang on a member that does not answer.
pub const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(3);

pub trait EtcdConnector: Send + Sync {
    /// An admin for the members at `endpoints` (client URLs), presenting
    /// `tls` to a cluster with client TLS and authenticating as `user` to
    /// one with authentication on.
    fn connect(
        &self,
        endpoints: &[String],
        tls: Option<&ClientTls>,
        user: Option<&UserCredentials>,
    ) -> Arc<dyn EtcdAdmin>;
}

/// gRPC connections, cached by endpoint set and identity (a member
/// restarting with a new IP changes the set, and with it the connection).
#[derive(Default)]
pub struct GrpcConnector {
    cache: Mutex<HashMap<ConnectionKey, Arc<GrpcAdmin>>>,
}

/// The sorted endpoints and the identity presented to them.
type ConnectionKey = (Vec<String>, Option<ClientTls>, Option<UserCredentials>);

impl EtcdConnector for GrpcConnector {
    fn connect(
        &self,
        endpoints: &[String],
        tls: Option<&ClientTls>,
        user: Option<&UserCredentials>,
    ) -> Arc<dyn EtcdAdmin> {
        let mut endpoints = endpoints.to_vec();
        endpoints.sort();
        let key = (endpoints, tls.cloned(), user.cloned());
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: one entry per cluster in the steady state; stale sets
        // (after IP changes) are dropped wholesale when the cache grows.
        if cache.len() > 4096 {
            cache.clear();
        }
        cache
            .entry(key.clone())
            .or_insert_with(|| {
                let (endpoints, tls, user) = key;
                let mut admin = GrpcAdmin::new(endpoints, ETCD_CALL_TIMEOUT);
                if let Some(tls) = tls {
                    admin = admin.with_tls(tls);
                }
                if let Some(user) = user {
                    admin = admin.with_user(user);
                }
                Arc::new(admin)
            })
            .clone()
    }
}

/// Always the same admin (a `FakeEtcd` in tests).
pub struct FixedConnector(pub Arc<dyn EtcdAdmin>);

impl EtcdConnector for FixedConnector {
    fn connect(
        &self,
        _endpoints: &[String],
        _tls: Option<&ClientTls>,
        _user: Option<&UserCredentials>,
    ) -> Arc<dyn EtcdAdmin> {
        self.0.clone()
    }
}
