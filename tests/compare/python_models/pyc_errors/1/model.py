"""One failure per MODE: error responses with and without codes, exceptions, wrong counts."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            err = None
            if mode == 1:
                err = pb_utils.TritonError("plain error message")
            elif mode == 2:
                err = pb_utils.TritonError("bad argument here", pb_utils.TritonError.INVALID_ARG)
            elif mode == 3:
                err = pb_utils.TritonError("come back later", pb_utils.TritonError.UNAVAILABLE)
            elif mode == 4:
                err = pb_utils.TritonError("no such thing", pb_utils.TritonError.NOT_FOUND)
            elif mode == 5:
                raise ValueError("execute raised this")
            elif mode == 6:
                return []
            elif mode == 7:
                raise pb_utils.TritonModelException("model exception text")
            elif mode == 8:
                return [None]
            elif mode == 9:
                return "not a list"
            if err is not None:
                responses.append(pb_utils.InferenceResponse(error=err))
            else:
                responses.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUT", np.array([mode * 10], dtype=np.int32))]
                    )
                )
        return responses
