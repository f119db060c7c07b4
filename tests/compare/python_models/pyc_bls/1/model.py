"""BLS: exec() on the model named by TARGET; its error comes back as this model's error."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            target = pb_utils.get_input_tensor_by_name(request, "TARGET").as_numpy()[0].decode()
            raise_it = target.startswith("raise:")
            target = target.split(":", 1)[1] if raise_it else target
            bls = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["Y"],
                inputs=[pb_utils.Tensor("X", x.as_numpy())],
            )
            result = bls.exec()
            if result.has_error():
                if raise_it:
                    raise pb_utils.TritonModelException(result.error().message())
                info = {
                    "error": result.error().message(),
                    "code": int(result.error().code()),
                    "outputs": len(result.output_tensors()),
                }
                responses.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=object))]
                    )
                )
                continue
            y = pb_utils.get_output_tensor_by_name(result, "Y")
            info = {
                "names": [t.name() for t in result.output_tensors()],
                "missing": pb_utils.get_output_tensor_by_name(result, "NOPE") is None,
            }
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("Y", y.as_numpy()),
                        pb_utils.Tensor("INFO", np.array([json.dumps(info)], dtype=object)),
                    ]
                )
            )
        return responses
