//! The pod status the kubelet computes: the initial status of a new pod (IPs, QoS class, waiting containers), and
//! the phase and the Initialized / ContainersReady / Ready conditions derived from the container states.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition,
    PodIP, PodStatus,
};

use super::{is_sidecar, now};

pub(super) fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..ContainerState::default()
    }
}

pub(super) fn set_condition(
    status: &mut PodStatus,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let value = if ok { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Some(now());
            }
            c.status = value.into();
            c.reason = reason.map(str::to_string);
            c.message = message;
        }
        None => conditions.push(PodCondition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(now()),
            ..PodCondition::default()
        }),
    }
}

/// Phase and the Initialized / ContainersReady / Ready conditions from the container states, as the kubelet's
/// `getPhase` and status manager compute them.
pub(super) fn derive_phase_and_conditions(
    pod: &Pod,
    status: &mut PodStatus,
    initialized: bool,
    terminal: Option<&'static str>,
) {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let containers = status.container_statuses.clone().unwrap_or_default();
    let phase = pod_phase(policy, &containers, initialized, terminal);
    status.phase = Some(phase.into());
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let pending_inits: Vec<String> = inits
        .iter()
        .filter(|c| !(c.started == Some(true) && sidecar_names_of(pod).contains(&c.name)))
        .filter(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|c| c.name.clone())
        .collect();
    if initialized || pending_inits.is_empty() {
        set_condition(status, "Initialized", true, None, None);
    } else {
        set_condition(
            status,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                pending_inits.join(" ")
            )),
        );
    }
    let sidecar_names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<String> = inits
        .iter()
        .filter(|c| sidecar_names.contains(&c.name.as_str()))
        .chain(containers.iter())
        .filter(|c| !c.ready)
        .map(|c| c.name.clone())
        .collect();
    if terminal.is_some() {
        set_condition(status, "ContainersReady", false, Some("PodCompleted"), None);
        set_condition(status, "Ready", false, Some("PodCompleted"), None);
    } else if unready.is_empty() && initialized {
        set_condition(status, "ContainersReady", true, None, None);
        set_condition(status, "Ready", true, None, None);
    } else {
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        let reason = if initialized {
            "ContainersNotReady"
        } else {
            "ContainersNotInitialized"
        };
        set_condition(
            status,
            "ContainersReady",
            false,
            Some(reason),
            Some(message.clone()),
        );
        set_condition(status, "Ready", false, Some(reason), Some(message));
    }
}

/// The pod's phase from its containers' states, as the kubelet's `getPhase`: `terminal` once the worker has
/// finished the pod, Pending until the init containers have completed or while a container has never run, Running
/// while one runs or will be restarted, and Failed or Succeeded once all have exited for good.
pub(super) fn pod_phase(
    policy: &str,
    containers: &[ContainerStatus],
    initialized: bool,
    terminal: Option<&'static str>,
) -> &'static str {
    if let Some(t) = terminal {
        t
    } else if !initialized {
        "Pending"
    } else {
        let (mut running, mut waiting_never_ran, mut succeeded, mut failed, mut waiting_restarting) =
            (0, 0, 0, 0, 0);
        for c in containers {
            let state = c.state.clone().unwrap_or_default();
            if state.running.is_some() {
                running += 1;
            } else if let Some(t) = state.terminated {
                if t.exit_code == 0 {
                    succeeded += 1;
                } else {
                    failed += 1;
                }
            } else if c
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                waiting_restarting += 1;
            } else {
                waiting_never_ran += 1;
            }
        }
        if waiting_never_ran > 0 {
            "Pending"
        } else if running > 0 || waiting_restarting > 0 || policy == "Always" {
            "Running"
        } else if failed > 0 && policy == "Never" {
            "Failed"
        } else if failed > 0 {
            "Running"
        } else if succeeded > 0 {
            "Succeeded"
        } else {
            "Pending"
        }
    }
}

/// The phase a pod ends in once its containers are done (their exit codes): Failed when one failed, or under
/// restartPolicy Always (whose containers only stop for good when the pod fails); Succeeded otherwise.
pub(super) fn terminal_phase(policy: &str, exit_codes: &[i32]) -> &'static str {
    if exit_codes.iter().any(|c| *c != 0) || policy == "Always" {
        "Failed"
    } else {
        "Succeeded"
    }
}

fn sidecar_names_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.clone())
        .collect()
}

