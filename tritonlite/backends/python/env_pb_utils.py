"""``triton_python_backend_utils`` inside an ``EXECUTION_ENV_PATH`` worker (stdlib + numpy only).

``env_worker.py`` loads this file under Triton's module name before it imports the model,
so ``import triton_python_backend_utils as pb_utils`` works there as in Triton. It covers what a
model needs for ``initialize`` / ``execute`` / ``finalize``: ``Tensor``, ``InferenceRequest``,
``InferenceResponse``, the non-decoupled ``InferenceResponseSender``, ``TritonError``,
``TritonModelException``, ``Logger`` (lines go to the server's log), the config and tensor
lookups, the dtype tables and BYTES helpers, ``get_model_dir``. Names, signatures and messages
follow Triton's python_backend (and tritonlite's in-process ``backends/python/pb_utils.py``).

BLS (``InferenceRequest.exec`` / ``async_exec``) goes to the server, which runs it through its
core as it runs in-process models' BLS. Not available in a worker (each raises
``TritonModelException`` with code UNSUPPORTED): ``load_model`` / ``unload_model`` /
``is_model_ready``. Decoupled senders work, ``is_cancelled()`` included (it asks the server).
``MetricFamily`` metrics are kept in memory only.

Everything it shares with the in-process module (constants, dtype tables, errors, BYTES
helpers, lookups, ``Tensor``, ``InferenceResponse``, the sender, the request accessors,
``Logger``, ``MetricFamily``) is ``pb_core.py``, loaded by path beside this file; what is left
here is how this process reaches the server: BLS through the worker (``_bls``), ``Logger``
lines to stderr, the model directory the worker sets.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any


def _load_core() -> Any:
    """``pb_core.py`` beside this file, by path (tritonlite is not importable in the worker)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("pb_core.py")
    spec = importlib.util.spec_from_file_location("triton_python_backend_utils_core", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# Besides pb_core's public names (its ``__all__``), what this module uses of it.
_CORE_PRIVATE = ("_RequestFields", "_ErrorCode", "_parameters_json")

if TYPE_CHECKING:
    from tritonlite.backends.python.pb_core import (
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
        InferenceResponseSender,
        InferenceTrace,
        Tensor,
        TritonModelException,
        _ErrorCode,
        _parameters_json,
        _RequestFields,
    )
    from tritonlite.backends.python.pb_core import Logger as _CoreLogger
else:
    _core = _load_core()
    globals().update({n: getattr(_core, n) for n in (*_core.__all__, *_CORE_PRIVATE)})
    _CoreLogger = _core.Logger

_model_dir: str | None = None  # set by the worker before the model is imported
_bls: Any = None  # the worker's BLS call: (request, decoupled) -> response(s)


def _unsupported(what: str) -> TritonModelException:
    return TritonModelException(
        f"{what} is not supported for a model that runs in its own EXECUTION_ENV_PATH environment",
        _ErrorCode.UNSUPPORTED,
    )


# -- lookups ---------------------------------------------------------------------------------


def get_model_dir() -> str:
    if _model_dir is None:
        raise TritonModelException("get_model_dir() must be called from a Python model")
    return _model_dir


# -- requests (tensors, responses, senders: pb_core.py) ------------------------------------


class InferenceRequest(_RequestFields):
    """A request the model executes; constructing one for BLS works, ``exec`` does not here."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: Any = 0,
        inputs: Any = None,
        requested_output_names: Any = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: Any = None,
    ) -> None:
        self._id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs or [])
        self._requested = set(requested_output_names or [])
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._trace = trace or InferenceTrace()
        self._parameters = (
            parameters if isinstance(parameters, str) else _parameters_json(parameters)
        )
        self._sender = InferenceResponseSender()

    @classmethod
    def _of_server(cls, r: dict[str, Any], inputs: list[Tensor]) -> InferenceRequest:
        req = cls.__new__(cls)
        req._id = r["id"]
        req._correlation_id = r["correlation_id"]
        req._inputs = inputs
        req._requested = set(r["requested"])
        req._model_name = r["model_name"]
        req._model_version = r["model_version"]
        req._flags = r["flags"]
        req._timeout = r["timeout"]
        req._trace = InferenceTrace()
        req._parameters = r["parameters"]
        req._sender = InferenceResponseSender()
        return req

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def trace(self) -> InferenceTrace:
        return self._trace

    def requested_output_names(self) -> set[str]:
        return self._requested

    def get_response_sender(self) -> InferenceResponseSender:
        return self._sender

    def is_cancelled(self) -> bool:
        return self._sender.is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise _unsupported("Request rescheduling")

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` through the server and wait: an
        ``InferenceResponse`` (errors in it) or, with ``decoupled``, an iterator of them."""
        if _bls is None:
            raise _unsupported("BLS (InferenceRequest.exec) outside a model")
        return _bls(self, bool(decoupled))

    def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` without blocking the model's event loop: an awaitable."""
        import asyncio

        return asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


def load_model(model_name: str, config: str = "", files: Any = None) -> None:
    raise _unsupported("load_model")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise _unsupported("unload_model")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise _unsupported("is_model_ready")


# -- logging (metrics: pb_core.py, kept in memory) -------------------------------------------


class Logger(_CoreLogger):
    """Triton's model logger; lines go to the worker's stderr (pb_core's), which the server
    logs."""
