//! Step 2 of a reconcile (pure): turn the raw `DistributedKV` plus the facts
//! dereference gathered into a [`ValidatedCluster`], or an [`InvalidSpec`]
//! listing every problem with the field and the fix.
//!
//! Nothing after this step reads the raw custom resource: builders take the
//! validated model, so a value that was never checked cannot reach a child.

use std::collections::BTreeMap;
use std::fmt;

use dkv_api::distributedkv::v1beta1::{
    AutoCompactionMode, BackupRetention, BackupSpec, EtcdTuning, MaxAge, PodOverrides,
    ReclaimPolicy,
};
use dkv_api::{DistributedKV, DistributedKVSpec, labels};
use dkv_backup::RetentionPolicy;
use jiff::SignedDuration;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use super::naming::MAX_CLUSTER_NAME_LEN;
use super::tls::{Sources, TlsSettings};
use crate::etcd_version::{self, EtcdVersion, check_version_change};
use crate::quantity::parse_quantity;

/// etcd's default backend quota (2 GiB), which we also default to.
pub const DEFAULT_QUOTA_BACKEND_BYTES: i64 = 2 * 1024 * 1024 * 1024;
/// etcd warns above 8 GiB; larger databases make snapshots and restarts slow.
pub const MAX_QUOTA_BACKEND_BYTES: i64 = 8 * 1024 * 1024 * 1024;

/// What dereference learned that validation needs, beyond the CR itself.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Names of the StorageClasses that exist; `None` when not known (the
    /// check is then skipped rather than failing a valid spec).
    pub storage_classes: Option<Vec<String>>,
    /// The etcd version the running StatefulSet was built for, if it exists.
    pub deployed_version: Option<EtcdVersion>,
    /// The volume size in the running StatefulSet's claim template, if it
    /// exists (the template is immutable: member volumes grow one by one).
    pub deployed_storage_size: Option<String>,
}

/// Operator-wide settings that fill in what the spec leaves out.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// The operator's own image, which also runs `member-init` and backups.
    pub operator_image: String,
}

/// A `DistributedKV` whose every field has been checked and defaulted.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedCluster {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub generation: Option<i64>,
    /// Controller owner reference every child carries.
    pub owner: OwnerReference,
    pub size: i32,
    pub image: String,
    pub version: EtcdVersion,
    pub resources: Option<ResourceRequirements>,
    pub storage: Option<ValidatedStorage>,
    pub backup: Option<ValidatedBackup>,
    /// `spec.bootstrap.restore`: create the cluster from this backup.
    pub restore: Option<ValidatedRestore>,
    pub etcd: EtcdSettings,
    pub pod: PodOverrides,
    pub operator_image: String,
    /// `dkv.io/reconcile-paused: "true"`: report status, change nothing.
    pub paused: bool,
    /// `dkv.io/restartedAt`: carried into the members' pod template, so
    /// that changing it restarts every member (one at a time).
    pub restarted_at: Option<String>,
    /// Which transports use TLS (`spec.tls`).
    pub tls: TlsSettings,
    /// Where their certificates come from.
    pub tls_sources: Sources,
    /// `spec.auth.enabled`: etcd authentication is (to be) on.
    pub auth: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedStorage {
    pub storage_class_name: String,
    /// The size every member volume must have (`spec.storage.size`).
    pub size: String,
    /// The size in the StatefulSet's claim template: the one it was created
    /// with (immutable), or `size` for a new StatefulSet. Volumes created
    /// from it are grown to `size` afterwards.
    pub template_size: String,
    pub reclaim_policy: ReclaimPolicy,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedBackup {
    /// `spec.backup.destination.uri`: `s3://`, `gs://`, `az://` or `file://`.
    pub destination: String,
    pub schedule: String,
    pub image: String,
    /// `spec.backup.retention`; the default keeps every backup.
    pub retention: RetentionPolicy,
    pub credentials_secret: Option<String>,
    pub final_backup_on_delete: bool,
}

/// Where a cluster created from a backup gets its data.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedRestore {
    pub source: RestoreRef,
    /// `spec.bootstrap.restore.credentialsSecret`, else the cluster's
    /// `spec.backup.credentialsSecret`; `None` lets the backup record's own
    /// destination name it.
    pub credentials_secret: Option<String>,
}

