//! A container's probes: which a run has, the `started` and `ready` flags they give its status, and the probe tasks
//! of one run ([`ProbeSet`]) with the decisions they send (started, ready or not, restart).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;

use super::is_sidecar;
use crate::kubelet::{Shared, events, probe};

/// The probes the kubelet runs for one container: plain init containers have none; sidecars (init containers with
/// `restartPolicy: Always`) probe like containers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Probes {
    /// Whether the container is probed at all.
    pub probed: bool,
    pub startup: bool,
    pub readiness: bool,
}

impl Probes {
    pub(super) fn of(container: &Container, init: bool) -> Probes {
        let probed = !init || is_sidecar(container);
        Probes {
            probed,
            startup: container.startup_probe.is_some() && probed,
            readiness: container.readiness_probe.is_some() && probed,
        }
    }

    /// `started` and `ready` of a run that has just started: started unless a startup probe has yet to pass; ready
    /// at once only for a probed container with neither startup nor readiness probe (plain init containers never are).
    pub(super) fn at_start(self) -> (bool, bool) {
        (
            !self.startup,
            !self.startup && !self.readiness && self.probed,
        )
    }

    /// `ready` once the startup probe has passed: true without a readiness probe; otherwise the readiness probe
    /// decides (`None`: unchanged).
    pub(super) fn ready_after_startup(self) -> Option<bool> {
        (!self.readiness).then_some(true)
    }
}

/// The readiness to report after a readiness probe reading (`None`: no result yet, which counts as not ready), given
/// the readiness last reported: `None` when it has not changed.
pub(super) fn readiness_change(last: Option<bool>, reading: Option<bool>) -> Option<bool> {
    let ready = reading == Some(true);
    (last != Some(ready)).then_some(ready)
}

pub(super) enum ProbeVerdict {
    Started,
    Ready(bool),
    /// Liveness or startup failed: the container is restarted.
    Restart(&'static str),
}

/// The probe tasks of one container run; dropped, they stop.
pub(super) struct ProbeSet {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    startup: Option<watch::Receiver<Option<bool>>>,
    readiness: Option<watch::Receiver<Option<bool>>>,
    liveness: Option<watch::Receiver<Option<bool>>>,
    /// Probe templates not yet running (readiness and liveness wait for startup).
    pending: Vec<(&'static str, k8s_openapi::api::core::v1::Probe)>,
    shared: Arc<Shared>,
    pod: Pod,
    container: String,
    target: probe::Target,
    last_ready: Option<bool>,
}

impl ProbeSet {
    pub(super) fn start(
        shared: &Arc<Shared>,
        pod: &Pod,
        container: &Container,
        target: &probe::Target,
        init: bool,
    ) -> ProbeSet {
        let mut set = ProbeSet {
            tasks: Vec::new(),
            startup: None,
            readiness: None,
            liveness: None,
            pending: Vec::new(),
            shared: shared.clone(),
            pod: pod.clone(),
            container: container.name.clone(),
            target: target.clone(),
            last_ready: None,
        };
        if init {
            return set;
        }
        if let Some(p) = &container.readiness_probe {
            set.pending.push(("readiness", p.clone()));
        }
        if let Some(p) = &container.liveness_probe {
            set.pending.push(("liveness", p.clone()));
        }
        match &container.startup_probe {
            Some(p) => set.startup = Some(set.spawn("startup", p.clone())),
            None => set.start_pending(),
        }
        set
    }

    fn spawn(
        &mut self,
        which: &'static str,
        p: k8s_openapi::api::core::v1::Probe,
    ) -> watch::Receiver<Option<bool>> {
        let (tx, rx) = watch::channel(None);
        let client = self.shared.client.clone();
        let pod = self.pod.clone();
        let container = self.container.clone();
        let target = self.target.clone();
        self.tasks.push(tokio::spawn(async move {
            let on_failure = move |message: String| {
                events::record(
                    &client,
                    &pod,
                    Some(&container),
                    true,
                    "Unhealthy",
                    format!("{} probe failed: {message}", capitalize(which)),
                    "kubelet",
                );
            };
            probe::run(p, target, tx, None, on_failure).await;
        }));
        rx
    }

    fn start_pending(&mut self) {
        for (which, p) in std::mem::take(&mut self.pending) {
            let rx = self.spawn(which, p);
            match which {
                "readiness" => self.readiness = Some(rx),
                _ => self.liveness = Some(rx),
            }
        }
    }

