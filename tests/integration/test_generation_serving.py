"""The decoupled LLM model `smollm2_chat` on a real tritonserver: streaming over HTTP and gRPC,
continuous batching correctness, priorities, the bounded wait queue, deadlines, cancellation and
bad input. Short prompts and few tokens keep it fast (greedy, so every result is exact)."""
from __future__ import annotations

import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from model_client.errors import OverloadedError, RequestRejectedError
from model_client.generate import GenerationSettings, generate
from conftest import http_call, scrape_text, series_total

pytestmark = pytest.mark.server
MODEL = "smollm2_chat"
PROMPTS = ["The capital of France is", "Write a haiku about the sea.", "List three primary colors:", "def fibonacci(n):",
           "Once upon a time", "The boiling point of water is", "Why is the sky blue?", "My favourite fruit is"]


def run(server, protocol, prompt, stream=True, **settings):
    """(text, token ids, finish reason, chunk count) of one request."""
    chunks = list(generate(server.url(protocol), protocol, prompt, GenerationSettings(**settings), stream, MODEL))
    return "".join(c.text for c in chunks), [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason, len(chunks)


def metric(server, name):
    """`name`'s total for the model (None when not published); `name` may end in one label,
    e.g. 'llm_requests_finished_total{reason="cancelled"'."""
    base, _, label = name.partition("{")
    labels = dict([label.rstrip(",").replace('"', "").split("=", 1)]) if label else {}
    return series_total(scrape_text(server.metrics_url), base, model=MODEL, **labels)


#: The model sends its metrics to Triton once a second (serving/backend/stub_metrics.py): a value
#: read this long after the work it counts is settled.
METRICS_FLUSH_S = 1.0


def wait_idle(server, timeout_s=30.0):
    """Until nothing runs or waits, and one more flush (so the counters include the last requests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if metric(server, "llm_kv_blocks_used") == 0 and metric(server, "llm_sequences_running") == 0 \
                and metric(server, "llm_sequences_waiting") == 0:
            time.sleep(METRICS_FLUSH_S + 0.2)
            return
        time.sleep(0.2)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_streamed_chunks_concatenate_to_the_non_streamed_text(triton_server, protocol):
    streamed = run(triton_server, protocol, PROMPTS[0], stream=True, max_tokens=12, ignore_eos=True)
    whole = run(triton_server, protocol, PROMPTS[0], stream=False, max_tokens=12, ignore_eos=True)
    assert streamed[0] == whole[0] and streamed[1] == whole[1] and len(streamed[1]) == 12
    assert streamed[2] == whole[2] == "length" and streamed[3] > 1 and whole[3] == 1


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_emoji_split_across_tokens_streams_whole_and_one_cut_by_max_tokens_is_dropped(triton_server, protocol):
    # greedy, the model continues "🎉🎉🎉" with more 🎉, three byte-level tokens each: every max_tokens
    # here stops inside one (after 1, 4 or 5 tokens), which is dropped, not sent as a trailing U+FFFD
    for max_tokens in (1, 4, 5):
        streamed = run(triton_server, protocol, "🎉🎉🎉", stream=True, max_tokens=max_tokens, ignore_eos=True)
        whole = run(triton_server, protocol, "🎉🎉🎉", stream=False, max_tokens=max_tokens, ignore_eos=True)
        assert streamed[:3] == whole[:3] and len(whole[1]) == max_tokens and whole[2] == "length"
        assert "\ufffd" not in whole[0] and whole[0] == "🎉" * (max_tokens // 3), (max_tokens, whole)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_clients_stream_the_same_tokens_as_the_sync_ones(triton_server, protocol):
    import asyncio

    from model_client.generate import generate_async

    async def collect(stream):
        chunks = [chunk async for chunk in generate_async(triton_server.url(protocol), protocol, PROMPTS[2],
                                                          GenerationSettings(max_tokens=10, ignore_eos=True, priority=1), stream, MODEL)]
        return [t for c in chunks for t in c.token_ids], chunks[-1].finish_reason

    expected = run(triton_server, protocol, PROMPTS[2], max_tokens=10, ignore_eos=True)[1]
    assert asyncio.run(collect(True)) == (expected, "length")
    assert asyncio.run(collect(False)) == (expected, "length")


def test_greedy_tokens_under_concurrent_load_equal_each_requests_solo_run(triton_server):
    solo = [run(triton_server, "grpc", p, max_tokens=16, ignore_eos=True)[1] for p in PROMPTS]
    jobs = [(PROMPTS[i % len(PROMPTS)], ("http", "grpc")[i % 2], 4 + (i * 5) % 13) for i in range(24)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda job: run(triton_server, job[1], job[0], max_tokens=job[2], ignore_eos=True), jobs))
    for (prompt, _, max_tokens), (_, tokens, reason, _) in zip(jobs, results):
        assert tokens == solo[PROMPTS.index(prompt)][:max_tokens] and reason == "length"


def test_chat_requests_share_the_system_prompt_blocks(triton_server):
    wait_idle(triton_server)
    before = metric(triton_server, "llm_prefix_cache_hit_tokens_total") or 0
    for question in ("What is 2 plus 2?", "Name a color."):
        run(triton_server, "http", question, max_tokens=4, chat=True)
    wait_idle(triton_server)
    assert metric(triton_server, "llm_prefix_cache_hit_tokens_total") - before >= 16  # at least one full shared block


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_deadline_returns_the_tokens_so_far_with_finish_reason_deadline(triton_server, protocol):
    text, tokens, reason, _ = run(triton_server, protocol, PROMPTS[4], max_tokens=400, ignore_eos=True, deadline_ms=800)
    assert reason == "deadline" and 0 < len(tokens) < 400 and text


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_cancelled_or_disconnected_stream_ends_at_once_and_frees_its_blocks(triton_server, protocol):
    wait_idle(triton_server)
    cancelled_before = metric(triton_server, 'llm_requests_finished_total{reason="cancelled"') or 0
    stream = generate(triton_server.url(protocol), protocol, PROMPTS[4], GenerationSettings(max_tokens=900, ignore_eos=True), True, MODEL)
    for n, _ in enumerate(stream):
        if n == 2:
            break
    stream.close()  # gRPC: cancels the stream; HTTP: closes the connection of generate_stream
    started = time.monotonic()
    wait_idle(triton_server, timeout_s=20)
    assert metric(triton_server, "llm_kv_blocks_used") == 0 and time.monotonic() - started < 20  # not 900 tokens later
    assert (metric(triton_server, 'llm_requests_finished_total{reason="cancelled"') or 0) == cancelled_before + 1


def _bad_requests():
    return [
        ("", {}, "text_input is empty"),
        ("word " * 1200, {}, "the model's context is 1024 tokens"),
        ("word " * 50_000, {}, r"the prompt is 250000 bytes; the model's context is 1024 tokens, .* cannot fit: shorten it"),
        ("hi", {"max_tokens": 0}, r"`max_tokens` = 0: expected an integer from 1 to 2\*\*31 - 1"),
        ("hi", {"max_tokens": 10**9}, r"`max_tokens` = 1000000000: .* output tokens fit"),
        ("hi", {"extra": {"beam_width": 2}}, r"unknown fields \['beam_width'\]"),
    ]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_input_gets_a_clear_error_while_other_requests_keep_generating(triton_server, protocol):
    expected = run(triton_server, protocol, PROMPTS[1], max_tokens=24, ignore_eos=True)[1]
    with ThreadPoolExecutor(max_workers=1) as pool:
        background = pool.submit(run, triton_server, protocol, PROMPTS[1], max_tokens=24, ignore_eos=True)
        for prompt, settings, message in _bad_requests():
            with pytest.raises(RequestRejectedError, match=message):
                run(triton_server, protocol, prompt, **settings)
        assert background.result(timeout=120)[1] == expected


def test_non_utf8_prompt_gets_invalid_argument_over_grpc(triton_server):
    import tritonclient.grpc as grpc
    from tritonclient.utils import InferenceServerException

    errors = []
    with grpc.InferenceServerClient(triton_server.grpc_url) as client:
        done = threading.Event()
        client.start_stream(callback=lambda result, error: (errors.append(error), done.set()))
        wire = grpc.InferInput("text_input", [1], "BYTES")
        wire.set_data_from_numpy(np.array([b"ab\xff\xfe"], dtype=object))
        client.async_stream_infer(MODEL, [wire])
        assert done.wait(30)
        client.stop_stream()
    assert isinstance(errors[0], InferenceServerException)
    assert "text_input is not valid UTF-8 (invalid start byte at byte 2)" in errors[0].message()


@pytest.mark.parametrize("output", ["text_output", "finish_reason"])
def test_the_classification_extension_on_a_bytes_output_is_refused_and_the_server_keeps_serving(triton_server, output):
    """gRPC `classification` on a BYTES output: Triton 2.51's frontend divides the output's byte size by
    TRITONSERVER_DataTypeByteSize(BYTES) = 0 (TopkClassifications), and the whole server died of SIGFPE
    (the supervisor restarted the partition: one request, every stream of the partition lost). The
    preloaded request guard answers that response with an error naming the output."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=MODEL, id="classify-bytes")
    for name, value in (("text_input", PROMPTS[0].encode()), ("sampling_parameters", b'{"max_tokens": 2}')):
        tensor = request.inputs.add(name=name, datatype="BYTES", shape=[1])
        tensor.contents.bytes_contents.append(value)
    request.outputs.add(name=output).parameters["classification"].int64_param = 1
    with grpc.insecure_channel(triton_server.grpc_url) as channel:
        answers = list(service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([request]), timeout=60))
    assert len(answers) == 1 and answers[0].infer_response.id == "classify-bytes", answers
    assert (f"output '{output}' of model '{MODEL}' is BYTES: the classification extension ranks numeric outputs only; "
            f"expected the 'classification' parameter only on outputs of a numeric type") in answers[0].error_message
    assert triton_server.process.process.poll() is None, "the server died"
    text, tokens, reason, _ = run(triton_server, "grpc", PROMPTS[0], max_tokens=2, ignore_eos=True)
    assert len(tokens) == 2 and reason == "length"


