"""Model repository for the decoupled-model and generate tests: the bundled ``repeat`` example
and small python models written the way Triton users write them; and ``Stream``, the
tritonclient gRPC stream those tests drive them with."""

from __future__ import annotations

import queue
import shutil
import textwrap
import time
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient

EXAMPLES = Path(__file__).resolve().parents[2] / "tools" / "examples"

TEXT_IO = """
input [
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "N" data_type: TYPE_INT32 dims: [ 1 ] optional: true }
]
output [
  { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "I" data_type: TYPE_INT32 dims: [ -1 ] }
]
"""

DEC_CONFIG = (
    'backend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n' + TEXT_IO
)

# One behaviour per TEXT value; "report" answers with what earlier requests noted.
DEC_MODEL = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
NOTES = {}


def reply(text, i):
    return pb_utils.InferenceResponse([
        pb_utils.Tensor("TEXT", np.array([text.encode()], dtype=object)),
        pb_utils.Tensor("I", np.array([i], dtype=np.int32))])


def failure(message):
    return pb_utils.InferenceResponse(
        error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()[0].decode()
            n_in = pb_utils.get_input_tensor_by_name(request, "N")
            n = 3 if n_in is None else int(n_in.as_numpy()[0])
            if text == "raise":
                raise ValueError("boom")
            if text == "return":
                return [None] * len(requests)
            if text == "report":
                sender.send(reply(json.dumps(NOTES), 0), flags=FINAL)
            elif text == "count":
                for i in range(n):
                    sender.send(reply(f"count{i}", i))
                sender.send(flags=FINAL)
            elif text == "last":
                for i in range(n):
                    sender.send(reply(f"last{i}", i), flags=FINAL if i == n - 1 else 0)
            elif text == "err":
                sender.send(reply("err0", 0))
                sender.send(failure("bad chunk 1"))
                sender.send(reply("err2", 2), flags=FINAL)
            elif text == "errfinal":
                sender.send(failure("no luck"), flags=FINAL)
            elif text == "misuse":
                for label, call in (("badflag", lambda: sender.send(reply("x", 0), flags=4)),
                                    ("noresp", lambda: sender.send()),
                                    ("final", lambda: sender.send(flags=FINAL)),
                                    ("after", lambda: sender.send(reply("x", 0)))):
                    try:
                        call()
                        NOTES[label] = "ok"
                    except Exception as exc:
                        NOTES[label] = f"{type(exc).__name__}: {exc}"
            elif text == "thread":
                returned = threading.Event()
                threading.Thread(target=self.later, args=(sender, returned, n), daemon=True).start()
                returned.set()  # just before execute returns
            elif text == "cancel":
                threading.Thread(target=self.until_cancelled, args=(request, sender),
                                 daemon=True).start()
        return None

    @staticmethod
    def later(sender, returned, n):
        # wait for execute's return (a sleep alone lost that race once on a loaded machine),
        # then give it time to be gone
        returned.wait(10)
        time.sleep(0.05)
        NOTES["sent_after_return"] = returned.is_set()
        for i in range(n):
            sender.send(reply(f"thread{i}", i))
        sender.send(flags=FINAL)

    @staticmethod
    def until_cancelled(request, sender):
        i = 0
        deadline = time.monotonic() + 20
        while not sender.is_cancelled() and time.monotonic() < deadline:
            sender.send(reply(f"tick{i}", i))
            i += 1
            time.sleep(0.02)
        NOTES["cancelled"] = [sender.is_cancelled(), request.is_cancelled(), i]
        sender.send(flags=FINAL)
"""

ASYNC_MODEL = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()[0].decode()
            for i in range(2):
                await asyncio.sleep(0.005)
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("TEXT", np.array([f"async{i}".encode()], dtype=object)),
                    pb_utils.Tensor("I", np.array([i], dtype=np.int32))]))
                if text == "raise":
                    raise RuntimeError("async boom")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

PLAIN_CONFIG = 'backend: "python"\nmax_batch_size: 0\n' + TEXT_IO

PLAIN_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()[0]
            if text == b"fail":
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "asked to fail", pb_utils.TritonError.INVALID_ARG)))
                continue
            echo = text + b"|" + request.parameters().encode()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TEXT", np.array([echo], dtype=object)),
                pb_utils.Tensor("I", np.array([1, 2, 3], dtype=np.int32))]))
        return out
"""

BATCHED_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""

BATCHED_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
"""


def _write(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


def build_decoupled_repo(repo: Path) -> Path:
    """``repeat`` (the bundled example), ``dec``, ``dec_async``, ``plain``, ``batched``."""
    shutil.copytree(EXAMPLES / "repeat", repo / "repeat")
    _write(repo, "dec", DEC_CONFIG, DEC_MODEL)
    _write(repo, "dec_async", DEC_CONFIG, ASYNC_MODEL)
    _write(repo, "plain", PLAIN_CONFIG, PLAIN_MODEL)
    _write(repo, "batched", BATCHED_CONFIG, BATCHED_MODEL)
    return repo


def is_final(result: Any) -> bool:
    """The ``triton_final_response`` flag of a stream result."""
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


class Stream:
    """A tritonclient gRPC stream whose results land in a queue."""

    def __init__(self, url: str) -> None:
        self.client = grpcclient.InferenceServerClient(url)
        self.results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(
        self,
        model: str,
        inputs: list[grpcclient.InferInput],
        request_id: str,
        empty_final: bool = False,
    ) -> None:
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, enable_empty_final_response=empty_final
        )

    def take(self, timeout: float = 10.0) -> tuple[Any, Any]:
        return self.results.get(timeout=timeout)

    def until_final(self, count: int = 1, timeout: float = 10.0) -> list[tuple[Any, Any]]:
        """Every message up to the ``count``-th final response (errors are kept too)."""
        got: list[tuple[Any, Any]] = []
        deadline = time.monotonic() + timeout
        while count:
            result, error = self.take(max(0.01, deadline - time.monotonic()))
            got.append((result, error))
            if result is not None and is_final(result):
                count -= 1
        return got

    def run(
        self,
        model: str,
        inputs: list[grpcclient.InferInput],
        empty_final: bool = True,
        expect: int | None = None,
        timeout: float = 20.0,
    ) -> list[tuple[Any, Any]]:
        """Send one request; every message up to its final one (or the first ``expect``)."""
        self.send(model, inputs, "rs", empty_final)
        if expect is None:
            return self.until_final(1, timeout)
        return [self.take(timeout) for _ in range(expect)]

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()
