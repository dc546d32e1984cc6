"""`onnxruntime_cpu`: a Triton Python-based backend that runs a model's ONNX file in ONNX Runtime.

Triton's own onnxruntime backend is not on any package registry for a CPU-only machine, so on CPU
every ONNX model is served by this one model.py (Triton looks it up as
`<backend-directory>/onnxruntime_cpu/model.py` for configs with `backend: "onnxruntime_cpu"`).

Each call to `execute` receives every request of one dynamic batch. They are concatenated along
the batch axis and run as ONE ONNX Runtime call, then the outputs are split back per request:
batching only pays if the framework sees the batch. Inputs with a variable axis (token ids) are
right-padded to the longest request in the batch with the `pad_value` parameter.

Config parameters (all strings): `onnx_file` (default model.onnx, in the version directory),
`intra_op_num_threads` (0 = ONNX Runtime's default), `pad_value` (default 0).
"""
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


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
        onnx_path = os.path.join(version_dir, params.get("onnx_file", "model.onnx"))
        if not os.path.exists(onnx_path):
            raise pb_utils.TritonModelException(
                f"model '{args['model_name']}': ONNX file {onnx_path} does not exist; run `make build-engines`."
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params.get("intra_op_num_threads", "0") or 0)
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.pad_value = int(params.get("pad_value", "0") or 0)
        self.input_names = [t["name"] for t in config["input"]]
        self.output_names = [t["name"] for t in config["output"]]
        self.output_dtypes = {
            t["name"]: pb_utils.triton_string_to_numpy(t["data_type"]) for t in config["output"]
        }

    def execute(self, requests):
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
            outputs = self.session.run(self.output_names, feeds)
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
