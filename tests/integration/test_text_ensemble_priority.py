"""Request priority reaches every step of the text ensemble, including the step after the Python one.

The project serves TEXT -> embedding as one fused model (recipe `text_pipeline`); the ensemble
recipe (`text_ensemble`: tokenizer -> encoder) stays available for deployments that want the
steps separate, and this test keeps checking Triton's priority handling for it.

A known Triton problem (server issue #6055, 23.05) dropped the priority of ensemble requests after
a Python-backend step. Checked here on a real server with the project's own configs, rendered with
a realtime (level 1) queue capped at ONE request on one step and a 1 s batching delay on it, so
requests wait in its queue: four concurrent realtime requests can then only be admitted one at a
time and the rest must be rejected (UNAVAILABLE / 503) AT THAT STEP, while the same four at the
batch level (queue 256) all pass. If the priority were dropped on the way, the realtime requests
would land in the batch level's queue and pass too. The step that rejected is identified by the
tokenizer's success count (it tokenized all four when the encoder rejected).
"""
from __future__ import annotations

import shutil
import threading
from dataclasses import replace

import numpy as np
import pytest

from model_client.client import TritonModelClient
from model_client.errors import OverloadedError
from conftest import settled_model_stats

pytestmark = pytest.mark.server
TOKENIZER, ENCODER, ENSEMBLE = "text_tokenizer", "text_encoder", "text_embedder"
CONCURRENT = 4
#: Long enough that all concurrent requests arrive while the first one waits in the queue.
HOLD_US = 1_000_000


def capped_spec(spec, step: str):
    """The serving spec with `step`'s realtime queue capped at 1 and its batch window held open."""
    realtime, batch = spec.priority("realtime"), spec.priority("batch")
    priorities = (
        replace(realtime, queue=replace(realtime.queue, max_queue_size=1, default_timeout_microseconds=30_000_000)),
        replace(batch, queue=replace(batch.queue, default_timeout_microseconds=30_000_000)),
    )
    models = tuple(replace(m, max_queue_delay_microseconds=HOLD_US) if m.name == step else m for m in spec.models)
    return replace(spec, priorities=priorities, models=models)


def as_ensemble(spec):
    """The spec with `text_embedder` built by the ensemble recipe instead of the fused pipeline."""
    models = tuple(replace(m, recipe="text_ensemble", options={"encoder": ENCODER, "tokenizer": TOKENIZER})
                   if m.name == ENSEMBLE else m for m in spec.models)
    return replace(spec, models=models)


def install(repository, model_name, spec):
    from conftest import ARTIFACTS
    from contracts.build_record import read_build_record
    from model_build.recipes.registry import recipe_for

    model = spec.model(model_name)
    record = dict(read_build_record(ARTIFACTS / model_name).data)  # as the build hands it to an install
    return recipe_for(model.recipe).install(model, spec, record, ARTIFACTS / model_name, repository)


@pytest.fixture(scope="module")
def repository(tmp_path_factory, serving_spec):
    """The three text models rendered from the project's spec, the encoder's realtime queue capped."""
    from conftest import REPOSITORY

    path = tmp_path_factory.mktemp("priority_repository")
    (path / TOKENIZER / "1").mkdir(parents=True)
    shutil.copy2(REPOSITORY / TOKENIZER / "1" / "model.py", path / TOKENIZER / "1" / "model.py")
    serving_spec = as_ensemble(serving_spec)
    for name, spec in ((ENCODER, capped_spec(serving_spec, ENCODER)), (TOKENIZER, serving_spec), (ENSEMBLE, serving_spec)):
        install(path, name, spec)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, repository):
    from conftest import start_test_server

    running = start_test_server(tmp_path_factory.mktemp("priority_server"), (ENCODER, TOKENIZER, ENSEMBLE), repository=repository)
    yield running
    running.discard()


def concurrent_outcomes(url: str, protocol: str, model: str, priority: int) -> list[str]:
    """Send CONCURRENT one-text requests at once; 'ok' or 'overloaded' for each (anything else fails)."""
    from model_build.recipes.text import load_text_tokenizer, tokenize_texts

    if model == ENSEMBLE:
        inputs = {"TEXT": np.array([[b"A short realtime text."]], dtype=object)}
    else:
        from conftest import REPOSITORY

        tokenizer = load_text_tokenizer(REPOSITORY / TOKENIZER / "1" / "tokenizer.json")
        inputs = tokenize_texts(tokenizer, ["A short realtime text."])
    outcomes: list[str] = [""] * CONCURRENT
    start = threading.Barrier(CONCURRENT)

    def one(i):
        with TritonModelClient(url, protocol) as client:
            client.interface(model)  # metadata first, so the requests themselves go out together
            start.wait()
            try:
                client.infer(model, inputs, priority=priority)
                outcomes[i] = "ok"
            except OverloadedError:
                outcomes[i] = "overloaded"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(CONCURRENT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(outcomes), f"a request got no answer within 60 s: {outcomes}"
    return outcomes


def success_count(stats: dict) -> int:
    return int(stats["inference_stats"]["success"]["count"])


def tokenizer_successes(http_url: str) -> int:
    import tritonclient.http as http

    with http.InferenceServerClient(http_url) as c:
        return success_count(c.get_inference_statistics(TOKENIZER)["model_stats"][0])


def test_the_capped_queue_rejects_direct_realtime_requests(server):
    outcomes = concurrent_outcomes(server.grpc_url, "grpc", ENCODER, priority=1)
    assert outcomes.count("ok") >= 1 and outcomes.count("overloaded") >= CONCURRENT - 2, outcomes


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_realtime_priority_reaches_the_encoder_after_the_python_tokenizer(server, protocol):
    before = tokenizer_successes(server.http_url)
    outcomes = concurrent_outcomes(server.url(protocol), protocol, ENSEMBLE, priority=1)
    assert outcomes.count("ok") >= 1 and outcomes.count("overloaded") >= CONCURRENT - 2, (
        f"{outcomes}: realtime requests through the ensemble were not held to the encoder's realtime queue "
        "(the priority was dropped after the tokenizer step)"
    )
    settled = settled_model_stats(server.http_url, TOKENIZER, success_count, before + CONCURRENT)
    assert success_count(settled) - before == CONCURRENT  # all tokenized: the encoder step rejected


def test_batch_priority_through_the_ensemble_uses_the_batch_queue(server):
    assert concurrent_outcomes(server.grpc_url, "grpc", ENSEMBLE, priority=2) == ["ok"] * CONCURRENT


def test_realtime_priority_reaches_the_first_step_too(server, repository, serving_spec):
    """Cap the tokenizer instead (reloaded in place): now the FIRST step rejects, before tokenizing."""
    import tritonclient.http as http

    install(repository, TOKENIZER, capped_spec(as_ensemble(serving_spec), TOKENIZER))
    with http.InferenceServerClient(server.http_url) as c:
        c.load_model(TOKENIZER)
    before = tokenizer_successes(server.http_url)
    outcomes = concurrent_outcomes(server.grpc_url, "grpc", ENSEMBLE, priority=1)
    assert outcomes.count("ok") >= 1 and outcomes.count("overloaded") >= CONCURRENT - 2, outcomes
    assert tokenizer_successes(server.http_url) - before == outcomes.count("ok")
