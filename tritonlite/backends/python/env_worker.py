"""The worker that runs one instance of an ``EXECUTION_ENV_PATH`` python model, in that environment.

``backends/python/env.py`` starts it as ``<env>/bin/python3 env_worker.py <fd>``, where
``<fd>`` is this end of a Unix socket pair. The environment's interpreter runs it, so it needs
only the standard library and numpy (any version from 1.20 on) and must run on Python 3.8+;
it never imports tritonlite. The server imports this file too, for the message framing below,
so both ends share one definition of the protocol.

Messages, each way: ``<u32 JSON length><u64 binary length><JSON><binary>``. The JSON says what
the message is; tensors travel in the binary part as raw C-order bytes (BYTES tensors as
Triton's length-prefixed elements), each described by ``{"name", "dtype", "shape", "offset",
"nbytes"}`` (``dtype`` is numpy's ``dtype.str``, ``"BYTES"`` for BYTES). The conversation:

- worker: ``{"op": "hello", "pid", "python", "numpy"}`` once it started;
- server: ``{"op": "init", "model_path", "version_dir", "model_dir", "args"}`` -> ``{"ok"}`` or
  ``{"error"}`` (the text of the model's exception, Triton's ``Type: message`` + frames);
- server: ``{"op": "execute", "requests": [...]}`` + input tensors -> ``{"responses": [...]}``
  + output tensors, or ``{"error", "code", "fatal"}`` when the whole batch failed;
- server: ``{"op": "finalize"}`` -> ``{"ok"}``, then the worker exits. A closed socket (the
  server went away) ends the worker too, after ``finalize``.

It stays one file (over 500 lines) because it is copied into nothing and imported by path: the
environment's interpreter runs this very file, with no tritonlite package to import helpers from.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from typing import Any

import numpy as np

_HEAD = struct.Struct("<IQ")
_ALIGN = 64  # tensors start on 64-byte boundaries of the binary part
_PB_UTILS_FILE = "env_pb_utils.py"
_MODEL_CONFIG_FILE = "<tritonlite ModelConfig>"


class ChannelClosed(Exception):
    """The other end closed the socket (or it broke) before a whole message arrived."""


# -- framing (shared with the server) ----------------------------------------------------------


def send_message(sock: socket.socket, meta: dict[str, Any], blobs: list[Any]) -> None:
    """Send one message: ``meta`` as JSON, then ``blobs`` (bytes-like, laid out by ``pack``)."""
    body = json.dumps(meta, separators=(",", ":")).encode("utf-8")
    size = sum(memoryview(b).nbytes for b in blobs)
    head = _HEAD.pack(len(body), size) + body
    if size < 65536:
        sock.sendall(b"".join([head, *[bytes(b) for b in blobs]]))
        return
    sock.sendall(head)
    for blob in blobs:
        sock.sendall(blob)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        try:
            k = sock.recv_into(view[got:], n - got)
        except (ConnectionError, OSError) as exc:
            raise ChannelClosed(str(exc)) from None
        if k == 0:
            raise ChannelClosed("end of stream")
        got += k
    return buf


def recv_message(sock: socket.socket) -> tuple[dict[str, Any], bytearray]:
    """One message: its JSON part and its (writable) binary part."""
    n_json, n_bin = _HEAD.unpack(bytes(_recv_exact(sock, _HEAD.size)))
    meta = json.loads(bytes(_recv_exact(sock, n_json)).decode("utf-8"))
    return meta, _recv_exact(sock, n_bin) if n_bin else bytearray()


class Packer:
    """Lays tensors out in a message's binary part (no copies of numeric arrays)."""

    def __init__(self) -> None:
        self.blobs: list[Any] = []
        self.size = 0

    def add(self, name: str, array: Any) -> dict[str, Any]:
        """Describe ``array`` as tensor ``name`` and queue its bytes; returns the description."""
        arr = np.asarray(array)
        shape = [int(d) for d in arr.shape]
        if arr.dtype.kind in ("O", "S", "U"):
            raw: Any = serialize_bytes(arr)
            dtype = "BYTES"
        elif arr.dtype.kind in "biufc":
            if not arr.dtype.isnative:
                arr = arr.astype(arr.dtype.newbyteorder("="))
            arr = np.ascontiguousarray(arr)
            raw = arr.reshape(-1).view(np.uint8).data
            dtype = arr.dtype.str
        else:
            raise TypeError(
                f"tensor '{name}' has numpy dtype {arr.dtype}, which cannot cross "
                "to or from an EXECUTION_ENV_PATH environment"
            )
        nbytes = memoryview(raw).nbytes
        desc = {"name": name, "dtype": dtype, "shape": shape, "offset": self.size, "nbytes": nbytes}
        self.blobs.append(raw)
        self.size += nbytes
        pad = -self.size % _ALIGN
        if pad:
            self.blobs.append(bytes(pad))
            self.size += pad
        return desc


