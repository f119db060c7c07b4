"""Fast Python models run on the server's event loop thread, as short ONNX batches do.

Handing a request to the instance thread and back costs two thread wake-ups, more than a fast
``execute``; once a model's recent executes took under 100 us, the core runs them inline.
What stays: ``initialize`` on the instance thread, ``get_model_dir()`` answering the model's
own directory, and the opt-out ``TRITONLITE_INLINE_EXECUTE: "false"``. Models that could block
the loop (BLS, ``async def execute``, decoupled) never run inline.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import write_python_model

pytestmark = pytest.mark.timeout(90)

WHERE = '''
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.init_thread = threading.current_thread().name

    def execute(self, requests):
        info = "|".join([self.init_thread, threading.current_thread().name,
                         pb_utils.get_model_dir()])
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("OUT", np.array([info.encode()], dtype=object))])
            for _ in requests]
'''

CONFIG = '''
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }
'''

OPT_OUT = 'parameters { key: "TRITONLITE_INLINE_EXECUTE" value { string_value: "false" } }\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("python_inline_repo")
    write_python_model(repo, "fast", WHERE, CONFIG)
    write_python_model(repo, "pinned", WHERE, CONFIG + OPT_OUT)
    s = start_server(repo, "--allow-grpc=false")
    s.repo = repo  # type: ignore[attr-defined]
    yield s
    s.stop()


def _where(server: Server, model: str, n: int = 150) -> set[tuple[str, str, str]]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        seen = set()
        for _ in range(n):
            inp = httpclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([1], dtype=np.int32))
            out = client.infer(model, [inp]).as_numpy("OUT")[0].decode()
            seen.add(tuple(out.split("|")))
        return seen  # type: ignore[return-value]
    finally:
        client.close()


def test_a_fast_model_moves_to_the_loop_and_keeps_its_model_dir(server: Server) -> None:
    seen = _where(server, "fast")
    init_threads = {s[0] for s in seen}
    exec_threads = {s[1] for s in seen}
    assert len(init_threads) == 1 and "MainThread" not in init_threads
    assert "MainThread" in exec_threads, seen  # inline, on the event loop
    assert {s[2] for s in seen} == {str(server.repo / "fast" / "1")}  # type: ignore[attr-defined]


def test_the_opt_out_keeps_execute_on_the_instance_thread(server: Server) -> None:
    seen = _where(server, "pinned")
    assert {s[1] for s in seen} == {s[0] for s in seen}, seen  # always initialize's thread
