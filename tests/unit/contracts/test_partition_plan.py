"""Partitions in serving.toml and the plan derived from them (no processes, no hardware)."""
from __future__ import annotations

import pytest

from contracts.errors import ConfigError
from contracts.partition_env import HOME_CORE_OFFSETS_ENV, PARTITION_ENV, home_core_offset
from contracts.partition_plan import INTRA_OP_THREADS_ENV, Mechanism, cores_for_shares, plan_partitions
from contracts.layout import MODEL_REPOSITORY as REPOSITORY
from contracts.serving_spec import load_serving_spec, serving_spec_from_dict


def spec_with(partitions: dict, models: dict | None = None, server: dict | None = None, cpu: str = "cpu_sets"):
    return serving_spec_from_dict({
        "server": {"http_port": 9000, "grpc_port": 9001, "metrics_port": 9002, **(server or {})},
        "partitions": partitions,
        "models": models or {"a": {"recipe": "digit_cnn", "partition": "p"}, "b": {"recipe": "digit_cnn", "partition": "q"}},
        "placement": {"cpu": cpu},
    })


TWO = {"p": {"compute_share": 50, "memory_mb": 512}, "q": {"compute_share": 50, "memory_mb": 256}}


def test_two_halves_on_two_cores_get_one_core_one_thread_and_strided_ports_each():
    plan = plan_partitions(spec_with(TWO), cpu_count=2, gpu_present=False)
    p, q = plan.partitions
    assert plan.mechanism is Mechanism.CPU_SETS
    assert (p.cpus, q.cpus) == ((0,), (1,))
    assert (p.intra_op_threads, q.intra_op_threads) == (1, 1)
    assert (p.http_port, p.grpc_port, p.metrics_port) == (9000, 9001, 9002)
    assert (q.http_port, q.grpc_port, q.metrics_port) == (9010, 9011, 9012)
    assert plan.partition_of("b") is q and q.models == ("b",)
    assert p.environment() == {INTRA_OP_THREADS_ENV: "1", PARTITION_ENV: "p", HOME_CORE_OFFSETS_ENV: "a=0"}  # no MPS variables


def test_thread_count_follows_the_cpu_set_on_a_bigger_host():
    shares = {"p": {"compute_share": 75, "memory_mb": 512}, "q": {"compute_share": 25, "memory_mb": 256}}
    plan = plan_partitions(spec_with(shares), cpu_count=8, gpu_present=False, available_cpus=range(8, 16))
    assert [p.cpus for p in plan.partitions] == [(8, 9, 10, 11, 12, 13), (14, 15)]
    assert [p.intra_op_threads for p in plan.partitions] == [6, 2]


def test_gpu_plan_sets_mps_thread_percentage_and_pinned_memory_from_the_spec():
    plan = plan_partitions(spec_with(TWO), cpu_count=16, gpu_present=True)
    assert plan.mechanism is Mechanism.CUDA_MPS
    env = plan.partition("q").environment()
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=256M"
    assert plan.to_dict()["partitions"]["q"]["mps"] == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
                                                        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=256M"}


def test_explicit_ports_win_over_derived_ones():
    parts = {**TWO, "q": {**TWO["q"], "http_port": 7000, "grpc_port": 7001, "metrics_port": 7002}}
    q = plan_partitions(spec_with(parts), cpu_count=2, gpu_present=False).partition("q")
    assert (q.http_port, q.grpc_port, q.metrics_port) == (7000, 7001, 7002)


def test_clashing_ports_are_rejected():
    parts = {**TWO, "q": {**TWO["q"], "http_port": 9001}}
    with pytest.raises(ConfigError, match=r"ports \[9001\] are used twice"):
        plan_partitions(spec_with(parts), cpu_count=2, gpu_present=False)


def test_shares_summing_over_100_percent_are_rejected_with_the_shares():
    parts = {"p": {"compute_share": 60, "memory_mb": 512}, "q": {"compute_share": 50, "memory_mb": 256}}
    with pytest.raises(ConfigError, match=r"`partitions.\*.compute_share` = \{'p': 60, 'q': 50\} sums to 110%: allowed at most 100%"):
        spec_with(parts)


