"""`onnxruntime_cpu`: a Triton Python-based backend that runs a model's ONNX file in ONNX Runtime.

Triton's own onnxruntime backend is not on any package registry for a CPU-only machine, so on CPU
every ONNX model is served by this one model.py (Triton looks it up as
`<backend-directory>/onnxruntime_cpu/model.py` for configs with `backend: "onnxruntime_cpu"`).

Each call to `execute` receives every request of one dynamic batch. They are concatenated along
the batch axis and run as ONE ONNX Runtime call, then the outputs are split back per request:
batching only pays if the framework sees the batch. Inputs with a variable axis (token ids) are
right-padded to the longest request in the batch with the `pad_value` parameter.

Config parameters (all strings): `onnx_file` (default model.onnx, in the version directory),
`intra_op_num_threads` (0 = the partition's thread count from $SERVING_INTRA_OP_THREADS, set by the
partition launcher from its CPU set; ONNX Runtime's default when unset), `pad_value` (default 0).
`reject_non_finite` (default true): answer a request holding NaN/Inf with INVALID_ARG instead of
computing it (checks in serving/backend_checks.py; the rest of the batch is still served).

Sequence-length bucketing (off unless `sequence_buckets` is set; fixed-shape models leave it off):
`sequence_buckets` = increasing token-count boundaries, e.g. "16,32,64,128", and
`sequence_length_input` = the input whose non-zero entries mark real tokens (the attention mask).
Then the gathered rows of the batch are grouped by real length into those buckets, each bucket is
trimmed to its own longest real row and run as one ONNX Runtime call (at most one call per
bucket), and the outputs are put back in request order. Every input must be [batch, sequence] and
no output may have a sequence axis. Why: padding a mixed batch to its longest text wastes most of
a transformer's work (serving/sequence_buckets.py, scripts/serving/padding_report.py).
"""
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

from serving.backend_checks import first_request_error, model_file_in_version_dir
from serving.sequence_buckets import (
    BUCKETS_PARAMETER,
    LENGTH_INPUT_PARAMETER,
    parse_bucket_boundaries,
    run_in_length_buckets,
)


def _pad_to(array, shape, pad_value):
    if tuple(array.shape) == tuple(shape):
        return array
    padded = np.full(shape, pad_value, dtype=array.dtype)
    padded[tuple(slice(0, n) for n in array.shape)] = array
    return padded


def concat_padded(arrays, pad_value=0):
    """Concatenate along axis 0, right-padding every other axis to the largest size seen."""
    target = [max(a.shape[axis] for a in arrays) for axis in range(1, arrays[0].ndim)]
    return np.concatenate([_pad_to(a, (a.shape[0], *target), pad_value) for a in arrays], axis=0)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        try:
            onnx_path = model_file_in_version_dir(version_dir, params.get("onnx_file", "model.onnx"))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{args['model_name']}': parameter onnx_file: {exc}") from None
        if not os.path.exists(onnx_path):
            raise pb_utils.TritonModelException(
                f"model '{args['model_name']}': ONNX file {onnx_path} does not exist; run `make build-engines`."
            )
        options = ort.SessionOptions()
        # 0 in the config: the partition launcher's thread count (its CPU set size), else ORT's default.
        options.intra_op_num_threads = int(params.get("intra_op_num_threads", "0") or 0) or int(
            os.environ.get("SERVING_INTRA_OP_THREADS", "0") or 0)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.pad_value = int(params.get("pad_value", "0") or 0)
        self.reject_non_finite = params.get("reject_non_finite", "true").strip().lower() != "false"
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]
        self.output_dtypes = {
            t["name"]: pb_utils.triton_string_to_numpy(t["data_type"]) for t in config["output"]
        }
        self.buckets, self.length_input = self._bucketing_settings(args["model_name"], config, params)
        if self.buckets:
            pb_utils.Logger.log_info(
                f"model '{args['model_name']}': sequence-length bucketing on, boundaries {list(self.buckets)}, "
                f"real lengths from '{self.length_input}'"
            )

    @staticmethod
    def _bucketing_settings(model_name, config, params):
        """(boundaries, length input name) when bucketing is configured and possible, else ((), None)."""
        try:
            buckets = parse_bucket_boundaries(params.get(BUCKETS_PARAMETER, ""))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"model '{model_name}': {exc}") from None
        if not buckets:
            return (), None
        length_input = params.get(LENGTH_INPUT_PARAMETER, "")
        inputs = {t["name"]: [int(d) for d in t.get("dims", [])] for t in config["input"]}
        problems = []
        if length_input not in inputs:
            problems.append(f"`{LENGTH_INPUT_PARAMETER}` = {length_input!r} is not one of the inputs {sorted(inputs)}")
        problems += [f"input '{n}' has dims {d}, expected [-1] (one sequence axis)" for n, d in inputs.items() if d != [-1]]
        problems += [
            f"output '{t['name']}' has a variable axis {[int(d) for d in t.get('dims', [])]}"
            for t in config["output"] if any(int(d) < 0 for d in t.get("dims", []))
        ]
        if problems:
            raise pb_utils.TritonModelException(
                f"model '{model_name}': `{BUCKETS_PARAMETER}` = {params[BUCKETS_PARAMETER]!r} cannot be used: "
                + "; ".join(problems) + "."
            )
        return buckets, length_input

    def _run(self, feeds):
        """One ONNX Runtime call for the batch, or one per length bucket when bucketing is on."""
        if not self.buckets:
            return self.session.run(self.output_names, feeds)
        return run_in_length_buckets(
            lambda part: self.session.run(self.output_names, part), feeds, self.length_input, self.buckets
        )

    def execute(self, requests):
        if self.reject_non_finite:
            errors = [
                first_request_error((name, pb_utils.get_input_tensor_by_name(request, name).as_numpy()) for name in self.input_names)
                for request in requests
            ]
            if any(errors):  # answer the bad requests with their error; run the good ones as one batch
                valid = [r for r, e in zip(requests, errors) if e is None]
                good = iter(self.execute(valid) if valid else ())
                return [
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(e, pb_utils.TritonError.INVALID_ARG)) if e else next(good)
                    for e in errors
                ]
        arrays = [
            [pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.input_names]
            for request in requests
        ]
        sizes = [inputs[0].shape[0] for inputs in arrays]
        feeds = {
            name: concat_padded([inputs[i] for inputs in arrays], self.pad_value)
            for i, name in enumerate(self.input_names)
        }
        try:
            outputs = self._run(feeds)
        except Exception as exc:  # ONNX Runtime rejected the batch: answer every request, keep serving
            error = pb_utils.TritonError(f"ONNX Runtime failed on a batch of {sum(sizes)}: {exc}")
            return [pb_utils.InferenceResponse(error=error) for _ in requests]
        responses = []
        start = 0
        for size in sizes:
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(out[start:start + size]).astype(self.output_dtypes[name], copy=False))
                for name, out in zip(self.output_names, outputs)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += size
        return responses
