"""More BLS: decoupled exec, a called model's coded error, bad inputs, parameters, timeouts."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _describe(resp):
    d = {"error": None, "outputs": {}}
    if resp.has_error():
        d["error"] = resp.error().message()
        d["code"] = int(resp.error().code())
    for t in resp.output_tensors():
        a = t.as_numpy()
        d["outputs"][t.name()] = [
            a.dtype.str,
            list(a.shape),
            a.reshape(-1).tolist() if a.dtype != np.object_ else [v.decode() for v in a.flat],
        ]
    return d


def _req(model, inputs, outputs=(), **kw):
    return pb_utils.InferenceRequest(
        model_name=model, inputs=inputs, requested_output_names=list(outputs), **kw
    )


def _run(case):
    n = pb_utils.Tensor("N", np.array([3], dtype=np.int32))
    if case == "decoupled":
        return [_describe(r) for r in _req("pyc_repeat", [n], ["OUT"]).exec(decoupled=True)]
    if case == "decoupled_error":
        neg = pb_utils.Tensor("N", np.array([-1], dtype=np.int32))
        return [_describe(r) for r in _req("pyc_repeat", [neg], ["OUT"]).exec(decoupled=True)]
    if case == "coded_error":
        mode = pb_utils.Tensor("MODE", np.array([2], dtype=np.int32))
        return _describe(_req("pyc_errors", [mode], ["OUT"]).exec())
    if case == "raised_in_callee":
        mode = pb_utils.Tensor("MODE", np.array([5], dtype=np.int32))
        return _describe(_req("pyc_errors", [mode], ["OUT"]).exec())
    if case == "wrong_dtype":
        x = pb_utils.Tensor("X", np.array([1, 2], dtype=np.int32))
        return _describe(_req("pyc_adder", [x], ["Y"]).exec())
    if case == "missing_input":
        return _describe(_req("pyc_adder", [], ["Y"]).exec())
    if case == "unknown_output":
        x = pb_utils.Tensor("X", np.array([1, 2], dtype=np.float32))
        return _describe(_req("pyc_adder", [x], ["NOPE"]).exec())
    if case == "no_outputs_requested":
        x = pb_utils.Tensor("X", np.array([1, 2], dtype=np.float32))
        return _describe(_req("pyc_adder", [x]).exec())
    if case == "parameters":
        half = pb_utils.Tensor("IN", np.array([1, 2], dtype=np.float16))
        r = _req(
            "pyc_introspect",
            [half],
            ["REQUEST"],
            request_id="inner",
            parameters={"k": "v", "n": 3, "t": False},
        ).exec()
        d = _describe(r)
        if not r.has_error():
            d["outputs"]["REQUEST"][2] = json.loads(d["outputs"]["REQUEST"][2][0])
        return d
    if case == "version":
        x = pb_utils.Tensor("X", np.array([1], dtype=np.float32))
        return [_describe(_req("pyc_adder", [x], ["Y"], model_version=v).exec()) for v in (1, 7)]
    if case == "batched_callee":
        x = pb_utils.Tensor("IN", np.ones((5, 3), dtype=np.float32))
        return _describe(_req("pyc_autocomplete", [x], ["OUT"]).exec())
    return {"unknown case": case}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            case = pb_utils.get_input_tensor_by_name(request, "CASE").as_numpy()[0].decode()
            try:
                report = _run(case)
            except Exception as exc:  # the exception BLS raised is part of the report
                report = {"raised": type(exc).__name__, "message": str(exc)}
            out.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("REPORT", np.array([json.dumps(report)], dtype=object))]
                )
            )
        return out