def unpack(desc: dict[str, Any], buf: bytearray) -> Any:
    """The array ``desc`` describes, viewing ``buf`` (BYTES: an object array of ``bytes``)."""
    shape = tuple(int(d) for d in desc["shape"])
    start, nbytes = int(desc["offset"]), int(desc["nbytes"])
    if start < 0 or nbytes < 0 or start + nbytes > len(buf):
        raise ValueError(f"tensor '{desc['name']}' lies outside its message")
    if desc["dtype"] == "BYTES":
        items = deserialize_bytes(memoryview(buf)[start : start + nbytes])
        if len(items) != _count(shape):
            raise ValueError(
                f"tensor '{desc['name']}': {len(items)} BYTES elements for shape {list(shape)}"
            )
        return items.reshape(shape)
    dtype = np.dtype(desc["dtype"])
    count = _count(shape)
    if count * dtype.itemsize != nbytes:
        raise ValueError(
            f"tensor '{desc['name']}': {nbytes} bytes for shape {list(shape)} of {dtype}"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=start).reshape(shape)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def serialize_bytes(arr: Any) -> bytes:
    """Triton's BYTES layout: each element (C order) as ``<u32 length><bytes>``."""
    chunks = []
    for item in np.asarray(arr).reshape(-1).tolist():
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        chunks.append(struct.pack("<I", len(raw)))
        chunks.append(raw)
    return b"".join(chunks)


