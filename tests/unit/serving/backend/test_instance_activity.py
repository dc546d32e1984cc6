"""Busy flags shared by a model's instances (separate processes) through one small file."""
from __future__ import annotations

from serving.backend.instance_activity import InstanceActivity, instance_index


def test_instance_index_comes_from_tritons_instance_name():
    assert instance_index("text_embedder_0_1") == 1 and instance_index("m_0_0") == 0 and instance_index("plain") == 0


def test_each_instance_sees_only_its_siblings_as_busy(tmp_path):
    a = InstanceActivity("text_embedder", "text_embedder_0_0", server_pid=7, directory=tmp_path)
    b = InstanceActivity("text_embedder", "text_embedder_0_1", server_pid=7, directory=tmp_path)
    assert not a.others_busy() and not b.others_busy()
    with a.computing():
        assert b.others_busy() and not a.others_busy()
    assert not b.others_busy()
    other_server = InstanceActivity("text_embedder", "text_embedder_0_0", server_pid=8, directory=tmp_path)
    with b.computing():
        assert not other_server.others_busy()  # another server's instances have their own file
    for activity in (a, b, other_server):
        activity.close()
