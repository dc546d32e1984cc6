"""deploy/: manifests rendered from serving.toml (k8s_deploy): committed == rendered, the launcher's
arguments, resources from the partition plan, the alert rules' generator, the HPA/adapter pair."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest
import yaml

from k8s_deploy.errors import DeployConfigError
from k8s_deploy.gpu import mps_replicas
from k8s_deploy.monitoring import QUEUE_METRIC, adapter_metrics_query, render_adapter_rules, substitute_adapter_template
from k8s_deploy.tree import KUSTOMIZE, render_documents, render_files, stale_files
from k8s_deploy.validate import models_on_the_gpu
from k8s_deploy.workload import NATIVE_LIBRARY_DIR, TRITON_IMAGE, plan_deployment, resource_name
from operations.alert_rules import AlertThresholds, render_alert_rules
from serving.runtime.launcher import partition_server_settings
from serving.runtime.native import CAP_ENV, GZIP_LEVEL_ENV, HELPERS, REQUEST_GUARD_ENV, preload_environment
from contracts.partition_plan import cores_for_shares
from serving.runtime.security import AdminKey
from serving.runtime.supervisor import RestartPolicy


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def base_docs(spec, partition):
    return render_documents(spec)[f"kustomize/base/{resource_name(partition)}.yaml"]


def container(deployment):
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def test_committed_manifests_are_the_rendering_of_serving_toml(serving_spec):
    assert stale_files(render_files(serving_spec)) == [], "run `make k8s-render`"


def test_stale_files_reports_an_edited_file_and_one_nothing_renders(serving_spec, tmp_path):
    files = render_files(serving_spec)
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    assert stale_files(files, tmp_path) == []
    (tmp_path / "kustomize/base/triton-main.yaml").write_text("edited by hand\n")
    (tmp_path / "kustomize/base/extra.yaml").write_text("{}\n")
    assert stale_files(files, tmp_path) == ["kustomize/base/triton-main.yaml: differs from the rendering",
                                            "kustomize/base/extra.yaml: not rendered from the serving config (stale)"]


def test_one_deployment_per_partition_on_nvidias_2_51_image(serving_spec):
    for part in serving_spec.effective_partitions:
        (deployment,) = by_kind(base_docs(serving_spec, part.name), "Deployment")
        assert deployment["metadata"]["name"] == resource_name(part.name)
        assert container(deployment)["image"] == TRITON_IMAGE == "nvcr.io/nvidia/tritonserver:24.10-py3"
        assert "replicas" not in deployment["spec"], "the HPA owns the replica count"


def test_container_arguments_are_the_launchers_with_a_decoy_where_the_key_goes(serving_spec):
    from k8s_deploy.workload import ARGV_KEY_DECOY

    deploy = plan_deployment(serving_spec)
    for part in deploy.plan.partitions:
        key = AdminKey("x" * 32, "test")
        launcher = partition_server_settings(deploy.plan, part, "/serving/models", "/serving/backends", admin_key=key).to_args_list()
        c = container(by_kind(base_docs(serving_spec, part.name), "Deployment")[0])
        # a pod has no launcher checking models and no supervisor: strict readiness, and a failed
        # model load ends the server (the kubelet restarts it) instead of a Ready pod failing requests;
        # pods end routinely: the partition's drain is the exit timeout
        in_pod = {"--strict-readiness=false": "--strict-readiness=true", "--exit-on-error=false": "--exit-on-error=true",
                  "--exit-timeout-secs=10": f"--exit-timeout-secs={deploy.autoscaling(part.name).drain_s}"}
        assert c["args"] == [in_pod.get(a, a).replace(key.value, ARGV_KEY_DECOY) for a in launcher]
        assert set(in_pod.values()) <= set(c["args"])
        # the host's stack limit (a ~4 MiB body crashed Triton on 8 MiB), then the server replaces the shell
        assert c["command"][:2] == ["sh", "-c"] and "ulimit -s 262144" in c["command"][2]
        assert c["command"][2].endswith('exec tritonserver "$@"') and c["command"][3] == "tritonserver"
        # no key in the arguments, which /proc/1/cmdline shows every process of the node (the kubelet
        # expanded $(TRITON_ADMIN_KEY) there until 2026-12-06): the request guard puts the Secret's key in
        # place of the decoy inside the server, as on a host (serving.runtime.security.keep_key_off_command_line)
        assert not any("$(" in a for a in c["args"]) and any(ARGV_KEY_DECOY in a for a in c["args"])
        env = {e["name"]: e for e in c["env"]}
        assert env["SERVING_ARGV_DECOY"]["value"] == ARGV_KEY_DECOY and "TRITON_ADMIN_KEY" not in env
        assert env["SERVING_ARGV_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-key", "key": "admin-key"}
        assert "/opt/serving/lib/librequest_guard.so".replace("/opt/serving", "/serving") in env["LD_PRELOAD"]["value"]
        assert c["lifecycle"]["preStop"]["exec"]["command"][-2:] == ["sleep", "5"]
        assert "--model-control-mode=explicit" in c["args"] and f"--http-port={part.http_port}" in c["args"]
        assert [f"--load-model={m}" for m in part.models] == [a for a in c["args"] if a.startswith("--load-model=")]


def test_every_pod_preloads_the_helpers_the_hosts_servers_get_with_the_same_settings(serving_spec, tmp_path):
    """Without the condition-wait cap a pod's batcher can hold requests for 500 ms (Triton 2.51's lost
    wake-up); the pods' variables must be the host launcher's, with the image's library paths."""
    deploy = plan_deployment(serving_spec)
    for part in deploy.plan.partitions:
        env = {e["name"]: e.get("value") for e in container(by_kind(base_docs(serving_spec, part.name), "Deployment")[0])["env"]}
        assert env["LD_PRELOAD"] == ":".join(str(NATIVE_LIBRARY_DIR / h.library.name) for h in HELPERS)
        assert env[CAP_ENV] == str(serving_spec.server.cond_wait_cap_us) != "0"
        assert env[GZIP_LEVEL_ENV] == str(serving_spec.server.http_gzip_level)
        assert env[REQUEST_GUARD_ENV] == "on"
        on_host, _ = preload_environment(deploy.plan.cond_wait_cap_us, {}, gzip_level=deploy.plan.http_gzip_level,
                                         library=tmp_path, gzip_library=tmp_path, guard_library=tmp_path)  # exists: "built"
        assert {k: v for k, v in on_host.items() if k != "LD_PRELOAD"} == {k: env[k] for k in (CAP_ENV, GZIP_LEVEL_ENV, REQUEST_GUARD_ENV)}


