"""repeat: streams IN back one element at a time, from a thread of its own.

execute only checks the request and starts the thread, so the instance takes the next request at
once while earlier ones are still streaming. A client that cancels stops its stream early.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values, delays, wait = (_input(request, n) for n in ("IN", "DELAY", "WAIT"))
            if delays.size != values.size:
                error = pb_utils.TritonError(
                    f"expected DELAY to have {values.size} elements (one per IN element), "
                    f"got {delays.size}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            worker = threading.Thread(
                target=self._stream, args=(sender, values, delays, wait), daemon=True
            )
            worker.start()
            self.threads = [t for t in self.threads if t.is_alive()] + [worker]
        return None

    @staticmethod
    def _stream(sender, values, delays, wait):
        for i, (value, delay) in enumerate(zip(values.tolist(), delays.tolist())):
            time.sleep(delay / 1000.0)
            if sender.is_cancelled():
                break
            out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
            idx = pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out, idx]))
        time.sleep(int(wait[0]) / 1000.0 if wait.size else 0.0)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for worker in self.threads:
            worker.join(timeout=5.0)
