//! `kube-local up --data-dir DIR [--tls] [--auth]`: serve a local control plane until SIGINT/SIGTERM.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kube-local",
    about = "A local Kubernetes-API-compatible control plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve in the foreground; writes DIR/kubeconfig once the API answers and prints its path.
    Up {
        #[arg(long)]
        data_dir: PathBuf,
        /// Port on 127.0.0.1 (default: random).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Serve HTTPS (a fresh CA; the kubeconfig trusts it).
        #[arg(long)]
        tls: bool,
        /// Authenticate and authorize requests as kube-apiserver does: the kubeconfig carries an admin client
        /// certificate (`system:masters`), ServiceAccount tokens authenticate their account, RBAC decides.
        /// Implies --tls.
        #[arg(long)]
        auth: bool,
    },
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Up {
            data_dir,
            port,
            tls,
            auth,
        } => {
            let env = match kube_local::Environment::builder()
                .data_dir(&data_dir)
                .port(port)
                .tls(tls)
                .authenticate(auth)
                .build()
                .await
            {
                Ok(env) => env,
                Err(e) => {
                    eprintln!("kube-local: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            };
            println!("{}", env.kubeconfig_path().display());
            wait_for_signal().await;
            drop(env);
            std::process::ExitCode::SUCCESS
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
}
