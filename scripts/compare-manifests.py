#!/usr/bin/env python3
"""The Helm chart (charts/dkv) against the kustomize install (deploy/default).

Objects are matched by kind, namespace and name and compared whole; each
difference is printed as a unified diff of the two objects (YAML, keys
sorted). Exits 1 on any difference, 0 otherwise. scripts/check-helm.sh runs
the three checks:

    compare-manifests.py crds deploy/crds charts/dkv/crds
        The chart's crds/ holds byte-identical copies of deploy/crds/*.yaml
        (Helm installs crds/ untemplated, so they are copies, not includes).

    compare-manifests.py same KUSTOMIZE.yaml HELM.yaml --namespace dkv-system
        `helm template --include-crds` with the default values renders what
        `kubectl kustomize deploy/default` renders. Two differences are
        expected, and only these:
          - the Namespace: kustomize creates it, Helm does not render it
            (`helm install --create-namespace` makes it; a chart that also
            rendered it could not be installed);
          - the CRDs lack the kustomize `labels:` of deploy/default (Helm
            does not template crds/).

    compare-manifests.py values KUSTOMIZE.yaml HELM.yaml --values FILE ...
        A rendering with non-default values (FILE, over charts/dkv/values.yaml
        as Helm merges them): the kustomize Deployment, with each value put
        where it belongs (the list is printed), must equal the rendered one;
        the metrics Service likewise; the metrics ClusterRoles and binding are
        there only with metrics.secure; every other object is as in `same`.

Needs PyYAML (in the repository's .venv, see scripts/install-prerequisites.sh).
"""

import argparse
import copy
import difflib
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
KUSTOMIZATION = ROOT / "deploy" / "default" / "kustomization.yaml"
CHART = ROOT / "charts" / "dkv"
# Objects that exist only with metrics.secure.
METRICS_RBAC = {
    ("ClusterRole", "", "dkv-operator-metrics-auth"),
    ("ClusterRoleBinding", "", "dkv-operator-metrics-auth"),
    ("ClusterRole", "", "dkv-metrics-reader"),
}
DEFAULT_WEBHOOK_SECRET = "dkv-operator-webhook-tls"


class Failures:
    def __init__(self):
        self.count = 0

    def fail(self, message):
        self.count += 1
        print(f"DIFFERENT: {message}")


def load(path):
    """The objects of a multi-document YAML file, keyed by (kind, namespace, name)."""
    objects = {}
    with open(path, encoding="utf-8") as f:
        for doc in yaml.safe_load_all(f):
            if doc is None:
                continue
            meta = doc.get("metadata") or {}
            key = (doc.get("kind", "?"), meta.get("namespace", ""), meta.get("name", "?"))
            if key in objects:
                sys.exit(f"compare-manifests: {path}: {show(key)} appears twice")
            objects[key] = doc
    return objects


def show(key):
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def dump(obj):
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False).splitlines()


def compare(failures, key, want, got, want_name="kustomize", got_name="helm"):
    if want == got:
        return
    diff = difflib.unified_diff(
        dump(want), dump(got), f"{want_name}: {show(key)}", f"{got_name}: {show(key)}", lineterm="", n=4
    )
    failures.fail(f"{show(key)} differs:\n" + "\n".join(diff))


def kustomize_labels():
    labels = {}
    for entry in yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8")).get("labels", []):
        labels.update(entry.get("pairs", {}))
    return labels


def expected_from_kustomize(kustomize, namespace):
    """What Helm must render for kustomize's objects: the Namespace dropped,
    the CRDs without the kustomization's labels (see the module doc)."""
    expected = {}
    added = kustomize_labels()
    for key, obj in kustomize.items():
        kind, _, name = key
        if kind == "Namespace" and name == namespace:
            continue
        if kind == "CustomResourceDefinition":
            obj = copy.deepcopy(obj)
            labels = obj["metadata"].get("labels", {})
            for label, value in added.items():
                if labels.get(label) == value:
                    del labels[label]
            if not labels:
                obj["metadata"].pop("labels", None)
        expected[key] = obj
    return expected


def compare_sets(failures, expected, helm, skip=()):
    """Compares the objects of both sides but `skip`; returns how many."""
    keys = sorted((set(expected) | set(helm)) - set(skip))
    for key in keys:
        if key not in helm:
            failures.fail(f"{show(key)} is rendered by kustomize, not by helm")
        elif key not in expected:
            failures.fail(f"{show(key)} is rendered by helm, not by kustomize")
        else:
            compare(failures, key, expected[key], helm[key])
    return len(keys)


