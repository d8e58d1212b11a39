//! TLS and authentication of a cluster's etcd: its certificates issued,
//! checked and renewed ([`certificates`], or by cert-manager,
//! [`cert_manager`]), its CA rotated with an overlap ([`ca_rotation`]),
//! etcd's root user and authentication ([`auth`]), and the credentials a
//! pass connects with ([`credentials`]). Which transports use TLS and where
//! their certificates come from is part of the validated spec
//! ([`crate::parts::tls`]).

pub(crate) mod auth;
pub(crate) mod ca_rotation;
pub(crate) mod cert_manager;
pub(crate) mod certificates;
pub(crate) mod credentials;