    /// The next decision of any probe (pending forever when there are no probes).
    pub(super) async fn next(&mut self) -> ProbeVerdict {
        loop {
            if let Some(rx) = &mut self.startup {
                let value = *rx.borrow_and_update();
                match value {
                    Some(true) => {
                        self.startup = None;
                        self.start_pending();
                        return ProbeVerdict::Started;
                    }
                    Some(false) => return ProbeVerdict::Restart("startup"),
                    None => {}
                }
            }
            if let Some(rx) = &mut self.liveness
                && *rx.borrow_and_update() == Some(false)
            {
                return ProbeVerdict::Restart("liveness");
            }
            if let Some(rx) = &mut self.readiness
                && let Some(ready) = readiness_change(self.last_ready, *rx.borrow_and_update())
            {
                self.last_ready = Some(ready);
                return ProbeVerdict::Ready(ready);
            }
            let wait_startup = async {
                match &mut self.startup {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => futures::future::pending().await,
                }
            };
            // (A fresh borrow per branch keeps the receivers' change tracking independent.)
            tokio::select! {
                _ = wait_startup => {}
                _ = async { match &mut self.liveness { Some(rx) => { let _ = rx.changed().await; } None => futures::future::pending::<()>().await } } => {}
                _ = async { match &mut self.readiness { Some(rx) => { let _ = rx.changed().await; } None => futures::future::pending::<()>().await } } => {}
            }
        }
    }
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Probe;

    use super::*;

    fn container(startup: bool, readiness: bool, sidecar: bool) -> Container {
        Container {
            name: "c".into(),
            startup_probe: startup.then(Probe::default),
            readiness_probe: readiness.then(Probe::default),
            liveness_probe: Some(Probe::default()),
            restart_policy: sidecar.then(|| "Always".into()),
            ..Container::default()
        }
    }

    #[test]
    fn a_container_without_startup_or_readiness_probe_is_ready_at_once() {
        let p = Probes::of(&container(false, false, false), false);
        assert!(p.probed);
        assert_eq!(p.at_start(), (true, true), "(started, ready)");
    }

    #[test]
    fn a_readiness_probe_holds_readiness_until_it_passes() {
        let p = Probes::of(&container(false, true, false), false);
        assert_eq!(p.at_start(), (true, false));
        assert_eq!(
            readiness_change(None, None),
            Some(false),
            "no result yet: reported unready"
        );
        assert_eq!(readiness_change(Some(false), None), None);
        assert_eq!(readiness_change(Some(false), Some(false)), None);
        assert_eq!(readiness_change(Some(false), Some(true)), Some(true));
        assert_eq!(readiness_change(Some(true), Some(true)), None);
        assert_eq!(readiness_change(Some(true), Some(false)), Some(false));
        assert_eq!(readiness_change(None, Some(true)), Some(true));
    }

    #[test]
    fn a_startup_probe_holds_started_and_ready_until_it_passes() {
        let p = Probes::of(&container(true, false, false), false);
        assert_eq!(p.at_start(), (false, false));
        assert_eq!(
            p.ready_after_startup(),
            Some(true),
            "no readiness probe: ready once started"
        );
        let p = Probes::of(&container(true, true, false), false);
        assert_eq!(p.at_start(), (false, false));
        assert_eq!(p.ready_after_startup(), None, "the readiness probe decides");
    }

    #[test]
    fn plain_init_containers_are_not_probed_and_never_ready() {
        for (startup, readiness) in [(false, false), (true, true)] {
            let p = Probes::of(&container(startup, readiness, false), true);
            assert!(!p.probed && !p.startup && !p.readiness);
            assert_eq!(p.at_start(), (true, false));
        }
    }

    #[test]
    fn sidecars_are_probed_like_containers() {
        let p = Probes::of(&container(false, false, true), true);
        assert!(p.probed);
        assert_eq!(p.at_start(), (true, true));
        let p = Probes::of(&container(true, true, true), true);
        assert!(p.probed && p.startup && p.readiness);
        assert_eq!(p.at_start(), (false, false));
        // A regular container's own restartPolicy does not matter.
        assert!(Probes::of(&container(false, false, true), false).probed);
    }

    #[test]
    fn probe_names_are_capitalized_for_events() {
        assert_eq!(capitalize("readiness"), "Readiness");
        assert_eq!(capitalize(""), "");
    }
}
