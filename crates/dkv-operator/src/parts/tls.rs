//! TLS of a cluster's etcd (`spec.tls`): which transports use it, where
//! their certificates come from, and where pods find them.
//!
//! Each transport's certificates come from one [`CertificateSource`]: issued by dkv
//! from the cluster's own CA (`Auto`), `Provided` by the user, or issued by
//! cert-manager. The operator obtains and checks them in
//! [`crate::cluster::security::certificates`]; this module only says which Secrets hold them,
//! the names they carry and how member and backup pods mount them.
//!
//! The checks of `spec.tls` at admission and in the controller are in
//! the cluster controller's validation.

use dkv_api::distributedkv::v1beta1::{IssuerReference, TlsMode, TlsSpec};
use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume, VolumeMount};

use super::naming;

pub use dkv_member::layout::{
    CA_CERT, MEMBER_TLS_DIR, PEER_TLS_DIR, SERVER_TLS_DIR, TLS_CERT, TLS_KEY,
};
/// Where backup agents find the client certificate.
pub const CLIENT_TLS_DIR: &str = "/etc/dkv/tls/client";
/// Common name of the client certificate (what etcd's auth would map to a
/// user, were it on).
pub const CLIENT_COMMON_NAME: &str = "dkv-client";
const MEMBER_TLS_VOLUME: &str = "member-tls";
const CLIENT_TLS_VOLUME: &str = "client-tls";
const PEER_TLS_VOLUME: &str = "peer-tls";
const SERVER_TLS_VOLUME: &str = "server-tls";

/// Which of a cluster's transports use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TlsSettings {
    pub peer: bool,
    pub client: bool,
}

impl TlsSettings {
    /// What `spec.tls` asks for; without it, plaintext.
    pub fn from_spec(spec: Option<&TlsSpec>) -> Self {
        spec.map_or_else(Self::default, |tls| Self {
            peer: tls.peer.mode != TlsMode::Disabled,
            client: tls.client.mode != TlsMode::Disabled,
        })
    }

    pub fn any(self) -> bool {
        self.peer || self.client
    }

    pub fn peer_scheme(self) -> &'static str {
        scheme(self.peer)
    }

    pub fn client_scheme(self) -> &'static str {
        scheme(self.client)
    }
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

/// Where one transport's certificates come from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CertificateSource {
    #[default]
    Disabled,
    /// Issued by dkv from the cluster's CA.
    Auto,
    /// In the user's Secrets; `client_secret` only for the client transport.
    Provided {
        secret: String,
        client_secret: Option<String>,
    },
    /// Issued by cert-manager through Certificates dkv creates.
    CertManager { issuer: IssuerReference },
}

/// The sources of both transports (`spec.tls`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sources {
    pub peer: CertificateSource,
    pub client: CertificateSource,
}

impl Sources {
    pub fn from_spec(spec: Option<&TlsSpec>) -> Self {
        let source = |t: &dkv_api::distributedkv::v1beta1::TlsTransport| match t.mode {
            TlsMode::Disabled => CertificateSource::Disabled,
            TlsMode::Auto => CertificateSource::Auto,
            // Admission requires the references; a spec written past it
            // without them reads as the reference's absence (reported by
            // the check as a missing Secret named "").
            TlsMode::Provided => CertificateSource::Provided {
                secret: t
                    .secret_ref
                    .as_ref()
                    .map(|r| r.name.clone())
                    .unwrap_or_default(),
                client_secret: t.client_secret_ref.as_ref().map(|r| r.name.clone()),
            },
            TlsMode::CertManager => CertificateSource::CertManager {
                issuer: t.issuer_ref.clone().unwrap_or_default(),
            },
        };
        spec.map_or_else(Self::default, |tls| Self {
            peer: source(&tls.peer),
            client: source(&tls.client),
        })
    }

    pub fn any(&self, wanted: impl Fn(&CertificateSource) -> bool) -> bool {
        wanted(&self.peer) || wanted(&self.client)
    }

    /// The Secret whose certificate members present to each other.
    pub fn peer_secret(&self, cluster: &str) -> Option<String> {
        match &self.peer {
            CertificateSource::Disabled => None,
            CertificateSource::Auto => Some(naming::tls_member_secret(cluster)),
            CertificateSource::Provided { secret, .. } => Some(secret.clone()),
            CertificateSource::CertManager { .. } => Some(naming::tls_peer_secret(cluster)),
        }
    }

