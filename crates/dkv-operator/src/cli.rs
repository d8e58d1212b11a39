//! The `dkv` command line: one binary, one subcommand per role. Each role's
//! arguments live with the role ([`crate::operator::OperatorArgs`],
//! [`dkv_member::init::MemberInitArgs`], ...).

use clap::{Parser, Subcommand};

use crate::backup_agent::BackupArgs;
use crate::operator::OperatorArgs;

#[derive(Debug, Parser)]
#[command(
    name = "dkv",
    version,
    about = "Replicated etcd clusters on Kubernetes, kept safe through their whole life"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: controllers, metrics and health endpoints.
    Operator(OperatorArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
    /// Take one backup (runs in a backup Job pod).
    Backup(BackupArgs),
    /// The roles of member pods: `member-init`, `restore-fetch`,
    /// `restore-member` ([`dkv_member::Command`]).
    #[command(flatten)]
    Member(dkv_member::Command),
    /// A local control plane with dkv on this machine (no Kubernetes needed).
    #[cfg(feature = "local")]
    #[command(subcommand)]
    Local(LocalCommand),
}

#[cfg(feature = "local")]
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Start kube-local with dkv's CRDs and the operator; writes DIR/kubeconfig.
    Up(crate::local::UpArgs),
    /// Stop a detached `dkv local up`.
    Down(crate::local::DownArgs),
    /// Power a node of a running `dkv local up` off or on.
    #[command(subcommand)]
    Node(NodeCommand),
}

#[cfg(feature = "local")]
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Cut the node's power: its pods' processes get SIGKILL, its
    /// heartbeats stop, its volumes stay, as when a machine dies.
    Kill(crate::local::NodeArgs),
    /// Power the node on: it returns with its pods' data.
    Start(crate::local::NodeArgs),
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// clap checks argument definitions only in debug builds, at parse
    /// time: two arguments with the same id (`--namespace` and
    /// `--webhook-namespace` both were `namespace`) made every debug-built
    /// `dkv operator` panic at start.
    #[test]
    fn argument_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
