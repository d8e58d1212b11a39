//! Per-type rules of built-in resources: upstream defaulting, initial status, validation and immutability.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Value, json};

use crate::api_error::FieldCause;
use crate::meta;
use crate::registry::ResourceType;

fn obj_at<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    v.get_mut(key).and_then(Value::as_object_mut)
}

fn default_field(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), v);
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let last = image.rsplit('/').next().unwrap_or("");
    let tag_latest = !last.contains(':') && !image.contains('@') || last.ends_with(":latest");
    default_field(
        m,
        "imagePullPolicy",
        json!(if tag_latest { "Always" } else { "IfNotPresent" }),
    );
    default_field(m, "terminationMessagePath", json!("/dev/termination-log"));
    default_field(m, "terminationMessagePolicy", json!("File"));
    default_field(m, "resources", json!({}));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default_field(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = m.get_mut(probe).and_then(Value::as_object_mut) {
            default_field(p, "timeoutSeconds", json!(1));
            default_field(p, "periodSeconds", json!(10));
            default_field(p, "successThreshold", json!(1));
            default_field(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                default_field(h, "path", json!("/"));
                default_field(h, "scheme", json!("HTTP"));
            }
        }
    }
}

/// PodSpec defaults (upstream `SetDefaults_PodSpec` and friends).
fn default_pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    default_field(m, "restartPolicy", json!("Always"));
    default_field(m, "terminationGracePeriodSeconds", json!(30));
    default_field(m, "dnsPolicy", json!("ClusterFirst"));
    default_field(m, "securityContext", json!({}));
    default_field(m, "schedulerName", json!("default-scheduler"));
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(cs) = m.get_mut(key).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
    if let Some(vols) = m.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            for (src, mode_key) in [
                ("configMap", "defaultMode"),
                ("secret", "defaultMode"),
                ("downwardAPI", "defaultMode"),
            ] {
                if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
                    default_field(s, mode_key, json!(420));
                }
            }
            if let Some(s) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
                default_field(s, "type", json!(""));
            }
        }
    }
}

fn default_template(template: Option<&mut Value>) {
    if let Some(spec) = template.and_then(|t| t.get_mut("spec")) {
        default_pod_spec(spec);
    }
}

/// How long a pod stays on a node that is not ready or unreachable before it is evicted, unless it says otherwise
/// (upstream's DefaultTolerationSeconds admission plugin, `--default-not-ready-toleration-seconds`).
pub const DEFAULT_TOLERATION_SECONDS: i64 = 300;

/// The DefaultTolerationSeconds admission of a new pod: tolerations of the `not-ready` and `unreachable` NoExecute
/// taints for [`DEFAULT_TOLERATION_SECONDS`], unless the pod tolerates them already.
pub fn add_default_tolerations(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
            let t_key = t.get("key").and_then(Value::as_str).unwrap_or_default();
            let exists = t.get("operator").and_then(Value::as_str) == Some("Exists");
            (effect.is_empty() || effect == "NoExecute")
                && (t_key == key || (t_key.is_empty() && exists))
        });
        if !tolerated {
            list.push(json!({
                "key": key, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }));
        }
    }
}

