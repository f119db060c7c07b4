"""``LoopBridge``: model code on its own thread reaching the running server core (BLS, model
management).

``InferenceCore.start`` builds the in-process server (``InProcessServer``) on the event loop,
before any model loads, and with it one bridge. From then on a model's own thread (an instance
thread, or the thread of an instance's private asyncio loop) can hand a coroutine to the
server's loop with ``call`` (blocking) or ``submit`` (a ``concurrent.futures.Future``). Both
refuse to run on the server's loop thread: blocking it would stop every front end; a Python
model never runs there (its instances have their own threads), so reaching that check is a bug
in the caller, reported as INTERNAL.

The coroutine is created on the loop from a factory that receives the core, so a refused call
leaves no un-awaited coroutine behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from tritonlite.contracts.errors import internal, unavailable

if TYPE_CHECKING:
    from tritonlite.core.api import CoreAPI

T = TypeVar("T")
Factory = Callable[["CoreAPI"], Awaitable[T]]


class LoopBridge:
    """The core and the loop that serves it; must be made on that loop."""

    __slots__ = ("core", "loop", "loop_thread")

    def __init__(self, core: CoreAPI) -> None:
        self.core = core
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    def _check(self) -> None:
        if self.loop.is_closed():
            raise unavailable("the inference server is not running in this process")
        if threading.get_ident() == self.loop_thread:
            raise internal(
                "a blocking call into the inference server was made on the "
                "server's event loop thread; model code must run on its own thread"
            )

    def submit(self, factory: Factory[T]) -> concurrent.futures.Future[T]:
        """Run ``factory(core)`` on the server's loop; its result or exception lands in the
        future."""
        self._check()
        return asyncio.run_coroutine_threadsafe(_invoke(factory, self.core), self.loop)

    def call(self, factory: Factory[T]) -> T:
        """``submit`` and wait for the result (or re-raise the exception) on this thread."""
        return self.submit(factory).result()

    def is_loop_thread(self) -> bool:
        """True on the thread that runs the server's event loop (while that loop is open)."""
        return threading.get_ident() == self.loop_thread and not self.loop.is_closed()


async def _invoke(factory: Factory[T], core: CoreAPI) -> T:
    return await factory(core)
