"""A stand-in for the Python backend's `triton_python_backend_utils`, for ONE purpose: timing this
project's own Python (model.py's execute) outside Triton (execute_outside_triton.py). It serves
nothing and tests nothing; every serving test talks to a real tritonserver."""
import numpy as np
class Tensor:
    def __init__(self, name, array): self._name, self._a = name, array
    def as_numpy(self): return self._a
    def name(self): return self._name
def get_input_tensor_by_name(request, name): return Tensor(name, request[name])
class TritonError:
    INVALID_ARG, INTERNAL = 3, 13
    def __init__(self, msg, code=13): self.msg, self.code = msg, code
class InferenceResponse:
    def __init__(self, output_tensors=None, error=None): self.o, self.e = output_tensors, error
class Logger:
    @staticmethod
    def log_info(m): pass
    @staticmethod
    def log_warn(m): pass
class _Metric:
    def __init__(self, labels): pass
    def increment(self, v): pass
    def set(self, v): pass
class MetricFamily:
    COUNTER, GAUGE = 0, 1
    def __init__(self, name, description, kind): pass
    def Metric(self, labels): return _Metric(labels)
_D = {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64, "TYPE_STRING": np.object_}
def triton_string_to_numpy(s): return _D[s]
