//! What the nodes of one environment share on this host, as the nodes of a cluster share its network: the loopback
//! addresses handed to nodes, pods and Service proxies, the Service proxies themselves (kube-proxy's job, done once
//! for all nodes since they share the host), and the table of proxy addresses that every pod's hosts file lists.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, Weak};

use super::Shared;
use super::addresses::{Addresses, PodNetwork};
use crate::informer::Caches;

pub(crate) struct Network {
    pub client: kube::Client,
    pub caches: Caches,
    pub addresses: Addresses,
    /// Where the `kubernetes` Service leads: the API server.
    pub api_server: Option<std::net::SocketAddr>,
    /// Proxy addresses of ClusterIP Services.
    pub proxies: Mutex<HashMap<(String, String), Ipv4Addr>>,
    /// The running nodes' kubelets, whose pods' hosts files follow the proxy table.
    nodes: Mutex<Vec<Weak<Shared>>>,
}

impl Network {
    pub fn new(
        client: kube::Client,
        caches: Caches,
        api_server: Option<std::net::SocketAddr>,
        pod_network: PodNetwork,
    ) -> Network {
        Network {
            client,
            caches,
            addresses: Addresses::new(pod_network),
            api_server,
            proxies: Mutex::new(HashMap::new()),
            nodes: Mutex::new(Vec::new()),
        }
    }

    /// A node's kubelet joins: its pods' hosts files are rewritten whenever the proxy table changes.
    pub fn attach(&self, node: &Arc<Shared>) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.retain(|n| n.strong_count() > 0);
        nodes.push(Arc::downgrade(node));
    }

    pub fn proxy_table(&self) -> HashMap<(String, String), Ipv4Addr> {
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn proxy_address(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// Rewrites the hosts files of every running pod on every node.
    pub fn refresh_dns(&self) {
        let nodes: Vec<Arc<Shared>> = self
            .nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for node in nodes {
            node.refresh_dns();
        }
    }
}
