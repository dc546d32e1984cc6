"""`raising_model`: a Python-backend test model that fails on purpose, for the fault tests.

Input `x` (FP32 [4]) is doubled into output `y`, unless a request carries a trigger value:
- RAISE_TRIGGER (-1.0): `execute` raises a RuntimeError (a bug in model code). Triton answers
  every request of that execution with the exception's message; the model keeps serving.
- EXIT_TRIGGER (-2.0): the backend stub process exits (a crash in native code, an OOM kill).
  Triton answers "Stub process ... is not healthy" from then on, until the model is reloaded.

The tests render this model's config.pbtxt into a temporary repository (see test_faults.py).
"""
import os

import numpy as np
import triton_python_backend_utils as pb_utils

RAISE_TRIGGER = -1.0
EXIT_TRIGGER = -2.0


class TritonPythonModel:
    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "x").as_numpy() for r in requests]
        if any((x == EXIT_TRIGGER).any() for x in inputs):
            os._exit(17)
        if any((x == RAISE_TRIGGER).any() for x in inputs):
            raise RuntimeError(f"raising_model: trigger value {RAISE_TRIGGER} in the input (deliberate fault)")
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", (x * 2).astype(np.float32))]) for x in inputs]
