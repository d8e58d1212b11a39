//! `dkv local up|down`: the embedded default. On a machine without
//! Kubernetes it starts kube-local (a local Kubernetes-API-compatible control
//! plane) with dkv's CRDs and the operator, and leaves a kubeconfig so that
//! `kubectl` works against it as against a real cluster.
//!
//! Secure as a cluster is: the API server and every kubelet speak HTTPS only
//! and let in authenticated, authorized callers (the kubeconfig carries an
//! admin client certificate); the operator runs as its ServiceAccount under
//! deploy/'s RBAC ([`install`]); the data directory is its owner's alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use kube::CustomResourceExt;
use tokio::sync::watch;
use tracing::info;

use crate::operator::{DEFAULT_IMAGE, OperatorArgs};
use crate::server::EndpointArgs;
use crate::webhook::WebhookArgs;

pub mod etcd_tools;
pub mod install;
pub mod kubernetes;
use dkv_member::logging::LogFormat;

const PID_FILE: &str = "dkv-local.pid";
const LOG_FILE: &str = "dkv-local.log";
const KUBECONFIG: &str = "kubeconfig";

#[derive(Debug, Args, Clone)]
pub struct UpArgs {
    /// Where the kubeconfig, logs and volumes live.
    #[arg(long, default_value = ".dkv-local")]
    pub data_dir: PathBuf,
    /// API server port (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Run in the background; stop with `dkv local down`.
    #[arg(long)]
    pub detach: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Image mappings (TOML, `[[image]]` entries with `pattern`, `bin_dir`,
    /// `entrypoint`) that take precedence over the defaults. With it, dkv
    /// fetches no etcd release: images it does not map and the tools
    /// directory lacks fail to start, as an image that cannot be pulled.
    #[arg(long, value_name = "FILE")]
    pub image_map: Option<PathBuf>,
    /// How many nodes (`node-1` … `node-N`), each with its own kubelet; the
    /// members of a cluster spread over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    pub nodes: u16,
    /// How many zones the nodes are spread over (`zone-a`, `zone-b`, …).
    #[arg(long, default_value_t = 3)]
    pub zones: u16,
    /// Run the real Kubernetes control plane of this release (`1.37`, or
    /// `1.34`, the oldest dkv supports) instead of kube-local's API server:
    /// kube-apiserver, kube-controller-manager and kube-scheduler, built
    /// from their Go modules on first use (needs Go) and kept in the tools
    /// directory; kube-local's kubelets join it as the nodes.
    #[arg(long, value_name = "VERSION")]
    pub kubernetes: Option<String>,
    /// Also run etcd of this release line (`3.6` or `3.7`; repeat for
    /// both): built from etcd's Go modules on first use (needs Go) and kept
    /// in the tools directory, then `registry.k8s.io/etcd:3.6.16-0` and its
    /// quay.io and gcr.io tags run it. 3.4 and 3.5 need no flag and no Go.
    #[arg(long = "etcd", value_name = "VERSION")]
    pub etcd: Vec<String>,
    /// Start the cluster without dkv: install the operator yourself, as on
    /// any cluster (`helm install dkv charts/dkv --namespace dkv-system
    /// --create-namespace --set listenOn=podIP`, or `kubectl apply
    /// --server-side -k deploy/local`); it then runs as a pod.
    #[arg(long)]
    pub no_operator: bool,
}

#[derive(Debug, Args, Clone)]
pub struct NodeArgs {
    /// The node, e.g. `node-2` (`kubectl get nodes`).
    pub name: String,
    /// The data directory `dkv local up` runs with.
    #[arg(long, default_value = ".dkv-local")]
    pub data_dir: PathBuf,
}

#[derive(Debug, Args, Clone)]
pub struct DownArgs {
    #[arg(long, default_value = ".dkv-local")]
    pub data_dir: PathBuf,
}

/// What `dkv local up` has set up before its runtime starts.
pub struct LocalSetup {
    args: UpArgs,
    data_dir: PathBuf,
    image_map_file: Option<PathBuf>,
    tools: PathBuf,
    /// With `--kubernetes`: the API server's port on the host, this process
    /// being in the pods' network namespace ([`kubernetes::pod_network`]).
    host_port: Option<kubernetes::pod_network::HostPort>,
}

/// The part of `dkv local up` that runs before the async runtime starts:
/// checks, downloads and builds (progress and errors reach the terminal),
/// the background process for `--detach` (then `None`: nothing left to
/// do), and with `--kubernetes` the move into the pods' network namespace,
/// which only threads started afterwards share.
pub fn prepare(args: UpArgs) -> anyhow::Result<Option<LocalSetup>> {
    // The store holds every Secret and the kubeconfig the admin's key: the
    // directory is its owner's alone (an existing one is made so).
    kube_local::private_files::create_dir(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = args
        .data_dir
        .canonicalize()
        .with_context(|| format!("resolving {}", args.data_dir.display()))?;
    if let Some(pid) = running_pid(&data_dir) {
        bail!(
            "dkv local is already running in {} (pid {pid}); stop it with `dkv local down --data-dir {}`",
            data_dir.display(),
            args.data_dir.display()
        );
    }
    let image_map_file = args
        .image_map
        .as_ref()
        .map(|f| {
            f.canonicalize()
                .with_context(|| format!("reading the image map {}", f.display()))
        })
        .transpose()?;

    dkv_member::logging::init(args.log_format);
    // etcd releases are fetched on first use, here rather than in the
    // background process: progress and errors reach the terminal.
    let tools = etcd_tools::tools_dir()?;
    let from_go = args
        .etcd
        .iter()
        .map(|minor| etcd_tools::find_go_release(minor))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if image_map_file.is_none() {
        etcd_tools::ensure(&tools)?;
    }
    etcd_tools::ensure_built(&tools, &from_go)?;
    // Likewise the Kubernetes build, a long one the first time.
    if let Some(version) = &args.kubernetes {
        let release = kubernetes::release::find(version)?;
        // Here rather than in the background process: the refusal reaches
        // the terminal.
        kubernetes::check_release(&data_dir, release)?;
        release.ensure(&tools)?;
    }
    if args.detach {
        detach(&args, &data_dir, image_map_file.as_deref())?;
        return Ok(None);
    }
    let host_port = args
        .kubernetes
        .is_some()
        .then(|| kubernetes::pod_network::enter(args.port))
        .transpose()?;
    Ok(Some(LocalSetup {
        args,
        data_dir,
        image_map_file,
        tools,
        host_port,
    }))
}

/// Starts the local control plane and operator (after [`prepare`]).
pub async fn up(prepared: LocalSetup) -> anyhow::Result<()> {
    let LocalSetup {
        args,
        data_dir,
        image_map_file,
        tools,
        host_port,
    } = prepared;

    // Run as root, the kubelet starts pods as their security context says
    // (dkv's as user 65532), while this process writes the same file://
    // backup destinations in-process (the continuous-backup agent,
    // retention, verification): what it creates there is handed to the
    // pods' user, so each writer can write beside what the other created.
    if rustix::process::geteuid().is_root() {
        let user = u32::try_from(crate::parts::hardening::RUN_AS).context("the pods' user id")?;
        dkv_backup::own_created_files_as(dkv_backup::FileOwner {
            uid: user,
            gid: user,
        })
        .map_err(|set| anyhow::anyhow!("file:// stores are already handed to {set:?}"))?;
    }
    // Pods run as local processes: etcd images map to the etcd releases in
    // the tools directory, the dkv image to this very executable
    // (member-init, backups).
    let dkv_binary = std::env::current_exe().context("locating the dkv binary")?;
    let mut image_map = etcd_tools::image_map(&tools, &dkv_binary);
    if let Some(file) = &image_map_file {
        image_map
            .overlay_file(file)
            .with_context(|| format!("reading the image map {}", file.display()))?;
    }
    let kubelet = kube_local::kubelet::KubeletConfig {
        image_map,
        // Pods run as their security context says (when this runs as root),
        // as on a real node: dkv's members as user 65532, read-only root.
        enforce_security_context: true,
        ..kube_local::kubelet::KubeletConfig::default()
    };
    let platform = match &args.kubernetes {
        None => Platform::KubeLocal(
            kube_local::Environment::builder()
                // Both served versions, as `dkv crd` installs them; the
                // operator points the conversion at its webhook once that
                // serves.
                .crds(if args.no_operator { Vec::new() } else { crds() })
                .data_dir(&data_dir)
                .port(args.port)
                // HTTPS; every request authenticated (the kubeconfig's admin
                // client certificate, ServiceAccount tokens) and authorized
                // by RBAC; the kubelets likewise.
                .authenticate(true)
                .kubelet_config(kubelet)
                .nodes(usize::from(args.nodes))
                .zones(usize::from(args.zones))
                .build()
                .await
                .context("starting kube-local")?,
        ),
        Some(version) => {
            let release = kubernetes::release::find(version)?;
            let bin = release.ensure(&tools)?;
            let etcd = etcd_tools::bin_dir(&tools, &etcd_tools::RELEASE_3_5).join("etcd");
            let host_port = host_port.context("the API server's host port")?;
            let plane =
                kubernetes::ControlPlane::start(release, &bin, &etcd, &data_dir, host_port.port()?)
                    .await?;
            let relay = host_port.serve()?;
            let mut kubelet = kubelet;
            kubelet.nodes.count = usize::from(args.nodes);
            kubelet.nodes.zones = usize::from(args.zones);
            kubelet.pod_network =
                kube_local::kubelet::PodNetwork::Local16(kubernetes::pod_network::POD_BLOCK);
            let nodes = Arc::new(plane.join_nodes(kubelet, &data_dir).await?);
            let control = kube_local::node_control::listen(&data_dir)
                .context("listening for `dkv local node` requests")?;
            tokio::spawn(kube_local::node_control::serve(
                control,
                Arc::downgrade(&nodes),
            ));
            let storage = plane.start_storage(&data_dir).await?;
            if !args.no_operator {
                install::crds(&plane.admin, &crds()).await?;
            }
            Platform::Kubernetes {
                _relay: tokio_util::task::AbortOnDropHandle::new(relay),
                plane,
                _nodes: nodes,
                _storage: storage,
            }
        }
    };
    if args.no_operator {
        write_pid_file(&data_dir)?;
        print_usage(platform.kubeconfig(), &args.data_dir);
        crate::operator::wait_for_signal().await;
        info!("shutdown requested");
        platform.stop();
        let _ = std::fs::remove_file(data_dir.join(PID_FILE));
        return Ok(());
    }
    // The operator's namespace, ServiceAccount, RBAC and webhook
    // configurations, as deploy/ installs them; then the operator runs as
    // that ServiceAccount.
    let admin = platform.admin();
    install::apply(&admin)
        .await
        .context("installing the operator's RBAC and webhook configurations")?;
    let token = install::operator_token(&admin).await?;
    let operator_client = platform
        .token_client(&token)
        .context("building the operator's client")?;
    write_pid_file(&data_dir)?;
    print_usage(platform.kubeconfig(), &args.data_dir);

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        crate::operator::wait_for_signal().await;
        info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let operator = OperatorArgs {
        endpoints: EndpointArgs {
            metrics_addr: "127.0.0.1:0".parse().context("metrics address")?,
            // As in-cluster: HTTPS, scrapers authenticated by TokenReview and
            // authorized for GET /metrics by SubjectAccessReview.
            metrics_secure: true,
            metrics_cert_dir: None,
            health_addr: None,
        },
        log_format: args.log_format,
        namespace: None,
        concurrency: 8,
        operator_image: DEFAULT_IMAGE.to_owned(),
        // One process owns this control plane: nobody to elect against.
        leader_election: false,
        leader_election_lease: "dkv-operator-leader".to_owned(),
        leader_election_namespace: install::NAMESPACE.to_owned(),
        identity: Some("dkv-local".to_owned()),
        tls_certificate_validity_seconds: 365 * 24 * 3600,
        member_upgrades_per_minute:
            crate::cluster::upgrade::member_side::DEFAULT_UPGRADES_PER_MINUTE,
        member_side_epoch: 0,
        webhook: local_webhooks()?,
    };
    let result = crate::operator::run_with(operator_client, operator, stop_rx).await;
    platform.stop();
    let _ = std::fs::remove_file(data_dir.join(PID_FILE));
    result
}

/// dkv's CRDs as `dkv crd` installs them: both served versions.
fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        crate::crd::distributedkv(&crate::crd::ConversionService::default()),
        dkv_api::DistributedKVBackup::crd(),
    ]
}

