"""model_client's resilient and asyncio clients against the real digit classifiers (session server)."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from model_client.aio import AsyncResilientClient, InferenceJob, infer_concurrently
from model_client.errors import RequestRejectedError
from model_client.policies import DIGIT_FALLBACKS, FallbackPolicy, PriorityLimits, RetryPolicy
from model_client.resilient import ResilientClient
from conftest import in_process_probabilities

pytestmark = pytest.mark.server
MODEL, SMALL = "digit_classifier", "digit_classifier_small"


@pytest.fixture(scope="module")
def limits():
    from conftest import SERVING_CONFIG

    return PriorityLimits.from_serving_config(SERVING_CONFIG)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_batch_work_is_sent_in_requests_of_the_allowed_size_and_answers_match(triton_server, digits_test_split,
                                                                              limits, protocol):
    images, _ = digits_test_split
    batch = images[:20]
    per_request = limits.limit(limits.lowest_level)
    with ResilientClient(protocol, url=triton_server.url(protocol), limits=limits) as client:
        outcome = client.infer(MODEL, {"image": batch})  # default priority: the batch level
        assert len(outcome.answered_by) == -(-20 // per_request) and not outcome.degraded
        np.testing.assert_allclose(outcome.outputs["probabilities"], in_process_probabilities(MODEL, batch),
                                   rtol=1e-5, atol=1e-6)
        with pytest.raises(RequestRejectedError, match="at most 1 per request"):
            client.infer(MODEL, {"image": images[:2]}, priority=1)  # refused before sending


def test_realtime_degrades_to_the_small_classifier_when_the_main_one_is_unreachable(triton_server, digits_test_split,
                                                                                    limits, tmp_path):
    """Endpoints come from a manifest: the main model's partition is down (a dead port), the small
    model's is up. Realtime calls degrade to the small model and are still right, and so does the
    metadata read that names the tensors (`classify --fallback` used to fail on it)."""
    from conftest import free_ports

    (dead,) = free_ports(1)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"models": {
        MODEL: {"http": f"127.0.0.1:{dead}", "grpc": f"127.0.0.1:{dead}", "partition": "main"},
        SMALL: {"http": triton_server.http_url, "grpc": triton_server.grpc_url, "partition": "fallback"},
    }}))
    images, _ = digits_test_split
    fallback = FallbackPolicy.of(DIGIT_FALLBACKS)
    with ResilientClient("grpc", manifest=manifest, retry=RetryPolicy(max_attempts=2, deadline_s=10),
                         fallback=fallback, limits=limits) as client:
        interface = client.interface(MODEL, priority=1)  # what `classify --fallback` reads first
        outcome = client.infer(MODEL, {interface.inputs[0].name: images[:1]}, priority=1)
    assert interface.name == SMALL and [t.name for t in interface.outputs] == ["probabilities"]
    assert outcome.answered_by == (SMALL,) and outcome.degraded
    np.testing.assert_allclose(outcome.outputs["probabilities"], in_process_probabilities(SMALL, images[:1]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_realtime_degrades_to_the_small_classifier_when_the_main_one_is_not_served(triton_server, digits_test_split,
                                                                                   limits, tmp_path, protocol):
    """The main model's server is up but does not serve it (unloaded, failed to load, not ready: Triton
    answers "unknown model" / "has no available versions"). Realtime calls failed with ModelNotFoundError
    although the small model was up (a review, 2026-12-07); now the small model answers, asked once."""
    unloaded = "digit_classifier_unloaded"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"models": {
        name: {"http": triton_server.http_url, "grpc": triton_server.grpc_url, "partition": "main"} for name in (unloaded, SMALL)}}))
    images, _ = digits_test_split
    with ResilientClient(protocol, manifest=manifest, retry=RetryPolicy(max_attempts=4, deadline_s=10),
                         fallback=FallbackPolicy.of({unloaded: SMALL}), limits=limits) as client:
        outcome = client.infer(unloaded, {"image": images[:1]}, priority=1)
        assert outcome.answered_by == (SMALL,) and outcome.calls == 2  # the primary once, not retried
        from model_client.errors import ModelNotFoundError

        with pytest.raises(ModelNotFoundError, match=unloaded):  # batch work does not degrade: the error as is
            client.infer(unloaded, {"image": images[:1]}, priority=2)
    np.testing.assert_allclose(outcome.outputs["probabilities"], in_process_probabilities(SMALL, images[:1]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_asyncio_client_answers_many_concurrent_requests_each_with_its_own_answer(triton_server, digits_test_split,
                                                                                  limits, protocol):
    images, _ = digits_test_split
    expected = in_process_probabilities(MODEL, images[:48])

    async def main():
        async with AsyncResilientClient(protocol, url=triton_server.url(protocol), limits=limits,
                                        retry=RetryPolicy(deadline_s=20)) as client:
            jobs = [InferenceJob(MODEL, {"image": images[i:i + 1]}, priority=1 + i % 2) for i in range(48)]
            return await infer_concurrently(client, jobs, concurrency=16)

    results = asyncio.run(main())
    assert len(results) == 48 and all(r.ok for r in results), [str(r.error) for r in results if not r.ok]
    for i, r in enumerate(results):
        np.testing.assert_allclose(r.outcome.outputs["probabilities"][0], expected[i], rtol=1e-5, atol=1e-6)
