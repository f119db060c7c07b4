"""Echoes initialize(args), pb_utils helpers and request introspection back as JSON strings."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _name(dtype):
    return None if dtype is None else np.dtype(dtype).str


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(self.config, "HALF")
        inp = pb_utils.get_input_config_by_name(self.config, "IN")
        self.utils = {
            "output_config_HALF": out,
            "input_config_IN": inp,
            "output_config_missing": pb_utils.get_output_config_by_name(self.config, "NOPE"),
            "input_config_missing": pb_utils.get_input_config_by_name(self.config, "NOPE"),
            "half_np": _name(pb_utils.triton_string_to_numpy(out["data_type"])),
            "string_np": str(pb_utils.triton_string_to_numpy("TYPE_STRING")),
            "bool_np": _name(pb_utils.triton_string_to_numpy("TYPE_BOOL")),
            "to_triton": {
                t: pb_utils.numpy_to_triton_type(getattr(np, t))
                for t in (
                    "bool_",
                    "int8",
                    "int16",
                    "int32",
                    "int64",
                    "uint8",
                    "uint16",
                    "uint32",
                    "uint64",
                    "float16",
                    "float32",
                    "float64",
                    "object_",
                    "bytes_",
                )
            },
            "to_numpy": {str(c): _name(pb_utils.triton_to_numpy_type(c)) for c in range(1, 13)},
            "error_codes": {
                c: int(getattr(pb_utils.TritonError, c))
                for c in (
                    "UNKNOWN",
                    "INTERNAL",
                    "NOT_FOUND",
                    "INVALID_ARG",
                    "UNAVAILABLE",
                    "UNSUPPORTED",
                    "ALREADY_EXISTS",
                    "CANCELLED",
                )
                if hasattr(pb_utils.TritonError, c)
            },
            "decoupled": pb_utils.using_decoupled_model_transaction_policy(self.config),
            "model_dir_is_repository": pb_utils.get_model_dir() == args["model_repository"]
            if hasattr(pb_utils, "get_model_dir")
            else "absent",
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            half = pb_utils.get_input_tensor_by_name(request, "IN")
            info = {
                "request_id": request.request_id(),
                "parameters": json.loads(request.parameters()),
                "requested_output_names": sorted(request.requested_output_names()),
                "input_names": [t.name() for t in request.inputs()],
                "input_dtype": half.as_numpy().dtype.str,
                "input_shape": list(half.shape()),
                "flags": request.flags(),
                "correlation_id": request.correlation_id(),
            }
            tensors = [
                pb_utils.Tensor("ARGS", np.array([json.dumps(self.args)], dtype=object)),
                pb_utils.Tensor("UTILS", np.array([json.dumps(self.utils)], dtype=object)),
                pb_utils.Tensor("REQUEST", np.array([json.dumps(info)], dtype=object)),
                pb_utils.Tensor("HALF", (half.as_numpy() * 2).astype(np.float16)),
            ]
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