/// What `dkv local up` runs dkv on.
enum Platform {
    /// kube-local: its API server, controllers and kubelets.
    KubeLocal(kube_local::Environment),
    /// The real control plane with kube-local's kubelets as its nodes.
    /// (Fields drop in order: the provisioner and the kubelets before the
    /// control plane they talk to.)
    Kubernetes {
        /// Relays the host's API server port into the pods' network.
        _relay: tokio_util::task::AbortOnDropHandle<()>,
        _storage: kube_local::workloads::ExternalProvisioner,
        _nodes: Arc<kube_local::kubelet::Kubelet>,
        plane: kubernetes::ControlPlane,
    },
}

impl Platform {
    /// A client as the cluster's admin.
    fn admin(&self) -> kube::Client {
        match self {
            Platform::KubeLocal(env) => env.client(),
            Platform::Kubernetes { plane, .. } => plane.admin.clone(),
        }
    }

    /// A client with a bearer token.
    fn token_client(&self, token: &str) -> anyhow::Result<kube::Client> {
        match self {
            Platform::KubeLocal(env) => Ok(env.client_with_token(Some(token))?),
            Platform::Kubernetes { plane, .. } => plane.token_client(token),
        }
    }

    /// The admin's kubeconfig.
    fn kubeconfig(&self) -> &Path {
        match self {
            Platform::KubeLocal(env) => env.kubeconfig_path(),
            Platform::Kubernetes { plane, .. } => &plane.kubeconfig,
        }
    }

