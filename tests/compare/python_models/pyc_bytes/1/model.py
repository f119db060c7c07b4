"""BYTES in and out: the object array as received, str objects, a numpy S array, lengths."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            as_str = np.array(
                [[v.decode("utf-8", "replace").upper() for v in row] for row in x], dtype=object
            )
            np_bytes = np.array([[v + b"!" for v in row] for row in x], dtype=np.bytes_)
            lengths = np.array([[len(v) for v in row] for row in x], dtype=np.int32)
            first = type(x.flat[0]).__name__ if x.size else "-"
            kinds = f"{x.dtype} {first} {x.shape}"
            kinds_arr = np.array([[kinds.encode()]] * x.shape[0], dtype=object)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("SAME", x),
                        pb_utils.Tensor("AS_STR", as_str),
                        pb_utils.Tensor("AS_NP_BYTES", np_bytes),
                        pb_utils.Tensor("LENGTHS", lengths),
                        pb_utils.Tensor("KINDS", kinds_arr),
                    ]
                )
            )
        return responses
