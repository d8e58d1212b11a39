//! Runs one container as a local process with a pod's view of the filesystem.
//!
//! The process runs under `unshare --mount --uts` (plus `--map-root-user` when not root) so that, in its private mount
//! namespace, a per-pod hosts file is bind-mounted over `/etc/hosts` and every volume at its `mountPath`. It leads its
//! own process group, so stopping a container signals everything it started.
//!
//! A container with `tty: true` runs on a pseudo-terminal instead ([`Launch::tty`]): it leads a session of its own
//! with the terminal as its controlling one (hence also its own process group), and the kubelet copies what it
//! prints from the terminal into its log, as a container runtime logs a TTY container's output.
//!
//! No process may outlive the environment: every process is recorded in [`Processes`], which kills them all when the
//! kubelet drops; and each is spawned from one long-lived thread with a parent-death signal, so that even a crashed
//! test binary takes its processes down with it (the signal fires when the spawning *thread* ends, hence a dedicated
//! thread rather than tokio's short-lived blocking threads).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

use super::terminal::Terminal;

/// A bind mount inside the container's mount namespace.
#[derive(Clone, Debug)]
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// Everything needed to start one container process.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub hosts_file: PathBuf,
    pub hostname: String,
    pub mounts: Vec<Mount>,
    pub working_dir: Option<String>,
    /// Where stdout and stderr go (appended).
    pub log: PathBuf,
    /// A directory of the container's own for staging its mounts.
    pub stage: PathBuf,
    /// What of the container's security context the process gets.
    pub security: super::security::Enforced,
    /// Whether the process reads a pipe the kubelet keeps for attached clients (`stdin: true`); otherwise its
    /// standard input is `/dev/null`.
    pub stdin: bool,
    /// Whether the process runs on a pseudo-terminal (`tty: true`): its standard streams are the terminal, whose
    /// output the kubelet copies to [`Launch::log`]; what attached clients send goes to the terminal when [`Launch::stdin`]
    /// is also set.
    pub tty: bool,
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Quotes a string for `sh`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A staging directory for `launch`'s mounts that no mount target hides: `preferred` unless a target covers it.
fn stage_dir(launch: &Launch) -> PathBuf {
    let covered = |p: &Path| {
        launch
            .mounts
            .iter()
            .any(|m| p.starts_with(&m.target) || Path::new(&m.target).starts_with(p))
    };
    // A process that drops root execs its program from the staging
    // directory, so every directory above it must be searchable: the
    // kubelet's own directory may not be.
    if !covered(&launch.stage) && launch.security.identity.is_none() {
        return launch.stage.clone();
    }
    let name = launch
        .stage
        .components()
        .rev()
        .take(3)
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("-");
    PathBuf::from("/run/kube-local").join(name)
}

/// Where the program is staged: under its own name, so the process shows as that name.
fn staged_program(launch: &Launch, stage: &Path) -> PathBuf {
    let name = launch
        .program
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "program".into());
    stage.join("bin").join(name)
}

/// The `sh` script run inside the namespaces: set up the mounts, then become the container's program.
///
/// A mount target may hide a source (a volume at `/tmp` hides the kubelet's files under `/tmp`) or the program
/// itself, so every source and the program are first bind-mounted into a staging directory that no target covers,
/// and only then moved to their targets.
fn setup_script(launch: &Launch, stage: &Path) -> String {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let mut s = String::from("set -e\n");
    s.push_str(&format!(
        "mount --bind {} /etc/hosts\n",
        q(&launch.hosts_file)
    ));
    s.push_str(&format!(
        "hostname {} 2>/dev/null || true\n",
        shell_quote(&launch.hostname)
    ));
    s.push_str(&format!("mkdir -p {}\n", q(stage)));
    let program = staged_program(launch, stage);
    s.push_str(&format!("mkdir -p {}\n", q(&stage.join("bin"))));
    s.push_str(&format!(
        "touch {p}; mount --bind {} {p}\n",
        q(&launch.program),
        p = q(&program)
    ));
    for (i, m) in launch.mounts.iter().enumerate() {
        let staged = q(&stage.join(i.to_string()));
        if m.source.is_dir() {
            s.push_str(&format!("mkdir -p {staged}\n"));
        } else {
            s.push_str(&format!("touch {staged}\n"));
        }
        s.push_str(&format!("mount --bind {} {staged}\n", q(&m.source)));
    }
    for (i, m) in launch.mounts.iter().enumerate() {
        let staged = q(&stage.join(i.to_string()));
        let dst = shell_quote(&m.target);
        if m.source.is_dir() {
            s.push_str(&format!("mkdir -p {dst}\n"));
        } else {
            s.push_str(&format!(
                "mkdir -p \"$(dirname {dst})\"; [ -e {dst} ] || touch {dst}\n"
            ));
        }
        s.push_str(&format!("mount --move {staged} {dst}\n"));
        if m.read_only {
            s.push_str(&format!("mount -o remount,bind,ro {dst}\n"));
        }
    }
    if let Some(dir) = &launch.working_dir {
        let dir = shell_quote(dir);
        s.push_str(&format!("mkdir -p {dir}; cd {dir}\n"));
    }
    if launch.security.read_only_root {
        // Only the root mount: volumes, /etc/hosts and /dev are mounts of
        // their own and keep their flags.
        s.push_str("mount -o remount,bind,ro /\n");
    }
    s.push_str(&format!(
        "exec {}{} \"$@\"\n",
        super::security::exec_prefix(&launch.security),
        q(&program)
    ));
    s
}

