"""The starvation invariant (contracts.serving_spec) and the bound it gives (contracts.starvation)."""
from __future__ import annotations

import pytest

from contracts.errors import ConfigError
from contracts.serving_spec import ModelSpec, serving_spec_from_dict
from contracts.starvation import ProgressBound, lowest_priority_progress_bound, served_model_facts


def spec_with(realtime_queue=4, realtime_items=1, batch_queue=16, batch_items=2, max_batch_size=8, max_queue_size=None,
              max_request_batch_size=None):
    """Two levels and model `m`; `max_queue_size` / `max_request_batch_size`: the model's own sizes, by level name."""
    own = {key: value for key, value in (("max_queue_size", max_queue_size), ("max_request_batch_size", max_request_batch_size))
           if value is not None}
    return serving_spec_from_dict({
        "priorities": {
            "realtime": {"level": 1, "max_queue_size": realtime_queue, "max_request_batch_size": realtime_items,
                         "default_timeout_microseconds": 1000},
            "batch": {"level": 2, "max_queue_size": batch_queue, "max_request_batch_size": batch_items,
                      "default_timeout_microseconds": 5000},
        },
        "batching": {"default_priority": "batch"},
        "models": {"m": {"recipe": "digit_cnn", "max_batch_size": max_batch_size, **own}},
    })


def test_realtime_queue_that_could_fill_a_whole_batch_is_rejected_naming_fields_values_and_rule():
    with pytest.raises(ConfigError) as info:
        spec_with(realtime_queue=8, realtime_items=1, batch_items=1, max_batch_size=8)
    message = str(info.value)
    assert "`models.m.max_batch_size` = 8 cannot guarantee progress for `priorities.batch`" in message
    assert "8 x 1 (realtime) = 8 items" in message and "allowed: 8 + 1 = 9 <= max_batch_size" in message


def test_request_sizes_count_toward_the_invariant():
    spec_with(realtime_queue=2, realtime_items=3, batch_items=2, max_batch_size=8)  # 6 + 2 = 8: fits
    with pytest.raises(ConfigError, match=r"allowed: 6 \+ 3 = 9 <= max_batch_size"):
        spec_with(realtime_queue=2, realtime_items=3, batch_items=3, max_batch_size=8)


def test_max_request_batch_size_must_be_positive():
    with pytest.raises(ConfigError, match=r"`priorities.realtime.max_request_batch_size` = 0 is out of range"):
        spec_with(realtime_items=0)


def test_a_single_priority_level_needs_no_invariant():
    serving_spec_from_dict({
        "priorities": {"only": {"level": 1, "max_queue_size": 64, "default_timeout_microseconds": 1000}},
        "batching": {"default_priority": "only"},
        "models": {"m": {"recipe": "digit_cnn", "max_batch_size": 1}},
    })


def test_the_invariant_can_be_checked_for_the_served_max_batch_size():
    spec = spec_with(realtime_queue=4, batch_items=2, max_batch_size=8)
    smaller = ModelSpec(name="m", recipe="digit_cnn", max_batch_size=5)  # e.g. cut by the memory rule
    with pytest.raises(ConfigError, match="`models.m.max_batch_size` = 5"):
        spec.check_lowest_priority_progress(smaller)


def test_a_model_with_smaller_batches_keeps_its_priorities_with_shorter_queues_of_its_own():
    """The shared queue sizes make the invariant ask max_batch_size >= 4 + 2 here; a model whose memory
    allows 5 is refused with the queue sizes that would fit it, and is served with them: rendered into
    its config, counted by its bound, while the other model keeps the shared ones."""
    from dataclasses import replace

    from contracts.model_config import render_dynamic_batching

    spec = spec_with(realtime_queue=4, realtime_items=1, batch_items=2, max_batch_size=8)
    small = ModelSpec(name="m", recipe="digit_cnn", max_batch_size=5)
    with pytest.raises(ConfigError) as info:
        spec.check_lowest_priority_progress(small)
    assert "or give this model shorter queues of its own: `[models.m] max_queue_size = { realtime = 3 }`" in str(info.value)
    small = replace(small, max_queue_size={"realtime": 3})
    spec.check_lowest_priority_progress(small)  # 3 x 1 + 2 = 5: fits
    assert [p.queue.max_queue_size for p in spec.priorities_for(small)] == [3, 16]
    assert [p.queue.max_queue_size for p in spec.priorities] == [4, 16]  # the shared levels are unchanged
    bound = lowest_priority_progress_bound(spec, small)
    assert bound.higher_items == 3 and bound.reserved_items == 2  # 5 - 3: one batch request fits beside them
    batching = render_dynamic_batching(small, spec)
    assert {level: policy.max_queue_size for level, policy in batching.priority_queue_policy.items()} == {1: 3, 2: 16}
    assert batching.default_queue_policy.max_queue_size == 16  # the default level (batch) as this model serves it
    other = render_dynamic_batching(spec.model("m"), spec)
    assert other.priority_queue_policy[1].max_queue_size == 4


