"""The instance's threads: main thread on a home core, the wide session's workers on the others,
re-planned when the partition's cores change (serving/backend/thread_placement.py)."""
import contextlib
import os
import threading

import pytest

from serving.backend.thread_placement import CorePlan, ThreadPlacement, plan_cores


def test_siblings_get_different_home_cores_and_the_workers_every_other_core():
    assert plan_cores([0, 1], 0) == CorePlan(home=0, workers=(1,))
    assert plan_cores([0, 1], 1) == CorePlan(home=1, workers=(0,))
    assert plan_cores([5, 3, 3, 4], 1) == CorePlan(home=4, workers=(3, 5))
    assert plan_cores([2, 3], 2) == CorePlan(home=2, workers=(3,))  # more instances than cores: they wrap


def test_one_core_has_nothing_to_split():
    assert plan_cores([1], 0) is None
    assert plan_cores([], 3) is None


@contextlib.contextmanager
def _worker_thread():
    """A thread that stands for a session's worker until the block ends; its native id."""
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        yield worker.native_id
    finally:
        stop.set()
        worker.join(5)


def _in_a_thread(function):
    """Run `function` in a fresh thread (sched_setaffinity(0) pins only the calling thread); its result."""
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", function()))
    thread.start()
    thread.join(10)
    return box["value"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 or more usable cores")
def test_keep_pins_the_caller_home_and_the_workers_elsewhere_and_replans_when_the_cores_change():
    cores = sorted(os.sched_getaffinity(0))[:2]
    with _worker_thread() as worker:
        def scenario():
            os.sched_setaffinity(0, set(cores))
            os.sched_setaffinity(worker, set(cores))
            placement = ThreadPlacement(1, [worker, 2**22 + 7])  # the second: a thread that is gone
            placement.keep()
            first = (os.sched_getaffinity(0), os.sched_getaffinity(worker), placement.worker_tids)
            # the elastic CPU sets take a core away, then give both back: each change is re-planned
            os.sched_setaffinity(0, {cores[0]})
            placement.keep()
            one_core = os.sched_getaffinity(0)
            os.sched_setaffinity(0, set(cores))
            os.sched_setaffinity(worker, set(cores))
            placement.keep()
            again = (os.sched_getaffinity(0), os.sched_getaffinity(worker))
            return first, one_core, again

        first, one_core, again = _in_a_thread(scenario)
    assert first == ({cores[1]}, {cores[0]}, (worker,))  # the gone thread dropped at the first call
    assert one_core == {cores[0]}  # nothing to split: left as the partition set it
    assert again == ({cores[1]}, {cores[0]})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 or more usable cores")
def test_a_move_of_every_thread_to_the_home_core_is_seen_through_the_workers():
    """The elastic sets' both-busy state pins every thread of the partition to its home core: the
    main thread kept the set the placement gave it, so `keep` saw no change and the wide session's
    2 threads ran on 1 core (6.4 ms instead of 2.2 on the 1-thread session, 24 tokens)."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    with _worker_thread() as worker:
        def scenario():
            os.sched_setaffinity(0, set(cores))
            os.sched_setaffinity(worker, set(cores))
            placement = ThreadPlacement(0, [worker])
            placement.keep()
            before = placement.workers
            home = os.sched_getaffinity(0)
            os.sched_setaffinity(worker, home)  # the supervisor re-pins every thread to the home core
            placement.keep()
            return before, home, placement.workers

        before, home, after = _in_a_thread(scenario)
    assert before == (cores[1],) and home == {cores[0]}
    assert after == ()  # nothing to split now: the backend runs its 1-thread session


def test_a_set_wider_than_the_partitions_own_cores_is_not_pinned():
    """A pod on a node without the static CPU manager sees every CPU of the node while its partition
    owns 4: pinning put every pod's first instance on CPU 0 (a review, 2026-12-06). The host's
    elastic sets never exceed the partition's count (SERVING_INTRA_OP_THREADS = the cores it may use)."""
    assert plan_cores(range(64), 0, owned=4) is None
    assert plan_cores([8, 9, 10, 11], 1, owned=4) == CorePlan(home=9, workers=(8, 10, 11))
    assert plan_cores([0, 1], 0, owned=2) == CorePlan(home=0, workers=(1,))
    assert plan_cores([0, 1], 0, owned=None) == CorePlan(home=0, workers=(1,))  # not known: as before


def test_the_models_of_a_partition_get_different_home_cores_from_their_offsets():
    """Each instance's turn = its model's offset (contracts.partition_env) + its index: on 8 cores the first
    instance of every model took core 0 before, the second core 1, and six cores stayed idle."""
    from contracts.partition_env import home_core_offset
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import load_serving_spec
    from contracts.layout import SERVING_CONFIG

    main = plan_partitions(load_serving_spec(SERVING_CONFIG), 16, False).partition("main")
    env = main.environment()
    homes = {(model, index): plan_cores(main.cpus, home_core_offset(model, env) + index, main.intra_op_threads).home
             for model, instances in main.instances for index in range(instances)}
    assert sorted(homes.values()) == list(main.cpus), homes  # 8 instances on 8 home cores, one each
