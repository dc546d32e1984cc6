import numpy as np
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "image").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("probabilities", np.zeros((x.shape[0], 10), np.float32))]))
        return out