def test_no_configured_admin_key_ever_reaches_a_rendered_file(serving_spec, monkeypatch):
    secret = "ThisIsTheRealAdminKeyDoNotRender0123456789"
    monkeypatch.setenv("TRITON_ADMIN_KEY", secret)
    assert not [path for path, text in render_files(serving_spec).items() if secret in text]


def test_resources_are_whole_cpus_of_the_share_and_memory_of_the_partition_requests_equal_limits(serving_spec):
    k8s = serving_spec.kubernetes
    parts = serving_spec.effective_partitions
    for part, cpus in zip(parts, cores_for_shares([p.compute_share for p in parts], k8s.node_cpus)):
        c = container(by_kind(base_docs(serving_spec, part.name), "Deployment")[0])
        assert c["resources"]["requests"] == c["resources"]["limits"] == {
            "cpu": str(cpus), "memory": f"{part.memory_mb + k8s.memory_overhead_mb}Mi"}
        assert {"name": "SERVING_INTRA_OP_THREADS", "value": str(cpus)} in c["env"]


def test_probes_give_a_startup_allowance_and_liveness_follows_the_supervisors_hang_policy(serving_spec):
    c = container(by_kind(base_docs(serving_spec, "main"), "Deployment")[0])
    startup, live, ready = c["startupProbe"], c["livenessProbe"], c["readinessProbe"]
    assert startup["httpGet"]["path"] == ready["httpGet"]["path"] == "/v2/health/ready"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= serving_spec.kubernetes.startup_allowance_s
    policy = RestartPolicy()
    # the supervisor's hang detection and stub watch in one check (serving.runtime.pod_liveness): a model
    # whose backend stub died stays READY in Triton and fails the requests that reach it
    part = plan_deployment(serving_spec).plan.partition("main")
    command = live["exec"]["command"]
    # every exec gets the container's environment, the admin key's variable included, and a process's
    # /proc/<pid>/environ is readable by model code (the same user): the probe runs without it
    assert command[:8] == ["env", "-u", "SERVING_ARGV_SECRET", "-u", "SERVING_ARGV_DECOY",
                           "python3", "-m", "serving.runtime.pod_liveness"]
    assert c["lifecycle"]["preStop"]["exec"]["command"][:5] == command[:5]
    assert command[command.index("--port") + 1] == str(part.http_port)
    assert command[command.index("--models") + 1].split(",") == list(part.models)
    assert command[command.index("--backends") + 1] == "/serving/backends"
    assert float(command[command.index("--timeout-s") + 1]) < live["timeoutSeconds"]  # answers before the kubelet gives up
    assert (live["periodSeconds"], live["timeoutSeconds"], live["failureThreshold"]) == (
        policy.liveness_interval_s, policy.liveness_timeout_s, policy.liveness_failures)