def cmd_crds(args):
    failures = Failures()
    source = sorted(p.name for p in Path(args.deploy_crds).glob("*.yaml") if p.name != "kustomization.yaml")
    copied = sorted(p.name for p in Path(args.chart_crds).iterdir())
    if not source:
        sys.exit(f"compare-manifests: no CRDs in {args.deploy_crds}")
    for name in sorted(set(source) | set(copied)):
        a, b = Path(args.deploy_crds) / name, Path(args.chart_crds) / name
        if name not in copied:
            failures.fail(f"{b} is missing")
        elif name not in source:
            failures.fail(f"{b} is not in {args.deploy_crds}")
        elif a.read_bytes() != b.read_bytes():
            diff = difflib.unified_diff(
                a.read_text(encoding="utf-8").splitlines(),
                b.read_text(encoding="utf-8").splitlines(),
                str(a),
                str(b),
                lineterm="",
                n=2,
            )
            failures.fail(f"{b} is not a copy of {a}:\n" + "\n".join(list(diff)[:60]))
    if failures.count:
        print(f"fix: cp {args.deploy_crds}/{{{','.join(source)}}} {args.chart_crds}/")
    return failures


def cmd_same(args):
    failures = Failures()
    kustomize = load(args.kustomize)
    if ("Namespace", "", args.namespace) not in kustomize:
        failures.fail(f"kustomize renders no Namespace {args.namespace}: is --namespace right?")
    n = compare_sets(failures, expected_from_kustomize(kustomize, args.namespace), load(args.helm))
    print(f"{n} objects compared (Namespace {args.namespace}: kustomize's only, as expected)")
    return failures


