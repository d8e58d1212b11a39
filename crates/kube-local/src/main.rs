//! `kube-local up --data-dir DIR [--nodes N] [--zones K] [--image-map FILE]`: serve a local control plane and its
//! nodes until SIGINT/SIGTERM, as a cluster serves: HTTPS only, every request authenticated and authorized (the
//! kubeconfig, written 0600 into DIR, carries an admin client certificate), the kubelets likewise. `kube-local node kill|start NAME --data-dir DIR`: cut or restore a node's
//! power in the environment serving DIR.

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
        /// Accepted for scripts written before serving securely became the only way; does nothing.
        #[arg(long, hide = true)]
        tls: bool,
        /// Accepted for scripts written before serving securely became the only way; does nothing.
        #[arg(long, hide = true)]
        auth: bool,
        /// How many nodes (`node-1` … `node-N`), each with its own kubelet.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        nodes: u16,
        /// How many zones the nodes are spread over (`zone-a`, `zone-b`, …, round-robin; 0: no zone label).
        #[arg(long, default_value_t = 3)]
        zones: u16,
        /// Seconds without a heartbeat before a node is declared `Ready=Unknown` (kube-controller-manager's
        /// `--node-monitor-grace-period`).
        #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(4..))]
        node_monitor_grace_period: u64,
        /// What the kubelets run for each image: a TOML image map (`[[image]]` entries of `pattern`, `bin_dir`,
        /// `entrypoint`, `cmd`; see the `kubelet::image_map` module), over the defaults. Without it only the debug
        /// images (busybox, alpine, ubuntu, debian: the host's shell) are mapped.
        #[arg(long)]
        image_map: Option<PathBuf>,
    },
    /// Power a node of a running environment off (as a power cut: its pods' processes get SIGKILL, heartbeats
    /// stop, volumes stay) or on again.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
}

#[derive(Subcommand)]
enum NodeAction {
    /// Cut the node's power.
    Kill {
        name: String,
        /// The data directory the environment was started with (`up --data-dir`).
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Power the node on: its kubelet returns and runs the pods still bound to it, with their data.
    Start {
        name: String,
        #[arg(long)]
        data_dir: PathBuf,
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
            tls: _,
            auth: _,
            nodes,
            zones,
            node_monitor_grace_period,
            image_map,
        } => {
            let mut kubelet = kube_local::kubelet::KubeletConfig::default();
            if let Some(file) = &image_map {
                kubelet = match kubelet.image_map_file(file) {
                    Ok(kubelet) => kubelet,
                    Err(e) => {
                        eprintln!("kube-local: {e}");
                        return std::process::ExitCode::FAILURE;
                    }
                };
            }
            let env = match kube_local::Environment::builder()
                .data_dir(&data_dir)
                .port(port)
                .authenticate(true)
                .kubelet_config(kubelet)
                .nodes(usize::from(nodes))
                .zones(usize::from(zones))
                .node_monitor_grace_period(std::time::Duration::from_secs(
                    node_monitor_grace_period,
                ))
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
        Command::Node { action } => {
            use kube_local::node_control::{Power, request};
            let (power, name, data_dir) = match action {
                NodeAction::Kill { name, data_dir } => (Power::Kill, name, data_dir),
                NodeAction::Start { name, data_dir } => (Power::Start, name, data_dir),
            };
            match request(&data_dir, power, &name).await {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kube-local: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
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