def test_services_and_pdb_select_the_partitions_pods(serving_spec):
    docs = base_docs(serving_spec, "main")
    labels = by_kind(docs, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    services = by_kind(docs, "Service")
    assert sorted(p["name"] for s in services for p in s["spec"]["ports"]) == ["grpc", "http", "metrics"]
    for selector in [s["spec"]["selector"] for s in services] + [by_kind(docs, "PodDisruptionBudget")[0]["spec"]["selector"]["matchLabels"]]:
        assert selector.items() <= labels.items()


def test_hpa_reads_the_adapters_metric_with_the_partitions_autoscaling_settings(serving_spec):
    """Every partition scales on its pods' queue time; the one serving the LLM also on its sequences
    waiting for a running slot, which Triton's queue never sees (a review, 2026-12-07: the fallback
    HPA could not see the LLM's load, and the LLM's requests diluted the queue time)."""
    from k8s_deploy.monitoring import WAITING_METRIC

    for part in serving_spec.effective_partitions:
        (hpa,) = by_kind(base_docs(serving_spec, part.name), "HorizontalPodAutoscaler")
        spec, scaling = hpa["spec"], part.autoscaling
        assert (spec["minReplicas"], spec["maxReplicas"]) == (scaling.min_replicas, scaling.max_replicas)
        assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == scaling.scale_down_stabilization_s
        queue = {"type": "Pods", "pods": {"metric": {"name": QUEUE_METRIC}, "target": {
            "type": "AverageValue", "averageValue": str(scaling.target_queue_us)}}}
        waiting = {"type": "Pods", "pods": {"metric": {"name": WAITING_METRIC}, "target": {
            "type": "AverageValue", "averageValue": str(scaling.target_waiting_sequences)}}}
        serves_llm = any(m.recipe == "smollm2_gguf" for m in serving_spec.models_in_partition(part.name))
        assert spec["metrics"] == ([queue, waiting] if serves_llm else [queue]), part.name
        assert spec["scaleTargetRef"]["name"] == resource_name(part.name)
    queue_rule, waiting_rule = render_adapter_rules(serving_spec)
    assert queue_rule["name"]["as"] == QUEUE_METRIC and waiting_rule["name"]["as"] == WAITING_METRIC
    assert ',model!~"smollm2_chat"}' in queue_rule["metricsQuery"]


def test_adapter_query_is_the_pods_queue_time_per_request_with_the_adapters_template():
    assert adapter_metrics_query() == ("sum(increase(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)"
                                       "/clamp_min(sum(increase(nv_inference_request_success{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>),1)")
    filled = substitute_adapter_template(adapter_metrics_query("5s"), "ns", ["a-1", "a-2"])
    assert filled == ('sum(increase(nv_inference_queue_duration_us{namespace="ns",pod=~"a-1|a-2"}[5s])) by (pod)'
                      '/clamp_min(sum(increase(nv_inference_request_success{namespace="ns",pod=~"a-1|a-2"}[5s])) by (pod),1)')
    with pytest.raises(DeployConfigError, match="`pods` is empty"):
        substitute_adapter_template(adapter_metrics_query(), "ns", [])


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")
def test_a_pods_idle_models_do_not_dilute_its_queue_time(serving_spec, tmp_path):
    """A main pod serves four models; when only the text embedder's requests queue (60 ms each), the
    pod's signal is 60 ms. NVIDIA's per-model mean read 15 ms: the HPA scaled out at 4x its target.
    Two pods, evaluated by promtool on the rendered query."""
    namespace = serving_spec.kubernetes.namespace
    busy, quiet = "triton-main-a", "triton-main-b"
    series = []
    for pod in (busy, quiet):
        for model in ("text_embedder", "digit_classifier", "text_encoder", "text_tokenizer"):
            requests, queued_us = (100, 60_000) if (pod, model) == (busy, "text_embedder") else (
                (40, 2_000) if pod == quiet and model == "digit_classifier" else (0, 0))
            labels = f'namespace="{namespace}",pod="{pod}",model="{model}",version="1"'
            series += [{"series": f"nv_inference_queue_duration_us{{{labels}}}", "values": f"0+{requests * queued_us}x8"},
                       {"series": f"nv_inference_request_success{{{labels}}}", "values": f"0+{requests}x8"}]
    query = substitute_adapter_template(adapter_metrics_query(), namespace, [busy, quiet])
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": [
        {"record": "queue_time_per_request_us", "expr": query}]}]}))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": [{
            "expr": "queue_time_per_request_us", "eval_time": "2m", "exp_samples": [
                {"labels": f'queue_time_per_request_us{{pod="{busy}"}}', "value": 60_000},
                {"labels": f'queue_time_per_request_us{{pod="{quiet}"}}', "value": 2_000}]}]}]}))
    done = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")
