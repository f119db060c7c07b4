"""In-process callers of the core's public API: model code (BLS, model management) that runs in
this process. This layer sits above the core, like a front end: python_backend's BLS calls the
same public API the HTTP server calls (Triton's ``ServerInferAsync``).

``InProcessServer`` is what the composition root hands ``InferenceCore`` (as the factory
``InProcessServer``); the core builds it on the loop at start and hands it, as the backends'
``ServerAccess``, to every model it loads (``ModelContext.server``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tritonlite.inprocess import bls
from tritonlite.inprocess.bridge import LoopBridge

if TYPE_CHECKING:
    import asyncio

    from tritonlite.backends.python import pb_utils
    from tritonlite.core.api import CoreAPI

T = TypeVar("T")


class InProcessServer:
    """The running server as model code on its own thread reaches it (``ServerAccess``)."""

    __slots__ = ("_bridge",)

    def __init__(self, core: CoreAPI) -> None:
        self._bridge = LoopBridge(core)  # on the loop, before any model loads

    def execute(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        return bls.execute(self._bridge, request, decoupled)

    def execute_async(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> asyncio.Future[Any]:
        return bls.execute_async(self._bridge, request, decoupled)

    def call(self, factory: Callable[[Any], Awaitable[T]]) -> T:
        return self._bridge.call(factory)

    def is_loop_thread(self) -> bool:
        return self._bridge.is_loop_thread()
