//! The network the real control plane and its nodes run in.
//!
//! kube-local's own API server takes pods at loopback addresses, which every
//! process on the machine can bind without configuration. kube-apiserver
//! refuses loopback addresses in Endpoints and EndpointSlices, so with them
//! no Service would have endpoints. Here pods get ordinary addresses
//! ([`POD_BLOCK`], a /16 as kind's pod network) instead, made local in a
//! network namespace of dkv's own: the host's network is left as it was,
//! and the namespace ends with the last process in it.
//!
//! The process moves into that namespace before its runtime starts, so its
//! every thread and child (etcd, the control plane, the kubelets' pods) is
//! inside. Only the API server's port is published on the host's loopback:
//! [`HostPort`] was bound before the move and relays each connection to the
//! same port inside, so the kubeconfig's URL is right on both sides.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The first two octets of every node, pod and Service proxy address.
pub const POD_BLOCK: [u8; 2] = [10, 244];

/// The API server's port on the host's loopback, bound before this process
/// left the host's network.
pub struct HostPort {
    listener: std::net::TcpListener,
}

impl HostPort {
    pub fn port(&self) -> anyhow::Result<u16> {
        Ok(self
            .listener
            .local_addr()
            .context("the API server's host port")?
            .port())
    }

    /// Relays every connection to the host port to the same port on
    /// loopback inside the namespace, until the runtime stops.
    pub fn serve(self) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let port = self.port()?;
        self.listener
            .set_nonblocking(true)
            .context("the API server's host port")?;
        let listener = tokio::net::TcpListener::from_std(self.listener)
            .context("the API server's host port")?;
        let inside = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        Ok(tokio::spawn(async move {
            loop {
                let Ok((mut outside, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                tokio::spawn(async move {
                    // Sockets keep the namespace they were made in: this
                    // one, made by a thread inside, reaches the API server.
                    if let Ok(mut api) = tokio::net::TcpStream::connect(inside).await {
                        let _ = tokio::io::copy_bidirectional(&mut outside, &mut api).await;
                    }
                });
            }
        }))
    }
}

/// Binds the API server's `port` (0: a free one) on the host's loopback,
/// then moves the calling thread into a new network namespace with loopback
/// up and all of [`POD_BLOCK`]/16 local. Call it before any other thread
/// starts: only threads started afterwards share the namespace.
pub fn enter(port: u16) -> anyhow::Result<HostPort> {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .with_context(|| format!("binding the API server's port {port} on 127.0.0.1"))?;
    let namespace = new_namespace()?;
    rustix::thread::move_into_link_name_space(
        namespace.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .context("entering the pods' network namespace")?;
    let [a, b] = POD_BLOCK;
    ip(&["link", "set", "lo", "up"])?;
    ip(&[
        "route",
        "add",
        "local",
        &format!("{a}.{b}.0.0/16"),
        "dev",
        "lo",
    ])?;
    Ok(HostPort { listener })
}

/// A new network namespace, made by `unshare --net` in a short-lived child
/// (creating one needs root, CAP_SYS_ADMIN); the open file keeps it.
fn new_namespace() -> anyhow::Result<std::fs::File> {
    let mut holder = Command::new("setpriv")
        .args([
            "--pdeathsig",
            "KILL",
            "--",
            "unshare",
            "--net",
            "--",
            "sleep",
            "600",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting `unshare --net` (util-linux) for the pods' network namespace")?;
    let own = std::fs::read_link("/proc/self/ns/net")
        .context("reading this process's network namespace")?;
    let path = PathBuf::from(format!("/proc/{}/ns/net", holder.id()));
    let deadline = Instant::now() + Duration::from_secs(10);
    let result = loop {
        if let Some(status) = holder.try_wait().context("waiting for `unshare --net`")? {
            let mut reason = String::new();
            if let Some(mut stderr) = holder.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut reason);
            }
            bail!(
                "`unshare --net` failed ({status}): {}. `dkv local up --kubernetes` runs its pods in a network namespace of their own (kube-apiserver refuses loopback pod addresses), which needs root",
                reason.trim()
            );
        }
        // Until unshare has run, the child is still in this namespace.
        if std::fs::read_link(&path).is_ok_and(|ns| ns != own) {
            break std::fs::File::open(&path).context("opening the pods' network namespace");
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!(
                "`unshare --net` made no namespace within 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = holder.kill();
    let _ = holder.wait();
    result
}

/// Runs `ip ARGS` (iproute2) in this thread's namespace.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running `ip {}` (iproute2)", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