def test_elastic_partitions_on_too_few_cores_share_them_and_the_plan_says_so():
    """The default placement on a 1-CPU host (a small VM or container): refused before (serve and build)."""
    parts = {n: {"compute_share": 30, "memory_mb": 128} for n in ("p", "q", "r")}
    models = {m: {"recipe": "digit_cnn", "partition": m_part} for m, m_part in (("a", "p"), ("b", "q"), ("c", "r"))}
    plan = plan_partitions(spec_with(parts, models, cpu="elastic"), cpu_count=2, gpu_present=False, available_cpus=[4, 6])
    assert plan.mechanism is Mechanism.CPU_SHARES
    assert [(p.cpus, p.intra_op_threads) for p in plan.partitions] == [((4, 6), 2)] * 3
    assert len(plan.notes) == 1 and "3 partitions ['p', 'q', 'r'] on 2 core(s): too few for a home core each" in plan.notes[0]
    assert plan_partitions(spec_with(TWO, cpu="elastic"), cpu_count=2, gpu_present=False).notes == ()


def test_elastic_partitions_whose_shares_leave_cores_over_reach_only_the_home_cores():
    """An idle partition lends its home cores, nothing else: a core no partition owns is never reachable, so
    it gives no thread (10/10 on 16 cores gave each instance 16 threads for at most 3 cores before)."""
    parts = {"p": {"compute_share": 10, "memory_mb": 128}, "q": {"compute_share": 10, "memory_mb": 128}}
    plan = plan_partitions(spec_with(parts, cpu="elastic"), cpu_count=16, gpu_present=False)
    assert [(p.cpus, p.runs_on, p.intra_op_threads) for p in plan.partitions] == [
        ((0, 1), (0, 1, 2), 3), ((2,), (0, 1, 2), 3)]


def test_a_cpu_quota_caps_the_threads_per_instance_at_its_cpus_rounded_up():
    plan = plan_partitions(spec_with(TWO, cpu="shares"), cpu_count=16, gpu_present=False, cpu_quota=2.5)
    assert [p.intra_op_threads for p in plan.partitions] == [3, 3]
    assert [p.intra_op_threads for p in plan_partitions(spec_with(TWO), 16, False, cpu_quota=0.2).partitions] == [1, 1]
    assert [p.intra_op_threads for p in plan_partitions(spec_with(TWO), 16, False, cpu_quota=64.0).partitions] == [8, 8]


def test_each_models_instances_take_home_core_turns_after_the_models_declared_before_it():
    models = {"a": {"recipe": "digit_cnn", "partition": "p", "instance_count": 2},
              "b": {"recipe": "digit_cnn", "partition": "p", "instance_count": 3},
              "c": {"recipe": "digit_cnn", "partition": "p"}, "d": {"recipe": "digit_cnn", "partition": "q"}}
    env = plan_partitions(spec_with(TWO, models), cpu_count=8, gpu_present=False).partition("p").environment()
    assert env[HOME_CORE_OFFSETS_ENV] == "a=0,b=2,c=5"
    assert [home_core_offset(m, env) for m in ("a", "b", "c", "d")] == [0, 2, 5, 0]
    assert home_core_offset("a", {HOME_CORE_OFFSETS_ENV: "a=x"}) == 0 and home_core_offset("a", {}) == 0


def test_more_partitions_than_cores_is_rejected_naming_the_core_count():
    parts = {n: {"compute_share": 30, "memory_mb": 128} for n in ("p", "q", "r")}
    models = {m: {"recipe": "digit_cnn", "partition": m_part} for m, m_part in (("a", "p"), ("b", "q"), ("c", "r"))}
    with pytest.raises(ConfigError, match=r"3 partitions \['p', 'q', 'r'\] need a core each, but this host has 2: "
                                          r"with `placement.cpu = \"cpu_sets\"` allowed at most 2 partitions"):
        plan_partitions(spec_with(parts, models), cpu_count=2, gpu_present=False)


