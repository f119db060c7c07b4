"""Triton's scheduler test hooks, read from the environment once per scheduler.

Triton's own QA makes batch formation deterministic with two environment variables, and
tritonlite honours them the same way:

* ``TRITONSERVER_DELAY_SCHEDULER=N``: a dynamic batcher forms no batch until ``N`` requests are
  queued in it; the sequence batcher (``direct``) runs no batch until its sequence slots hold
  ``N`` requests together, across instances (``oldest``: each instance's batcher waits for
  ``N`` sequences with a request ready). Once the count is reached the scheduler runs normally
  for the rest of its life; nothing is dispatched or rejected while it waits. A sequence idle
  past its timeout is still ended, and (``direct``) that end counts as one request toward
  ``N``, as the end Triton's reaper queues in the sequence's slot does.
* ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` (only with the former, ``direct`` only): the
  sequence batcher also waits until the backlog holds ``M`` requests.

The values are read as C's ``atoi`` reads them (Triton's code): leading blanks, a sign, digits,
anything after ignored; no digits is 0, which turns the hook off. A negative value is converted
to a size, as in Triton: the scheduler then never starts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

log = logging.getLogger("tritonlite")

DELAY_ENV = "TRITONSERVER_DELAY_SCHEDULER"
BACKLOG_DELAY_ENV = "TRITONSERVER_BACKLOG_DELAY_SCHEDULER"

# What a negative count becomes as Triton's size_t: no queue ever holds that many.
NEVER = 1 << 64


def atoi(text: str) -> int:
    """C's ``atoi``: the leading integer of ``text`` (after blanks), 0 if there is none."""
    s = text.lstrip(" \t\n\v\f\r")
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    digits = 0
    while digits < len(s) and "0" <= s[digits] <= "9":
        digits += 1
    return sign * int(s[:digits]) if digits else 0


def count(name: str, environ: Mapping[str, str] | None = None) -> int:
    """The count ``name`` asks for: 0 when unset (no hook), ``NEVER`` when negative."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return 0
    value = atoi(raw)
    return NEVER if value < 0 else value


def announce(model: str, what: str, n: int) -> None:
    """Log once, at load, that ``model``'s scheduler is held by a test hook."""
    shown = "ever" if n >= NEVER else str(n)
    log.info("model '%s': scheduler delayed until %s %s (test hook)", model, shown, what)
