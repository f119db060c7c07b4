"""Statistics of a Python model's outcomes, counted as tritonserver 2.51 counts them.

An ``InferenceResponse(error=...)`` fails the request for the client, yet its execution
succeeded: Triton counts it under ``success`` (and in ``inference_count``); an exception
raised from ``execute`` fails every request of the batch (``fail``), and ``inference_count``
counts successful inferences only.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import write_python_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(90)

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x[0] == 1:
                raise pb_utils.TritonModelException("raised by the model")
            if x[0] == 2:
                out.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("answered with an error")))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("python_stats_repo")
    write_python_model(repo, "outcomes", MODEL, CONFIG)
    s = start_server(repo, "--allow-grpc=false")
    yield s
    s.stop()


def test_error_responses_are_successes_and_raised_errors_failures(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        messages = []
        for value in (0, 2, 2, 1, 0):
            inp = httpclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([value], dtype=np.int32))
            try:
                client.infer("outcomes", [inp])
                messages.append("ok")
            except InferenceServerException as exc:
                messages.append(exc.message())
        assert messages[0] == messages[4] == "ok"
        assert messages[1] == messages[2] == "answered with an error"
        assert messages[3].startswith(  # the instance name, as in Triton
            "Failed to process the request(s) for model 'outcomes_0', message: "
            "TritonModelException: raised by the model"
        ), messages[3]
        st = client.get_inference_statistics("outcomes")["model_stats"][0]
    finally:
        client.close()
    inf = st["inference_stats"]
    assert (inf["success"]["count"], inf["fail"]["count"]) == (4, 1)
    assert st["inference_count"] == 4 and st["execution_count"] == 5