/// The backup a restore names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreRef {
    /// A `DistributedKVBackup` in the cluster's namespace.
    Backup(String),
    /// An artifact URI; its sha256 comes from the record beside it.
    Uri(String),
}

/// etcd flags derived from `spec.etcd`, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdSettings {
    pub quota_backend_bytes: i64,
    pub auto_compaction_mode: &'static str,
    pub auto_compaction_retention: String,
}

/// One invalid field and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.storage.storageClassName`.
    pub field: String,
    pub message: String,
}

/// Every problem found in a spec; reported as `Degraded=True, InvalidSpec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSpec(pub Vec<FieldError>);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for InvalidSpec {}

/// Collects field errors so that one pass reports all of them.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn add(&mut self, field: &str, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.to_owned(),
            message: message.into(),
        });
    }
}

/// Validates `dkv` against the facts and fills in defaults.
pub fn validate(
    dkv: &DistributedKV,
    facts: &Facts,
    defaults: &Defaults,
) -> Result<ValidatedCluster, InvalidSpec> {
    let mut problems = Problems::default();
    let name = dkv.name_any();
    let namespace = dkv.namespace().unwrap_or_default();
    let spec = &dkv.spec;
    let CheckedSpec {
        version,
        storage,
        backup,
        restore,
        etcd,
    } = check_spec(dkv, facts, defaults, &mut problems);

    // blockOwnerDeletion: a foreground deletion of the cluster waits until
    // its members are gone.
    let owner = dkv.controller_owner_ref(&()).map(|mut owner| {
        owner.block_owner_deletion = Some(true);
        owner
    });
    let uid = dkv.uid();
    if owner.is_none() || uid.is_none() {
        problems.add(
            "metadata.uid",
            "the object has no uid; it was not read from the API server",
        );
    }

    match (problems.0.is_empty(), owner, uid, version) {
        (true, Some(owner), Some(uid), Some(version)) => Ok(ValidatedCluster {
            name,
            namespace,
            uid,
            generation: dkv.meta().generation,
            owner,
            size: spec.size,
            image: spec.image.trim().to_owned(),
            version,
            resources: spec.resources.clone(),
            storage,
            backup,
            restore,
            etcd,
            pod: spec.pod.clone().unwrap_or_default(),
            operator_image: defaults.operator_image.clone(),
            paused: is_paused(dkv.annotations()),
            restarted_at: dkv.annotations().get(labels::RESTARTED_AT).cloned(),
            tls: TlsSettings::from_spec(spec.tls.as_ref()),
            tls_sources: Sources::from_spec(spec.tls.as_ref()),
            auth: spec.auth.as_ref().is_some_and(|a| a.enabled),
        }),
        _ => Err(InvalidSpec(problems.0)),
    }
}

/// Every problem [`validate`] finds in the spec and name of `dkv`, without
/// the checks that need an object read from the API server (its uid). The
/// admission webhook runs these on objects that are about to be written.
pub fn spec_problems(dkv: &DistributedKV, facts: &Facts, defaults: &Defaults) -> Vec<FieldError> {
    let mut problems = Problems::default();
    check_spec(dkv, facts, defaults, &mut problems);
    problems.0
}

/// The etcd version a spec asks for: `spec.version`, else the image tag.
/// `None` when neither names one.
pub fn spec_version(spec: &DistributedKVSpec) -> Option<EtcdVersion> {
    match &spec.version {
        Some(text) => EtcdVersion::parse(text),
        None => EtcdVersion::from_image(spec.image.trim()),
    }
}

/// What [`check_spec`] derived from a spec, each part `None`/defaulted when
/// it had problems (which are in the [`Problems`] passed along).
struct CheckedSpec {
    version: Option<EtcdVersion>,
    storage: Option<ValidatedStorage>,
    backup: Option<ValidatedBackup>,
    restore: Option<ValidatedRestore>,
    etcd: EtcdSettings,
}

