"""auto_complete_config fills an almost empty config.pbtxt: batching, I/O, dynamic batching."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.add_input(
            {"name": "OPT", "data_type": "TYPE_INT32", "dims": [-1], "optional": True}
        )
        auto_complete_model_config.add_output(
            {"name": "OUT", "data_type": "TYPE_FP32", "dims": [3]}
        )
        auto_complete_model_config.add_output(
            {"name": "LABEL", "data_type": "TYPE_STRING", "dims": [1]}
        )
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            opt = pb_utils.get_input_tensor_by_name(request, "OPT")
            label = "with OPT" if opt is not None else "without OPT"
            labels = np.array([[label.encode()]] * x.shape[0], dtype=object)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUT", (x * 2).astype(np.float32)),
                        pb_utils.Tensor("LABEL", labels),
                    ]
                )
            )
        return responses
