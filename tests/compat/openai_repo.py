"""Model repository for the OpenAI-compatible endpoint tests: the bundled ``textgen`` and
``embed_chars`` examples, and small python models for every way a model can answer or fail."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[2] / "tools" / "examples"

TEXT_IO = """
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Decoupled; one behaviour per prompt, "report" answers with what earlier requests noted.
TICKER = """
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
NOTES = {}


def text(value):
    return pb_utils.InferenceResponse(
        [pb_utils.Tensor("text_output", np.array([value.encode()], dtype=object))])


def failure(message):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            prompt = prompt.reshape(-1)[0].decode()
            if prompt == "raise":
                raise ValueError("the model raised")
            if prompt == "report":
                sender.send(text(json.dumps(NOTES)), flags=FINAL)
            elif prompt == "fail":
                sender.send(failure("the model says no"), flags=FINAL)
            elif prompt == "fail-late":
                sender.send(text("partial"))
                sender.send(failure("failed after one chunk"), flags=FINAL)
            elif prompt == "nothing":
                sender.send(flags=FINAL)
            else:
                threading.Thread(target=self.tick, args=(prompt, sender), daemon=True).start()
        return None

    @staticmethod
    def tick(key, sender):
        NOTES[key] = "running"
        i = 0
        deadline = time.monotonic() + 20
        while not sender.is_cancelled() and time.monotonic() < deadline:
            sender.send(text(f"t{i} "))
            i += 1
            time.sleep(0.02)
        NOTES[key] = [sender.is_cancelled(), i]
        sender.send(flags=FINAL)
"""

UPPER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            upper = np.array([v.decode().upper().encode() for v in value.reshape(-1)], dtype=object)
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("text_output", upper.reshape(value.shape))]))
        return out
"""

EMBED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            rows = np.array([[len(t), t.count(b"a"), 1.0] for t in texts], dtype=np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("embedding", rows{reshape})]))
        return out
"""


def _model(repo: Path, name: str, config: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


def _template(source: str) -> str:
    escaped = source.replace("\\", "\\\\").replace('"', '\\"')
    return f'parameters {{ key: "chat_template" value {{ string_value: "{escaped}" }} }}\n'


def build_openai_repo(repo: Path, token_delay_ms: int = 0) -> Path:
    for name in ("textgen", "embed_chars"):
        shutil.copytree(EXAMPLES / name, repo / name)
    decoupled = "max_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n"
    _model(repo, "ticker", decoupled + TEXT_IO, TICKER)
    _model(repo, "upper", "max_batch_size: 4\n" + TEXT_IO, UPPER)
    refuse = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('no system messages here') }}{% endif %}"
        "[{{ m['content'] }}]{% endfor %}"
    )
    _model(repo, "picky_chat", "max_batch_size: 0\n" + TEXT_IO + _template(refuse), UPPER)
    _model(repo, "broken_chat", "max_batch_size: 0\n" + TEXT_IO + _template("{% for %}"), UPPER)
    extra = TEXT_IO.replace(
        "dims: [ 1 ] } ]", 'dims: [ 1 ] }, { name: "EXTRA" data_type: TYPE_INT32 dims: [ 1 ] } ]', 1
    )
    _model(repo, "needs_extra", "max_batch_size: 0\n" + extra, UPPER)
    flat = (
        "max_batch_size: 0\n"
        'input [ { name: "text_input" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
    )
    _model(repo, "embed_flat", flat, EMBED.replace("{reshape}", ""))
    _model(
        repo, "embed_wrong", flat.replace("-1, 3", "-1"), EMBED.replace("{reshape}", ".reshape(-1)")
    )
    return repo


def embed_flat_reference(texts: list[str]) -> np.ndarray:
    return np.array([[len(t.encode()), t.encode().count(b"a"), 1.0] for t in texts], np.float32)
