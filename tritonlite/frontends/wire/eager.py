"""Run a handler's coroutine right away, and hand it to a task only if it has to wait.

``begin(loop, coro)`` runs ``coro``'s first steps at once, in a copy of the current context
(what a task would run it in). A handler that answers without waiting -- a model that runs
inline, health, metadata -- then costs no task, no loop turn and no entry in asyncio's task
registry; one that waits on a future (or yields to the loop) goes on in a task that
``begin`` returns, as if it had started there. The wire layer calls it once a request is
complete, after the bytes that completed it were parsed (never from inside a parser's
callback). Python 3.12's eager task factory does the same for every task; this is the
per-request subset, on 3.11 too.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any


def begin(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]) -> Any:
    """The task that goes on with ``coro``, or None when it finished without waiting.

    What ``coro`` raises in its first steps propagates to the caller."""
    ctx = contextvars.copy_context()
    try:
        yielded = ctx.run(coro.send, None)
    except StopIteration:
        return None
    return loop.create_task(_resume(coro, yielded), context=ctx)


async def _resume(coro: Coroutine[Any, Any, None], yielded: Any) -> None:
    """Go on with ``coro``, which now waits on ``yielded`` (a future, or None for a bare
    yield to the loop). Cancelling this task cancels what ``coro`` waits on, as it would
    in a task of its own."""
    while True:
        try:
            if yielded is None:
                await asyncio.sleep(0)
            else:
                yielded._asyncio_future_blocking = False  # as a task's step leaves it
                await yielded
        except asyncio.CancelledError as exc:
            if yielded is None or not yielded.done():  # this task was cancelled: pass it on
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
                continue
        except BaseException:  # noqa: S110 -- ``coro`` takes the outcome from the future
            pass
        try:
            yielded = coro.send(None)
        except StopIteration:
            return
