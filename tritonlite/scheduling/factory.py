"""Picks a model's scheduler from its config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritonlite.scheduling.base import Scheduler
from tritonlite.scheduling.direct import DirectScheduler

if TYPE_CHECKING:
    from tritonlite.core.model import Model


def make_scheduler(model: Model) -> Scheduler:
    return DirectScheduler(model)
