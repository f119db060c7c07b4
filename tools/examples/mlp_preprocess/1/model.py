"""Standardize each row of RAW: NORMALIZED = (RAW - mean) / (std + 1e-6)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW").as_numpy()
            mean = raw.mean(axis=-1, keepdims=True)
            std = raw.std(axis=-1, keepdims=True)
            out = ((raw - mean) / (std + 1e-6)).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("NORMALIZED", out)]))
        return responses
