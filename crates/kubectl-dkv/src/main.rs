//! `kubectl dkv`: the kubectl plugin for dkv's etcd clusters.
//!
//! kubectl runs any executable named `kubectl-<name>` on the `PATH` as
//! `kubectl <name>`, with the arguments that follow; this binary is
//! `kubectl-dkv`. It talks to the API server the way kubectl does (the same
//! kubeconfig, `--context` and `-n/--namespace`) and changes clusters only
//! through their objects — a new `DistributedKVBackup`, a new
//! `DistributedKV`, an annotation — so every action goes through admission
//! and the operator, and shows in status and Events like any other edit.

mod cli;
mod client;
mod commands;
mod error;
mod etcd;
mod lookup;
mod output;
mod time;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
