"""`batch_probe`: a Python-backend test model that makes Triton's queueing observable.

Each execution sleeps a fixed time (config parameter `sleep_ms`), so a test can fill queues
deterministically on a machine where the real models answer in microseconds. Every response
reports what happened to its request, so a test can reconstruct the schedule exactly:

- `tag` (input, FP32 [1]): a label the caller chooses, echoed back as `tag_out`; tags in [1, 2)
  mark realtime items (e.g. 1.0 + i / 1000 for request i), and `tagged_items` counts them in the
  same execution.
- `execution` (INT64 [1]): 0, 1, 2, ... per execution of this model instance.
- `start_ns` (INT64 [1]): CLOCK_MONOTONIC at the start of the execution (the same clock as the
  caller's `time.monotonic_ns()` on this machine).
- `batch_items` (INT64 [1]): items in the execution (sum of the requests' batch sizes).
"""
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        self.sleep_s = float(params.get("sleep_ms", "50")) / 1000.0
        self.execution = 0

    def execute(self, requests):
        start_ns = time.monotonic_ns()
        tags = [pb_utils.get_input_tensor_by_name(r, "tag").as_numpy().reshape(-1) for r in requests]
        batch_items = int(sum(t.shape[0] for t in tags))
        tagged_items = int(sum(int(((t >= 1) & (t < 2)).sum()) for t in tags))
        time.sleep(self.sleep_s)
        responses = []
        for t in tags:
            n = t.shape[0]

            def column(value, dtype=np.int64):
                return np.full((n, 1), value, dtype=dtype)

            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("tag_out", t.reshape(n, 1).astype(np.float32)),
                pb_utils.Tensor("execution", column(self.execution)),
                pb_utils.Tensor("start_ns", column(start_ns)),
                pb_utils.Tensor("batch_items", column(batch_items)),
                pb_utils.Tensor("tagged_items", column(tagged_items)),
            ]))
        self.execution += 1
        return responses