    /// The Secret whose certificate members present to clients.
    pub fn server_secret(&self, cluster: &str) -> Option<String> {
        match &self.client {
            CertificateSource::Disabled => None,
            CertificateSource::Auto => Some(naming::tls_member_secret(cluster)),
            CertificateSource::Provided { secret, .. } => Some(secret.clone()),
            CertificateSource::CertManager { .. } => Some(naming::tls_server_secret(cluster)),
        }
    }

    /// The Secret whose client certificate the operator and backup agents
    /// present to members.
    pub fn client_secret(&self, cluster: &str) -> Option<String> {
        match &self.client {
            CertificateSource::Disabled => None,
            CertificateSource::Auto | CertificateSource::CertManager { .. } => {
                Some(naming::tls_client_secret(cluster))
            }
            CertificateSource::Provided { client_secret, .. } => client_secret.clone(),
        }
    }

    /// The Secrets members mount, without repeats (one when both
    /// transports share a certificate).
    pub fn member_secrets(&self, cluster: &str) -> Vec<String> {
        let mut names: Vec<String> = self.peer_secret(cluster).into_iter().collect();
        if let Some(server) = self.server_secret(cluster)
            && !names.contains(&server)
        {
            names.push(server);
        }
        names
    }
}

/// The names in the member certificate.
pub fn member_hosts(cluster: &str, namespace: &str) -> Vec<String> {
    let peer = naming::peer_service(cluster);
    let client = naming::client_service(cluster);
    vec![
        format!("*.{peer}.{namespace}.svc"),
        format!("*.{peer}.{namespace}.svc.cluster.local"),
        format!("{client}.{namespace}.svc"),
        format!("{client}.{namespace}.svc.cluster.local"),
        format!("{client}.{namespace}"),
        client,
        "localhost".to_owned(),
    ]
}

/// The name clients verify members by: the client Service's.
pub fn server_name(cluster: &str, namespace: &str) -> String {
    format!("{}.{namespace}.svc", naming::client_service(cluster))
}

fn secret_volume(volume: &str, secret: String) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            // Readable by the owner and the pod's fsGroup (the user etcd and
            // the agents run as), nobody else.
            default_mode: Some(0o440),
            items: Some(
                [TLS_CERT, TLS_KEY, CA_CERT]
                    .into_iter()
                    .map(|key| KeyToPath {
                        key: key.to_owned(),
                        path: key.to_owned(),
                        ..KeyToPath::default()
                    })
                    .collect(),
            ),
            optional: Some(false),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn read_only_mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The certificate volumes of member pods, where the containers mount them
/// and the flags that tell `member-init` where they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemberMounts {
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub args: Vec<String>,
}

pub fn member_mounts(cluster: &str, sources: &Sources) -> MemberMounts {
    match (sources.peer_secret(cluster), sources.server_secret(cluster)) {
        (Some(peer), Some(server)) if peer != server => MemberMounts {
            volumes: vec![
                secret_volume(PEER_TLS_VOLUME, peer),
                secret_volume(SERVER_TLS_VOLUME, server),
            ],
            mounts: vec![
                read_only_mount(PEER_TLS_VOLUME, PEER_TLS_DIR),
                read_only_mount(SERVER_TLS_VOLUME, SERVER_TLS_DIR),
            ],
            args: vec![
                format!("--peer-tls-dir={PEER_TLS_DIR}"),
                format!("--client-tls-dir={SERVER_TLS_DIR}"),
            ],
        },
        // One certificate for whichever transports use TLS (member-init's
        // default directory).
        (Some(one), _) | (None, Some(one)) => MemberMounts {
            volumes: vec![secret_volume(MEMBER_TLS_VOLUME, one)],
            mounts: vec![read_only_mount(MEMBER_TLS_VOLUME, MEMBER_TLS_DIR)],
            args: Vec::new(),
        },
        (None, None) => MemberMounts::default(),
    }
}

