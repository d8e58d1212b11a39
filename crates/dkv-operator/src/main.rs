//! The `dkv` binary: parses the command line and runs the chosen role.

use clap::Parser;
use dkv_operator::cli::{Cli, Command};
#[cfg(feature = "local")]
use dkv_operator::cli::{LocalCommand, NodeCommand};

// The image build links the functions listed here first (Dockerfile,
// scripts/lib/image-build.sh). Read here only so that cargo relinks the
// binary when the list changes; an unused constant puts nothing in it.
const _IMAGE_SYMBOL_ORDER: &str = include_str!("../image-symbol-order.txt");

/// With the `dhat-heap` feature every allocation goes through dhat's
/// counting allocator; it profiles only while a profiler runs (below).
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        // `dkv local up` prepares before the runtime's threads start: with
        // `--kubernetes` this process moves into a network namespace of its
        // own, which only threads started afterwards share.
        #[cfg(feature = "local")]
        Command::Local(LocalCommand::Up(args)) => match dkv_operator::local::prepare(args)? {
            Some(prepared) => runtime()?.block_on(dkv_operator::local::up(prepared)),
            None => Ok(()),
        },
        command => runtime()?.block_on(run(command)),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

async fn run(command: Command) -> anyhow::Result<()> {
    // `DKV_DHAT_OUT=FILE` (with the `dhat-heap` feature): profile the heap
    // until the process ends normally (SIGTERM for the operator) and write
    // dhat's JSON to FILE (bench/heap-profile.sh reads it).
    // SIGUSR1 writes it at once instead, with everything still cached.
    #[cfg(feature = "dhat-heap")]
    let _profiler = std::env::var_os("DKV_DHAT_OUT").map(|file| {
        let profiler = dhat::Profiler::builder().file_name(file).build();
        let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1());
        match signal {
            Ok(mut usr1) => {
                tokio::spawn(async move {
                    usr1.recv().await;
                    drop(profiler);
                });
                None
            }
            Err(_) => Some(profiler),
        }
    });
    match command {
        Command::Operator(args) => dkv_operator::operator::run(args).await,
        Command::Crd => {
            print!("{}", dkv_operator::crd::all_yaml()?);
            Ok(())
        }
        Command::Backup(args) => dkv_operator::backup_agent::run(&args).await,
        Command::Member(command) => dkv_member::run(command).await,
        #[cfg(feature = "local")]
        Command::Local(LocalCommand::Up(_)) => {
            unreachable!("`dkv local up` is started by main before the runtime")
        }
        #[cfg(feature = "local")]
        Command::Local(LocalCommand::Down(args)) => dkv_operator::local::down(&args),
        #[cfg(feature = "local")]
        Command::Local(LocalCommand::Node(NodeCommand::Kill(args))) => {
            dkv_operator::local::node(&args, kube_local::node_control::Power::Kill).await
        }
        #[cfg(feature = "local")]
        Command::Local(LocalCommand::Node(NodeCommand::Start(args))) => {
            dkv_operator::local::node(&args, kube_local::node_control::Power::Start).await
        }
    }
}
