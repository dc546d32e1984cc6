"""Triton Python model `smollm2_chat`: decoupled text generation with the project's own scheduler.

Triton hands every request to `execute` as it arrives (max_batch_size 0, decoupled); `execute`
validates it, tokenizes it and submits it to the `GenerationEngine`, then returns at once. One
background thread runs the scheduler loop: each iteration admits waiting requests into free slots
(continuous batching), runs one prefill chunk and one batched decode step, and sends responses.

Interface (tensor names of Triton's vLLM backend; config rendered by serving/generation/triton_config.py):
  text_input (string), stream (bool), sampling_parameters (JSON string; else the request's
  parameters), exclude_input_in_output (bool), apply_chat_template (bool: wrap text_input as the
  user turn of the SmolLM2 chat template), system_prompt (string, with apply_chat_template).
  Outputs: text_output, finish_reason ("stop" | "length" | "cancelled" | "deadline"; "" until the
  last response), num_input_tokens, num_output_tokens, output_token_ids.
Streaming sends one response per step with the new text; the last one carries the finish reason
and the FINAL flag. Non-streaming sends one FINAL response with the whole text.
Errors: bad input -> INVALID_ARG (HTTP 400) naming the problem; a full wait queue -> UNAVAILABLE
(HTTP 503). Cancelled requests and lost streams end at the next step and free their KV blocks (a
closed HTTP generate_stream connection is seen only once a response is written to it: Triton's
HTTP frontend learns of it from a failed write; docs/generation.md, section 7).
"""
import os
import sys