def test_the_llms_requests_leave_the_queue_time_alone_and_its_waiting_sequences_are_their_own_signal(serving_spec, tmp_path):
    """A fallback pod: the small classifier's 10 requests/s queue 2 ms each, the LLM's 100 pass Triton's
    queue at once (its own scheduler holds them). With the LLM left out the pod reads 2 ms (it read 0.18);
    its waiting sequences (3) are the HPA's second metric. Evaluated by promtool."""
    from k8s_deploy.monitoring import WAITING_METRIC

    namespace, pod = serving_spec.kubernetes.namespace, "triton-fallback-a"
    series = []
    for model, requests, queued_us in (("digit_classifier_small", 10, 2_000), ("smollm2_chat", 100, 0)):
        labels = f'namespace="{namespace}",pod="{pod}",model="{model}",version="1"'
        series += [{"series": f"nv_inference_queue_duration_us{{{labels}}}", "values": f"0+{requests * queued_us}x8"},
                   {"series": f"nv_inference_request_success{{{labels}}}", "values": f"0+{requests}x8"}]
    series.append({"series": f'llm_sequences_waiting{{namespace="{namespace}",pod="{pod}",model="smollm2_chat",version="1"}}',
                   "values": "3x8"})
    queue_rule, waiting_rule = render_adapter_rules(serving_spec)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": [
        {"record": "queue_time_per_request_us", "expr": substitute_adapter_template(queue_rule["metricsQuery"], namespace, [pod])},
        {"record": "waiting", "expr": substitute_adapter_template(waiting_rule["metricsQuery"], namespace, [pod])}]}]}))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "15s",
        "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": [
            {"expr": "queue_time_per_request_us", "eval_time": "2m",
             "exp_samples": [{"labels": f'queue_time_per_request_us{{pod="{pod}"}}', "value": 2_000}]},
            {"expr": "waiting", "eval_time": "2m", "exp_samples": [{"labels": f'waiting{{pod="{pod}"}}', "value": 3}]}]}]}))
    done = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    assert waiting_rule["name"]["as"] == WAITING_METRIC


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (Debian package `prometheus`; scripts/setup_system_packages.sh)")
def test_a_pod_that_serves_nothing_is_not_reported_idle(serving_spec, tmp_path):
    """Two pods at 2% of their 4 CPUs: the one serving requests fires TritonCpuUtilisationLow, the one
    serving nothing (the fallback partition outside overload) stays quiet; it fired forever before."""
    _, rule = render_documents(serving_spec)["kustomize/base/monitoring.yaml"]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    series = []
    for pod, requests_per_min in (("triton-main-a", 600), ("triton-fallback-b", 0)):
        on_pod = f'namespace="ns",pod="{pod}"'
        series += [
            {"series": f'container_cpu_usage_seconds_total{{{on_pod},container="tritonserver"}}', "values": "0+4.8x20"},
            {"series": f'kube_pod_container_resource_limits{{{on_pod},container="tritonserver",resource="cpu"}}',
             "values": "4x20"},
            {"series": f'nv_inference_request_success{{{on_pod},model="m",version="1"}}', "values": f"0+{requests_per_min}x20"}]
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [{
            "eval_time": "14m", "alertname": "TritonCpuUtilisationLow", "exp_alerts": [{
                "exp_labels": {"severity": "info", "resource": "cpu", "namespace": "ns", "pod": "triton-main-a"},
                "exp_annotations": {"summary": "Pod CPU utilisation below 30% of its limit for 5m",
                                    "description": "Pod triton-main-a uses 2% of its CPUs: capacity is idle (larger "
                                                   "batches, fewer replicas, or a lower HPA target)."}}]}]}]}))
    done = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_prometheus_rule_is_the_alert_rule_generators_output_and_the_scrape_matches_its_labels(serving_spec):
    service_monitor, rule = render_documents(serving_spec)["kustomize/base/monitoring.yaml"]
    # a pod's metrics port opens once its models are loaded: the target-down alert allows the startup first
    startup_then_down = f"{serving_spec.kubernetes.startup_allowance_s + 60}s"
    assert rule["spec"] == render_alert_rules(dataclasses.replace(AlertThresholds.for_serving(serving_spec),
                                                                  target_down_for=startup_then_down), pod_container="tritonserver")
    assert [r["for"] for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "TritonTargetDown"] == ["360s"]
    rules = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    # in a container nv_cpu_* describe the node: the pod's usage against its own limits instead
    assert "container_memory_working_set_bytes" in rules["TritonCpuMemoryHigh"] and "nv_cpu" not in rules["TritonCpuMemoryHigh"]
    assert 'kube_pod_container_resource_limits{container="tritonserver", resource="cpu"}' in rules["TritonCpuUtilisationLow"]
    assert [g["name"] for g in rule["spec"]["groups"]] == ["triton-field-report", "serving-batching", "llm-generation"]  # no supervisor in a cluster
    metrics = [s for s in by_kind(base_docs(serving_spec, "main"), "Service") if s["metadata"]["name"].endswith("-metrics")][0]
    assert metrics["metadata"]["labels"][service_monitor["spec"]["jobLabel"]] == AlertThresholds().job
    assert service_monitor["spec"]["targetLabels"] == ["partition"] and "partition" in metrics["metadata"]["labels"]
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()