/// Upstream defaulting, run on every write of a built-in type.
pub fn apply_defaults(rt: &ResourceType, obj: &mut Value) {
    if rt.is_custom() {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec);
            }
        }
        ("apps", "StatefulSet") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "replicas", json!(1));
                default_field(spec, "podManagementPolicy", json!("OrderedReady"));
                default_field(spec, "revisionHistoryLimit", json!(10));
                default_field(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                );
                if let Some(us) = spec
                    .get_mut("updateStrategy")
                    .and_then(Value::as_object_mut)
                    && us.get("type").and_then(Value::as_str) == Some("RollingUpdate")
                {
                    default_field(us, "rollingUpdate", json!({"partition": 0}));
                    if let Some(ru) = us.get_mut("rollingUpdate").and_then(Value::as_object_mut) {
                        default_field(ru, "partition", json!(0));
                    }
                }
                default_field(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
                if let Some(vcts) = spec
                    .get_mut("volumeClaimTemplates")
                    .and_then(Value::as_array_mut)
                {
                    for t in vcts.iter_mut().filter_map(Value::as_object_mut) {
                        default_field(t, "apiVersion", json!("v1"));
                        default_field(t, "kind", json!("PersistentVolumeClaim"));
                        if let Some(s) = t.get_mut("spec").and_then(Value::as_object_mut) {
                            default_field(s, "volumeMode", json!("Filesystem"));
                        }
                        default_field(t, "status", json!({"phase": "Pending"}));
                    }
                }
                default_template(spec.get_mut("template"));
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "replicas", json!(1));
                default_field(spec, "revisionHistoryLimit", json!(10));
                default_field(spec, "progressDeadlineSeconds", json!(600));
                // As upstream: RollingUpdate unless said otherwise, with 25% surge and unavailability.
                let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
                if let Some(strategy) = strategy.as_object_mut() {
                    default_field(strategy, "type", json!("RollingUpdate"));
                    if strategy.get("type") == Some(&json!("RollingUpdate")) {
                        let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
                        if let Some(rolling) = rolling.as_object_mut() {
                            default_field(rolling, "maxUnavailable", json!("25%"));
                            default_field(rolling, "maxSurge", json!("25%"));
                        }
                    }
                }
                default_template(spec.get_mut("template"));
            }
        }
        ("apps", "ReplicaSet") | ("apps", "DaemonSet") => {
            if let Some(spec) = obj_at(obj, "spec") {
                if rt.kind == "ReplicaSet" {
                    default_field(spec, "replicas", json!(1));
                }
                default_template(spec.get_mut("template"));
            }
        }
        ("batch", "Job") => default_job_spec(obj.get_mut("spec")),
        ("batch", "CronJob") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "concurrencyPolicy", json!("Allow"));
                default_field(spec, "suspend", json!(false));
                default_field(spec, "successfulJobsHistoryLimit", json!(3));
                default_field(spec, "failedJobsHistoryLimit", json!(1));
                if let Some(jt) = spec.get_mut("jobTemplate") {
                    default_job_spec(jt.get_mut("spec"));
                }
            }
        }
        ("", "Service") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "type", json!("ClusterIP"));
                default_field(spec, "sessionAffinity", json!("None"));
                if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
                    default_field(spec, "internalTrafficPolicy", json!("Cluster"));
                }
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                        default_field(p, "protocol", json!("TCP"));
                        if let Some(port) = p.get("port").cloned() {
                            default_field(p, "targetPort", port);
                        }
                    }
                }
            }
        }
        ("", "Secret") => {
            let m = meta::object_mut(obj);
            default_field(m, "type", json!("Opaque"));
            if let Some(Value::Object(sd)) = m.remove("stringData") {
                let data = m.entry("data").or_insert_with(|| json!({}));
                if let Some(d) = data.as_object_mut() {
                    for (k, v) in sd {
                        d.insert(k, json!(BASE64.encode(v.as_str().unwrap_or("").as_bytes())));
                    }
                }
            }
        }
        ("", "PersistentVolumeClaim") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("", "PersistentVolume") => {
            if let Some(spec) = obj_at(obj, "spec") {
                default_field(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
                default_field(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("storage.k8s.io", "StorageClass") => {
            let m = meta::object_mut(obj);
            default_field(m, "reclaimPolicy", json!("Delete"));
            default_field(m, "volumeBindingMode", json!("Immediate"));
        }
        ("", "Namespace") => {
            let name = meta::name(obj).to_string();
            if !name.is_empty() {
                let m = meta::meta_mut(obj);
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
        }
        ("policy", "PodDisruptionBudget") => {}
        _ => {}
    }
}

fn default_job_spec(spec: Option<&mut Value>) {
    let Some(spec) = spec.and_then(Value::as_object_mut) else {
        return;
    };
    default_field(spec, "parallelism", json!(1));
    if spec.get("completionMode").is_none() {
        spec.insert("completionMode".into(), json!("NonIndexed"));
    }
    default_field(spec, "completions", json!(1));
    default_field(spec, "backoffLimit", json!(6));
    default_field(spec, "suspend", json!(false));
    default_field(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    if let Some(t) = spec.get_mut("template")
        && let Some(ps) = t.get_mut("spec")
    {
        default_pod_spec(ps);
    }
}

/// The status a new object starts with (status sent on create is dropped for types with a status subresource).
pub fn initial_status(rt: &ResourceType, obj: &Value) -> Option<Value> {
    if rt.is_custom() {
        return None;
    }
    match rt.kind.as_str() {
        "Pod" => Some(json!({"phase": "Pending", "qosClass": qos_class(obj)})),
        "Namespace" => Some(json!({"phase": "Active"})),
        "PersistentVolumeClaim" => Some(json!({"phase": "Pending"})),
        "PersistentVolume" => Some(json!({"phase": "Pending"})),
        "CustomResourceDefinition" => Some(
            json!({"acceptedNames": {"kind": "", "plural": ""}, "conditions": [], "storedVersions": []}),
        ),
        "Node" => obj.get("status").cloned(),
        "Service" => Some(json!({"loadBalancer": {}})),
        "StatefulSet" => Some(json!({"replicas": 0, "availableReplicas": 0})),
        "ReplicaSet" => Some(json!({"replicas": 0})),
        _ => Some(json!({})),
    }
}

fn qos_class(pod: &Value) -> &'static str {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    let any_resources = containers.is_some_and(|cs| {
        cs.iter().any(|c| {
            c.pointer("/resources/requests")
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
                || c.pointer("/resources/limits")
                    .and_then(Value::as_object)
                    .is_some_and(|m| !m.is_empty())
        })
    });
    if !any_resources {
        return "BestEffort";
    }
    let guaranteed = containers.is_some_and(|cs| {
        cs.iter().all(|c| {
            let limits = c.pointer("/resources/limits").and_then(Value::as_object);
            let requests = c.pointer("/resources/requests").and_then(Value::as_object);
            ["cpu", "memory"].iter().all(|r| {
                let l = limits.and_then(|l| l.get(*r));
                l.is_some()
                    && requests
                        .and_then(|q| q.get(*r))
                        .is_none_or(|q| Some(q) == l)
            })
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn name_rule(rt: &ResourceType) -> fn(&str) -> Option<String> {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") | ("", "services") => meta::dns_label_error,
        ("rbac.authorization.k8s.io", _) => meta::path_segment_error,
        _ => meta::dns_subdomain_error,
    }
}

/// Metadata checks every type shares.
pub fn validate_metadata(rt: &ResourceType, obj: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let name = meta::name(obj);
    if let Some(err) = name_rule(rt)(name) {
        causes.push(FieldCause::invalid("metadata.name", &json!(name), err));
    }
    if let Some(labels) = meta::labels(obj) {
        for (k, v) in labels {
            let value = v.as_str().unwrap_or("");
            let ok = value.len() <= 63
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && (value.is_empty()
                    || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && value.ends_with(|c: char| c.is_ascii_alphanumeric())));
            if !ok {
                causes.push(FieldCause::invalid("metadata.labels", v, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"));
            }
            let key_name = k.rsplit('/').next().unwrap_or("");
            if key_name.is_empty() || key_name.len() > 63 {
                causes.push(FieldCause::invalid(
                    "metadata.labels",
                    &json!(k),
                    "name part must be non-empty and no more than 63 characters",
                ));
            }
        }
    }
    if let Some(refs) =
        meta::value_at(obj, &["metadata", "ownerReferences"]).and_then(Value::as_array)
    {
        let controllers = refs
            .iter()
            .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .count();
        if controllers > 1 {
            causes.push(FieldCause::invalid(
                "metadata.ownerReferences",
                &Value::Array(refs.clone()),
                "Only one reference can have Controller set to true",
            ));
        }
        for (i, r) in refs.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if r.get(f).and_then(Value::as_str).is_none_or(str::is_empty) {
                    causes.push(FieldCause::invalid(
                        format!("metadata.ownerReferences[{i}].{f}"),
                        &json!(""),
                        format!("{f} must not be empty"),
                    ));
                }
            }
        }
    }
    causes
}

/// Type-specific checks of built-ins (the subset clients rely on seeing as 422).
pub fn validate(rt: &ResourceType, obj: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if rt.is_custom() {
        return causes;
    }
    let containers_at = |causes: &mut Vec<FieldCause>, spec: Option<&Value>, prefix: &str| {
        let cs = spec
            .and_then(|s| s.get("containers"))
            .and_then(Value::as_array);
        match cs {
            None => causes.push(FieldCause::required(format!("{prefix}.containers"), "")),
            Some(cs) if cs.is_empty() => {
                causes.push(FieldCause::required(format!("{prefix}.containers"), ""))
            }
            Some(cs) => {
                for (i, c) in cs.iter().enumerate() {
                    for field in ["name", "image"] {
                        if c.get(field)
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            causes.push(FieldCause::required(
                                format!("{prefix}.containers[{i}].{field}"),
                                "",
                            ));
                        }
                    }
                }
            }
        }
    };
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => {
            containers_at(&mut causes, obj.get("spec"), "spec");
            causes.extend(crate::ephemeral_containers::validate_spec(obj));
        }
        ("apps", "StatefulSet")
        | ("apps", "Deployment")
        | ("apps", "ReplicaSet")
        | ("apps", "DaemonSet") => {
            let selector = obj.pointer("/spec/selector");
            match selector {
                None => causes.push(FieldCause::required("spec.selector", "")),
                Some(sel) => {
                    let labels = obj
                        .pointer("/spec/template/metadata/labels")
                        .and_then(Value::as_object);
                    let matches = crate::selector::LabelSelector::from_object(sel)
                        .map(|s| !s.is_empty() && s.matches_labels(labels))
                        .unwrap_or(false);
                    if !matches {
                        causes.push(FieldCause::invalid(
                            "spec.template.metadata.labels",
                            &labels
                                .map(|l| Value::Object(l.clone()))
                                .unwrap_or(Value::Null),
                            "`selector` does not match template `labels`",
                        ));
                    }
                }
            }
            containers_at(
                &mut causes,
                obj.pointer("/spec/template/spec"),
                "spec.template.spec",
            );
            if let Some(r) = obj.pointer("/spec/replicas").and_then(Value::as_i64)
                && r < 0
            {
                causes.push(FieldCause::invalid(
                    "spec.replicas",
                    &json!(r),
                    "must be greater than or equal to 0",
                ));
            }
        }
        ("batch", "Job") => containers_at(
            &mut causes,
            obj.pointer("/spec/template/spec"),
            "spec.template.spec",
        ),
        ("", "Service") => {
            if let Some(ports) = obj.pointer("/spec/ports").and_then(Value::as_array) {
                for (i, p) in ports.iter().enumerate() {
                    if p.get("port")
                        .and_then(Value::as_i64)
                        .is_none_or(|x| !(1..=65535).contains(&x))
                    {
                        causes.push(FieldCause::invalid(
                            format!("spec.ports[{i}].port"),
                            p.get("port").unwrap_or(&Value::Null),
                            "must be between 1 and 65535, inclusive",
                        ));
                    }
                }
            }
        }
        ("coordination.k8s.io", "Lease") => {
            if let Some(d) = obj
                .pointer("/spec/leaseDurationSeconds")
                .and_then(Value::as_i64)
                && d <= 0
            {
                causes.push(FieldCause::invalid(
                    "spec.leaseDurationSeconds",
                    &json!(d),
                    "must be greater than 0",
                ));
            }
        }
        _ => {}
    }
    causes
}

fn without(obj: Option<&Value>, keys: &[&str]) -> Value {
    let mut o = obj.cloned().unwrap_or(Value::Null);
    if let Some(m) = o.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
    o
}

/// Immutability rules checked on update.
pub fn validate_update(rt: &ResourceType, new: &Value, old: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if rt.is_custom() {
        return causes;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("apps", "StatefulSet") => {
            let mutable = [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
                "revisionHistoryLimit",
            ];
            if without(new.get("spec"), &mutable) != without(old.get("spec"), &mutable) {
                causes.push(FieldCause::forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"));
            }
        }
        ("apps", "Deployment") | ("apps", "ReplicaSet") | ("apps", "DaemonSet")
            if new.pointer("/spec/selector") != old.pointer("/spec/selector") =>
        {
            causes.push(FieldCause::invalid(
                "spec.selector",
                new.pointer("/spec/selector").unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
        ("batch", "Job") => {
            if new.pointer("/spec/selector") != old.pointer("/spec/selector") {
                causes.push(FieldCause::invalid(
                    "spec.selector",
                    new.pointer("/spec/selector").unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
            if new.pointer("/spec/template") != old.pointer("/spec/template") {
                causes.push(FieldCause::invalid(
                    "spec.template",
                    new.pointer("/spec/template").unwrap_or(&Value::Null),
                    "field is immutable",
                ));
            }
        }
        ("", "Pod") => {
            let strip = |p: &Value| -> Value {
                let mut s = p.get("spec").cloned().unwrap_or(Value::Null);
                for key in ["containers", "initContainers"] {
                    if let Some(cs) = s.get_mut(key).and_then(Value::as_array_mut) {
                        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                            c.remove("image");
                        }
                    }
                }
                if let Some(m) = s.as_object_mut() {
                    for k in [
                        "activeDeadlineSeconds",
                        "tolerations",
                        "terminationGracePeriodSeconds",
                        "schedulingGates",
                    ] {
                        m.remove(k);
                    }
                }
                s
            };
            // nodeName may be set once (binding).
            let mut new_spec = strip(new);
            let old_spec = strip(old);
            if old_spec.get("nodeName").is_none()
                && let Some(m) = new_spec.as_object_mut()
            {
                m.remove("nodeName");
            }
            let mut old_cmp = old_spec;
            if let Some(m) = old_cmp.as_object_mut()
                && new.pointer("/spec/nodeName").is_some()
                && old.pointer("/spec/nodeName").is_none()
            {
                m.remove("nodeName");
            }
            if new_spec != old_cmp {
                causes.push(FieldCause::forbidden("spec", "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"));
            }
        }
        ("", "PersistentVolumeClaim") => {
            let keep = ["resources", "volumeName"];
            let old_spec = without(old.get("spec"), &keep);
            let new_spec = without(new.get("spec"), &keep);
            if old_spec != new_spec {
                causes.push(FieldCause::forbidden("spec", "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"));
            }
            if let (Some(wanted), Some(had)) = (requested_storage(new), requested_storage(old))
                && wanted < had
            {
                causes.push(FieldCause::forbidden(
                    "spec.resources.requests.storage",
                    "field can not be less than previous value",
                ));
            }
        }
        ("", "Secret") | ("", "ConfigMap")
            if old.get("immutable").and_then(Value::as_bool) == Some(true) =>
        {
            for f in ["data", "binaryData", "stringData"] {
                if new.get(f) != old.get(f) {
                    causes.push(FieldCause::forbidden(
                        f,
                        "field is immutable when `immutable` is set",
                    ));
                }
            }
        }
        _ => {}
    }
    causes
}

/// A claim's requested storage, parsed (`None` when absent or not a quantity).
pub fn requested_storage(claim: &Value) -> Option<kube_quantity::ParsedQuantity> {
    let text = claim
        .pointer("/spec/resources/requests/storage")?
        .as_str()?;
    kube_quantity::ParsedQuantity::try_from(text).ok()
}

/// Create-only preparation (after uid is assigned): allocations and generated selectors.
pub fn prepare_create(rt: &ResourceType, obj: &mut Value) {
    if rt.is_custom() {
        return;
    }
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Service") => allocate_cluster_ip(obj),
        ("batch", "Job") => generate_job_selector(obj),
        _ => {}
    }
}

/// Carries over server-assigned fields a client's update omitted, and fields no update may change.
pub fn prepare_update(rt: &ResourceType, new: &mut Value, old: &Value) {
    // A CertificateSigningRequest's spec never changes after create (upstream's update strategy keeps the old one).
    if rt.has_approval() {
        let root = meta::object_mut(new);
        match old.get("spec") {
            Some(spec) => root.insert("spec".into(), spec.clone()),
            None => root.remove("spec"),
        };
    }
    if rt.group.is_empty() && rt.kind == "Service" {
        for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if new.pointer(&format!("/spec/{f}")).is_none()
                && let Some(v) = old.pointer(&format!("/spec/{f}")).cloned()
                && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.insert(f.into(), v);
            }
        }
    }
}

fn allocate_cluster_ip(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        return;
    }
    let ip = match spec.get("clusterIP").and_then(Value::as_str) {
        Some("None") => "None".to_string(),
        Some(ip) if !ip.is_empty() => ip.to_string(),
        _ => {
            use rand::Rng;
            let mut rng = rand::rng();
            format!(
                "10.96.{}.{}",
                rng.random_range(1..=254),
                rng.random_range(1..=254)
            )
        }
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    default_field(spec, "ipFamilies", json!(["IPv4"]));
    default_field(spec, "ipFamilyPolicy", json!("SingleStack"));
}

/// Upstream labels job pods with the job's uid and name and selects on the uid unless `manualSelector` is set.
fn generate_job_selector(obj: &mut Value) {
    if obj.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let uid = meta::uid(obj).to_string();
    let name = meta::name(obj).to_string();
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let template = spec.entry("template").or_insert_with(|| json!({}));
        let tm = meta::meta_mut(template);
        let labels = tm.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            for (k, v) in [
                ("batch.kubernetes.io/controller-uid", &uid),
                ("batch.kubernetes.io/job-name", &name),
                ("controller-uid", &uid),
                ("job-name", &name),
            ] {
                l.insert(k.into(), json!(v));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_policy_follows_tag() {
        let mut c = json!({"image": "etcd:3.5"});
        default_container(&mut c);
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        let mut c = json!({"image": "registry:5000/etcd"});
        default_container(&mut c);
        assert_eq!(c["imagePullPolicy"], "Always");
    }
}
