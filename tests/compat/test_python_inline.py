"""Fast Python models run on the server's event loop thread, as short ONNX batches do.

Handing a request to the instance thread and back costs two thread wake-ups, more than a fast
``execute``; once a model's recent executes took under 300 us, the core runs them inline.
What stays: ``initialize`` on the instance thread, ``get_model_dir()`` answering the model's
own directory, and the opt-out ``TRITONLITE_INLINE_EXECUTE: "false"``. Spans measured on the
instance thread can be inflated by GIL waits, so a model that looks slow there is re-measured on
the loop now and then, ever more rarely while it stays slow. Models that could block
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

WHERE = """
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
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }
"""

# Slow only off the loop thread: how a fast model looks on its instance thread while the busy loop
# holds the GIL. And one that is slow everywhere.
EXECUTE = "    def execute(self, requests):\n"
SLOW_ON_THREAD = WHERE.replace(
    EXECUTE,
    EXECUTE
    + """\
        if threading.current_thread() is not threading.main_thread():
            import time
            time.sleep(0.001)
""",
)
SLOW = WHERE.replace(
    EXECUTE,
    EXECUTE
    + """\
        import time
        time.sleep(0.001)
""",
)
# Fast, but every 8th execute takes 4 ms (a batch preempted on a busy machine looks like this).
SPIKY = WHERE.replace(
    EXECUTE,
    EXECUTE
    + """\
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls % 8 == 0:
            import time
            time.sleep(0.004)
""",
)
assert SLOW_ON_THREAD != WHERE and SLOW != WHERE and SPIKY != WHERE

OPT_OUT = 'parameters { key: "TRITONLITE_INLINE_EXECUTE" value { string_value: "false" } }\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("python_inline_repo")
    write_python_model(repo, "fast", WHERE, CONFIG)
    write_python_model(repo, "pinned", WHERE, CONFIG + OPT_OUT)
    write_python_model(repo, "slow_on_thread", SLOW_ON_THREAD, CONFIG)
    write_python_model(repo, "slow", SLOW, CONFIG)
    write_python_model(repo, "spiky", SPIKY, CONFIG)
    s = start_server(repo, "--allow-grpc=false")
    s.repo = repo  # type: ignore[attr-defined]
    yield s
    s.stop()


def _trail(server: Server, model: str, n: int = 150) -> list[tuple[str, str, str]]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        seen = []
        for _ in range(n):
            inp = httpclient.InferInput("IN", [1], "INT32")
            inp.set_data_from_numpy(np.array([1], dtype=np.int32))
            out = client.infer(model, [inp]).as_numpy("OUT")[0].decode()
            seen.append(tuple(out.split("|")))
        return seen  # type: ignore[return-value]
    finally:
        client.close()


def _where(server: Server, model: str, n: int = 150) -> set[tuple[str, str, str]]:
    return set(_trail(server, model, n))


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


def test_a_model_slow_only_on_its_thread_is_probed_back_onto_the_loop(server: Server) -> None:
    # Its thread spans alone would keep it there for good; a probe on the loop measures it fast.
    threads = [t[1] for t in _trail(server, "slow_on_thread")]
    assert threads[0] != "MainThread", threads[:3]  # the first batch is measured on the thread
    # Mostly there from then on: a batch preempted on a loaded machine may send it back for
    # a while, and the next probe brings it home again.
    assert threads[-100:].count("MainThread") >= 75, threads


def test_a_slow_model_stays_on_its_thread_with_ever_rarer_probes(server: Server) -> None:
    threads = [t[1] for t in _trail(server, "slow")]
    on_loop = [i for i, t in enumerate(threads) if t == "MainThread"]
    # Probes after 16, then 32, then 64 thread batches: three in 150, each one batch long.
    assert 1 <= len(on_loop) <= 3, on_loop
    assert on_loop[0] >= 15, on_loop


def test_a_rare_slow_batch_does_not_send_a_fast_model_to_its_thread(server: Server) -> None:
    # Without a cap on one sample, each 4 ms batch would lift the average over the threshold
    # and the next batches would cross to the thread until it decayed.
    threads = [t[1] for t in _trail(server, "spiky", 160)]
    assert threads[-140:].count("MainThread") >= 130, threads
