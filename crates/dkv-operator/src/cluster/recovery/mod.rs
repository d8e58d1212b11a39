//! Healing what etcd cannot heal by itself, as `spec.recovery` allows:
//! members on lost nodes ([`lost_node`], with whether the operator may see
//! Nodes at all, [`node_access`]) and members whose data differs from their
//! peers' ([`corruption`]).

pub mod corruption;
pub(crate) mod lost_node;
pub(crate) mod node_access;