def test_the_gpu_overlay_gives_a_gpu_share_only_to_partitions_holding_a_gpu_model(serving_spec):
    """As a GPU host starts MPS only for those: the overlay gave every partition a GPU share (two MPS
    replicas a replica pair) while serving.toml serves every model on the CPU (a review, 2026-12-06)."""
    files = render_documents(serving_spec)  # the committed serving.toml: every model on the CPU
    assert not [p for p in files if p.startswith("kustomize/overlays/gpu/gpu-")]
    assert files["kustomize/overlays/gpu/kustomization.yaml"] == [{**KUSTOMIZE, "resources": ["../../base"]}]
    assert "nvidia-device-plugin/mps-sharing.yaml" not in files
    files = render_documents(models_on_the_gpu(serving_spec, ("main",)))
    assert [p for p in files if p.startswith("kustomize/overlays/gpu/gpu-")] == ["kustomize/overlays/gpu/gpu-triton-main.yaml"]
    assert "replicas: 2" in files["nvidia-device-plugin/mps-sharing.yaml"][0]["data"]["triton-mps"]  # 100 / main's 50
    (fallback,) = [d for d in files["kustomize/base/triton-fallback.yaml"] if d["kind"] == "Deployment"]
    assert "nvidia.com/gpu" not in container(fallback)["resources"]["limits"]