def deserialize_bytes(buf: Any) -> Any:
    """The inverse of ``serialize_bytes``: a 1-D object array of ``bytes``."""
    view = memoryview(buf).cast("B")
    items = []
    offset = 0
    while offset < len(view):
        if offset + 4 > len(view):
            raise ValueError("truncated BYTES element length")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise ValueError("truncated BYTES element")
        items.append(bytes(view[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# -- the worker --------------------------------------------------------------------------------


def describe(exc: BaseException) -> str:
    """``Type: message`` plus the model's frames, innermost first (Triton's stub format)."""
    import asyncio
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    hidden = (here, os.path.dirname(asyncio.__file__), "<frozen", _MODEL_CONFIG_FILE)
    text = f"{type(exc).__name__}: {exc}"
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(hidden)
    ]
    if frames:
        text += "\n\nAt:\n" + "".join(
            f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames)
        )
    return text


class Worker:
    """One model instance: the model object and the pb_utils stand-in it imported."""

    def __init__(self, sock: socket.socket, pb: Any) -> None:
        import threading

        self.sock = sock
        self.pb = pb
        self.model: Any = None
        self.loop: Any = None
        self.background: Any = None  # the event loop of a decoupled ``async def execute``
        self.name = ""
        self.decoupled = False
        self.send_lock = threading.Lock()  # a decoupled model sends from any thread
        self.inbox: Any = None
        self.pending: dict[int, Any] = {}  # BLS call id -> the queue its answers go to
        self.pending_lock = threading.Lock()
        self.bls_ids: Any = None
        import queue

        self.inbox = queue.Queue()
        pb._bls = self.bls

    def _read(self) -> None:
        """Every message from the server: answers to BLS calls go to their caller (which may
        be the model, blocked in ``execute``), the rest to the main loop."""
        while True:
            try:
                message = recv_message(self.sock)
            except ChannelClosed:
                break
            if message[0].get("op") == "bls_reply":
                with self.pending_lock:
                    waiting = self.pending.get(message[0]["id"])
                if waiting is not None:
                    waiting.put(message)
            else:
                self.inbox.put(message)
        self.inbox.put(None)
        with self.pending_lock:
            for waiting in self.pending.values():
                waiting.put(None)

    def _expect(self) -> tuple[int, Any]:
        """A new call id and the queue the server's answers to it will land in."""
        import itertools
        import queue

        with self.pending_lock:
            if self.bls_ids is None:
                self.bls_ids = itertools.count(1)
            call_id = next(self.bls_ids)
            waiting: Any = queue.Queue()
            self.pending[call_id] = waiting
        return call_id, waiting

    def cancelled(self, batch: int, index: int) -> bool:
        """Whether the client cancelled request ``index`` of ``batch`` (asks the server)."""
        call_id, waiting = self._expect()
        try:
            self._send({"op": "is_cancelled", "id": call_id, "batch": batch, "index": index}, [])
            message = waiting.get()
            return message is not None and bool(message[0].get("cancelled"))
        finally:
            with self.pending_lock:
                self.pending.pop(call_id, None)

    def bls(self, request: Any, decoupled: bool) -> Any:
        """``InferenceRequest.exec``: the server runs the request through its core."""

        pb = self.pb
        call_id, waiting = self._expect()
        packer = Packer()
        inputs = [packer.add(t.name(), t._array) for t in request._inputs]
        parameters = request._parameters
        self._send(
            {
                "op": "bls",
                "id": call_id,
                "decoupled": decoupled,
                "request": {
                    "model_name": request._model_name,
                    "model_version": request._model_version,
                    "request_id": request._id,
                    "correlation_id": request._correlation_id,
                    "flags": request._flags,
                    "timeout": request._timeout,
                    "requested": sorted(request._requested),
                    "parameters": parameters,
                    "inputs": inputs,
                },
            },
            packer.blobs,
        )

        def answers() -> Any:
            try:
                while True:
                    message = waiting.get()
                    if message is None:
                        raise pb.TritonModelException("the server went away during a BLS call")
                    meta, buf = message
                    if "raise" in meta:
                        raise pb.TritonModelException(meta["raise"])
                    if meta.get("response") is not None:
                        yield _unpack_response(pb, meta["response"], buf)
                    if meta.get("done"):
                        return
            finally:
                with self.pending_lock:
                    self.pending.pop(call_id, None)

        if decoupled:
            return answers()
        responses = list(answers())
        return responses[0] if responses else pb.InferenceResponse()

    def _send(self, meta: dict[str, Any], blobs: list[Any]) -> None:
        with self.send_lock:
            send_message(self.sock, meta, blobs)

    def serve(self) -> int:
        import threading

        self._send(
            {
                "op": "hello",
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "numpy": np.__version__,
            },
            [],
        )
        threading.Thread(target=self._read, name="reader", daemon=True).start()
        while True:
            message = self.inbox.get()
            if message is None:  # the server closed the socket
                self.finalize()
                return 0
            meta, buf = message
            op = meta.get("op")
            if op == "init":
                self._send(self.initialize(meta), [])
            elif op == "auto_complete":
                self._send(self.auto_complete(meta), [])
            elif op == "execute":
                reply, blobs, fatal = self.execute(meta, buf)
                self._send(reply, blobs)
                if fatal:
                    return 3
            elif op == "finalize":
                self.finalize()
                self._send({"ok": True}, [])
                return 0
            else:
                self._send({"error": f"unknown operation {op!r}"}, [])

    def _import(self, meta: dict[str, Any]) -> Any:
        """Import model.py the way Triton's stub does; exceptions from the model propagate."""
        import importlib.util
        import types

        if not hasattr(self.pb, "ModelConfig"):
            _install_model_config(self.pb, meta["model_config_source"])
        version_dir, model_dir = meta["version_dir"], meta["model_dir"]
        self.pb._model_dir = version_dir
        for d in (version_dir, model_dir):  # Triton's stub appends both, in this order
            if d not in sys.path:
                sys.path.append(d)
        path = meta["model_path"]
        stem = os.path.basename(path).rsplit(".", 1)[0]
        package = types.ModuleType("_tritonlite_model")
        package.__path__ = [version_dir]
        sys.modules["_tritonlite_model"] = package
        name = f"_tritonlite_model.{stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import '{path}'")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def initialize(self, meta: dict[str, Any]) -> dict[str, Any]:
        args = meta["args"]
        self.name = args["model_instance_name"]
        self.decoupled = bool(meta.get("decoupled"))
        try:
            module = self._import(meta)
            cls = getattr(module, "TritonPythonModel", None)
            if cls is None:
                return {
                    "error": f"AttributeError: module '{module.__name__}' has no attribute "
                    "'TritonPythonModel'"
                }
            self.model = cls()
            init = getattr(self.model, "initialize", None)
            if init is not None:
                self._await(init(args))
        except Exception as exc:
            return {"error": describe(exc)}
        return {"ok": True}

    def auto_complete(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``auto_complete_config`` over the config as /config renders it: the dict it returns,
        ``None`` when the model has none, or the error."""
        pb = self.pb
        try:
            module = self._import(meta)
            fn = getattr(getattr(module, "TritonPythonModel", None), "auto_complete_config", None)
            if fn is None:
                return {"config": None}
            config = pb.ModelConfig(meta["config"])
            result = fn(config)
        except Exception as exc:
            return {"error": describe(exc)}
        if not isinstance(result, pb.ModelConfig):
            name = json.loads(meta["config"]).get("name", "")
            return {
                "error": f"auto_complete_config function in model '{name}' must return a "
                "valid pb.ModelConfig object."
            }
        return {"config": result.as_dict()}

    def _await(self, ret: Any) -> Any:
        import inspect

        if not inspect.iscoroutine(ret):
            return ret
        if self.loop is None:
            import asyncio

            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
        return self.loop.run_until_complete(ret)

    def execute(
        self, meta: dict[str, Any], buf: bytearray
    ) -> tuple[dict[str, Any], list[Any], bool]:
        pb = self.pb
        core = pb._core  # pb_core: the rules for what execute may return
        batch = []
        for r in meta["requests"]:
            inputs = [pb.Tensor._of_input(d["name"], unpack(d, buf)) for d in r["inputs"]]
            batch.append(pb.InferenceRequest._of_server(r, inputs))
        if self.decoupled:
            for index, req in enumerate(batch):
                req._sender = pb.InferenceResponseSender(
                    True,
                    self._deliverer(meta["batch"], index, req.requested_output_names()),
                    self._asker(meta["batch"], index),
                )
        try:
            fn = core.execute_function(self.model, self.name)
            if self.decoupled:
                ret = fn(batch)
                if _is_coroutine(ret):
                    self._in_background(ret, meta["batch"], batch)
                elif ret is not None:
                    raise core.decoupled_returned(self.name)
                return {"done": True}, [], False
            ret = self._await(fn(batch))
            return self._responses(batch, ret)
        except (SystemExit, MemoryError) as exc:
            return (
                {"error": describe(exc), "code": "INTERNAL", "fatal": True, "exiting": True},
                [],
                True,
            )
        except Exception as exc:
            if self.decoupled:  # the server ends each request still open with this error
                for req in batch:
                    req.get_response_sender()._close()
            text, unsupported = core.execute_failure(exc, describe)
            fatal = False
            ready = getattr(self.model, "is_ready", None)
            if ready is not None:
                try:
                    fatal = self._await(ready()) is not True
                except Exception:
                    fatal = True
            return (
                {
                    "error": text,
                    "code": "UNSUPPORTED" if unsupported else "INTERNAL",
                    "fatal": fatal,
                },
                [],
                False,
            )

    def _responses(self, batch: list[Any], ret: Any) -> tuple[dict[str, Any], list[Any], bool]:
        core = self.pb._core
        packer = Packer()
        out: list[dict[str, Any]] = []
        for req, resp in zip(batch, core.execute_results(ret, len(batch))):
            sent = req.get_response_sender().response
            if resp is not None:
                resp = core.returned_response(resp, sent)
            else:
                resp = sent
            if resp is None:
                out.append(
                    {
                        "error": [
                            "INTERNAL",
                            f"Failed to process the request(s) for model '{self.name}', message: "
                            + core.NO_RESPONSE,
                        ]
                    }
                )
                continue
            out.append(_pack_response(resp, req.requested_output_names(), packer))
        return {"responses": out}, packer.blobs, False

    def _deliverer(self, batch: int, index: int, wanted: set[str]) -> Any:
        """What a decoupled request's sender calls: each response goes to the server at once."""

        def deliver(resp: Any, final: bool) -> None:
            packer = Packer()
            body = None if resp is None else _pack_response(resp, wanted, packer)
            self._send(
                {"op": "send", "batch": batch, "index": index, "final": final, "response": body},
                packer.blobs,
            )

        return deliver

    def _asker(self, batch: int, index: int) -> Any:
        state = {"cancelled": False}

        def is_cancelled() -> bool:  # once cancelled, always: no need to ask again
            if not state["cancelled"]:
                state["cancelled"] = self.cancelled(batch, index)
            return state["cancelled"]

        return is_cancelled

    def _in_background(self, coro: Any, batch_id: int, batch: list[Any]) -> None:
        """A decoupled ``async def execute``: runs on a loop of its own, not awaited (as in
        Triton); if it fails, each request still open ends with the error."""
        import asyncio
        import threading

        if self.background is None:
            self.background = asyncio.new_event_loop()
            threading.Thread(
                target=self.background.run_forever, name="execute-loop", daemon=True
            ).start()
        future = asyncio.run_coroutine_threadsafe(coro, self.background)

        def done(f: Any) -> None:
            if f.cancelled() or f.exception() is None:
                return
            text = (
                f"Failed to process the request(s) for model '{self.name}', message: "
                f"{describe(f.exception())}"
            )
            for index, req in enumerate(batch):
                if req.get_response_sender()._close():
                    self._send(
                        {
                            "op": "send",
                            "batch": batch_id,
                            "index": index,
                            "final": True,
                            "response": {"error": ["INTERNAL", text]},
                            "failure": True,
                        },
                        [],
                    )

        future.add_done_callback(done)

    def finalize(self) -> None:
        model, self.model = self.model, None
        fn = getattr(model, "finalize", None)
        if fn is None:
            return
        try:
            self._await(fn())
        except Exception as exc:
            sys.stderr.write(f"finalize of model instance '{self.name}' failed: {describe(exc)}\n")


def _install_model_config(pb: Any, source: str) -> None:
    """``pb_utils.ModelConfig`` from the server's own class source (it needs only ``json``), so
    its checks and messages are the in-process ones."""
    import __future__

    namespace: dict[str, Any] = {"json": json, "Any": Any, "__name__": pb.__name__}
    code = compile(
        source,
        _MODEL_CONFIG_FILE,
        "exec",
        dont_inherit=True,
        flags=__future__.annotations.compiler_flag,
    )
    exec(code, namespace)
    pb.ModelConfig = namespace["ModelConfig"]


def _pack_response(resp: Any, wanted: set[str], packer: Packer) -> dict[str, Any]:
    """An ``InferenceResponse`` as the server reads it: its error, or its requested outputs
    (their bytes go to ``packer``) and parameters."""
    err = resp.error()
    if err is not None:
        return {"error": [err.code().name, err.message()]}
    tensors = [packer.add(t.name(), t._array) for t in resp.output_tensors() if t.name() in wanted]
    return {"outputs": tensors, "parameters": resp._parameters}


def _unpack_response(pb: Any, body: dict[str, Any], buf: bytearray) -> Any:
    """A BLS response from the server as the model's ``InferenceResponse``."""
    error = body.get("error")
    if error is not None:
        code = getattr(pb.TritonError, error[0], pb.TritonError.INTERNAL)
        return pb.InferenceResponse(error=pb.TritonError(error[1], code))
    tensors = [pb.Tensor._of_input(d["name"], unpack(d, buf)) for d in body["outputs"]]
    return pb.InferenceResponse(tensors, parameters=body.get("parameters") or None)


def _is_coroutine(value: Any) -> bool:
    import inspect

    return inspect.iscoroutine(value)


def _load_pb_utils() -> Any:
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _PB_UTILS_FILE)
    spec = importlib.util.spec_from_file_location("triton_python_backend_utils", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["triton_python_backend_utils"] = module
    spec.loader.exec_module(module)
    return module


def _watch_parent() -> None:
    """Exit when the server is gone, even while the model is busy (its socket may not tell)."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(4)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    import signal

    here = os.path.dirname(os.path.abspath(__file__))
    # Running this file put tritonlite's backends directory first on sys.path; a model's
    # ``import base`` must not find tritonlite's modules.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    # The server decides when this worker ends (a Ctrl-C or a SIGTERM sent to the server's
    # process group must not kill it under a draining server); it also ends with the server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _watch_parent()
    sock = socket.socket(fileno=int(argv[1]))
    worker = Worker(sock, _load_pb_utils())
    try:
        return worker.serve()
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
