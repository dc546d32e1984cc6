"""Busy flags shared by a model's instances (separate processes) through one small file."""
from __future__ import annotations

from serving.backend.instance_activity import InstanceActivity, instance_index


def test_instance_index_comes_from_tritons_instance_name():
    assert instance_index("text_embedder_0_1") == 1 and instance_index("m_0_0") == 0 and instance_index("plain") == 0


def test_instance_index_counts_the_instances_of_earlier_groups():
    """Served configs have one group per instance (each its own rate-limiter priority): Triton names
    them m_0_0, m_1_0, ..., so the index in the group would give every instance 0."""
    one_per_group = [("m_0", 1), ("m_1", 1), ("m_2", 1)]
    assert [instance_index(f"m_{g}_0", one_per_group) for g in range(3)] == [0, 1, 2]
    mixed = [("m_0", 2), ("fast", 3)]  # a named group after a group of two
    assert instance_index("m_0_1", mixed) == 1 and instance_index("fast_0", mixed) == 2 and instance_index("fast_2", mixed) == 4
    assert instance_index("other_5", mixed) == 5  # no group matches: the index in its group


def test_each_instance_sees_only_its_siblings_as_busy(tmp_path):
    a = InstanceActivity("text_embedder", 0, server_pid=7, directory=tmp_path)
    b = InstanceActivity("text_embedder", 1, server_pid=7, directory=tmp_path)
    assert not a.others_busy() and not b.others_busy()
    with a.computing():
        assert b.others_busy() and not a.others_busy()
    assert not b.others_busy()
    other_server = InstanceActivity("text_embedder", 0, server_pid=8, directory=tmp_path)
    with b.computing():
        assert not other_server.others_busy()  # another server's instances have their own file
    for activity in (a, b, other_server):
        activity.close()


def test_a_symlink_planted_at_the_activity_file_is_not_followed(tmp_path):
    """/dev/shm is writable by every local user and the file's name is predictable (model, server pid):
    a symlink there made the stub truncate, extend and write a file of the server's user."""
    import os

    from serving.backend.instance_activity import InstanceActivity
    from contracts.shared_memory import instance_activity_file

    victim = tmp_path / "victim"
    victim.write_bytes(b"not the server's to write\n")
    os.symlink(victim, instance_activity_file("m", 4242, tmp_path))
    activity = InstanceActivity("m", 0, server_pid=4242, directory=tmp_path)
    with activity.computing():
        assert not activity.others_busy()
    activity.close()
    assert victim.read_bytes() == b"not the server's to write\n"
    assert activity.shared is False


def test_a_file_with_group_or_other_access_is_not_shared(tmp_path):
    import os

    from serving.backend.instance_activity import InstanceActivity
    from contracts.shared_memory import instance_activity_file

    planted = instance_activity_file("m", 4243, tmp_path)
    planted.write_bytes(b"\0" * 64)
    os.chmod(planted, 0o666)
    activity = InstanceActivity("m", 0, server_pid=4243, directory=tmp_path)
    with activity.computing():
        assert planted.read_bytes() == b"\0" * 64  # the planter sees nothing
    assert activity.shared is False
    private = InstanceActivity("m", 1, server_pid=4244, directory=tmp_path)
    assert private.shared is True and (os.stat(instance_activity_file("m", 4244, tmp_path)).st_mode & 0o777) == 0o600


def test_a_stub_whose_server_died_as_it_started_leaves_no_file_of_pid_1(tmp_path, monkeypatch):
    """Adopted by init (its server stopped mid-load), the stub named a file after "pid 1" that no stop
    removes; in a pod, where pid 1 is tritonserver itself, the file is shared as usual."""
    from serving.backend import instance_activity

    monkeypatch.setattr(instance_activity, "_is_tritonserver", lambda pid: False)
    orphan = instance_activity.InstanceActivity("m", 0, server_pid=1, directory=tmp_path)
    assert not orphan.shared and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(instance_activity, "_is_tritonserver", lambda pid: pid == 1)
    in_a_pod = instance_activity.InstanceActivity("m", 0, server_pid=1, directory=tmp_path)
    assert in_a_pod.shared and [p.name for p in tmp_path.iterdir()] == ["serving-m-1-activity"]
