//! Cluster DNS through hosts files: each pod's `/etc/hosts` carries the names cluster DNS would answer.
//!
//! The records follow the DNS specification for Services: a headless Service's name resolves to its published
//! endpoint addresses and each address with a hostname gets `hostname.service.namespace.svc`; a ClusterIP Service's
//! name resolves to its proxy address. Published addresses are the Endpoints' `addresses` (ready pods, or all with
//! `publishNotReadyAddresses`). Every name comes in the forms `.svc.cluster.local`, `.svc` and `name.namespace`, and
//! Services of the pod's own namespace also by their bare name (hosts files have no search path).
//!
//! The files are rewritten in place when the records change: a bind mount pins the inode, so a replaced file would
//! go unseen inside the pod.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::informer::{Caches, get};

pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// One address and the names it answers, with the namespace the names belong to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub ip: String,
    pub namespace: String,
    /// `name.namespace` forms; the `.svc` suffixes are added when written.
    pub relative: String,
    /// Whether the bare first label also resolves in the record's namespace.
    pub short: Option<String>,
}

/// The records of every Service, from the caches and the proxy addresses of ClusterIP Services.
pub fn cluster_records(
    caches: &Caches,
    proxies: &HashMap<(String, String), Ipv4Addr>,
) -> Vec<Record> {
    let mut out = BTreeSet::new();
    for svc in caches.services.state() {
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
        if !headless {
            if let Some(ip) = proxies.get(&(ns.clone(), name.clone())) {
                out.insert(Record {
                    ip: ip.to_string(),
                    namespace: ns.clone(),
                    relative: format!("{name}.{ns}"),
                    short: Some(name.clone()),
                });
            }
            continue;
        }
        let Some(ep) = get(&caches.endpoints, &ns, &name) else {
            continue;
        };
        for subset in ep.subsets.iter().flatten() {
            for a in subset.addresses.iter().flatten() {
                out.insert(Record {
                    ip: a.ip.clone(),
                    namespace: ns.clone(),
                    relative: format!("{name}.{ns}"),
                    short: Some(name.clone()),
                });
                if let Some(h) = &a.hostname {
                    out.insert(Record {
                        ip: a.ip.clone(),
                        namespace: ns.clone(),
                        relative: format!("{h}.{name}.{ns}"),
                        short: None,
                    });
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The hosts file of `pod` at `ip`.
pub fn hosts_file(pod: &Pod, ip: Ipv4Addr, records: &[Record]) -> String {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut s = String::from(
        "# Kubernetes-managed hosts file (kube-local).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    );
    let hostname = spec
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    match spec.and_then(|s| s.subdomain.as_deref()) {
        Some(sub) if !sub.is_empty() => s.push_str(&format!(
            "{ip}\t{hostname}.{sub}.{ns}.svc.{CLUSTER_DOMAIN}\t{hostname}.{sub}.{ns}.svc\t{hostname}\n"
        )),
        _ => s.push_str(&format!("{ip}\t{hostname}\n")),
    }
    for a in spec
        .and_then(|s| s.host_aliases.as_ref())
        .into_iter()
        .flatten()
    {
        s.push_str(&format!(
            "{}\t{}\n",
            a.ip,
            a.hostnames.clone().unwrap_or_default().join("\t")
        ));
    }
    s.push_str("# cluster DNS\n");
    let mut by_ip: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in records {
        let names = by_ip.entry(&r.ip).or_default();
        names.push(format!("{}.svc.{CLUSTER_DOMAIN}", r.relative));
        names.push(format!("{}.svc", r.relative));
        names.push(r.relative.clone());
        if let Some(short) = &r.short
            && r.namespace == ns
        {
            names.push(short.clone());
        }
    }
    for (ip, names) in by_ip {
        s.push_str(&format!("{ip}\t{}\n", names.join("\t")));
    }
    s
}

/// Rewrites `path` in place (same inode) when its content differs.
pub fn write_in_place(path: &Path, content: &str) -> std::io::Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    f.flush()
}