def test_a_request_written_for_the_vllm_backend_is_answered_as_that_backend_would(triton_server):
    """Its README's /generate example (`stream` among the parameters) with its sample client's
    habit of numbers as strings: answered, max_tokens taken as the number it names."""
    import json

    # (a null is refused by Triton itself among request parameters: only bool, int and string pass)
    body = {"text_input": PROMPTS[0], "parameters": {"stream": False, "temperature": "0", "max_tokens": "5",
                                                      "ignore_eos": "true"}}
    request = urllib.request.Request(f"http://{triton_server.http_url}/v2/models/{MODEL}/generate",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    expected = run(triton_server, "http", PROMPTS[0], stream=False, max_tokens=5, ignore_eos=True)
    # (not streamed, the vLLM backend's default puts the prompt before the text: compare the tokens)
    assert answer["output_token_ids"] == expected[1] and answer["finish_reason"] == "length"
    assert answer["text_output"] == PROMPTS[0] + expected[0]


def test_request_parameters_beside_the_sampling_parameters_input_are_applied_and_checked(triton_server):
    """With the `sampling_parameters` input present, the request's parameters were never read:
    max_tokens 3 and a typo beside it were ignored in silence (a review, 2026-12-07)."""
    import json
    import urllib.error

    def post(parameters):
        body = {"text_input": PROMPTS[0], "sampling_parameters": json.dumps({"temperature": 0, "ignore_eos": True}),
                "parameters": parameters}
        request = urllib.request.Request(f"http://{triton_server.http_url}/v2/models/{MODEL}/generate",
                                         data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    answer = post({"max_tokens": 3})
    assert len(answer["output_token_ids"]) == 3 and answer["finish_reason"] == "length", answer
    for parameters, expected in (({"max_tokens": 3, "bogus_field": 1}, "unknown fields ['bogus_field']"),
                                 ({"temperature": 0}, "['temperature'] set both in sampling_parameters")):
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(parameters)
        assert refused.value.code == 400 and expected in refused.value.read().decode(), parameters


def test_stream_true_at_the_one_response_endpoint_is_refused_400_and_the_same_body_streams_at_generate_stream(triton_server):
    """Triton 2.51's /generate sends its status with a decoupled model's first response and only then
    finds a second: `"stream": true` there was answered 200 {"error": "generate expects model to produce
    exactly 1 response, ..."}. The request guard refuses it before it runs, whichever way Triton takes it
    as the `stream` input (top level, "parameters", a one-element array), and nothing else."""
    import json
    import socket

    path = f"/v2/models/{MODEL}/generate"
    expected = 'expected "stream": false (or no "stream") at .../generate, or the same body at .../generate_stream'
    bodies = ({"text_input": PROMPTS[0], "max_tokens": 2, "stream": True},
              {"text_input": PROMPTS[0], "parameters": {"max_tokens": 2, "stream": True}},
              {"stream": [True], "text_input": PROMPTS[0], "max_tokens": 2})
    for body in bodies:
        status, answer = http_call(triton_server, "POST", path, json.dumps(body).encode())
        assert status == 400 and expected in answer["error"], (body, status, answer)
        status, events = http_call(triton_server, "POST", path + "_stream", json.dumps(body).encode(), timeout_s=60)
        assert status == 200 and events.count("data: ") == 2 and "error" not in events, (body, status, events)
    for body in ({"text_input": PROMPTS[0], "max_tokens": 2, "stream": False},
                 {"text_input": PROMPTS[0], "max_tokens": 2, "parameters": {"stream": False}},
                 {"text_input": 'say "stream": true', "max_tokens": 2}):
        status, answer = http_call(triton_server, "POST", path, json.dumps(body).encode(), timeout_s=60)
        assert status == 200 and answer["num_output_tokens"] == 2, (body, status, answer)
    # on one keep-alive connection, the requests after a refused one are answered as before
    host, port = triton_server.http_url.split(":")
    wire = b"".join(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b
                    for b in (json.dumps(body).encode() for body in (bodies[1], {"text_input": PROMPTS[0], "max_tokens": 2})))
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(wire)
        reader = connection.makefile("rb")
        statuses = []
        for _ in range(2):
            statuses.append(int(reader.readline().split()[1]))
            chunked, length = False, 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                chunked |= line.lower().startswith(b"transfer-encoding: chunked")
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if chunked:
                while (size := int(reader.readline().strip(), 16)):
                    reader.read(size + 2)
                reader.readline()
            elif length:
                reader.read(length)
    assert statuses == [400, 200], statuses


def _hold_slots(server, count, stop, priority=2, ended=None):
    """`count` long streams that occupy the running batch until `stop` is set (then abandoned); a
    stream that reaches its end is appended to `ended`."""
    def one():
        settings = GenerationSettings(max_tokens=900, ignore_eos=True, priority=priority)
        for _ in generate(server.grpc_url, "grpc", "Count slowly:", settings, True, MODEL):
            if stop.is_set():
                return  # closing the iterator cancels the request on the server
        if ended is not None:
            ended.append(time.monotonic())
    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


#: smollm2_chat's running slots (serving.toml `options.max_running`) and realtime wait queue (`max_queue_size`).
MAX_RUNNING, REALTIME_QUEUE = 8, 24


def test_a_full_realtime_queue_answers_unavailable_and_realtime_is_admitted_first(triton_server):
    import json

    from conftest import poll_until

    # the depth LlmWaitQueueBacklogged holds the wait queue to (operations.alert_rules) is the model's own
    # (sent once a second: a server that just started may still show the series' initial 0)
    slots = poll_until(lambda: metric(triton_server, "llm_running_slots"), lambda n: n == MAX_RUNNING, 5 * METRICS_FLUSH_S, 0.1)
    assert slots == MAX_RUNNING, f"the model publishes its running slots: {slots}"
    stop = threading.Event()
    # realtime holders: a waiting realtime request cannot preempt them (same priority), so its queue fills
    holders = _hold_slots(triton_server, MAX_RUNNING, stop, priority=1)
    try:
        running = poll_until(lambda: metric(triton_server, "llm_sequences_running") or 0, lambda n: n >= MAX_RUNNING, 60, 0.1)
        assert running >= MAX_RUNNING, f"precondition: the holders occupy every slot ({running} running)"
        finished_at = {}  # when each future completed (its own callback), not when this thread looked at it
        with ThreadPoolExecutor(max_workers=REALTIME_QUEUE + 2) as pool:
            batch = pool.submit(run, triton_server, "http", "Batch request", max_tokens=2, priority=2)
            batch.add_done_callback(lambda _: finished_at.setdefault("batch", time.monotonic()))
            time.sleep(0.3)
            realtime = [pool.submit(run, triton_server, "http", f"Realtime {i}", max_tokens=2, priority=1)
                        for i in range(REALTIME_QUEUE)]
            for i, future in enumerate(realtime):
                future.add_done_callback(lambda _, i=i: finished_at.setdefault(i, time.monotonic()))
            time.sleep(1.0)
            with pytest.raises(OverloadedError, match="wait queue of priority 1 is full"):
                run(triton_server, "http", "One too many", max_tokens=2, priority=1)
            # what any HTTP client sees (model_client recognises overload by its message): 503, as /infer answers;
            # Triton 2.51 answered 400 on both endpoints (request_guard.c)
            body = json.dumps({"text_input": "One too many", "parameters": {"max_tokens": 2, "priority": 1}}).encode()
            for endpoint in ("generate", "generate_stream"):
                status, answer = http_call(triton_server, "POST", f"/v2/models/{MODEL}/{endpoint}", body,
                                           {"Content-Type": "application/json"}, timeout_s=60)
                assert status == 503 and "wait queue of priority 1 is full" in str(answer), (endpoint, status, str(answer)[:300])
            stop.set()  # the holders cancel: slots free up, realtime goes first
            for future in realtime:
                future.result(timeout=120)
            batch.result(timeout=120)
        # The batch request is admitted only after all 24 realtime ones were, so at least 24 - 8 of
        # them had already finished (only 8 run at once) and it then needs steps of its own.
        before_batch = sum(finished_at[i] < finished_at["batch"] for i in range(REALTIME_QUEUE))
        assert before_batch >= REALTIME_QUEUE - MAX_RUNNING, f"only {before_batch} realtime requests finished before the batch one"
    finally:
        stop.set()
        for thread in holders:
            thread.join(timeout=60)


def test_a_realtime_request_preempts_batch_streams_that_hold_every_slot(triton_server):
    """serving.toml `priority_preemption`: realtime used to go first only in the wait queue, so with
    every slot held by long batch streams it waited for one of them to end. Now it is admitted at once
    (the newest batch stream is preempted and recomputed later) and ends while every batch stream is
    still running (a preempted sequence finishing whole: test_generation_scheduler)."""
    from conftest import poll_until

    wait_idle(triton_server)  # the earlier tests' streams are gone: every running sequence is a holder below
    stop, ended = threading.Event(), []
    holders = _hold_slots(triton_server, MAX_RUNNING, stop, priority=2, ended=ended)
    try:
        running = poll_until(lambda: metric(triton_server, "llm_sequences_running") or 0, lambda n: n >= MAX_RUNNING, 60, 0.1)
        assert running >= MAX_RUNNING, f"precondition: the holders occupy every slot ({running} running)"
        _, tokens, reason, _ = run(triton_server, "grpc", PROMPTS[0], max_tokens=3, ignore_eos=True, priority=1)
        assert len(tokens) == 3 and reason == "length" and not ended, f"{len(ended)} batch streams had to end first"
        preempted = poll_until(lambda: metric(triton_server, 'llm_preemptions_total{reason="priority"') or 0, lambda n: n >= 1,
                               5 * METRICS_FLUSH_S, 0.2)
        assert preempted >= 1, "llm_preemptions_total{reason=\"priority\"} did not count the preemption"
        assert poll_until(lambda: metric(triton_server, "llm_sequences_running") or 0, lambda n: n >= MAX_RUNNING, 30, 0.1) >= MAX_RUNNING
    finally:
        stop.set()
        for thread in holders:
            thread.join(timeout=60)


def test_preempted_batch_streams_still_stream_exactly_their_solo_greedy_tokens(triton_server):
    """A batch sequence preempted for a realtime one is recomputed later with its tokens kept: its stream
    must go on where it stopped (no token repeated or lost), so every stream equals its solo run."""
    from conftest import poll_until

    wait_idle(triton_server)
    solo = {p: run(triton_server, "grpc", p, max_tokens=64, ignore_eos=True)[1] for p in PROMPTS}  # long enough to be running when realtime comes
    preempted = lambda: metric(triton_server, 'llm_preemptions_total{reason="priority"') or 0  # noqa: E731
    before = preempted()
    with ThreadPoolExecutor(max_workers=16) as pool:
        batch = [(p, pool.submit(run, triton_server, ("grpc", "http")[i % 2], p, max_tokens=64, ignore_eos=True, priority=2))
                 for i, p in enumerate(PROMPTS + PROMPTS[:2])]
        poll_until(lambda: metric(triton_server, "llm_sequences_running") or 0, lambda n: n >= MAX_RUNNING, 30, 0.02)
        realtime = [(p, pool.submit(run, triton_server, ("http", "grpc")[i % 2], p, max_tokens=6, ignore_eos=True, priority=1))
                    for i, p in enumerate(PROMPTS[:4])]
        for prompt, future in batch:
            _, tokens, reason, _ = future.result(timeout=120)
            assert tokens == solo[prompt] and reason == "length", prompt
        for prompt, future in realtime:
            _, tokens, reason, _ = future.result(timeout=120)
            assert tokens == solo[prompt][:6] and reason == "length", prompt
    assert poll_until(preempted, lambda n: n > before, 5 * METRICS_FLUSH_S, 0.2) > before, "no batch stream was preempted"


@pytest.mark.slow
def test_blocks_in_use_return_to_zero_after_1000_mixed_requests_with_cancellations(triton_server):
    def one(i):
        protocol = ("http", "grpc")[i % 2]
        settings = GenerationSettings(max_tokens=1 + i % 4, ignore_eos=True, priority=1 + (i % 5 == 0), chat=i % 3 == 0)
        stream = generate(triton_server.url(protocol), protocol, PROMPTS[i % len(PROMPTS)], settings, True, MODEL)
        try:
            for n, _ in enumerate(stream):
                if i % 7 == 0 and n == 0:
                    stream.close()  # cancelled (gRPC) / disconnected (HTTP) after the first chunk
                    return "cancelled"
            return "done"
        except OverloadedError:
            return "rejected"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(one, range(1000)))
    assert outcomes.count("done") > 700
    wait_idle(triton_server)
    assert metric(triton_server, "llm_kv_blocks_used") == 0
    assert metric(triton_server, "llm_sequences_running") == 0 and metric(triton_server, "llm_sequences_waiting") == 0
    assert run(triton_server, "grpc", PROMPTS[0], max_tokens=16, ignore_eos=True)[2] == "length"  # still serving


def test_the_requests_triton_timeout_bounds_its_wait_for_a_slot(triton_server):
    """gRPC `timeout` (microseconds) is Triton's queue timeout: a request not admitted by then gets
    UNAVAILABLE "Request timeout expired", as a batched model answers. 1 us always expires (the
    scheduler sees the request after it arrived); a generous one changes nothing."""
    import queue

    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def stream_once(timeout_us):
        answers = queue.Queue()
        client = grpcclient.InferenceServerClient(triton_server.url("grpc"))
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        text = grpcclient.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([PROMPTS[0].encode()], dtype=object))
        client.async_stream_infer(MODEL, [text], timeout=timeout_us, parameters={"max_tokens": 3, "ignore_eos": True},
                                  enable_empty_final_response=True)
        result, error = answers.get(timeout=60)
        client.stop_stream()
        client.close()
        return result, error

    from conftest import poll_until

    # docs/generation.md: a request not admitted in time is counted as llm_requests_rejected_total{reason="queue_timeout"}
    timed_out = lambda: metric(triton_server, 'llm_requests_rejected_total{reason="queue_timeout"') or 0  # noqa: E731
    before = timed_out()
    _, error = stream_once(1)
    assert isinstance(error, InferenceServerException), error
    assert error.message() == "Request timeout expired", error  # (a stream error carries no status code in tritonclient)
    result, error = stream_once(60_000_000)
    assert error is None and result.as_numpy("num_output_tokens").sum() >= 1
    # sent to Triton once a second (METRICS_FLUSH_S); exactly one: the generous timeout is not counted
    assert poll_until(timed_out, lambda n: n >= before + 1, 5 * METRICS_FLUSH_S, 0.2) == before + 1
    time.sleep(METRICS_FLUSH_S + 0.2)
    assert timed_out() == before + 1


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(triton_server):
    """vLLM's `stop`, through Triton's generate endpoint ("parameters") and generate_stream."""
    import json

    def post(path, parameters, **inputs):
        body = json.dumps({"text_input": PROMPTS[4], **inputs, "parameters": {"max_tokens": 24, "ignore_eos": True, **parameters}})
        request = urllib.request.Request(f"http://{triton_server.url('http')}/v2/models/{MODEL}/{path}", body.encode(),
                                         {"Content-Type": "application/json"})
        return urllib.request.urlopen(request, timeout=60).read().decode()

    whole = json.loads(post("generate", {"exclude_input_in_output": True}))
    generated = whole["text_output"]
    assert whole["finish_reason"] == "length" and len(generated) > 12, whole
    stop = generated[len(generated) // 2:len(generated) // 2 + 3]
    expected = generated[:generated.find(stop)]
    cut = json.loads(post("generate", {"exclude_input_in_output": True, "stop": stop}))
    assert cut["text_output"] == expected and cut["finish_reason"] == "stop", (stop, cut)
    events = [json.loads(line[len("data: "):]) for line in post("generate_stream", {"stop": stop}, stream=True).splitlines()
              if line.startswith("data: ")]
    assert len(events) > 2 and "".join(e["text_output"] for e in events) == expected, events
    assert events[-1]["finish_reason"] == "stop", events
    assert all(stop not in e["text_output"] for e in events)
    for protocol in ("http", "grpc"):  # the project's client, through sampling_parameters
        text, _, reason, _ = run(triton_server, protocol, PROMPTS[4], max_tokens=24, ignore_eos=True, stop=(stop, "\u2603"))
        assert (text, reason) == (expected, "stop"), (protocol, text, reason)


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory):
    """The LLM alone on a server of its own: the flood below could take a shared server down with it."""
    from conftest import start_test_server

    server = start_test_server(tmp_path_factory.mktemp("llm-flood"), (MODEL,))
    yield server
    server.discard()