def test_gpu_overlay_requests_one_mps_replica_with_gpu_metrics_and_the_plans_mps_limits(serving_spec):
    files = render_documents(models_on_the_gpu(serving_spec))
    (patch,) = files["kustomize/overlays/gpu/gpu-triton-main.yaml"]
    (c,) = patch["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert "--allow-gpu-metrics=true" in c["args"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env, "the device plugin mounts its own MPS pipe"
    assert "replicas: 2" in files["nvidia-device-plugin/mps-sharing.yaml"][0]["data"]["triton-mps"]


def test_unequal_gpu_shares_are_rejected_for_mps_and_allowed_with_mig_slices(serving_spec):
    uneven = dataclasses.replace(models_on_the_gpu(serving_spec), partitions=(
        dataclasses.replace(serving_spec.partitions[0], compute_share=70),
        dataclasses.replace(serving_spec.partitions[1], compute_share=30)))
    with pytest.raises(DeployConfigError, match=r"`partitions.\*.compute_share` = \{'main': 70, 'fallback': 30\}.*MIG"):
        mps_replicas(plan_deployment(uneven, gpu=True))
    mig = dataclasses.replace(uneven, kubernetes=dataclasses.replace(uneven.kubernetes, gpu_resource="nvidia.com/mig-3g.40gb"))
    files = render_documents(mig)
    assert "nvidia-device-plugin/mps-sharing.yaml" not in files
    (c,) = files["kustomize/overlays/gpu/gpu-triton-main.yaml"][0]["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert not [e for e in c["env"] if e["name"].startswith("CUDA_MPS")]


def test_partitions_that_do_not_fit_one_node_are_rejected_naming_the_shares(serving_spec):
    tiny = dataclasses.replace(serving_spec, kubernetes=dataclasses.replace(serving_spec.kubernetes, node_cpus=1))
    with pytest.raises(Exception, match=r"2 partitions \['main', 'fallback'\] need a core each, but this host has 1"):
        render_files(tiny)


def test_pods_meet_the_restricted_pod_security_standard_their_namespace_enforces(serving_spec):
    """The namespace enforces "restricted", so a pod that stops meeting it would not be admitted: each
    rule checked here on every container (init included) of every rendered Deployment."""
    (namespace,) = render_documents(serving_spec)["kustomize/base/namespace.yaml"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for part in plan_deployment(serving_spec).plan.partitions:
        pod = by_kind(base_docs(serving_spec, part.name), "Deployment")[0]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False  # model code has no use for the API
        assert all("emptyDir" in v for v in pod["volumes"])
        for c in pod["initContainers"] + pod["containers"]:
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                            "readOnlyRootFilesystem": True}  # beyond "restricted": writes go to emptyDirs
            assert not c.get("ports") or all("hostPort" not in p for p in c["ports"])


def test_the_grace_period_covers_prestop_and_tritons_exit_timeout(serving_spec):
    """It was a typed 30 beside a comment saying 10 s: changing the exit timeout or the preStop sleep
    would have cut in-flight requests silently."""
    from k8s_deploy.workload import PRE_STOP_SLEEP_S

    for part in plan_deployment(serving_spec).plan.partitions:
        deployment = by_kind(base_docs(serving_spec, part.name), "Deployment")[0]
        exit_timeout = next(int(a.split("=")[1]) for a in container(deployment)["args"] if a.startswith("--exit-timeout-secs="))
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace >= PRE_STOP_SLEEP_S + exit_timeout + 5, (grace, exit_timeout)


def test_a_partition_serving_a_generative_model_drains_for_its_longest_stream_and_the_others_keep_tritons_10_s(serving_spec):
    """A pod ends at every scale-down and rollout: Triton's 10 s exit timeout cut LLM streams mid-answer,
    with no final response. Each partition's `drain_s` is its pods' exit timeout (and so their grace)."""
    import dataclasses

    from contracts.scale_out_spec import Autoscaling
    from contracts.serving_spec import ServingSpec

    generative = {m.partition for m in serving_spec.models if m.recipe == "smollm2_gguf"}
    assert generative, "the served config has a generative model"
    for part in plan_deployment(serving_spec).plan.partitions:
        deployment = by_kind(base_docs(serving_spec, part.name), "Deployment")[0]
        exit_timeout = next(int(a.split("=")[1]) for a in container(deployment)["args"] if a.startswith("--exit-timeout-secs="))
        assert exit_timeout == (120 if part.name in generative else 10), (part.name, exit_timeout)
    # the value comes from serving.toml: another drain_s renders another timeout and grace
    changed = dataclasses.replace(serving_spec, partitions=tuple(
        dataclasses.replace(p, autoscaling=dataclasses.replace(p.autoscaling, drain_s=300)) for p in serving_spec.partitions))
    deployment = by_kind(base_docs(changed, "main"), "Deployment")[0]
    assert "--exit-timeout-secs=300" in container(deployment)["args"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 305
    with pytest.raises(Exception, match=r"partitions.main.autoscaling.drain_s.*between 1 and 3600"):
        Autoscaling(partition="main", drain_s=0)
    # left at Triton's 10 s (no autoscaling table), the LLM's partition would cut its streams: refused
    short = dataclasses.replace(serving_spec, partitions=tuple(
        dataclasses.replace(p, autoscaling=Autoscaling(partition=p.name)) for p in serving_spec.partitions))
    (llm_partition,) = generative
    with pytest.raises(DeployConfigError, match=rf"`partitions.{llm_partition}.autoscaling.drain_s` = 10: the partition "
                                                r"serves \['smollm2_chat'\], whose answers stream .* allowed >= 60"):
        render_files(short)


@pytest.mark.parametrize("name", ["fb_", "p" + "x" * 48])
def test_a_partition_name_that_makes_no_kubernetes_name_is_refused_naming_it(serving_spec, name):
    """serving.toml allows '_' and 64 characters; `triton-<name>-metrics` must be a DNS-1035 label of at
    most 63 (both rendered and passed `make k8s-validate` before, for the API server to reject)."""
    renamed = dataclasses.replace(serving_spec, partitions=tuple(
        dataclasses.replace(p, name=name) if p.name == "main" else p for p in serving_spec.partitions),
        models=tuple(dataclasses.replace(m, partition=name) if m.partition == "main" else m for m in serving_spec.models))
    with pytest.raises(DeployConfigError, match=rf"`partitions.{name}`: its Service `triton-\S*` is no valid "
                                                r"Kubernetes name .* at most 48 characters that do not end in '_'"):
        render_files(renamed)
    fits = "p" + "x" * 47
    render_files(dataclasses.replace(renamed, partitions=tuple(
        dataclasses.replace(p, name=fits) if p.name == name else p for p in renamed.partitions),
        models=tuple(dataclasses.replace(m, partition=fits) if m.partition == name else m for m in renamed.models)))


def test_each_partitions_pods_admit_clients_on_inference_ports_prometheus_on_metrics_and_send_nothing_out(serving_spec):
    """Without a NetworkPolicy every pod of the cluster reached every port of the partitions (a request
    that crashed a server was reachable cluster-wide). Each partition's policy selects exactly its pods."""
    import dataclasses

    from k8s_deploy.workload import NAMESPACE_NAME_LABEL, selector_labels

    spec = dataclasses.replace(serving_spec, kubernetes=dataclasses.replace(
        serving_spec.kubernetes, client_namespaces=("shop", "ingress-nginx"), prometheus_namespace="observability"))
    for part in plan_deployment(spec).plan.partitions:
        docs = base_docs(spec, part.name)
        (policy,) = by_kind(docs, "NetworkPolicy")
        assert policy["spec"]["podSelector"] == {"matchLabels": selector_labels(part.name)}
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["egress"] == []
        inference, metrics = policy["spec"]["ingress"]
        assert {p["port"] for p in inference["ports"]} == {"http", "grpc"}
        assert inference["from"] == [{"podSelector": {}}, {"namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": ["shop", "ingress-nginx"]}]}}]
        assert metrics == {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "observability"}}}],
                           "ports": [{"port": "metrics", "protocol": "TCP"}]}
        named = {p["name"] for p in container(by_kind(docs, "Deployment")[0])["ports"]}
        assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == named
    # The committed default: only the serving namespace's own pods call the inference ports.
    (policy,) = by_kind(base_docs(serving_spec, "main"), "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == [{"podSelector": {}}]


def test_every_pod_runs_onnxruntime_without_its_telemetry(serving_spec):
    """ONNX Runtime >= 1.29 queues telemetry for Microsoft under $HOME unless told not to before it starts
    (contracts.onnx_sessions): the backend stubs inherit the container's environment."""
    from contracts.onnx_sessions import TELEMETRY_OPT_OUT_ENV

    for part in plan_deployment(serving_spec).plan.partitions:
        env = container(by_kind(base_docs(serving_spec, part.name), "Deployment")[0])["env"]
        assert {"name": TELEMETRY_OPT_OUT_ENV, "value": "1"} in env


def test_the_server_writes_only_to_the_emptydirs_it_mounts_at_tmp_and_dev_shm(serving_spec):
    """With the root filesystem read-only, the paths the rehearsal keeps writable (test_read_only_root.py)
    are emptyDirs mounted in the server container; /serving (the model repository) is mounted read-only."""
    from k8s_deploy.workload import SERVING_ROOT, WRITABLE_PATHS

    for part in plan_deployment(serving_spec).plan.partitions:
        deployment = by_kind(base_docs(serving_spec, part.name), "Deployment")[0]
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in container(deployment)["volumeMounts"]}
        for path in WRITABLE_PATHS:
            assert "emptyDir" in volumes[mounts[path]["name"]] and not mounts[path].get("readOnly"), path
        assert mounts[str(SERVING_ROOT)]["readOnly"] is True
        assert set(mounts) == {str(SERVING_ROOT), *WRITABLE_PATHS}