/// The client certificate volume of backup agent pods (the Secret from
/// [`Sources::client_secret`]).
pub fn client_volume(secret: &str) -> Volume {
    secret_volume(CLIENT_TLS_VOLUME, secret.to_owned())
}

pub fn client_mount() -> VolumeMount {
    read_only_mount(CLIENT_TLS_VOLUME, CLIENT_TLS_DIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::TlsTransport;

    #[test]
    fn settings_follow_the_spec_and_default_to_plaintext_without_one() {
        assert_eq!(TlsSettings::from_spec(None), TlsSettings::default());
        let both = TlsSettings::from_spec(Some(&TlsSpec::default()));
        assert_eq!(
            (both.peer_scheme(), both.client_scheme()),
            ("https", "https")
        );
        let peer_only = TlsSettings::from_spec(Some(&TlsSpec {
            peer: TlsTransport::default(),
            client: TlsTransport {
                mode: TlsMode::Disabled,
                ..TlsTransport::default()
            },
        }));
        assert!(peer_only.any());
        assert_eq!(
            (peer_only.peer_scheme(), peer_only.client_scheme()),
            ("https", "http")
        );
    }

    #[test]
    fn the_member_certificate_names_every_member_and_the_client_service() {
        let hosts = member_hosts("orders", "shop");
        for name in [
            "*.orders-peer.shop.svc",
            "*.orders-peer.shop.svc.cluster.local",
            "orders-client.shop.svc",
        ] {
            assert!(hosts.contains(&name.to_owned()), "{hosts:?}");
        }
        assert_eq!(server_name("orders", "shop"), "orders-client.shop.svc");
    }

    fn provided(secret: &str, client_secret: Option<&str>) -> TlsTransport {
        use dkv_api::distributedkv::v1beta1::SecretReference;
        let reference = |name: &str| SecretReference {
            name: name.to_owned(),
        };
        TlsTransport {
            mode: TlsMode::Provided,
            secret_ref: Some(reference(secret)),
            client_secret_ref: client_secret.map(reference),
            ..TlsTransport::default()
        }
    }

    #[test]
    fn each_source_names_the_secrets_members_mount_and_clients_present() {
        let auto = Sources::from_spec(Some(&TlsSpec::default()));
        assert_eq!(auto.member_secrets("orders"), ["orders-tls-member"]);
        assert_eq!(
            auto.client_secret("orders").as_deref(),
            Some("orders-tls-client")
        );
        let one = member_mounts("orders", &auto);
        assert_eq!(one.volumes.len(), 1);
        assert_eq!(one.mounts[0].mount_path, MEMBER_TLS_DIR);
        assert!(one.args.is_empty(), "member-init's default directory");

        let user = Sources::from_spec(Some(&TlsSpec {
            peer: provided("orders-peer-cert", None),
            client: provided("orders-serving-cert", Some("orders-dkv-client")),
        }));
        assert_eq!(
            user.member_secrets("orders"),
            ["orders-peer-cert", "orders-serving-cert"]
        );
        assert_eq!(
            user.client_secret("orders").as_deref(),
            Some("orders-dkv-client")
        );
        let two = member_mounts("orders", &user);
        let secrets: Vec<_> = two
            .volumes
            .iter()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(secrets, ["orders-peer-cert", "orders-serving-cert"]);
        assert!(two.mounts.iter().all(|m| m.read_only == Some(true)));
        assert_eq!(
            two.args,
            [
                "--peer-tls-dir=/etc/dkv/tls/peer",
                "--client-tls-dir=/etc/dkv/tls/server"
            ]
        );

        // The same user Secret for both transports is mounted once.
        let shared = Sources::from_spec(Some(&TlsSpec {
            peer: provided("orders-cert", None),
            client: provided("orders-cert", Some("orders-dkv-client")),
        }));
        assert_eq!(member_mounts("orders", &shared).volumes.len(), 1);

        let peer_only = Sources::from_spec(Some(&TlsSpec {
            peer: provided("orders-peer-cert", None),
            client: TlsTransport {
                mode: TlsMode::Disabled,
                ..TlsTransport::default()
            },
        }));
        assert_eq!(peer_only.client_secret("orders"), None);
        assert_eq!(peer_only.member_secrets("orders"), ["orders-peer-cert"]);
    }
}
