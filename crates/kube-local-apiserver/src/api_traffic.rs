//! What the API server was asked, counted per verb and resource, and faults injected into it: the next requests
//! matching a verb and resource are answered with a chosen error instead of being served.
//!
//! Benchmarks read the counters to tell how much a controller writes (a converged controller should write nothing);
//! fault tests use the injection to see a controller survive conflicts and server errors it cannot provoke itself.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use http::Method;

use crate::api_error::ApiError;

/// What a request does, as Kubernetes audit logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    /// A server-side apply (a PATCH with `application/apply-patch+yaml`).
    Apply,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// The verb of a request to a resource path (`named`: the path names one object).
    pub fn of(
        method: &Method,
        named: bool,
        watch: bool,
        content_type: Option<&str>,
    ) -> Option<Verb> {
        Some(match (method, named) {
            (&Method::GET, true) => Verb::Get,
            (&Method::GET, false) if watch => Verb::Watch,
            (&Method::GET, false) => Verb::List,
            (&Method::POST, _) => Verb::Create,
            (&Method::PUT, _) => Verb::Update,
            (&Method::PATCH, _)
                if content_type.is_some_and(|ct| ct.starts_with("application/apply-patch")) =>
            {
                Verb::Apply
            }
            (&Method::PATCH, _) => Verb::Patch,
            (&Method::DELETE, true) => Verb::Delete,
            (&Method::DELETE, false) => Verb::DeleteCollection,
            _ => return None,
        })
    }

    /// Whether the verb changes (or tries to change) stored state.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create
                | Verb::Update
                | Verb::Patch
                | Verb::Apply
                | Verb::Delete
                | Verb::DeleteCollection
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Apply => "apply",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The counters at one moment: requests per verb and resource (`plural`, or `plural/subresource`, e.g.
/// `widgets/status`). Subtract two snapshots to count what happened in between.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestCounts {
    counts: BTreeMap<(Verb, String), u64>,
}

