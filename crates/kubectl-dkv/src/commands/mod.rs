//! One module per group of commands; [`run`] dispatches.

mod backup;
mod lifecycle;
mod maintenance;
mod promote;
mod report;
mod restore;
mod status;

use clap::CommandFactory;

use crate::cli::{Cli, Command};
use crate::client::Target;
use crate::error::Result;

pub async fn run(cli: Cli) -> Result<()> {
    if let Command::Completion { shell } = cli.command {
        // Needs no cluster.
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "kubectl-dkv",
            &mut std::io::stdout(),
        );
        return Ok(());
    }
    let target = Target::connect(&cli.global).await?;
    match cli.command {
        Command::Status { name, output } => status::run(&target, &name, output).await,
        Command::Backup {
            name,
            wait,
            timeout,
            verify,
            destination,
            credentials_secret,
            output,
        } => {
            let request = backup::Request {
                verify,
                destination,
                credentials_secret,
            };
            backup::take(&target, &name, request, wait.then_some(timeout), output).await
        }
        Command::Backups { name, output } => backup::list(&target, &name, output).await,
        Command::Restore {
            name,
            from,
            to_revision,
            to_time,
            new_name,
            output,
        } => {
            let source = restore::Source::from_flags(from, to_revision, to_time);
            restore::run(&target, &name, source, &new_name, output).await
        }
        Command::Etcdctl { name, member, args } => {
            let code = maintenance::etcdctl(&target, &name, member.as_deref(), &args).await?;
            if code != 0 {
                // etcdctl said why on stderr; its exit code is ours.
                std::process::exit(code);
            }
            Ok(())
        }
        Command::MoveLeader { name, to } => maintenance::move_leader(&target, &name, &to).await,
        Command::Defrag { name } => maintenance::defrag(&target, &name).await,
        Command::Report { name, file } => report::run(&target, &name, &file).await,
        Command::Restart { name } => lifecycle::restart(&target, &name).await,
        Command::Pause { name } => lifecycle::pause(&target, &name, true).await,
        Command::Resume { name } => lifecycle::pause(&target, &name, false).await,
        Command::Hibernate { name } => lifecycle::hibernate(&target, &name, true).await,
        Command::Wake { name } => lifecycle::hibernate(&target, &name, false).await,
        Command::ReleaseOldMembers { name } => lifecycle::release_old_members(&target, &name).await,
        Command::Promote {
            name,
            wait,
            timeout,
            at_revision,
        } => {
            let when = promote::When {
                wait: wait.then_some(timeout),
                at_revision: at_revision.map(|r| (r, timeout)),
            };
            promote::run(&target, &name, when).await
        }
        Command::Completion { .. } => Ok(()),
    }
}
