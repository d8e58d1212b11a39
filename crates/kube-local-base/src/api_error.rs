//! `ApiError`: failures rendered as Kubernetes `Status` objects with the code and reason a real API server uses.

use serde_json::{Value, json};

/// An error answered to a client as a `Status` body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: std::borrow::Cow<'static, str>,
    pub message: String,
    /// Boxed: JSON values are large and errors travel in every `Result`.
    pub details: Option<Box<Value>>,
}

/// One entry of `details.causes` of an `Invalid` error.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCause {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl FieldCause {
    pub fn invalid(
        field: impl Into<String>,
        value: &Value,
        detail: impl std::fmt::Display,
    ) -> Self {
        let field = field.into();
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        FieldCause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {shown}: {detail}"),
            field,
        }
    }

    pub fn required(field: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        let detail = detail.to_string();
        FieldCause {
            reason: "FieldValueRequired",
            message: if detail.is_empty() {
                "Required value".to_string()
            } else {
                format!("Required value: {detail}")
            },
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl std::fmt::Display) -> Self {
        FieldCause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }

    /// A value that must be unique and is not (upstream `field.Duplicate`).
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        FieldCause {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {value}"),
            field: field.into(),
        }
    }

    /// A value that must name something that exists and does not (upstream `field.NotFound`).
    pub fn not_found(field: impl Into<String>, value: &Value) -> Self {
        FieldCause {
            reason: "FieldValueNotFound",
            message: format!("Not found: {value}"),
            field: field.into(),
        }
    }

    pub fn unsupported(field: impl Into<String>, value: &Value, allowed: &[Value]) -> Self {
        let allowed: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        FieldCause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                allowed.join(", ")
            ),
            field: field.into(),
        }
    }

    pub fn type_invalid(field: impl Into<String>, value: &Value, expected: &str) -> Self {
        let shown = match value {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        FieldCause {
            reason: "FieldValueTypeInvalid",
            message: format!("Invalid value: {shown}: {}", expected),
            field: field.into(),
        }
    }

    fn rendered(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// The resource an error is about, as `details.{group,kind,name}` expects it.
#[derive(Debug, Clone, Default)]
pub struct Subject<'a> {
    pub group: &'a str,
    /// The plural resource name (upstream puts the resource, not the Kind, here).
    pub resource: &'a str,
    pub name: &'a str,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    /// `details`, without the fields upstream omits when empty (`name`, `group`, `kind`, `causes`, ...: every field
    /// of `StatusDetails` is `omitempty`; the core group is the empty one).
    fn with_details(mut self, mut details: Value) -> Self {
        if let Value::Object(fields) = &mut details {
            fields.retain(|_, v| match v {
                Value::Null => false,
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            });
        }
        self.details = Some(Box::new(details));
        self
    }

    fn qualified(group: &str, resource: &str) -> String {
        if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
    }

    pub fn not_found(s: Subject<'_>) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!(
                "{} {:?} not found",
                Self::qualified(s.group, s.resource),
                s.name
            ),
        );
        if s.name.is_empty() {
            e.message = "the server could not find the requested resource".into();
        }
        e.with_details(json!({"name": s.name, "group": s.group, "kind": s.resource}))
    }

    pub fn already_exists(s: Subject<'_>) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} {:?} already exists",
                Self::qualified(s.group, s.resource),
                s.name
            ),
        )
        .with_details(json!({"name": s.name, "group": s.group, "kind": s.resource}))
    }

    pub fn conflict(s: Subject<'_>, why: impl std::fmt::Display) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {:?}: {why}",
                Self::qualified(s.group, s.resource),
                s.name
            ),
        )
        .with_details(json!({"name": s.name, "group": s.group, "kind": s.resource}))
    }

    /// 409 for a server-side apply that would take fields other managers own: upstream names no object in its
    /// details, only the conflicting fields as causes.
    pub fn apply_conflict(message: impl Into<String>, causes: Vec<Value>) -> Self {
        Self::new(409, "Conflict", message).with_details(json!({"causes": causes}))
    }

    pub fn stale(s: Subject<'_>) -> Self {
        Self::conflict(
            s,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 with field causes; `kind` is the object's Kind, as upstream reports it.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        let rendered: Vec<String> = causes.iter().map(FieldCause::rendered).collect();
        let summary = if rendered.len() == 1 {
            rendered[0].clone()
        } else {
            format!("[{}]", rendered.join(", "))
        };
        let gk = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{gk} {name:?} is invalid: {summary}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    /// 422 for query parameters (`ListOptions.meta.k8s.io ""`), as upstream's `ValidateListOptions` reports them.
    pub fn invalid_list_options(cause: FieldCause) -> Self {
        Self::invalid("meta.k8s.io", "ListOptions", "", vec![cause])
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml; got {content_type:?}"
            ),
        )
    }

    pub fn unsupported_media(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }

    pub fn forbidden(s: Subject<'_>, why: impl std::fmt::Display) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} {:?} is forbidden: {why}",
                Self::qualified(s.group, s.resource),
                s.name
            ),
        )
        .with_details(json!({"name": s.name, "group": s.group, "kind": s.resource}))
    }

    /// 401 for a request without valid credentials, worded as upstream.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 from the authorizer: `{resource}[.group] ["name"] is forbidden: {why}`, or
    /// `forbidden: {why}` for a non-resource request (empty `resource`); `details` omits empty fields.
    pub fn access_denied(s: Subject<'_>, why: impl std::fmt::Display) -> Self {
        let message = match (s.resource.is_empty(), s.name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!(
                "{} is forbidden: {why}",
                Self::qualified(s.group, s.resource)
            ),
            (false, false) => format!(
                "{} {:?} is forbidden: {why}",
                Self::qualified(s.group, s.resource),
                s.name
            ),
        };
        let mut details = serde_json::Map::new();
        for (key, value) in [("name", s.name), ("group", s.group), ("kind", s.resource)] {
            if !value.is_empty() {
                details.insert(key.into(), json!(value));
            }
        }
        Self::new(403, "Forbidden", message).with_details(Value::Object(details))
    }

    /// 429 TooManyRequests; `retry_after_seconds` (when non-zero) goes to `details.retryAfterSeconds` and the
    /// `Retry-After` header, as upstream's `NewTooManyRequests`.
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let details = if retry_after_seconds > 0 {
            json!({"retryAfterSeconds": retry_after_seconds})
        } else {
            json!({})
        };
        Self::new(429, "TooManyRequests", message).with_details(details)
    }

    /// A failure answered with `code` and no reason (upstream's `StatusReasonUnknown`), e.g. a `Status` a REST
    /// handler returns itself rather than an error of a known kind.
    pub fn unreasoned(code: u16, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: "".into(),
            message: message.into(),
            details: None,
        }
    }

    /// `details.retryAfterSeconds`, when the error carries one.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64)
            .filter(|s| *s > 0)
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// Adds causes to an error (e.g. a 409 field-manager conflict lists the conflicting fields).
    pub fn with_causes(mut self, causes: Vec<Value>) -> Self {
        let details = self.details.get_or_insert_with(|| Box::new(json!({})));
        if let Some(d) = details.as_object_mut() {
            d.insert("causes".into(), Value::Array(causes));
        }
        self
    }

    pub fn with_reason(mut self, reason: &'static str) -> Self {
        self.reason = reason.into();
        self
    }

    /// The `Status` object sent on the wire.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        // An error of unknown reason has none on the wire (upstream's `StatusReasonUnknown` is omitted).
        if self.reason.is_empty()
            && let Some(obj) = status.as_object_mut()
        {
            obj.remove("reason");
        }
        if let (Some(d), Some(obj)) = (&self.details, status.as_object_mut()) {
            obj.insert("details".into(), (**d).clone());
        }
        status
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