impl RequestCounts {
    /// Requests of `verb` to `resource`.
    pub fn count(&self, verb: Verb, resource: &str) -> u64 {
        self.counts
            .get(&(verb, resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Every write request (create, update, patch, apply, delete, deletecollection) to any resource.
    pub fn writes(&self) -> u64 {
        self.counts
            .iter()
            .filter(|((verb, _), _)| verb.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// Every request counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Each verb and resource with its count, in order.
    pub fn iter(&self) -> impl Iterator<Item = (Verb, &str, u64)> {
        self.counts
            .iter()
            .map(|((verb, resource), n)| (*verb, resource.as_str(), *n))
    }

    /// What was counted after `earlier` (counters only grow).
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        let counts = self
            .counts
            .iter()
            .map(|(key, n)| {
                (
                    key.clone(),
                    n.saturating_sub(earlier.counts.get(key).copied().unwrap_or(0)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        RequestCounts { counts }
    }

    /// Prometheus text format: `kube_local_requests_total{verb="create",resource="pods"} 3`.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::from(
            "# HELP kube_local_requests_total API requests received, by verb and resource.\n# TYPE kube_local_requests_total counter\n",
        );
        for (verb, resource, n) in self.iter() {
            out.push_str(&format!(
                "kube_local_requests_total{{verb=\"{verb}\",resource=\"{resource}\"}} {n}\n"
            ));
        }
        out
    }
}

/// How an injected fault answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAnswer {
    /// 409 Conflict, as for a stale resourceVersion.
    Conflict,
    /// 500 InternalError.
    InternalError,
    /// 503 ServiceUnavailable, as an overloaded or restarting API server.
    ServiceUnavailable,
    /// 429 TooManyRequests, as API priority and fairness throttling.
    TooManyRequests,
}

impl FaultAnswer {
    fn error(self, verb: Verb, resource: &str) -> ApiError {
        let message = format!("injected fault answering {verb} {resource}");
        match self {
            FaultAnswer::Conflict => {
                let mut e = ApiError::internal(format!(
                    "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again ({message})"
                ))
                .with_reason("Conflict");
                e.code = 409;
                e
            }
            FaultAnswer::InternalError => ApiError::internal(message),
            FaultAnswer::ServiceUnavailable => {
                let mut e = ApiError::internal(message).with_reason("ServiceUnavailable");
                e.code = 503;
                e
            }
            FaultAnswer::TooManyRequests => {
                let mut e = ApiError::internal(message).with_reason("TooManyRequests");
                e.code = 429;
                e
            }
        }
    }
}

/// A fault to inject: the next `times` requests of `verb` (any verb when `None`) to `resource` are answered with
/// `answer` instead of being served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub verb: Option<Verb>,
    /// `plural` or `plural/subresource`, as in [`RequestCounts`].
    pub resource: String,
    pub answer: FaultAnswer,
    pub times: u32,
}

impl Fault {
    pub fn new(
        verb: Option<Verb>,
        resource: impl Into<String>,
        answer: FaultAnswer,
        times: u32,
    ) -> Fault {
        Fault {
            verb,
            resource: resource.into(),
            answer,
            times,
        }
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        self.times > 0 && self.verb.is_none_or(|v| v == verb) && self.resource == resource
    }
}

/// The counters and the pending faults of one API server.
#[derive(Debug, Default)]
pub struct ApiTraffic {
    counts: Mutex<RequestCounts>,
    faults: Mutex<Vec<Fault>>,
    injected: Mutex<u64>,
}

impl ApiTraffic {
    /// Counts a request, and returns the injected fault's error when a pending fault matches it (consuming one of
    /// its `times`).
    pub fn record(&self, verb: Verb, resource: &str) -> Result<(), ApiError> {
        {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            *counts
                .counts
                .entry((verb, resource.to_string()))
                .or_insert(0) += 1;
        }
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let Some(fault) = faults.iter_mut().find(|f| f.matches(verb, resource)) else {
            return Ok(());
        };
        fault.times -= 1;
        let error = fault.answer.error(verb, resource);
        faults.retain(|f| f.times > 0);
        *self.injected.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Err(error)
    }

    pub fn counts(&self) -> RequestCounts {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Adds a fault; faults are matched in the order they were added.
    pub fn inject(&self, fault: Fault) {
        if fault.times > 0 {
            self.faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(fault);
        }
    }

    /// Faults not yet used up.
    pub fn pending_faults(&self) -> Vec<Fault> {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many requests were answered by an injected fault.
    pub fn injected(&self) -> u64 {
        *self.injected.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops every pending fault.
    pub fn clear_faults(&self) {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_method_path_and_content_type() {
        assert_eq!(Verb::of(&Method::GET, true, false, None), Some(Verb::Get));
        assert_eq!(Verb::of(&Method::GET, false, true, None), Some(Verb::Watch));
        assert_eq!(Verb::of(&Method::GET, false, false, None), Some(Verb::List));
        assert_eq!(
            Verb::of(&Method::POST, false, false, None),
            Some(Verb::Create)
        );
        assert_eq!(
            Verb::of(&Method::PUT, true, false, None),
            Some(Verb::Update)
        );
        assert_eq!(
            Verb::of(
                &Method::PATCH,
                true,
                false,
                Some("application/apply-patch+yaml")
            ),
            Some(Verb::Apply)
        );
        assert_eq!(
            Verb::of(
                &Method::PATCH,
                true,
                false,
                Some("application/merge-patch+json")
            ),
            Some(Verb::Patch)
        );
        assert_eq!(
            Verb::of(&Method::DELETE, true, false, None),
            Some(Verb::Delete)
        );
        assert_eq!(
            Verb::of(&Method::DELETE, false, false, None),
            Some(Verb::DeleteCollection)
        );
        assert_eq!(Verb::of(&Method::OPTIONS, true, false, None), None);
    }

    #[test]
    fn writes_count_every_mutating_verb_and_since_subtracts() {
        let traffic = ApiTraffic::default();
        for (verb, resource) in [
            (Verb::Get, "pods"),
            (Verb::Watch, "pods"),
            (Verb::Create, "pods"),
            (Verb::Apply, "statefulsets"),
            (Verb::Patch, "widgets/status"),
        ] {
            assert!(traffic.record(verb, resource).is_ok());
        }
        let before = traffic.counts();
        assert_eq!(before.writes(), 3);
        assert_eq!(before.total(), 5);
        assert!(traffic.record(Verb::Delete, "pods").is_ok());
        assert!(traffic.record(Verb::List, "pods").is_ok());
        let after = traffic.counts();
        let delta = after.since(&before);
        assert_eq!(delta.writes(), 1);
        assert_eq!(delta.total(), 2);
        assert_eq!(delta.count(Verb::Delete, "pods"), 1);
        assert_eq!(after.count(Verb::Apply, "statefulsets"), 1);
    }

    #[test]
    fn a_fault_answers_the_next_matching_requests_then_is_used_up() {
        let traffic = ApiTraffic::default();
        traffic.inject(Fault::new(
            Some(Verb::Update),
            "statefulsets",
            FaultAnswer::Conflict,
            2,
        ));
        // Other verbs and resources pass.
        assert!(traffic.record(Verb::Patch, "statefulsets").is_ok());
        assert!(traffic.record(Verb::Update, "services").is_ok());
        for _ in 0..2 {
            let err = traffic
                .record(Verb::Update, "statefulsets")
                .expect_err("the fault answers");
            assert_eq!(err.code, 409);
            assert_eq!(err.reason, "Conflict");
        }
        assert!(traffic.record(Verb::Update, "statefulsets").is_ok());
        assert!(traffic.pending_faults().is_empty());
        assert_eq!(traffic.injected(), 2);
        // Faulted requests were received, so they are counted.
        assert_eq!(traffic.counts().count(Verb::Update, "statefulsets"), 3);
    }

    #[test]
    fn a_fault_without_verb_matches_any_and_answers_its_code() {
        let traffic = ApiTraffic::default();
        traffic.inject(Fault::new(
            None,
            "widgets/status",
            FaultAnswer::ServiceUnavailable,
            1,
        ));
        traffic.inject(Fault::new(None, "pods", FaultAnswer::InternalError, 1));
        let err = traffic
            .record(Verb::Patch, "widgets/status")
            .expect_err("503");
        assert_eq!((err.code, err.reason.as_ref()), (503, "ServiceUnavailable"));
        let err = traffic.record(Verb::Get, "pods").expect_err("500");
        assert_eq!(err.code, 500);
        traffic.inject(Fault::new(None, "pods", FaultAnswer::TooManyRequests, 5));
        traffic.clear_faults();
        assert!(traffic.record(Verb::Get, "pods").is_ok());
    }

    #[test]
    fn prometheus_text_lists_each_verb_and_resource() {
        let traffic = ApiTraffic::default();
        assert!(traffic.record(Verb::Create, "pods").is_ok());
        assert!(traffic.record(Verb::Create, "pods").is_ok());
        let text = traffic.counts().to_prometheus();
        assert!(text.contains("# TYPE kube_local_requests_total counter"));
        assert!(text.contains("kube_local_requests_total{verb=\"create\",resource=\"pods\"} 2\n"));
    }
}