/// The command line that runs `launch` in its sandbox.
///
/// On a terminal, `setsid --ctty` runs first: the process leads a new session with its standard input (the
/// terminal) as controlling terminal, so a shell gets job control and ^C. (It is not a group leader when spawned —
/// see [`Processes::spawn`] — so it becomes the session's leader under its own pid, without forking.)
fn sandbox_command(launch: &Launch, stage: &Path) -> std::process::Command {
    let mut cmd = if launch.tty {
        let mut cmd = std::process::Command::new("setsid");
        cmd.args(["--ctty", "unshare"]);
        cmd
    } else {
        std::process::Command::new("unshare")
    };
    if !is_root() {
        cmd.arg("--map-root-user");
    }
    cmd.args(["--mount", "--uts", "--propagation", "private", "--"])
        .args(["setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c"])
        .arg(setup_script(launch, stage))
        .arg(&launch.program)
        .args(&launch.args);
    cmd.env_clear();
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    cmd
}

type SpawnRequest = (
    std::process::Command,
    oneshot::Sender<io::Result<tokio::process::Child>>,
);

/// The live processes of one kubelet, killed when it drops.
pub struct Processes {
    next: AtomicU64,
    groups: Mutex<HashMap<u64, Pid>>,
    spawner: Mutex<Option<mpsc::Sender<SpawnRequest>>>,
}