def test_a_models_own_queue_sizes_are_checked_and_name_real_levels():
    assert spec_with(max_queue_size={"realtime": 6}).model("m").max_queue_size == {"realtime": 6}  # 6 + 2 = 8
    with pytest.raises(ConfigError, match=r"`models.m.max_queue_size` names \['urgent'\], not among the priority levels: "
                                          r"allowed \['batch', 'realtime'\]"):
        spec_with(max_queue_size={"urgent": 2})
    with pytest.raises(ConfigError, match=r"`models.m.max_queue_size.realtime` = 0 is out of range"):
        spec_with(max_queue_size={"realtime": 0})
    with pytest.raises(ConfigError, match=r"expected a table of priority level name = queue size"):
        spec_with(max_queue_size=6)
    with pytest.raises(ConfigError, match=r"allowed none \(serving.toml declares no \[priorities.<name>\]\)"):
        serving_spec_from_dict({"models": {"m": {"recipe": "digit_cnn", "max_queue_size": {"realtime": 2}}}})
    with pytest.raises(ConfigError, match=r"7 x 1 \(realtime, models.m.max_queue_size\) = 7 items .* allowed: 7 \+ 2 = 9 "
                                          r"<= max_batch_size"):  # names where the 7 was set
        spec_with(max_queue_size={"realtime": 7})


def test_a_model_with_batches_no_larger_than_a_batch_request_keeps_a_bound_with_smaller_requests_of_its_own():
    """max_batch_size 8 against batch requests of 8: no queue size of its own fits a realtime item beside
    one, so the error proposes smaller batch requests too, and what it proposes is accepted."""
    with pytest.raises(ConfigError) as refused:
        spec_with(realtime_queue=24, batch_items=8, max_batch_size=8)
    message = str(refused.value)
    assert ("`[models.m] max_queue_size = { realtime = 4 }` and `max_request_batch_size = { batch = 4 }` "
            "(model_client splits batch work for it into requests of 4)") in message
    spec = spec_with(realtime_queue=24, batch_items=8, max_batch_size=8, max_queue_size={"realtime": 4},
                     max_request_batch_size={"batch": 4})
    served = {p.name: (p.queue.max_queue_size, p.max_request_batch_size) for p in spec.priorities_for(spec.model("m"))}
    assert served == {"realtime": (4, 1), "batch": (16, 4)}
    bound = lowest_priority_progress_bound(spec, "m")
    assert (bound.higher_items, bound.request_items) == (4, 4)  # the bound reads the model's own sizes
    for size in (2, 3, 4, 5, 6, 7, 8):  # whatever is proposed fits
        with pytest.raises(ConfigError) as refused:
            spec_with(realtime_queue=24, batch_items=8, max_batch_size=size)
        tables = str(refused.value).split("max_queue_size = { ")[1]
        queues = dict(item.split(" = ") for item in tables.split(" }")[0].split(", "))
        request = int(tables.split("max_request_batch_size = { batch = ")[1].split(" }")[0])
        spec_with(realtime_queue=24, batch_items=8, max_batch_size=size, max_queue_size={k: int(v) for k, v in queues.items()},
                  max_request_batch_size={"batch": request})
    with pytest.raises(ConfigError) as refused:  # nothing fits one realtime and one batch item in a batch of 1
        spec_with(realtime_queue=24, batch_items=8, max_batch_size=1)
    assert "of its own" not in str(refused.value)
    # queues that already fit beside smaller requests are left as they are (never proposed longer)
    with pytest.raises(ConfigError, match=r"or give this model smaller batch requests of its own: `\[models.m\] "
                                          r"max_request_batch_size = \{ batch = 4 \}`"):
        spec_with(realtime_queue=2, batch_items=8, max_batch_size=8)


def test_a_models_own_request_sizes_are_checked_and_named_where_set():
    with pytest.raises(ConfigError, match=r"`models.m.max_request_batch_size` names \['bulk'\], not among the priority levels"):
        spec_with(max_request_batch_size={"bulk": 2})
    with pytest.raises(ConfigError, match=r"`models.m.max_request_batch_size.batch` = 0 is out of range"):
        spec_with(max_request_batch_size={"batch": 0})
    with pytest.raises(ConfigError, match=r"expected a table of priority level name = items per request"):
        spec_with(max_request_batch_size=2)
    with pytest.raises(ConfigError, match=r"4 x 2 \(realtime, models.m.max_request_batch_size\) = 8 items .* a batch request "
                                          r"carries up to 3 \(models.m.max_request_batch_size\)"):
        spec_with(max_request_batch_size={"realtime": 2, "batch": 3})


