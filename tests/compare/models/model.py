"""The Python-backend model behind every Triton-side twin in tests/compare/models/.

What it computes follows from its config, the same way compare_triton.py builds the ONNX twin:
INPUT0, INPUT1 -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (in the config's type);
INPUT0 alone -> OUTPUT0 = INPUT0 (identity, BYTES included).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.inputs = [i["name"] for i in cfg["input"]]
        self.dtypes = {
            o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in cfg["output"]
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if len(self.inputs) == 2:
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                outs = [
                    pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtypes["OUTPUT0"])),
                    pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtypes["OUTPUT1"])),
                ]
            else:
                out = a if a.dtype == np.object_ else a.astype(self.dtypes["OUTPUT0"])
                outs = [pb_utils.Tensor("OUTPUT0", out)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outs))
        return responses