impl Processes {
    /// Starts the spawner thread; it lives as long as this value.
    pub fn new() -> io::Result<Arc<Processes>> {
        let runtime = tokio::runtime::Handle::current();
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("kube-local-spawner".into())
            .spawn(move || {
                let _guard = runtime.enter();
                while let Ok((cmd, reply)) = rx.recv() {
                    let mut cmd = tokio::process::Command::from(cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })?;
        Ok(Arc::new(Processes {
            next: AtomicU64::new(1),
            groups: Mutex::new(HashMap::new()),
            spawner: Mutex::new(Some(tx)),
        }))
    }

    /// Spawns `cmd` as the leader of a process group of its own; `session`: `cmd` makes itself the leader of a
    /// session (and so of a group) and must not lead a group when it starts.
    async fn spawn(
        self: &Arc<Self>,
        mut cmd: std::process::Command,
        session: bool,
    ) -> io::Result<ContainerProcess> {
        use std::os::unix::process::CommandExt;
        if !session {
            cmd.process_group(0);
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        {
            let spawner = self.spawner.lock().unwrap_or_else(|e| e.into_inner());
            let tx = spawner
                .as_ref()
                .ok_or_else(|| io::Error::other("the kubelet is stopping"))?;
            tx.send((cmd, reply_tx))
                .map_err(|_| io::Error::other("the process spawner stopped"))?;
        }
        let child = reply_rx
            .await
            .map_err(|_| io::Error::other("the process spawner stopped"))??;
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::other("the process exited before it was recorded"))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, pid);
        Ok(ContainerProcess {
            child,
            pid,
            id,
            processes: self.clone(),
            exec_path: None,
            terminal: None,
            output_copy: None,
        })
    }

    /// Starts a container process in its sandbox.
    pub async fn launch(self: &Arc<Self>, launch: &Launch) -> io::Result<ContainerProcess> {
        if let Some(dir) = launch.log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&launch.log)?;
        let stage = stage_dir(launch);
        let mut cmd = sandbox_command(launch, &stage);
        if !launch.tty {
            cmd.stdin(if launch.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(log.try_clone()?)
            .stderr(log);
            let mut process = self.spawn(cmd, false).await?;
            process.exec_path = Some(staged_program(launch, &stage));
            return Ok(process);
        }
        let (terminal, slave) = Terminal::open()?;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave));
        let output = terminal.master_file()?;
        // The spawner drops the command, and with it the kubelet's copies of the slave end: the terminal's output
        // ends when the container's processes have all closed theirs.
        let mut process = self.spawn(cmd, true).await?;
        process.exec_path = Some(staged_program(launch, &stage));
        let (logged, watched) = watch::channel(0);
        process.output_copy = Some(tokio::spawn(copy_to_log(
            output,
            tokio::fs::File::from_std(log),
            logged,
        )));
        process.terminal = Some(Arc::new(ContainerTerminal {
            terminal,
            logged: watched,
        }));
        Ok(process)
    }

    /// How many processes are running.
    pub fn count(&self) -> usize {
        self.groups.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Kills every process and stops spawning.
    pub fn kill_all(&self) {
        self.spawner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let groups = std::mem::take(&mut *self.groups.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in groups.values() {
            let _ = rustix::process::kill_process_group(*pid, Signal::KILL);
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Copies what a container prints on its terminal to its log until the terminal's output ends (EIO once every
/// process has closed the slave end), counting the bytes logged in `logged` for whoever follows the log.
async fn copy_to_log(
    mut terminal: tokio::fs::File,
    mut log: tokio::fs::File,
    logged: watch::Sender<u64>,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match terminal.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Flushed before it is announced: a follower woken by the count finds the bytes in the file.
        if let Err(e) = async {
            log.write_all(&buf[..n]).await?;
            log.flush().await
        }
        .await
        {
            tracing::warn!(error = %e, "writing a container's terminal output to its log");
            return;
        }
        logged.send_modify(|total| *total += n as u64);
    }
}

/// How long the exit of a container on a terminal waits for the copy of its last output into the log: it ends as
/// soon as the terminal has been read to its end, unless something the container started still holds the terminal.
const TERMINAL_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The pseudo-terminal a container with `tty: true` runs on ([`Launch::tty`]).
pub struct ContainerTerminal {
    terminal: Terminal,
    logged: watch::Receiver<u64>,
}

impl ContainerTerminal {
    /// A writer on the terminal: what it writes, the container reads as typed input.
    pub fn input(&self) -> io::Result<tokio::fs::File> {
        self.terminal.master_file()
    }

    /// Applies a resize message (channel 4) to the terminal.
    pub fn resize(&self, message: &[u8]) {
        self.terminal.resize(message);
    }

    /// Changes each time more of the container's output has been copied to its log.
    pub fn logged(&self) -> watch::Receiver<u64> {
        self.logged.clone()
    }
}

/// A running container process (the leader of its process group). Dropping it kills the group.
pub struct ContainerProcess {
    child: tokio::process::Child,
    pid: Pid,
    id: u64,
    processes: Arc<Processes>,
    /// The program's path once the sandbox setup has exec'd it.
    exec_path: Option<PathBuf>,
    /// The terminal it runs on ([`Launch::tty`]).
    terminal: Option<Arc<ContainerTerminal>>,
    /// The copy of the terminal's output into the log, until it has drained after the exit.
    output_copy: Option<tokio::task::JoinHandle<()>>,
}

impl ContainerProcess {
    pub fn pid(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Waits until the sandbox setup is done and the container's program runs (hooks and exec probes must see the
    /// mounts); false if the process ended or `timeout` passed first.
    pub async fn wait_exec(&mut self, timeout: std::time::Duration) -> bool {
        let Some(expected) = self.exec_path.clone() else {
            return true;
        };
        let exe = format!("/proc/{}/exe", self.pid());
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if std::fs::read_link(&exe).is_ok_and(|p| p == expected) {
                return true;
            }
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_))
                || tokio::time::Instant::now() > deadline
            {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// The write end of the process's standard input, when it was launched with one ([`Launch::stdin`]).
    pub fn take_stdin(&mut self) -> Option<tokio::process::ChildStdin> {
        self.child.stdin.take()
    }

    /// The terminal the process runs on, when it was launched on one ([`Launch::tty`]).
    pub fn terminal(&self) -> Option<Arc<ContainerTerminal>> {
        self.terminal.clone()
    }

    /// Signals the whole process group.
    pub fn signal(&self, signal: Signal) {
        let _ = rustix::process::kill_process_group(self.pid, signal);
    }

    /// Waits for the process to exit; returns its exit code (128 + signal when killed by a signal). On a terminal,
    /// also until its last output is in the log (see [`TERMINAL_DRAIN`]): a run is over once its log is complete.
    pub async fn wait(&mut self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let code = match self.child.wait().await {
            Ok(status) => status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(128),
            Err(_) => 128,
        };
        if let Some(copy) = self.output_copy.take()
            && tokio::time::timeout(TERMINAL_DRAIN, copy).await.is_err()
        {
            tracing::debug!(
                pid = self.pid(),
                "a container's terminal is still held after its exit"
            );
        }
        code
    }

    /// Sends SIGTERM, waits up to `grace`, then SIGKILL; returns the exit code.
    pub async fn terminate(&mut self, grace: std::time::Duration) -> i32 {
        self.signal(Signal::TERM);
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(code) => {
                // Children the program left behind go with it.
                self.signal(Signal::KILL);
                code
            }
            Err(_) => {
                self.signal(Signal::KILL);
                self.wait().await
            }
        }
    }
}

impl Drop for ContainerProcess {
    fn drop(&mut self) {
        self.signal(Signal::KILL);
        self.processes
            .groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// A command that runs `program` with `args` inside the mount and UTS namespaces of the container process `pid`, in
/// that process's working directory, with the container's environment `env` (and [`DEFAULT_PATH`] when it sets no
/// `PATH`): what exec probes, hooks and `kubectl exec` run. It leads its own process group (stop it with
/// [`kill_group`]) and is killed if dropped while running; its standard streams are the caller's to set.
///
/// With `terminal`, its standard input must be a terminal: the command then leads a session of its own with that
/// terminal as its controlling one (`setsid --ctty`, so a shell gets job control and ^C), which also makes it the
/// leader of its process group.
pub fn command_in(
    pid: i32,
    program: &std::ffi::OsStr,
    args: &[String],
    env: &[(String, String)],
    terminal: bool,
) -> tokio::process::Command {
    let mut cmd = if terminal {
        // setsid is not a group leader here (it is in the kubelet's group), so it becomes the session's leader
        // itself, under its own pid, and execs nsenter.
        let mut cmd = tokio::process::Command::new("setsid");
        cmd.args(["--ctty", "nsenter"]);
        cmd
    } else {
        let mut cmd = tokio::process::Command::new("nsenter");
        cmd.process_group(0);
        cmd
    };
    cmd.arg(format!("--target={pid}"));
    if !is_root() {
        cmd.args(["--user", "--preserve-credentials"]);
    }
    cmd.args(["--mount", "--uts", "--wd", "--"])
        .arg(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .kill_on_drop(true);
    if !env.iter().any(|(k, _)| k == "PATH") {
        cmd.env("PATH", DEFAULT_PATH);
    }
    cmd
}

/// Kills the process group led by the child `id` (a [`command_in`] command and whatever it started).
pub fn kill_group(id: Option<u32>) {
    if let Some(group) = id
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
    }
}

/// Runs a command inside a running container's mount namespace (exec probes), with the container's environment;
/// returns whether it exited 0 within `timeout`, and its output.
pub async fn exec_in(
    pid: i32,
    command: &[String],
    env: &[(String, String)],
    timeout: std::time::Duration,
) -> (bool, String) {
    let Some(first) = command.first() else {
        return (false, "empty command".into());
    };
    let mut cmd = command_in(pid, first.as_ref(), &command[1..], env, false);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (false, e.to_string()),
    };
    let group = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.success(), text)
        }
        Ok(Err(e)) => (false, e.to_string()),
        Err(_) => {
            kill_group(group);
            (false, format!("command timed out after {timeout:?}"))
        }
    }
}

/// The `PATH` of a container that sets none (what container runtimes default to).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Creates `path`'s parent directories.
pub fn ensure_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(p) => std::fs::create_dir_all(p),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
