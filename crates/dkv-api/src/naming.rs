//! How a cluster's members are named: `<cluster>-<ordinal>`, the names of
//! its StatefulSet's pods, which etcd knows its members by too.
//!
//! Here, with the API, because the operator (which creates the members)
//! and `kubectl dkv` (which lists them in ordinal order) both read them.

/// Pod (and etcd member) name of ordinal `ordinal`.
pub fn member(cluster: &str, ordinal: i32) -> String {
    format!("{cluster}-{ordinal}")
}

/// Ordinal of a member (a StatefulSet pod) of this cluster, if `pod` names
/// one: `orders-4` is 4 for `orders`, and nothing for `orders2`.
pub fn ordinal_of(cluster: &str, pod: &str) -> Option<i32> {
    pod.strip_prefix(cluster)?.strip_prefix('-')?.parse().ok()
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
}
