//! The `DistributedKV` resource: one replicated etcd cluster.
//!
//! Served as [`v1alpha1`] and [`v1beta1`] (the storage version); [`convert`]
//! turns one into the other for the conversion webhook.

/// Defines `DistributedKVSpec` (and, through the derive, `DistributedKV`) of
/// API version `$version` with `spec.backup` of type `$backup`, the one
/// field in which the versions differ. One definition for both keeps their
/// schema, validation rules, printer columns and docs from drifting apart.
macro_rules! distributedkv_spec {
    ($version:tt, $backup:ty) => {
        /// The desired state of one replicated etcd cluster.
        // The category is `dkv-all`, not `dkv`: kubectl expands categories
        // before short names, so a category `dkv` would turn `kubectl get dkv
        // NAME` into a query over every dkv kind ("you must specify only one
        // resource"). (A `//` comment: doc comments become the schema's
        // descriptions, which users read in `kubectl explain`.)
        #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
        #[kube(
            group = "dkv.io",
            version = $version,
            kind = "DistributedKV",
            plural = "distributedkvs",
            singular = "distributedkv",
            shortname = "dkv",
            category = "all",
            category = "dkv-all",
            namespaced,
            status = "DistributedKVStatus",
            derive = "PartialEq",
            doc = "A replicated etcd key-value cluster managed by dkv.",
            scale(
                spec_replicas_path = ".spec.size",
                status_replicas_path = ".status.readyReplicas",
                label_selector_path = ".status.selector"
            ),
            printcolumn(
                name = "Size",
                type_ = "integer",
                json_path = ".spec.size",
                description = "Desired number of members"
            ),
            printcolumn(
                name = "Ready",
                type_ = "integer",
                json_path = ".status.readyReplicas",
                description = "Voting members healthy in etcd whose pods are Ready"
            ),
            printcolumn(
                name = "Version",
                type_ = "string",
                json_path = ".status.currentVersion",
                description = "Running etcd version"
            ),
            printcolumn(
                name = "Status",
                type_ = "string",
                json_path = ".status.conditions[?(@.type==\"Available\")].reason",
                description = "Reason of the Available condition"
            ),
            printcolumn(
                name = "Recoverable-From",
                type_ = "date",
                json_path = ".status.continuousBackup.oldest.time",
                description = "Oldest point continuous backup can restore to",
                priority = "1"
            ),
            printcolumn(
                name = "Last-Segment",
                type_ = "date",
                json_path = ".status.continuousBackup.lastSegmentTime",
                description = "When continuous backup last stored a segment (its age is the recovery point lag)",
                priority = "1"
            ),
            printcolumn(
                name = "Adoption",
                type_ = "string",
                json_path = ".status.adoption.phase",
                description = "Where the adoption of a running cluster stands (spec.bootstrap.join)",
                priority = "1"
            ),
            printcolumn(
                name = "Old-Members",
                type_ = "integer",
                json_path = ".status.adoption.oldMembersLeft",
                description = "Members that were there before dkv and are still in the cluster",
                priority = "1"
            ),
            printcolumn(
                name = "Standby",
                type_ = "string",
                json_path = ".status.standby.phase",
                description = "Where a standby stands (spec.standby)",
                priority = "1"
            ),
            printcolumn(
                name = "Standby-Lag",
                type_ = "integer",
                json_path = ".status.standby.lagSeconds",
                description = "Seconds since the oldest stored change of the source the standby has not applied",
                priority = "1"
            ),
            printcolumn(
                name = "Age",
                type_ = "date",
                json_path = ".metadata.creationTimestamp"
            )
        )]
        #[x_kube(
            validation = Rule::new("has(self.storage) == has(oldSelf.storage)")
                .message("spec.storage cannot be added or removed after creation; create a new cluster and restore a backup into it"),
            // Of `bootstrap`, only how a cluster that joined a running one
            // reaches it and whether its old members leave may change.
            validation = Rule::new("has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || (has(self.bootstrap.restore) == has(oldSelf.bootstrap.restore) && (!has(self.bootstrap.restore) || self.bootstrap.restore == oldSelf.bootstrap.restore) && has(self.bootstrap.join) == has(oldSelf.bootstrap.join)))")
                .message("spec.bootstrap is used only at creation and cannot change afterwards, except the fields of spec.bootstrap.join; remove your edit to spec.bootstrap"),
            validation = Rule::new("has(self.tls) == has(oldSelf.tls) && (!has(self.tls) || self.tls == oldSelf.tls)")
                .message("spec.tls is fixed at creation: members cannot switch between plaintext and TLS in place; create a new cluster with the spec.tls you want and restore a backup into it"),
            // Hibernation: a stopped cluster cannot carry out a change, and
            // one asked for in the same edit as hibernating would be
            // half-done. The admission webhook says the same with the
            // cluster's name; these hold without it.
            validation = Rule::new("!(has(self.hibernation) && self.hibernation) || self.size == oldSelf.size")
                .message("spec.size cannot change while the cluster is hibernated or being hibernated; wake it first (spec.hibernation: false), then scale"),
            validation = Rule::new("!(has(oldSelf.hibernation) && oldSelf.hibernation && has(self.hibernation) && self.hibernation) || (self.image == oldSelf.image && has(self.version) == has(oldSelf.version) && (!has(self.version) || self.version == oldSelf.version))")
                .message("spec.image/spec.version cannot change while the cluster is hibernated; wake it first (spec.hibernation: false), then upgrade"),
            validation = Rule::new("!(has(oldSelf.hibernation) && oldSelf.hibernation && has(self.hibernation) && self.hibernation) || (has(self.backup) == has(oldSelf.backup) && (!has(self.backup) || self.backup == oldSelf.backup))")
                .message("spec.backup cannot change while the cluster is hibernated; wake it first (spec.hibernation: false), then change the backup"),
            validation = Rule::new("!(has(oldSelf.hibernation) && oldSelf.hibernation && has(self.hibernation) && self.hibernation) || !has(self.storage) || !has(oldSelf.storage) || self.storage == oldSelf.storage")
                .message("spec.storage cannot change while the cluster is hibernated; wake it first (spec.hibernation: false), then change the storage"),
            // A standby: its data comes from its source and writes are
            // refused through etcd's roles. It is one from creation, or
            // from a demotion (a switchover), until promoted; demoted
            // again, it may follow another source.
            validation = Rule::new("!(has(self.standby) && has(self.bootstrap))")
                .message("a standby takes its data from its source (spec.standby.source): remove spec.bootstrap"),
            validation = Rule::new("!(has(self.standby) && self.standby.enabled) || (has(self.auth) && self.auth.enabled)")
                .message("a standby refuses writes through etcd's roles, which need authentication: set spec.auth.enabled: true"),
            validation = Rule::new("has(self.standby) || !has(oldSelf.standby)")
                .message("spec.standby stays after promotion; to promote, set spec.standby.enabled: false (kubectl dkv promote)"),
            validation = Rule::new("has(oldSelf.standby) || !has(self.standby) || self.standby.enabled")
                .message("spec.standby added to a running cluster demotes it and needs spec.standby.enabled: true"),
            validation = Rule::new("!has(self.standby) || !has(oldSelf.standby) || self.standby.source == oldSelf.standby.source || (self.standby.enabled && !oldSelf.standby.enabled)")
                .message("spec.standby.source cannot change while the cluster follows it; it may change only when a promoted cluster is demoted again (spec.standby.enabled: true)")
        )]
        #[serde(rename_all = "camelCase")]
        pub struct DistributedKVSpec {
            /// Number of etcd members (1 to 9). Odd sizes tolerate the most failures
            /// per member: 3 tolerate one failure, 5 tolerate two. Changes add or
            /// remove one member at a time; a scale-down below the current quorum
            /// in one step is refused.
            #[schemars(range(min = 1, max = 9))]
            pub size: i32,

            /// The etcd container image, e.g. `registry.k8s.io/etcd:3.5.16-0`.
            /// A change is a rolling upgrade, one member at a time and the leader
            /// last; etcd moves one minor version at a time and never down.
            #[schemars(length(min = 1))]
            pub image: String,

            /// The etcd version the image runs (`MAJOR.MINOR.PATCH`). Filled in from
            /// the image tag when not set; needed when the tag is not a version (a
            /// digest, `latest`, ...).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            #[schemars(regex(pattern = r"^3\.[0-9]+\.[0-9]+$"))]
            pub version: Option<String>,

            /// Compute resources of the etcd container. Changes restart the members
            /// one at a time.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub resources: Option<ResourceRequirements>,

            /// Persistent storage for each member. Without it members keep their data
            /// in an emptyDir and a pod deletion loses that member's copy. Cannot be
            /// added or removed after creation.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub storage: Option<StorageSpec>,

            /// Scheduled backups to object storage; presence enables them.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub backup: Option<$backup>,

            /// How the cluster is first populated. Read only at creation.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub bootstrap: Option<BootstrapSpec>,

            /// etcd tuning; every field has a safe default. Changes restart the
            /// members one at a time.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub etcd: Option<EtcdTuning>,

            /// Scheduling and metadata for the member pods.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub pod: Option<PodOverrides>,

            /// Transport security of member-to-member (peer) and client traffic.
            /// When a new cluster leaves it out, dkv's defaulting webhook turns TLS
            /// on for both (mode `Auto`); a cluster stored without it is plaintext.
            /// Fixed at creation.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub tls: Option<TlsSpec>,

            /// etcd authentication (role-based access control).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub auth: Option<AuthSpec>,

            /// What the operator may do when a majority of members is lost for good.
            /// Without it the cluster is reported `Degraded/QuorumLost` and left for
            /// a human to decide.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub recovery: Option<RecoverySpec>,

            /// Stop the cluster to save its compute: once no operation is under
            /// way and every member is healthy, the members stop gracefully
            /// (their pods go; their volumes, the etcd membership and the
            /// cluster ID stay), continuous backup stops recording and scheduled
            /// backups are suspended. The phase is then `Hibernated`. Setting it
            /// back to `false` starts the same members on the same data. While
            /// hibernated, changes to `size`, `image`/`version`, `backup` and
            /// `storage` are refused; hibernating and scaling in one edit too.
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub hibernation: bool,
            /// Routine care of the members' data: scheduled defragmentation.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub maintenance: Option<MaintenanceSpec>,

            /// What happens when a rollout (members restarting onto a changed
            /// pod template) stops making progress: pause there (the default)
            /// or roll back.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub rollout: Option<RolloutSpec>,

            /// Follow another cluster through its continuous backup, as a
            /// standby for disaster recovery (see [`StandbySpec`]).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub standby: Option<StandbySpec>,
        }
    };
}

pub mod convert;
mod encryption;
pub mod join;
mod secret_reference;
pub mod standby;
pub mod v1alpha1;
pub mod v1beta1;
