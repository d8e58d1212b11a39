//! Writes through the `/scale` subresource: a PUT or PATCH of the autoscaling/v1 `Scale` (see [`crate::scale`]) is
//! stored as the replicas of the scaled object and answered with its new Scale.

use serde_json::{Value, json};

use super::{Candidate, Core, Subresource, WriteOptions, Written};
use crate::api_error::{ApiError, ApiResult};
use crate::meta;
use crate::patch::{self, PatchKind};
use crate::registry::ResourceType;
use crate::scale::{paths, replicas_of, set, to_scale};
use crate::type_info::TypeInfo;

impl Core {
    async fn scaled(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &WriteOptions,
        mut to_scale_obj: impl FnMut(&Value) -> ApiResult<Value> + Send,
    ) -> ApiResult<Written> {
        let p = paths(rt)?.clone();
        let w = self
            .write(
                rt,
                ns,
                name,
                Subresource::Scale,
                opts,
                false,
                &mut |current| {
                    let Some(current) = current else {
                        return Err(ApiError::not_found(rt.subject(name)));
                    };
                    let new_scale = to_scale_obj(&to_scale(rt, current))?;
                    let replicas = replicas_of(&new_scale)?;
                    let wanted_rv = meta::resource_version(&new_scale).to_string();
                    let mut obj = current.clone();
                    set(&mut obj, &p.spec_replicas, json!(replicas));
                    let precondition =
                        !wanted_rv.is_empty() && wanted_rv != meta::resource_version(current);
                    if precondition {
                        meta::set_meta(&mut obj, "resourceVersion", json!(wanted_rv));
                    }
                    Ok(Candidate {
                        object: obj,
                        rv_is_precondition: precondition,
                        managed: false,
                    })
                },
            )
            .await?;
        Ok(Written {
            object: to_scale(rt, &w.object),
            ..w
        })
    }

    /// PUT of `/scale`.
    pub async fn update_scale(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        body: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        self.scaled(rt, ns, name, opts, |_| Ok(body.clone())).await
    }

    /// PATCH of `/scale` (server-side apply is refused).
    pub async fn patch_scale(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        if kind == PatchKind::Apply {
            return Err(ApiError::unsupported_media(
                "server-side apply of /scale is not supported by kube-local",
            ));
        }
        let ti = TypeInfo::builtin("Scale");
        self.scaled(rt, ns, name, opts, |current| {
            patch::apply(kind, current, body, &ti)
        })
        .await
    }
}
