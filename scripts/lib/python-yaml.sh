# Sourced by the checks that read YAML. `python_with_yaml` sets PY to a
# python that imports yaml: the repository's venv ($VENV) first, then
# python3. A venv without PyYAML gets it with pip, as
# scripts/install-prerequisites.sh installs it. Uses the caller's log and die.
python_with_yaml() {
  PY=""
  local candidate
  for candidate in "$VENV/bin/python" python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
      PY="$candidate"
      return
    fi
  done
  if [[ -x "$VENV/bin/python" ]]; then
    log "installing PyYAML into $VENV"
    "$VENV/bin/python" -m pip install --quiet pyyaml || die "pip install pyyaml into $VENV failed"
    PY="$VENV/bin/python"
    return
  fi
  die "no python with PyYAML (create the venv with scripts/install-prerequisites.sh, or apt-get install python3-yaml)"
}