def merge(base, override):
    """Helm's merge of a values file over the chart's values: maps merge
    recursively, anything else replaces, and null deletes the key."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def brief(value):
    """A value as one line, as YAML would spell it (JSON for maps and lists)."""
    if isinstance(value, (dict, list, bool)) or value is None:
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def container(deployment, name="operator"):
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise KeyError(f"no container {name}")


def cmd_values(args):
    failures = Failures()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    overrides = yaml.safe_load(Path(args.values).read_text(encoding="utf-8")) or {}
    values = merge(defaults, overrides)
    kustomize = load(args.kustomize)
    helm = load(args.helm)
    expected = expected_from_kustomize(kustomize, args.namespace)
    placed = []
    deployment = ("Deployment", args.namespace, "dkv-operator")
    metrics_service = ("Service", args.namespace, "dkv-operator-metrics")

    def put(what, where):
        what = what if len(what) <= 100 else what[:97] + "..."
        placed.append(f"  {what} -> {where}")

    # The Deployment: kustomize's, with each value where it belongs.
    want = copy.deepcopy(expected[deployment])
    pod = want["spec"]["template"]
    op = container(want)

    want["spec"]["replicas"] = values["replicas"]
    put(f"replicas={values['replicas']}", "Deployment spec.replicas")

    image = f"{values['image']['repository']}:{values['image'].get('tag') or chart['appVersion']}"
    op["image"] = image
    op["imagePullPolicy"] = values["image"]["pullPolicy"]
    for env in op["env"]:
        if env["name"] == "DKV_OPERATOR_IMAGE":
            env["value"] = image
    put(f"image={image}", "container image and env DKV_OPERATOR_IMAGE")
    put(f"image.pullPolicy={values['image']['pullPolicy']}", "container imagePullPolicy")

    if values.get("resources"):
        op["resources"] = values["resources"]
    else:
        op.pop("resources", None)
    put(f"resources={brief(values.get('resources'))}", "container resources")

    metrics = values["metrics"]
    webhook = values["webhook"]
    wanted_args = [
        "operator",
        f"--log-format={values['logFormat']}",
        f"--metrics-secure={'true' if metrics['secure'] else 'false'}",
    ]
    if values.get("listenOn", "all") == "podIP":
        wanted_args += [
            f"--metrics-addr=$(POD_IP):{metrics['port']}",
            "--health-addr=$(POD_IP):8081",
            "--webhook-addr=$(POD_IP):9443",
        ]
        op["env"].append(
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        )
        put("listenOn=podIP", "args --*-addr=$(POD_IP):PORT and env POD_IP")
    else:
        wanted_args += [
            f"--metrics-addr=0.0.0.0:{metrics['port']}",
            "--health-addr=0.0.0.0:8081",
        ]
    if values.get("watchNamespace"):
        wanted_args.append(f"--namespace={values['watchNamespace']}")
        put(f"watchNamespace={values['watchNamespace']}", "arg --namespace")
    if metrics.get("certSecret"):
        wanted_args.append("--metrics-cert-dir=/etc/dkv/metrics-tls")
        op["volumeMounts"].append(
            {"name": "metrics-tls", "mountPath": "/etc/dkv/metrics-tls", "readOnly": True}
        )
        pod["spec"]["volumes"].append(
            {"name": "metrics-tls", "secret": {"secretName": metrics["certSecret"]}}
        )
        put(f"metrics.certSecret={metrics['certSecret']}", "volume, mount and arg --metrics-cert-dir")
    if webhook["certSecret"] != DEFAULT_WEBHOOK_SECRET:
        wanted_args.append(f"--webhook-secret={webhook['certSecret']}")
        put(f"webhook.certSecret={webhook['certSecret']}", "arg --webhook-secret")
    for value, flag in (
        ("certValiditySeconds", "--webhook-cert-validity-seconds"),
        ("certRenewBeforeSeconds", "--webhook-cert-renew-before-seconds"),
    ):
        if webhook.get(value) is not None:
            wanted_args.append(f"{flag}={int(webhook[value])}")
            put(f"webhook.{value}={webhook[value]}", f"arg {flag}")
    wanted_args += [str(a) for a in values.get("extraArgs") or []]
    op["args"] = wanted_args
    put(f"logFormat={values['logFormat']}, metrics.secure={brief(metrics['secure'])}, "
        f"metrics.port={metrics['port']}, extraArgs={brief(values.get('extraArgs'))}", "args")
    for port in op["ports"]:
        if port["name"] == "metrics":
            port["containerPort"] = metrics["port"]

    if values.get("podAnnotations"):
        pod["metadata"]["annotations"] = values["podAnnotations"]
        put(f"podAnnotations={brief(values['podAnnotations'])}", "pod template annotations")
    for value in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity"):
        if values.get(value):
            pod["spec"][value] = values[value]
            put(f"{value}={brief(values[value])}", f"pod spec {value}")
        else:
            pod["spec"].pop(value, None)
            put(f"{value} empty", f"no pod spec {value}")

    # The metrics Service: its port follows metrics.port, its name the scheme.
    service = copy.deepcopy(expected[metrics_service])
    service["spec"]["ports"][0]["port"] = metrics["port"]
    service["spec"]["ports"][0]["name"] = "https-metrics" if metrics["secure"] else "http-metrics"
    put(f"metrics.port={metrics['port']}, metrics.secure={brief(metrics['secure'])}",
        "Service dkv-operator-metrics port and its name")
    put(f"metrics.secure={brief(metrics['secure'])}",
        "metrics ClusterRoles and binding " + ("present" if metrics["secure"] else "absent"))
    rest = sorted((set(expected) | set(helm)) - {deployment, metrics_service} - METRICS_RBAC)
    put(f"nothing else ({len(rest)} objects)", "as in the kustomize install")
    print(f"values of {args.values}, and where they must land:")
    print("\n".join(placed))

    if want == expected[deployment]:
        failures.fail(f"{args.values} changes nothing in the Deployment: the check would be vacuous")
    for key, wanted in ((deployment, want), (metrics_service, service)):
        if key in helm:
            compare(failures, key, wanted, helm[key], "expected", "helm")
        else:
            failures.fail(f"helm renders no {show(key)}")
    for key in sorted(METRICS_RBAC):
        if metrics["secure"] and key not in helm:
            failures.fail(f"metrics.secure=true but helm renders no {show(key)}")
        elif not metrics["secure"] and key in helm:
            failures.fail(f"metrics.secure=false but helm still renders {show(key)}")
        elif key in helm:
            compare(failures, key, expected[key], helm[key])
    compare_sets(failures, expected, helm, skip={deployment, metrics_service} | METRICS_RBAC)
    return failures


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    crds = sub.add_parser("crds", help="the chart's crds/ are copies of deploy/crds")
    crds.add_argument("deploy_crds")
    crds.add_argument("chart_crds")
    crds.set_defaults(run=cmd_crds)
    for name, run, help_text in (
        ("same", cmd_same, "default values render the kustomize objects"),
        ("values", cmd_values, "non-default values land where they should"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("kustomize", help="output of kubectl kustomize deploy/default")
        p.add_argument("helm", help="output of helm template --include-crds")
        p.add_argument("--namespace", default="dkv-system", help="the install namespace (default dkv-system)")
        if name == "values":
            p.add_argument("--values", required=True, help="the values file given to helm template")
        p.set_defaults(run=run)
    args = parser.parse_args()
    failures = args.run(args)
    if failures.count:
        print(f"compare-manifests {args.command}: {failures.count} difference(s)")
        return 1
    print(f"compare-manifests {args.command}: same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