def test_a_restarted_container_removes_what_its_killed_server_left_in_the_pods_dev_shm(tmp_path):
    """The pod's memory-backed /dev/shm outlives a container: each crash left the backend's IPC regions
    (1 MiB and more each) against the pod's memory and the volume's sizeLimit. The container's command
    removes them as pid 1 (a pid namespace of its own); not as any other process, where /dev/shm may be
    a host's, shared with other servers. Run in new user, pid and mount namespaces with a tmpfs there."""
    from k8s_deploy.workload import SERVER_COMMAND

    unshare = shutil.which("unshare")
    namespaces = [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount"] if unshare else []
    probe = subprocess.run([*namespaces, "sh", "-c", "mount -t tmpfs none /dev/shm && echo $$"],
                           capture_output=True, text=True, timeout=30) if unshare else None
    if probe is None or probe.returncode or probe.stdout.strip() != "1":
        pytest.skip("needs unshare with user, pid and mount namespaces (util-linux; unprivileged user namespaces)")
    (tmp_path / "tritonserver").write_text("#!/bin/sh\nls /dev/shm\n")
    (tmp_path / "tritonserver").chmod(0o755)
    left = "touch /dev/shm/triton_python_backend_shm_region_1 /dev/shm/serving-m-1-activity /dev/shm/other"
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "SERVING_ARGV_SECRET": "k" * 24}
    as_pid_1 = subprocess.run([*namespaces, "sh", "-c", f'mount -t tmpfs none /dev/shm && {left} && exec "$@"', "sh",
                               *SERVER_COMMAND], capture_output=True, text=True, env=env, timeout=30)
    assert as_pid_1.returncode == 0 and as_pid_1.stdout.split() == ["other"], as_pid_1.stdout + as_pid_1.stderr
    not_pid_1 = subprocess.run([*namespaces, "sh", "-c", f'mount -t tmpfs none /dev/shm && {left} && "$@"', "sh",
                                *SERVER_COMMAND], capture_output=True, text=True, env=env, timeout=30)
    assert not_pid_1.returncode == 0 and len(not_pid_1.stdout.split()) == 3, not_pid_1.stdout + not_pid_1.stderr