fn check_spec(
    dkv: &DistributedKV,
    facts: &Facts,
    defaults: &Defaults,
    problems: &mut Problems,
) -> CheckedSpec {
    let name = dkv.name_any();
    let spec = &dkv.spec;

    check_cluster_name(&name, problems);

    if !(1..=9).contains(&spec.size) {
        problems.add(
            "spec.size",
            format!(
                "must be between 1 and 9 (got {}); 3 or 5 suit most clusters",
                spec.size
            ),
        );
    }

    let version = resolve_version(spec.image.as_str(), spec.version.as_deref(), problems);
    if let (Some(version), Some(deployed)) = (version, facts.deployed_version)
        && let Err(err) = check_version_change(deployed, version)
    {
        problems.add(
            if spec.version.is_some() {
                "spec.version"
            } else {
                "spec.image"
            },
            err.to_string(),
        );
    }

    let storage = spec.storage.as_ref().map(|storage| {
        let class = storage.storage_class_name.trim();
        if class.is_empty() {
            problems.add(
                "spec.storage.storageClassName",
                "must name a StorageClass (kubectl get storageclass lists them)",
            );
        } else if let Some(known) = &facts.storage_classes
            && !known.iter().any(|k| k == class)
        {
            problems.add(
                "spec.storage.storageClassName",
                format!(
                    "StorageClass {class:?} does not exist; create it or use one of: {}",
                    if known.is_empty() {
                        "(none exist)".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        let size = storage.size.0.clone();
        match parse_quantity(&size) {
            Ok(bytes) if bytes >= 1024.0 * 1024.0 => {}
            Ok(_) => problems.add(
                "spec.storage.size",
                format!("{size:?} is too small for an etcd member; use at least 1Mi (1Gi or more in production)"),
            ),
            Err(err) => problems.add("spec.storage.size", err.to_string()),
        }
        if let Some(deployed) = &facts.deployed_storage_size
            && let (Ok(wanted), Ok(have)) = (parse_quantity(&size), parse_quantity(deployed))
            && wanted < have
        {
            problems.add(
                "spec.storage.size",
                format!("{size:?} is smaller than the members' volumes ({deployed}); volumes never shrink: set it to {deployed} or more"),
            );
        }
        ValidatedStorage {
            storage_class_name: class.to_owned(),
            template_size: facts
                .deployed_storage_size
                .clone()
                .unwrap_or_else(|| size.clone()),
            size,
            reclaim_policy: storage.reclaim_policy,
        }
    });

    if let Some(tls) = &spec.tls {
        check_tls(tls, problems);
    }

    let backup = spec.backup.as_ref().map(|backup| {
        check_destination(&backup.destination.uri, problems);
        if let Err(message) = check_cron(&backup.schedule) {
            problems.add("spec.backup.schedule", message);
        }
        ValidatedBackup {
            destination: backup.destination.uri.trim().to_owned(),
            schedule: backup.schedule.trim().to_owned(),
            image: backup
                .backup_image
                .clone()
                .filter(|i| !i.trim().is_empty())
                .unwrap_or_else(|| defaults.operator_image.clone()),
            retention: retention_policy(backup.retention.as_ref(), problems),
            credentials_secret: backup
                .destination
                .credentials_secret
                .clone()
                .filter(|s| !s.is_empty()),
            final_backup_on_delete: backup.final_backup_on_delete.unwrap_or(false),
        }
    });

    let restore = spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.restore.as_ref())
        .and_then(|restore| {
            let source = match (&restore.backup_name, &restore.uri) {
                (Some(name), None) if !name.trim().is_empty() => {
                    RestoreRef::Backup(name.trim().to_owned())
                }
                (None, Some(uri)) => match dkv_backup::Location::parse(uri.trim()) {
                    Ok(_) => RestoreRef::Uri(uri.trim().to_owned()),
                    Err(err) => {
                        problems.add("spec.bootstrap.restore.uri", format!("{err}; write e.g. s3://bucket/prefix/shop/orders/orders-20261122-060012.db"));
                        return None;
                    }
                },
                _ => {
                    problems.add(
                        "spec.bootstrap.restore",
                        "set exactly one of backupName (a DistributedKVBackup in this namespace) or uri (an artifact)",
                    );
                    return None;
                }
            };
            Some(ValidatedRestore {
                source,
                credentials_secret: restore
                    .credentials_secret
                    .clone()
                    .or_else(|| backup.as_ref().and_then(|b| b.credentials_secret.clone()))
                    .filter(|s| !s.is_empty()),
            })
        });

    let etcd = etcd_settings(spec.etcd.as_ref(), problems);
    CheckedSpec {
        version,
        storage,
        backup,
        restore,
        etcd,
    }
}

/// Whether the pause annotation is set to a true value.
pub fn is_paused(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(labels::RECONCILE_PAUSED)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn check_cluster_name(name: &str, problems: &mut Problems) {
    // Child Services need a DNS-1035 label: a lowercase letter first.
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        problems.add(
            "metadata.name",
            format!("{name:?} must start with a lowercase letter and contain only lowercase letters, digits and '-' (it names Services)"),
        );
    }
    if name.len() > MAX_CLUSTER_NAME_LEN {
        problems.add(
            "metadata.name",
            format!(
                "{name:?} is {} characters; at most {MAX_CLUSTER_NAME_LEN} fit the names of the objects dkv creates",
                name.len()
            ),
        );
    }
}

fn resolve_version(
    image: &str,
    explicit: Option<&str>,
    problems: &mut Problems,
) -> Option<EtcdVersion> {
    if image.trim().is_empty() {
        problems.add(
            "spec.image",
            "must name an etcd image, e.g. registry.k8s.io/etcd:3.5.16-0",
        );
        return None;
    }
    let (field, version) = match explicit {
        Some(text) => match EtcdVersion::parse(text) {
            Some(v) => ("spec.version", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("{text:?} is not a version; write MAJOR.MINOR.PATCH, e.g. 3.5.16"),
                );
                return None;
            }
        },
        None => match EtcdVersion::from_image(image) {
            Some(v) => ("spec.image", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("the tag of image {image:?} is not a version; set spec.version to the etcd version the image runs, e.g. 3.5.16"),
                );
                return None;
            }
        },
    };
    if version < etcd_version::MIN_SUPPORTED {
        problems.add(
            field,
            format!(
                "etcd {version} is not supported; dkv needs {} or newer (learner members)",
                etcd_version::MIN_SUPPORTED
            ),
        );
        return None;
    }
    if version.minor_line() > etcd_version::MAX_SUPPORTED_MINOR {
        let (major, minor) = etcd_version::MAX_SUPPORTED_MINOR;
        problems.add(
            field,
            format!(
                "etcd {version} is newer than this operator supports (up to {major}.{minor}.x)"
            ),
        );
        return None;
    }
    Some(version)
}

/// What the schema's CEL rules say about `spec.tls`, for specs written
/// past them (and for the webhook's single list of problems).
fn check_tls(tls: &dkv_api::distributedkv::v1beta1::TlsSpec, problems: &mut Problems) {
    use dkv_api::distributedkv::v1beta1::TlsMode;
    for (transport, t) in [("peer", &tls.peer), ("client", &tls.client)] {
        let provided = t.mode == TlsMode::Provided;
        if provided != t.secret_ref.as_ref().is_some_and(|r| !r.name.is_empty()) {
            problems.add(
                &format!("spec.tls.{transport}.secretRef"),
                "required with mode Provided (the Secret with tls.crt, tls.key and ca.crt) and allowed only with it",
            );
        }
        let cert_manager = t.mode == TlsMode::CertManager;
        if cert_manager != t.issuer_ref.as_ref().is_some_and(|r| !r.name.is_empty()) {
            problems.add(
                &format!("spec.tls.{transport}.issuerRef"),
                "required with mode CertManager (the cert-manager Issuer or ClusterIssuer that signs) and allowed only with it",
            );
        }
        let wants_client_secret = transport == "client" && provided;
        if wants_client_secret
            != t.client_secret_ref
                .as_ref()
                .is_some_and(|r| !r.name.is_empty())
        {
            problems.add(
                &format!("spec.tls.{transport}.clientSecretRef"),
                "required on spec.tls.client with mode Provided (the client certificate dkv's operator and backup agents present) and allowed only there",
            );
        }
        if let Some(kind) = t.issuer_ref.as_ref().and_then(|r| r.kind.as_deref())
            && !matches!(kind, "Issuer" | "ClusterIssuer")
            && t.issuer_ref
                .as_ref()
                .and_then(|r| r.group.as_deref())
                .is_none_or(|g| g == "cert-manager.io")
        {
            problems.add(
                &format!("spec.tls.{transport}.issuerRef.kind"),
                "must be Issuer or ClusterIssuer for cert-manager.io issuers",
            );
        }
    }
}

fn check_destination(uri: &str, problems: &mut Problems) {
    const FIELD: &str = "spec.backup.destination.uri";
    let uri = uri.trim();
    let location = match dkv_backup::Location::parse(uri) {
        Ok(location) => location,
        Err(err) => {
            problems.add(
                FIELD,
                format!("{err}; write e.g. s3://my-bucket/backups/ or file:///var/backups/dkv/"),
            );
            return;
        }
    };
    if location.scheme() == dkv_backup::Scheme::S3 {
        let bucket = location.bucket();
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !bucket_ok {
            problems.add(
                FIELD,
                format!("{bucket:?} is not a valid S3 bucket name (3-63 lowercase letters, digits, '-' or '.')"),
            );
        }
    }
}

/// The retention `backup` asks for; a limit that does not validate prunes
/// nothing (validation reports it).
pub fn retention_of(backup: Option<&BackupSpec>) -> RetentionPolicy {
    retention_policy(
        backup.and_then(|b| b.retention.as_ref()),
        &mut Problems::default(),
    )
}

/// `spec.backup.retention` as the policy retention applies.
fn retention_policy(
    retention: Option<&BackupRetention>,
    problems: &mut Problems,
) -> RetentionPolicy {
    let Some(retention) = retention else {
        return RetentionPolicy::default();
    };
    let max_backups = match retention.max_backups {
        None => None,
        Some(n) if n >= 1 => u32::try_from(n).ok(),
        Some(n) => {
            problems.add(
                "spec.backup.retention.maxBackups",
                format!("must be at least 1 (got {n}); omit it to keep any number of backups"),
            );
            None
        }
    };
    let max_age =
        retention
            .max_age
            .as_deref()
            .and_then(|text| match text.trim().parse::<MaxAge>() {
                Ok(age) => Some(SignedDuration::from_hours(i64::from(age.hours()))),
                Err(message) => {
                    problems.add(
                        "spec.backup.retention.maxAge",
                        format!("{message}; omit it to keep backups of any age"),
                    );
                    None
                }
            });
    RetentionPolicy {
        max_age,
        max_backups,
    }
}

/// Checks a CronJob schedule the way Kubernetes reads it: five fields (or a
/// macro such as `@daily`), no seconds, no years.
pub fn check_cron(schedule: &str) -> Result<(), String> {
    use croner::parser::{CronParser, Seconds, Year};
    let schedule = schedule.trim();
    if schedule.starts_with("TZ=") || schedule.starts_with("CRON_TZ=") {
        return Err(
            "time zones in the schedule are not supported; schedules run in UTC".to_owned(),
        );
    }
    let fields = schedule.split_whitespace().count();
    if !schedule.starts_with('@') && fields != 5 {
        return Err(format!(
            "{schedule:?} has {fields} fields; a schedule has five (minute hour day-of-month month day-of-week), e.g. \"0 */6 * * *\""
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(schedule)
        .map(|_| ())
        .map_err(|err| format!("{schedule:?} is not a valid cron schedule: {err}"))
}

/// `spec.etcd` with every field the operator defaults filled in; fields that
/// are set stay as they are (valid or not).
pub fn etcd_tuning_with_defaults(tuning: Option<&EtcdTuning>) -> EtcdTuning {
    let mut tuning = tuning.cloned().unwrap_or_default();
    let mode = *tuning
        .auto_compaction_mode
        .get_or_insert(AutoCompactionMode::Periodic);
    tuning
        .quota_backend_bytes
        .get_or_insert(DEFAULT_QUOTA_BACKEND_BYTES);
    tuning
        .auto_compaction_retention
        .get_or_insert_with(|| default_compaction_retention(mode).to_owned());
    tuning
}

/// etcd's own default retention per compaction mode.
fn default_compaction_retention(mode: AutoCompactionMode) -> &'static str {
    match mode {
        AutoCompactionMode::Periodic => "1h",
        AutoCompactionMode::Revision => "1000",
    }
}

fn etcd_settings(tuning: Option<&EtcdTuning>, problems: &mut Problems) -> EtcdSettings {
    let tuning = etcd_tuning_with_defaults(tuning);
    let quota = tuning
        .quota_backend_bytes
        .unwrap_or(DEFAULT_QUOTA_BACKEND_BYTES);
    if quota <= 0 || quota > MAX_QUOTA_BACKEND_BYTES {
        problems.add(
            "spec.etcd.quotaBackendBytes",
            format!("must be between 1 and {MAX_QUOTA_BACKEND_BYTES} (8 GiB), got {quota}; omit it for the 2 GiB default"),
        );
    }
    let mode = tuning
        .auto_compaction_mode
        .unwrap_or(AutoCompactionMode::Periodic);
    let mode_name = match mode {
        AutoCompactionMode::Periodic => "periodic",
        AutoCompactionMode::Revision => "revision",
    };
    let retention = tuning
        .auto_compaction_retention
        .unwrap_or_else(|| default_compaction_retention(mode).to_owned());
    let retention_ok = match mode {
        // etcd reads a bare number as hours in periodic mode.
        AutoCompactionMode::Periodic => {
            is_go_duration(&retention) || retention.parse::<u64>().is_ok()
        }
        AutoCompactionMode::Revision => retention.parse::<u64>().is_ok(),
    };
    if !retention_ok {
        problems.add(
            "spec.etcd.autoCompactionRetention",
            match mode {
                AutoCompactionMode::Periodic => {
                    format!("{retention:?} is not a duration; use e.g. \"1h\" or \"30m\"")
                }
                AutoCompactionMode::Revision => {
                    format!(
                        "{retention:?} must be a revision count in revision mode, e.g. \"1000\""
                    )
                }
            },
        );
    }
    EtcdSettings {
        quota_backend_bytes: quota,
        auto_compaction_mode: mode_name,
        auto_compaction_retention: retention,
    }
}

/// Whether `text` is a Go duration such as `1h30m` or `1.5s`.
fn is_go_duration(text: &str) -> bool {
    let mut rest = text;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 || rest[..digits].parse::<f64>().is_err() {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .find(|u| rest.starts_with(*u) && !(**u == "m" && rest.starts_with("ms")));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_follow_kubernetes_rules() {
        assert!(check_cron("0 */6 * * *").is_ok());
        assert!(check_cron("@daily").is_ok());
        assert!(check_cron("*/5 * * * *").is_ok());
        assert!(
            check_cron("0 0 */6 * * *").is_err(),
            "seconds are not allowed"
        );
        assert!(check_cron("61 * * * *").is_err());
        assert!(check_cron("every day").is_err());
        assert!(check_cron("CRON_TZ=UTC 0 * * * *").is_err());
    }

    #[test]
    fn go_durations() {
        for ok in ["1h", "30m", "1h30m", "1.5s", "500ms"] {
            assert!(is_go_duration(ok), "{ok}");
        }
        for bad in ["", "h", "1d", "1 h", "-1h"] {
            assert!(!is_go_duration(bad), "{bad}");
        }
    }

    #[test]
    fn tls_references_belong_to_their_mode_and_transport() {
        let spec = |tls: serde_json::Value| -> dkv_api::distributedkv::v1beta1::TlsSpec {
            serde_json::from_value(tls).unwrap_or_else(|e| panic!("{e}"))
        };
        let fields = |tls: serde_json::Value| {
            let mut problems = Problems::default();
            check_tls(&spec(tls), &mut problems);
            problems.0.into_iter().map(|p| p.field).collect::<Vec<_>>()
        };
        assert!(fields(serde_json::json!({})).is_empty());
        assert!(
            fields(serde_json::json!({
                "peer": {"mode": "Provided", "secretRef": {"name": "p"}},
                "client": {"mode": "Provided", "secretRef": {"name": "s"}, "clientSecretRef": {"name": "c"}}
            }))
            .is_empty()
        );
        assert_eq!(
            fields(serde_json::json!({"peer": {"mode": "Provided"}})),
            ["spec.tls.peer.secretRef"]
        );
        assert_eq!(
            fields(serde_json::json!({"client": {"mode": "Provided", "secretRef": {"name": "s"}}})),
            ["spec.tls.client.clientSecretRef"]
        );
        assert_eq!(
            fields(
                serde_json::json!({"peer": {"secretRef": {"name": "p"}, "clientSecretRef": {"name": "c"}}})
            ),
            ["spec.tls.peer.secretRef", "spec.tls.peer.clientSecretRef"]
        );
        assert_eq!(
            fields(
                serde_json::json!({"client": {"mode": "CertManager", "issuerRef": {"name": "ca", "kind": "Vault"}}})
            ),
            ["spec.tls.client.issuerRef.kind"]
        );
        assert_eq!(
            fields(serde_json::json!({"client": {"mode": "CertManager"}})),
            ["spec.tls.client.issuerRef"]
        );
    }
}
