"""textgen: a deterministic stand-in for a language model, streamed from a thread of its own.

The "tokens" are the words of the prompt's last line that is not a ``<|role|>`` marker, in
reverse order. execute only reads the request and starts the thread, so the instance takes the
next request at once; a cancelled request (the client left) stops its stream early.
"""

import math
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _words(prompt, temperature, top_p, seed):
    lines = [
        line
        for line in prompt.splitlines()
        if line.strip() and not (line.startswith("<|") and line.endswith("|>"))
    ]
    words = lines[-1].split()[::-1] if lines else []
    if temperature > 0:
        np.random.default_rng(seed).shuffle(words)
    return words[: math.ceil(top_p * len(words))]


def _response(text, count):
    return pb_utils.InferenceResponse(
        [
            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object)),
            pb_utils.Tensor("num_tokens", np.array([count], dtype=np.int32)),
        ]
    )


class TritonPythonModel:
    def initialize(self, args):
        import json

        params = json.loads(args["model_config"]).get("parameters", {})
        self.delay_s = float(params.get("token_delay_ms", {}).get("string_value", "0")) / 1000
        self.threads = []

    def execute(self, requests):
        for request in requests:
            prompt = _scalar(request, "text_input", b"").decode("utf-8", "replace")
            stops = pb_utils.get_input_tensor_by_name(request, "stop")
            stops = [] if stops is None else [s.decode() for s in stops.as_numpy().reshape(-1)]
            words = _words(
                prompt,
                float(_scalar(request, "temperature", 0.0)),
                float(_scalar(request, "top_p", 1.0)),
                int(_scalar(request, "seed", 0)),
            )
            for i, word in enumerate(words):
                if any(stop in word for stop in stops):
                    words = words[:i]
                    break
            words = words[: int(_scalar(request, "max_tokens", 16))]
            streamed = bool(_scalar(request, "stream", True))
            worker = threading.Thread(
                target=self._send,
                args=(request.get_response_sender(), words, streamed),
                daemon=True,
            )
            worker.start()
            self.threads = [t for t in self.threads if t.is_alive()] + [worker]
        return None

    def _send(self, sender, words, streamed):
        if not streamed:
            sender.send(_response(" ".join(words), len(words)), flags=FINAL)
            return
        for i, word in enumerate(words):
            if self.delay_s:
                time.sleep(self.delay_s)
            if sender.is_cancelled():
                break
            sender.send(_response(word if i == 0 else " " + word, 1))
        sender.send(flags=FINAL)

    def finalize(self):
        for worker in self.threads:
            worker.join(timeout=5.0)
