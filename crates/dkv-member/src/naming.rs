//! How a cluster's members are named and reached: `<cluster>-<ordinal>`,
//! the names of its StatefulSet's pods, which etcd knows its members by
//! too; their DNS names through the peer Service; the Secret of the etcd
//! root user's credentials.
//!
//! Here, with the member side, because `member-init` names its peers by
//! them, and the operator (which creates the members) and `kubectl dkv`
//! (which lists them in ordinal order and runs etcdctl against them) read
//! them from here.

/// The port members serve clients on.
pub const CLIENT_PORT: i32 = 2379;
/// The port members talk to each other on.
pub const PEER_PORT: i32 = 2380;
/// The port of members' `/metrics` and `/health`.
pub const METRICS_PORT: i32 = 2381;

/// Pod (and etcd member) name of ordinal `ordinal`.
pub fn member(cluster: &str, ordinal: i32) -> String {
    format!("{cluster}-{ordinal}")
}

/// Ordinal of a member (a StatefulSet pod) of this cluster, if `pod` names
/// one: `orders-4` is 4 for `orders`, and nothing for `orders2`.
pub fn ordinal_of(cluster: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(cluster)?.strip_prefix('-')?.parse().ok()
}

/// Headless Service giving each member a stable DNS name for peer traffic.
pub fn peer_service(cluster: &str) -> String {
    format!("{cluster}-peer")
}

/// Stable DNS name of the member named `member` through the peer Service.
pub fn host_of_member(cluster: &str, namespace: &str, member: &str) -> String {
    format!("{member}.{}.{namespace}.svc", peer_service(cluster))
}

/// The Secret holding the etcd root user's credentials (`username`,
/// `password`; `spec.auth.enabled`).
pub fn auth_secret(cluster: &str) -> String {
    format!("{cluster}-etcd-root")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinal_parsing_rejects_other_clusters_pods() {
        assert_eq!(ordinal_of("orders", "orders-4"), Some(4));
        assert_eq!(ordinal_of("orders", "orders-x"), None);
        assert_eq!(ordinal_of("orders", "orders2-1"), None);
    }

    #[test]
    fn a_members_name_gives_back_its_ordinal() {
        assert_eq!(member("orders", 10), "orders-10");
        assert_eq!(ordinal_of("orders", &member("orders", 10)), Some(10));
    }

    #[test]
    fn members_are_reached_through_the_peer_service() {
        assert_eq!(
            host_of_member("orders", "shop", "orders-1"),
            "orders-1.orders-peer.shop.svc"
        );
    }
}
