//! `spec.standby`: whose continuous backup the cluster follows, from
//! where, with which credentials and keys; and the restore that seeds it.

use dkv_api::distributedkv::v1beta1::{KeySecretReference, StandbySpec};
use dkv_backup::continuous::chain::Target;

use super::backup::StoreUri;
use super::{
    ContinuousSource, Problems, RestoreFields, RestoreRef, ValidatedBackup, ValidatedRestore,
};

/// `spec.standby`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedStandby {
    /// `enabled`: following; `false`: promoted (or being promoted).
    pub following: bool,
    /// The source's destination, namespace and name; the target is its
    /// newest point.
    pub source: ContinuousSource,
    /// `source.credentialsSecret`.
    pub credentials_secret: Option<String>,
    /// `source.encryption.keySecret`, every entry of it.
    pub decryption_keys: Option<KeySecretReference>,
}

impl ValidatedStandby {
    /// The restore that creates the standby: the source's newest point.
    pub fn seed(&self) -> ValidatedRestore {
        ValidatedRestore {
            fields: RestoreFields::Standby,
            source: RestoreRef::Continuous(self.source.clone()),
            credentials_secret: self.credentials_secret.clone(),
            decryption_keys: self.decryption_keys.clone(),
        }
    }

    /// `NAMESPACE/NAME in URI`, as status and messages name the source.
    pub fn describe(&self) -> String {
        format!(
            "{}/{} in {}",
            self.source.namespace, self.source.cluster, self.source.destination
        )
    }
}

/// Checks `standby` of the cluster `namespace/name`, whose own backup is
/// `backup` and whose `spec.auth.enabled` is `auth`.
pub fn check_standby(
    standby: &StandbySpec,
    (namespace, name): (&str, &str),
    (backup, auth, bootstrap): (Option<&ValidatedBackup>, bool, bool),
    problems: &mut Problems,
) -> Option<ValidatedStandby> {
    if bootstrap {
        problems.add(
            "spec.bootstrap",
            "a standby takes its data from its source (spec.standby.source): remove spec.bootstrap",
        );
    }
    if standby.enabled && !auth {
        problems.add(
            "spec.auth.enabled",
            "a standby refuses writes through etcd's roles, which need authentication: set spec.auth.enabled: true",
        );
    }
    let destination = match StoreUri::parse(&standby.source.uri) {
        Ok(uri) => uri,
        Err(err) => {
            problems.add(
                "spec.standby.source.uri",
                format!("{err}; write the source cluster's spec.backup.destination.uri, e.g. s3://bucket/prefix/"),
            );
            return None;
        }
    };
    let text = standby.source.cluster.trim();
    let (source_namespace, source_cluster) = match text.split_once('/') {
        Some((ns, cluster)) => (ns.to_owned(), cluster.to_owned()),
        None => (namespace.to_owned(), text.to_owned()),
    };
    if source_cluster.is_empty() || source_namespace.is_empty() {
        problems.add(
            "spec.standby.source.cluster",
            "name the source cluster, NAMESPACE/NAME or NAME (in this namespace)",
        );
        return None;
    }
    if (source_namespace.as_str(), source_cluster.as_str()) == (namespace, name)
        && backup.is_some_and(|b| b.destination == destination)
    {
        problems.add(
            "spec.standby.source",
            format!(
                "names this cluster's own backup ({}/{} in {destination}): a standby follows another cluster; name the source's namespace and name",
                namespace, name
            ),
        );
        return None;
    }
    Some(ValidatedStandby {
        following: standby.enabled,
        source: ContinuousSource {
            destination,
            namespace: source_namespace,
            cluster: source_cluster,
            target: Target::Latest,
        },
        credentials_secret: standby
            .source
            .credentials_secret
            .clone()
            .filter(|s| !s.trim().is_empty()),
        decryption_keys: standby
            .source
            .encryption
            .as_ref()
            .map(|e| KeySecretReference {
                key: None,
                ..e.key_secret.clone()
            }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeds_messages_name_the_standbys_own_fields() {
        let standby = RestoreFields::Standby;
        assert_eq!(
            standby.field("sourceCluster"),
            "spec.standby.source.cluster"
        );
        assert_eq!(
            standby.field("credentialsSecret"),
            "spec.standby.source.credentialsSecret"
        );
        assert_eq!(standby.whole(), "spec.standby.source");
        let bootstrap = RestoreFields::Bootstrap;
        assert_eq!(
            bootstrap.field("sourceCluster"),
            "spec.bootstrap.restore.sourceCluster"
        );
        assert_eq!(bootstrap.whole(), "spec.bootstrap.restore");
    }
}