def test_the_proposed_queue_sizes_fit_when_raising_a_queue_to_one_overshoots():
    """Scaled alike, a (100 x 1) gets 0 -> 1 and b (1 x 4) 1 at max_batch_size 13 with c's requests of 8:
    1 + 4 + 8 = 13 fits, and is what is proposed (the scaling alone gave up there)."""
    spec = serving_spec_from_dict({
        "priorities": {
            "a": {"level": 1, "max_queue_size": 100, "default_timeout_microseconds": 1000},
            "b": {"level": 2, "max_queue_size": 1, "max_request_batch_size": 4, "default_timeout_microseconds": 1000},
            "c": {"level": 3, "max_queue_size": 16, "max_request_batch_size": 8, "default_timeout_microseconds": 5000},
        },
        "batching": {"default_priority": "c"},
        "models": {"m": {"recipe": "digit_cnn", "max_batch_size": 128}},
    })
    with pytest.raises(ConfigError, match=r"`\[models.m\] max_queue_size = \{ a = 1, b = 1 \}`"):
        spec.check_lowest_priority_progress(ModelSpec(name="m", recipe="digit_cnn", max_batch_size=13))
    spec.check_lowest_priority_progress(ModelSpec(name="m", recipe="digit_cnn", max_batch_size=13,
                                                  max_queue_size={"a": 1, "b": 1}))
    for size in (14, 20, 40, 100):  # whatever is proposed fits
        with pytest.raises(ConfigError) as refused:
            spec.check_lowest_priority_progress(ModelSpec(name="m", recipe="digit_cnn", max_batch_size=size))
        table = str(refused.value).split("max_queue_size = { ")[1].split(" }")[0]
        queues = {k: int(v) for k, v in (item.split(" = ") for item in table.split(", "))}
        spec.check_lowest_priority_progress(ModelSpec(name="m", recipe="digit_cnn", max_batch_size=size, max_queue_size=queues))


def test_bound_counts_batches_from_the_reserved_share():
    # B=8, realtime holds <= 4, batch requests of <= 2 items: every batch without X takes >= 3 items
    # (and >= 1 request) queued ahead of X; 15 requests (30 items) ahead -> 10 batches, X in the 11th.
    bound = lowest_priority_progress_bound(spec_with(), "m")
    assert (bound.reserved_items, bound.items_taken_per_batch) == (4, 3)
    assert (bound.requests_ahead, bound.batches_ahead, bound.batches) == (15, 10, 11)


def test_bound_is_never_more_batches_than_requests_ahead():
    bound = lowest_priority_progress_bound(spec_with(realtime_queue=3, batch_items=5), "m")  # 8-3-5+1 = 1 item per batch
    assert bound.items_taken_per_batch == 1 and bound.batches_ahead == bound.requests_ahead == 15


def test_bound_for_fewer_requests_ahead_and_in_time():
    bound = lowest_priority_progress_bound(spec_with(batch_items=1), "m", requests_ahead=7)
    assert bound.batches == 3  # ceil(7 / 4) + 1
    # running batch + 2 ahead + own = 4 executions of 50 ms, plus one 10 ms batching window
    assert bound.latest_completion_s(execution_s=0.05, max_queue_delay_s=0.01) == pytest.approx(0.21)


def test_bound_rejects_impossible_inputs():
    with pytest.raises(ConfigError, match="requests_ahead = 99: allowed 0..15"):
        lowest_priority_progress_bound(spec_with(), "m", requests_ahead=99)
    with pytest.raises(ConfigError, match="no progress guarantee"):
        ProgressBound("m", "batch", max_batch_size=4, instances=1, higher_items=4, request_items=1, requests_ahead=3)


def test_committed_configuration_gives_every_model_a_finite_bound(serving_spec):
    for model in serving_spec.models:
        bound = lowest_priority_progress_bound(serving_spec, model.name)
        assert 1 <= bound.batches <= bound.requests_ahead + 1


def test_every_built_config_keeps_the_invariant_with_its_served_max_batch_size(serving_spec):
    """The memory rule may serve a smaller max_batch_size than serving.toml's cap: the invariant
    must still hold for what was rendered, and the rendered queue sizes must be serving.toml's (the
    model's own where it sets them)."""
    from dataclasses import replace

    from conftest import REPOSITORY

    built = [m for m in serving_spec.models if (REPOSITORY / m.name / "config.pbtxt").exists()]
    if not built:
        pytest.skip("no model is built yet (run `make build-engines`)")
    for model in built:
        facts = served_model_facts(REPOSITORY / model.name / "config.pbtxt")
        if facts.is_ensemble or facts.is_decoupled:
            continue  # no batcher of its own: an ensemble's steps are checked; a generation model schedules itself
        expected_queues = tuple((p.level, p.queue.max_queue_size) for p in serving_spec.priorities_for(model))
        assert facts.queue_sizes == expected_queues, f"{model.name}: config.pbtxt is stale; run `make build-engines`"
        # a brought model batched by equal shapes on purpose (max_input_dims) has no bound, and says so
        assert not facts.equal_shape_inputs or facts.equal_shapes_declared, \
            f"{model.name}: variable-shape inputs must allow ragged batches"
        serving_spec.check_lowest_priority_progress(replace(model, max_batch_size=facts.max_batch_size))