# The runtime's PYTHONPATH, which the stub's isolated Python ignores (why: the onnxruntime_cpu backend's model.py).
sys.path.extend(p for p in dict.fromkeys(os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p and p not in sys.path)
import itertools
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

from contracts.partition_env import intra_op_threads as partition_intra_op_threads
from serving.backend.checks import model_arguments
from serving.backend.stub_metrics import Observation, StubMetrics
from serving.generation import metrics as gm
from serving.generation.detokenize import IncrementalDetokenizer, StopStrings
from serving.generation.engine import DecoderGraph, GenerationEngine, StepResult
from serving.generation.errors import GenerationError, InvalidGenerationRequest, WaitQueueFull
from serving.generation.kv_store import KvStore
from serving.generation.requests import (FROM_REQUEST, build_request, check_prompt_size, merge_sampling_fields, parse_sampling_parameters,
                                        prompt_bytes_limit, prompt_text_for, prompt_token_ids)
from serving.generation.scheduler import FinishReason, Policy, Scheduler, SchedulerConfig
from serving.generation.spec_file import GenerationSpec

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


def _text(value, name):
    item = value[0]
    if isinstance(item, str):
        return item
    try:
        return bytes(item).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidGenerationRequest(f"{name} is not valid UTF-8 ({exc.reason} at byte {exc.start}); send UTF-8 text.") from None


class _Pending:
    """Response state of one request while it generates."""

    def __init__(self, request, sender, stream, prefix_text, detokenizer, num_input_tokens, stops=()):
        self.request, self.sender, self.stream = request, sender, stream
        self.prefix_text, self.detokenizer, self.num_input_tokens = prefix_text, detokenizer, num_input_tokens
        #: The generated text, cut before a stop string (StopStrings passes it through without any).
        self.text_out = StopStrings(stops)
        self.last_token_at = None
        #: Streaming: text and tokens of the step that also finished the sequence (sent with FINAL).
        self.delta, self.last_tokens = "", []


class _Metrics:
    """The generation metrics (serving/generation/metrics.py) through serving.backend.stub_metrics:
    updates are summed here and sent to Triton once a second, off the decode loop."""

    def __init__(self, labels):
        self.stub = StubMetrics(pb_utils, gm.family_table(), labels["model"], labels["version"])

    def create_all(self, finish_reasons, reject_reasons, preemption_reasons):
        """Every series from the start (at 0), so dashboards and alerts see the model before its first request."""
        for d in gm.ALL_METRICS:
            reasons = {gm.REQUESTS_FINISHED: finish_reasons, gm.REQUESTS_REJECTED: reject_reasons,
                       gm.PREEMPTIONS: preemption_reasons}.get(d)
            for labels in ([(("reason", r),) for r in reasons] if reasons is not None else [()]):
                self.stub.create(d.name, labels)

    def set(self, d, value, **extra):
        """A gauge's value now."""
        self.stub.record([Observation(d.name, tuple(sorted(extra.items())), value)])

    def add(self, d, value, **extra):
        """What a counter grew by."""
        self.stub.record([Observation(d.name, tuple(sorted(extra.items())), value)])

    def observe(self, d, value):
        self.stub.record([Observation(d.name, (), value)])

    def close(self):
        self.stub.close()


class TritonPythonModel:
    def initialize(self, args):
        config, params, version_dir = model_arguments(args)
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(f"model '{args['model_name']}' must be decoupled (model_transaction_policy).")
        try:
            spec = GenerationSpec.read(os.path.join(version_dir, params["spec_file"]))
        except GenerationError as exc:
            raise pb_utils.TritonModelException(f"model '{args['model_name']}': {exc}") from None
        self.tokenizer = Tokenizer.from_file(os.path.join(version_dir, params["tokenizer_file"]))
        self.system_prompt = spec.system_prompt
        self.max_context = int(params["max_context"])
        self.prompt_bytes_limit = prompt_bytes_limit(self.max_context, self.tokenizer.get_vocab())
        self.default_priority = int(params.get("default_priority", "2"))
        layout = spec.kv_layout(int(params["block_size"]), params["kv_dtype"])
        threads = int(params.get("intra_op_num_threads", "0") or 0) or partition_intra_op_threads()
        graph = DecoderGraph(os.path.join(version_dir, params["graph_file"]), threads=threads)
        waiting = {int(k): int(v) for k, v in (item.split(":") for item in params["max_waiting"].split(","))}
        scheduler = Scheduler(SchedulerConfig(
            num_blocks=int(params["num_blocks"]), block_size=layout.block_size, max_running=int(params["max_running"]),
            max_context=self.max_context, prefill_chunk_tokens=int(params["prefill_chunk_tokens"]), max_waiting=waiting,
            policy=Policy(params.get("policy", "continuous")), prefix_sharing=params.get("prefix_sharing", "true") == "true",
            priority_preemption=params.get("priority_preemption", "true") == "true", eos_token_ids=spec.eos_token_ids))
        self.engine = GenerationEngine(graph, scheduler, KvStore(layout, scheduler.config.num_blocks))
        self.metrics = _Metrics({"model": args["model_name"], "version": args["model_version"]})
        self.metrics.create_all(finish_reasons=[r.value for r in FinishReason if r is not FinishReason.QUEUE_TIMEOUT],
                                reject_reasons=["invalid", "queue_full", "queue_timeout"], preemption_reasons=list(scheduler.preemptions))
        self.pending, self.ids, self.published = {}, itertools.count(), {}
        #: Held while `_accept` registers a request and submits it (and takes it back when the submit fails),
        #: while the loop polls `is_cancelled`, and while `finalize` answers what is left. Why: Triton 2.51's
        #: Python backend frees a request's response factory when its FINAL response is sent, and
        #: `request.is_cancelled()` after that reads the freed factory (the server dies with SIGSEGV in
        #: TRITONBACKEND_ResponseFactoryIsCancelled). A request refused at submit (a full wait queue) is
        #: answered from Triton's thread; without the lock the loop could still poll it from its snapshot
        #: of `pending` (a flood of abandoned streams killed the server within seconds; test_generation_serving).
        self.intake = threading.Lock()
        self.wake, self.stopping = threading.Event(), False
        self._warm_up()
        self._publish(StepResult())  # the gauges' true values (blocks free, ...) before the first request
        self.thread = threading.Thread(target=self._loop, name="generation-loop", daemon=True)
        self.thread.start()
        pb_utils.Logger.log_info(f"model '{args['model_name']}': {scheduler.config.num_blocks} KV blocks x {layout.block_size} tokens "
                                 f"({layout.dtype.value}), {scheduler.config.max_running} slots, policy {scheduler.config.policy.value}, "
                                 f"prefix sharing {scheduler.config.prefix_sharing}, priority preemption {scheduler.config.priority_preemption}, "
                                 f"{threads or 'default'} threads")

    def _warm_up(self):
        """One short generation before serving, so the first request does not pay ORT's first-run cost."""
        from serving.generation.requests import GenerationRequest, SamplingParams

        self.engine.submit(GenerationRequest("warmup", (1, 2, 3), SamplingParams(max_tokens=2), self.default_priority))
        self.engine.run_until_idle()
        # not a client's request: the prefix cache's counters start at 0 as the token counters do (a fresh
        # server read 3 looked-up tokens before any request: a review, 2026-12-07)
        cache = self.engine.scheduler.prefix_cache
        cache.stats = type(cache.stats)()

    # ------------------------------------------------------------------ intake (Triton's threads)
    def execute(self, requests):
        for request in requests:
            self._accept(request)
        return None

    def _parse(self, request):
        raw = _input(request, "text_input")
        text = _text(raw, "text_input") if raw is not None and raw.size else ""
        stream = bool(_input(request, "stream")[0]) if _input(request, "stream") is not None else False
        exclude = _input(request, "exclude_input_in_output")
        prepend = (not bool(exclude[0])) if exclude is not None else not stream
        if prepend and stream:
            raise InvalidGenerationRequest("exclude_input_in_output = false is not allowed with stream = true.")
        sampling = _input(request, "sampling_parameters")
        fields = parse_sampling_parameters(request.parameters(), FROM_REQUEST)  # read, and checked, in either case
        if sampling is not None:
            fields = merge_sampling_fields(parse_sampling_parameters(_text(sampling, "sampling_parameters")), fields)
        chat = _input(request, "apply_chat_template")
        system = _input(request, "system_prompt")
        prompt_text = prompt_text_for(text, chat is not None and bool(chat[0]),
                                      _text(system, "system_prompt") if system is not None else None, self.system_prompt)
        return prompt_text, stream, prepend, fields

    def _accept(self, request):
        arrived = self.engine.clock()  # its latency counts tokenizing too (a review, 2026-12-07: it started after)
        sender = request.get_response_sender()
        try:
            prompt_text, stream, prepend, fields = self._parse(request)
            check_prompt_size(prompt_text, self.prompt_bytes_limit, self.max_context)
            # without the GIL (the running streams go on); an over-long prompt refused from its head
            ids = prompt_token_ids(self.tokenizer, prompt_text, self.max_context)
            request_id = f"r{next(self.ids)}"
            generation = build_request(request_id, ids, fields, self.max_context, self.default_priority, stream,
                                       queue_timeout_us=int(request.timeout() or 0))
            decode = lambda tokens: self.tokenizer.decode(list(tokens), skip_special_tokens=True)
            with self.intake:  # no poll of its cancellation can be under way once it is taken back (see __init__)
                self.pending[request_id] = _Pending(request, sender, stream, prompt_text if prepend else "", IncrementalDetokenizer(decode),
                                                    len(ids), generation.sampling.stop)
                try:
                    self.engine.submit(generation, arrived)
                except Exception:
                    self.pending.pop(request_id, None)
                    raise
        except InvalidGenerationRequest as exc:
            self.metrics.add(gm.REQUESTS_REJECTED, 1, reason="invalid")
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)), flags=FINAL)
            return
        except WaitQueueFull as exc:
            self.metrics.add(gm.REQUESTS_REJECTED, 1, reason="queue_full")
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), pb_utils.TritonError.UNAVAILABLE)), flags=FINAL)
            return
        except Exception as exc:  # a bug, not the caller's fault: answer it (a decoupled request must get a FINAL)
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"internal error: {exc!r}", pb_utils.TritonError.INTERNAL)), flags=FINAL)
            return
        self.wake.set()

    # ------------------------------------------------------------------ the scheduler loop (one thread)
    def _loop(self):
        while not self.stopping:
            if self.engine.idle:
                self.wake.wait(0.05)
                self.wake.clear()
                continue
            try:  # all of it: an exception anywhere here ended the one loop thread, and every later request hung
                with self.intake:  # only requests nobody has answered yet (see __init__)
                    for request_id, pending in list(self.pending.items()):
                        if pending.request.is_cancelled():
                            self.engine.cancel(request_id)
                result = self.engine.step()
                self._respond(result)
                self._publish(result)
            except Exception as exc:  # never let the loop die: fail what is running, keep serving
                pb_utils.Logger.log_error(f"generation step failed: {exc!r}")
                self._fail_all(str(exc))

    def _fail_all(self, message):
        """After a failed step, fail every request the loop holds, running or waiting (a request
        accepted between the failure and this lock is among them), with one error each. Under
        `intake` (as `finalize`), so cancelling and answering see the same set: without it, a request
        accepted during the sweep was answered "generation failed" while its sequence went on
        generating for nobody, and an `_accept` taking its own entry back at the same moment made
        `pending.pop` raise KeyError here, in the loop's own exception handler, and the one loop
        thread died (a review, 2026-12-07)."""
        with self.intake:
            for sequence in list(self.engine.scheduler.all_sequences()):
                self.engine.cancel(sequence.request_id)
            try:
                freed = self.engine.step()  # a step with everything cancelled computes nothing: it only frees the blocks
                self._publish(freed)  # the gauges read free slots and blocks again (LlmKvCacheNearlyFull fired on stale ones)
            except Exception as exc:
                pb_utils.Logger.log_error(f"generation: freeing after a failed step failed too: {exc!r}")
            failed = [self.pending.pop(request_id, None) for request_id in list(self.pending)]
        error = pb_utils.TritonError(f"generation failed: {message}", pb_utils.TritonError.INTERNAL)
        for pending in failed:
            if pending is not None:
                self._send(pending, pb_utils.InferenceResponse(error=error), FINAL)

    def _respond(self, result):
        now = time.monotonic()
        new_tokens = {}
        for sequence, token in result.tokens:
            new_tokens.setdefault(sequence.request_id, (sequence, []))[1].append(token)
        finished = {s.request_id: s for s in result.finished}
        for request_id, (sequence, tokens) in new_tokens.items():
            pending = self.pending.get(request_id)
            if pending is None:
                continue
            self._observe_latency(pending, sequence, now)
            delta = pending.text_out.push("".join(pending.detokenizer.push(t) for t in tokens))
            if pending.text_out.stopped and request_id not in finished:
                self.engine.stop(request_id)  # ends as STOP at the next step, before it computes anything
            if pending.stream and request_id not in finished:
                self._send(pending, self._response(delta, "", pending, tokens), 0)
            elif pending.stream:
                pending.delta, pending.last_tokens = delta, tokens
        for request_id, sequence in finished.items():
            pending = self.pending.get(request_id)  # popped once answered: an exception before that leaves
            if pending is None:                     # it to _fail_all, which answers what is still pending
                continue
            # a stop string in the step that also reached max_tokens still ends as "stop" (as vLLM)
            reason = FinishReason.STOP.value if pending.text_out.stopped else sequence.finish_reason.value
            if sequence.finish_reason is FinishReason.QUEUE_TIMEOUT:  # Triton's own answer to a queue timeout
                self.metrics.add(gm.REQUESTS_REJECTED, 1, reason="queue_timeout")
                error = pb_utils.TritonError("Request timeout expired", pb_utils.TritonError.UNAVAILABLE)
                self._send(pending, pb_utils.InferenceResponse(error=error), FINAL)
                self.pending.pop(request_id, None)
                continue
            self.metrics.add(gm.REQUESTS_FINISHED, 1, reason=reason)
            rest = pending.text_out.push(pending.detokenizer.flush()) + pending.text_out.flush()
            if pending.stream:
                response = self._response(pending.delta + rest, reason, pending, pending.last_tokens)
            else:
                response = self._response(pending.prefix_text + pending.text_out.text, reason, pending, sequence.generated)
            self._send(pending, response, FINAL)
            self.pending.pop(request_id, None)

    def _observe_latency(self, pending, sequence, now):
        if pending.last_token_at is None:
            self.metrics.observe(gm.TIME_TO_FIRST_TOKEN, now - sequence.arrival)
        else:
            self.metrics.observe(gm.INTER_TOKEN_LATENCY, now - pending.last_token_at)
        pending.last_token_at = now

    def _response(self, text, reason, pending, tokens):
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object)),
            pb_utils.Tensor("finish_reason", np.array([reason.encode("utf-8")], dtype=object)),
            pb_utils.Tensor("num_input_tokens", np.array([pending.num_input_tokens], dtype=np.uint32)),
            pb_utils.Tensor("num_output_tokens", np.array([len(tokens)], dtype=np.uint32)),
            pb_utils.Tensor("output_token_ids", np.asarray(list(tokens), dtype=np.int64)),
        ])

    @staticmethod
    def _send(pending, response, flags):
        try:
            pending.sender.send(response, flags=flags)
        except Exception as exc:  # the client went away: nothing to deliver, the blocks are freed already
            pb_utils.Logger.log_verbose(f"response not delivered: {exc!r}")

    def _publish(self, result):
        scheduler = self.engine.scheduler
        self.metrics.set(gm.SEQUENCES_RUNNING, len(scheduler.running))
        self.metrics.set(gm.SEQUENCES_WAITING, scheduler.num_waiting)
        self.metrics.set(gm.RUNNING_SLOTS, scheduler.config.max_running)
        self.metrics.set(gm.KV_BLOCKS_USED, scheduler.allocator.num_used)
        self.metrics.set(gm.KV_BLOCKS_FREE, scheduler.allocator.num_free)
        stats = scheduler.prefix_cache.stats
        self._counter_to(gm.PREFIX_LOOKUP_TOKENS, stats.looked_up_tokens)
        self._counter_to(gm.PREFIX_HIT_TOKENS, stats.hit_tokens)
        for reason, total in scheduler.preemptions.items():
            self._counter_to(gm.PREEMPTIONS, total, reason=reason)
        self.metrics.add(gm.TOKENS_GENERATED, len(result.tokens))

    def _counter_to(self, definition, total, **labels):
        """Counters only increment: add what the cumulative statistic grew by since the last step."""
        key = (definition.name, tuple(sorted(labels.items())))
        self.metrics.add(definition, total - self.published.get(key, 0), **labels)
        self.published[key] = total

    def finalize(self):
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=10)
        # every decoupled request gets its FINAL, also when the server stops mid-generation: one left
        # open hangs its client until the connection drops (and an open sender holds the model)
        with self.intake:  # a loop that outlived the join must not poll what is answered here
            for request_id, pending in list(self.pending.items()):
                self.pending.pop(request_id, None)
                error = pb_utils.TritonError("the model is being unloaded (server stopping or model reloaded); retry",
                                             pb_utils.TritonError.UNAVAILABLE)
                self._send(pending, pb_utils.InferenceResponse(error=error), FINAL)
        self.metrics.close()
