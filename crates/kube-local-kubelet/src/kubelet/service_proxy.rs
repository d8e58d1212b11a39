//! A user-space service proxy: each ClusterIP Service gets a loopback address on which every Service port listens and
//! forwards connections to a ready endpoint of its EndpointSlices (as kube-proxy reads them), round-robin. Pods reach
//! it by the Service's DNS name (see [`super::dns`]);
//! the host reaches it at [`super::Kubelet::service_address`]. One proxy serves the pods of every node.
//!
//! LoadBalancer Services get the proxy address as their `status.loadBalancer.ingress`.
//!
//! The Service's own `clusterIP` is not routable on a machine without kube-proxy, hence a separate address.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::network::Network;
use crate::informer::run_loop;
use crate::meta::SERVICE_NAME_LABEL;

/// The listeners of one Service (aborted when dropped).
struct Proxy {
    ip: Ipv4Addr,
    /// Service port → its listener task; re-created when the ports change.
    ports: Vec<(i32, String, JoinHandle<()>)>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for (_, _, t) in &self.ports {
            t.abort();
        }
    }
}

fn wants_proxy(svc: &Service) -> bool {
    let Some(spec) = &svc.spec else { return false };
    spec.type_.as_deref() != Some("ExternalName")
        && spec
            .cluster_ip
            .as_deref()
            .is_some_and(|ip| ip != "None" && !ip.is_empty())
}

/// Keeps one proxy per ClusterIP Service.
pub async fn run(shared: Arc<Network>) {
    let mut proxies: HashMap<(String, String), Proxy> = HashMap::new();
    let changes = shared.caches.changes();
    let shared2 = shared.clone();
    run_loop(changes, move || {
        let shared = shared2.clone();
        let mut changed = false;
        let services = shared.caches.services.state();
        let mut live = std::collections::HashSet::new();
        for svc in services.iter().filter(|s| wants_proxy(s)) {
            let ns = svc.metadata.namespace.clone().unwrap_or_default();
            let name = svc.metadata.name.clone().unwrap_or_default();
            let key = (ns.clone(), name.clone());
            live.insert(key.clone());
            let ports: Vec<(i32, String)> = svc
                .spec
                .iter()
                .flat_map(|s| s.ports.iter().flatten())
                .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
                .map(|p| (p.port, p.name.clone().unwrap_or_default()))
                .collect();
            let proxy = proxies.entry(key.clone()).or_insert_with(|| {
                changed = true;
                Proxy {
                    ip: shared.addresses.allocate(),
                    ports: Vec::new(),
                }
            });
            if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer") {
                publish_ingress(&shared, svc, proxy.ip);
            }
            let current: Vec<(i32, String)> = proxy
                .ports
                .iter()
                .map(|(p, n, _)| (*p, n.clone()))
                .collect();
            if current != ports {
                for (_, _, t) in proxy.ports.drain(..) {
                    t.abort();
                }
                let counter = Arc::new(AtomicUsize::new(0));
                for (port, port_name) in ports {
                    // Bound here, before the address is published (DNS, `service_address`): a client that finds
                    // it can connect at once.
                    let listener = match bind(proxy.ip, port) {
                        Ok(listener) => listener,
                        Err(e) => {
                            tracing::warn!(ip = %proxy.ip, port, error = %e, "service proxy cannot listen");
                            continue;
                        }
                    };
                    let task = tokio::spawn(serve(
                        shared.clone(),
                        listener,
                        ns.clone(),
                        name.clone(),
                        port_name.clone(),
                        counter.clone(),
                    ));
                    proxy.ports.push((port, port_name, task));
                }
            }
        }
        let before = proxies.len();
        proxies.retain(|k, p| {
            let keep = live.contains(k);
            if !keep {
                shared.addresses.release(p.ip);
            }
            keep
        });
        changed |= before != proxies.len();
        if changed {
            let map: HashMap<(String, String), Ipv4Addr> =
                proxies.iter().map(|(k, p)| (k.clone(), p.ip)).collect();
            *shared.proxies.lock().unwrap_or_else(|e| e.into_inner()) = map;
            shared.refresh_dns();
        }
        async { None }
    })
    .await;
}

/// A LoadBalancer Service's external address is its proxy's, as a cloud load balancer's would be.
fn publish_ingress(shared: &Arc<Network>, svc: &Service, ip: Ipv4Addr) {
    let published = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| {
            i.iter()
                .any(|i| i.ip.as_deref() == Some(ip.to_string().as_str()))
        });
    if published {
        return;
    }
    let api: kube::Api<Service> = kube::Api::namespaced(
        shared.client.clone(),
        svc.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = svc.metadata.name.clone().unwrap_or_default();
    let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
    tokio::spawn(async move {
        let _ = api
            .patch_status(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await;
    });
}

/// The ready endpoints of a Service port, from the Service's EndpointSlices as kube-proxy reads them: an endpoint
/// whose `ready` condition is unset counts as ready.
fn backends(slices: &[Arc<EndpointSlice>], port_name: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in slices.iter().filter(|s| s.address_type == "IPv4") {
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref().unwrap_or_default() == port_name)
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        let ready = slice
            .endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false));
        for endpoint in ready {
            for address in &endpoint.addresses {
                if let Ok(ip) = address.parse::<Ipv4Addr>() {
                    out.push(SocketAddr::from((ip, port)));
                }
            }
        }
    }
    out
}

/// The EndpointSlices of a Service.
fn slices_of(shared: &Network, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
    shared.caches.endpoint_slices.state_filter(|s| {
        s.metadata.namespace.as_deref() == Some(namespace)
            && s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .is_some_and(|n| n == service)
    })
}

/// A listener on `ip:port`, bound synchronously with the standard library and handed to tokio.
///
/// Not `tokio::net::TcpListener::bind` from the async task that serves it: in release builds (rustc 1.95, tokio
/// 1.54, mio 1.2) that call, compiled into this crate's spawned future, reached `bind(2)` with a zeroed
/// `sockaddr_in` — the proxy listened on `0.0.0.0:<random>` and nothing on the Service's address (seen with
/// `strace` and `gdb` at `bind`; the same call in a small program, and in debug builds, binds correctly).
fn bind(ip: Ipv4Addr, port: i32) -> std::io::Result<TcpListener> {
    let port = u16::try_from(port).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("port {port} out of range"),
        )
    })?;
    let listener = std::net::TcpListener::bind(SocketAddr::from((ip, port)))?;
    listener.set_nonblocking(true)?;
    TcpListener::from_std(listener)
}

/// Accepts connections on a Service port and forwards each to a ready endpoint.
async fn serve(
    shared: Arc<Network>,
    listener: TcpListener,
    namespace: String,
    service: String,
    port_name: String,
    counter: Arc<AtomicUsize>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        // The `kubernetes` Service leads to the API server, whose endpoint the API server itself would publish.
        let api = (namespace == "default" && service == "kubernetes")
            .then_some(shared.api_server)
            .flatten();
        let candidates = match api {
            Some(address) => vec![address],
            None => backends(&slices_of(&shared, &namespace, &service), &port_name),
        };
        if candidates.is_empty() {
            // No ready endpoint: refuse, as kube-proxy's reject rule does.
            drop(inbound);
            continue;
        }
        let start = counter.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            for i in 0..candidates.len() {
                let backend = candidates[(start + i) % candidates.len()];
                if let Ok(mut outbound) = TcpStream::connect(backend).await {
                    let mut inbound = inbound;
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
            }
        });
    }
}