def test_a_flood_of_abandoned_streams_overflowing_the_wait_queue_does_not_crash_the_server(llm_server):
    """A soak review (2026-12-06) killed the LLM's partition with SIGSEGV in Triton's
    `TRITONBACKEND_ResponseFactoryIsCancelled`, twice, within seconds: clients that send a
    generate_stream request and hang up at once, faster than it decodes, so the batch wait queue
    (256) fills and the rest are refused as queue-full. Triton 2.51's Python backend frees a
    request's response factory when its FINAL response is sent, and `request.is_cancelled()` after
    that reads the freed factory. The model registered each request before submitting it and
    answered a queue-full one with its FINAL from Triton's thread while the generation loop, from a
    snapshot of the pending requests, could still be polling that request's cancellation. The
    server must survive, answer, and hold no KV blocks once the abandoned streams are cancelled."""
    import json
    import socket
    import struct

    from conftest import poll_until

    triton_server = llm_server
    host, port = triton_server.url("http").split(":")
    body = json.dumps({"text_input": PROMPTS[2], "stream": True,
                       "sampling_parameters": json.dumps({"max_tokens": 300, "ignore_eos": True})}).encode()
    request = (f"POST /v2/models/{MODEL}/generate_stream HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    def send_and_hang_up(_):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, not FIN: gone at once

    def idle_or_dead():
        if server.poll() is not None:
            return True
        try:
            return all(metric(triton_server, name) == 0 for name in ("llm_sequences_running", "llm_sequences_waiting"))
        except OSError:  # the metrics endpoint of a server that is going down
            return False

    rejected_before = metric(triton_server, 'llm_requests_rejected_total{reason="queue_full"') or 0
    server = triton_server.process.process
    # it died after 2,500-8,000 of them, in 2-10 s: twice the most, within twice the longest. A count, not
    # only a time: the server reads its backlog of hung-up connections at ~1,000/s (2-core Xeon, 2026-12-07)
    # while 4 threads send ~2,900/s, so 20 s of sending (58,000) kept it busy ~35 s after the flood
    sent, deadline = 0, time.monotonic() + 20
    with ThreadPoolExecutor(max_workers=4) as pool:
        while sent < 16_000 and time.monotonic() < deadline and server.poll() is None:
            list(pool.map(send_and_hang_up, range(500)))
            sent += 500
    assert server.poll() is None, f"tritonserver died ({server.poll()}) after {sent} abandoned streams"
    poll_until(idle_or_dead, bool, 120, 0.2)
    assert server.poll() is None, f"tritonserver died ({server.poll()}) while the abandoned streams were cancelled"
    wait_idle(triton_server)
    assert (metric(triton_server, 'llm_requests_rejected_total{reason="queue_full"') or 0) > rejected_before, \
        "precondition: the flood overflowed the wait queue"
    assert metric(triton_server, "llm_kv_blocks_used") == 0 and metric(triton_server, "llm_sequences_running") == 0
    assert run(triton_server, "grpc", PROMPTS[0], max_tokens=4, ignore_eos=True)[2] == "length"  # still serving


def test_a_stopping_pod_finishes_a_stream_that_outlasts_tritons_default_exit_timeout(tmp_path_factory, serving_spec):
    """Pods end at every scale-down, rollout and node drain (SIGTERM to tritonserver, PID 1). With
    Triton's default --exit-timeout-secs of 10 s, four 1,000-token streams ended at ~231 tokens each,
    with no final response and no error (measured 2026-12-06): a client could not tell a cut answer from
    a finished one. The LLM's partition renders its `drain_s` as the pod's exit timeout: a server started
    with those pod settings finishes a stream that runs on well past 10 s after SIGTERM, final response
    included, and then exits."""
    import json
    import signal

    from conftest import start_test_server
    from k8s_deploy.workload import plan_deployment, pod_server_settings

    deploy = plan_deployment(serving_spec)
    (part,) = [p for p in deploy.plan.partitions if MODEL in p.models]
    drain_s = pod_server_settings(deploy, part, gpu=False).exit_timeout_secs
    assert drain_s > 10
    server = start_test_server(tmp_path_factory.mktemp("llm-drain"), (MODEL,), exit_timeout_secs=drain_s)
    events, first_events = [], threading.Event()

    def stream():
        body = json.dumps({"text_input": PROMPTS[4], "stream": True, "max_tokens": 600, "ignore_eos": True}).encode()
        request = urllib.request.Request(f"http://{server.http_url}/v2/models/{MODEL}/generate_stream", body)
        with urllib.request.urlopen(request, timeout=drain_s + 30) as response:
            for line in response:
                if line.startswith(b"data: "):
                    events.append((time.monotonic(), json.loads(line[len(b"data: "):])))
                    if len(events) == 10:
                        first_events.set()

    reader = threading.Thread(target=stream)
    try:
        reader.start()
        assert first_events.wait(60), "the stream did not start"
        started = events[0][0]
        signalled = time.monotonic()
        server.process.process.send_signal(signal.SIGTERM)
        reader.join(drain_s + 30)
        assert server.process.process.wait(timeout=60) is not None
    finally:
        server.process.stop()
    rate = (len(events) - 1) / (events[-1][0] - started)
    assert len(events) == 600 and events[-1][1]["finish_reason"] == "length", (len(events), events[-1][1])
    assert not any("error" in e for _, e in events)
    # (what it shows: the stream ran on this long after SIGTERM; above 10 s Triton's default would have cut it)
    print(f"stream ran {events[-1][0] - signalled:.1f} s after SIGTERM at {rate:.1f} tokens/s; drain {drain_s} s")


def test_a_stream_cut_by_a_stopping_server_is_an_unavailable_error_on_every_client(tmp_path_factory):
    """A server that exits mid-stream (its exit timeout spent) ends the stream without a final response.
    Every client raises ServerUnavailableError (went down: retry elsewhere), never a short answer; the
    gRPC clients said "overloaded" (gRPC's UNAVAILABLE "Stream removed (Socket closed)")."""
    import asyncio
    import signal

    from conftest import start_test_server
    from model_client.errors import ServerUnavailableError
    from model_client.generate import generate_async

    server = start_test_server(tmp_path_factory.mktemp("llm-cut"), (MODEL,), exit_timeout_secs=1)
    outcomes, streaming = {}, threading.Barrier(5, timeout=60)
    settings = GenerationSettings(max_tokens=600, ignore_eos=True)

    def blocking(protocol):
        try:
            for count, _ in enumerate(generate(server.url(protocol), protocol, PROMPTS[4], settings, True, MODEL)):
                if count == 5:
                    streaming.wait()
            outcomes[protocol] = "returned"
        except Exception as exc:  # noqa: BLE001 - what the caller would catch is the point
            outcomes[protocol] = exc

    def non_blocking(protocol):
        async def consume():
            count = 0
            async for _ in generate_async(server.url(protocol), protocol, PROMPTS[4], settings, True, MODEL):
                count += 1
                if count == 5:
                    await asyncio.get_running_loop().run_in_executor(None, streaming.wait)
        try:
            asyncio.run(consume())
            outcomes["async " + protocol] = "returned"
        except Exception as exc:  # noqa: BLE001
            outcomes["async " + protocol] = exc

    threads = [threading.Thread(target=run_one, args=(protocol,)) for run_one in (blocking, non_blocking)
               for protocol in ("http", "grpc")]
    try:
        for thread in threads:
            thread.start()
        streaming.wait()  # every stream has tokens
        server.process.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(60)
    finally:
        server.process.stop()
    assert len(outcomes) == 4 and all(isinstance(o, ServerUnavailableError) for o in outcomes.values()), outcomes


def test_a_non_streamed_chat_answer_starts_with_the_prompt_the_model_got_and_chat_inputs_are_checked(triton_server):
    """vLLM's rule (exclude_input_in_output unset: the answer starts with the prompt) prefixed the raw
    user text, not the chat prompt the model was given: "What is Triton?Triton is ..." (a review,
    2026-12-07). A system_prompt without the template was accepted and ignored; an empty user turn of a
    chat request was refused, which vLLM's chat endpoint takes."""
    import json
    import urllib.error

    def post(**fields):
        body = json.dumps({**fields, "parameters": {"max_tokens": 6, "ignore_eos": True}}).encode()
        request = urllib.request.Request(f"http://{triton_server.url('http')}/v2/models/{MODEL}/generate", body,
                                         {"Content-Type": "application/json"})
        try:
            return 200, json.loads(urllib.request.urlopen(request, timeout=60).read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, whole = post(text_input="Hello", apply_chat_template=True)
    status_excluded, answer = post(text_input="Hello", apply_chat_template=True, exclude_input_in_output=True)
    assert status == status_excluded == 200 and answer["text_output"], (whole, answer)
    prompt = whole["text_output"][:len(whole["text_output"]) - len(answer["text_output"])]
    assert whole["text_output"].endswith(answer["text_output"]) and prompt.startswith("<|im_start|>system\n"), whole
    assert prompt.endswith("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"), prompt

    status, error = post(text_input="Hello", system_prompt="You are a pirate.")
    assert status == 400 and "system_prompt is used only with apply_chat_template = true" in error["error"], error
    status, empty_turn = post(text_input="", apply_chat_template=True, exclude_input_in_output=True)
    assert status == 200 and empty_turn["finish_reason"] == "length", empty_turn
