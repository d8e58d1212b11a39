#!/usr/bin/env bash
# Validate dkv's Kubernetes manifests against the official Kubernetes schemas,
# offline.
#
#   scripts/validate-manifests.sh
#
# What it checks:
#   1. `kubectl kustomize deploy/default` and `kubectl kustomize
#      deploy/monitoring` render, with nothing on stderr (kustomize
#      deprecation warnings count as failures).
#   2. Every rendered object, and every object in examples/*.yaml, validates
#      with `kubernetes-validate --strict` (unknown fields are errors) against
#      the newest Kubernetes version the installed kubernetes-validate bundles.
#      CustomResourceDefinitions are validated as apiextensions.k8s.io objects.
#      Instances of our own custom resources (group of any CRD in deploy/, e.g.
#      DistributedKV) have no bundled schema: they are listed as skipped.
#      So are the Prometheus Operator's kinds in deploy/monitoring
#      (monitoring.coreos.com: PodMonitor, ServiceMonitor, PrometheusRule),
#      whose CRDs are not ours and not bundled either;
#      scripts/check-monitoring.sh checks those objects' content instead.
#      Any other object without a schema (a wrong apiVersion/kind) fails.
#
# Needs python3 (with venv) and kubectl (v1.32 has kustomize built in).
# Python tooling lives in a venv at .venv in the repository root, created and
# filled on first use.
#
# Environment overrides:
#   DKV_VENV                  venv directory       (default: <repo>/.venv)
#   KUBECTL                   kubectl binary       (default: kubectl)
#   KUBERNETES_VALIDATE_PIN   version to install   (default below)
#
# Exit status: 0 when everything is valid, non-zero otherwise; each failing
# object is printed as `ERROR <file> ... resource <kind>/<name> ...: <path>: <why>`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DKV_VENV:-$ROOT/.venv}"
KUBECTL="${KUBECTL:-kubectl}"
# Pinned so CI is reproducible; bump to pick up a newer Kubernetes schema set.
KUBERNETES_VALIDATE_PIN="${KUBERNETES_VALIDATE_PIN:-1.37.0}"

log() { printf 'validate-manifests: %s\n' "$*"; }
die() { printf 'validate-manifests: FAILED: %s\n' "$*" >&2; exit 1; }

command -v "$KUBECTL" >/dev/null 2>&1 || die "kubectl not found (set KUBECTL=...)"
command -v python3 >/dev/null 2>&1 || die "python3 not found"

# --- Python tooling --------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  python3 -m venv "$VENV" ||
    die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
fi
installed="$("$VENV/bin/python" -c \
  'from importlib.metadata import version; print(version("kubernetes-validate"))' \
  2>/dev/null || true)"
if [[ "$installed" != "$KUBERNETES_VALIDATE_PIN" ]]; then
  log "installing kubernetes-validate==$KUBERNETES_VALIDATE_PIN into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_PIN" ||
    die "pip install kubernetes-validate==$KUBERNETES_VALIDATE_PIN failed"
fi
k8s_version="$("$VENV/bin/python" -c \
  'from kubernetes_validate.utils import latest_version; print(latest_version())')"

# --- Render ----------------------------------------------------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# render DIR OUT: `kubectl kustomize deploy/DIR` into OUT, refused on any
# error or warning.
render() {
  if ! "$KUBECTL" kustomize "$ROOT/deploy/$1" >"$2" 2>"$work/kustomize.err"; then
    cat "$work/kustomize.err" >&2
    die "kubectl kustomize deploy/$1 failed"
  fi
  if [[ -s "$work/kustomize.err" ]]; then
    cat "$work/kustomize.err" >&2
    die "kubectl kustomize deploy/$1 printed warnings (see above)"
  fi
}
rendered="$work/rendered.yaml"
render default "$rendered"
monitoring="$work/monitoring.yaml"
render monitoring "$monitoring"

