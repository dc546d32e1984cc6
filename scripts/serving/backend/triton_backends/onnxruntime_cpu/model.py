"""`onnxruntime_cpu`: a Triton Python-based backend that runs a model's ONNX file in ONNX Runtime.

Triton's own onnxruntime backend is not on any package registry for a CPU-only machine, so on CPU
every ONNX model is served by this one model.py (Triton looks it up as
`<backend-directory>/onnxruntime_cpu/model.py` for configs with `backend: "onnxruntime_cpu"`).

Each call to `execute` receives every request of one dynamic batch. They are concatenated along
the batch axis and run as ONE ONNX Runtime call, then the outputs are split back per request:
batching only pays if the framework sees the batch. Inputs with a variable axis (token ids) are
right-padded to the longest request in the batch with the `pad_value` parameter.

Config parameters (all strings): `onnx_file` (default model.onnx, in the version directory),
`intra_op_num_threads` (0 = the partition's per-instance count from $SERVING_INTRA_OP_THREADS, set
by the partition launcher from the cores it may run on; ONNX Runtime's default when unset),
`pad_value` (default 0), `metrics_flush_interval_s`
(default 1: how often the batch metrics go to the server; serving/backend/stub_metrics.py says why not
per batch).
`reject_non_finite` (default true): answer a request holding NaN/Inf with INVALID_ARG instead of
computing it, and likewise a request whose finite inputs made the model answer NaN/Inf. `max_sequence_length` (default: none): the longest variable axis a request may have.
`mask_inputs` (default: unset): the integer inputs that are 0/1 masks, comma-separated (may be
empty); unset, the `sequence_length_input` and every integer input named `*mask` are
(contracts.sequence_buckets.mask_input_names).
`max_input_dims` (default: none; JSON, e.g. {"x": [3, 960, 960]}): the largest dims of inputs whose
variable axes Triton batches by equal shapes (no `allow_ragged_batch`: an image's height and width);
a larger request is refused. Without ragged inputs nothing is padded, so outputs may have variable
axes (every request of a batch has the same shapes, and so the same output shapes).
`adaptive_threads` (default true): with several instances and more than one thread each, keep a
1-thread session beside the wide one, run it while a sibling instance computes and, alone, run
whichever of the two this instance measured faster on its own warm calls
(serving/backend/instance_activity.py, serving/backend/session_choice.py; the calls per session are
the `serving_framework_calls_total{session,reason}` metric; `reason` says why: a sibling computed,
the cores were busy, exploring, re-checking, preferred, or a size class's own choice).
`pinned_threads` (default true; with `adaptive_threads` on): the instance's main thread runs on a
home core and the wide session's worker threads on the partition's other cores, the wide session
spinning within a call (serving/backend/thread_placement.py).

Isolation (docs/operations.md, "One request never hurts another"): every request is checked on its
own against the model's input contract before the batch is formed (serving/backend/input_contract.py:
token-id ranges read from the graph's Gather tables, 0/1 masks, variable-length inputs agreeing,
finite floats); a bad one is answered alone with INVALID_ARG naming the input, the problem and the
expected form. If ONNX Runtime still fails on the batch, it is re-run in halves until the failing
request(s) stand alone (serving/backend/batch_execution.py); only those get the error. Every error response
gets its OWN `TritonError`: Triton 2.51's Python backend writes a response's error into shared
memory once per response and frees the previous copy, so one error object shared by several
responses leaves the server reading freed memory (wrong codes, empty messages, then SIGSEGV).

Text front-end (off unless `tokenizer_file` is set): the model's one input is TEXT (TYPE_STRING
[1]); each request's rows are tokenized (serving/backend/text_frontend.py: `tokenizer_file` in the version
directory, `max_length` truncation, [PAD] id `pad_value`) into the ONNX graph's own inputs, then
batched like any token input. This is the fused `text_embedder`: one execution per batch for
tokenizer and encoder, so a request pays one batching decision and one stub round trip.

Sequence-length bucketing (off unless `sequence_buckets` is set; fixed-shape models leave it off):
`sequence_buckets` = increasing token-count boundaries, e.g. "16,32,64,128", and
`sequence_length_input` = the input whose non-zero entries mark real tokens (the attention mask).
Then the gathered rows of the batch are grouped by real length into those buckets, each bucket is
trimmed to its own longest real row and run as one ONNX Runtime call (at most one call per
bucket), and the outputs are put back in request order. Every input must be [batch, sequence] and
no output may have a sequence axis. Why: padding a mixed batch to its longest text wastes most of
a transformer's work (contracts/sequence_buckets.py, scripts/perf_sweep/padding_report.py).
"""
import os
import sys

