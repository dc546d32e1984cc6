"""CPU shares: how a partition's compute share becomes a cgroup weight or a niceness (pure)."""
from __future__ import annotations

from pathlib import Path

import pytest

from serving.runtime.cpu_shares import WeightMethod, nice_levels, plan_cpu_weights, v1_shares, v2_weight


def test_equal_shares_get_equal_weights_under_every_method():
    shares = {"main": 50, "fallback": 50}
    assert nice_levels(shares) == {"main": 0, "fallback": 0}
    v1 = plan_cpu_weights(shares, WeightMethod.CGROUP_V1, Path("/cg/run"))
    assert {n: w.cgroup_value for n, w in v1.items()} == {"main": 512, "fallback": 512}
    assert v1["main"].cgroup_dir == Path("/cg/run/main") and v1["main"].describe() == "cpu.shares 512 in /cg/run/main"


def test_unequal_shares_follow_the_ratio():
    assert nice_levels({"big": 80, "small": 20}) == {"big": 0, "small": 6}  # 1.25**6 = 3.8 ~ 80/20
    assert (v2_weight(80), v2_weight(20)) == (8000, 2000)
    assert (v1_shares(80), v1_shares(20)) == (819, 204)
    assert nice_levels({"a": 100, "b": 1})["b"] == 19  # capped at the lowest priority


def test_niceness_plan_needs_no_cgroup_directory():
    weights = plan_cpu_weights({"main": 70, "fallback": 30}, WeightMethod.NICE, None)
    assert [(w.nice, w.cgroup_dir) for w in weights.values()] == [(0, None), (4, None)]
    assert weights["fallback"].describe() == "nice 4"


def test_a_cgroup_plan_without_a_directory_is_refused():
    with pytest.raises(ValueError, match="needs the cgroup directory"):
        plan_cpu_weights({"a": 50}, WeightMethod.CGROUP_V2, None)


def test_cgroup_v2_groups_hand_the_cpu_controller_down_before_weights_are_written(tmp_path, monkeypatch):
    """Without "+cpu" in the run group's cgroup.subtree_control its children have no cpu.weight to
    write (the kernel creates the file only for an enabled controller). Here a plain directory
    stands in for the cgroup filesystem: this checks what is written where, in which order."""
    from serving.runtime.cpu_shares import create_cpu_groups

    written, write_text = [], Path.write_text

    def record(path, text, *args, **kwargs):
        written.append((path.relative_to(tmp_path).as_posix(), text.strip()))
        return write_text(path, text, *args, **kwargs)

    weights = plan_cpu_weights({"main": 75, "fallback": 25}, WeightMethod.CGROUP_V2, tmp_path / "triton-serving-1")
    monkeypatch.setattr(Path, "write_text", record)
    create_cpu_groups(weights)
    assert written[0] == ("triton-serving-1/cgroup.subtree_control", "+cpu")
    assert ("triton-serving-1/main/cpu.weight", str(weights["main"].cgroup_value)) in written


def test_partition_groups_go_below_this_process_own_cgroups_not_the_hierarchy_root():
    """Under a v1 quota (systemd CPUQuota=, a container's limit) groups made at the root escaped it (a review
    ran the servers under a 0.5-CPU group: their groups had no quota)."""
    from serving.runtime.cpu_shares import CGROUP_ROOT, own_cgroups

    assert own_cgroups("4:memory:/a\n3:cpu,cpuacct:/system.slice/serving.service\n0::/user.slice\n") == (
        CGROUP_ROOT / "user.slice", CGROUP_ROOT / "cpu,cpuacct" / "system.slice" / "serving.service")
    assert own_cgroups("1:cpuset:/x\n") == (None, None)