@pytest.mark.parametrize("shares, cpus, cores", [
    ((50, 50), 2, (1, 1)), ((50, 50), 3, (2, 1)), ((50, 50), 5, (3, 2)), ((50, 50), 9, (5, 4)),
    ((1, 99), 2, (1, 1)), ((1, 99), 16, (1, 15)), ((75, 25), 8, (6, 2)), ((25, 25), 4, (1, 1)),
    ((33, 33, 34), 3, (1, 1, 1)), ((10, 10, 80), 4, (1, 1, 2)), ((100,), 7, (7,)), ((50, 50), 1, ()),
    ((30, 30, 30), 2, ()),
])
def test_cores_for_shares_apportions_one_hosts_cores_without_over_booking(shares, cpus, cores):
    assert cores_for_shares(shares, cpus) == cores
    assert sum(cores) <= cpus


@pytest.mark.parametrize("cpus", [2, 3, 4, 5, 7, 9, 16])
def test_the_shipped_serving_toml_plans_on_odd_and_even_core_counts(cpus):
    """50/50 on 3 cores used to ask for 2 + 2 (each share rounded on its own) and was refused."""
    plan = plan_partitions(load_serving_spec(REPOSITORY / "serving.toml"), cpu_count=cpus, gpu_present=False)
    homes = [set(p.cpus) for p in plan.partitions]
    assert all(homes) and set.union(*homes) <= set(range(cpus)) and sum(map(len, homes)) == len(set.union(*homes))
    assert sum(map(len, homes)) == cpus  # the shares sum to 100%: every core is someone's home


def test_model_naming_an_undeclared_partition_is_rejected_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"`models.a.partition` = 'gpu0' is not a declared partition: allowed \['p', 'q'\]"):
        spec_with(TWO, {"a": {"recipe": "digit_cnn", "partition": "gpu0"}, "b": {"recipe": "digit_cnn", "partition": "q"}})


def test_partition_serving_no_model_is_rejected():
    with pytest.raises(ConfigError, match=r"partitions \['q'\] serve no model"):
        spec_with(TWO, {"a": {"recipe": "digit_cnn", "partition": "p"}})


def test_model_without_partition_goes_to_the_first_declared():
    spec = spec_with(TWO, {"a": {"recipe": "digit_cnn"}, "b": {"recipe": "digit_cnn", "partition": "q"}})
    assert spec.partition_of(spec.model("a")) == "p"


@pytest.mark.parametrize("table, message", [
    ({"compute_share": 0, "memory_mb": 512}, r"`partitions.p.compute_share` = 0 is out of range: allowed between 1 and 100"),
    ({"compute_share": 50}, r"`partitions.p` is missing \['memory_mb'\]"),
    ({"compute_share": 50, "memory_mb": 512, "gpus": 1}, r"`partitions.p` has unknown keys \['gpus'\]"),
    ({"compute_share": 50, "memory_mb": 8}, r"`partitions.p.memory_mb` = 8 is out of range"),
])
def test_invalid_partition_tables_name_the_field_value_and_allowed(table, message):
    with pytest.raises(ConfigError, match=message):
        spec_with({**TWO, "p": table})


def test_configs_without_partitions_get_one_default_partition_with_every_core():
    spec = serving_spec_from_dict({"models": {"a": {"recipe": "digit_cnn"}, "b": {"recipe": "digit_cnn"}}})
    plan = plan_partitions(spec, cpu_count=2, gpu_present=False)
    assert [(p.name, p.cpus, p.models, p.http_port) for p in plan.partitions] == [("default", (0, 1), ("a", "b"), 8000)]


def test_the_committed_configuration_plans_on_this_two_core_machine():
    from conftest import SERVING_CONFIG

    spec = load_serving_spec(SERVING_CONFIG)
    plan = plan_partitions(spec, cpu_count=2, gpu_present=False)
    assert sorted(m for p in plan.partitions for m in p.models) == sorted(m.name for m in spec.models)
    if plan.mechanism.pins:  # home cores: disjoint (elastic sets lend them while a partition is idle)
        cpus = [c for p in plan.partitions for c in p.cpus]
        assert len(cpus) == len(set(cpus)) <= 2
    else:  # shares: every partition may use both cores (its share is its weight)
        assert all(p.cpus == (0, 1) for p in plan.partitions)