# --- Sort objects: built-in kinds to validate, our custom resources to skip --
# Inputs are named as they will appear in messages (the rendered tree as
# deploy/default.rendered.yaml). Built-in objects are copied, per input, under
# $work/check/ with that relative name.
inputs=("deploy/default.rendered.yaml=$rendered" "deploy/monitoring.rendered.yaml=$monitoring")
shopt -s nullglob
for f in "$ROOT"/examples/*.yaml "$ROOT"/examples/*.yml; do
  inputs+=("${f#"$ROOT"/}=$f")
done
shopt -u nullglob

mkdir -p "$work/check"
"$VENV/bin/python" - "$work/check" "${inputs[@]}" <<'PY' || die "could not read the manifests (see above)"
import os
import sys

import yaml

out_dir, inputs = sys.argv[1], sys.argv[2:]

def group_of(api_version):
    return api_version.split("/", 1)[0] if "/" in api_version else ""

docs = []  # (label, doc)
for spec in inputs:
    label, path = spec.split("=", 1)
    with open(path) as f:
        try:
            loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            sys.exit(f"ERROR {label}: not valid YAML: {e}")
    for d in loaded:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") \
                or not (d.get("metadata") or {}).get("name"):
            sys.exit(f"ERROR {label}: object without apiVersion/kind/metadata.name: {str(d)[:200]}")
        docs.append((label, d))

# The Prometheus Operator's API group (deploy/monitoring): CRDs installed with
# the Prometheus Operator, not by dkv.
PROMETHEUS_OPERATOR_GROUPS = {"monitoring.coreos.com"}

# Groups served by the CRDs we ship (the rendered tree contains deploy/crds).
custom_groups = {
    d["spec"]["group"]
    for _, d in docs
    if d["kind"] == "CustomResourceDefinition" and isinstance(d.get("spec"), dict)
    and d["spec"].get("group")
}

per_file = {}
for label, d in docs:
    name = d["metadata"]["name"]
    ns = d["metadata"].get("namespace")
    ident = f'{d["kind"].lower()}/{name}' + (f" (namespace {ns})" if ns else "")
    if group_of(d["apiVersion"]) in custom_groups:
        print(f'SKIP {label}: {ident}: {d["apiVersion"]} is one of our custom resources; '
              "skipped, kubernetes-validate bundles no schema for custom resources")
        continue
    if group_of(d["apiVersion"]) in PROMETHEUS_OPERATOR_GROUPS:
        print(f'SKIP {label}: {ident}: {d["apiVersion"]} is a Prometheus Operator resource; '
              "skipped, kubernetes-validate bundles no schema for it "
              "(scripts/check-monitoring.sh checks its content)")
        continue
    per_file.setdefault(label, []).append(d)

for label, objs in per_file.items():
    dest = os.path.join(out_dir, label)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "w") as f:
        yaml.safe_dump_all(objs, f, sort_keys=False)
PY

# --- Validate --------------------------------------------------------------
mapfile -t files < <(cd "$work/check" && find . -type f -name '*.y*ml' -printf '%P\n' | sort)
[[ ${#files[@]} -gt 0 ]] || die "nothing to validate"

set +e
output="$(cd "$work/check" && "$VENV/bin/kubernetes-validate" --strict -k "$k8s_version" "${files[@]}" 2>&1)"
rc=$?
set -e
printf '%s\n' "$output"

passed="$(grep -c '^INFO .* passed for resource' <<<"$output" || true)"
failed="$(grep -c '^ERROR' <<<"$output" || true)"
# A WARN here means kubernetes-validate has no schema for a built-in-looking
# object (wrong apiVersion or kind): our custom resources were filtered out
# above, so nothing may pass unchecked.
unknown="$(grep -c '^WARN' <<<"$output" || true)"

if [[ $rc -ne 0 || $failed -ne 0 || $unknown -ne 0 ]]; then
  die "$failed invalid, $unknown without a schema (wrong apiVersion/kind?), $passed valid; strict, Kubernetes $k8s_version"
fi
log "OK: $passed objects valid (strict, Kubernetes $k8s_version, kubernetes-validate $KUBERNETES_VALIDATE_PIN)"