/// Guaranteed when every container limits CPU and memory with requests equal to the limits, BestEffort when none
/// requests or limits anything, Burstable otherwise (upstream's `GetPodQOS`).
fn qos_class(spec: &k8s_openapi::api::core::v1::PodSpec) -> &'static str {
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let resources = |c: &Container| c.resources.clone().unwrap_or_default();
    let any = containers.iter().any(|c| {
        let r = resources(c);
        r.requests.is_some_and(|m| !m.is_empty()) || r.limits.is_some_and(|m| !m.is_empty())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let r = resources(c);
        let limits = r.limits.unwrap_or_default();
        // Requests default to limits.
        let requests = r.requests.unwrap_or_else(|| limits.clone());
        ["cpu", "memory"].iter().all(|k| match limits.get(*k) {
            Some(limit) => requests.get(*k).unwrap_or(limit) == limit,
            None => false,
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

pub(super) fn initial_status(pod: &Pod, ip: Ipv4Addr, host_ip: &str) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let fresh = |c: &Container, reason: &str| ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(waiting(reason, None)),
        ..ContainerStatus::default()
    };
    let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ == "PodScheduled");
    if conditions.is_empty() {
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(now()),
            ..PodCondition::default()
        });
    }
    PodStatus {
        phase: Some("Pending".into()),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: Some(ip.to_string()),
        pod_ips: Some(vec![PodIP { ip: ip.to_string() }]),
        start_time: Some(now()),
        qos_class: Some(qos_class(&spec).into()),
        conditions: Some(conditions),
        init_container_statuses: has_init.then(|| {
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| fresh(c, "PodInitializing"))
                .collect()
        }),
        container_statuses: Some(
            spec.containers
                .iter()
                .map(|c| {
                    fresh(
                        c,
                        if has_init {
                            "PodInitializing"
                        } else {
                            "ContainerCreating"
                        },
                    )
                })
                .collect(),
        ),
        ..PodStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerStateRunning, ContainerStateTerminated};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn status(name: &str, state: ContainerState, last: Option<ContainerState>) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            last_state: last,
            ..ContainerStatus::default()
        }
    }

    fn running() -> ContainerState {
        ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        }
    }

    fn exited(code: i32) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }
    }

    /// A container that has never run.
    fn fresh(name: &str) -> ContainerStatus {
        status(name, waiting("ContainerCreating", None), None)
    }

    /// A container waiting to run again after a run that exited with `code`.
    fn restarting(name: &str, code: i32) -> ContainerStatus {
        status(name, waiting("CrashLoopBackOff", None), Some(exited(code)))
    }

    fn run(name: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            ready,
            started: Some(true),
            ..status(name, running(), None)
        }
    }

    fn done(name: &str, code: i32) -> ContainerStatus {
        status(name, exited(code), None)
    }

    const POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];

    #[test]
    fn phase_is_pending_until_initialized_and_while_a_container_never_ran() {
        for policy in POLICIES {
            assert_eq!(pod_phase(policy, &[fresh("a")], false, None), "Pending");
            assert_eq!(pod_phase(policy, &[run("a", true)], false, None), "Pending");
            assert_eq!(
                pod_phase(policy, &[run("a", true), fresh("b")], true, None),
                "Pending",
                "{policy}"
            );
        }
    }

    #[test]
    fn phase_is_running_while_a_container_runs_or_waits_to_restart() {
        for policy in POLICIES {
            assert_eq!(pod_phase(policy, &[run("a", false)], true, None), "Running");
            assert_eq!(
                pod_phase(policy, &[done("a", 0), run("b", true)], true, None),
                "Running",
                "{policy}"
            );
            assert_eq!(
                pod_phase(policy, &[restarting("a", 1)], true, None),
                "Running",
                "{policy}"
            );
            assert_eq!(
                pod_phase(policy, &[done("a", 1), restarting("b", 0)], true, None),
                "Running",
                "{policy}"
            );
        }
    }

    #[test]
    fn phase_after_every_container_exited_follows_the_restart_policy() {
        // Always restarts whatever exits: the pod is still running.
        assert_eq!(pod_phase("Always", &[done("a", 0)], true, None), "Running");
        assert_eq!(pod_phase("Always", &[done("a", 1)], true, None), "Running");
        // OnFailure restarts the failure.
        assert_eq!(
            pod_phase("OnFailure", &[done("a", 0)], true, None),
            "Succeeded"
        );
        assert_eq!(
            pod_phase("OnFailure", &[done("a", 0), done("b", 2)], true, None),
            "Running"
        );
        // Never: any failure fails the pod.
        assert_eq!(
            pod_phase("Never", &[done("a", 0), done("b", 0)], true, None),
            "Succeeded"
        );
        assert_eq!(
            pod_phase("Never", &[done("a", 0), done("b", 137)], true, None),
            "Failed"
        );
    }

    #[test]
    fn phase_of_a_finished_pod_is_the_terminal_one() {
        for policy in POLICIES {
            for terminal in ["Succeeded", "Failed"] {
                assert_eq!(
                    pod_phase(policy, &[run("a", true)], true, Some(terminal)),
                    terminal
                );
                assert_eq!(
                    pod_phase(policy, &[fresh("a")], false, Some(terminal)),
                    terminal
                );
            }
        }
    }

    #[test]
    fn terminal_phase_follows_exit_codes_and_policy() {
        assert_eq!(terminal_phase("Never", &[0, 0]), "Succeeded");
        assert_eq!(terminal_phase("OnFailure", &[0]), "Succeeded");
        assert_eq!(terminal_phase("Never", &[0, 1]), "Failed");
        assert_eq!(terminal_phase("OnFailure", &[2]), "Failed");
        // Containers of an Always pod are only done when the pod is being failed.
        assert_eq!(terminal_phase("Always", &[0]), "Failed");
    }

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"))
    }

    fn derived(
        pod: &Pod,
        inits: Option<Vec<ContainerStatus>>,
        containers: Vec<ContainerStatus>,
        initialized: bool,
        terminal: Option<&'static str>,
    ) -> PodStatus {
        let mut status = PodStatus {
            init_container_statuses: inits,
            container_statuses: Some(containers),
            ..PodStatus::default()
        };
        derive_phase_and_conditions(pod, &mut status, initialized, terminal);
        status
    }

    fn with_inits() -> Pod {
        pod(json!({
            "restartPolicy": "Always",
            "initContainers": [
                {"name": "first"},
                {"name": "side", "restartPolicy": "Always"},
                {"name": "second"},
            ],
            "containers": [{"name": "app"}, {"name": "web"}],
        }))
    }

    #[test]
    fn initialized_lists_the_init_containers_not_yet_complete() {
        let pod = with_inits();
        let inits = vec![
            done("first", 0),
            run("side", false),
            restarting("second", 1),
        ];
        let s = derived(
            &pod,
            Some(inits),
            vec![fresh("app"), fresh("web")],
            false,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        let init = condition(&s, "Initialized");
        assert_eq!(init.status, "False");
        assert_eq!(init.reason.as_deref(), Some("ContainersNotInitialized"));
        // A started sidecar counts as initialized; a completed init container too.
        assert_eq!(
            init.message.as_deref(),
            Some("containers with incomplete status: [second]")
        );
        let ready = condition(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotInitialized"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [side app web]")
        );
    }

    #[test]
    fn a_failed_init_container_is_incomplete() {
        let pod = pod(
            json!({"restartPolicy": "Never", "initContainers": [{"name": "a"}], "containers": [{"name": "app"}]}),
        );
        let s = derived(
            &pod,
            Some(vec![done("a", 1)]),
            vec![fresh("app")],
            false,
            None,
        );
        assert_eq!(
            condition(&s, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [a]")
        );
    }

    #[test]
    fn a_failing_init_container_keeps_the_pod_pending_or_fails_it_under_never() {
        for policy in ["Always", "OnFailure"] {
            let pod = pod(json!({
                "restartPolicy": policy,
                "initContainers": [{"name": "init"}],
                "containers": [{"name": "app"}],
            }));
            // Restarted with back-off: the pod stays Pending, not initialized.
            let s = derived(
                &pod,
                Some(vec![restarting("init", 1)]),
                vec![status("app", waiting("PodInitializing", None), None)],
                false,
                None,
            );
            assert_eq!(s.phase.as_deref(), Some("Pending"), "{policy}");
            let init = condition(&s, "Initialized");
            assert_eq!(init.status, "False", "{policy}");
            assert_eq!(
                init.message.as_deref(),
                Some("containers with incomplete status: [init]")
            );
        }
        let pod = pod(json!({
            "restartPolicy": "Never",
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "app"}],
        }));
        let s = derived(
            &pod,
            Some(vec![done("init", 1)]),
            vec![status("app", waiting("PodInitializing", None), None)],
            false,
            Some("Failed"),
        );
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(condition(&s, "Initialized").status, "False");
        assert_eq!(
            condition(&s, "Ready").reason.as_deref(),
            Some("PodCompleted")
        );
    }

    #[test]
    fn ready_once_initialized_and_every_container_and_sidecar_is_ready() {
        let pod = with_inits();
        let inits = || vec![done("first", 0), run("side", true), done("second", 0)];
        let s = derived(
            &pod,
            Some(inits()),
            vec![run("app", true), run("web", true)],
            true,
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        for type_ in ["Initialized", "ContainersReady", "Ready"] {
            let c = condition(&s, type_);
            assert_eq!(c.status, "True", "{type_}");
            assert_eq!(c.reason, None, "{type_}");
        }
        // Completed plain init containers are never ready, and need not be.
        assert!(!s.init_container_statuses.as_ref().unwrap()[0].ready);

        let s = derived(
            &pod,
            Some(inits()),
            vec![run("app", true), run("web", false)],
            true,
            None,
        );
        let ready = condition(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some("containers with unready status: [web]")
        );
        assert_eq!(condition(&s, "ContainersReady").status, "False");

        // An unready sidecar holds the pod back too.
        let inits = vec![done("first", 0), run("side", false), done("second", 0)];
        let s = derived(
            &pod,
            Some(inits),
            vec![run("app", true), run("web", true)],
            true,
            None,
        );
        assert_eq!(
            condition(&s, "Ready").message.as_deref(),
            Some("containers with unready status: [side]")
        );
    }

    #[test]
    fn a_finished_pod_is_not_ready() {
        let pod = pod(json!({"restartPolicy": "Never", "containers": [{"name": "app"}]}));
        let s = derived(&pod, None, vec![done("app", 0)], true, Some("Succeeded"));
        assert_eq!(s.phase.as_deref(), Some("Succeeded"));
        for type_ in ["ContainersReady", "Ready"] {
            let c = condition(&s, type_);
            assert_eq!(c.status, "False");
            assert_eq!(c.reason.as_deref(), Some("PodCompleted"));
        }
        assert_eq!(condition(&s, "Initialized").status, "True");
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let long_ago = Time("2020-01-01T00:00:00Z".parse().unwrap());
        let mut s = PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "False".into(),
                last_transition_time: Some(long_ago.clone()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        };
        set_condition(
            &mut s,
            "Ready",
            false,
            Some("ContainersNotReady"),
            Some("m".into()),
        );
        let c = condition(&s, "Ready");
        assert_eq!(c.last_transition_time.as_ref(), Some(&long_ago));
        assert_eq!(c.reason.as_deref(), Some("ContainersNotReady"));
        set_condition(&mut s, "Ready", true, None, None);
        let c = condition(&s, "Ready");
        assert_eq!(c.status, "True");
        assert_ne!(c.last_transition_time.as_ref(), Some(&long_ago));
        assert_eq!((c.reason.as_deref(), c.message.as_deref()), (None, None));
    }

    #[test]
    fn a_new_pod_waits_in_pending() {
        let ip = Ipv4Addr::new(10, 0, 0, 7);
        let s = initial_status(&with_inits(), ip, "192.0.2.1");
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(s.host_ip.as_deref(), Some("192.0.2.1"));
        let reasons = |list: &Option<Vec<ContainerStatus>>| -> Vec<String> {
            list.iter()
                .flatten()
                .map(|c| {
                    assert!(!c.ready && c.started == Some(false) && c.restart_count == 0);
                    c.state
                        .as_ref()
                        .unwrap()
                        .waiting
                        .as_ref()
                        .unwrap()
                        .reason
                        .clone()
                        .unwrap()
                })
                .collect()
        };
        assert_eq!(reasons(&s.init_container_statuses), ["PodInitializing"; 3]);
        assert_eq!(reasons(&s.container_statuses), ["PodInitializing"; 2]);
        let conditions: Vec<&str> = s
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(conditions, ["PodScheduled"]);

        let plain = pod(json!({"containers": [{"name": "app"}]}));
        let s = initial_status(&plain, ip, "192.0.2.1");
        assert_eq!(s.init_container_statuses, None);
        assert_eq!(reasons(&s.container_statuses), ["ContainerCreating"]);
    }

    #[test]
    fn a_new_pod_keeps_only_its_scheduled_condition() {
        let mut p = pod(json!({"containers": [{"name": "app"}]}));
        let scheduled = PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            reason: Some("Bound".into()),
            ..PodCondition::default()
        };
        p.status = Some(PodStatus {
            conditions: Some(vec![
                scheduled.clone(),
                PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                },
            ]),
            ..PodStatus::default()
        });
        let s = initial_status(&p, Ipv4Addr::LOCALHOST, "127.0.0.1");
        assert_eq!(s.conditions, Some(vec![scheduled]));
    }

    #[test]
    fn qos_class_from_requests_and_limits() {
        let spec =
            |containers: serde_json::Value| pod(json!({"containers": containers})).spec.unwrap();
        assert_eq!(qos_class(&spec(json!([{"name": "a"}]))), "BestEffort");
        let both = json!({"cpu": "1", "memory": "1Gi"});
        assert_eq!(
            qos_class(&spec(json!([{"name": "a", "resources": {"limits": both}}]))),
            "Guaranteed",
            "requests default to the limits"
        );
        assert_eq!(
            qos_class(&spec(
                json!([{"name": "a", "resources": {"limits": both, "requests": both}}])
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&spec(
                json!([{"name": "a", "resources": {"limits": both, "requests": {"cpu": "500m"}}}])
            )),
            "Burstable"
        );
        assert_eq!(
            qos_class(&spec(
                json!([{"name": "a", "resources": {"requests": both}}])
            )),
            "Burstable"
        );
        assert_eq!(
            qos_class(&spec(json!([
                {"name": "a", "resources": {"limits": both}},
                {"name": "b"},
            ]))),
            "Burstable",
            "every container must be guaranteed"
        );
    }
}