def test_cpu_shares_let_every_partition_use_every_core_with_the_host_as_thread_budget():
    plan = plan_partitions(spec_with(TWO, cpu="shares"), cpu_count=2, gpu_present=False)
    p, q = plan.partitions
    assert plan.mechanism is Mechanism.CPU_SHARES
    assert (p.cpus, q.cpus) == ((0, 1), (0, 1))
    assert (p.intra_op_threads, q.intra_op_threads) == (2, 2)


def test_cpu_shares_allow_more_partitions_than_cores():
    parts = {n: {"compute_share": 30, "memory_mb": 128} for n in ("p", "q", "r")}
    models = {m: {"recipe": "digit_cnn", "partition": m_part} for m, m_part in (("a", "p"), ("b", "q"), ("c", "r"))}
    plan = plan_partitions(spec_with(parts, models, cpu="shares"), cpu_count=2, gpu_present=False)
    assert [p.cpus for p in plan.partitions] == [(0, 1)] * 3


def test_elastic_cpu_sets_are_the_default_placement_and_an_override_wins():
    spec = serving_spec_from_dict({"models": {"a": {"recipe": "digit_cnn"}}})
    assert plan_partitions(spec, 4, False).mechanism is Mechanism.ELASTIC_CPU_SETS
    from contracts.serving_spec import CpuPlacement

    plan = plan_partitions(spec, 4, False, placement=CpuPlacement.CPU_SETS)
    assert plan.mechanism is Mechanism.CPU_SETS and plan.partitions[0].cpus == (0, 1, 2, 3)


def test_an_unknown_cpu_placement_is_rejected_naming_what_is_allowed():
    with pytest.raises(ConfigError, match=r"`placement.cpu` = 'pinned' is not a CPU placement: allowed 'elastic', 'cpu_sets', 'shares'"):
        spec_with(TWO, cpu="pinned")


def test_elastic_cpu_sets_plan_disjoint_home_cores_like_cpu_sets():
    plan = plan_partitions(spec_with(TWO, cpu="elastic"), cpu_count=2, gpu_present=False)
    assert plan.mechanism is Mechanism.ELASTIC_CPU_SETS and plan.mechanism.pins
    assert [p.cpus for p in plan.partitions] == [(0,), (1,)]


def test_a_gpu_host_without_gpu_models_plans_like_a_cpu_host():
    from contracts.serving_spec import Device

    spec = spec_with(TWO)
    assert spec.gpu_partitions() == ()
    plan = plan_partitions(spec, cpu_count=4, gpu_present=True, gpu_partitions=spec.gpu_partitions())
    assert plan.mechanism is Mechanism.CPU_SETS  # no MPS daemon: nothing runs on the GPU
    assert not any(p.gpu for p in plan.partitions) and "mps" not in plan.to_dict()["partitions"]["p"]
    gpu_spec = spec_with(TWO, {"a": {"recipe": "digit_cnn", "partition": "p", "device": "gpu"},
                               "b": {"recipe": "digit_cnn", "partition": "q"}})
    assert gpu_spec.model("a").device is Device.GPU and gpu_spec.gpu_partitions() == ("p",)
    mixed = plan_partitions(gpu_spec, cpu_count=4, gpu_present=True, gpu_partitions=gpu_spec.gpu_partitions())
    assert mixed.mechanism is Mechanism.CUDA_MPS
    p, q = mixed.partition("p"), mixed.partition("q")
    assert p.gpu and p.environment()["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert not q.gpu and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in q.environment() and q.cpus == (2, 3)
    with pytest.raises(ConfigError, match="allowed 'cpu' or 'gpu'"):
        spec_with(TWO, {"a": {"recipe": "digit_cnn", "partition": "p", "device": "tpu"}, "b": {"recipe": "digit_cnn", "partition": "q"}})
