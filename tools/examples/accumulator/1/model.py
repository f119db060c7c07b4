"""OUTPUT = INPUT + the sequence's running sum (STATE_IN, zero at START); STATE_OUT = OUTPUT."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            running = np.where(start.reshape(state.shape) != 0, 0, state)
            total = (running + value).astype(np.float32)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)]
                )
            )
        return responses