# Triton's Python stub may run its interpreter isolated (PYTHONPATH ignored; measured with Triton
# 2.51's stub: sys.flags.isolated 1); then it finds packages only through the venv first on PATH.
# The runtime's PYTHONPATH (serving.runtime.server.server_environment; the pods' in deploy/k8s_deploy)
# names the tree that started the server: append it (an appended entry still wins over an editable
# install's finder, which comes last in sys.meta_path).
sys.path.extend(p for p in dict.fromkeys(os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p and p not in sys.path)
import collections
import contextlib
import json
import time

import numpy as np
import onnx
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

from serving.backend.checks import model_arguments, model_file_in_version_dir, non_finite_answer_errors
from serving.backend.metrics import FAMILIES, batch_observations, choice_observations, initial_series
from serving.backend.stub_metrics import StubMetrics
from serving.backend.batch_execution import BatchLayout, NotBatchAxisError, execute_batch
from serving.backend.input_contract import contract_from_onnx
from serving.backend.instance_activity import InstanceActivity, instance_index
from serving.backend.thread_placement import ThreadPlacement, thread_ids
from serving.backend.core_load import CoreLoad
from serving.backend.session_choice import Reason, Session, SessionChoice
from contracts.sequence_buckets import (
    BUCKETS_PARAMETER,
    LENGTH_INPUT_PARAMETER,
    MAX_INPUT_DIMS_PARAMETER,
    MAX_LENGTH_PARAMETER,
    mask_input_names,
    parse_bucket_boundaries,
    parse_max_input_dims,
)
from serving.backend.text_frontend import TextFrontEnd
from contracts.onnx_sessions import CPU_PROVIDER, execution_providers, served_session
from contracts.partition_env import home_core_offset, intra_op_threads as partition_intra_op_threads


def _session(onnx_path, threads, providers=None, spin_within_run=False):
    """The served session options live in contracts.onnx_sessions (the perf suite opens the same)."""
    return served_session(onnx_path, threads, providers, spin_within_run)


def _flag(params, key: str) -> bool:
    """A boolean config parameter that defaults to on ("false" turns it off)."""
    return params.get(key, "true").strip().lower() != "false"


def received_dims(tensor):
    """A config tensor's dims as this backend receives it: after the config's `reshape`, where it has one
    (Triton reshapes before the backend; a [batch]-only tensor is declared dims [1] with reshape shape [],
    contracts.model_config.declared_dims), else its dims."""
    if "reshape" in tensor:
        return [int(d) for d in (tensor["reshape"] or {}).get("shape", [])]
    return [int(d) for d in tensor.get("dims", [])]


def instance_threads(config, params):
    """ONNX Runtime intra-op threads of ONE instance: the config's `intra_op_num_threads`, or the
    partition's per-instance count ($SERVING_INTRA_OP_THREADS: the cores it may run on; why one
    per core even with two instances: contracts.partition_plan.PlannedPartition.intra_op_threads);
    0 = ORT's default."""
    explicit = int(params.get("intra_op_num_threads", "0") or 0)
    return explicit or partition_intra_op_threads()


def as_sent(array, dtype):
    """An output as its response carries it: C-contiguous, in the config's data type. Usually it
    already is (rows of one framework output): then no numpy call, which costs 10-20 us each right
    after a framework call (serving/backend/batch_execution.py)."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array).astype(dtype, copy=False)


def error_response(message, code):
    """A response with a NEW TritonError: never share one error object between responses (see above)."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, code))


def framework_error_response(exc):
    """The answer to a request that made ONNX Runtime fail on its own (after isolation)."""
    if isinstance(exc, NotBatchAxisError):  # the model's fault, not the request's
        return error_response(f"model cannot answer batched requests: {exc}", pb_utils.TritonError.INTERNAL)
    first_line = str(exc).strip().splitlines()[0][:400] if str(exc).strip() else type(exc).__name__
    invalid = type(exc).__name__ in ("InvalidArgument", "InvalidGraph") or "INVALID_ARGUMENT" in first_line
    code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
    return error_response(
        f"this request's inputs made ONNX Runtime fail ({first_line}); it was run alone and the other "
        f"requests of its batch were answered.", code)


class TritonPythonModel:
    def initialize(self, args):
        config, params, version_dir = model_arguments(args)
        name = args["model_name"]
        try:
            onnx_path = model_file_in_version_dir(version_dir, params.get("onnx_file", "model.onnx"))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{name}': parameter onnx_file: {exc}") from None
        if not os.path.exists(onnx_path):
            raise pb_utils.TritonModelException(
                f"model '{name}': ONNX file {onnx_path} does not exist; run `make build-engines`."
            )
        self._open_sessions(name, args, config, params, onnx_path)
        self.session_calls = collections.Counter()  # this execute's framework calls per (session, reason)
        self.request_inputs = [t["name"] for t in config["input"]]
        self.frontend = self._text_frontend(name, version_dir, config, params)
        # the framework's feeds: the config's inputs, or the graph's own when text is tokenized here
        self.input_names = [i.name for i in self.session.get_inputs()] if self.frontend else self.request_inputs
        self.output_names = [t["name"] for t in config["output"]]
        # ragged inputs (and a tokenizing front-end's texts) are padded across a batch's requests; otherwise Triton
        # batches equal shapes only
        self.padded = bool(self.frontend) or any(t.get("allow_ragged_batch", False) for t in config["input"])
        variable = {t["name"]: received_dims(t) for t in config["output"] if any(d < 0 for d in received_dims(t))}
        if variable and self.padded:  # rows are split back per request, but a padded axis could not be trimmed to each one's own length
            raise pb_utils.TritonModelException(
                f"model '{name}': outputs {variable} have a variable axis: the requests of a batch are padded to the "
                f"longest and an output axis cannot be cut back per request; expected fixed output dims (pool in the graph).")
        self.output_dtypes = {
            t["name"]: pb_utils.triton_string_to_numpy(t["data_type"]) for t in config["output"]
        }
        if self.frontend:  # the graph's own inputs: symbolic axes are variable (-1)
            feed_dims = {i.name: [d if isinstance(d, int) else -1 for d in i.shape[1:]] for i in self.session.get_inputs()}
        else:
            feed_dims = {t["name"]: received_dims(t) for t in config["input"]}
        buckets, length_input = self._bucketing_settings(name, feed_dims, config, params)
        self.layout = BatchLayout(tuple(self.input_names), int(params.get("pad_value", "0") or 0), buckets,
                                  length_input or params.get(LENGTH_INPUT_PARAMETER) or None)
        if self.layout.length_input not in (None, *self.input_names):
            raise pb_utils.TritonModelException(
                f"model '{name}': `{LENGTH_INPUT_PARAMETER}` = {self.layout.length_input!r} is not one of the inputs {self.input_names}.")
        self.contract = None if self.frontend else self._input_contract(name, onnx_path, config, params)
        self.reject_non_finite = _flag(params, "reject_non_finite")
        if buckets:
            pb_utils.Logger.log_info(
                f"model '{name}': sequence-length bucketing on, boundaries {list(buckets)}, "
                f"real lengths from '{length_input}'"
            )
        self.metrics = self._metrics(name, args["model_version"], params)
        for metric, labels in initial_series():
            self.metrics.create(metric, labels)
        pb_utils.Logger.log_info(f"model '{name}': " + (f"text front-end feeding {self.input_names}" if self.frontend
                                                         else f"input contract {self.contract}"))

    @staticmethod
    def _metrics(name, version, params):
        try:
            return StubMetrics(pb_utils, FAMILIES, name, version, float(params.get("metrics_flush_interval_s", "1") or 1))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{name}': parameter metrics_flush_interval_s: {exc}") from None

    def _text_frontend(self, name, version_dir, config, params):
        """The tokenizer front-end when `tokenizer_file` is set (one TYPE_STRING input), else None."""
        tokenizer_file = params.get("tokenizer_file", "").strip()
        if not tokenizer_file:
            return None
        if [t["data_type"] for t in config["input"]] != ["TYPE_STRING"]:
            raise pb_utils.TritonModelException(
                f"model '{name}': `tokenizer_file` needs exactly one TYPE_STRING input, got {config['input']}.")
        try:
            path = model_file_in_version_dir(version_dir, tokenizer_file)
            return TextFrontEnd(path, int(params.get("max_length", "0") or 0), int(params.get("pad_value", "0") or 0),
                                [i.name for i in self.session.get_inputs()])
        except (ValueError, OSError, Exception) as exc:  # tokenizers raises its own Exception type
            raise pb_utils.TritonModelException(f"model '{name}': text front-end: {exc}") from None

    def _request_feeds(self, requests):
        """(per request: its feeds by input name or None, per request: the problem or None)."""
        if self.frontend:
            tokenized = self.frontend.tokenize(  # padded across requests here: the batch is (execute_batch)
                [pb_utils.get_input_tensor_by_name(r, self.request_inputs[0]).as_numpy() for r in requests], one_width=True)
            return list(tokenized.tensors), list(tokenized.problems)
        arrays = [
            {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.input_names}
            for request in requests
        ]
        return arrays, [self._problem(a) for a in arrays]

    def _problem(self, arrays):
        """The contract's verdict on one request; a check that fails on an input it did not foresee
        refuses that request alone (an exception out of `execute` fails every request of the batch)."""
        try:
            return self.contract.problem(arrays)
        except Exception as exc:  # noqa: BLE001 - per request, never the batch
            shapes = {name: list(a.shape) for name, a in arrays.items()}
            return (f"invalid input: this request's inputs {shapes} could not be checked ({type(exc).__name__}: {exc}); "
                    f"expected the shapes of the model's inputs with a batch dimension of at least 1 row.")

    def _input_contract(self, name, onnx_path, config, params):
        max_length = params.get(MAX_LENGTH_PARAMETER, "").strip()
        try:
            return contract_from_onnx(
                onnx.load(onnx_path, load_external_data=False),
                [(t["name"], received_dims(t)) for t in config["input"]],
                mask_inputs=mask_input_names([t["name"] for t in config["input"]], params),
                max_sequence_length=int(max_length) if max_length else None,
                reject_non_finite=_flag(params, "reject_non_finite"),
                max_dims=parse_max_input_dims(params.get(MAX_INPUT_DIMS_PARAMETER, "")),
                padded=self.padded,
            )
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{name}': input contract: {exc}") from None

    @staticmethod
    def _bucketing_settings(model_name, inputs, config, params):
        """(boundaries, length input name) when bucketing is configured and possible, else ((), None).
        `inputs` = {feed name: dims without the batch axis}."""
        try:
            buckets = parse_bucket_boundaries(params.get(BUCKETS_PARAMETER, ""))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{model_name}': {exc}") from None
        if not buckets:
            return (), None
        length_input = params.get(LENGTH_INPUT_PARAMETER, "")
        problems = []
        if length_input not in inputs:
            problems.append(f"`{LENGTH_INPUT_PARAMETER}` = {length_input!r} is not one of the inputs {sorted(inputs)}")
        problems += [f"input '{n}' has dims {d}, expected [-1] (one sequence axis)" for n, d in inputs.items() if d != [-1]]
        if problems:
            raise pb_utils.TritonModelException(
                f"model '{model_name}': `{BUCKETS_PARAMETER}` = {params[BUCKETS_PARAMETER]!r} cannot be used: "
                + "; ".join(problems) + "."
            )
        return buckets, length_input

    def _open_sessions(self, name, args, config, params, onnx_path):
        """The wide session and, with several instances on several cores, the narrow one beside it."""
        threads = instance_threads(config, params)
        kind = args.get("model_instance_kind", "CPU")
        try:  # KIND_GPU: ONNX Runtime's CUDA provider on this instance's device (contracts.onnx_sessions)
            providers = execution_providers(kind, int(args.get("model_instance_device_id", 0) or 0), ort.get_available_providers())
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{name}': {exc}") from None
        on_gpu = providers[0] != CPU_PROVIDER
        # Instances are separate processes: a 1-thread session while a sibling instance computes
        # too (serving/backend/instance_activity.py has the measurements); alone, the faster of it
        # and the wide session (one thread per reachable core) for the call's size, as measured on
        # this instance's own calls (serving/backend/session_choice.py) ...
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        adaptive = not on_gpu and threads > 1 and instances > 1 and _flag(params, "adaptive_threads")
        # ... with the main thread on a home core and the wide session's workers on the others
        # (serving/backend/thread_placement.py says why), re-planned when the partition's cores change.
        pinned = adaptive and _flag(params, "pinned_threads")
        before = thread_ids() if pinned else frozenset()
        self.session = _session(onnx_path, threads, providers, spin_within_run=pinned)
        # this instance's place among the model's (served configs have one instance group per instance)
        index = instance_index(args.get("model_instance_name", name),
                               [(g.get("name", ""), int(g.get("count", 1))) for g in config.get("instance_group", [])])
        # its turn for a home core after the instances of the partition's models declared before it
        # (contracts.partition_env): instance 0 of every model on the partition's first core left the others idle
        self.placement = (ThreadPlacement(home_core_offset(name) + index, sorted(thread_ids() - before), owned=threads)
                          if pinned else None)
        self.narrow, self.activity, self.choice, self.core_load = None, None, None, None
        if adaptive:
            self.narrow = _session(onnx_path, 1)
            self.activity = InstanceActivity(name, index)
            self.choice, self.decisions_published = SessionChoice(), 0
            self.core_load = CoreLoad() if pinned else None  # the placement's worker cores: busy?

    def _run(self, feeds):
        if self.narrow is None:
            return self.session.run(self.output_names, feeds)
        size = next(iter(feeds.values())).size
        alone = not self.activity.others_busy()
        if alone:  # the wide session's workers would take the placement's other cores: busy with other work?
            placement = self.placement
            if placement is None:
                busy = 0.0
            elif not placement.workers:  # one reachable core: no worker core at all
                busy = 1.0
            else:
                busy = self.core_load.busy(placement.workers, placement.worker_tids)
            which = self.choice.choose(size, busy)
            reason = self.choice.reason
            if self.choice.decisions != self.decisions_published:  # the choice was (re)made: show its medians
                self.decisions_published = self.choice.decisions
                self.metrics.record(choice_observations(self.activity.index, self.choice.medians_s()))
        else:
            which, reason = Session.NARROW, Reason.SIBLING_BUSY
        self.session_calls[which.value, reason.value] += 1
        started = time.perf_counter()
        outputs = (self.session if which is Session.WIDE else self.narrow).run(self.output_names, feeds)
        # timed alone throughout: comparable with the other session's times (session_choice.py)
        self.choice.record(size, which, time.perf_counter() - started, alone and not self.activity.others_busy())
        return outputs

    def execute(self, requests):
        started = time.perf_counter()
        if self.placement is not None:  # the partition's cores may have moved since the last batch
            self.placement.keep()
        arrays, problems = self._request_feeds(requests)
        valid = [i for i, p in enumerate(problems) if p is None]
        answers, stats = [], None
        if valid:
            with self.activity.computing() if self.activity else contextlib.nullcontext():
                answers, stats = execute_batch(self._run, self.layout, [arrays[i] for i in valid])
        by_request = dict(zip(valid, answers))
        overflowed = ({valid[k]: message for k, message in non_finite_answer_errors(self.output_names, answers).items()}
                      if self.reject_non_finite else {})
        responses = []
        for i, problem in enumerate(problems):
            if problem is not None:
                responses.append(error_response(problem, pb_utils.TritonError.INVALID_ARG))
            elif isinstance(by_request[i], Exception):
                responses.append(framework_error_response(by_request[i]))
            elif i in overflowed:
                responses.append(error_response(overflowed[i], pb_utils.TritonError.INVALID_ARG))
            else:
                tensors = [
                    pb_utils.Tensor(name, as_sent(out, self.output_dtypes[name]))
                    for name, out in zip(self.output_names, by_request[i])
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        # built on the metrics thread, not on the request's path (serving/backend/stub_metrics.py)
        calls, self.session_calls = self.session_calls, collections.Counter()
        self.metrics.record_later(batch_observations, stats, time.perf_counter() - started, len(requests) - len(valid),
                                  self.layout.buckets, calls)
        return responses

    def finalize(self):
        self.metrics.close()
        if self.activity is not None:
            self.activity.close()