def test_each_pods_init_container_copies_its_partitions_models_and_everything_else_the_image_holds(serving_spec, tmp_path):
    """Every pod copied every model (~800 MB, the LLM's 516 MB into main pods that never load it). The
    rendered script, run with /opt/serving and /serving rooted under tmp_path, copies the image's shared
    folders and the partition's models only."""
    from k8s_deploy.workload import IMAGE_ROOT, IMAGE_SHARED, SERVING_ROOT

    image, serving = tmp_path / "image", tmp_path / "serving"
    for folder in IMAGE_SHARED:
        (image / folder).mkdir(parents=True)
        (image / folder / "file").write_text(folder)
    every_model = [m.name for m in serving_spec.models]
    for name in every_model:
        (image / "models" / name / "1").mkdir(parents=True)
        (image / "models" / name / "config.pbtxt").write_text(name)
    for part in plan_deployment(serving_spec).plan.partitions:
        (init,) = by_kind(base_docs(serving_spec, part.name), "Deployment")[0]["spec"]["template"]["spec"]["initContainers"]
        shell, flag, script = init["command"]
        assert (shell, flag) == ("sh", "-c")
        here = script.replace(str(IMAGE_ROOT), str(image)).replace(str(SERVING_ROOT), str(serving))
        done = subprocess.run(["sh", "-c", here], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in (serving / "models").iterdir()) == sorted(part.models), part.name
        assert all((serving / folder / "file").read_text() == folder for folder in IMAGE_SHARED)
        assert sorted(p.name for p in serving.iterdir()) == sorted([*IMAGE_SHARED, "models"])
        subprocess.run(["rm", "-rf", str(serving)], check=True)
    assert {m for p in plan_deployment(serving_spec).plan.partitions for m in p.models} == set(every_model)
