//! The command line: `kubectl dkv <command> [flags]`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-dkv",
    bin_name = "kubectl dkv",
    version,
    about = "Operate dkv's etcd clusters (DistributedKV) from kubectl",
    long_about = "Operate dkv's etcd clusters (DistributedKV) from kubectl.\n\n\
        Every change goes through the cluster's objects (a DistributedKVBackup, a new DistributedKV, an annotation), \
        so the operator carries it out and status and Events show it.",
    after_help = "Examples:\n  \
        kubectl dkv status orders\n  \
        kubectl dkv backup orders --wait\n  \
        kubectl dkv restore orders --to-time 2026-11-26T09:30:00Z --as orders-before-migration\n  \
        kubectl dkv restart orders -n shop\n  \
        kubectl dkv promote orders-dr -n dr --wait"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Where to find the cluster, as kubectl's own flags say it.
#[derive(Debug, Args)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace (default: the context's namespace, else `default`).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Members, conditions, the operation in flight, backups and certificates of a cluster.
    #[command(
        after_help = "Examples:\n  kubectl dkv status orders\n  kubectl dkv status orders -o yaml"
    )]
    Status {
        /// The DistributedKV.
        name: String,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Take a backup now (creates a DistributedKVBackup).
    #[command(after_help = "Examples:\n  kubectl dkv backup orders\n  \
        kubectl dkv backup orders --wait --verify\n  \
        kubectl dkv backup orders --destination s3://other-bucket/dkv/ --credentials-secret other-s3")]
    Backup {
        /// The DistributedKV to back up.
        name: String,
        /// Wait until the backup has completed (exits non-zero if it fails).
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. `10m`, `90s`.
        #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
        timeout: jiff::SignedDuration,
        /// Verify the backup once it has completed (restores it into a scratch cluster).
        #[arg(long)]
        verify: bool,
        /// Write this backup to another destination than the cluster's `spec.backup.destination`.
        #[arg(long, value_name = "URI")]
        destination: Option<String>,
        /// The Secret with the credentials for --destination.
        #[arg(long, value_name = "SECRET", requires = "destination")]
        credentials_secret: Option<String>,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// A cluster's backups, newest last, and the window continuous backup can restore.
    #[command(
        after_help = "Examples:\n  kubectl dkv backups orders\n  kubectl dkv backups orders -o json"
    )]
    Backups {
        /// The DistributedKV.
        name: String,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Restore a cluster's backup into a new cluster.
    #[command(
        long_about = "Restore a cluster's backup into a new cluster (the source is left alone).\n\n\
            The source is one of: --from BACKUP (a DistributedKVBackup of the cluster), or a point of the cluster's \
            continuous backup (--to-revision or --to-time). With neither, the newest point: the end of continuous \
            backup if the cluster records one, else its newest completed backup. The new cluster gets the source's \
            spec (size, version, storage, TLS, auth, tuning) without its backup settings.",
        after_help = "Examples:\n  kubectl dkv restore orders --from orders-x7k2p --as orders-copy\n  \
            kubectl dkv restore orders --to-revision 120453 --as orders-before-delete\n  \
            kubectl dkv restore orders --to-time 2026-11-26T09:30:00Z --as orders-0930"
    )]
    Restore {
        /// The cluster whose backup to restore.
        name: String,
        /// A DistributedKVBackup of that cluster.
        #[arg(long, value_name = "BACKUP", conflicts_with_all = ["to_revision", "to_time"])]
        from: Option<String>,
        /// A revision of the cluster's continuous backup.
        #[arg(long, value_name = "REVISION", conflicts_with = "to_time")]
        to_revision: Option<i64>,
        /// A time of the cluster's continuous backup (RFC 3339).
        #[arg(long, value_name = "TIME")]
        to_time: Option<jiff::Timestamp>,
        /// The name of the new cluster (it must not exist).
        #[arg(long = "as", value_name = "NEW_NAME")]
        new_name: String,
        #[arg(short, long, value_enum, default_value_t)]
        output: Format,
    },
    /// Restart every member, one at a time, leader last (sets `dkv.io/restartedAt`).
    #[command(after_help = "Examples:\n  kubectl dkv restart orders")]
    Restart {
        /// The DistributedKV.
        name: String,
    },
    /// Stop the operator from changing a cluster (status is still reported).
    #[command(after_help = "Examples:\n  kubectl dkv pause orders")]
    Pause {
        /// The DistributedKV.
        name: String,
    },
    /// Let the operator change a paused cluster again.
    #[command(after_help = "Examples:\n  kubectl dkv resume orders")]
    Resume {
        /// The DistributedKV.
        name: String,
    },
    /// Stop the members to save their compute, keeping their volumes, membership and cluster ID (sets spec.hibernation).
    #[command(
        after_help = "The members stop once no operation is under way and every member is healthy;\n\
        while hibernated, scaling, upgrades and backup or storage edits are refused.\n\n\
        Examples:\n  kubectl dkv hibernate orders\n  kubectl dkv status orders   # Phase: Hibernated once every member stopped"
    )]
    Hibernate {
        /// The DistributedKV.
        name: String,
    },
    /// Start a hibernated cluster's members again, on their own volumes (clears spec.hibernation).
    #[command(after_help = "Examples:\n  kubectl dkv wake orders\n  \
        kubectl wait dkv/orders --for=condition=Available --timeout=5m")]
    Wake {
        /// The DistributedKV.
        name: String,
    },
    /// Let the members that were there before dkv adopted a running cluster leave (sets spec.bootstrap.join.oldMembers: Leave).
    #[command(
        after_help = "Once every member of dkv's is a voter, leadership moves to one of them and the old members\n\
        are removed one at a time; `kubectl dkv status` then says which old process may be stopped.\n\
        dkv never stops a process it did not start.\n\n\
        Examples:\n  kubectl dkv release-old-members orders\n  kubectl dkv status orders   # Adoption: Adopted once only dkv's members are left"
    )]
    ReleaseOldMembers {
        /// The DistributedKV that joined a running cluster (spec.bootstrap.join).
        name: String,
    },
    /// Promote a standby (spec.standby): it applies everything its source stored, stops following and takes writes.
    #[command(
        long_about = "Promote a standby (spec.standby): it applies everything its source stored, stops following and takes writes.\n\n\
            Sets spec.standby.enabled: false; the operator carries it out and records the source revision the cluster \
            then holds (status.standby.promotedAtRevision).\n\n\
            In a switchover, demote the primary first (spec.standby on it, naming this standby as its source); \
            its status then gives the revision it ended at (status.standby.demotedAtRevision) once every change up \
            to it is stored. With --at-revision this command refuses if the standby holds more, asks, waits for \
            the promotion and fails if it does not hold exactly that revision; the demoted primary follows the \
            promoted standby once it does.",
        after_help = "Examples:\n  kubectl dkv promote orders-dr -n dr\n  \
            kubectl dkv promote orders-dr -n dr --wait --timeout 30m\n  \
            kubectl dkv promote orders-dr -n dr --at-revision 48213 --wait   # a switchover\n  \
            kubectl dkv status orders-dr -n dr   # Standby: Promoted, and the source revision it holds"
    )]
    Promote {
        /// The standby DistributedKV.
        name: String,
        /// Wait until it is promoted (exits non-zero if it is not within --timeout).
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. `10m`, `90s`.
        #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
        timeout: jiff::SignedDuration,
        /// A switchover: the demoted primary's status.standby.demotedAtRevision. Refused if the
        /// standby holds more; waits (up to --timeout) and fails unless it is promoted holding exactly it.
        #[arg(long, value_name = "REVISION")]
        at_revision: Option<i64>,
    },
    /// Run etcdctl against the cluster, inside a member pod, with the member's certificate and the cluster's credentials.
    #[command(
        after_help = "Examples:\n  kubectl dkv etcdctl orders -- endpoint status --cluster -w table\n  \
        kubectl dkv etcdctl orders -- get /registry --prefix --keys-only\n  \
        kubectl dkv etcdctl orders --member orders-2 -- alarm list"
    )]
    Etcdctl {
        /// The DistributedKV.
        name: String,
        /// The member pod to run in (default: the leader's, else any ready member).
        #[arg(long, value_name = "POD")]
        member: Option<String>,
        /// etcdctl's arguments, after `--`.
        #[arg(last = true, required = true, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Hand leadership to another voting member.
    #[command(
        name = "move-leader",
        after_help = "Examples:\n  kubectl dkv move-leader orders --to orders-2"
    )]
    MoveLeader {
        /// The DistributedKV.
        name: String,
        /// The member (pod name) to lead.
        #[arg(long, value_name = "MEMBER")]
        to: String,
    },
    /// Defragment every member, one at a time, followers first, the leader last.
    #[command(after_help = "Examples:\n  kubectl dkv defrag orders")]
    Defrag {
        /// The DistributedKV.
        name: String,
    },
    /// Write a support bundle (.tar.gz): the cluster's objects, children, Events and logs, Secret values redacted.
    #[command(after_help = "Examples:\n  kubectl dkv report orders -f orders-report.tar.gz")]
    Report {
        /// The DistributedKV.
        name: String,
        /// The file to write.
        #[arg(short = 'f', long = "file", value_name = "FILE.tar.gz")]
        file: PathBuf,
    },
    /// Print a shell completion script.
    #[command(after_help = "Examples:\n  \
        kubectl dkv completion bash > /etc/bash_completion.d/kubectl-dkv\n  \
        kubectl dkv completion zsh > \"${fpath[1]}/_kubectl-dkv\"\n  \
        kubectl dkv completion fish > ~/.config/fish/completions/kubectl-dkv.fish")]
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `10m`, `90s`, `1h30m` (jiff's friendly format) or ISO 8601 (`PT10M`).
fn parse_duration(text: &str) -> Result<jiff::SignedDuration, String> {
    let duration: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration such as 10m or 90s: {e}"))?;
    if duration.is_negative() || duration.is_zero() {
        return Err(format!("{text:?}: the timeout must be positive"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn restore_takes_one_source_only() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["kubectl-dkv"], args].concat());
        assert!(parse(&["restore", "a", "--as", "b"]).is_ok());
        assert!(parse(&["restore", "a", "--from", "x", "--as", "b"]).is_ok());
        assert!(
            parse(&[
                "restore",
                "a",
                "--from",
                "x",
                "--to-revision",
                "5",
                "--as",
                "b"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "restore",
                "a",
                "--to-revision",
                "5",
                "--to-time",
                "2026-11-26T09:30:00Z",
                "--as",
                "b"
            ])
            .is_err()
        );
        assert!(parse(&["restore", "a", "--to-time", "yesterday", "--as", "b"]).is_err());
        assert!(
            parse(&["restore", "a", "--from", "x"]).is_err(),
            "--as is required"
        );
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "kubectl-dkv",
            "status",
            "orders",
            "-n",
            "shop",
            "--context",
            "kind",
        ]);
        let cli = cli.map_err(|e| e.to_string());
        assert!(matches!(
            cli,
            Ok(Cli { global: Global { namespace: Some(ref n), context: Some(ref c), .. }, .. }) if n == "shop" && c == "kind"
        ));
    }

    #[test]
    fn timeouts_are_positive_durations() {
        assert_eq!(
            parse_duration("90s"),
            Ok(jiff::SignedDuration::from_secs(90))
        );
        assert_eq!(
            parse_duration("10m"),
            Ok(jiff::SignedDuration::from_mins(10))
        );
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
