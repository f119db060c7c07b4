"""The running server core as model code in this process reaches it (BLS, model management).

``InferenceCore.start`` calls ``bind`` on the event loop before any model loads. From then on a
model's own thread (an instance thread, or the thread of an instance's private asyncio loop) can
hand a coroutine to the server's loop with ``call`` (blocking) or ``submit`` (a
``concurrent.futures.Future``). Both refuse to run on the server's loop thread: blocking it would
stop every front end; a Python model never runs there (its instances have their own threads),
so reaching that check is a bug in the caller, reported as INTERNAL.

The coroutine is created on the loop from a factory that receives the core, so a refused call
leaves no un-awaited coroutine behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tritonlite.contracts.errors import internal, unavailable

if TYPE_CHECKING:
    from tritonlite.core.core import InferenceCore

T = TypeVar("T")
Factory = Callable[["InferenceCore"], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class _Bound:
    core: InferenceCore
    loop: asyncio.AbstractEventLoop
    loop_thread: int


_bound: _Bound | None = None


def bind(core: InferenceCore) -> None:
    """Make ``core`` the one model code reaches; must run on the loop that serves it."""
    global _bound
    _bound = _Bound(core, asyncio.get_running_loop(), threading.get_ident())


def _target() -> _Bound:
    bound = _bound
    if bound is None or bound.loop.is_closed():
        raise unavailable("the inference server is not running in this process")
    if threading.get_ident() == bound.loop_thread:
        raise internal("a blocking call into the inference server was made on the server's "
                       "event loop thread; model code must run on its own thread")
    return bound


async def _invoke(factory: Factory[T], core: InferenceCore) -> T:
    return await factory(core)


def submit(factory: Factory[T]) -> concurrent.futures.Future[T]:
    """Run ``factory(core)`` on the server's loop; its result or exception lands in the future."""
    bound = _target()
    return asyncio.run_coroutine_threadsafe(_invoke(factory, bound.core), bound.loop)


def call(factory: Factory[T]) -> T:
    """``submit`` and wait for the result (or re-raise the exception) on this thread."""
    return submit(factory).result()


def is_loop_thread() -> bool:
    """True on the thread that runs the server's event loop (while that loop is open)."""
    bound = _bound
    return (bound is not None and threading.get_ident() == bound.loop_thread
            and not bound.loop.is_closed())
