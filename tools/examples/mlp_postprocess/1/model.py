"""PROBABILITIES = softmax(LOGITS) per row; CLASS = argmax(LOGITS) per row."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probs = (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)
            top = logits.argmax(axis=-1).astype(np.int64).reshape(-1, 1)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("PROBABILITIES", probs), pb_utils.Tensor("CLASS", top)]
                )
            )
        return responses
