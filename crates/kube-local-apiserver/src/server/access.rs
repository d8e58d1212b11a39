//! Authentication and authorization of each request, and the `create` a server-side apply that creates its object
//! needs as well.

use axum::extract::Request;

use crate::api_error::{ApiError, ApiResult};
use crate::auth::authenticate::{self, Authenticator};
use crate::auth::rbac::UserInfo;
use crate::core::Core;

use super::Server;
use super::options::{flag, query_map};

/// Authenticates and authorizes `req`: its user (`None` for the public health and version paths),
/// or the 401 or 403 to answer.
pub(super) fn admit(
    core: &Core,
    auth: &Authenticator,
    req: &Request,
) -> ApiResult<Option<UserInfo>> {
    let path = req.uri().path();
    if authenticate::is_public(path) {
        return Ok(None);
    }
    let user = auth
        .authenticate(
            core,
            req.headers(),
            req.extensions().get::<authenticate::ClientCertificate>(),
        )
        .ok_or_else(ApiError::unauthorized)?;
    let attributes =
        crate::auth::attributes::of(req.method(), path, flag(&query_map(req), "watch"));
    let decision = crate::auth::rbac::authorize(core, &user, &attributes);
    if decision.allowed {
        auth.log.record_allowed(&user, &attributes, decision.grant);
        Ok(Some(user))
    } else {
        auth.log.record_forbidden(&user, &attributes);
        Err(crate::auth::forbidden(&user, &attributes))
    }
}

/// A server-side apply that creates its object needs `create` as well as `patch` (as upstream's patch handler
/// authorizes the create it turns into); checked only when the object does not exist yet.
pub(super) fn authorize_create_by_apply(
    server: &Server,
    req: &Request,
    exists: impl FnOnce() -> bool,
) -> ApiResult<()> {
    let (Some(auth), Some(user)) = (&server.auth, req.extensions().get::<UserInfo>()) else {
        return Ok(());
    };
    let mut attributes = crate::auth::attributes::of(req.method(), req.uri().path(), false);
    match &mut attributes {
        crate::auth::rbac::Request::Resource {
            verb, subresource, ..
        } if subresource.is_empty() => *verb = "create".into(),
        _ => return Ok(()),
    }
    if exists() {
        return Ok(());
    }
    let decision = crate::auth::rbac::authorize(&server.core, user, &attributes);
    if decision.allowed {
        auth.log.record_allowed(user, &attributes, decision.grant);
        Ok(())
    } else {
        auth.log.record_forbidden(user, &attributes);
        Err(crate::auth::forbidden(user, &attributes))
    }
}