    /// Stops everything (the kubelets' pods first).
    fn stop(self) {
        match self {
            Platform::KubeLocal(env) => env.stop(),
            Platform::Kubernetes {
                _relay,
                plane,
                _nodes,
                _storage,
            } => {
                drop(_relay);
                drop(_storage);
                drop(_nodes);
                drop(plane);
            }
        }
    }
}

/// Admission as on a cluster, reached by URL: kube-local runs on this
/// machine and calls the operator's webhook server on loopback.
pub fn local_webhooks() -> anyhow::Result<WebhookArgs> {
    Ok(WebhookArgs {
        enabled: true,
        addr: "127.0.0.1:0".parse().context("webhook address")?,
        namespace: install::NAMESPACE.to_owned(),
        service: "dkv-operator-webhook".to_owned(),
        secret: "dkv-operator-webhook-tls".to_owned(),
        configuration: "dkv-operator".to_owned(),
        register_url: true,
        cert_validity_seconds: 90 * 24 * 3600,
        cert_renew_before_seconds: 30 * 24 * 3600,
    })
}

/// Re-runs `dkv local up` in the background and waits until it serves.
fn detach(args: &UpArgs, data_dir: &Path, image_map: Option<&Path>) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the dkv binary")?;
    let log = kube_local::private_files::open(&data_dir.join(LOG_FILE), false)
        .context("creating the log file")?;
    let kubeconfig = data_dir.join(KUBECONFIG);
    let _ = std::fs::remove_file(&kubeconfig);
    let mut command = Command::new(exe);
    command
        .args(["local", "up", "--data-dir"])
        .arg(data_dir)
        .args(["--port", &args.port.to_string()])
        .args(["--nodes", &args.nodes.to_string()])
        .args(["--zones", &args.zones.to_string()]);
    if let Some(version) = &args.kubernetes {
        command.args(["--kubernetes", version]);
    }
    for etcd in &args.etcd {
        command.args(["--etcd", etcd]);
    }
    if args.no_operator {
        command.arg("--no-operator");
    }
    if let Some(format) = clap::ValueEnum::to_possible_value(&args.log_format) {
        command.args(["--log-format", format.get_name()]);
    }
    if let Some(file) = image_map {
        command.arg("--image-map").arg(file);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("log file")?)
        .stderr(log)
        // Its own process group: a Ctrl-C in this terminal must not stop it.
        .process_group(0)
        .spawn()
        .context("starting dkv local in the background")?;
    // The real control plane waits for its API server and controllers too.
    let limit = if args.kubernetes.is_some() { 300 } else { 60 };
    let deadline = Instant::now() + Duration::from_secs(limit);
    while running_pid(data_dir).is_none() {
        if let Some(status) = child
            .try_wait()
            .context("watching the background process")?
        {
            bail!(
                "dkv local exited ({status}) before it served; see {}",
                data_dir.join(LOG_FILE).display()
            );
        }
        if Instant::now() > deadline {
            // Nothing is left behind that `dkv local down` could not find:
            // the background process, and with it what it started, stops.
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "dkv local did not start within {limit} s; see {}",
                data_dir.join(LOG_FILE).display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    print_usage(&kubeconfig, &args.data_dir);
    println!("Logs: {}", data_dir.join(LOG_FILE).display());
    println!(
        "Stop: dkv local down --data-dir {}",
        args.data_dir.display()
    );
    Ok(())
}

/// Cuts a node's power (`kill`) or restores it (`start`) in a running
/// `dkv local up`.
pub async fn node(args: &NodeArgs, power: kube_local::node_control::Power) -> anyhow::Result<()> {
    kube_local::node_control::request(&args.data_dir, power, &args.name)
        .await
        .with_context(|| format!("node {}", args.name))?;
    match power {
        kube_local::node_control::Power::Kill => println!(
            "node {} is down: its pods' processes were killed; its volumes stay",
            args.name
        ),
        kube_local::node_control::Power::Start => println!("node {} is up", args.name),
    }
    Ok(())
}

/// Stops a detached `dkv local up`.
pub fn down(args: &DownArgs) -> anyhow::Result<()> {
    let Some(pid) = running_pid(&args.data_dir) else {
        println!("dkv local is not running in {}", args.data_dir.display());
        return Ok(());
    };
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("could not signal pid {pid}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if Instant::now() > deadline {
            bail!("pid {pid} did not stop within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::fs::remove_file(args.data_dir.join(PID_FILE));
    println!("dkv local stopped");
    Ok(())
}

/// Says that this process serves (what `--detach` waits for).
fn write_pid_file(data_dir: &Path) -> anyhow::Result<()> {
    kube_local::private_files::write(
        &data_dir.join(PID_FILE),
        std::process::id().to_string().as_bytes(),
    )
    .context("writing the pid file")
}

/// The pid of a live `dkv local up` serving from `data_dir`, if any.
fn running_pid(data_dir: &Path) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(data_dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

fn print_usage(kubeconfig: &Path, data_dir: &Path) {
    println!("dkv local is up. Use it with:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  kubectl apply -f examples/distributedkv.yaml");
    println!("  kubectl get dkv -w");
    println!("(state in {})", data_dir.display());
}
