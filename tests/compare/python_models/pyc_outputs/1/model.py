"""Outputs that do not match the config: other dtypes and shapes, undeclared, unicode, none."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensors(mode):
    f32 = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    if mode == 0:
        return [pb_utils.Tensor("OUT", f32.astype(np.float64))]
    if mode == 1:
        return [pb_utils.Tensor("TXT", np.array(["a", "bc", "\u00e9"]))]
    if mode == 2:
        return [pb_utils.Tensor("OUT", f32), pb_utils.Tensor("UNDECLARED", f32)]
    if mode == 3:
        return []
    if mode == 4:
        return [pb_utils.Tensor("OUT", f32.reshape(3, 1))]
    if mode == 5:
        return [pb_utils.Tensor("OUT", np.arange(8, dtype=np.float32)[::2])]
    if mode == 6:
        return [pb_utils.Tensor("FLAG", np.array([True, False]))]
    if mode == 7:
        return [pb_utils.Tensor("OUT", f32), pb_utils.Tensor("OUT", f32 * 2)]
    if mode == 8:
        return [pb_utils.Tensor("TXT", np.array([b"x", b"yz"], dtype=np.bytes_))]
    if mode == 9:
        return [pb_utils.Tensor("OUT", np.array(3.0, dtype=np.float32))]
    return [
        pb_utils.Tensor("OUT", f32),
        pb_utils.Tensor("TXT", np.array([b"t"], dtype=object)),
        pb_utils.Tensor("FLAG", np.array([True])),
    ]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            try:
                tensors = _tensors(mode)
            except Exception as exc:  # what Tensor() refuses is itself compared
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}")
                    )
                )
                continue
            if mode == 10:
                responses.append(
                    pb_utils.InferenceResponse(
                        tensors, error=pb_utils.TritonError("outputs and an error")
                    )
                )
            else:
                responses.append(pb_utils.InferenceResponse(tensors))
        return responses
