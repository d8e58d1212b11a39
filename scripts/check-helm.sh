#!/usr/bin/env bash
# Checks the Helm chart charts/dkv against the kustomize install deploy/default.
#
#   scripts/check-helm.sh
#
# What it checks:
#   1. `helm lint --strict` passes (a warning fails), with the default values
#      and with each charts/dkv/ci/*-values.yaml.
#   2. charts/dkv/crds/ holds byte-identical copies of deploy/crds/*.yaml.
#   3. `helm template dkv charts/dkv --namespace dkv-system --include-crds`
#      renders the objects of `kubectl kustomize deploy/default`, compared
#      object by object (scripts/compare-manifests.py same; it allows only the
#      Namespace, which `helm install --create-namespace` makes, and the
#      kustomize labels of the CRDs, which Helm does not template).
#   4. Each charts/dkv/ci/*-values.yaml renders, and its values land where
#      they belong, the rest as in 3 (scripts/compare-manifests.py values).
#   5. The chart refuses what cannot work: a release namespace other than
#      dkv-system, metrics.certSecret without metrics.secure, and a misspelt
#      value (values.schema.json).
# Neither helm nor kubectl may print anything on stderr while rendering.
#
# Needs: helm (built from go/helm with Go on first use, into .tools/helm/bin;
# rebuilt when go/helm/go.mod asks for another version), kubectl (for
# kustomize), python3 with PyYAML (the repository's .venv has it after
# scripts/install-prerequisites.sh; a .venv without it gets it here with
# `pip install pyyaml`).
# Environment overrides: HELM (a helm binary to use instead), DKV_VENV
# (default <repo>/.venv), DKV_TOOLS_DIR (default <repo>/.tools), KUBECTL
# (default kubectl).
#
# Exit status 0 when everything holds; otherwise non-zero after printing
# `check-helm: FAILED: ...` and the differences.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="$ROOT/charts/dkv"
VENV="${DKV_VENV:-$ROOT/.venv}"
TOOLS="${DKV_TOOLS_DIR:-$ROOT/.tools}"
KUBECTL="${KUBECTL:-kubectl}"
NAMESPACE=dkv-system

log() { printf 'check-helm: %s\n' "$*"; }
die() {
  printf 'check-helm: FAILED: %s\n' "$*" >&2
  exit 1
}

# --- Tools -------------------------------------------------------------------
source "$ROOT/scripts/lib/python-yaml.sh"
python_with_yaml
command -v "$KUBECTL" >/dev/null 2>&1 || die "kubectl not found (set KUBECTL=...)"

if [[ -n "${HELM:-}" ]]; then
  [[ -x "$HELM" ]] || die "HELM=$HELM is not an executable"
else
  HELM="$TOOLS/helm/bin/helm"
  want=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 } $1 == "helm.sh/helm/v3" { print $2 }' "$ROOT/go/helm/go.mod" | head -1)
  have=""
  [[ -x "$HELM" ]] && have=$("$HELM" version --template '{{.Version}}' 2>/dev/null || true)
  if [[ "$have" != "$want" ]]; then
    log "building helm $want into $TOOLS/helm/bin${have:+ (found $have)}"
    rm -rf "$TOOLS/helm/bin.partial"
    nice -n 10 bash "$ROOT/go/helm/build.sh" "$TOOLS/helm/bin.partial" || die "building helm failed (see above)"
    rm -rf "$TOOLS/helm/bin"
    mv "$TOOLS/helm/bin.partial" "$TOOLS/helm/bin"
  fi
fi
log "using $("$HELM" version --template '{{.Version}}') ($HELM)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Keep helm off the user's repositories, plugins and caches.
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"

# run NAME CMD...: CMD's stdout into $work/NAME; a failure or anything on
# stderr fails the check.
run() {
  local name=$1
  shift
  if ! "$@" >"$work/$name" 2>"$work/$name.err"; then
    cat "$work/$name" "$work/$name.err" >&2
    die "$* failed"
  fi
  if [[ -s "$work/$name.err" ]]; then
    cat "$work/$name.err" >&2
    die "$* wrote to stderr (above)"
  fi
}

# refuses WHY EXPECTED-MESSAGE helm-template-args...: the rendering must fail
# with EXPECTED-MESSAGE in its error.
refuses() {
  local why=$1 expected=$2
  shift 2
  if "$HELM" template dkv "$CHART" --include-crds "$@" >"$work/refused" 2>&1; then
    die "the chart renders $why (helm template $*); it must refuse"
  fi
  grep -qF -- "$expected" "$work/refused" || {
    cat "$work/refused" >&2
    die "helm template $* fails, but not with '$expected'"
  }
  log "refuses $why"
}

values_files=("$CHART"/ci/*-values.yaml)
[[ -e "${values_files[0]}" ]] || die "no $CHART/ci/*-values.yaml to render with"

# --- 1. lint -------------------------------------------------------------------
run lint "$HELM" lint --strict "$CHART"
log "helm lint --strict: clean"
for values in "${values_files[@]}"; do
  run lint "$HELM" lint --strict "$CHART" --namespace "$NAMESPACE" --values "$values"
  log "helm lint --strict --values ${values#"$ROOT"/}: clean"
done

# --- 2. CRDs ---------------------------------------------------------------------
"$PY" "$ROOT/scripts/compare-manifests.py" crds "$ROOT/deploy/crds" "$CHART/crds" ||
  die "charts/dkv/crds/ is not a copy of deploy/crds/"

# --- 3. default values against kustomize -------------------------------------------
run kustomize.yaml "$KUBECTL" kustomize "$ROOT/deploy/default"
run helm.yaml "$HELM" template dkv "$CHART" --namespace "$NAMESPACE" --include-crds
"$PY" "$ROOT/scripts/compare-manifests.py" same "$work/kustomize.yaml" "$work/helm.yaml" --namespace "$NAMESPACE" ||
  die "helm template (default values) differs from kubectl kustomize deploy/default (diffs above)"

# --- 4. non-default values ---------------------------------------------------------
for values in "${values_files[@]}"; do
  run helm-values.yaml "$HELM" template dkv "$CHART" --namespace "$NAMESPACE" --include-crds --values "$values"
  "$PY" "$ROOT/scripts/compare-manifests.py" values "$work/kustomize.yaml" "$work/helm-values.yaml" \
    --namespace "$NAMESPACE" --values "$values" ||
    die "helm template --values ${values#"$ROOT"/} renders something else than expected (diffs above)"
done

# --- 5. what the chart refuses -------------------------------------------------------
refuses "into namespace default" 'installs into namespace "dkv-system" only' --namespace default
refuses "metrics.certSecret without metrics.secure" "metrics.certSecret is served by the secure /metrics only" \
  --namespace "$NAMESPACE" --set metrics.secure=false --set metrics.certSecret=tls
refuses "a misspelt value" "additional properties 'replica' not allowed" --namespace "$NAMESPACE" --set replica=3

log "OK after ${SECONDS}s"
